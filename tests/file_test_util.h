/*
 * Helpers shared by the file-format tests (checkpoints, shards): a CHECK
 * that counts failures, checks of a call's status and message, and a
 * scratch directory with paths in it.  Header-only: each test is its own
 * program.
 */
#ifndef FERRY_TESTS_FILE_TEST_UTIL_H
#define FERRY_TESTS_FILE_TEST_UTIL_H

#include "ferry/ferry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>

static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                            \
			failures++;                                          \
		}                                                            \
	} while (0)

/* A call must fail with `want` and a message that mentions `needle`. */
#define CHECK_ERR(expr, want, needle)                                        \
	do {                                                                 \
		ferry_status got_ = (expr);                                  \
		if (got_ != (want)) {                                        \
			fprintf(stderr,                                      \
				"%s:%d: %s returned %d (%s), want %d; msg: %s\n", \
				__FILE__, __LINE__, #expr, got_,             \
				ferry_status_name(got_), (want),             \
				ferry_last_error());                         \
			failures++;                                          \
		} else if (!strstr(ferry_last_error(), (needle))) {          \
			fprintf(stderr,                                      \
				"%s:%d: message '%s' lacks '%s'\n", __FILE__, \
				__LINE__, ferry_last_error(), (needle));     \
			failures++;                                          \
		}                                                            \
	} while (0)

#define CHECK_OK(expr)                                                       \
	do {                                                                 \
		ferry_status got_ = (expr);                                  \
		if (got_ != FERRY_OK) {                                      \
			fprintf(stderr, "%s:%d: %s failed: %d %s\n", __FILE__, \
				__LINE__, #expr, got_, ferry_last_error());  \
			failures++;                                          \
		}                                                            \
	} while (0)

static char dir[4096];

/* Path of a file in the test directory; each result stays valid. */
static const char *tpath(const char *name)
{
	static char buf[512][4200];
	static int at;

	if (at == 512) {
		fprintf(stderr, "tpath: out of slots\n");
		exit(1);
	}
	snprintf(buf[at], sizeof(buf[0]), "%s/%s", dir, name);
	return buf[at++];
}

static int exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

/* Creates the scratch directory $FERRY_TEST_TMP (or /tmp)/NAME.XXXXXX. */
static void scratch_dir_make(const char *name)
{
	const char *base = getenv("FERRY_TEST_TMP");

	snprintf(dir, sizeof(dir), "%s/%s.XXXXXX", base && *base ? base : "/tmp", name);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
		exit(1);
	}
}

static int scratch_remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

/* The test's exit code; the scratch directory is removed when all passed
 * and kept (and named) when something failed. */
static int scratch_finish(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d failure(s); files kept in %s\n", name, failures, dir);
		return 1;
	}
	nftw(dir, scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	printf("%s: ok\n", name);
	return 0;
}

#endif
