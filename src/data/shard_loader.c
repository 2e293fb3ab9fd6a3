/*
 * Batches from llm.c token shards (see include/ferry/data.h).
 *
 * Every shard's header and length are validated at open, so ferry_loader_next
 * only does one pread of B*T+1 tokens into a staging buffer allocated at open:
 * no allocation and no stdio on the training path.  Batches advance by B*T
 * tokens, so the last target of one batch is the first input of the next
 * (llm.c does the same).
 */
#include "ferry/data.h"
#include "core/error.h"
#include "core/file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "shard tokens are little-endian uint16 read without swapping");

#define SHARD_HEADER_BYTES ((off_t)FERRY_FILE_HEADER_BYTES)

struct shard {
	const char *path; /* points into ferry_loader.names */
	int64_t tokens;
};

struct ferry_loader {
	struct shard *shards;
	int n_shards;
	char *names;       /* all paths, NUL-separated */
	int64_t per_batch; /* B*T */
	int vocab;
	uint16_t *stage;   /* B*T+1 tokens */
	int64_t total_tokens;
	/* Position of the next batch; always a shard with a full batch left. */
	int cur;
	int64_t off;
	int fd;            /* open shard, or -1 */
	int fd_shard;      /* which shard fd is */
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static const int32_t shard_versions[] = { FERRY_SHARD_VERSION };
static const struct ferry_file_format shard_format = {
	.kind = "llm.c token shard",
	.header = "shard",
	.magic = FERRY_SHARD_MAGIC,
	.versions = shard_versions,
	.n_versions = sizeof(shard_versions) / sizeof(shard_versions[0]),
	.version_note = "uint16 tokens",
};

/* Validates one shard file; *tokens gets its token count. */
static ferry_status check_shard(const char *path, int64_t *tokens)
{
	int32_t hdr[FERRY_FILE_HEADER_INTS];
	ferry_status st;
	int64_t size = 0, expect;
	int fd;

	st = ferry_file_header_open(path, &shard_format, hdr, &fd, &size);
	if (st)
		return st;
	if (hdr[2] < 0) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: negative token count %d in header", path,
				 hdr[2]);
		goto out;
	}
	expect = SHARD_HEADER_BYTES + (int64_t)hdr[2] * 2;
	if (size < expect) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: truncated: header says %d tokens (%lld bytes), file has %lld bytes",
				 path, hdr[2], (long long)expect,
				 (long long)size);
		goto out;
	}
	if (size > expect) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: %lld trailing bytes after the %d tokens the header announces",
				 path, (long long)(size - expect), hdr[2]);
		goto out;
	}
	*tokens = hdr[2];
out:
	close(fd);
	return st;
}

/* Moves the position forward, shard by shard (wrapping), until a full batch
 * of per_batch+1 tokens is left.  open() guaranteed such a shard exists. */
static void settle(struct ferry_loader *l)
{
	int i;

	for (i = 0; i <= l->n_shards; i++) {
		if (l->shards[l->cur].tokens - l->off >= l->per_batch + 1)
			return;
		l->cur = (l->cur + 1) % l->n_shards;
		l->off = 0;
	}
}

static ferry_status check_open_args(const char *glob_pattern, int B, int T,
				    int vocab)
{
	if (!glob_pattern || !*glob_pattern)
		return ferry_error(FERRY_ERR_INVALID, "empty data file pattern");
	if (B <= 0 || T <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "batch size (%d) and sequence length (%d) must be positive",
				   B, T);
	/* Callers index batches with int: keep B*T+1 within int32. */
	if ((int64_t)B * T > INT32_MAX - 1)
		return ferry_error(FERRY_ERR_INVALID,
				   "batch of B=%d x T=%d tokens is too large", B,
				   T);
	if (vocab <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "vocab must be positive (got %d)", vocab);
	return FERRY_OK;
}

/* The files matching glob_pattern into g (which the caller globfrees,
 * success or not): at least one, at most INT_MAX. */
static ferry_status glob_shards(const char *glob_pattern, glob_t *g)
{
	int grc;

	memset(g, 0, sizeof(*g));
	grc = glob(glob_pattern, 0, NULL, g);
	if (grc == GLOB_NOMATCH || (grc == 0 && g->gl_pathc == 0))
		return ferry_error(FERRY_ERR_IO, "no files match '%s'",
				   glob_pattern);
	if (grc == GLOB_NOSPACE)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory matching '%s'",
				   glob_pattern);
	if (grc != 0)
		return ferry_error(FERRY_ERR_IO, "cannot read directories matching '%s'",
				   glob_pattern);
	if (g->gl_pathc > INT_MAX)
		return ferry_error(FERRY_ERR_INVALID, "too many files match '%s'",
				   glob_pattern);
	return FERRY_OK;
}

/* Allocates l's shard table, names and staging buffer, and fills the table
 * with the files of g in byte order, each validated, and the total count.
 * *largest: the most tokens one shard has. */
static ferry_status add_shards(struct ferry_loader *l, const glob_t *g,
			       const char *glob_pattern, int64_t *largest)
{
	size_t i, names_len = 0;
	char **sorted;
	ferry_status st = FERRY_OK;
	char *p;

	/* Sort ourselves: glob's order follows the locale's collation. */
	sorted = ferry_malloc(g->gl_pathc * sizeof(*sorted));
	l->shards = ferry_calloc(g->gl_pathc, sizeof(*l->shards));
	l->stage = ferry_malloc(((size_t)l->per_batch + 1) * sizeof(uint16_t));
	for (i = 0; i < g->gl_pathc; i++)
		names_len += strlen(g->gl_pathv[i]) + 1;
	l->names = ferry_malloc(names_len);
	if (!sorted || !l->shards || !l->stage || !l->names) {
		st = ferry_error(FERRY_ERR_NOMEM, "out of memory opening '%s'",
				 glob_pattern);
		goto out;
	}
	memcpy(sorted, g->gl_pathv, g->gl_pathc * sizeof(*sorted));
	qsort(sorted, g->gl_pathc, sizeof(*sorted), cmp_str);

	p = l->names;
	for (i = 0; i < g->gl_pathc; i++) {
		size_t len = strlen(sorted[i]) + 1;

		memcpy(p, sorted[i], len);
		l->shards[i].path = p;
		p += len;
		st = check_shard(p - len, &l->shards[i].tokens);
		if (st)
			goto out;
		l->total_tokens += l->shards[i].tokens;
		if (l->shards[i].tokens > *largest)
			*largest = l->shards[i].tokens;
	}
out:
	ferry_free(sorted);
	return st;
}

ferry_status ferry_loader_open(const char *glob_pattern, int B, int T,
			       int vocab, ferry_loader_t *out)
{
	struct ferry_loader *l = NULL;
	int64_t largest = 0;
	ferry_status st;
	glob_t g;

	if (!out)
		return ferry_error(FERRY_ERR_INVALID, "loader output is NULL");
	*out = NULL;
	st = check_open_args(glob_pattern, B, T, vocab);
	if (st)
		return st;
	st = glob_shards(glob_pattern, &g);
	if (st)
		goto out;
	l = ferry_calloc(1, sizeof(*l));
	if (!l) {
		st = ferry_error(FERRY_ERR_NOMEM, "out of memory opening '%s'",
				 glob_pattern);
		goto out;
	}
	l->fd = -1;
	l->fd_shard = -1;
	l->n_shards = (int)g.gl_pathc;
	l->per_batch = (int64_t)B * T;
	l->vocab = vocab;
	st = add_shards(l, &g, glob_pattern, &largest);
	if (!st && largest < l->per_batch + 1)
		st = ferry_error(FERRY_ERR_INVALID,
				 "'%s': no shard has the %lld tokens one batch needs (B*T+1, B=%d, T=%d); the largest has %lld",
				 glob_pattern, (long long)l->per_batch + 1, B, T,
				 (long long)largest);
	if (st) {
		ferry_loader_free(l);
		goto out;
	}
	settle(l);
	*out = l;
out:
	globfree(&g);
	return st;
}

void ferry_loader_free(ferry_loader_t l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	ferry_free(l->stage);
	ferry_free(l->names);
	ferry_free(l->shards);
	ferry_free(l);
}

ferry_status ferry_loader_next(ferry_loader_t l, int32_t *inputs,
			       int32_t *targets)
{
	const struct shard *sh;
	size_t want, got = 0;
	int64_t i, n;

	if (!l || !inputs || !targets)
		return ferry_error(FERRY_ERR_INVALID,
				   "loader next: NULL loader or batch buffer");
	sh = &l->shards[l->cur];
	if (l->fd_shard != l->cur) {
		if (l->fd >= 0)
			close(l->fd);
		l->fd_shard = -1;
		l->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
		if (l->fd < 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s",
					   sh->path, strerror(errno));
		l->fd_shard = l->cur;
	}

	n = l->per_batch;
	want = ((size_t)n + 1) * sizeof(uint16_t);
	while (got < want) {
		ssize_t r = pread(l->fd, (char *)l->stage + got, want - got,
				  SHARD_HEADER_BYTES +
					  (off_t)l->off * 2 + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ferry_error(FERRY_ERR_IO,
					   "%s: error reading tokens at %lld: %s",
					   sh->path, (long long)l->off,
					   strerror(errno));
		if (r == 0)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: file shrank: no tokens at %lld (checked at open)",
					   sh->path,
					   (long long)(l->off + (int64_t)got / 2));
		got += (size_t)r;
	}

	for (i = 0; i <= n; i++) {
		if (l->stage[i] >= l->vocab)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: token %u at index %lld is >= vocab %d",
					   sh->path, l->stage[i],
					   (long long)(l->off + i), l->vocab);
	}
	for (i = 0; i < n; i++) {
		inputs[i] = l->stage[i];
		targets[i] = l->stage[i + 1];
	}
	l->off += n;
	settle(l);
	return FERRY_OK;
}

void ferry_loader_position(ferry_loader_t l, int64_t *shard, int64_t *offset)
{
	if (shard)
		*shard = l ? l->cur : 0;
	if (offset)
		*offset = l ? l->off : 0;
}

ferry_status ferry_loader_seek(ferry_loader_t l, int64_t shard, int64_t offset)
{
	if (!l)
		return ferry_error(FERRY_ERR_INVALID, "loader seek: NULL loader");
	if (shard < 0 || shard >= l->n_shards)
		return ferry_error(FERRY_ERR_INVALID,
				   "data position: shard %lld out of range (%d shards)",
				   (long long)shard, l->n_shards);
	if (offset < 0 || offset > l->shards[shard].tokens)
		return ferry_error(FERRY_ERR_INVALID,
				   "data position: offset %lld out of range for %s (%lld tokens)",
				   (long long)offset, l->shards[shard].path,
				   (long long)l->shards[shard].tokens);
	l->cur = (int)shard;
	l->off = offset;
	settle(l);
	return FERRY_OK;
}

void ferry_loader_rewind(ferry_loader_t l)
{
	if (!l)
		return;
	l->cur = 0;
	l->off = 0;
	settle(l);
}

int ferry_loader_num_shards(ferry_loader_t l)
{
	return l ? l->n_shards : 0;
}

int64_t ferry_loader_num_tokens(ferry_loader_t l)
{
	return l ? l->total_tokens : 0;
}
