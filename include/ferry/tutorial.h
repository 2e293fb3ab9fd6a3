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

/*
 * The network of the tutorial's third example ("Optimizer state
 * offloading"): L layers of x = gelu(x @ w) (tanh approximation), w [C, C]
 * stored applied transposed as above, over a rows x C input; loss =
 * mean((output - input)^2) + l2 * sum of every w^2; a step clips the
 * gradients by their global norm (optax.clip_by_global_norm) and applies
 * Adam (optax.adam, no weight decay) in place.  The tutorial: 4 layers,
 * 7168 x 7168 everywhere, l2 0.001, clip 1.0, lr 0.1, betas 0.9, 0.999,
 * eps 1e-8.  opts->optimizer: FERRY_OPTIM_DEVICE (the moments on the
 * device) or FERRY_OPTIM_STREAM (in host memory, streamed through a
 * two-slot device ring in slices of at most 32 MiB); opts->policy places
 * x, y (= x @ w) and layer_output.
 */
struct ferry_tutorial_adam_config {
	int layers, rows, channels;
	float l2, clip;               /* clip 0: none */
	float lr, beta1, beta2, eps;
};

typedef struct ferry_tutorial_adam *ferry_tutorial_adam_t;

ferry_status ferry_tutorial_adam_plan(const struct ferry_tutorial_adam_config *cfg,
				      const struct ferry_exec_opts *opts, struct ferry_plan *plan)
	FERRY_MUST_CHECK;
ferry_status ferry_tutorial_adam_create(ferry_backend_t be, const struct ferry_tutorial_adam_config *cfg,
					const struct ferry_exec_opts *opts, ferry_tutorial_adam_t *out)
	FERRY_MUST_CHECK;
void ferry_tutorial_adam_free(ferry_tutorial_adam_t t);
/* Floats of w: layers x C x C. */
size_t ferry_tutorial_adam_weight_floats(const struct ferry_tutorial_adam_config *cfg);
/* Weights [L, C, C] and input [rows, C] to the device; moments to zero and
 * the step count to 0 (optax's init). */
ferry_status ferry_tutorial_adam_set(ferry_tutorial_adam_t t, const float *w, const float *x)
	FERRY_MUST_CHECK;
/* One step; *loss is the loss at the weights before it, *grad_norm the
 * global norm of its gradients (either may be NULL).  A norm that is not
 * finite is refused (FERRY_ERR_INVALID) before anything is updated. */
ferry_status ferry_tutorial_adam_step(ferry_tutorial_adam_t t, double *loss, double *grad_norm)
	FERRY_MUST_CHECK;
/* The weights, both moments and the last step's gradients (L2 term
 * included, before clipping); any may be NULL. */
ferry_status ferry_tutorial_adam_get(ferry_tutorial_adam_t t, float *w, float *mu, float *nu, float *dw)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
