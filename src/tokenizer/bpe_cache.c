/*
 * The ids of pre-tokenized pieces already encoded, so that a frequent
 * word ("Ġthe", "Ġof") skips its merges: most of a text is such words.
 *
 * One cache per tokenizer, shared by every thread encoding with it and
 * filled as they go, without locks: a slot is a 64-bit word, 0 while empty,
 * else the top 32 bits of the piece's hash and where its record is in an
 * arena.  A record (the piece's bytes and ids) is written in the arena
 * first and then published by a compare-and-swap on an empty slot
 * (release; readers load with acquire), and never changes or moves after.
 * Nothing is evicted: once the arena or the slots are full, pieces not in
 * the cache are merged each time, as without one.  The first pieces seen
 * fill it, and in text those are mostly the frequent ones.  What a piece
 * encodes to does not depend on the cache: only the speed does.
 */
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <stdatomic.h>
#include <string.h>

#define CACHE_SLOTS (1u << 18)	     /* a power of two */
#define CACHE_ENTRIES (1u << 17)     /* at most half the slots: short probes */
#define CACHE_ARENA (8u << 20)	     /* bytes of records */
#define CACHE_PROBES 8

struct tok_cache {
	_Atomic uint64_t *slot;
	char *arena;
	atomic_size_t used;	/* bytes of arena taken */
	atomic_uint entries;
};

struct cache_rec {
	uint32_t n_bytes, n_ids;
	int32_t ids[];		/* then the piece's bytes */
};

ferry_status ferry_tok_cache_new(struct tok_cache **out)
{
	struct tok_cache *c = ferry_calloc(1, sizeof(*c));

	if (c) {
		c->slot = ferry_calloc(CACHE_SLOTS, sizeof(*c->slot));
		c->arena = ferry_malloc(CACHE_ARENA);
	}
	if (!c || !c->slot || !c->arena) {
		ferry_tok_cache_free(c);
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a tokenizer's cache");
	}
	atomic_init(&c->used, 0);
	atomic_init(&c->entries, 0);
	*out = c;
	return FERRY_OK;
}

void ferry_tok_cache_free(struct tok_cache *c)
{
	if (!c)
		return;
	ferry_free((void *)c->slot);
	ferry_free(c->arena);
	ferry_free(c);
}

/* 8 bytes at a time, mixed as in a multiplicative hash. */
uint64_t ferry_tok_cache_hash(const char *s, size_t n)
{
	const uint64_t k = 0x9e3779b97f4a7c15ull;
	uint64_t h = n * k, w;

	for (; n >= 8; s += 8, n -= 8) {
		memcpy(&w, s, 8);
		h = (h ^ w) * k;
		h ^= h >> 31;
	}
	if (n) {
		w = 0;
		memcpy(&w, s, n);
		h = (h ^ w) * k;
	}
	h ^= h >> 29;
	return h * 0xbf58476d1ce4e5b9ull ^ (h >> 32);
}

static const struct cache_rec *rec_at(const struct tok_cache *c, uint64_t v)
{
	return (const struct cache_rec *)(c->arena + ((v & 0xffffffffu) - 1) * 8);
}

static bool rec_is(const struct cache_rec *r, const char *w, size_t n)
{
	return r->n_bytes == n && !memcmp(r->ids + r->n_ids, w, n);
}

int ferry_tok_cache_get(const struct tok_cache *c, const char *w, size_t n, uint64_t h,
			const int32_t **ids)
{
	size_t i = h & (CACHE_SLOTS - 1);
	uint32_t tag = (uint32_t)(h >> 32);

	for (int k = 0; k < CACHE_PROBES; k++, i = (i + 1) & (CACHE_SLOTS - 1)) {
		uint64_t v = atomic_load_explicit(&c->slot[i], memory_order_acquire);
		const struct cache_rec *r;

		if (!v)
			return -1;
		if ((uint32_t)(v >> 32) != tag)
			continue;
		r = rec_at(c, v);
		if (rec_is(r, w, n)) {
			*ids = r->ids;
			return (int)r->n_ids;
		}
	}
	return -1;
}

void ferry_tok_cache_prefetch(const struct tok_cache *c, uint64_t h, bool rec)
{
	const _Atomic uint64_t *slot = &c->slot[h & (CACHE_SLOTS - 1)];
	uint64_t v;

	if (!rec) {
		__builtin_prefetch((const void *)slot);
		return;
	}
	v = atomic_load_explicit(slot, memory_order_relaxed);
	if (v && (uint32_t)(v >> 32) == (uint32_t)(h >> 32))
		__builtin_prefetch(rec_at(c, v));
}

/* Room for a record of size bytes: its offset in the arena, or -1 when
 * the cache is full. */
static long take(struct tok_cache *c, size_t size)
{
	size_t at;

	if (atomic_load_explicit(&c->entries, memory_order_relaxed) >= CACHE_ENTRIES ||
	    atomic_load_explicit(&c->used, memory_order_relaxed) + size > CACHE_ARENA)
		return -1;
	at = atomic_fetch_add_explicit(&c->used, size, memory_order_relaxed);
	if (at + size > CACHE_ARENA)
		return -1;
	atomic_fetch_add_explicit(&c->entries, 1, memory_order_relaxed);
	return (long)at;
}

void ferry_tok_cache_put(struct tok_cache *c, const char *w, size_t n, uint64_t h,
			 const int32_t *ids, int n_ids)
{
	size_t size = (sizeof(struct cache_rec) + n_ids * sizeof(int32_t) + n + 7) & ~(size_t)7;
	size_t i = h & (CACHE_SLOTS - 1);
	uint64_t v, tag = (h >> 32) << 32;
	struct cache_rec *r;
	long at = take(c, size);

	if (at < 0)
		return;
	r = (struct cache_rec *)(c->arena + at);
	r->n_bytes = (uint32_t)n;
	r->n_ids = (uint32_t)n_ids;
	if (n_ids) /* a piece of unknown characters has none, and ids may be NULL */
		memcpy(r->ids, ids, n_ids * sizeof(int32_t));
	memcpy(r->ids + n_ids, w, n);
	v = tag | (uint64_t)(at / 8 + 1);
	for (int k = 0; k < CACHE_PROBES; k++, i = (i + 1) & (CACHE_SLOTS - 1)) {
		uint64_t old = 0;

		if (atomic_compare_exchange_strong_explicit(&c->slot[i], &old, v, memory_order_release,
							    memory_order_acquire))
			return;
		if ((old >> 32) << 32 == tag && rec_is(rec_at(c, old), w, n))
			return; /* another thread put it first */
	}
}
