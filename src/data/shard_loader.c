/*
 * Batches from llm.c token shards (see include/ferry/data.h).
 *
 * Every shard's header and length are validated at open, so ferry_loader_next
 * only does one pread of B*T+1 tokens into a staging buffer allocated at open:
 * no allocation and no stdio on the training path.  Batches advance by B*T
 * tokens, so the last target of one batch is the first input of the next
 * (llm.c does the same).
 *
 * Shuffled, the position is (epoch, rank k in the epoch's shard order, index
 * of the next sample in the shard's sample order).  The two orders are
 * Fisher-Yates shuffles driven by splitmix64 from a hash of (seed, epoch) and
 * (seed, epoch, shard), built into tables allocated by ferry_loader_shuffle
 * whenever the position enters another epoch or shard; a batch is B preads
 * of T+1 tokens.
 */
#include "ferry/data.h"
#include "core/error.h"
#include "data/shard_pack.h"
#include "core/file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "shard tokens are little-endian uint16/uint32 read without swapping");

#define SHARD_HEADER_BYTES ((off_t)FERRY_FILE_HEADER_BYTES)

struct shard {
	const char *path; /* points into ferry_loader.names */
	int64_t tokens;
	int width;        /* bytes per token: 2 (version 1) or 4 (versions 2, 3) */
	int version;
};

struct ferry_loader {
	struct shard *shards;
	int n_shards;
	char *names;       /* all paths, NUL-separated */
	int64_t per_batch; /* B*T */
	int vocab;
	uint32_t *stage;   /* B*T+1 tokens */
	int64_t total_tokens;
	/* Position of the next batch; always a shard with a full batch left. */
	int cur;
	int64_t off;
	int fd;            /* open shard, or -1 */
	int fd_shard;      /* which shard fd is */
	/* shuffled order (ferry_loader_shuffle): off counts samples */
	bool shuffled;
	int64_t T;
	uint64_t seed;
	int64_t epoch;
	int k;             /* rank of cur in order[] */
	int *order;        /* this epoch's shard order */
	int64_t order_epoch; /* the epoch order[] is for (-1: none) */
	uint32_t *perm;    /* cur's samples in this epoch's order */
	int perm_shard;    /* the shard and epoch perm[] is for */
	int64_t perm_epoch;
	/* the part read (ferry_loader_set_part): of each group of rows, rows
	 * first .. first + rows - 1 (all: group = rows = B) */
	int64_t group, first, rows;
	/* version 3 (packed): off counts rows (in order: of pack.rows;
	 * shuffled: of rperm) */
	bool packed, once;
	struct ferry_pack pack;
	uint8_t *flags;     /* T flags: a row's staging */
	uint32_t *rperm;    /* shuffled: this epoch's order of the rows */
	int64_t rperm_epoch;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static const int32_t shard_versions[] = { FERRY_SHARD_VERSION,
					   FERRY_SHARD_VERSION_U32,
					   FERRY_SHARD_VERSION_DOCS };
static const struct ferry_file_format shard_format = {
	.kind = "llm.c token shard",
	.header = "shard",
	.magic = FERRY_SHARD_MAGIC,
	.versions = shard_versions,
	.n_versions = sizeof(shard_versions) / sizeof(shard_versions[0]),
	.version_note = "uint16 or uint32 tokens, or uint32 tokens and their flags",
};

/* Validates one shard file; *tokens gets its token count, *width its
 * bytes per token. */
static ferry_status check_shard(const char *path, int64_t *tokens, int *width, int *version)
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
	*version = hdr[1];
	*width = hdr[1] == FERRY_SHARD_VERSION ? 2 : 4;
	/* version 3: a flags byte per token after the ids */
	expect = SHARD_HEADER_BYTES + (int64_t)hdr[2] * (*width + (hdr[1] == FERRY_SHARD_VERSION_DOCS));
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

/* ---- the shuffled order ------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The generator of one order: a hash of the seed, the epoch and which
 * order (-1 the shards', else a shard's samples). */
static uint64_t order_state(uint64_t seed, int64_t epoch, int64_t which)
{
	uint64_t s = seed;

	s = splitmix64(&s) ^ (uint64_t)epoch;
	s = splitmix64(&s) ^ (uint64_t)which;
	splitmix64(&s);
	return s;
}

/* A uniform draw in [0, n) (Lemire's multiply; the bias is below 2^-32 for
 * the table sizes here). */
static uint64_t draw_below(uint64_t *state, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix64(state) * n) >> 64);
}

static int64_t shard_samples(const struct ferry_loader *l, int shard)
{
	return (l->shards[shard].tokens - 1) / l->T;
}

/* order[] for the current epoch, unless it is that already. */
static void make_order(struct ferry_loader *l)
{
	uint64_t st;

	if (l->order_epoch == l->epoch)
		return;
	st = order_state(l->seed, l->epoch, -1);
	for (int i = 0; i < l->n_shards; i++)
		l->order[i] = i;
	for (int i = l->n_shards - 1; i > 0; i--) {
		int j = (int)draw_below(&st, (uint64_t)i + 1), t = l->order[i];

		l->order[i] = l->order[j];
		l->order[j] = t;
	}
	l->order_epoch = l->epoch;
}

/* perm[] for shard cur in the current epoch, unless it is that already. */
static void make_perm(struct ferry_loader *l)
{
	int64_t n = shard_samples(l, l->cur);
	uint64_t st;

	if (l->perm_shard == l->cur && l->perm_epoch == l->epoch)
		return;
	st = order_state(l->seed, l->epoch, l->cur);
	for (int64_t i = 0; i < n; i++)
		l->perm[i] = (uint32_t)i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)draw_below(&st, (uint64_t)i + 1);
		uint32_t t = l->perm[i];

		l->perm[i] = l->perm[j];
		l->perm[j] = t;
	}
	l->perm_shard = l->cur;
	l->perm_epoch = l->epoch;
}

/* Shuffled: forward, shard by shard of the epoch's order and epoch by epoch,
 * until B samples are left. */
static void settle_shuffled(struct ferry_loader *l)
{
	int64_t B = l->per_batch / l->T;

	make_order(l);
	l->cur = l->order[l->k];
	while (shard_samples(l, l->cur) - l->off < B) {
		l->off = 0;
		if (++l->k == l->n_shards) {
			l->k = 0;
			l->epoch++;
			make_order(l);
		}
		l->cur = l->order[l->k];
	}
	make_perm(l);
}

/* rperm[] for the current epoch, unless it is that already. */
static void make_row_perm(struct ferry_loader *l)
{
	const int64_t n = l->pack.n_rows;
	uint64_t st;

	if (l->rperm_epoch == l->epoch)
		return;
	st = order_state(l->seed, l->epoch, -2); /* (-1 is the shards' order) */
	for (int64_t i = 0; i < n; i++)
		l->rperm[i] = (uint32_t)i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)draw_below(&st, (uint64_t)i + 1);
		uint32_t t = l->rperm[i];

		l->rperm[i] = l->rperm[j];
		l->rperm[j] = t;
	}
	l->rperm_epoch = l->epoch;
}

/* Packed: the rows left before the end wait for the next pass (once:
 * nothing moves). */
static void settle_packed(struct ferry_loader *l)
{
	const int64_t B = l->per_batch / l->T;

	l->cur = 0;
	if (l->once)
		return;
	if (l->shuffled)
		make_row_perm(l);
	if (l->pack.n_rows - l->off >= B)
		return;
	l->off = 0;
	if (l->shuffled) {
		l->epoch++;
		make_row_perm(l);
	}
}

/* Moves the position forward, shard by shard (wrapping), until a full batch
 * of per_batch+1 tokens is left.  open() guaranteed such a shard exists. */
static void settle(struct ferry_loader *l)
{
	int i;

	if (l->packed) {
		settle_packed(l);
		return;
	}
	if (l->shuffled) {
		settle_shuffled(l);
		return;
	}
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
	l->stage = ferry_malloc(((size_t)l->per_batch + 1) * sizeof(uint32_t));
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
		st = check_shard(p - len, &l->shards[i].tokens,
				 &l->shards[i].width, &l->shards[i].version);
		if (st)
			goto out;
		if ((l->shards[i].version == FERRY_SHARD_VERSION_DOCS) !=
		    (l->shards[0].version == FERRY_SHARD_VERSION_DOCS)) {
			st = ferry_error(FERRY_ERR_FORMAT,
					 "'%s' mixes version 3 (packed documents) with versions 1 and 2 (token "
					 "streams): %s is version %d, %s version %d", glob_pattern,
					 l->shards[0].path, l->shards[0].version, l->shards[i].path,
					 l->shards[i].version);
			goto out;
		}
		l->total_tokens += l->shards[i].tokens;
		if (l->shards[i].tokens > *largest)
			*largest = l->shards[i].tokens;
	}
out:
	ferry_free(sorted);
	return st;
}

/* Version 3: the shards' documents packed into rows, and the staging of
 * one row's flags; at least `need` rows. */
static ferry_status pack_shards(struct ferry_loader *l, const char *glob_pattern, bool truncate, int64_t need)
{
	ferry_status st = FERRY_OK;

	l->packed = true;
	l->flags = ferry_malloc((size_t)l->T);
	if (!l->flags)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory opening '%s'", glob_pattern);
	for (int i = 0; i < l->n_shards && !st; i++)
		st = ferry_pack_scan(&l->pack, l->shards[i].path, i, l->shards[i].tokens, (int)l->T, truncate);
	if (!st && l->pack.n_rows > UINT32_MAX)
		st = ferry_error(FERRY_ERR_INVALID, "'%s': %lld rows of %lld tokens, more than 2^32", glob_pattern,
				 (long long)l->pack.n_rows, (long long)l->T);
	if (!st && l->pack.n_rows < need)
		st = ferry_error(FERRY_ERR_INVALID,
				 "'%s': its documents fill %lld rows of %lld tokens, fewer than the batch's %lld",
				 glob_pattern, (long long)l->pack.n_rows, (long long)l->T, (long long)need);
	return st;
}

ferry_status ferry_loader_open(const char *glob_pattern, int B, int T,
			       int vocab, ferry_loader_t *out)
{
	return ferry_loader_open_opts(glob_pattern, B, T, vocab, NULL, out);
}

ferry_status ferry_loader_open_opts(const char *glob_pattern, int B, int T, int vocab,
				    const struct ferry_loader_opts *opts, ferry_loader_t *out)
{
	const struct ferry_loader_opts none = { 0 };
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
	l->order_epoch = -1;
	l->perm_shard = -1;
	l->n_shards = (int)g.gl_pathc;
	l->per_batch = (int64_t)B * T;
	l->T = T;
	l->group = l->rows = B;
	l->vocab = vocab;
	if (!opts)
		opts = &none;
	l->rperm_epoch = -1;
	st = add_shards(l, &g, glob_pattern, &largest);
	if (!st && l->shards[0].version == FERRY_SHARD_VERSION_DOCS) {
		l->once = opts->once;
		st = pack_shards(l, glob_pattern, opts->truncate, opts->once ? 1 : B);
	} else if (!st && largest < l->per_batch + 1)
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
	ferry_free(l->flags);
	ferry_free(l->rperm);
	ferry_pack_free(&l->pack);
	ferry_free(l->order);
	ferry_free(l->perm);
	ferry_free(l->names);
	ferry_free(l->shards);
	ferry_free(l);
}

/* The descriptor of shard i, kept open until another is read. */
static ferry_status open_shard(struct ferry_loader *l, int i)
{
	const struct shard *sh = &l->shards[i];

	if (l->fd_shard == i)
		return FERRY_OK;
	if (l->fd >= 0)
		close(l->fd);
	l->fd_shard = -1;
	l->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
	if (l->fd < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", sh->path,
				   strerror(errno));
	l->fd_shard = i;
	return FERRY_OK;
}

/* The descriptor of shard cur, opened when the position entered it. */
static ferry_status open_current(struct ferry_loader *l)
{
	return open_shard(l, l->cur);
}

/* uint16 tokens read into the front of dst, widened in place: back to
 * front, so no token is overwritten before it is read. */
static void widen(uint32_t *dst, int64_t n)
{
	for (int64_t i = n - 1; i >= 0; i--) {
		uint16_t v;

		memcpy(&v, (char *)dst + 2 * i, sizeof(v));
		dst[i] = v;
	}
}

/* n tokens of shard cur from token `at` into dst, each checked < vocab. */
static ferry_status read_tokens(struct ferry_loader *l, int64_t at,
				uint32_t *dst, int64_t n)
{
	const struct shard *sh = &l->shards[l->cur];
	size_t want = (size_t)n * (size_t)sh->width, got = 0;

	while (got < want) {
		ssize_t r = pread(l->fd, (char *)dst + got, want - got,
				  SHARD_HEADER_BYTES + (off_t)at * sh->width +
					  (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ferry_error(FERRY_ERR_IO,
					   "%s: error reading tokens at %lld: %s",
					   sh->path, (long long)at,
					   strerror(errno));
		if (r == 0)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: file shrank: no tokens at %lld (checked at open)",
					   sh->path,
					   (long long)(at + (int64_t)got / sh->width));
		got += (size_t)r;
	}
	if (sh->width == 2)
		widen(dst, n);
	for (int64_t i = 0; i < n; i++)
		if (dst[i] >= (uint32_t)l->vocab)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: token %u at index %lld is >= vocab %d",
					   sh->path, dst[i], (long long)(at + i),
					   l->vocab);
	return FERRY_OK;
}

/* In order: B*T+1 consecutive tokens from off, of which each group's
 * part (its rows and one token more) is read. */
static ferry_status next_in_order(struct ferry_loader *l, int32_t *inputs,
				  int32_t *targets)
{
	const int64_t T = l->T, n = l->rows * T;

	for (int64_t g = 0; g < l->per_batch / T / l->group; g++) {
		ferry_status st = read_tokens(l, l->off + (g * l->group + l->first) * T,
					      l->stage, n + 1);

		if (st)
			return st;
		for (int64_t i = 0; i < n; i++) {
			inputs[g * n + i] = l->stage[i];
			targets[g * n + i] = l->stage[i + 1];
		}
	}
	l->off += l->per_batch;
	return FERRY_OK;
}

/* Shuffled: the next B samples of the shard's order, one row each (of
 * each group, its part's). */
static ferry_status next_shuffled(struct ferry_loader *l, int32_t *inputs,
				  int32_t *targets)
{
	int64_t T = l->T, B = l->per_batch / T, out = 0;
	uint32_t *row = l->stage;
	ferry_status st;

	for (int64_t b = 0; b < B; b++) {
		if (b % l->group < l->first || b % l->group >= l->first + l->rows)
			continue;
		st = read_tokens(l, (int64_t)l->perm[l->off + b] * T, row, T + 1);
		if (st)
			return st;
		for (int64_t t = 0; t < T; t++) {
			inputs[out * T + t] = row[t];
			targets[out * T + t] = row[t + 1];
		}
		out++;
	}
	l->off += B;
	return FERRY_OK;
}

/* Packed: the next B rows (of each group, its part's); once, past the
 * last row, padding rows. */
static ferry_status next_packed_rows(struct ferry_loader *l, int32_t *inputs, int32_t *targets,
				     int32_t *positions)
{
	const int64_t T = l->T, B = l->per_batch / T;
	int64_t out = 0;
	ferry_status st = FERRY_OK;

	if (l->once && l->off >= l->pack.n_rows)
		return ferry_error(FERRY_ERR_INVALID, "data read once: all %lld rows were read",
				   (long long)l->pack.n_rows);
	for (int64_t b = 0; b < B && !st; b++) {
		const struct ferry_pack_row *row = NULL;
		int64_t r = l->off + b;

		if (b % l->group < l->first || b % l->group >= l->first + l->rows)
			continue;
		if (r < l->pack.n_rows)
			row = &l->pack.rows[l->shuffled ? l->rperm[r] : r];
		if (row && (st = open_shard(l, row->shard)))
			break;
		st = ferry_pack_read(row, l->fd, row ? l->shards[row->shard].path : "", row ? l->shards[row->shard].tokens : 0,
				     (int)T, l->vocab, l->stage, l->flags, inputs + out * T, targets + out * T,
				     positions + out * T);
		out++;
	}
	if (!st)
		l->off += B;
	return st;
}

ferry_status ferry_loader_set_part(ferry_loader_t l, int group, int first, int rows)
{
	int64_t B = l ? l->per_batch / l->T : 0;

	if (!l || group < 1 || B % group || first < 0 || rows < 1 || first + rows > group)
		return ferry_error(FERRY_ERR_INVALID,
				   "loader part: rows %d to %d of every %d of a %lld-row batch: out of range",
				   first, first + rows - 1, group, (long long)B);
	l->group = group;
	l->first = first;
	l->rows = rows;
	return FERRY_OK;
}

ferry_status ferry_loader_next(ferry_loader_t l, int32_t *inputs,
			       int32_t *targets)
{
	return ferry_loader_next_packed(l, inputs, targets, NULL);
}

ferry_status ferry_loader_next_packed(ferry_loader_t l, int32_t *inputs, int32_t *targets, int32_t *positions)
{
	ferry_status st;

	if (!l || !inputs || !targets)
		return ferry_error(FERRY_ERR_INVALID,
				   "loader next: NULL loader or batch buffer");
	if (l->packed) {
		if (!positions)
			return ferry_error(FERRY_ERR_INVALID, "version-3 data (packed documents) is read with its "
					   "positions (ferry_loader_next_packed)");
		st = next_packed_rows(l, inputs, targets, positions);
		if (!st)
			settle(l);
		return st;
	}
	st = open_current(l);
	if (!st)
		st = l->shuffled ? next_shuffled(l, inputs, targets) :
				   next_in_order(l, inputs, targets);
	if (!st)
		settle(l);
	if (!st && positions) {
		const int64_t n = l->per_batch / l->group * l->rows;

		for (int64_t i = 0; i < n; i++)
			positions[i] = (int32_t)(i % l->T);
	}
	return st;
}

bool ferry_data_is_packed(const char *glob_pattern)
{
	int32_t hdr[FERRY_FILE_HEADER_INTS];
	const char *first = NULL;
	bool packed = false;
	int64_t size;
	glob_t g;
	int fd;

	if (!glob_pattern || glob(glob_pattern, 0, NULL, &g) != 0)
		return false;
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (!first || strcmp(g.gl_pathv[i], first) < 0)
			first = g.gl_pathv[i];
	if (first && ferry_file_header_open(first, &shard_format, hdr, &fd, &size) == FERRY_OK) {
		packed = hdr[1] == FERRY_SHARD_VERSION_DOCS;
		close(fd);
	}
	globfree(&g);
	return packed;
}

bool ferry_loader_packed(ferry_loader_t l)
{
	return l && l->packed;
}

int64_t ferry_loader_rows(ferry_loader_t l)
{
	return l && l->packed ? l->pack.n_rows : 0;
}

void ferry_loader_position(ferry_loader_t l, int64_t *shard, int64_t *offset)
{
	if (shard)
		*shard = l ? l->cur : 0;
	if (offset)
		*offset = l ? l->off : 0;
}

int64_t ferry_loader_epoch(ferry_loader_t l)
{
	return l && l->shuffled ? l->epoch : 0;
}

bool ferry_loader_shuffled(ferry_loader_t l)
{
	return l && l->shuffled;
}

ferry_status ferry_loader_seek_epoch(ferry_loader_t l, int64_t epoch,
				     int64_t shard, int64_t offset)
{
	int64_t end;

	if (!l)
		return ferry_error(FERRY_ERR_INVALID, "loader seek: NULL loader");
	if (epoch < 0 || (epoch > 0 && !l->shuffled))
		return ferry_error(FERRY_ERR_INVALID,
				   "data position: epoch %lld of %s data",
				   (long long)epoch,
				   l->shuffled ? "shuffled" : "in-order");
	if (l->packed) { /* shard 0, offset a row */
		if (shard != 0 || offset < 0 || offset > l->pack.n_rows)
			return ferry_error(FERRY_ERR_INVALID,
					   "data position: shard %lld, row %lld out of range for packed data "
					   "(shard 0, %lld rows)", (long long)shard, (long long)offset,
					   (long long)l->pack.n_rows);
		l->off = offset;
		l->epoch = epoch;
		settle(l);
		return FERRY_OK;
	}
	if (shard < 0 || shard >= l->n_shards)
		return ferry_error(FERRY_ERR_INVALID,
				   "data position: shard %lld out of range (%d shards)",
				   (long long)shard, l->n_shards);
	end = l->shuffled ? shard_samples(l, (int)shard) :
			    l->shards[shard].tokens;
	if (offset < 0 || offset > end)
		return ferry_error(FERRY_ERR_INVALID,
				   "data position: offset %lld out of range for %s (%lld %s)",
				   (long long)offset, l->shards[shard].path,
				   (long long)end,
				   l->shuffled ? "samples" : "tokens");
	l->cur = (int)shard;
	l->off = offset;
	if (l->shuffled) {
		l->epoch = epoch;
		make_order(l);
		for (l->k = 0; l->order[l->k] != l->cur; l->k++)
			;
	}
	settle(l);
	return FERRY_OK;
}

ferry_status ferry_loader_seek(ferry_loader_t l, int64_t shard, int64_t offset)
{
	return ferry_loader_seek_epoch(l, ferry_loader_epoch(l), shard, offset);
}

void ferry_loader_rewind(ferry_loader_t l)
{
	if (!l)
		return;
	l->cur = 0;
	l->off = 0;
	l->epoch = 0;
	l->k = 0;
	settle(l);
}

ferry_status ferry_loader_shuffle(ferry_loader_t l, uint64_t seed)
{
	int64_t most = 0;

	if (!l)
		return ferry_error(FERRY_ERR_INVALID, "loader shuffle: NULL loader");
	if (l->packed) {
		if (l->once)
			return ferry_error(FERRY_ERR_INVALID, "loader shuffle: data read once is read in order");
		if (!l->rperm) {
			l->rperm = ferry_malloc((size_t)l->pack.n_rows * sizeof(*l->rperm));
			if (!l->rperm)
				return ferry_error(FERRY_ERR_NOMEM, "out of memory for the shuffled order of %lld rows",
						   (long long)l->pack.n_rows);
		}
		l->shuffled = true;
		l->seed = seed;
		l->rperm_epoch = -1;
		ferry_loader_rewind(l);
		return FERRY_OK;
	}
	for (int i = 0; i < l->n_shards; i++)
		if (shard_samples(l, i) > most)
			most = shard_samples(l, i);
	/* (the staging buffer of B*T+1 tokens holds a sample's T+1) */
	if (!l->shuffled) {
		int *order = ferry_malloc((size_t)l->n_shards * sizeof(*order));
		uint32_t *perm = ferry_malloc((size_t)most * sizeof(*perm));

		if (!order || !perm) {
			ferry_free(order);
			ferry_free(perm);
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory for the shuffled order of %d shards",
					   l->n_shards);
		}
		l->order = order;
		l->perm = perm;
		l->shuffled = true;
	}
	l->seed = seed;
	l->order_epoch = l->perm_epoch = -1;
	l->perm_shard = -1;
	ferry_loader_rewind(l);
	return FERRY_OK;
}

int ferry_loader_num_shards(ferry_loader_t l)
{
	return l ? l->n_shards : 0;
}

int64_t ferry_loader_num_tokens(ferry_loader_t l)
{
	return l ? l->total_tokens : 0;
}
