/*
 * The layers of JAX's host-offloading tutorial networks ("JAX Memories and
 * Host Offloading"), declared as a model's are: named tensors and the ops
 * between them.  Their executors (a prologue, the epilogue's loss, SGD or
 * Adam) are exec/tutorial.c and exec/tutorial_adam.c.
 */
#include "models/tutorial_nets.h"

enum { X, Y, OUT, N_TENSORS };

const struct ferry_layer_decl ferry_tutorial_layer_decl = {
	.model = "tutorial",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "x", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
		[Y] = { "y", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_FFN } } },
		[OUT] = { "layer_output", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
	},
	.n_ops = 2,
	.ops = {
		{ FERRY_OP_MATMUL, { Y, -1, -1 }, { X, -1, -1 }, { { FERRY_TUTORIAL_W1, 0 }, { -1, 0 } } },
		{ FERRY_OP_MATMUL, { OUT, -1, -1 }, { Y, -1, -1 }, { { FERRY_TUTORIAL_W2, 0 }, { -1, 0 } } },
	},
	.input = X,
	.output = OUT,
};

/* The third example's layer; tensors numbered as above. */
const struct ferry_layer_decl ferry_tutorial_adam_layer_decl = {
	.model = "tutorial_adam",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "x", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
		[Y] = { "y", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
		[OUT] = { "layer_output", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
	},
	.n_ops = 2,
	.ops = {
		{ FERRY_OP_MATMUL, { Y, -1, -1 }, { X, -1, -1 }, { { 0, 0 }, { -1, 0 } } },
		{ FERRY_OP_GELU, { OUT, -1, -1 }, { Y, -1, -1 }, { { -1, 0 }, { -1, 0 } } },
	},
	.input = X,
	.output = OUT,
};
