/*
 * A layer is data: a short program of ops over named tensors.
 *
 * A model declares its repeated layer once (tensors with names and shapes,
 * ops with their input, output and weight slots).  From the op table the
 * engine derives which tensors the backward pass reads (the layer's
 * residuals); a policy then places each (src/offload/).
 */
#ifndef FERRY_GRAPH_LAYER_H
#define FERRY_GRAPH_LAYER_H

#include <stddef.h>
#include "ferry/ferry.h"
#include "ops/op.h"

#define FERRY_LAYER_MAX_TENSORS 32
#define FERRY_LAYER_MAX_OPS 32

/* Tensor sizes, in floats, in terms of the layer's dimensions. */
enum ferry_tensor_shape {
	FERRY_SHAPE_N_C,    /* [N, C] */
	FERRY_SHAPE_N_4C,   /* [N, 4C] */
	FERRY_SHAPE_N,      /* [N] (per-row statistics) */
	FERRY_SHAPE_B_NH_T, /* [B, NH, T] (per-head statistics) */
};

struct ferry_tensor_decl {
	const char *name;
	enum ferry_tensor_shape shape;
};

/* A weight: the model's parameter tensor `param` (stacked over layers),
 * starting `block` blocks of C rows into the layer's slice (for fused tensors
 * such as GPT-2's qkvw, whose query, key and value parts are separate
 * weights; for a vector such as a bias, C elements per block). */
struct ferry_weight_ref {
	int param; /* -1: none */
	int block;
};

struct ferry_op_decl {
	enum ferry_op_kind kind;
	int out[FERRY_OP_MAX_OUT]; /* tensor indices, -1 for none */
	int in[FERRY_OP_MAX_IN];
	struct ferry_weight_ref w[FERRY_OP_MAX_W];
	int in_mult, out_mult;     /* matmul: C_in = in_mult*C, OC = out_mult*C */
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

struct ferry_layer_dims {
	int B, T, C, NH, L;
};


size_t ferry_tensor_floats(enum ferry_tensor_shape shape, const struct ferry_layer_dims *d);

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
