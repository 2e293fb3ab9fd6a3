/*
 * Token data in llm.c's shard format, and text -> shards.
 *
 * Shard file: 256 int32 header [0] 20240520 magic, [1] 1 version,
 * [2] number of tokens; then that many uint16 tokens.
 *
 * The loader reads B*T+1 consecutive tokens per batch: inputs are the first
 * B*T, targets the same shifted by one.  It walks the shards of a glob in
 * sorted order, batch after batch; when a shard has fewer than B*T+1 tokens
 * left it moves to the next shard (wrapping around after the last).
 */
#ifndef FERRY_DATA_H
#define FERRY_DATA_H

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_SHARD_MAGIC 20240520
#define FERRY_SHARD_VERSION 1

typedef struct ferry_loader *ferry_loader_t;

/* Opens every file matching glob_pattern (sorted).  Validates each header and
 * file length up front, and that at least one shard has B*T+1 tokens.
 * Every token is checked against vocab (token < vocab) when it is loaded. */
ferry_status ferry_loader_open(const char *glob_pattern, int B, int T,
			       int vocab, ferry_loader_t *out) FERRY_MUST_CHECK;
void ferry_loader_free(ferry_loader_t loader);

/* Next batch: inputs and targets each B*T int32.  A token >= vocab fails
 * with FERRY_ERR_FORMAT naming the file and token position. */
ferry_status ferry_loader_next(ferry_loader_t loader, int32_t *inputs,
			       int32_t *targets) FERRY_MUST_CHECK;

/* Position of the next batch, to save in a checkpoint and restore. */
void ferry_loader_position(ferry_loader_t loader, int64_t *shard,
			   int64_t *offset);
ferry_status ferry_loader_seek(ferry_loader_t loader, int64_t shard,
			       int64_t offset) FERRY_MUST_CHECK;
void ferry_loader_rewind(ferry_loader_t loader);

int ferry_loader_num_shards(ferry_loader_t loader);
int64_t ferry_loader_num_tokens(ferry_loader_t loader); /* all shards */

/* ---- byte-level tokenizer ---------------------------------------------------
 * Token ids 0..255 are bytes; FERRY_BYTE_EOT (256) starts every document.
 * Vocabulary FERRY_BYTE_VOCAB = 257. */
#define FERRY_BYTE_EOT 256
#define FERRY_BYTE_VOCAB 257

struct ferry_data_opts {
	const char *out_prefix; /* writes <prefix>_train_000000.bin ... and
				   <prefix>_val_000000.bin */
	const char *doc_sep;    /* a line equal to this splits documents
				   (e.g. "%" for fortune files); NULL: one
				   document per input file */
	double val_fraction;    /* every k-th document to val, k = 1/frac;
				   0 for none */
	long shard_tokens;      /* max tokens per shard file */
};

struct ferry_data_stats {
	long documents, train_tokens, val_tokens;
	int train_shards, val_shards;
};

/* Tokenizes text files into shards (written atomically: tmp + rename). */
ferry_status ferry_data_from_text(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts,
				  struct ferry_data_stats *stats)
	FERRY_MUST_CHECK;

/* ---- decoding tokens for printing samples ------------------------------------
 * Either byte-level (no file) or llm.c's tokenizer file
 * (gpt2_tokenizer.bin: 256 int32 header, [0] 20240328, [1] version 1 or 2,
 * [2] vocab size, [3] EOT id (version 2); then per token a uint8 length and
 * that many bytes). */
typedef struct ferry_tokenizer *ferry_tokenizer_t;

ferry_status ferry_tokenizer_open(const char *path /* NULL: byte-level */,
				  ferry_tokenizer_t *out) FERRY_MUST_CHECK;
void ferry_tokenizer_free(ferry_tokenizer_t tok);
/* The bytes of one token (not NUL-terminated) and their count; NULL, 0 for
 * ids it does not know (and for EOT). */
const char *ferry_tokenizer_decode(ferry_tokenizer_t tok, int id, int *len);
int ferry_tokenizer_eot(ferry_tokenizer_t tok);

#ifdef __cplusplus
}
#endif
#endif
