/*
 * The network of JAX's host-offloading tutorial ("JAX Memories and Host
 * Offloading", activation offloading): L layers of x @ w1 @ w2 over a
 * rows x channels input, hidden width 4 x channels, loss = sum of the last
 * layer's output, gradients with respect to w1 and w2.  The layer input is
 * named "x" as in the tutorial's checkpoint_name(x, "x"); the hidden
 * product is "y", the layer output "layer_output".
 *
 * It proves the engine is general (a second declared model) and lets ferry's
 * memory analysis be set beside the figures the tutorial reports for JAX.
 */
#ifndef FERRY_TUTORIAL_H
#define FERRY_TUTORIAL_H

#include "ferry/backend.h"
#include "ferry/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_tutorial_config {
	int layers;   /* 10 in the tutorial */
	int rows;     /* 256 */
	int channels; /* 256; the hidden width is 4 x channels = 1024 */
	bool train;   /* false: a gradient computation (jax.grad), weights are
			 arguments and gradients outputs; true: a training step
			 (SGD in place), weights donated, gradients temp */
};

typedef struct ferry_tutorial *ferry_tutorial_t;

ferry_status ferry_tutorial_plan(const struct ferry_tutorial_config *cfg,
				 const struct ferry_exec_opts *opts, struct ferry_plan *plan)
	FERRY_MUST_CHECK;
ferry_status ferry_tutorial_create(ferry_backend_t be, const struct ferry_tutorial_config *cfg,
				   const struct ferry_exec_opts *opts, ferry_tutorial_t *out)
	FERRY_MUST_CHECK;
void ferry_tutorial_free(ferry_tutorial_t t);

/* Floats in w1 (= in w2): layers x 4C x C. */
size_t ferry_tutorial_weight_floats(const struct ferry_tutorial_config *cfg);

/* Copies weights (w1 [L, 4C, C], w2 [L, C, 4C], stored as matrices applied
 * transposed: y = x @ w1[l]^T) and the input [rows, C] to the device. */
ferry_status ferry_tutorial_set(ferry_tutorial_t t, const float *w1, const float *w2,
				const float *x) FERRY_MUST_CHECK;
/* Forward and backward: *loss = sum(output); gradients overwritten. */
ferry_status ferry_tutorial_grad(ferry_tutorial_t t, double *loss) FERRY_MUST_CHECK;
ferry_status ferry_tutorial_get_grads(ferry_tutorial_t t, float *dw1, float *dw2)
	FERRY_MUST_CHECK;
ferry_status ferry_tutorial_get_weights(ferry_tutorial_t t, float *w1, float *w2)
	FERRY_MUST_CHECK;
/* w -= lr * grad, in place. */
ferry_status ferry_tutorial_sgd(ferry_tutorial_t t, float lr) FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
