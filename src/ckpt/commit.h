/*
 * Internal: what the checkpoint writers and the commit protocol
 * (src/ckpt/commit.c, described in include/ferry/checkpoint.h) share.
 */
#ifndef FERRY_CKPT_COMMIT_H
#define FERRY_CKPT_COMMIT_H

#include "ferry/checkpoint.h"
#include <dirent.h>
#include <stdbool.h>
#include "ferry/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for a path shortened for a message (ferry_ckpt_short). */
#define FERRY_CKPT_SHORT 176

/* path itself when short, else its start, "...", and its end: messages stay
 * on one line and are never cut by the error buffer. */
const char *ferry_ckpt_short(const char *path, char buf[FERRY_CKPT_SHORT]);

/* The write fault hook (ferry_fault_fail_write_after): true when this
 * write-path operation is to fail; errno is then ENOSPC. */
bool ferry_ckpt_fault(void);

/* FNV-1a, 64 bits, over 32-bit words (nbytes a multiple of 4), continuing h. */
#define FERRY_FNV_INIT 0xcbf29ce484222325ull
uint64_t ferry_ckpt_fnv_words(uint64_t h, const void *p, size_t nbytes);

/* The first parameter that is not finite, named by tensor (Hugging Face's
 * name when it has one), layer and index: FERRY_OK when all are finite,
 * else code with "FILE: tensor qkvw of layer 1 holds a non-finite value
 * (nan) at [3, 2]" (what "": a reader) or "FILE: not saved: qkvw of layer
 * 1 holds ..." (what "not saved: ": a writer). */
ferry_status ferry_ckpt_check_finite(const char *file, const struct ferry_model_config *cfg,
				     const float *params, size_t n, ferry_status code, const char *what);

/* Create file (which must not exist; this process's own leftover of that
 * name is replaced), write the model / the state, fsync, close.  On failure
 * the file is removed.  No rename: the commit protocol renames. */
ferry_status ferry_ckpt_write_model(const char *file, const struct ferry_model_config *cfg,
				    const float *params);
ferry_status ferry_ckpt_write_state(const char *file, const struct ferry_train_state *st,
				    const float *m, const float *v, size_t n_params);

/* Streaming checks for recovery (no buffer of the model's size): the
 * parameter hash of an llm.c model file, and a state file's parameter hash
 * after checking its length and (version 2) its checksum. */
ferry_status ferry_ckpt_model_hash(const char *path, uint64_t *hash);
ferry_status ferry_ckpt_state_verify(const char *path, uint64_t *params_hash);
/* The parameter hash a state file's header records (header and length
 * checked, nothing else read). */
ferry_status ferry_ckpt_state_hash(const char *path, uint64_t *params_hash);

/* FERRY_ERR_INVALID when a save to path (a Hugging Face directory when hf)
 * would replace the file input (what: "training shard"), compared by device
 * and inode, or by real path for a file the save would create. */
ferry_status ferry_ckpt_check_not_input(const char *path, bool hf, const char *input, const char *what);

/* What a Hugging Face save takes from the checkpoint its model was loaded
 * from (ferry_checkpoint_save_as). */
struct ferry_hf_source {
	char *dir;                  /* its directory (NULL: none) */
	struct ferry_hf_config ids; /* its config.json's token ids (has_bos, bos_token_id,
				       n_eos, eos_token_id, eos_list; the rest unused) */
	bool bf16;                  /* the weights go out in BF16 */
	const char *tokenizer;      /* ferry_save_opts.tokenizer */
};
/* *src for a save under so (NULL: none, F32). */
ferry_status ferry_ckpt_hf_source(const struct ferry_save_opts *so, struct ferry_hf_source *src);
void ferry_ckpt_hf_source_free(struct ferry_hf_source *src);

/* Copies each carried file (ferry_hf_carried_file) that src_dir has into
 * tmp, the new checkpoint's temporary directory, replacing one kept there,
 * each fsynced; nothing when src_dir is dest, the directory being saved
 * to (its files are kept). */
ferry_status ferry_ckpt_hf_carry(const char *src_dir, const char *dest, const char *tmp);

/* The tokenizer a run was given (ferry_save_opts.tokenizer: a file, or a
 * directory's tokenizer.json) copied as dir/name, fsynced, replacing a
 * file of that name; with json_only, llm.c's binary tokenizer file is not
 * copied (a Hugging Face directory has no name for it).  Nothing for
 * NULL; one that is not there is an error. */
ferry_status ferry_ckpt_carry_tokenizer(const char *tok, bool json_only, const char *dir, const char *name);

/* Writes config.json and model.safetensors of a Llama into the existing
 * directory dir (the commit's temporary); parameters must be finite.  src
 * (NULL: none): the token ids config.json keeps and the weights' dtype. */
ferry_status ferry_ckpt_hf_write_files(const char *dir, const struct ferry_model_config *cfg,
				       const float *params, const struct ferry_hf_source *src);

/* Deepest directory tree kept (hard-linked) across a directory swap. */
#define FERRY_CKPT_MAX_DEPTH 32

/* The names a save at path uses. */
struct ferry_ckpt_names {
	char *path;      /* the checkpoint (a directory's trailing slashes removed) */
	char *parent;    /* the directory holding it */
	const char *base; /* its last component, inside path */
	char *state;     /* path.state (llm.c) */
	char *tmp;       /* path.tmp.<pid>: a model file or a whole directory */
	char *state_tmp; /* path.state.tmp.<pid> */
	char *old;       /* path.old.<pid>: a replaced directory */
	char *tok;       /* path.tokenizer (llm.c): the run's tokenizer */
	char *tok_tmp;   /* path.tokenizer.tmp.<pid> */
	char sb[2][FERRY_CKPT_SHORT]; /* room for shortened names in messages */
};
/* path's names (strip: a directory's trailing slashes removed); freed by
 * ferry_ckpt_names_free. */
ferry_status ferry_ckpt_names_make(const char *path, bool strip, struct ferry_ckpt_names *nm) FERRY_MUST_CHECK;
void ferry_ckpt_names_free(struct ferry_ckpt_names *nm);
/* "path" + suffix, + ".pid" unless pid is 0 (ferry_malloc; NULL: out of memory). */
char *ferry_ckpt_with_suffix(const char *path, const char *suffix, long pid);
/* path shortened for a message into nm's k-th buffer (k 0 or 1). */
const char *ferry_ckpt_shorten(struct ferry_ckpt_names *nm, int k, const char *path);
/* *dp lists the directory fd, through a duplicate: fd stays the caller's. */
ferry_status ferry_ckpt_list_fd(struct ferry_ckpt_names *nm, int fd, DIR **dp) FERRY_MUST_CHECK;

#endif
