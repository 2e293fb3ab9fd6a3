/*
 * The model's vocabulary against the data, before step 1: the shards'
 * largest token id, read once, so that data made with another tokenizer
 * is refused at the start, naming the vocabulary that fits, not at the
 * batch that first holds a token past the model's.
 */
#include "train/vocab_check.h"
#include "ferry/data.h"
#include "core/error.h"
#include "core/file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_TOKENS (1 << 18)

/* The largest of n tokens of w bytes each (2: uint16, 4: uint32). */
static uint32_t chunk_max(const void *buf, size_t n, int w, uint32_t max)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t t = w == 2 ? ((const uint16_t *)buf)[i] : ((const uint32_t *)buf)[i];

		max = t > max ? t : max;
	}
	return max;
}

/* The largest token id of one shard (header checked by the loader) into *max. */
static ferry_status shard_max(const char *path, uint32_t *buf, uint32_t *max)
{
	int32_t hdr[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ferry_status st = FERRY_OK;
	ssize_t got = 0;
	int w;

	if (fd < 0 || ferry_file_read_full(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot read it: %s", path, fd < 0 ? strerror(errno) : "short");
		if (fd >= 0)
			close(fd);
		return st;
	}
	w = hdr[1] == FERRY_SHARD_VERSION ? 2 : 4;
	/* the ids only: version 3's flags follow them */
	for (int64_t left = hdr[2] > 0 ? hdr[2] : 0; left > 0; left -= got / w) {
		size_t want = (size_t)(left < CHUNK_TOKENS ? left : CHUNK_TOKENS) * (size_t)w;

		if ((got = ferry_file_read_full(fd, buf, want)) <= 0)
			break;
		*max = chunk_max(buf, (size_t)got / (size_t)w, w, *max);
	}
	if (got < 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot read it: %s", path, strerror(errno));
	close(fd);
	return st;
}

/* The largest token id of the shards of pattern, and its shard's path. */
static ferry_status glob_max(const char *pattern, uint32_t *buf, uint32_t *max, char *where, size_t n)
{
	ferry_status st = FERRY_OK;
	glob_t g;

	if (glob(pattern, 0, NULL, &g) != 0)
		return FERRY_OK; /* the loader said what is wrong */
	for (size_t i = 0; !st && i < g.gl_pathc; i++) {
		uint32_t before = *max;

		st = shard_max(g.gl_pathv[i], buf, max);
		if (*max > before || (!i && !where[0]))
			snprintf(where, n, "%s", g.gl_pathv[i]);
	}
	globfree(&g);
	return st;
}

ferry_status ferry_vocab_check(const char *data, const char *val, int vocab, bool fresh)
{
	uint32_t *buf = ferry_malloc((size_t)CHUNK_TOKENS * 4), max = 0;
	char where[4200] = "";
	ferry_status st = buf ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "vocabulary check: out of host memory");
	const char *globs[2] = { data, val };

	for (int k = 0; k < 2 && !st; k++)
		if (globs[k] && (st = glob_max(globs[k], buf, &max, where, sizeof(where))) == FERRY_OK &&
		    max >= (uint32_t)vocab)
			st = ferry_error(FERRY_ERR_INVALID, "%s holds token id %u, past the model's vocabulary of %d: %s "
					 "%u or more%s", where, max, vocab,
					 fresh ? "a model for this data needs --vocab" :
						 "the data was made with another tokenizer than the model's, whose ids "
						 "need a vocabulary of", max + 1,
					 fresh ? " (its tokenizer's size)" : "");
	ferry_free(buf);
	return st;
}
