/*
 * Hugging Face checkpoints: safetensors files and config.json.
 *
 * safetensors file: 8-byte little-endian unsigned N, then N bytes of JSON
 * (an object, starting with '{', padded with spaces), then the data section.
 * Each key of the JSON object names a tensor:
 *   "name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [b, e]}
 * where [b, e) are byte offsets into the data section, little-endian values
 * in row-major order; "__metadata__" is an optional string -> string map.
 * The tensors must cover the data section exactly, without holes or
 * overlaps (the format's rule, which the reference implementation enforces).
 *
 * A checkpoint directory holds either model.safetensors or
 * model.safetensors.index.json, whose "weight_map" maps each tensor name to
 * the shard file (in the same directory) that holds it.
 *
 * ferry reads and writes F32, BF16 and F16 tensors and converts them to and
 * from fp32: widening is exact; narrowing rounds to nearest, ties to even.
 */
#ifndef FERRY_SAFETENSORS_H
#define FERRY_SAFETENSORS_H

#include "ferry/ferry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_ST_MAX_DIMS 8

/* Element types ferry reads and writes.  A file holding any other
 * safetensors dtype (I64, F64, U8, F8_E4M3, ...) is refused at open. */
enum ferry_st_dtype {
	FERRY_ST_F32,
	FERRY_ST_BF16,
	FERRY_ST_F16,
};

/* "F32", "BF16", "F16" (the names in the file); "?" for other values. */
const char *ferry_st_dtype_name(enum ferry_st_dtype dtype);
/* Bytes per element: 4, 2, 2; 0 for other values. */
size_t ferry_st_dtype_size(enum ferry_st_dtype dtype);

/* The conversions the reader and writer use (bit patterns of bf16/fp16).
 * Widening is exact (fp16 subnormals, infinities, NaN payloads included).
 * Narrowing rounds to nearest, ties to even; too large becomes infinity;
 * NaN stays NaN (made quiet), the sign of zero is kept. */
float ferry_st_bf16_to_f32(uint16_t h);
uint16_t ferry_st_f32_to_bf16(float f);
float ferry_st_f16_to_f32(uint16_t h);
uint16_t ferry_st_f32_to_f16(float f);

/* ---- reader -------------------------------------------------------------- */

typedef struct ferry_safetensors *ferry_safetensors_t;

/* One tensor of an open checkpoint.  Owned by the handle: read-only, valid
 * until ferry_safetensors_close. */
struct ferry_st_tensor {
	const char *name;
	enum ferry_st_dtype dtype;
	int ndim;                         /* 0 (a scalar) .. FERRY_ST_MAX_DIMS */
	int64_t shape[FERRY_ST_MAX_DIMS]; /* shape[ndim..] are 0 */
	size_t numel;                     /* product of the shape (1 for a scalar) */
	size_t nbytes;                    /* numel * ferry_st_dtype_size(dtype) */
	const char *file;                 /* the file holding it */
	uint64_t offset;                  /* its first byte in that file */
};

/* Opens a checkpoint.  path is a .safetensors file, a
 * model.safetensors.index.json file, or a directory holding model.safetensors
 * (preferred, as transformers does) or model.safetensors.index.json and the
 * shards it names.  Every file is validated up front: header length and JSON,
 * each tensor's dtype, shape and offsets (consistent with the shape, inside
 * the data section, no overlaps or holes), names unique across shards, the
 * index consistent with the shards.  Errors name the file: FERRY_ERR_IO when
 * path cannot be opened or is not a regular file (a FIFO is refused before
 * it is opened), FERRY_ERR_FORMAT for a bad file, FERRY_ERR_NOMEM.  The handle
 * keeps each file open until ferry_safetensors_close.  *out is set on
 * success only. */
ferry_status ferry_safetensors_open(const char *path, ferry_safetensors_t *out)
	FERRY_MUST_CHECK;

/* Closes the files and frees the handle and its tensors; NULL is ok. */
void ferry_safetensors_close(ferry_safetensors_t st);

/* Number of tensors (all shards); 0 for NULL. */
int ferry_safetensors_count(ferry_safetensors_t st);

/* Tensor i, 0 <= i < count, in file order: shard by shard (shards in name
 * order), by position in the file.  NULL when i is out of range. */
const struct ferry_st_tensor *ferry_safetensors_tensor(ferry_safetensors_t st,
						       int i);

/* The tensor called name, or NULL. */
const struct ferry_st_tensor *ferry_safetensors_find(ferry_safetensors_t st,
						     const char *name);

/* A value of the files' "__metadata__" string map (e.g. "format" -> "pt"),
 * or NULL when absent; owned by the handle.  With several shards the first
 * shard (in name order) that has the key wins.  Non-string values are
 * ignored. */
const char *ferry_safetensors_metadata(ferry_safetensors_t st,
				       const char *key);

/* Reads tensor name into dst (numel floats, caller-allocated), converted to
 * fp32 (BF16 and F16 are widened exactly).  Its shape must equal
 * shape[0..ndim): "FILE: NAME has shape [64, 32], expected [64, 64]"
 * (FERRY_ERR_FORMAT); an unknown name: "NAME not found in PATH"
 * (FERRY_ERR_FORMAT); read errors FERRY_ERR_IO.  On failure dst's contents
 * are unspecified.  Safe to call from several threads on one handle. */
ferry_status ferry_safetensors_read_f32(ferry_safetensors_t st,
					const char *name, const int64_t *shape,
					int ndim, float *dst) FERRY_MUST_CHECK;

/* ---- writer -------------------------------------------------------------- */

/* One tensor to write: data holds numel fp32 values (NULL allowed when
 * numel is 0), converted to dtype on the way out.  name must be non-empty,
 * unique and not "__metadata__". */
struct ferry_st_write {
	const char *name;
	enum ferry_st_dtype dtype;
	int ndim;
	int64_t shape[FERRY_ST_MAX_DIMS];
	const float *data;
};

/* Writes the n tensors (n >= 0), in the given order and contiguous, to one
 * safetensors file.  metadata_format, when not NULL, is stored as
 * "__metadata__": {"format": metadata_format} ("pt" is what transformers
 * writes).  The header lists the tensors in the given order and is padded
 * with spaces to a multiple of 8 bytes.  Atomic: writes "PATH.tmp.<pid>",
 * fsyncs it, renames it over PATH and fsyncs the directory; on any failure
 * the temporary is removed and an existing PATH is left as it was.  Bad
 * arguments: FERRY_ERR_INVALID; FERRY_ERR_IO; FERRY_ERR_NOMEM. */
ferry_status ferry_safetensors_write(const char *path,
				     const struct ferry_st_write *t, int n,
				     const char *metadata_format)
	FERRY_MUST_CHECK;

/* ---- config.json --------------------------------------------------------- */

/* A family of Hugging Face configs (one transformers config class: LlamaConfig,
 * Qwen2Config): what config.json says it is, and its class's defaults for
 * keys a file leaves out.  ferry's model declarations give theirs; the reader
 * and writer take them as arguments (ferry_hf_config_read and _write use
 * every family ferry has). */
struct ferry_hf_family {
	const char *model_type;    /* "qwen2" */
	const char *architecture;  /* "Qwen2ForCausalLM" */
	const char *title;         /* in messages: "Qwen 2" */
	int vocab_size, hidden_size, intermediate_size, num_hidden_layers,
	    num_attention_heads, max_position_embeddings;
	int num_key_value_heads;   /* 0: num_attention_heads */
	int head_dim;              /* 0: hidden_size / num_attention_heads */
	double rope_theta, rms_norm_eps;
	bool tie_word_embeddings;
	const char *hidden_act;    /* its activation (NULL: "silu") */
	const char *act_key;       /* the key naming it (NULL: "hidden_act";
				      Gemma 2: "hidden_activation") */
	bool qkv_bias;             /* its q, k, v projections always carry a bias
				      (Qwen2): no attention_bias key */
	int sliding_window;        /* > 0: the family has a sliding_window, and
				      this is its default (null: none); 0: no
				      such field */
	bool gated_sliding_window; /* the window acts only with use_sliding_window
				      true, on layers from max_window_layers
				      (Qwen2); otherwise whenever set */
	int max_window_layers;     /* gated: max_window_layers' default */
	int window_layers_every;   /* the window acts on the layers whose index
				      is a multiple of this (Gemma 2: 2); 0: all */
	int sliding_window_pattern; /* ... but every this-th (index + 1 a
				      multiple: Gemma 3's 6) attends fully; 0: none */
	double rope_local_base_freq; /* > 0: the windowed layers turn by this
				      base, unscaled (Gemma 3), its default;
				      0: no such field */
	int query_pre_attn_scalar; /* > 0: the family scales scores by its
				      query_pre_attn_scalar (Gemma 2), this
				      default; 0: no such field */
	double attn_logit_softcapping, final_logit_softcapping; /* > 0: the
				      family soft-caps (Gemma 2), these
				      defaults (null: none); 0: no such fields */
	bool gemma4_keys;          /* Gemma 4's keys (per-layer inputs, shared
				      K/V, attention_k_eq_v, the MoE block,
				      global layers' own heads): each accepted
				      switched off, else refused by name
				      (hf_config_gemma4.c); rope_parameters by
				      layer type required, an absent final
				      cap none */
};

/* config.json's rope_scaling (rope_type "linear" or "llama3"; none: 0). */
enum ferry_hf_rope_type {
	FERRY_HF_ROPE_DEFAULT = 0,
	FERRY_HF_ROPE_LINEAR = 1,
	FERRY_HF_ROPE_LLAMA3 = 2,
};

/* The most ids config.json's eos_token_id may list. */
#define FERRY_HF_MAX_EOS 8

/* The fields of a Hugging Face config that ferry uses. */
struct ferry_hf_config {
	char model_type[32];           /* the family's: "llama", "qwen2" */
	int hidden_size;
	int intermediate_size;
	int num_attention_heads;
	int num_key_value_heads;
	int num_hidden_layers;
	int vocab_size;
	int max_position_embeddings;
	int head_dim;
	double rope_theta;
	double rms_norm_eps;
	bool tie_word_embeddings;
	char torch_dtype[16];          /* "float32", "bfloat16", "float16" */
	int rope_type;                 /* enum ferry_hf_rope_type; the rest
					  are 0 for the default */
	double rope_factor;            /* linear, llama3: factor */
	double rope_low_freq_factor;   /* llama3 */
	double rope_high_freq_factor;  /* llama3 */
	int rope_original_max_position_embeddings; /* llama3 */
	int sliding_window;            /* attention's window (0: none, as
					  config.json's null or, in a gated
					  family, use_sliding_window false) */
	int max_window_layers;         /* a gated family's window acts on
					  layers from this one (Qwen2) */
	int query_pre_attn_scalar;     /* Gemma 2 (0 in other families) */
	double rope_local_base_freq;   /* Gemma 3 (0 in other families) */
	double attn_logit_softcapping; /* Gemma 2, 0: none (null) */
	double final_logit_softcapping;
	/* the tokenizer's special tokens, which do not change the
	   arithmetic but travel with the model (a save keeps them) */
	bool has_bos;                  /* bos_token_id given (else absent or null) */
	int bos_token_id;
	int n_eos;                     /* eos_token_id: 0 (absent or null), one id, */
	int eos_token_id[FERRY_HF_MAX_EOS]; /* or a list (Llama 3.1 gives three) */
	bool eos_list;                 /* ... written as a list */
};

/* Reads dir_or_file/config.json (or the file itself) as one of the n
 * families: the one whose model_type it gives (or, without one, whose
 * architecture its architectures list names); another is refused:
 * "DIR/config.json: model_type 'gpt2' is not a Llama or Qwen 2"
 * (FERRY_ERR_FORMAT).  Absent keys (or null) take the family's defaults;
 * num_key_value_heads = num_attention_heads, head_dim = hidden_size /
 * num_attention_heads, tie_word_embeddings false, torch_dtype "float32"
 * (transformers 5's "dtype" is read too).  Integers must be positive and
 * fit an int; the heads must divide hidden_size unless head_dim is given;
 * the kv heads must divide the heads; head_dim must be even (rotary
 * embeddings); rope_theta and rms_norm_eps positive.  Bad values:
 * FERRY_ERR_FORMAT.  bos_token_id must be a token id (an integer from 0)
 * and eos_token_id one or a list of 1 to FERRY_HF_MAX_EOS, or null; they
 * are read (the writer writes them back).  Every key is either one ferry
 * computes with or keeps, one that does not change the model's arithmetic
 * (pad_token_id, use_cache, transformers_version, ...), or refused by name
 * with
 * FERRY_ERR_UNSUPPORTED: rope_scaling (or rope_parameters) of a type other
 * than "default", "linear" and "llama3" or with a key that type does not
 * have, hidden_act other than "silu", attention_bias or mlp_bias true,
 * attention_dropout other than 0, use_sliding_window true, sliding_window
 * in a family without one, max_window_layers in a family whose window
 * always acts (Mistral: no such field), layer_types other than
 * full_attention (any, with a Mistral window),
 * and any key ferry does not know.  *out is written on success only. */
ferry_status ferry_hf_config_read_as(const char *dir_or_file,
				     const struct ferry_hf_family *const *families,
				     int n, struct ferry_hf_config *out)
	FERRY_MUST_CHECK;

/* ferry_hf_config_read_as with every family ferry has (Llama, Qwen 2). */
ferry_status ferry_hf_config_read(const char *dir_or_file,
				  struct ferry_hf_config *out) FERRY_MUST_CHECK;

/* Checks cfg as the reader does (FERRY_ERR_INVALID) and writes
 * DIR/config.json, pretty-printed, atomically as ferry_safetensors_write
 * does: architectures [family's], model_type, hidden_act "silu", the fields
 * above (an empty torch_dtype is written as "float32"), rope_scaling when
 * cfg has one, bos_token_id and eos_token_id when cfg has them, and the
 * family's fixed keys (Llama: attention_bias and mlp_bias false; Qwen2:
 * use_sliding_window false; Mistral: sliding_window, null when 0). */
ferry_status ferry_hf_config_write_as(const char *dir,
				      const struct ferry_hf_config *cfg,
				      const struct ferry_hf_family *family)
	FERRY_MUST_CHECK;

/* ferry_hf_config_write_as with the family of cfg->model_type. */
ferry_status ferry_hf_config_write(const char *dir,
				   const struct ferry_hf_config *cfg)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
