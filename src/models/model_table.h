/*
 * Internal: the model table (model_table.c): the declared models, found by
 * name or by the names their checkpoints use.  A configuration's meaning
 * (completion, parameter layout) is declared publicly in ferry/model.h and
 * defined there too.
 */
#ifndef FERRY_MODELS_MODEL_TABLE_H
#define FERRY_MODELS_MODEL_TABLE_H

#include "graph/model_decl.h"

/* The declaration of cfg->arch ("gpt2", "llama"; "" the first, the
 * default), or NULL. */
const struct ferry_model_decl *ferry_model_decl_find(const char *arch);

/* The i-th declaration, for 0 <= i < ferry_model_decl_count(), else NULL. */
int ferry_model_decl_count(void);
const struct ferry_model_decl *ferry_model_decl_at(int i);

/* The config.json families of the Hugging Face models, for the reader
 * (their count; out has room for ferry_model_decl_count()). */
int ferry_model_hf_families(const struct ferry_hf_family **out);

/* The first declaration kept in checkpoints of format f, or NULL. */
const struct ferry_model_decl *ferry_model_decl_of_format(enum ferry_ckpt_format f);

/* The Hugging Face model whose config.json says model_type (or, when
 * model_type is NULL, whose architecture is architecture), or NULL. */
const struct ferry_model_decl *ferry_model_decl_find_hf(const char *model_type, const char *architecture);

/* What ferry_model_hf_list gives of each model. */
enum ferry_hf_field {
	FERRY_HF_TITLE,        /* "Llama" */
	FERRY_HF_ARCHITECTURE, /* "LlamaForCausalLM" */
};

/* The models kept in Hugging Face checkpoints, for messages: each one's
 * field what, joined by " or ", into buf of n bytes (FERRY_MODEL_LIST_CHARS
 * holds them); returns buf. */
#define FERRY_MODEL_LIST_CHARS 256
const char *ferry_model_hf_list(enum ferry_hf_field what, char *buf, size_t n);

extern const struct ferry_model_decl ferry_gpt2_decl;
extern const struct ferry_model_decl ferry_llama_decl;
extern const struct ferry_model_decl ferry_qwen2_decl;
extern const struct ferry_model_decl ferry_mistral_decl;
extern const struct ferry_model_decl ferry_gemma2_decl;
extern const struct ferry_model_decl ferry_qwen3_decl;
extern const struct ferry_model_decl ferry_gemma3_decl;
extern const struct ferry_model_decl ferry_gemma4_decl;


#endif
