/*
 * Internal: a Hugging Face tokenizer.json, parsed into the steps HF runs.
 *
 * encode(text):
 *   split on added tokens whose normalized flag is off (raw text)
 *   -> each other span: normalizers -> split on normalized added tokens
 *   -> pre-tokenizers (regex splits, Metaspace, ByteLevel's byte -> char map)
 *   -> BPE per piece -> ids; the post-processor's template when asked.
 * decode(ids): each id's token string -> the decoders, in order, over the
 * list of strings (HF's decode_chain) -> bytes.
 *
 * Everything here is read-only after loading but the BPE model's cache of
 * encoded pieces (bpe_cache.c), which is filled without locks: one
 * tokenizer encodes on many threads at once.
 */
#ifndef FERRY_TOKENIZER_HF_TOKENIZER_H
#define FERRY_TOKENIZER_HF_TOKENIZER_H

#include "ferry/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ids above this are refused as a corrupt or hostile file. */
#define TOK_MAX_ID (1 << 22)
/* Steps one normalizer, pre-tokenizer or decoder list may hold. */
#define TOK_MAX_STEPS 16

/* A growing byte string; p is NUL-terminated whenever n > 0 or p set. */
struct tok_str {
	char *p;
	size_t n, cap;
};

ferry_status ferry_tok_str_add(struct tok_str *s, const void *p, size_t n)
	FERRY_MUST_CHECK;
void ferry_tok_str_free(struct tok_str *s);

ferry_status ferry_tok_str_reserve(struct tok_str *s, size_t more) FERRY_MUST_CHECK;

/* ---- the BPE model (bpe.c) ---- */

struct tok_map;	/* string -> id, open addressing */
struct tok_cache; /* piece -> its ids (bpe_cache.c) */

struct tok_bpe {
	int n_ids;		/* one past the largest id of the vocab */
	char **token;		/* id -> its string (NULL: no such id) */
	uint32_t *token_len;
	struct tok_map *vocab;
	/* (left id, right id) -> rank and merged id */
	uint64_t *merge_key;	/* 0: empty slot; else (left << 32 | right) + 1 */
	uint32_t *merge_rank, *merge_id;
	size_t merge_mask;
	int unk;		/* -1: none */
	bool byte_fallback, fuse_unk, ignore_merges;
	int byte_id[256];	/* <0xNN>, -1 where absent */
	struct tok_cache *cache; /* NULL: none */
};

ferry_status ferry_tok_cache_new(struct tok_cache **out) FERRY_MUST_CHECK;
void ferry_tok_cache_free(struct tok_cache *c);
uint64_t ferry_tok_cache_hash(const char *s, size_t n);
/* The count of the ids piece w (hash h) encodes to and *ids pointing at
 * them; -1 when it is not cached. */
int ferry_tok_cache_get(const struct tok_cache *c, const char *w, size_t n, uint64_t h,
			const int32_t **ids);
/* Caches w -> ids, unless the cache is full. */
void ferry_tok_cache_put(struct tok_cache *c, const char *w, size_t n, uint64_t h,
			 const int32_t *ids, int n_ids);
/* Brings the slot of hash h into the CPU's cache, or with rec the record
 * the slot points at (once the slot is there). */
void ferry_tok_cache_prefetch(const struct tok_cache *c, uint64_t h, bool rec);

ferry_status ferry_tok_map_new(size_t n, struct tok_map **out) FERRY_MUST_CHECK;
void ferry_tok_map_free(struct tok_map *m);
/* Inserts s -> id; *old gets the id s had (-1: new). */
ferry_status ferry_tok_map_put(struct tok_map *m, const char *s, size_t n, int id,
			 int *old) FERRY_MUST_CHECK;
int ferry_tok_map_get(const struct tok_map *m, const char *s, size_t n);

ferry_status ferry_tok_bpe_add_merge(struct tok_bpe *b, int left, int right,
			       uint32_t rank, int merged) FERRY_MUST_CHECK;
ferry_status ferry_tok_bpe_alloc_merges(struct tok_bpe *b, size_t n) FERRY_MUST_CHECK;
void ferry_tok_bpe_free(struct tok_bpe *b);
ferry_status ferry_tok_ids_push(struct ferry_token_buf *b, int32_t id)
	FERRY_MUST_CHECK;
/* Appends the ids of one pre-tokenized piece. */
ferry_status ferry_tok_bpe_word(const struct tok_bpe *b, const char *w, size_t n,
			  struct ferry_token_buf *out) FERRY_MUST_CHECK;
/* Appends the ids of n pieces, [off[i], off[i] + len[i]) of buf, in order. */
ferry_status ferry_tok_bpe_pieces(const struct tok_bpe *b, const char *buf,
				  const size_t *off, const size_t *len, int n,
				  struct ferry_token_buf *out) FERRY_MUST_CHECK;

/* ---- normalizers, pre-tokenizers, decoders, post-processor ---- */

enum tok_norm_kind {
	NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE,
	NORM_LOWERCASE,
};

struct tok_norm {
	enum tok_norm_kind kind;
	char *pattern, *content; /* Prepend: content; Replace: both */
	void *regex;		 /* Replace with a Regex pattern (pcre2_code) */
};

enum tok_split_behavior {
	SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT,
	SPLIT_CONTIGUOUS,
};

enum tok_pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS };

struct tok_pre {
	enum tok_pre_kind kind;
	void *regex;		/* Split; ByteLevel with use_regex (pcre2_code) */
	char *pattern;		/* the regex's source, for messages */
	enum tok_split_behavior behavior;
	bool invert;
	bool add_prefix_space;	/* ByteLevel */
	char *replacement;	/* Metaspace, e.g. "\xe2\x96\x81" */
	int prepend;		/* Metaspace: 0 never, 1 first, 2 always */
	bool split;		/* Metaspace */
	bool individual;	/* Digits */
};

enum tok_dec_kind {
	DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP,
	DEC_METASPACE,
};

struct tok_dec {
	enum tok_dec_kind kind;
	char *pattern, *content; /* Replace; Strip: content; Metaspace: pattern */
	int start, stop;	 /* Strip; Metaspace: start = prepend scheme */
};

struct tok_added {
	char *content;
	size_t len;
	/* what is looked for: content, normalized when `normalized` (HF
	 * matches those in normalized text by their normalized form) */
	char *match;
	size_t match_len;
	int id;
	bool special, lstrip, rstrip, single_word, normalized;
};

struct ferry_hf_tokenizer {
	char *path;		/* the tokenizer.json, for messages */
	struct tok_bpe bpe;
	struct tok_norm norm[TOK_MAX_STEPS];
	int n_norm;
	struct tok_pre pre[TOK_MAX_STEPS];
	int n_pre;
	bool byte_level;	/* a ByteLevel pre-tokenizer maps bytes to chars */
	/* ByteLevel's byte -> character: its UTF-8 bytes, [2] their count */
	unsigned char byte_map[256][3];
	struct tok_dec dec[TOK_MAX_STEPS];
	int n_dec;
	struct tok_added *added;
	int n_added;
	bool added_first[2][256]; /* [normalized][byte]: a token starts so */
	int added_one_first[2];	/* [normalized]: the byte all start with; -1:
				   no token, 256: several bytes */
	int post_before[TOK_MAX_STEPS]; /* the single template's special ids */
	int post_after[TOK_MAX_STEPS];
	int n_post_before, n_post_after;
	int n_ids;		/* one past the largest id, vocab or added */
	bool *is_special;	/* by id */
	int *added_of_id;	/* by id: index in added, -1 */
	int bos, eos;		/* -1: unknown */
};

/* config: tokenizer_config.json beside it, or NULL. */
ferry_status ferry_tok_hf_load_json(struct ferry_hf_tokenizer *t, const char *path,
			      const char *config) FERRY_MUST_CHECK;
int ferry_tok_hf_token_id(const struct ferry_hf_tokenizer *t, const char *s);
void ferry_tok_hf_free(struct ferry_hf_tokenizer *t);

ferry_status ferry_tok_normalize(const struct ferry_hf_tokenizer *t, const char *s,
			   size_t n, struct tok_str *out) FERRY_MUST_CHECK;
/* Pre-tokenizes s (at_start: s begins the input, for Metaspace's "first")
 * and runs BPE on each piece, appending ids. */
ferry_status ferry_tok_pretok_encode(const struct ferry_hf_tokenizer *t,
			       const char *s, size_t n, bool at_start,
			       struct ferry_token_buf *out) FERRY_MUST_CHECK;
/* A failed match of regex pattern (pcre2_match's rc < 0), named: PCRE2's
 * match limit, hit by a pattern that backtracks without end. */
ferry_status ferry_tok_match_error(const char *what, const char *pattern, int rc);
/* literal: the pattern is a plain string (a Split's {"String": ...}). */
ferry_status ferry_tok_compile_regex(const char *pattern, size_t n, bool literal,
			       void **out)
	FERRY_MUST_CHECK;
void ferry_tok_free_regex(void *re);
/* The GPT-2 pattern ByteLevel splits with when use_regex is on. */
extern const char ferry_tok_gpt2_pattern[];
/* GPT-2's byte -> character of ByteLevel, as UTF-8 into out (1 or 2 bytes;
 * the count returned). */
size_t ferry_tok_byte_char(unsigned char b, char *out);

ferry_status ferry_tok_hf_encode(const struct ferry_hf_tokenizer *t, const char *s,
			   size_t n, bool add_special,
			   struct ferry_token_buf *out) FERRY_MUST_CHECK;
/* whole: the ids are a whole text (Strip and Metaspace drop the leading
 * space); else one token printed among others. */
ferry_status ferry_tok_decode_chain(const struct ferry_hf_tokenizer *t,
			      const int32_t *ids, size_t n, bool skip_special,
			      bool whole, struct tok_str *out) FERRY_MUST_CHECK;

#endif
