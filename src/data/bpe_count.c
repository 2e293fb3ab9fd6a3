/*
 * Counting a corpus's words for BPE training (see bpe_train.h).
 *
 * Inputs are read through text_reader.c (plain, .gz, .zst) into a batch of
 * about 32 MiB of documents (a plain file is one document, a JSON Lines
 * record another).  A batch is cut into spans: the special tokens are cut
 * out (Hugging Face splits added tokens before pre-tokenizing), and long
 * text is cut after a '\n' that has printable ASCII on both sides, where
 * GPT-2's regex ends a piece anyway (no match crosses a '\n' between two
 * non-spaces, and the pattern looks neither behind nor past such a cut), so
 * spans pre-tokenize as the whole text would.  A document too long for a
 * batch is flushed at such a cut.  Threads count the spans' pieces into
 * maps of their own; the maps are added into one, whose words are finally
 * sorted by their bytes: the counts are sums, so the result is the same
 * whatever the threads and however the spans fell.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe_train.h"
#include "tokenizer/hf_tokenizer.h"
#include "data/text_reader.h"
#include "core/error.h"

#include <jansson.h>
#include <omp.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define READ_BYTES 65536
#define BATCH_BYTES (32u << 20)
#define SPAN_BYTES 65536

/* ---- the word table ---- */

static uint64_t hash_word(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h ^ (h >> 31);
}

static ferry_status words_grow_table(struct bpe_words *w)
{
	size_t cap = w->mask ? 2 * (w->mask + 1) : 1024;
	uint32_t *slot = calloc(cap, sizeof(*slot));

	if (!slot)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu words", cap);
	for (size_t i = 0; i < w->n; i++) {
		size_t k = w->hash[i] & (cap - 1);

		while (slot[k])
			k = (k + 1) & (cap - 1);
		slot[k] = (uint32_t)i + 1;
	}
	free(w->slot);
	w->slot = slot;
	w->mask = cap - 1;
	return FERRY_OK;
}

static ferry_status words_append(struct bpe_words *w, const char *s, size_t n,
				 uint64_t h)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1024;
		size_t *off = realloc(w->off, cap * sizeof(*off));
		uint32_t *len = off ? realloc(w->len, cap * sizeof(*len)) : NULL;
		int64_t *count = len ? realloc(w->count, cap * sizeof(*count)) : NULL;
		uint64_t *hash = count ? realloc(w->hash, cap * sizeof(*hash)) : NULL;

		w->off = off ? off : w->off;
		w->len = len ? len : w->len;
		w->count = count ? count : w->count;
		if (!hash)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu words", cap);
		w->hash = hash;
		w->cap = cap;
	}
	if (w->n_bytes + n > w->cap_bytes) {
		size_t cap = w->cap_bytes ? w->cap_bytes : 65536;
		char *p;

		while (cap < w->n_bytes + n)
			cap *= 2;
		p = realloc(w->bytes, cap);
		if (!p)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu bytes of words", cap);
		w->bytes = p;
		w->cap_bytes = cap;
	}
	memcpy(w->bytes + w->n_bytes, s, n);
	w->off[w->n] = w->n_bytes;
	w->len[w->n] = (uint32_t)n;
	w->count[w->n] = 0;
	w->hash[w->n] = h;
	w->n_bytes += n;
	w->n++;
	return FERRY_OK;
}

ferry_status ferry_bpe_words_add(struct bpe_words *w, const char *s, size_t n,
				 int64_t count)
{
	uint64_t h = hash_word(s, n);
	ferry_status st;
	size_t k;

	if (n > UINT32_MAX)
		return ferry_error(FERRY_ERR_INVALID, "a word of %zu bytes", n);
	if (2 * (w->n + 1) > w->mask + 1 && (st = words_grow_table(w)))
		return st;
	for (k = h & w->mask; w->slot[k]; k = (k + 1) & w->mask) {
		size_t i = w->slot[k] - 1;

		if (w->hash[i] == h && w->len[i] == n &&
		    !memcmp(w->bytes + w->off[i], s, n)) {
			w->count[i] += count;
			return FERRY_OK;
		}
	}
	st = words_append(w, s, n, h);
	if (!st) {
		w->slot[k] = (uint32_t)w->n;
		w->count[w->n - 1] = count;
	}
	return st;
}

void ferry_bpe_words_free(struct bpe_words *w)
{
	free(w->bytes);
	free(w->off);
	free(w->len);
	free(w->count);
	free(w->hash);
	free(w->slot);
	memset(w, 0, sizeof(*w));
}

/* ---- a batch of documents, cut into spans ---- */

struct span {
	size_t s, e;
};

struct counter {
	const struct ferry_bpe_train_opts *opts;
	const char *field;
	pcre2_code *re;
	int threads;
	struct tok_str text;	/* the batch */
	struct span *span;
	size_t n_span, cap_span;
	size_t doc_start;	/* where the open document began in text */
	struct bpe_words *words;
	struct ferry_bpe_train_stats *stats;
};

static ferry_status span_add(struct counter *c, size_t s, size_t e)
{
	if (s == e)
		return FERRY_OK;
	if (c->n_span == c->cap_span) {
		size_t cap = c->cap_span ? 2 * c->cap_span : 1024;
		struct span *v = realloc(c->span, cap * sizeof(*v));

		if (!v)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu spans", cap);
		c->span = v;
		c->cap_span = cap;
	}
	c->span[c->n_span++] = (struct span){ s, e };
	return FERRY_OK;
}

static bool printable(char ch)
{
	return ch > ' ' && ch < 127;
}

/* A cut at i (between i - 1 and i) splits no piece of GPT-2's regex. */
static bool safe_cut(const char *t, size_t i)
{
	return t[i - 1] == '\n' && printable(t[i - 2]) && printable(t[i]);
}

/* Text without special tokens, [s, e): spans of about SPAN_BYTES. */
static ferry_status add_plain(struct counter *c, size_t s, size_t e)
{
	const char *t = c->text.p;
	ferry_status st = FERRY_OK;

	while (s < e && !st) {
		size_t cut = e;

		for (size_t i = s + SPAN_BYTES; i + 1 < e; i++)
			if (safe_cut(t, i)) {
				cut = i;
				break;
			}
		st = span_add(c, s, cut);
		s = cut;
	}
	return st;
}

/* The leftmost special token in [s, e) (the longest there): its start, or
 * e; *n its length. */
static size_t find_special(const struct counter *c, size_t s, size_t e, size_t *n)
{
	size_t best = e;

	*n = 0;
	for (int k = 0; k < c->opts->n_special; k++) {
		const char *sp = c->opts->special[k];
		size_t len = strlen(sp);
		const char *at = len ? memmem(c->text.p + s, e - s, sp, len) : NULL;
		size_t pos = at ? (size_t)(at - c->text.p) : e;

		if (pos < best || (pos == best && at && len > *n)) {
			best = pos;
			*n = len;
		}
	}
	return best;
}

/* A document, [s, e) of the batch: its spans. */
static ferry_status add_doc(struct counter *c, size_t s, size_t e)
{
	ferry_status st = FERRY_OK;

	while (s < e && !st) {
		size_t n, at = find_special(c, s, e, &n);

		st = add_plain(c, s, at);
		s = at + n;
	}
	return st;
}

/* ---- counting, on many threads ---- */

/* The pieces of one span into w, as ByteLevel's split (Isolated) makes
 * them: matches and the gaps between (bytes that are not UTF-8). */
static ferry_status count_span(const pcre2_code *re, pcre2_match_data *md,
			       const char *s, size_t n, struct bpe_words *w,
			       long long *pieces)
{
	size_t prev = 0, at = 0;
	ferry_status st = FERRY_OK;

	while (at <= n && !st) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, 0, md, NULL);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return ferry_error(FERRY_ERR_INVALID, "regex match failed (PCRE2 error %d)", rc);
		if (ov[0] == ov[1]) {
			at = ov[1] + 1;
			continue;
		}
		if (prev != ov[0]) {
			st = ferry_bpe_words_add(w, s + prev, ov[0] - prev, 1);
			++*pieces;
		}
		if (!st) {
			st = ferry_bpe_words_add(w, s + ov[0], ov[1] - ov[0], 1);
			++*pieces;
		}
		prev = at = ov[1];
	}
	if (!st && prev != n) {
		st = ferry_bpe_words_add(w, s + prev, n - prev, 1);
		++*pieces;
	}
	return st;
}

/* One thread's share: spans taken in turn, counted into w. */
static ferry_status count_share(struct counter *c, struct bpe_words *w,
				long long *pieces)
{
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	ferry_status st = md ? FERRY_OK :
		ferry_error(FERRY_ERR_NOMEM, "out of memory for a regex match");

#pragma omp for schedule(dynamic, 1)
	for (size_t i = 0; i < c->n_span; i++)
		if (!st)
			st = count_span(c->re, md, c->text.p + c->span[i].s,
					c->span[i].e - c->span[i].s, w, pieces);
	pcre2_match_data_free(md);
	return st;
}

/* Counts the batch's spans and adds them to c->words; empties the batch. */
static ferry_status count_batch(struct counter *c)
{
	int nt = c->threads;
	struct bpe_words *mine = calloc((size_t)nt, sizeof(*mine));
	long long *pieces = calloc((size_t)nt, sizeof(*pieces));
	ferry_status *sts = calloc((size_t)nt, sizeof(*sts));
	ferry_status st = FERRY_OK;

	if (!mine || !pieces || !sts)
		st = ferry_error(FERRY_ERR_NOMEM, "out of memory for %d threads", nt);
	if (!st) {
#pragma omp parallel num_threads(nt)
		sts[omp_get_thread_num()] =
			count_share(c, &mine[omp_get_thread_num()], &pieces[omp_get_thread_num()]);
	}
	for (int t = 0; mine && t < nt; t++) {
		st = st ? st : sts[t];
		for (size_t i = 0; !st && i < mine[t].n; i++)
			st = ferry_bpe_words_add(c->words, mine[t].bytes + mine[t].off[i],
						 mine[t].len[i], mine[t].count[i]);
		c->stats->words += pieces[t];
		ferry_bpe_words_free(&mine[t]);
	}
	free(mine);
	free(pieces);
	free(sts);
	c->n_span = 0;
	return st;
}

/* Ends the open document, counting the batch when full. */
static ferry_status end_doc(struct counter *c)
{
	ferry_status st = add_doc(c, c->doc_start, c->text.n);

	c->doc_start = c->text.n;
	if (!st && c->text.n >= BATCH_BYTES) {
		st = count_batch(c);
		c->text.n = c->doc_start = 0;
	}
	return st;
}

/* Inside a long document: counts the batch up to the last safe cut, and
 * keeps the rest. */
static ferry_status flush_mid_doc(struct counter *c)
{
	size_t cut = 0, n = c->text.n, low = c->doc_start + 2;
	ferry_status st;

	if (n > low + 2 * READ_BYTES)
		low = n - 2 * READ_BYTES; /* what came since the last try */
	for (size_t i = n - 1; i >= low && !cut; i--)
		if (safe_cut(c->text.p, i))
			cut = i;
	if (!cut)
		return FERRY_OK; /* none yet: the batch grows */
	st = add_doc(c, c->doc_start, cut);
	if (!st)
		st = count_batch(c);
	memmove(c->text.p, c->text.p + cut, n - cut);
	c->text.n = n - cut;
	c->doc_start = 0;
	return st;
}

/* ---- reading the inputs ---- */

/* One JSON Lines record: its text field is a document. */
static ferry_status json_doc(struct counter *c, const char *path, char *line,
			     size_t n, long lineno, bool unended)
{
	json_t *rec;
	const char *text;
	size_t len;
	ferry_status st = ferry_jsonl_text(path, lineno, unended, line, n, c->field, &rec, &text, &len);

	if (st || !rec)
		return st;
	st = ferry_tok_str_add(&c->text, text, len);
	json_decref(rec);
	return st ? st : end_doc(c);
}

/* A JSON Lines input's chunk: whole lines are records; the rest waits in
 * line. */
static ferry_status feed_jsonl(struct counter *c, const char *path, const char *p,
			       size_t n, struct tok_str *line, long *lineno)
{
	ferry_status st = FERRY_OK;

	while (n && !st) {
		const char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;

		st = ferry_tok_str_add(line, p, k);
		if (!st && nl) {
			st = json_doc(c, path, line->p, line->n, ++*lineno, false);
			line->n = 0;
			k++;
		}
		p += k;
		n -= k;
	}
	return st;
}

static ferry_status read_input(struct counter *c, const char *path, char *buf)
{
	bool jsonl = ferry_text_name_is(path, ".jsonl") || ferry_text_name_is(path, ".json");
	struct ferry_text_reader *in = NULL;
	struct tok_str line = { 0 };
	long lineno = 0;
	size_t n;
	ferry_status st = ferry_text_reader_open(path, &in);

	while (!st && !(st = ferry_text_reader_read(in, buf, READ_BYTES, &n)) && n) {
		c->stats->bytes += (long long)n;
		if (jsonl) {
			st = feed_jsonl(c, path, buf, n, &line, &lineno);
			continue;
		}
		st = ferry_tok_str_add(&c->text, buf, n);
		if (!st && c->text.n >= BATCH_BYTES)
			st = flush_mid_doc(c);
	}
	if (!st && jsonl && line.n)
		st = json_doc(c, path, line.p, line.n, ++lineno, true);
	if (!st && !jsonl)
		st = end_doc(c);
	ferry_tok_str_free(&line);
	if (in)
		ferry_text_reader_close(in);
	return st;
}

static int cmp_words(const void *a, const void *b, void *ctx)
{
	const struct bpe_words *w = ctx;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	size_t n = w->len[i] < w->len[j] ? w->len[i] : w->len[j];
	int d = memcmp(w->bytes + w->off[i], w->bytes + w->off[j], n);

	return d ? d : (w->len[i] > w->len[j]) - (w->len[i] < w->len[j]);
}

/* in's words, sorted by their bytes, into out. */
static ferry_status sort_words(const struct bpe_words *in, struct bpe_words *out)
{
	size_t *order = malloc((in->n ? in->n : 1) * sizeof(*order));
	ferry_status st = order ? FERRY_OK :
		ferry_error(FERRY_ERR_NOMEM, "out of memory sorting %zu words", in->n);

	for (size_t i = 0; !st && i < in->n; i++)
		order[i] = i;
	if (!st)
		qsort_r(order, in->n, sizeof(*order), cmp_words, (void *)in);
	for (size_t i = 0; !st && i < in->n; i++)
		st = ferry_bpe_words_add(out, in->bytes + in->off[order[i]], in->len[order[i]],
					 in->count[order[i]]);
	free(order);
	return st;
}

ferry_status ferry_bpe_count_files(const char *const *paths, int n_paths,
				   const struct ferry_bpe_train_opts *opts,
				   struct bpe_words *out,
				   struct ferry_bpe_train_stats *stats)
{
	struct bpe_words all = { 0 };
	struct counter c = { .opts = opts, .words = &all, .stats = stats };
	char *buf = malloc(READ_BYTES);
	ferry_status st = buf ? FERRY_OK :
		ferry_error(FERRY_ERR_NOMEM, "out of memory for a read buffer");

	c.field = opts->text_field ? opts->text_field : "text";
	c.threads = opts->threads > 0 ? opts->threads : omp_get_max_threads();
	if (!st)
		st = ferry_tok_compile_regex(ferry_tok_gpt2_pattern,
					     strlen(ferry_tok_gpt2_pattern), false,
					     (void **)&c.re);
	for (int i = 0; !st && i < n_paths; i++)
		st = read_input(&c, paths[i], buf);
	if (!st && c.text.n > c.doc_start)
		st = add_doc(&c, c.doc_start, c.text.n);
	if (!st)
		st = count_batch(&c);
	if (!st)
		st = sort_words(&all, out);
	stats->distinct = (long long)all.n;
	ferry_bpe_words_free(&all);
	if (c.re)
		ferry_tok_free_regex(c.re);
	ferry_tok_str_free(&c.text);
	free(c.span);
	free(buf);
	return st;
}
