/*
 * A layer is data: a short program of ops over named tensors.
 *
 * A model declares its repeated layer once (tensors with names and shapes,
 * ops with their input, output and weight slots).  The executor derives from
 * the op table which tensors the backward pass reads (the layer's residuals),
 * stores those per layer, keeps the rest in one shared workspace, and runs
 * forward over the stack of layers and backward in reverse.
 */
#ifndef FERRY_GRAPH_LAYER_H
#define FERRY_GRAPH_LAYER_H

#include <stddef.h>
#include "ferry/backend.h"
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

/* Where the executor finds a layer's weights and weight gradients:
 * parameter p of layer l starts at base[p] + l * layer_stride[p] floats. */
struct ferry_weight_table {
	float *const *base;
	float *const *grad_base;
	const size_t *layer_stride;
};

size_t ferry_tensor_floats(enum ferry_tensor_shape shape, const struct ferry_layer_dims *d);

/* Bit t set: tensor t is read by the layer's backward pass. */
unsigned ferry_layer_residuals(const struct ferry_layer_decl *decl);

/* Checks indices and that every tensor has exactly one producer (the input
 * none); the message names the op and slot. */
ferry_status ferry_layer_decl_check(const struct ferry_layer_decl *decl) FERRY_MUST_CHECK;

struct ferry_layer_exec;

/* Allocates activation storage (residuals per layer, the rest shared) and
 * gradient workspace on the device, for batches of up to B x T. */
ferry_status ferry_layer_exec_create(ferry_backend_t be, const struct ferry_layer_decl *decl,
				     const struct ferry_layer_dims *dims,
				     const struct ferry_weight_table *weights,
				     struct ferry_layer_exec **out) FERRY_MUST_CHECK;
void ferry_layer_exec_free(struct ferry_layer_exec *ex);

/* The stack's input (layer 0's input tensor: the prologue writes it) and
 * output (layer L-1's output: the epilogue reads it), and the gradient
 * buffers for them: the epilogue writes d(output), the prologue reads
 * d(input) after backward. */
float *ferry_layer_exec_input(struct ferry_layer_exec *ex);
float *ferry_layer_exec_output(struct ferry_layer_exec *ex);
float *ferry_layer_exec_output_grad(struct ferry_layer_exec *ex);
const float *ferry_layer_exec_input_grad(struct ferry_layer_exec *ex);

/* Enqueues the forward pass of all layers on stream s, for a batch B x T no
 * larger than the one it was created for. */
ferry_status ferry_layer_exec_forward(struct ferry_layer_exec *ex, ferry_stream_t s, int B,
				      int T) FERRY_MUST_CHECK;
/* Enqueues the backward pass; weight gradients accumulate into grad_base. */
ferry_status ferry_layer_exec_backward(struct ferry_layer_exec *ex, ferry_stream_t s, int B,
				       int T) FERRY_MUST_CHECK;

/* Bytes of device memory the executor holds. */
size_t ferry_layer_exec_device_bytes(const struct ferry_layer_exec *ex);

#endif
