/* Internal: the few jansson look-ups the tokenizer.json reader repeats. */
#ifndef FERRY_TOKENIZER_HF_JSON_H
#define FERRY_TOKENIZER_HF_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "tokenizer/hf_tokenizer.h"

/* The string at o[key], NULL when absent or not a string. */
static inline const char *hfj_str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* o[key] as a bool, def when absent or null. */
static inline bool hfj_bool(json_t *o, const char *key, bool def)
{
	json_t *v = json_object_get(o, key);

	return json_is_boolean(v) ? json_is_true(v) : def;
}

/* A tokenizer.json's normalizer, pre_tokenizer, decoder, post_processor
 * (NULL or JSON null: none), into t (hf_steps.c). */
ferry_status ferry_tok_parse_steps(struct ferry_hf_tokenizer *t, json_t *root,
			     const char *path) FERRY_MUST_CHECK;
void ferry_tok_free_steps(struct ferry_hf_tokenizer *t);

#endif
