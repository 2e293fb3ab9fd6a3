/*
 * Text files -> token shards (see include/ferry/data.h).
 *
 * Input is streamed in fixed chunks (decompressed by text_reader.c), so
 * byte-level, files of any size work with a few hundred KiB of memory;
 * with a tokenizer each document is held whole and documents are encoded
 * in batches of about 32 MiB on many threads (doc_batch.c).  Rules:
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
 *    disk, opts->stop saying stop) leaves the previous corpus of that
 *    prefix as it was, and removes this run's temporaries.  Then stale higher-numbered shards of an
 *    earlier run with the same prefix are removed so a glob sees only this
 *    run's output.  Temporaries of the same prefix whose writer is no
 *    longer alive (killed before it could remove them) are removed first.
 */
#include "ferry/data.h"
#include "core/error.h"
#include "data/doc_batch.h"
#include "data/shard_writer.h"
#include "data/text_reader.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define READ_BUF_BYTES 65536
#define SEP_MAX 4096 /* longest doc_sep + its '\r' */

/* Document assembly across both writers. */
struct builder {
	struct ferry_shard_writer *train, *val;
	struct ferry_shard_writer *cur; /* split of the open document, NULL between docs */
	long k;             /* every k-th document to val; 0: none */
	long documents;
	/* doc_sep matching state for the current line */
	const char *sep;
	size_t sep_len;
	char pend[SEP_MAX];  /* start of the line while it may still match */
	size_t n_pend;
	int matching;        /* at a line start, or still equal to sep so far */
	struct ferry_doc_batch *batch; /* with a tokenizer; NULL: byte-level */
	const char *field;   /* JSON Lines: the text field */
	struct ferry_text_reader *in;
	const char *path;    /* the input being read */
	long line;           /* its JSON Lines line being read; 0: plain text */
	long long bytes, next_report;
	const struct ferry_data_opts *opts;
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
		st = b->batch ? ferry_doc_batch_begin(b->batch, b->cur,
						      (struct doc_where){ b->path, b->line, b->documents }) :
				ferry_shard_writer_put(b->cur, FERRY_BYTE_EOT);
		if (st)
			return st;
	}
	if (b->batch)
		return ferry_doc_batch_add(b->batch, p, n);
	for (i = 0; i < n; i++) {
		st = ferry_shard_writer_put(b->cur, p[i]);
		if (st)
			return st;
	}
	return FERRY_OK;
}

/* Ends the open document, if any. */
static ferry_status end_doc(struct builder *b)
{
	ferry_status st = FERRY_OK;

	if (b->cur && b->batch)
		st = ferry_doc_batch_end(b->batch);
	b->cur = NULL;
	return st;
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
		st = end_doc(b);
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

/* One JSON Lines record: its text field is a document. */
static ferry_status json_line(struct builder *b, const char *line, size_t n,
			      long lineno, bool unended)
{
	json_t *rec;
	const char *text;
	size_t len;
	ferry_status st = ferry_jsonl_text(b->path, lineno, unended, line, n, b->field, &rec, &text, &len);

	if (st || !rec)
		return st;
	b->line = lineno;
	st = emit(b, (const unsigned char *)text, len);
	json_decref(rec);
	return st ? st : end_doc(b);
}

/* A JSON Lines file: each line a record, split however the chunks fall. */
static ferry_status feed_jsonl(struct builder *b, const unsigned char *p,
			       size_t n, char **line, size_t *len, size_t *cap,
			       long *lineno)
{
	ferry_status st = FERRY_OK;

	for (size_t i = 0; i < n && !st; i++) {
		if (p[i] == '\n') {
			st = json_line(b, *line, *len, ++*lineno, false);
			*len = 0;
			continue;
		}
		if (*len == *cap) {
			char *g = realloc(*line, *cap ? 2 * *cap : 4096);

			if (!g)
				return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for a line",
						   b->path);
			*line = g;
			*cap = *cap ? 2 * *cap : 4096;
		}
		(*line)[(*len)++] = (char)p[i];
	}
	return st;
}

static void report(struct builder *b, size_t n)
{
	b->bytes += (long long)n;
	if (b->opts->progress && b->bytes >= b->next_report) {
		b->opts->progress(b->opts->progress_ctx, b->documents, b->bytes);
		b->next_report = b->bytes + (64ll << 20);
	}
}

/* The input's chunks through the line feeder or the JSON Lines one. */
static ferry_status read_chunks(struct builder *b, unsigned char *buf,
				bool jsonl)
{
	char *line = NULL;
	size_t n, len = 0, cap = 0;
	long lineno = 0;
	ferry_status st;

	while (!(st = ferry_text_reader_read(b->in, buf, READ_BUF_BYTES, &n)) && n) {
		st = jsonl ? feed_jsonl(b, buf, n, &line, &len, &cap, &lineno) :
			     feed(b, buf, n);
		if (st)
			break;
		report(b, n);
	}
	if (!st && jsonl && len)
		st = json_line(b, line, len, ++lineno, true);
	free(line);
	return st;
}

static ferry_status read_file(struct builder *b, const char *path,
			      unsigned char *buf)
{
	bool jsonl = ferry_text_name_is(path, ".jsonl") ||
		     ferry_text_name_is(path, ".json");
	ferry_status st;

	st = ferry_text_reader_open(path, &b->in);
	if (st)
		return st;
	b->path = path;
	b->line = 0;
	b->n_pend = 0;
	b->matching = 1;
	st = read_chunks(b, buf, jsonl);
	/* A last line without '\n'. */
	if (!st && !jsonl && b->sep && b->n_pend)
		st = end_line(b, 0);
	if (!st)
		st = end_doc(b); /* every file ends its document */
	ferry_text_reader_close(b->in);
	b->in = NULL;
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
static void builder_init(struct builder *b, struct ferry_shard_writer *train,
			 struct ferry_shard_writer *val, const struct ferry_data_opts *opts)
{
	train->prefix = val->prefix = opts->out_prefix;
	train->split = "train";
	val->split = "val";
	train->shard_tokens = val->shard_tokens = opts->shard_tokens;
	train->width = val->width = 2;
	train->stop = val->stop = opts->stop;
	train->stop_ctx = val->stop_ctx = opts->stop_ctx;
	b->opts = opts;
	b->field = opts->text_field ? opts->text_field : "text";
	b->train = train;
	b->val = val;
	b->sep = opts->doc_sep;
	b->sep_len = b->sep ? strlen(b->sep) : 0;
	if (opts->val_fraction > 0.0) {
		double k = floor(1.0 / opts->val_fraction + 0.5);

		b->k = k < 1.0 ? 1 : k > (double)LONG_MAX / 2 ? LONG_MAX / 2 : (long)k;
	}
}

/* With a tokenizer: documents go through a batch, each starting as the
 * model expects: with the post-processor's tokens where it adds some
 * (Llama's BOS), else after the end-of-text token, as llm.c writes GPT-2's
 * (<|endoftext|> before each document).  Shards are uint32 (version 2)
 * when an id may not fit uint16. */
static ferry_status setup_batch(struct builder *b, struct ferry_doc_batch *batch)
{
	struct ferry_token_buf probe = { 0 };
	ferry_tokenizer_t tok = b->opts->tokenizer;
	ferry_status st;

	if (!ferry_tokenizer_can_encode(tok))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "the tokenizer cannot encode text (llm.c's tokenizer file holds no merges)");
	st = ferry_tokenizer_encode(tok, "", 0, FERRY_TOK_ADD_SPECIAL, &probe);
	if (st)
		return st;
	batch->tok = tok;
	batch->flags = probe.n ? FERRY_TOK_ADD_SPECIAL : 0;
	batch->sep = probe.n ? -1 : ferry_tokenizer_eot(tok);
	ferry_token_buf_free(&probe);
	if (!batch->flags && batch->sep < 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "the tokenizer neither adds a BOS nor has an end-of-text token: documents could not be told apart");
	batch->threads = b->opts->threads;
	batch->limit = 32u << 20;
	if (ferry_tokenizer_vocab(tok) > 65536)
		b->train->width = b->val->width = 4;
	b->batch = batch;
	return FERRY_OK;
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
	if (b->batch) {
		st = ferry_doc_batch_flush(b->batch);
		if (st)
			return st;
	}
	if (b->opts->progress)
		b->opts->progress(b->opts->progress_ctx, b->documents, b->bytes);
	if (b->documents == 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "no text in %d input file%s (first: %s)",
				   n_paths, n_paths == 1 ? "" : "s", paths[0]);
	st = ferry_shard_writer_close(b->train);
	if (!st)
		st = ferry_shard_writer_close(b->val);
	/* everything is written: now the previous corpus may go */
	if (!st)
		st = ferry_shard_writer_commit(b->train, &done);
	if (!st)
		st = ferry_shard_writer_commit(b->val, &done);
	if (st)
		return st;
	ferry_shard_writer_remove_stale(b->train, b->train->index);
	ferry_shard_writer_remove_stale(b->val, b->val->index);
	return FERRY_OK;
}

ferry_status ferry_data_from_text(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts,
				  struct ferry_data_stats *stats)
{
	struct ferry_shard_writer *train = NULL, *val = NULL;
	struct ferry_doc_batch batch = { 0 };
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
	/* temporaries of runs killed before they could remove them */
	ferry_shard_writer_remove_dead(train);
	ferry_shard_writer_remove_dead(val);
	if (opts->tokenizer)
		st = setup_batch(b, &batch);
	if (!st)
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
		ferry_shard_writer_discard(train);
	if (st && val)
		ferry_shard_writer_discard(val);
	ferry_doc_batch_free(&batch);
	ferry_free(buf);
	ferry_free(b);
	ferry_free(val);
	ferry_free(train);
	return st;
}
