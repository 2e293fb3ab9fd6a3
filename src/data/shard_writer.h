/*
 * Internal: one split (train or val) of a corpus being written as token
 * shards, buffered, each shard a temporary until the whole corpus is done
 * (see text_to_shards.c for the rules).  Tokens are uint16 (shard version
 * 1) or uint32 (version 2), by the width the caller sets; with flags set,
 * version 3: uint32 ids, then a flags byte per token (docs/data.md).
 */
#ifndef FERRY_DATA_SHARD_WRITER_H
#define FERRY_DATA_SHARD_WRITER_H

#include "ferry/data.h" /* the shard versions and token flags */

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define FERRY_SHARD_WRITE_BUF 8192

struct ferry_shard_writer {
	const char *prefix;
	const char *split;   /* "train" / "val" */
	long shard_tokens;
	int width;           /* bytes per token: 2 or 4 */
	FILE *f;             /* open shard, or NULL */
	int index;           /* number of the open (or next) shard */
	long in_shard;       /* tokens in the open shard */
	long total;
	uint32_t buf[FERRY_SHARD_WRITE_BUF];
	int n_buf;
	/* Optional: asked before each write; nonzero stops the run. */
	int (*stop)(void *ctx);
	void *stop_ctx;
	/* Version 3: the open shard's flags, written after its ids at close;
	 * a shard is closed only by ferry_shard_writer_close (documents
	 * never straddle shards). */
	bool flags;
	uint8_t *flag;
	long flag_cap;
	char path[PATH_MAX];
	char tmp[PATH_MAX];
};

ferry_status ferry_shard_writer_put(struct ferry_shard_writer *w, uint32_t tok)
	FERRY_MUST_CHECK;
/* Version 3 (w->flags): a token and its flags. */
ferry_status ferry_shard_writer_put_flagged(struct ferry_shard_writer *w, uint32_t tok,
					    uint8_t flags) FERRY_MUST_CHECK;
/* Completes the open shard (still a temporary). */
ferry_status ferry_shard_writer_close(struct ferry_shard_writer *w)
	FERRY_MUST_CHECK;
/* Renames the completed shards into place; *done: how many. */
ferry_status ferry_shard_writer_commit(struct ferry_shard_writer *w, int *done)
	FERRY_MUST_CHECK;
/* Removes this run's temporaries (after an error). */
void ferry_shard_writer_discard(struct ferry_shard_writer *w);
/* Removes shards of an earlier run numbered from `from` on. */
void ferry_shard_writer_remove_stale(const struct ferry_shard_writer *w,
				     int from);

/* Removes temporaries "<prefix>_<split>_N.bin.tmp.PID" whose writer PID
 * is no longer alive (a run killed before it could clean up). */
void ferry_shard_writer_remove_dead(const struct ferry_shard_writer *w);

#endif
