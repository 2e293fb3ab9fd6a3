/*
 * Llama checkpoints as Hugging Face users have them, and the choice between
 * those and llm.c's files.
 *
 * A Hugging Face checkpoint is a directory holding config.json (a
 * LlamaConfig, see ferry_hf_config_read) and the weights: model.safetensors,
 * or model.safetensors.index.json and the shards it names
 * (include/ferry/safetensors.h).  Tensors carry Hugging Face's names
 * (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
 * model.norm.weight, lm_head.weight) in its [out, in] layout, one tensor per
 * layer; ferry keeps each per-layer tensor stacked [L, ...] in its parameter
 * array (ferry_model_param_info), so reading and writing copies layer slices.
 * Tensors may be F32, BF16 or F16 (widened exactly); ferry writes F32, or
 * BF16 (ferry_checkpoint_save_as, which also carries the tokenizer files
 * of the directory the model came from).
 *
 * config.json maps onto struct ferry_model_config as
 *   hidden_size -> channels, intermediate_size -> ffn,
 *   num_attention_heads -> heads, num_key_value_heads -> kv_heads,
 *   head_dim -> head_size, num_hidden_layers -> layers,
 *   vocab_size -> vocab (= padded_vocab: the files have vocab_size rows),
 *   max_position_embeddings -> max_seq, rope_theta, rms_norm_eps -> norm_eps,
 *   tie_word_embeddings -> tie_embeddings (1 true, -1 false).
 * A tied checkpoint needs no lm_head.weight (one that is there is ignored);
 * an untied one must have it.  Old checkpoints' rotary_emb.inv_freq buffers
 * are ignored; any other tensor that is not a parameter of the model
 * config.json describes is refused (the file and the config disagree).
 *
 * ferry's training state for --resume lives inside the directory as
 * ferry_state.bin (the state file of include/ferry/checkpoint.h), tied to the
 * weights by the parameter hash, as FILE.state is to an llm.c FILE.
 */
#ifndef FERRY_HF_CHECKPOINT_H
#define FERRY_HF_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry/ferry.h"
#include "ferry/model.h"
#include "ferry/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_HF_WEIGHTS_NAME "model.safetensors"
#define FERRY_HF_INDEX_NAME "model.safetensors.index.json"
#define FERRY_HF_CONFIG_NAME "config.json"
#define FERRY_HF_STATE_NAME "ferry_state.bin"

/* ---- config.json <-> struct ferry_model_config ------------------------------- */

/* Maps a LlamaConfig to a model config and completes it
 * (ferry_model_config_complete); a config ferry cannot use is refused with
 * FERRY_ERR_FORMAT naming path (the config.json it came from). */
ferry_status ferry_hf_config_to_model(const struct ferry_hf_config *hf, const char *path,
				      struct ferry_model_config *cfg) FERRY_MUST_CHECK;

/* The other way: cfg must be a valid Llama whose padded vocabulary equals
 * its vocabulary (FERRY_ERR_INVALID otherwise).  rope_theta and rms_norm_eps
 * get the shortest decimals that read back as the same floats (1e-05, not
 * 9.99999974737875e-06); torch_dtype is "float32". */
ferry_status ferry_model_config_to_hf(const struct ferry_model_config *cfg,
				      struct ferry_hf_config *hf) FERRY_MUST_CHECK;

/* ---- Hugging Face checkpoints --------------------------------------------------
 * path: the directory, or a file in it: its config.json, model.safetensors
 * (any *.safetensors file: the weights are that file, config.json is beside
 * it) or model.safetensors.index.json (any other *.json: the index). */

/* Reads and maps config.json only (errors as ferry_hf_config_read: a
 * config.json of another model, "DIR/config.json: model_type 'gpt2' is not
 * a Llama", is FERRY_ERR_FORMAT). */
ferry_status ferry_hf_checkpoint_read_config(const char *path, struct ferry_model_config *cfg)
	FERRY_MUST_CHECK;

/* Reads the config and every parameter into params (n_params floats,
 * allocated by the caller after ferry_hf_checkpoint_read_config).  Each
 * problem is one error naming the file and the tensor (FERRY_ERR_FORMAT): a
 * tensor missing, a tensor of the wrong shape, an unexpected tensor, a
 * non-finite value; FERRY_ERR_IO for unreadable files; n_params other than
 * the model's count is FERRY_ERR_INVALID.  *cfg is written on success only;
 * params' contents are unspecified after a failure. */
ferry_status ferry_hf_checkpoint_read(const char *path, struct ferry_model_config *cfg,
				      float *params, size_t n_params) FERRY_MUST_CHECK;

/* Writes dir/config.json and dir/model.safetensors (F32, every parameter
 * with storage, per layer under its Hugging Face name), creating dir (not
 * its parents) when it does not exist.  Parameters must be finite (a
 * diverged model is refused, FERRY_ERR_INVALID, before anything is
 * written, so the previous checkpoint stays).  The directory is replaced as
 * a whole, by the protocol of include/ferry/checkpoint.h: the new one is
 * written as dir.tmp.<pid>/ beside it (so dir's parent must be writable),
 * then swapped in atomically; a crash or failure at any point leaves the
 * old checkpoint or the new one, never a mix.  Files of dir that are not
 * part of a checkpoint (anything but config.json, model.safetensors,
 * model.safetensors.index.json and model-NNNNN-of-NNNNN.safetensors shards)
 * are kept, hard-linked into the new directory, subdirectories included;
 * so is an existing ferry_state.bin (ferry_checkpoint_save writes a new one
 * with the weights). */
ferry_status ferry_hf_checkpoint_write(const char *dir, const struct ferry_model_config *cfg,
				       const float *params) FERRY_MUST_CHECK;

/* ---- either kind ------------------------------------------------------------------
 * A checkpoint path that is a directory, a *.safetensors or a *.json file is
 * Hugging Face's (a Llama); any other path is an llm.c model file (GPT-2). */
bool ferry_checkpoint_is_hf(const char *path);

/* Whether cfg's model is saved as a Hugging Face directory (Llama), as its
 * declaration says, rather than as an llm.c file (GPT-2, and a config
 * naming no model ferry has). */
bool ferry_checkpoint_model_is_hf(const struct ferry_model_config *cfg);

/* The shape of the model in either kind of checkpoint (cfg->arch says
 * which model: "llama" for config.json's model_type llama, "gpt2" for llm.c's
 * magic). */
ferry_status ferry_checkpoint_any_read_config(const char *path, struct ferry_model_config *cfg)
	FERRY_MUST_CHECK;
/* The model in either kind of checkpoint. */
ferry_status ferry_checkpoint_any_read(const char *path, struct ferry_model_config *cfg,
				       float *params, size_t n_params) FERRY_MUST_CHECK;

/* Writes a model in its own kind of checkpoint: a Llama as a Hugging Face
 * directory (ferry_hf_checkpoint_write), GPT-2 as an llm.c file
 * (ferry_checkpoint_write).  A Llama to a path that is an existing file, or
 * GPT-2 to an existing directory, is refused (FERRY_ERR_INVALID). */
ferry_status ferry_checkpoint_any_write(const char *path, const struct ferry_model_config *cfg,
					const float *params) FERRY_MUST_CHECK;
/* Whether a save (ferry_checkpoint_save) to path could be committed, checked
 * before hours of training rather than at the save: the path's kind (a
 * Llama to a path that is a file, GPT-2 to a directory: FERRY_ERR_INVALID);
 * a destination that must not be replaced (a symbolic link, a device, FIFO
 * or socket, for the model or its state file: FERRY_ERR_INVALID); names
 * that would not fit the system's limits once the temporaries' suffixes
 * are added (FERRY_ERR_INVALID, with the lengths); and that the directory
 * the temporaries go to accepts them, by creating and removing the longest
 * one (FERRY_ERR_IO).  Nothing is left behind. */
ferry_status ferry_checkpoint_check_save_path(const char *path, const struct ferry_model_config *cfg)
	FERRY_MUST_CHECK;

/* The training state file that goes with the checkpoint at path:
 * DIR/ferry_state.bin for a Hugging Face checkpoint (DIR: path, or the
 * directory of a file in it), "<path>.state" for an llm.c file.  hf: which
 * kind path is (ferry_checkpoint_is_hf for one being read; the model's kind
 * for one being written).  FERRY_ERR_INVALID when it does not fit in n
 * bytes. */
ferry_status ferry_checkpoint_state_path(const char *path, bool hf, char *buf, size_t n)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
