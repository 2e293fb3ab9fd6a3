/*
 * A layer is data: a short program of ops over named tensors.
 *
 * A model declares its repeated layer once (tensors with names and shapes,
 * ops with their input, output and weight slots).  From the op table the
 * engine derives which tensors the backward pass reads (the layer's
 * residuals); a policy then places each (src/plan/).
 */
#ifndef FERRY_GRAPH_LAYER_H
#define FERRY_GRAPH_LAYER_H

#include <stddef.h>
#include "ferry/ferry.h"
#include "graph/shape.h"
#include "ops/op.h"

#define FERRY_LAYER_MAX_TENSORS 32
#define FERRY_LAYER_MAX_OPS 32

struct ferry_tensor_decl {
	const char *name;
	struct ferry_shape shape; /* activations start with B, T */
};

/* A weight: the model's parameter tensor `param` (stacked over layers),
 * `block` views into the layer's slice, a view being what the op reads
 * (OC x C for a matrix product's matrix, OC for its bias, C for a norm's
 * gain).  GPT-2's fused qkvw [3C, C] is three views: query, key, value. */
struct ferry_weight_ref {
	int param; /* -1: none */
	int block;
};

/* Model constants an op takes as its scalar[0] (an op taking several,
 * ferry_op_info's n_scalars, gets them consecutively from the one named). */
enum ferry_op_scalar {
	FERRY_SCALAR_NONE,
	FERRY_SCALAR_NORM_EPS,   /* RMSNorm's epsilon */
	FERRY_SCALAR_ROPE_THETA, /* rotary embedding base, then its scaling: */
	FERRY_SCALAR_ROPE_TYPE,  /* enum ferry_rope_type (ops/rope_freq.h) */
	FERRY_SCALAR_ROPE_FACTOR,
	FERRY_SCALAR_ROPE_LOW_FREQ_FACTOR,
	FERRY_SCALAR_ROPE_HIGH_FREQ_FACTOR,
	FERRY_SCALAR_ROPE_ORIGINAL_MAX_POS,
	FERRY_SCALAR_ATTN_WINDOW, /* attention's sliding window (keys per query, 0: none), */
	FERRY_SCALAR_ATTN_SCALE,  /* its score scale (0: 1/sqrt(HS)) and */
	FERRY_SCALAR_ATTN_SOFTCAP, /* its scores' soft cap (0: none) */
	FERRY_SCALAR_WINDOW_EVERY, /* which layers the window acts on: those whose */
	FERRY_SCALAR_WINDOW_FROM,  /* index is a multiple of this (0: every) and at least that */
	FERRY_SCALAR_EMBED_SCALE,  /* Gemma's embedding factor, sqrt(C) */
	FERRY_SCALAR_FINAL_SOFTCAP, /* the logits' soft cap (0: none) */
	FERRY_SCALAR_WINDOW_FULL_EVERY, /* ... and whose index + 1 is not a multiple of this
					   (Gemma 3: 6, every sixth layer full; 0: none) */
	FERRY_SCALAR_ROPE_LOCAL_THETA, /* the rotary base on windowed layers, unscaled
					  (Gemma 3's rope_local_base_freq; 0: the one) */
	FERRY_OP_SCALAR_COUNT
};

struct ferry_op_decl {
	enum ferry_op_kind kind;
	int out[FERRY_OP_MAX_OUT]; /* tensor indices, -1 for none */
	int in[FERRY_OP_MAX_IN];
	struct ferry_weight_ref w[FERRY_OP_MAX_W];
	enum ferry_op_scalar scalar;
	int tokens; /* encoder, softmax_xent: the int32 tensor they read */
	float k;    /* a constant of the declaration, the op's next scalar after
		       its model constants (rmsnorm: its gain offset, Gemma's 1) */
};

struct ferry_layer_decl {
	const char *model;
	int n_tensors;
	struct ferry_tensor_decl tensors[FERRY_LAYER_MAX_TENSORS];
	int n_ops;
	struct ferry_op_decl ops[FERRY_LAYER_MAX_OPS];
	int input;  /* the layer's input tensor (decoder_layer_input) */
	int output; /* its output: the next layer's input */
};

/* Elements of tensor t at these dimensions (its shape is checked to fit
 * when the plan is made). */
size_t ferry_layer_tensor_numel(const struct ferry_layer_decl *decl, int t,
				const struct ferry_dims *dims);

/* Whether tensor t is a statistic (an output without a gradient: norm
 * statistics, attention's log-sum-exp, per-row losses): statistics are fp32
 * whatever the activation type. */
bool ferry_layer_tensor_is_stat(const struct ferry_layer_decl *decl, int t);

/* The sizes and constants of op o's forward call at these dimensions:
 * kind, B, T, C (row width of its first input, else of its first output),
 * OC (row width of its first output), NH (for a rotary embedding: the heads
 * of its tensor, C / HS), NKV, V, Vp, n (elements of its first output) and
 * scalar[0..) from scalars[] (indexed by enum ferry_op_scalar), then the
 * op's own k.  layer: the stack layer it runs in (-1: a stage, or none in
 * particular), which decides whether the attention's window acts there.
 * Pointers are left NULL. */
void ferry_op_call_shape(const struct ferry_layer_decl *decl, int o, const struct ferry_dims *dims,
			 const float *scalars, int layer, struct ferry_op_call *c);

/* Whether the attention window acts on layer l under these model
 * constants (FERRY_SCALAR_WINDOW_EVERY, _FROM and _FULL_EVERY). */
bool ferry_window_at_layer(const float *scalars, int l);

/* Elements of one view of weight slot `slot` of a call (see
 * ferry_weight_ref): OC x C for a matrix product's matrix, else OC. */
size_t ferry_op_weight_view(const struct ferry_op_call *c, int slot);

/* Bit t set: tensor t is read by some op's backward pass. */
unsigned ferry_layer_residuals(const struct ferry_layer_decl *decl);

/* Bit t set: tensor t has a gradient (it is the layer input or an output
 * that is not a statistic). */
unsigned ferry_layer_differentiable(const struct ferry_layer_decl *decl);

/* The op producing tensor t, or -1 for the layer input. */
int ferry_layer_producer(const struct ferry_layer_decl *decl, int t);

/* Checks indices and that every tensor has exactly one producer (the input
 * none); the message names the op and slot. */
ferry_status ferry_layer_decl_check(const struct ferry_layer_decl *decl) FERRY_MUST_CHECK;

#endif
