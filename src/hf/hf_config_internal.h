/*
 * Internal to config.json's reader and writer (hf_config.c): the JSON
 * helpers they share with hf_config_attn.c, which reads and writes the keys
 * that say how each layer attends (the sliding window and the layers it
 * acts on, Gemma 2's score scale and soft caps).
 */
#ifndef FERRY_HF_HF_CONFIG_INTERNAL_H
#define FERRY_HF_HF_CONFIG_INTERNAL_H

#include "ferry/safetensors.h"

#include <jansson.h>

/* The value of key, NULL when absent or null (transformers' None). */
json_t *ferry_hfc_get(json_t *obj, const char *key);

/* Describes a JSON value for a message: 4096, 4096.5, "x", true, ... */
const char *ferry_hfc_describe(json_t *j, char *buf, size_t n);

/* The attention keys of root into c, with the family's defaults: the
 * window (and, in a gated family, use_sliding_window and max_window_layers),
 * query_pre_attn_scalar and the soft caps. */
ferry_status ferry_hfc_read_attention(json_t *root, const char *path, const struct ferry_hf_family *f,
				      struct ferry_hf_config *c) FERRY_MUST_CHECK;

/* Whether key is one of the attention keys, and then (*st) whether the
 * family has it with value v, or why not; c has been read. */
bool ferry_hfc_attention_key(json_t *root, const char *path, const struct ferry_hf_family *f,
			     const struct ferry_hf_config *c, const char *key, json_t *v, ferry_status *st);

/* The writer's check of c's attention fields against the family
 * (FERRY_ERR_INVALID, naming the field). */
ferry_status ferry_hfc_check_attention(const struct ferry_hf_config *c, const struct ferry_hf_family *f,
				       const char *path) FERRY_MUST_CHECK;

/* The attention keys of c into root, as the family writes them; nonzero
 * on no memory. */
int ferry_hfc_set_attention(json_t *root, const struct ferry_hf_family *f, const struct ferry_hf_config *c);

/* Gemma 4's keys (hf_config_gemma4.c, families with gemma4_keys): whether
 * key is one, and then (*st) whether its value v is what ferry computes. */
bool ferry_hfc_gemma4_key(const char *path, const struct ferry_hf_family *f, const struct ferry_hf_config *c,
			  const char *key, json_t *v, ferry_status *st);

/* Gemma 4's keys whose absence means what ferry lacks (the class's
 * defaults): refused by name. */
ferry_status ferry_hfc_gemma4_required(json_t *root, const char *path, const struct ferry_hf_family *f,
				       const struct ferry_hf_config *c) FERRY_MUST_CHECK;

/* Gemma 4's keys of c into root (rope_parameters by layer type, the
 * features switched off); nonzero on no memory. */
int ferry_hfc_set_gemma4(json_t *root, const struct ferry_hf_family *f, const struct ferry_hf_config *c);

#endif
