/*
 * Byte-pair encoding of one pre-tokenized piece, as Hugging Face's BPE
 * model does it.
 *
 * The piece starts as one symbol per UTF-8 character (a byte that is not
 * UTF-8 is a character of its own), each looked up in the vocab; one that
 * is absent becomes its bytes' <0xNN> tokens (byte_fallback), else the unk
 * token (consecutive ones fused with fuse_unk), else is dropped, as HF
 * does.  Then the adjacent pair with the lowest merge rank, the leftmost
 * among equals, is merged until no pair has a rule: symbols are a linked
 * list and candidate pairs a binary heap keyed (rank, position), stale
 * entries skipped when popped, so a piece of n characters takes
 * O(n log n) (SentencePiece-style files have no pre-tokenizer: a whole
 * document can be one piece).
 *
 * The vocab is an open-addressing hash map from strings to ids; the merges
 * one from (left id, right id) to (rank, merged id).  A piece of up to 64
 * bytes is first looked up in the tokenizer's cache of encoded pieces
 * (bpe_cache.c), and cached once merged.
 */
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

ferry_status ferry_tok_str_reserve(struct tok_str *s, size_t more)
{
	size_t cap = s->cap ? s->cap : 64;
	char *q;

	if (s->n + more + 1 <= s->cap)
		return FERRY_OK;
	while (cap < s->n + more + 1)
		cap *= 2;
	q = realloc(s->p, cap);
	if (!q)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu bytes of text", cap);
	s->p = q;
	s->cap = cap;
	return FERRY_OK;
}

ferry_status ferry_tok_str_add(struct tok_str *s, const void *p, size_t n)
{
	ferry_status st = ferry_tok_str_reserve(s, n);

	if (st)
		return st;
	if (n)
		memcpy(s->p + s->n, p, n);
	s->n += n;
	s->p[s->n] = '\0';
	return FERRY_OK;
}

void ferry_tok_str_free(struct tok_str *s)
{
	free(s->p);
	memset(s, 0, sizeof(*s));
}

static ferry_status ids_append(struct ferry_token_buf *b, const int32_t *ids, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 256;
		int32_t *p;

		while (cap < b->n + n)
			cap *= 2;
		p = realloc(b->ids, cap * sizeof(*p));
		if (!p)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory for %zu token ids", cap);
		b->ids = p;
		b->cap = cap;
	}
	memcpy(b->ids + b->n, ids, n * sizeof(*ids));
	b->n += n;
	return FERRY_OK;
}

static ferry_status ids_push(struct ferry_token_buf *b, int32_t id)
{
	if (b->n < b->cap) {
		b->ids[b->n++] = id;
		return FERRY_OK;
	}
	return ids_append(b, &id, 1);
}

void ferry_token_buf_free(struct ferry_token_buf *b)
{
	if (!b)
		return;
	free(b->ids);
	memset(b, 0, sizeof(*b));
}

/* ---- string -> id ---- */

struct tok_map_slot {
	const char *s; /* NULL: empty; owned by the caller */
	uint32_t n;
	int id;
};

struct tok_map {
	struct tok_map_slot *slot;
	size_t mask;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

ferry_status ferry_tok_map_new(size_t n, struct tok_map **out)
{
	struct tok_map *m = ferry_calloc(1, sizeof(*m));
	size_t cap = 16;

	while (cap < 2 * n + 2)
		cap *= 2;
	if (m)
		m->slot = ferry_calloc(cap, sizeof(*m->slot));
	if (!m || !m->slot) {
		ferry_free(m);
		return ferry_error(FERRY_ERR_NOMEM,
				   "out of memory for a vocab of %zu tokens", n);
	}
	m->mask = cap - 1;
	*out = m;
	return FERRY_OK;
}

void ferry_tok_map_free(struct tok_map *m)
{
	if (!m)
		return;
	ferry_free(m->slot);
	ferry_free(m);
}

static struct tok_map_slot *map_find(const struct tok_map *m, const char *s,
				     size_t n)
{
	size_t i = hash_bytes(s, n) & m->mask;

	for (;; i = (i + 1) & m->mask) {
		struct tok_map_slot *e = &m->slot[i];

		if (!e->s || (e->n == n && !memcmp(e->s, s, n)))
			return e;
	}
}

/* The map is sized for its n at creation; the caller never puts more. */
ferry_status ferry_tok_map_put(struct tok_map *m, const char *s, size_t n, int id,
			 int *old)
{
	struct tok_map_slot *e = map_find(m, s, n);

	*old = e->s ? e->id : -1;
	e->s = s;
	e->n = (uint32_t)n;
	e->id = id;
	return FERRY_OK;
}

int ferry_tok_map_get(const struct tok_map *m, const char *s, size_t n)
{
	const struct tok_map_slot *e;

	if (!m)
		return -1;
	e = map_find(m, s, n);
	return e->s ? e->id : -1;
}

/* ---- (left, right) -> rank, merged ---- */

static uint64_t pair_key(int left, int right)
{
	return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static size_t pair_slot(const struct tok_bpe *b, uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ull;

	return (size_t)(h ^ (h >> 32)) & b->merge_mask;
}

ferry_status ferry_tok_bpe_alloc_merges(struct tok_bpe *b, size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n + 2)
		cap *= 2;
	b->merge_key = ferry_calloc(cap, sizeof(*b->merge_key));
	b->merge_rank = ferry_malloc(cap * sizeof(*b->merge_rank));
	b->merge_id = ferry_malloc(cap * sizeof(*b->merge_id));
	if (!b->merge_key || !b->merge_rank || !b->merge_id)
		return ferry_error(FERRY_ERR_NOMEM,
				   "out of memory for %zu merges", n);
	b->merge_mask = cap - 1;
	return FERRY_OK;
}

/* A pair listed twice keeps its last rank, as HF's map does. */
ferry_status ferry_tok_bpe_add_merge(struct tok_bpe *b, int left, int right,
			       uint32_t rank, int merged)
{
	uint64_t key = pair_key(left, right);
	size_t i = pair_slot(b, key);

	while (b->merge_key[i] && b->merge_key[i] != key)
		i = (i + 1) & b->merge_mask;
	b->merge_key[i] = key;
	b->merge_rank[i] = rank;
	b->merge_id[i] = (uint32_t)merged;
	return FERRY_OK;
}

/* The rule for (left, right): its slot, or -1. */
static long find_merge(const struct tok_bpe *b, int left, int right)
{
	uint64_t key = pair_key(left, right);
	size_t i = pair_slot(b, key);

	while (b->merge_key[i]) {
		if (b->merge_key[i] == key)
			return (long)i;
		i = (i + 1) & b->merge_mask;
	}
	return -1;
}

void ferry_tok_bpe_free(struct tok_bpe *b)
{
	if (b->token)
		for (int i = 0; i < b->n_ids; i++)
			ferry_free(b->token[i]);
	ferry_free(b->token);
	ferry_free(b->token_len);
	ferry_tok_map_free(b->vocab);
	ferry_tok_cache_free(b->cache);
	ferry_free(b->merge_key);
	ferry_free(b->merge_rank);
	ferry_free(b->merge_id);
	memset(b, 0, sizeof(*b));
}

/* ---- the merge loop ---- */

struct sym {
	int id, prev, next;
};

/* A candidate pair: its rule's rank above its left symbol's position, so
 * that one integer compares as (rank, position). */
typedef uint64_t cand;

static void heap_push(cand *h, int *n, cand c)
{
	int i = (*n)++;

	while (i > 0 && c < h[(i - 1) / 2]) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = c;
}

static cand heap_pop(cand *h, int *n)
{
	cand top = h[0], last = h[--(*n)];
	int i = 0;

	for (;;) {
		int c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1] < h[c])
			c++;
		if (h[c] >= last)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = last;
	return top;
}

/* The rule for the pair at pos: its slot, or -1 (none, or no pair). */
static long pair_at(const struct tok_bpe *b, const struct sym *s, int pos)
{
	if (pos < 0 || s[pos].id < 0 || s[pos].next < 0)
		return -1;
	return find_merge(b, s[pos].id, s[s[pos].next].id);
}

static void push_pair(const struct tok_bpe *b, const struct sym *s, int pos,
		      cand *h, int *nh)
{
	long m = pair_at(b, s, pos);

	if (m >= 0)
		heap_push(h, nh, (cand)b->merge_rank[m] << 32 | (uint32_t)pos);
}

/* Length of the UTF-8 character at p (1 for a byte that starts none). */
static size_t char_len(const unsigned char *p, size_t left)
{
	size_t n = p[0] < 0x80 ? 1 : p[0] < 0xc2 ? 0 : p[0] < 0xe0 ? 2 :
		   p[0] < 0xf0 ? 3 : p[0] < 0xf5 ? 4 : 0;

	if (n == 0 || n > left)
		return 1;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 1;
	return n;
}

/* The initial symbols of w into s; returns their count. */
static int initial_symbols(const struct tok_bpe *b, const char *w, size_t n,
			   struct sym *s)
{
	int ns = 0;

	for (size_t at = 0; at < n;) {
		size_t cl = char_len((const unsigned char *)w + at, n - at);
		int id = ferry_tok_map_get(b->vocab, w + at, cl);
		bool bytes_ok = b->byte_fallback;

		for (size_t k = 0; id < 0 && bytes_ok && k < cl; k++)
			bytes_ok = b->byte_id[(unsigned char)w[at + k]] >= 0;
		if (id >= 0) {
			s[ns++].id = id;
		} else if (bytes_ok) {
			for (size_t k = 0; k < cl; k++)
				s[ns++].id = b->byte_id[(unsigned char)w[at + k]];
		} else if (b->unk >= 0 &&
			   !(b->fuse_unk && ns && s[ns - 1].id == b->unk)) {
			s[ns++].id = b->unk;
		}
		at += cl;
	}
	for (int i = 0; i < ns; i++) {
		s[i].prev = i - 1;
		s[i].next = i + 1 < ns ? i + 1 : -1;
	}
	return ns;
}

/* A popped candidate is stale when the pair now at its position has
 * another rule (one side was merged since): ranks are one per rule. */
static void merge_all(const struct tok_bpe *b, struct sym *s, int ns, cand *h)
{
	int nh = 0;

	for (int i = 0; i + 1 < ns; i++)
		push_pair(b, s, i, h, &nh);
	while (nh) {
		cand c = heap_pop(h, &nh);
		int pos = (int)(uint32_t)c, nx = s[pos].next;
		long m = pair_at(b, s, pos);

		if (m < 0 || b->merge_rank[m] != (uint32_t)(c >> 32))
			continue;
		s[pos].id = (int)b->merge_id[m];
		s[pos].next = s[nx].next;
		if (s[nx].next >= 0)
			s[s[nx].next].prev = pos;
		s[nx].id = -1;
		push_pair(b, s, s[pos].prev, h, &nh);
		push_pair(b, s, pos, h, &nh);
	}
}

static ferry_status merge_word(const struct tok_bpe *b, const char *w, size_t n,
			       struct ferry_token_buf *out)
{
	struct sym small_s[64], *s = small_s;
	cand small_h[192], *h = small_h;
	ferry_status st = FERRY_OK;
	int ns;

	/* Up to one symbol per byte; each merge pushes at most 2 pairs. */
	if (n > 64) {
		s = malloc(n * sizeof(*s));
		h = malloc(3 * n * sizeof(*h));
		if (!s || !h) {
			st = ferry_error(FERRY_ERR_NOMEM,
					 "out of memory for a piece of %zu bytes", n);
			goto out;
		}
	}
	ns = initial_symbols(b, w, n, s);
	merge_all(b, s, ns, h);
	for (int i = ns ? 0 : -1; i >= 0 && !st; i = s[i].next)
		st = ids_push(out, s[i].id);
out:
	if (s != small_s)
		free(s);
	if (h != small_h)
		free(h);
	return st;
}

/* Longer pieces are rare: they would only fill the cache. */
#define CACHE_MAX_BYTES 64

static bool cacheable(const struct tok_bpe *b, size_t n)
{
	return b->cache && n <= CACHE_MAX_BYTES;
}

/* w, whose hash is h when cacheable. */
static ferry_status bpe_word(const struct tok_bpe *b, const char *w, size_t n, uint64_t h,
			     struct ferry_token_buf *out)
{
	bool cached = cacheable(b, n);
	size_t from = out->n;
	const int32_t *ids;
	ferry_status st;
	int k;

	if (cached && (k = ferry_tok_cache_get(b->cache, w, n, h, &ids)) >= 0)
		return ids_append(out, ids, (size_t)k);
	if (b->ignore_merges && (k = ferry_tok_map_get(b->vocab, w, n)) >= 0)
		st = ids_push(out, k);
	else
		st = merge_word(b, w, n, out);
	if (!st && cached)
		ferry_tok_cache_put(b->cache, w, n, h, out->ids + from, (int)(out->n - from));
	return st;
}

ferry_status ferry_tok_bpe_word(const struct tok_bpe *b, const char *w, size_t n,
			  struct ferry_token_buf *out)
{
	return bpe_word(b, w, n, cacheable(b, n) ? ferry_tok_cache_hash(w, n) : 0, out);
}

/* How far ahead of the piece being encoded its successors' cache slots,
 * then their records, are fetched: a lookup would otherwise wait on
 * memory (the cache is megabytes). */
#define AHEAD_SLOT 8
#define AHEAD_REC 4

ferry_status ferry_tok_bpe_pieces(const struct tok_bpe *b, const char *buf,
				  const size_t *off, const size_t *len, int n,
				  struct ferry_token_buf *out)
{
	uint64_t h[AHEAD_SLOT + 1] = { 0 };
	ferry_status st = FERRY_OK;

	for (int i = -AHEAD_SLOT; i < n && !st; i++) {
		int j = i + AHEAD_SLOT, r = i + AHEAD_REC;

		if (j < n && cacheable(b, len[j])) {
			h[j % (AHEAD_SLOT + 1)] = ferry_tok_cache_hash(buf + off[j], len[j]);
			ferry_tok_cache_prefetch(b->cache, h[j % (AHEAD_SLOT + 1)], false);
		}
		if (r >= 0 && r < n && cacheable(b, len[r]))
			ferry_tok_cache_prefetch(b->cache, h[r % (AHEAD_SLOT + 1)], true);
		if (i >= 0)
			st = bpe_word(b, buf + off[i], len[i], h[i % (AHEAD_SLOT + 1)], out);
	}
	return st;
}

ferry_status ferry_tok_ids_push(struct ferry_token_buf *b, int32_t id)
{
	return ids_push(b, id);
}
