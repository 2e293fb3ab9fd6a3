/*
 * Token data in llm.c's shard format, and text -> shards.
 *
 * Shard file (llm.c's, docs/data.md): 256 little-endian int32 header,
 * [0] 20240520 magic, [1] version, [2] number of tokens; then that many
 * tokens, uint16 in version 1 (llm.c's, vocabularies up to 65536) or
 * uint32 in version 2 (ferry's, for larger ones such as Llama 3's).
 *
 * In order (the default of ferry_loader_open), the loader reads B*T+1
 * consecutive tokens per batch: inputs are the first B*T, targets the same
 * shifted by one.  It walks the shards of a glob in sorted order (strcmp),
 * batch after batch, advancing B*T tokens per batch (so one batch's last
 * target is the next batch's first input, as in llm.c); when a shard has
 * fewer than B*T+1 tokens left it moves to the next shard (wrapping around
 * after the last; shards shorter than one batch are skipped).
 *
 * Shuffled (ferry_loader_shuffle, llm.c's shuffling): a shard of n tokens
 * holds (n-1)/T samples of T+1 tokens, sample i starting at token i*T.  Each
 * epoch visits the shards in a random order, and each shard's samples in a
 * random order, B samples to a batch (the last B-1 or fewer of a shard wait
 * for another epoch's order); row b of a batch is one sample, its first T
 * tokens the inputs, its last T the targets.  Both orders are permutations
 * drawn from (seed, epoch) and (seed, epoch, shard) alone, so a position
 * (epoch, shard, offset) and the seed give the same batches on any run.
 */
#ifndef FERRY_DATA_H
#define FERRY_DATA_H

#include <stdbool.h>

#include "ferry/ferry.h"
#include "ferry/chat.h"
#include "ferry/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_SHARD_MAGIC 20240520
#define FERRY_SHARD_VERSION 1	  /* uint16 tokens */
#define FERRY_SHARD_VERSION_U32 2 /* uint32 tokens */
#define FERRY_SHARD_VERSION_DOCS 3 /* uint32 tokens, then a flags byte each */

/* Version 3's token flags (docs/data.md). */
#define FERRY_TOKEN_TARGET 1u    /* predicting it counts in the loss */
#define FERRY_TOKEN_DOC_START 2u /* it starts a document */

typedef struct ferry_loader *ferry_loader_t;

/* Opens every file matching glob_pattern (sorted); versions 1 and 2 may
 * mix.  Validates each header and file length (exactly 1024 + 2 or 4 *
 * tokens bytes) up front, and that at least
 * one shard has B*T+1 tokens.  Every token is checked against vocab
 * (token < vocab) when it is loaded.  No match: FERRY_ERR_IO. */
ferry_status ferry_loader_open(const char *glob_pattern, int B, int T,
			       int vocab, ferry_loader_t *out) FERRY_MUST_CHECK;
void ferry_loader_free(ferry_loader_t loader);

struct ferry_loader_opts {
	bool truncate; /* version 3: a document longer than T is cut to its
			  first T tokens (the last without a target); without
			  it such a document is refused, naming its shard
			  and number */
	bool once;     /* version 3, in order: one pass over the rows, the
			  last batch filled up with padding rows (all targets
			  -1); ferry_loader_next fails after it.  The data
			  may then have fewer than B rows */
};

/* ferry_loader_open with options (NULL: none).  Version 3 needs B rows
 * (or one, once). */
ferry_status ferry_loader_open_opts(const char *glob_pattern, int B, int T, int vocab,
				    const struct ferry_loader_opts *opts, ferry_loader_t *out) FERRY_MUST_CHECK;
/* Whether the data is version 3: batches of packed documents, with
 * positions (ferry_loader_next_packed). */
bool ferry_loader_packed(ferry_loader_t loader);
/* Whether the first file glob_pattern matches (sorted) is a version-3
 * shard: what a model for the data must be made for, known before the
 * loader reads anything (false when there is none or it is unreadable:
 * opening the loader says why). */
bool ferry_data_is_packed(const char *glob_pattern);
/* Version 3: how many rows the documents were packed into (0 otherwise). */
int64_t ferry_loader_rows(ferry_loader_t loader);

/* Next batch: inputs and targets each B*T int32.  A token >= vocab fails
 * with FERRY_ERR_FORMAT naming the file and token position. */
ferry_status ferry_loader_next(ferry_loader_t loader, int32_t *inputs,
			       int32_t *targets) FERRY_MUST_CHECK;
/* The same with each token's position in its document (B*T int32; for
 * versions 1 and 2 t, its index in the row).  Version 3 needs positions:
 * ferry_loader_next refuses it (its rows without them would attend across
 * documents). */
ferry_status ferry_loader_next_packed(ferry_loader_t loader, int32_t *inputs, int32_t *targets,
				      int32_t *positions) FERRY_MUST_CHECK;

/* Data parallel: the loader reads only its part of every batch, rows
 * first .. first + rows - 1 of each group of `group` rows (group divides
 * the B of ferry_loader_open; 0 <= first, first + rows <= group), and
 * ferry_loader_next fills B / group * rows rows, the groups in order.  The
 * batch is still B rows of the data: the position, the shard changes and
 * the epochs are the whole batch's, so ranks that each read their part
 * move together as one process reading batches of B, and the ranks'
 * parts together are its batch.  Tokens are checked in the part read. */
ferry_status ferry_loader_set_part(ferry_loader_t loader, int group, int first, int rows) FERRY_MUST_CHECK;

/* Switches to the shuffled order drawn from seed and moves to its start
 * (epoch 0).  Allocates the orders' tables (FERRY_ERR_NOMEM); ferry_loader_next
 * still allocates nothing. */
ferry_status ferry_loader_shuffle(ferry_loader_t loader, uint64_t seed)
	FERRY_MUST_CHECK;
bool ferry_loader_shuffled(ferry_loader_t loader);

/* Position of the next batch, to save in a checkpoint and restore: the
 * shard's index in sorted order and, in order, the token offset in it;
 * shuffled, the index of the batch's first sample in the shard's order of
 * this epoch (ferry_loader_epoch; always 0 in order).  It always names a
 * shard with a full batch left.  A failed ferry_loader_next does not move
 * it. */
void ferry_loader_position(ferry_loader_t loader, int64_t *shard,
			   int64_t *offset);
int64_t ferry_loader_epoch(ferry_loader_t loader);
/* Requires 0 <= shard < num_shards and 0 <= offset <= that shard's tokens
 * (in order) or samples (shuffled) (FERRY_ERR_INVALID otherwise); an offset
 * with less than a batch left moves on to the next usable shard, as
 * ferry_loader_next would.  Shuffled, the position is in the current epoch;
 * ferry_loader_seek_epoch names the epoch (>= 0; in order only 0). */
ferry_status ferry_loader_seek(ferry_loader_t loader, int64_t shard,
			       int64_t offset) FERRY_MUST_CHECK;
ferry_status ferry_loader_seek_epoch(ferry_loader_t loader, int64_t epoch,
				     int64_t shard, int64_t offset)
	FERRY_MUST_CHECK;
/* Back to the first batch (of epoch 0). */
void ferry_loader_rewind(ferry_loader_t loader);

int ferry_loader_num_shards(ferry_loader_t loader);
int64_t ferry_loader_num_tokens(ferry_loader_t loader); /* all shards */

struct ferry_data_opts {
	const char *out_prefix; /* writes <prefix>_train_000000.bin ... and
				   <prefix>_val_000000.bin; the directory
				   must exist */
	const char *doc_sep;    /* a line equal to this (a trailing '\r'
				   ignored) splits documents and is dropped
				   (e.g. "%" for fortune files; "" for blank
				   lines); NULL: one document per input file.
				   Every input file also ends a document. */
	double val_fraction;    /* in [0, 1]: documents numbered 1, 2, ...;
				   number i goes to val when i % k == 0,
				   k = max(1, round(1/frac)); 0 for none */
	long shard_tokens;      /* max tokens per shard file, 1..INT32_MAX;
				   documents may straddle shards */
	ferry_tokenizer_t tokenizer; /* NULL: byte-level; else one that
				   encodes (a Hugging Face tokenizer.json) */
	const char *text_field; /* JSON Lines inputs (names ending .jsonl or
				   .json, before any .gz/.zst): the string
				   field that is a document; NULL: "text" */
	int threads;            /* encoding threads with a tokenizer; 0:
				   OpenMP's default.  The shards do not
				   depend on it */
	/* Optional: called every 64 MiB of input read and at the end. */
	void (*progress)(void *ctx, long documents, long long bytes);
	void *progress_ctx;
	/* Optional: asked before each write of a shard's buffer (every 8192
	   tokens); nonzero stops the run, which removes its temporaries and
	   fails, leaving the previous corpus of out_prefix as it was. */
	int (*stop)(void *ctx);
	void *stop_ctx;
};

struct ferry_data_stats {
	long documents, train_tokens, val_tokens;
	int train_shards, val_shards;
};

/* Tokenizes text files into shards.  They are written as temporaries
 * (<name>.tmp.<pid>) and renamed into place only once every input was read
 * and every shard written, so a failure (an unreadable input, a full disk)
 * leaves the previous corpus of the prefix as it was and no temporary
 * behind.  Inputs may be plain, gzip (.gz) or Zstandard (.zst); JSON
 * Lines inputs hold one document per record (its text_field).  Byte-level,
 * every byte is a token and each non-empty document is preceded by
 * FERRY_BYTE_EOT (empty documents are skipped and not counted).  With a
 * tokenizer each document is encoded whole: with the post-processor's
 * special tokens when it adds some (Llama's BOS first), else after the
 * tokenizer's end-of-text token (GPT-2's <|endoftext|>, as llm.c writes
 * it); shards are version 2 (uint32) when the vocabulary passes 65536
 * ids, else version 1.  A split
 * with no documents writes no file.  Shards of the same prefix and split
 * numbered past this run's last one (left by an earlier run) are deleted, so
 * a glob sees only this run's output.  No text at all: FERRY_ERR_INVALID.
 * stats may be NULL; it is filled only on success. */
ferry_status ferry_data_from_text(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts,
				  struct ferry_data_stats *stats)
	FERRY_MUST_CHECK;

/* Conversations into version-3 shards (docs/data.md, "Conversations"):
 * JSON Lines files (plain, .gz, .zst) of {"messages": [...]} or
 * {"prompt", "completion"} records, each rendered whole by chat, tokenized
 * whole by opts->tokenizer with no special tokens added, its assistant
 * spans' tokens marked FERRY_TOKEN_TARGET and its first token
 * FERRY_TOKEN_DOC_START.  Uses opts' out_prefix, val_fraction,
 * shard_tokens (a shard holds whole conversations: one longer than
 * shard_tokens has a shard of its own), tokenizer and stop.  A bad record
 * (not JSON, no messages, a template's raise_exception, no assistant turn)
 * fails naming FILE:LINE and leaves nothing written. */
ferry_status ferry_data_from_chat(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts, ferry_chat_t chat,
				  struct ferry_data_stats *stats) FERRY_MUST_CHECK;
/* Each record's rendering (with or without the generation prompt) to
 * each(), in input order; errors as ferry_data_from_chat's. */
ferry_status ferry_chat_each(const char *const *paths, int n_paths, ferry_chat_t chat,
			     bool add_generation_prompt,
			     void (*each)(void *ctx, const char *text, size_t len), void *ctx)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
