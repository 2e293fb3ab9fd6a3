/*
 * Model shapes and parameter layout.
 *
 * GPT-2 parameters live in one contiguous fp32 array in llm.c's order
 * (train_gpt2.c's ParameterTensors), so an llm.c checkpoint is read straight
 * into it.  Per-layer tensors are stacked [L, ...] within each entry.
 */
#ifndef FERRY_MODEL_H
#define FERRY_MODEL_H

#include "ferry/ferry.h"
#include "ferry/backend.h"
#include "ferry/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_gpt2_config {
	int max_seq;      /* maxT: rows of the position embedding */
	int vocab;        /* V: real vocabulary size */
	int padded_vocab; /* Vp >= V: rows of the token embedding */
	int layers;       /* L */
	int heads;        /* NH; channels % heads == 0 */
	int channels;     /* C */
};

/* Parameter tensors, in llm.c checkpoint order. */
enum ferry_gpt2_param {
	FERRY_GPT2_WTE,      /* [Vp, C] token embedding, tied LM head */
	FERRY_GPT2_WPE,      /* [maxT, C] */
	FERRY_GPT2_LN1W,     /* [L, C] */
	FERRY_GPT2_LN1B,     /* [L, C] */
	FERRY_GPT2_QKVW,     /* [L, 3C, C]: rows 0..C-1 query, then key, value */
	FERRY_GPT2_QKVB,     /* [L, 3C] */
	FERRY_GPT2_ATTPROJW, /* [L, C, C] */
	FERRY_GPT2_ATTPROJB, /* [L, C] */
	FERRY_GPT2_LN2W,     /* [L, C] */
	FERRY_GPT2_LN2B,     /* [L, C] */
	FERRY_GPT2_FCW,      /* [L, 4C, C] */
	FERRY_GPT2_FCB,      /* [L, 4C] */
	FERRY_GPT2_FCPROJW,  /* [L, C, 4C] */
	FERRY_GPT2_FCPROJB,  /* [L, C] */
	FERRY_GPT2_LNFW,     /* [C] */
	FERRY_GPT2_LNFB,     /* [C] */
	FERRY_GPT2_NUM_PARAMS
};

/* Checks every field (positive sizes, Vp >= V, C % NH == 0, sizes that fit
 * in memory arithmetic); the message names the offending field. */
ferry_status ferry_gpt2_config_check(const struct ferry_gpt2_config *cfg)
	FERRY_MUST_CHECK;

/* Number of floats in each parameter tensor; returns the total. */
size_t ferry_gpt2_param_sizes(const struct ferry_gpt2_config *cfg,
			      size_t sizes[FERRY_GPT2_NUM_PARAMS]);

/* Human-readable tensor name ("wte", "ln1w", ...). */
const char *ferry_gpt2_param_name(enum ferry_gpt2_param p);

/* Vocabulary padded for the embedding table: up to a multiple of 128 above
 * 4096 (50257 -> 50304, as llm.c), else of 64 (257 -> 320). */
int ferry_pad_vocab(int vocab);

/* ---- a GPT-2 model on a backend ------------------------------------------------
 * Holds parameters, gradients, AdamW state and activations for batches of
 * up to B x T in the backend's device arena.  Calls are synchronous from the
 * caller's view (work runs on the backend's streams; results are ready when
 * a call returns). */
typedef struct ferry_gpt2 *ferry_gpt2_t;

struct ferry_adamw {
	float lr, beta1, beta2, eps, weight_decay;
	float grad_clip; /* clip the global gradient norm to this; 0 = off */
};

ferry_status ferry_gpt2_create(ferry_backend_t be, const struct ferry_gpt2_config *cfg,
			       int B, int T, ferry_gpt2_t *out) FERRY_MUST_CHECK;
/* ... with an activation policy and prefetch depth (NULL: everything on the
 * device).  Allocates exactly the buffers ferry_gpt2_plan lists. */
ferry_status ferry_gpt2_create_ex(ferry_backend_t be, const struct ferry_gpt2_config *cfg,
				  int B, int T, const struct ferry_exec_opts *opts,
				  ferry_gpt2_t *out) FERRY_MUST_CHECK;
/* The memory plan of ferry_gpt2_create_ex with the same arguments, without
 * allocating anything: fails the same way on a bad shape or policy. */
ferry_status ferry_gpt2_plan(const struct ferry_gpt2_config *cfg, int B, int T,
			     const struct ferry_exec_opts *opts, struct ferry_plan *plan)
	FERRY_MUST_CHECK;
void ferry_gpt2_free(ferry_gpt2_t m);
const struct ferry_gpt2_config *ferry_gpt2_config(ferry_gpt2_t m);
size_t ferry_gpt2_num_params(ferry_gpt2_t m);
/* The longest sequence a forward pass accepts: min(T created for, max_seq). */
int ferry_gpt2_max_seq_len(ferry_gpt2_t m);

/* GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
 * 1/sqrt(2L), zero biases, unit layernorm gains; deterministic in seed. */
ferry_status ferry_gpt2_init_random(ferry_gpt2_t m, uint64_t seed) FERRY_MUST_CHECK;

/* Copies between host arrays (n_params floats, llm.c order) and the device. */
ferry_status ferry_gpt2_set_params(ferry_gpt2_t m, const float *params) FERRY_MUST_CHECK;
ferry_status ferry_gpt2_get_params(ferry_gpt2_t m, float *params) FERRY_MUST_CHECK;
ferry_status ferry_gpt2_get_grads(ferry_gpt2_t m, float *grads) FERRY_MUST_CHECK;
ferry_status ferry_gpt2_set_opt_state(ferry_gpt2_t m, const float *mom, const float *var)
	FERRY_MUST_CHECK;
ferry_status ferry_gpt2_get_opt_state(ferry_gpt2_t m, float *mom, float *var) FERRY_MUST_CHECK;

/* Forward pass over inputs [B, T] (B, T within the created size).  With
 * targets, *loss gets the mean cross-entropy; tokens are checked against the
 * vocabulary and T against max_seq first. */
ferry_status ferry_gpt2_forward(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets,
				int B, int T, float *loss) FERRY_MUST_CHECK;
/* The mean loss of a batch without keeping anything for a backward pass
 * (validation, evaluation): offloaded tensors are not copied out. */
ferry_status ferry_gpt2_loss(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets,
			     int B, int T, float *loss) FERRY_MUST_CHECK;
/* After a forward pass: the next-token probabilities (V floats) at row
 * b * T + t. */
ferry_status ferry_gpt2_probs(ferry_gpt2_t m, int row, float *probs) FERRY_MUST_CHECK;

ferry_status ferry_gpt2_zero_grad(ferry_gpt2_t m) FERRY_MUST_CHECK;
/* Backward pass of the last forward (which must have had targets; each
 * forward allows one backward); gradients of the mean loss accumulate into
 * the gradient buffer. */
ferry_status ferry_gpt2_backward(ferry_gpt2_t m) FERRY_MUST_CHECK;
/* Clips by global norm and applies AdamW step t (>= 1); *grad_norm gets the
 * norm before clipping.  Weight decay applies to matrices only. */
ferry_status ferry_gpt2_update(ferry_gpt2_t m, const struct ferry_adamw *opt, int t,
			       float *grad_norm) FERRY_MUST_CHECK;

/* The model's FLOPs for one training step (forward + backward) at B x T,
 * without recomputation. */
double ferry_gpt2_step_flops(ferry_gpt2_t m, int B, int T);

#ifdef __cplusplus
}
#endif
#endif
