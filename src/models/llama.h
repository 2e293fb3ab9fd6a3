/*
 * What the Llama family's declarations share (src/models/llama.c holds it):
 * Qwen 2 is Llama's program with biases on the query, key and value
 * projections, so it reuses Llama's prologue, epilogue, their roles and its
 * configuration check.
 */
#ifndef FERRY_MODELS_LLAMA_H
#define FERRY_MODELS_LLAMA_H

#include "models/model_table.h"

/* Where the shared prologue and epilogue find their weights: a family that
 * reuses them keeps Llama's parameter order and appends its own. */
#define FERRY_LLAMA_PARAM_EMBED 0
#define FERRY_LLAMA_PARAM_NORM 10
#define FERRY_LLAMA_PARAM_LM_HEAD 11
#define FERRY_LLAMA_N_PARAMS 12

extern const struct ferry_layer_decl ferry_llama_prologue, ferry_llama_epilogue;
extern const struct ferry_stage_tensor ferry_llama_prologue_roles[], ferry_llama_epilogue_roles[];

/* Llama's defaults and checks (kv heads, head size, MLP width, epsilon,
 * theta, rope scaling). */
ferry_status ferry_llama_config_check(struct ferry_model_config *cfg);

/* The rotary scaling alone: none, linear (factor) or llama3 (all four). */
ferry_status ferry_llama_rope_scaling_check(const struct ferry_rope_scaling *r);

#endif
