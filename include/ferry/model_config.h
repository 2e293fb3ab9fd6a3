/*
 * A model's configuration: its shape, the parameter tensors it declares and
 * where each lives in the one fp32 parameter array (stacked per layer,
 * [L, ...]; llm.c's layout for GPT-2).  Read by every layer that sizes
 * things, below the model that runs (ferry/model.h).
 */
#ifndef FERRY_MODEL_CONFIG_H
#define FERRY_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a model's name, with its NUL. */
#define FERRY_MODEL_ARCH_CHARS 16

/* How a rotary model scales its frequencies (config.json's rope_scaling,
 * transformers' rope_type): none; linear (every frequency divided by
 * factor, i.e. positions by factor); llama3 (Llama 3.1's: frequencies
 * whose wavelength exceeds original_max_pos / low_freq_factor divided by
 * factor, those below original_max_pos / high_freq_factor kept, those
 * between interpolated). */
enum ferry_rope_scaling_type {
	FERRY_ROPE_SCALING_NONE = 0,
	FERRY_ROPE_SCALING_LINEAR = 1,
	FERRY_ROPE_SCALING_LLAMA3 = 2,
};

struct ferry_rope_scaling {
	int type;               /* enum ferry_rope_scaling_type */
	float factor;           /* linear, llama3: > 0 */
	float low_freq_factor;  /* llama3: > 0 */
	float high_freq_factor; /* llama3: > low_freq_factor */
	int original_max_pos;   /* llama3: the context the model was pretrained
				   with (original_max_position_embeddings) */
};

struct ferry_model_config {
	char arch[FERRY_MODEL_ARCH_CHARS]; /* "gpt2" or "llama" */
	int max_seq;      /* longest sequence (GPT-2: rows of the position table) */
	int vocab;        /* V: real vocabulary size */
	int padded_vocab; /* Vp >= V: rows of the token embedding (0: derived) */
	int layers;       /* L */
	int heads;        /* NH */
	int kv_heads;     /* key/value heads, dividing NH (0: = NH) */
	int channels;     /* C */
	int head_size;    /* 0: C / NH */
	int ffn;          /* MLP hidden width (0: GPT-2 4C; Llama must give it) */
	float norm_eps;   /* Llama's RMSNorm epsilon (0: 1e-5) */
	float rope_theta; /* Llama's rotary base (0: 10000) */
	int tie_embeddings; /* the LM head is the token embedding: 1 yes, -1 no,
			       0 the model's default (GPT-2 tied; Llama untied,
			       as Hugging Face's tie_word_embeddings) */
	struct ferry_rope_scaling rope_scaling; /* all 0: plain RoPE */
	int sliding_window; /* attention's window (Mistral): query t sees keys
			       t - W < t2 <= t; 0: every earlier key.  Only a
			       model whose attention takes it may set it */
	int window_layers_every; /* the window acts on the layers whose index is a
				    multiple of this (Gemma 2: 2, the even
				    layers; 0: the model's default, every layer
				    but in Gemma 2) */
	int window_layers_from;  /* ... and at least this (Qwen 2's
				    max_window_layers; 0: from the first) */
	int query_pre_attn_scalar; /* Gemma 2: scores are scaled by 1/sqrt(this)
				      (0: the head size); others: 0 */
	float attn_softcap;  /* Gemma 2: attention scores s become c tanh(s / c);
				0: the model's default (Gemma 2: 50), < 0: none */
	float final_softcap; /* Gemma 2: the logits likewise (0: its 30, < 0:
				none) */
	int window_full_every; /* Gemma 3: every this-th layer (index + 1 a
				  multiple) attends fully, the others through
				  the window (0: the model's default, none but
				  Gemma 3's 6) */
	float rope_local_theta; /* Gemma 3: the rotary base of the windowed
				   layers, unscaled (0: its 10000); rope_theta
				   and rope_scaling are the others' */
};

/* Fills cfg->arch's defaults for the derived fields left 0 and checks every
 * field (positive sizes, Vp >= V, divisibility, sizes that fit in memory
 * arithmetic); the message names the offending field.  An unknown arch is
 * refused with the list of models. */
ferry_status ferry_model_config_complete(struct ferry_model_config *cfg) FERRY_MUST_CHECK;

/* "gpt2, llama": every model, the default first. */
const char *ferry_model_arch_list(void);

/* The model called arch in prose ("GPT-2" for "gpt2", "Llama" for "llama");
 * arch itself when no model has that name. */
const char *ferry_model_title(const char *arch);

/* Vocabulary padded for the embedding table: up to a multiple of 128 above
 * 4096 (50257 -> 50304, as llm.c), else of 64 (257 -> 320). */
int ferry_pad_vocab(int vocab);

/* One parameter tensor of a (completed) config. */
struct ferry_param_info {
	const char *name;      /* "wte", "q_proj", ... */
	const char *hf_name;   /* Hugging Face name, "%d" = layer (NULL: none) */
	int layers;            /* 0: one tensor; L: stacked per layer */
	int ndim;              /* one layer's shape */
	int64_t shape[4];
	size_t layer_numel;    /* elements of one layer's slice (or the tensor) */
	size_t offset;         /* elements into the parameter array */
	size_t numel;          /* all layers */
	bool present;          /* false: tied to another tensor, no storage */
};

/* Number of parameter tensors of cfg's model; parameter array length. */
int ferry_model_param_tensors(const struct ferry_model_config *cfg);
size_t ferry_model_config_num_params(const struct ferry_model_config *cfg);
ferry_status ferry_model_param_info(const struct ferry_model_config *cfg, int i,
				    struct ferry_param_info *out) FERRY_MUST_CHECK;
/* Index of the parameter called name, or -1. */
int ferry_model_param_find(const struct ferry_model_config *cfg, const char *name);

#ifdef __cplusplus
}
#endif
#endif
