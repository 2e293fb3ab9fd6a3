/*
 * Test helpers: paths in a test's scratch directory (dir, which the test
 * makes), and shards to write there (shard_util.h).  Header-only: each
 * test is its own program.
 */
#ifndef FERRY_TESTS_SCRATCH_UTIL_H
#define FERRY_TESTS_SCRATCH_UTIL_H

#include "shard_util.h"

#include <stdio.h>

static char dir[256];

/* dir/name, in one of 8 buffers used in turn. */
static inline const char *path_in(const char *name)
{
	static char buf[8][512];
	static int at;
	char *p = buf[at++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

#endif
