/*
 * Text files -> byte-level token shards (see include/ferry/data.h).
 *
 * Input is streamed in fixed chunks, so files of any size work with a few
 * hundred KiB of memory.  Rules:
 *  - every byte is a token 0..255; each non-empty document is preceded by
 *    FERRY_BYTE_EOT;
 *  - a document ends at the end of each input file and, with doc_sep, at
 *    every line equal to doc_sep (a trailing '\r' ignored); separator lines
 *    are dropped, all other bytes (newlines included) are kept;
 *  - documents without a single byte are skipped and not counted;
 *  - documents are numbered 1, 2, ... in input order; with val_fraction f > 0
 *    and k = max(1, round(1/f)), document number i goes to val when
 *    i > 1 and i % k == 0 (the k-th, 2k-th, ...), to train otherwise: the
 *    first document always trains;
 *  - each split is cut into shards of at most shard_tokens tokens; documents
 *    may straddle shards.  Each shard is written as "<name>.tmp.<pid>" and
 *    fsynced; only when every input was read and every shard is complete
 *    are they renamed into place, so a failure (an unreadable input, a full
 *    disk) leaves the previous corpus of that prefix as it was, and removes
 *    this run's temporaries.  Then stale higher-numbered shards of an
 *    earlier run with the same prefix are removed so a glob sees only this
 *    run's output.
 */
#include "ferry/data.h"
#include "core/error.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "shard files are written little-endian without swapping");

#define SHARD_HEADER_INTS 256
#define WRITE_BUF_TOKENS 8192
#define READ_BUF_BYTES 65536
#define SEP_MAX 4096 /* longest doc_sep + its '\r' */

/* One output split (train or val): the shard being written, buffered. */
struct writer {
	const char *prefix;
	const char *split;   /* "train" / "val" */
	long shard_tokens;
	FILE *f;             /* open shard, or NULL */
	int index;           /* number of the open (or next) shard */
	long in_shard;       /* tokens in the open shard */
	long total;
	uint16_t buf[WRITE_BUF_TOKENS];
	int n_buf;
	char path[PATH_MAX];
	char tmp[PATH_MAX];
};

static ferry_status shard_name(const struct writer *w, int index,
			       char *out, size_t size, const char *suffix)
{
	int n = snprintf(out, size, "%s_%s_%06d.bin%s", w->prefix, w->split,
			 index, suffix);

	if (n < 0 || (size_t)n >= size)
		return ferry_error(FERRY_ERR_INVALID,
				   "output prefix '%s' is too long", w->prefix);
	return FERRY_OK;
}

/* The temporary shard `index` is written to, until the commit. */
static ferry_status tmp_name(const struct writer *w, int index, char *out, size_t size)
{
	char suffix[32];

	snprintf(suffix, sizeof(suffix), ".tmp.%ld", (long)getpid());
	return shard_name(w, index, out, size, suffix);
}

static ferry_status writer_open(struct writer *w)
{
	int32_t hdr[SHARD_HEADER_INTS] = { 0 };
	ferry_status st;

	st = shard_name(w, w->index, w->path, sizeof(w->path), "");
	if (!st)
		st = tmp_name(w, w->index, w->tmp, sizeof(w->tmp));
	if (st)
		return st;
	w->f = fopen(w->tmp, "wb");
	if (!w->f)
		return ferry_error(FERRY_ERR_IO, "%s: cannot create: %s", w->tmp,
				   strerror(errno));
	/* Placeholder header; the token count is filled in at close. */
	if (fwrite(hdr, sizeof(hdr), 1, w->f) != 1) {
		st = ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				 strerror(errno));
		fclose(w->f);
		w->f = NULL;
		remove(w->tmp);
		return st;
	}
	w->in_shard = 0;
	return FERRY_OK;
}

static ferry_status writer_flush(struct writer *w)
{
	if (w->n_buf &&
	    fwrite(w->buf, sizeof(uint16_t), (size_t)w->n_buf, w->f) !=
		    (size_t)w->n_buf)
		return ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				   strerror(errno));
	w->n_buf = 0;
	return FERRY_OK;
}

/* Drops the open shard's tmp file (after an error). */
static void writer_abort(struct writer *w)
{
	if (!w->f)
		return;
	fclose(w->f);
	w->f = NULL;
	remove(w->tmp);
}

/* Completes the open shard: header, flush, fsync, close; it stays a
 * temporary until writer_commit. */
static ferry_status writer_close(struct writer *w)
{
	int32_t hdr[SHARD_HEADER_INTS] = { 0 };
	ferry_status st;
	int rc;

	if (!w->f)
		return FERRY_OK;
	st = writer_flush(w);
	if (st)
		goto fail;
	hdr[0] = FERRY_SHARD_MAGIC;
	hdr[1] = FERRY_SHARD_VERSION;
	hdr[2] = (int32_t)w->in_shard;
	if (fseek(w->f, 0, SEEK_SET) != 0 ||
	    fwrite(hdr, sizeof(hdr), 1, w->f) != 1 || fflush(w->f) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				 strerror(errno));
		goto fail;
	}
	if (fsync(fileno(w->f)) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", w->tmp,
				 strerror(errno));
		goto fail;
	}
	rc = fclose(w->f);
	w->f = NULL;
	if (rc != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: close failed: %s", w->tmp,
				 strerror(errno));
		remove(w->tmp);
		return st;
	}
	w->index++;
	return FERRY_OK;
fail:
	writer_abort(w);
	return st;
}

static ferry_status writer_put(struct writer *w, uint16_t tok)
{
	ferry_status st;

	if (!w->f) {
		st = writer_open(w);
		if (st)
			return st;
	}
	w->buf[w->n_buf++] = tok;
	w->in_shard++;
	w->total++;
	if (w->n_buf == WRITE_BUF_TOKENS) {
		st = writer_flush(w);
		if (st)
			return st;
	}
	if (w->in_shard == w->shard_tokens)
		return writer_close(w);
	return FERRY_OK;
}

/* Removes this run's temporaries: the open shard's and the completed ones. */
static void writer_discard(struct writer *w)
{
	char tmp[PATH_MAX];

	writer_abort(w);
	for (int i = 0; i < w->index; i++)
		if (!tmp_name(w, i, tmp, sizeof(tmp)))
			remove(tmp);
	w->index = 0;
}

/* Renames the completed shards into place, from the first; a failure
 * stops there (the caller discards the rest). */
static ferry_status writer_commit(struct writer *w, int *done)
{
	char tmp[PATH_MAX], path[PATH_MAX];

	for (*done = 0; *done < w->index; (*done)++) {
		if (tmp_name(w, *done, tmp, sizeof(tmp)) ||
		    shard_name(w, *done, path, sizeof(path), ""))
			return FERRY_ERR_INVALID;
		if (rename(tmp, path) != 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot rename to %s: %s",
					   tmp, path, strerror(errno));
	}
	return FERRY_OK;
}

/* Removes "<prefix>_<split>_N.bin" for N = from, from+1, ... while they exist:
 * leftovers of an earlier, longer run would otherwise join this run's glob. */
static void remove_stale(const struct writer *w, int from)
{
	char path[PATH_MAX];
	int i;

	for (i = from; i < INT_MAX; i++) {
		if (shard_name(w, i, path, sizeof(path), ""))
			return;
		if (remove(path) != 0)
			return;
	}
}

/* Document assembly across both writers. */
struct builder {
	struct writer *train, *val;
	struct writer *cur; /* split of the open document, NULL between docs */
	long k;             /* every k-th document to val; 0: none */
	long documents;
	/* doc_sep matching state for the current line */
	const char *sep;
	size_t sep_len;
	char pend[SEP_MAX];  /* start of the line while it may still match */
	size_t n_pend;
	int matching;        /* at a line start, or still equal to sep so far */
};

static ferry_status emit(struct builder *b, const unsigned char *p, size_t n)
{
	ferry_status st;
	size_t i;

	if (n == 0)
		return FERRY_OK;
	if (!b->cur) {
		b->documents++;
		/* the first document always trains, whatever the fraction */
		b->cur = (b->k && b->documents > 1 && b->documents % b->k == 0) ? b->val : b->train;
		st = writer_put(b->cur, FERRY_BYTE_EOT);
		if (st)
			return st;
	}
	for (i = 0; i < n; i++) {
		st = writer_put(b->cur, p[i]);
		if (st)
			return st;
	}
	return FERRY_OK;
}

static int pend_is_sep(const struct builder *b)
{
	size_t n = b->n_pend;

	if (n == b->sep_len + 1 && b->pend[n - 1] == '\r')
		n--;
	return n == b->sep_len && memcmp(b->pend, b->sep, n) == 0;
}

/* Ends the line in pend: a separator ends the document, anything else is
 * text.  nl says whether a '\n' ended the line (vs end of file). */
static ferry_status end_line(struct builder *b, int nl)
{
	ferry_status st = FERRY_OK;

	if (pend_is_sep(b)) {
		b->cur = NULL;
	} else {
		st = emit(b, (const unsigned char *)b->pend, b->n_pend);
		if (!st && nl)
			st = emit(b, (const unsigned char *)"\n", 1);
	}
	b->n_pend = 0;
	b->matching = 1;
	return st;
}

static ferry_status feed(struct builder *b, const unsigned char *p, size_t n)
{
	ferry_status st;
	size_t i = 0, run;

	if (!b->sep)
		return emit(b, p, n);
	while (i < n) {
		if (!b->matching) {
			/* Inside a non-separator line: copy through its '\n'. */
			const unsigned char *nl = memchr(p + i, '\n', n - i);

			run = nl ? (size_t)(nl - (p + i)) + 1 : n - i;
			st = emit(b, p + i, run);
			if (st)
				return st;
			i += run;
			if (nl)
				b->matching = 1;
			continue;
		}
		if (p[i] == '\n') {
			st = end_line(b, 1);
			if (st)
				return st;
			i++;
			continue;
		}
		/* Still a candidate if it extends sep, or is the '\r' after it. */
		if ((b->n_pend < b->sep_len && p[i] == (unsigned char)b->sep[b->n_pend]) ||
		    (b->n_pend == b->sep_len && p[i] == '\r')) {
			b->pend[b->n_pend++] = (char)p[i++];
			continue;
		}
		st = emit(b, (const unsigned char *)b->pend, b->n_pend);
		if (st)
			return st;
		b->n_pend = 0;
		b->matching = 0;
	}
	return FERRY_OK;
}

static ferry_status read_file(struct builder *b, const char *path,
			      unsigned char *buf)
{
	ferry_status st = FERRY_OK;
	size_t n;
	FILE *f;

	f = fopen(path, "rb");
	if (!f)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	b->n_pend = 0;
	b->matching = 1;
	while ((n = fread(buf, 1, READ_BUF_BYTES, f)) > 0) {
		st = feed(b, buf, n);
		if (st)
			goto out;
	}
	if (ferror(f)) {
		st = ferry_error(FERRY_ERR_IO, "%s: read error: %s", path,
				 strerror(errno));
		goto out;
	}
	/* A last line without '\n'. */
	if (b->sep && b->n_pend) {
		st = end_line(b, 0);
		if (st)
			goto out;
	}
	b->cur = NULL; /* every file ends its document */
out:
	fclose(f);
	return st;
}

static ferry_status check_text_args(const char *const *paths, int n_paths,
				    const struct ferry_data_opts *opts)
{
	int i;

	if (!paths || n_paths <= 0 || !opts)
		return ferry_error(FERRY_ERR_INVALID, "no input files");
	for (i = 0; i < n_paths; i++)
		if (!paths[i])
			return ferry_error(FERRY_ERR_INVALID,
					   "input file %d is NULL", i);
	if (!opts->out_prefix || !*opts->out_prefix)
		return ferry_error(FERRY_ERR_INVALID, "empty output prefix");
	if (!(opts->val_fraction >= 0.0 && opts->val_fraction <= 1.0))
		return ferry_error(FERRY_ERR_INVALID,
				   "val fraction %g is not in [0, 1]",
				   opts->val_fraction);
	if (opts->shard_tokens <= 0 || opts->shard_tokens > INT32_MAX)
		return ferry_error(FERRY_ERR_INVALID,
				   "shard size %ld tokens is not in [1, %d]",
				   opts->shard_tokens, INT32_MAX);
	if (opts->doc_sep && strlen(opts->doc_sep) >= SEP_MAX - 1)
		return ferry_error(FERRY_ERR_INVALID,
				   "document separator is longer than %d bytes",
				   SEP_MAX - 2);
	return FERRY_OK;
}

/* Sets up the two writers and the builder that feeds them from opts. */
static void builder_init(struct builder *b, struct writer *train,
			 struct writer *val, const struct ferry_data_opts *opts)
{
	train->prefix = val->prefix = opts->out_prefix;
	train->split = "train";
	val->split = "val";
	train->shard_tokens = val->shard_tokens = opts->shard_tokens;
	b->train = train;
	b->val = val;
	b->sep = opts->doc_sep;
	b->sep_len = b->sep ? strlen(b->sep) : 0;
	if (opts->val_fraction > 0.0) {
		double k = floor(1.0 / opts->val_fraction + 0.5);

		b->k = k < 1.0 ? 1 : k > (double)LONG_MAX / 2 ? LONG_MAX / 2 : (long)k;
	}
}

/* Feeds every input file through b (buf: READ_BUF_BYTES of scratch), then
 * completes both splits' last shards and removes stale ones. */
static ferry_status convert_files(struct builder *b, const char *const *paths,
				  int n_paths, unsigned char *buf)
{
	ferry_status st;
	int i, done;

	for (i = 0; i < n_paths; i++) {
		st = read_file(b, paths[i], buf);
		if (st)
			return st;
	}
	if (b->documents == 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "no text in %d input file%s (first: %s)",
				   n_paths, n_paths == 1 ? "" : "s", paths[0]);
	st = writer_close(b->train);
	if (!st)
		st = writer_close(b->val);
	/* everything is written: now the previous corpus may go */
	if (!st)
		st = writer_commit(b->train, &done);
	if (!st)
		st = writer_commit(b->val, &done);
	if (st)
		return st;
	remove_stale(b->train, b->train->index);
	remove_stale(b->val, b->val->index);
	return FERRY_OK;
}

ferry_status ferry_data_from_text(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts,
				  struct ferry_data_stats *stats)
{
	struct writer *train = NULL, *val = NULL;
	struct builder *b = NULL;
	unsigned char *buf = NULL;
	ferry_status st;

	st = check_text_args(paths, n_paths, opts);
	if (st)
		return st;
	train = ferry_calloc(1, sizeof(*train));
	val = ferry_calloc(1, sizeof(*val));
	b = ferry_calloc(1, sizeof(*b));
	buf = ferry_malloc(READ_BUF_BYTES);
	if (!train || !val || !b || !buf) {
		st = ferry_error(FERRY_ERR_NOMEM,
				 "out of memory converting text to shards");
		goto out;
	}
	builder_init(b, train, val, opts);
	st = convert_files(b, paths, n_paths, buf);
	if (!st && stats) {
		stats->documents = b->documents;
		stats->train_tokens = train->total;
		stats->val_tokens = val->total;
		stats->train_shards = train->index;
		stats->val_shards = val->index;
	}
out:
	if (st && train)
		writer_discard(train);
	if (st && val)
		writer_discard(val);
	ferry_free(buf);
	ferry_free(b);
	ferry_free(val);
	ferry_free(train);
	return st;
}
