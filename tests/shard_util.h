/* Test helper: an llm.c token shard (version 1, uint16) written to a file.
 * Header-only: each test is its own program. */
#ifndef FERRY_TESTS_SHARD_UTIL_H
#define FERRY_TESTS_SHARD_UTIL_H

#include "ferry/data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A shard of n tokens at path (the test ends when it cannot be written). */
static inline void write_shard(const char *path, const uint16_t *tok, int n)
{
	int32_t header[256] = { FERRY_SHARD_MAGIC, FERRY_SHARD_VERSION, n };
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(header, sizeof(header), 1, f) != 1 || fwrite(tok, 2, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	fclose(f);
}

#endif
