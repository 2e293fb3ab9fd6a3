/*
 * Checkpoints, compatible with llm.c, ferry's training state, and how a save
 * commits a model and its state together.
 *
 * Model file (llm.c's gpt2_*.bin): 256 int32 header
 *   [0] 20240326 magic, [1] 3 (fp32, padded vocabulary), [2] maxT, [3] V,
 *   [4] L, [5] NH, [6] C, [7] Vp, rest 0;
 * then every parameter as fp32 in the GPT-2 declaration's order (src/models/gpt2.c).
 * A reader refuses a non-finite parameter, naming the tensor, its layer and
 * index.
 *
 * Training state file (ferry's own, "<model>.state" next to an llm.c file,
 * DIR/ferry_state.bin in a Hugging Face directory): 256 int32 header
 *   [0] 20241121 magic, [1] 3 version, [2..3] step (int64, little-endian
 *   halves), [4..5] number of parameters (int64), [6..7] data shard index
 *   (int64), [8..9] data token offset (int64), [10..11] rng state (uint64),
 *   [12..13] hash of the model file's parameters (uint64), [14..15] total
 *   steps of the learning-rate schedule (int64), [16] warmup steps, [17]
 *   peak learning rate and [18] final fraction (fp32 bits), [19..20]
 *   number of data shards (int64);
 *   version 2 adds: [21] batch size B, [22] sequence length T, [23..24]
 *   seed (uint64), [25..26] hash of the training shards (uint64: each
 *   shard's real path and size, in the loader's order), [27] length in
 *   bytes of the training glob, [28] weight decay, [29] gradient clip,
 *   [30] beta1, [31] beta2, [32] epsilon (fp32 bits), [33] 0, [34..35]
 *   checksum (uint64, below);
 *   version 3 adds: [36] 1 when the batches are shuffled (ferry/data.h),
 *   0 in order, [37] 0, [38..39] the data position's epoch (int64; the
 *   shard index and offset [6..9] are then a shuffled position);
 *   version 5 adds: [40] the learning-rate schedule (enum ferry_lr_kind),
 *   [41] its floor min_lr (fp32 bits; 0: lr * final fraction), [42] WSD's
 *   decay fraction (fp32 bits), [43] micro-batches per optimizer step;
 *   version 6 adds: [44] the length in bytes of the run's placement (the
 *   --place string of every group, ferry/place.h; 0: none recorded);
 *   [45..255] reserved, written as zeros;
 * then (version >= 2) the training glob, zero-padded to a multiple of 4 bytes;
 * then (version >= 6) the placement, zero-padded to a multiple of 4 bytes;
 * then AdamW m (fp32, n) and v (fp32, n).
 * The checksum is 64-bit FNV-1a over the file's 32-bit little-endian words
 * with [34..35] taken as zero: header, glob, placement, m and v; a reader recomputes it
 * and refuses a file whose bytes changed.  Version 1 and 2 files are still
 * read (version 1: no fields past [20], no glob, no checksum): their
 * missing fields read as 0 / "" (batches in order) and struct
 * ferry_train_state.version says which.
 *
 * ---- The commit protocol: a model and its state saved together -----------------
 *
 * Temporaries are named after the file or directory they become, plus
 * ".tmp.<pid>" (".state.tmp.<pid>" for an llm.c state, ".old.<pid>" for a
 * replaced directory) of the process that made them, so two runs saving to
 * one path never share one, and a temporary whose process is dead (or this
 * process's own, outside its save) is recognised as stale.  Names
 * ".tmp" and ".state.tmp" without a pid, left by older ferry versions, are
 * stale too.  The commit steps run under an exclusive flock() of the parent
 * directory, so two runs' commits and recoveries never interleave.
 *
 * llm.c FILE + FILE.state (ferry_checkpoint_save with a GPT-2):
 *   1. recover FILE (below): finish an interrupted commit, remove stale
 *      temporaries (freeing their space before this save needs it);
 *   2. write FILE.tmp.<pid> and FILE.state.tmp.<pid> completely, each
 *      fsynced; the state records the new model's parameter hash and its
 *      own checksum.  A failure here removes both: FILE and FILE.state, the
 *      last complete pair, were not touched;
 *   3. lock; rename FILE.tmp.<pid> over FILE (the commit point); rename
 *      FILE.state.tmp.<pid> over FILE.state; fsync the directory; remove
 *      stale temporaries; unlock.
 *   Between the two renames FILE is the new model, FILE.state the old state
 *   and FILE.state.tmp.<pid> the new one, complete.  The reader's rule
 *   (recovery, under the lock): when FILE.state is missing or its parameter
 *   hash is not FILE's, a stale FILE.state.tmp.<pid> whose FILE.tmp.<pid>
 *   is gone (its model was renamed into place), whose length and checksum
 *   verify, and whose parameter hash is FILE's is the state of FILE: it is
 *   renamed over FILE.state.  So the pair a resume reads is always the last
 *   one whose model was committed; no other combination is ever paired (the
 *   hash refuses it: "different saves").  A failure of the second rename
 *   returns an error, leaving that state for the next recovery.
 *
 * Hugging Face DIR (config.json, model.safetensors, ferry_state.bin):
 *   1. recover DIR;
 *   2. write DIR.tmp.<pid>/ completely: every file in DIR that is not part
 *      of a checkpoint (tokenizer files, a README, subdirectories; not
 *      config.json, the weights, an index or its model-NNNNN-of-NNNNN
 *      shards) is hard-linked into it, the tokenizer files of the directory
 *      the model was loaded from (ferry_checkpoint_save_as) are copied into
 *      it, then config.json, model.safetensors and
 *      ferry_state.bin are written, each fsynced, and the directory fsynced;
 *      a failure removes DIR.tmp.<pid>/ and leaves DIR as it was;
 *   3. lock; exchange DIR.tmp.<pid> and DIR in one atomic
 *      renameat2(RENAME_EXCHANGE) (a plain rename when DIR is new); fsync
 *      the parent; unlock; remove the old directory, now DIR.tmp.<pid>.
 *   Where the file system cannot exchange, DIR is renamed to DIR.old.<pid>,
 *   then DIR.tmp.<pid> to DIR.  Recovery when DIR is missing: DIR.tmp.<pid>
 *   with a DIR.old.<pid> beside it is complete (the old one is moved aside
 *   only then) and becomes DIR; a DIR.old.<pid> alone goes back to DIR.
 *   Otherwise every stale DIR.tmp.<pid> / DIR.old.<pid> is removed: DIR
 *   exists and is complete at every moment but that window.
 *
 * Writers refuse to replace what is not theirs to replace: a symbolic link,
 * a device, FIFO or socket (a GPT-2 save over a directory, a Llama save over
 * a file).  A save needs room for the new pair beside the old one.
 */
#ifndef FERRY_CHECKPOINT_H
#define FERRY_CHECKPOINT_H

#include <stdbool.h>

#include "ferry/ferry.h"
#include "ferry/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_CHECKPOINT_MAGIC 20240326
#define FERRY_CHECKPOINT_VERSION 3
#define FERRY_STATE_MAGIC 20241121
#define FERRY_STATE_VERSION 6
/* The longest training glob a state file records (bytes, without the NUL). */
#define FERRY_STATE_GLOB_MAX 4095
/* The longest placement it records (FERRY_PLACE_CHARS - 1, ferry/place.h). */
#define FERRY_STATE_PLACE_MAX 3071

/* Reads and validates only the header (and the file length). */
ferry_status ferry_checkpoint_read_config(const char *path,
					  struct ferry_model_config *cfg)
	FERRY_MUST_CHECK;

/* Reads the whole model: *cfg gets the shape, params (n_params floats,
 * allocated by the caller after ferry_checkpoint_read_config) the values.
 * n_params != the file's count: FERRY_ERR_INVALID.  Bad header, config or
 * length, or a non-finite parameter ("FILE: tensor qkvw of layer 1 holds a
 * non-finite value (nan) at [3, 2]"): FERRY_ERR_FORMAT; missing or
 * unreadable file: FERRY_ERR_IO. */
ferry_status ferry_checkpoint_read(const char *path,
				   struct ferry_model_config *cfg,
				   float *params, size_t n_params)
	FERRY_MUST_CHECK;

/* Writes the model alone, atomically (PATH.tmp.<pid>, fsync, rename).
 * Non-finite parameters are refused (FERRY_ERR_INVALID) before anything is
 * written; so is a path that is a symbolic link or not a regular file. */
ferry_status ferry_checkpoint_write(const char *path,
				    const struct ferry_model_config *cfg,
				    const float *params) FERRY_MUST_CHECK;

struct ferry_train_state {
	int64_t step;        /* optimizer steps taken */
	int64_t data_shard;  /* loader position: shard index ... */
	int64_t data_offset; /* ... and token offset within it */
	int64_t data_shards; /* ... among this many shards */
	uint64_t rng;        /* sampling/dropout state */
	uint64_t params_hash; /* ferry_params_hash of the model saved with it */
	int64_t total_steps; /* the learning-rate schedule it was following */
	int32_t warmup;
	float lr, final_lr_frac;
	/* version 2; a version-1 file reads 0 / "" for each of these */
	int32_t version;     /* the file's (set by the reader; writers write 6) */
	int32_t B, T;        /* batch size and sequence length */
	uint64_t seed;
	struct ferry_adamw adamw; /* beta1, beta2, eps, weight decay, clip (not lr) */
	uint64_t data_hash;  /* the training shards' paths and sizes */
	char data[FERRY_STATE_GLOB_MAX + 1]; /* the training glob */
	/* version 3; older files read 0 (in order) */
	int32_t shuffle;     /* 1: data_shard/offset are a shuffled position */
	int64_t data_epoch;  /* ... in this epoch */
	/* version 4; older files read "": the validation glob, stored after the
	 * training glob and a NUL where both fit FERRY_STATE_GLOB_MAX */
	char val_data[FERRY_STATE_GLOB_MAX + 1];
	/* version 5; older files read 0: cosine, the floor from final_lr_frac,
	 * decay fraction 0 (meaning the default), 0 (one micro-batch a step) */
	int32_t lr_schedule; /* enum ferry_lr_kind (ferry/train.h) */
	float min_lr, decay_frac;
	int32_t grad_accum;
	/* version 6; older files read "": the run's placement, as --place
	 * writes it (ferry_places_format) */
	char place[FERRY_STATE_PLACE_MAX + 1];
};

/* A 64-bit hash of parameter values, tying a state file to its model. */
uint64_t ferry_params_hash(const float *params, size_t n);

/* Writes a state file alone, atomically.  Non-finite moments are refused. */
ferry_status ferry_state_write(const char *path,
			       const struct ferry_train_state *st,
			       const float *m, const float *v, size_t n_params)
	FERRY_MUST_CHECK;

/* Fails with FERRY_ERR_FORMAT if the file's parameter count != n_params, or
 * (version 2) if its checksum does not match its contents. */
ferry_status ferry_state_read(const char *path, struct ferry_train_state *st,
			      float *m, float *v, size_t n_params)
	FERRY_MUST_CHECK;

/* The header alone (and the file's length): what a resume needs before it
 * builds the model.  The moments and checksum are not read. */
ferry_status ferry_state_read_info(const char *path, struct ferry_train_state *st)
	FERRY_MUST_CHECK;

/* ---- saving a model and its state together (the protocol above) ---------------- */

/* Saves params (cfg's model) and, when st is not NULL, its training state
 * (st, m, v of n_params) as one commit: a Llama as the Hugging Face
 * directory path, GPT-2 as the llm.c file path plus path.state.  The path
 * is checked first (ferry_checkpoint_check_save_path); any failure before
 * the commit point leaves the previous pair as it was and no temporary
 * behind.  Errors name the file (long paths shortened with "...") and the
 * problem. */
ferry_status ferry_checkpoint_save(const char *path, const struct ferry_model_config *cfg,
				   const float *params, const struct ferry_train_state *st,
				   const float *m, const float *v, size_t n_params) FERRY_MUST_CHECK;

/* How a Hugging Face directory holds the weights. */
enum ferry_save_dtype {
	FERRY_SAVE_AUTO = 0, /* as the checkpoint the model was loaded from holds
				them when every tensor there is BF16, else F32 */
	FERRY_SAVE_F32,
	FERRY_SAVE_BF16,     /* rounded to nearest, ties to even */
};

/* What a save keeps of where the model came from, and how it stores it. */
struct ferry_save_opts {
	const char *from;    /* the checkpoint the model was loaded from (NULL:
				none, or an llm.c file: nothing to keep) */
	enum ferry_save_dtype dtype;
	const char *tokenizer; /* the run's tokenizer (NULL: none): a
				tokenizer.json, a directory with one, or llm.c's
				tokenizer file; it travels with the model */
};

/* An llm.c FILE's copy of its run's tokenizer: FILE.tokenizer. */
#define FERRY_CKPT_TOKENIZER_SUFFIX ".tokenizer"

/* ferry_checkpoint_save, and for a Hugging Face directory (a Llama):
 *  - the tokenizer of so->from's directory travels with the model: each of
 *    its files that exists there (ferry_hf_carried_file) is copied into the
 *    new directory (replacing one the directory had), as part of the same
 *    commit, when it is not the directory being saved to (whose files are
 *    kept anyway); config.json gets so->from's bos_token_id and
 *    eos_token_id (read when so->from's config.json reads; else none);
 *  - the weights in so->dtype; in BF16 config.json's torch_dtype is
 *    "bfloat16", and the training state's parameter hash is that of the
 *    rounded weights (what a resume reads back: it continues from them);
 *    a value too large for BF16 is refused, naming it, before anything is
 *    written.
 *  - so->tokenizer travels with the model: a Hugging Face directory gets
 *    it as tokenizer.json (a directory's carried files), over so->from's,
 *    in the same commit (llm.c's binary tokenizer file is not carried
 *    there: the directory has no name for it); an llm.c FILE gets a copy
 *    of the file (a directory's tokenizer.json) as FILE.tokenizer, written
 *    beside the temporaries and renamed into place after the state (that
 *    rename failing returns an error, the model and state saved).
 * BF16 for an llm.c file (GPT-2, fp32 only) is FERRY_ERR_INVALID; so NULL
 * is ferry_checkpoint_save. */
ferry_status ferry_checkpoint_save_as(const char *path, const struct ferry_model_config *cfg,
				      const float *params, const struct ferry_train_state *st, const float *m,
				      const float *v, size_t n_params, const struct ferry_save_opts *so)
	FERRY_MUST_CHECK;

/* The files of a Hugging Face directory's tokenizer that a save carries
 * over from the checkpoint it was loaded from: "tokenizer.json",
 * "tokenizer_config.json", "special_tokens_map.json",
 * "generation_config.json", and the older tokenizers' "tokenizer.model",
 * "added_tokens.json", "vocab.json", "merges.txt"; i from 0, NULL past
 * the last. */
const char *ferry_hf_carried_file(int i);

/* Finishes a commit that a killed process left half done and removes stale
 * temporaries of the checkpoint at path (either kind; a file inside a
 * Hugging Face directory means the directory).  Does nothing when nothing
 * is stale.  Call it before reading a checkpoint to resume from it
 * (ferry_trainer_create does).  FERRY_ERR_IO when a needed rename fails. */
ferry_status ferry_checkpoint_recover(const char *path) FERRY_MUST_CHECK;

/* Test hook, like ferry_fault_fail_after: after ferry_fault_fail_write_after(n)
 * the n+1-th write-path operation of a checkpoint or state save from now
 * (a write(), fsync(), mkdir() or link() of ferry's own writers) fails with
 * ENOSPC, as on a full disk; n < 0 turns it off. */
void ferry_fault_fail_write_after(long n);

#ifdef __cplusplus
}
#endif
#endif
