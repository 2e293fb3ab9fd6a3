/*
 * Checkpoints, compatible with llm.c.
 *
 * Model file (llm.c's gpt2_*.bin): 256 int32 header
 *   [0] 20240326 magic, [1] 3 (fp32, padded vocabulary), [2] maxT, [3] V,
 *   [4] L, [5] NH, [6] C, [7] Vp, rest 0;
 * then every parameter as fp32 in the GPT-2 declaration's order (src/models/gpt2.c).
 *
 * Training state file (ferry's own, written next to the model as
 * "<model>.state"): 256 int32 header
 *   [0] 20241121 magic, [1] 1 version, [2..3] step (int64, little-endian
 *   halves), [4..5] number of parameters (int64), [6..7] data shard index
 *   (int64), [8..9] data token offset (int64), [10..11] rng state (uint64),
 *   [12..13] hash of the model file's parameters (uint64), [14..15] total
 *   steps of the learning-rate schedule (int64), [16] warmup steps, [17]
 *   peak learning rate and [18] final fraction (fp32 bits), [19..20]
 *   number of data shards (int64), [21..255] reserved, written as zeros;
 * then AdamW m (fp32, n) and v (fp32, n).
 *
 * Every writer writes "<path>.tmp", flushes, fsyncs, then renames over
 * <path> and fsyncs the directory, so a crash never leaves a half-written
 * file under the real name.  A model and its state are two files; the
 * state's parameter hash lets a resume detect a pair from different saves
 * (a save interrupted between the two).
 * Every reader checks magic, version, the header's sizes and the file's exact
 * length; errors name the file and the problem.
 */
#ifndef FERRY_CHECKPOINT_H
#define FERRY_CHECKPOINT_H

#include "ferry/ferry.h"
#include "ferry/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_CHECKPOINT_MAGIC 20240326
#define FERRY_CHECKPOINT_VERSION 3
#define FERRY_STATE_MAGIC 20241121
#define FERRY_STATE_VERSION 1

/* Reads and validates only the header (and the file length). */
ferry_status ferry_checkpoint_read_config(const char *path,
					  struct ferry_model_config *cfg)
	FERRY_MUST_CHECK;

/* Reads the whole model: *cfg gets the shape, params (n_params floats,
 * allocated by the caller after ferry_checkpoint_read_config) the values.
 * n_params != the file's count: FERRY_ERR_INVALID.  Bad header, config or
 * length: FERRY_ERR_FORMAT; missing or unreadable file: FERRY_ERR_IO. */
ferry_status ferry_checkpoint_read(const char *path,
				   struct ferry_model_config *cfg,
				   float *params, size_t n_params)
	FERRY_MUST_CHECK;

ferry_status ferry_checkpoint_write(const char *path,
				    const struct ferry_model_config *cfg,
				    const float *params) FERRY_MUST_CHECK;

struct ferry_train_state {
	int64_t step;        /* optimizer steps taken */
	int64_t data_shard;  /* loader position: shard index ... */
	int64_t data_offset; /* ... and token offset within it */
	int64_t data_shards; /* ... among this many shards */
	uint64_t rng;        /* reserved for sampling/dropout state */
	uint64_t params_hash; /* ferry_params_hash of the model saved with it */
	int64_t total_steps; /* the learning-rate schedule it was following */
	int32_t warmup;
	float lr, final_lr_frac;
};

/* A 64-bit hash of parameter values, tying a state file to its model. */
uint64_t ferry_params_hash(const float *params, size_t n);

ferry_status ferry_state_write(const char *path,
			       const struct ferry_train_state *st,
			       const float *m, const float *v, size_t n_params)
	FERRY_MUST_CHECK;

/* Fails with FERRY_ERR_FORMAT if the file's parameter count != n_params. */
ferry_status ferry_state_read(const char *path, struct ferry_train_state *st,
			      float *m, float *v, size_t n_params)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
