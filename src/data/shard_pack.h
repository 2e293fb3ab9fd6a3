/*
 * Version-3 shards (docs/data.md) packed into rows: the shard loader's
 * half that knows documents and flags (shard_loader.c orders the rows).
 */
#ifndef FERRY_DATA_SHARD_PACK_H
#define FERRY_DATA_SHARD_PACK_H

#include "ferry/ferry.h"

#include <stdbool.h>
#include <stdint.h>

/* A row: whole documents, tokens [start, start + len) of one shard (a
 * document cut by truncate: its first T tokens). */
struct ferry_pack_row {
	int64_t start;
	int32_t shard, len;
};

struct ferry_pack {
	struct ferry_pack_row *rows;
	int64_t n_rows, cap;
};

/* Reads the flags of one version-3 shard of `tokens` tokens, checks them
 * (bits 0 and 1 only; the first token starts a document) and appends its
 * documents' rows of T.  A document longer than T: cut with truncate, else
 * refused naming the shard, the document and --truncate. */
ferry_status ferry_pack_scan(struct ferry_pack *p, const char *path, int shard, int64_t tokens, int T,
			     bool truncate) FERRY_MUST_CHECK;

/* Row `row` (NULL: a padding row) of a shard open as fd, of shard_tokens
 * tokens, into T inputs, targets and positions, through the staging
 * buffers ids (T) and flags (T); each id checked < vocab. */
ferry_status ferry_pack_read(const struct ferry_pack_row *row, int fd, const char *path, int64_t shard_tokens,
			     int T, int vocab, uint32_t *ids, uint8_t *flags, int32_t *in, int32_t *tg,
			     int32_t *pos) FERRY_MUST_CHECK;

void ferry_pack_free(struct ferry_pack *p);

#endif
