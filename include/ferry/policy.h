/*
 * Activation placement policies: for every named tensor of a layer, keep it
 * on the device, offload it to host memory after the forward pass (and bring
 * it back for the backward pass), or recompute it ("remat").
 *
 * The names and semantics are JAX's (jax.checkpoint_policies) and MaxText's
 * (remat_policy).  A policy only says what MAY be kept; the planner keeps a
 * tensor only if the backward pass (or a recomputation it needs) reads it,
 * as JAX's partial evaluation drops unused residuals.
 *
 * Spec strings (ferry_policy_parse):
 *   JAX        nothing_saveable | everything_saveable
 *              dots_saveable (= checkpoint_dots)
 *              dots_with_no_batch_dims_saveable (= checkpoint_dots_with_no_batch_dims)
 *              save_only_these_names(a, b, ...)
 *              save_and_offload_only_these_names([a, b], [c, d])   saved, then offloaded;
 *                also with JAX's keywords: names_which_can_be_saved=[...],
 *                names_which_can_be_offloaded=[...]
 *              offload_dot_with_no_batch_dims
 *   MaxText    full | minimal | minimal_offloaded | save_dot_except_mlpwi |
 *              save_dot_except_mlp | save_dot_with_context_except_mlp |
 *              save_qkv_proj | qkv_proj_offloaded | save_out_proj | minimal_flash
 *              custom:name=device|offload|remat,...   (unlisted names: remat)
 *
 * The layer input (the scan carry, "decoder_layer_input" in GPT-2) is kept on
 * the device whatever the policy says, unless the policy offloads it by name;
 * a policy that asks to recompute it is refused.
 */
#ifndef FERRY_POLICY_H
#define FERRY_POLICY_H

#include <stdbool.h>
#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_placement {
	FERRY_PLACE_REMAT = 0,   /* recompute in the backward pass */
	FERRY_PLACE_DEVICE = 1,  /* keep in device memory */
	FERRY_PLACE_OFFLOAD = 2, /* copy to host after forward, back for backward */
};

const char *ferry_placement_name(enum ferry_placement p); /* "remat", "device", "offload" */

/* What a policy may know of a layer's tensor. */
struct ferry_policy_tensor {
	const char *name;
	bool is_layer_input;   /* the scan carry */
	bool dot;              /* output of a matrix product without batch dimensions */
	bool batched_dot;      /* output of a batched product (attention's context and
				  its softmax statistics, which stand for the scores) */
};

struct ferry_policy;

/* Parses a spec; errors name the spec and what is wrong ("unknown policy
 * 'foo' (known: ...)", "name 'x' is both saved and offloaded", ...). */
ferry_status ferry_policy_parse(const char *spec, struct ferry_policy **out) FERRY_MUST_CHECK;
void ferry_policy_free(struct ferry_policy *p);
/* The spec as given (trimmed). */
const char *ferry_policy_spec(const struct ferry_policy *p);

/* Places each of a layer's n tensors.  Names the user wrote explicitly
 * (save_only_these_names, save_and_offload_only_these_names, custom) must
 * exist in the layer: an unknown one is an error listing the layer's names.
 * Names inside the MaxText presets that a model lacks (qkv_proj, mlpwi_0,
 * ...) are ignored, as in MaxText. */
ferry_status ferry_policy_place(const struct ferry_policy *p,
				const struct ferry_policy_tensor *tensors, int n,
				enum ferry_placement *out) FERRY_MUST_CHECK;

/* The named presets (everything but the parameterised forms), for listing
 * and for "which presets would fit". */
int ferry_policy_preset_count(void);
const char *ferry_policy_preset_name(int i);

#ifdef __cplusplus
}
#endif
#endif
