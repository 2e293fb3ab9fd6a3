/*
 * Internal: documents gathered for a tokenizer, encoded on many threads and
 * written in their order, so the shards are the same whatever the thread
 * count.
 */
#ifndef FERRY_DATA_DOC_BATCH_H
#define FERRY_DATA_DOC_BATCH_H

#include "ferry/tokenizer.h"
#include "data/shard_writer.h"

/* Where a document comes from: its file and JSON Lines line (0: a plain
 * text file), its number in the corpus. */
struct doc_where {
	const char *path;
	long line, number;
};

struct ferry_doc_batch {
	ferry_tokenizer_t tok;
	unsigned flags;		/* FERRY_TOK_ADD_SPECIAL: the template's BOS */
	int32_t sep;		/* token before each document, -1: none */
	int threads;		/* 0: OpenMP's default */
	size_t limit;		/* flush past this many bytes of text */
	char *text;		/* the documents back to back */
	size_t n_text, cap_text;
	size_t *off;		/* document i: text[off[i] .. off[i+1]) */
	struct ferry_shard_writer **dst;
	struct doc_where *where; /* each document's place, for errors */
	int n, cap;
};

/* Starts a document bound for w. */
ferry_status ferry_doc_batch_begin(struct ferry_doc_batch *b,
				   struct ferry_shard_writer *w,
				   struct doc_where where) FERRY_MUST_CHECK;
ferry_status ferry_doc_batch_add(struct ferry_doc_batch *b, const void *p,
				 size_t n) FERRY_MUST_CHECK;
/* Ends the document; flushes when the batch is full. */
ferry_status ferry_doc_batch_end(struct ferry_doc_batch *b) FERRY_MUST_CHECK;
/* Encodes every document and writes them, in order. */
ferry_status ferry_doc_batch_flush(struct ferry_doc_batch *b) FERRY_MUST_CHECK;
void ferry_doc_batch_free(struct ferry_doc_batch *b);

#endif
