/*
 * Internal: training a byte-level BPE (include/ferry/tokenizer.h).
 * bpe_count.c reads the corpus and counts its pre-tokenized words on many
 * threads; bpe_train.c runs the merges and writes the tokenizer.json.
 */
#ifndef FERRY_DATA_BPE_TRAIN_H
#define FERRY_DATA_BPE_TRAIN_H

#include "ferry/tokenizer.h"

#include <stdint.h>

/* Distinct words and their counts: word i is bytes[off[i], off[i] + len[i]),
 * seen count[i] times; an open-addressing table finds a word by its bytes. */
struct bpe_words {
	char *bytes;
	size_t n_bytes, cap_bytes;
	size_t *off;
	uint32_t *len;
	int64_t *count;
	uint64_t *hash;
	size_t n, cap;
	uint32_t *slot;		/* word index + 1; 0: empty */
	size_t mask;
};

/* Adds count to the word s (n bytes), inserting it when new. */
ferry_status ferry_bpe_words_add(struct bpe_words *w, const char *s, size_t n,
				 int64_t count) FERRY_MUST_CHECK;
void ferry_bpe_words_free(struct bpe_words *w);

/* The words of the files, sorted by their bytes (so the same whatever the
 * threads); stats' bytes, words and distinct filled in. */
ferry_status ferry_bpe_count_files(const char *const *paths, int n_paths,
				   const struct ferry_bpe_train_opts *opts,
				   struct bpe_words *out,
				   struct ferry_bpe_train_stats *stats)
	FERRY_MUST_CHECK;

#endif
