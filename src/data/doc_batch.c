/*
 * A batch of documents (doc_batch.h): their text back to back; flushing
 * encodes each on its own OpenMP thread into its own id buffer, then
 * writes the buffers in document order, each after the separator token when
 * there is one.  A failure is reported as the lowest-numbered failing
 * document's, so errors do not depend on the threads either.
 */
#include "data/doc_batch.h"
#include "core/error.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ferry_status ferry_doc_batch_begin(struct ferry_doc_batch *b,
				   struct ferry_shard_writer *w,
				   struct doc_where where)
{
	if (b->n + 1 >= b->cap) {
		int cap = b->cap ? 2 * b->cap : 1024;
		size_t *off = realloc(b->off, (size_t)cap * sizeof(*off));
		struct ferry_shard_writer **dst =
			off ? realloc(b->dst, (size_t)cap * sizeof(*dst)) : NULL;
		struct doc_where *wh = dst ? realloc(b->where, (size_t)cap * sizeof(*wh)) : NULL;

		if (off)
			b->off = off;
		if (dst)
			b->dst = dst;
		if (!wh)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory for %d documents", cap);
		b->where = wh;
		b->cap = cap;
	}
	b->off[b->n] = b->n_text;
	b->dst[b->n] = w;
	b->where[b->n] = where;
	return FERRY_OK;
}

ferry_status ferry_doc_batch_add(struct ferry_doc_batch *b, const void *p,
				 size_t n)
{
	if (b->n_text + n > b->cap_text) {
		size_t cap = b->cap_text ? b->cap_text : 1 << 20;
		char *t;

		while (cap < b->n_text + n)
			cap *= 2;
		t = realloc(b->text, cap);
		if (!t)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory for %zu bytes of documents", cap);
		b->text = t;
		b->cap_text = cap;
	}
	memcpy(b->text + b->n_text, p, n);
	b->n_text += n;
	return FERRY_OK;
}

ferry_status ferry_doc_batch_end(struct ferry_doc_batch *b)
{
	b->n++;
	b->off[b->n] = b->n_text;
	return b->n_text >= b->limit ? ferry_doc_batch_flush(b) : FERRY_OK;
}

/* The document named first: a JSON Lines record by its line, a text
 * document by its number. */
static ferry_status where_error(ferry_status st, const struct doc_where *w,
				const char *msg)
{
	if (w->line > 0)
		return ferry_error(st, "%s:%ld: %s", w->path, w->line, msg);
	return ferry_error(st, "%s (document %ld of the corpus): %s", w->path, w->number, msg);
}

static ferry_status encode_all(struct ferry_doc_batch *b,
			       struct ferry_token_buf *ids)
{
	int first_bad = b->n;
	ferry_status bad_st = FERRY_OK;
	char msg[512] = "";

#pragma omp parallel for schedule(dynamic, 1) num_threads(b->threads > 0 ? b->threads : omp_get_max_threads())
	for (int i = 0; i < b->n; i++) {
		ferry_status st = ferry_tokenizer_encode(b->tok, b->text + b->off[i],
							 b->off[i + 1] - b->off[i],
							 b->flags, &ids[i]);

		if (st) {
#pragma omp critical
			if (i < first_bad) {
				first_bad = i;
				bad_st = st;
				snprintf(msg, sizeof(msg), "%s", ferry_last_error());
			}
		}
	}
	return bad_st ? where_error(bad_st, &b->where[first_bad], msg) : FERRY_OK;
}

static ferry_status write_all(struct ferry_doc_batch *b,
			      const struct ferry_token_buf *ids)
{
	ferry_status st = FERRY_OK;

	for (int i = 0; i < b->n && !st; i++) {
		if (b->sep >= 0)
			st = ferry_shard_writer_put(b->dst[i], (uint32_t)b->sep);
		for (size_t k = 0; k < ids[i].n && !st; k++)
			st = ferry_shard_writer_put(b->dst[i], (uint32_t)ids[i].ids[k]);
	}
	return st;
}

ferry_status ferry_doc_batch_flush(struct ferry_doc_batch *b)
{
	struct ferry_token_buf *ids;
	ferry_status st;

	if (b->n == 0)
		return FERRY_OK;
	ids = calloc((size_t)b->n, sizeof(*ids));
	if (!ids)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %d documents",
				   b->n);
	st = encode_all(b, ids);
	if (!st)
		st = write_all(b, ids);
	for (int i = 0; i < b->n; i++)
		ferry_token_buf_free(&ids[i]);
	free(ids);
	b->n = 0;
	b->n_text = 0;
	return st;
}

void ferry_doc_batch_free(struct ferry_doc_batch *b)
{
	free(b->text);
	free(b->off);
	free(b->dst);
	free(b->where);
	memset(b, 0, sizeof(*b));
}
