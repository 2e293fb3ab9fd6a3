#include "core/host_fill.h"

#include <stdint.h>
#include <string.h>

/* below this a lone memset/memcpy wins: waking the team costs more */
#define PARALLEL_MIN ((size_t)64 << 20)
#define PIECE ((size_t)4 << 20)

/* dst's n bytes from src, or zeros where src is NULL */
static void fill(void *dst, const void *src, size_t n)
{
	const long pieces = (long)((n + PIECE - 1) / PIECE);

#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
	for (long i = 0; i < pieces; i++) {
		const size_t lo = (size_t)i * PIECE, len = n - lo < PIECE ? n - lo : PIECE;

		if (src)
			memcpy((char *)dst + lo, (const char *)src + lo, len);
		else
			memset((char *)dst + lo, 0, len);
	}
}

void ferry_host_zero(void *p, size_t n)
{
	fill(p, NULL, n);
}

void ferry_host_copy(void *dst, const void *src, size_t n)
{
	fill(dst, src, n);
}

#define FNV_PRIME 0x100000001b3ull
#define FNV_INIT 0xcbf29ce484222325ull
#define HASH_GROUP 64 /* pieces hashed together, then chained */

/* FNV-1a over the 32-bit words of n bytes (a tail shorter than a word
 * byte by byte), from h */
static uint64_t fnv_words(uint64_t h, const unsigned char *b, size_t n)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		uint32_t w;

		memcpy(&w, b + i, sizeof(w));
		h = (h ^ w) * FNV_PRIME;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * FNV_PRIME;
	return h;
}

uint64_t ferry_host_hash(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	const size_t pieces = (n + PIECE - 1) / PIECE;

	h = fnv_words(h, (const unsigned char *)&n, sizeof(n)); /* a prefix of p hashes otherwise */
	for (size_t g = 0; g < pieces; g += HASH_GROUP) {
		const long k = (long)(pieces - g < HASH_GROUP ? pieces - g : HASH_GROUP);
		uint64_t piece[HASH_GROUP];

#pragma omp parallel for schedule(static) if (k > 1 && n >= PARALLEL_MIN)
		for (long i = 0; i < k; i++) {
			const size_t lo = (g + (size_t)i) * PIECE;

			piece[i] = fnv_words(FNV_INIT, b + lo, n - lo < PIECE ? n - lo : PIECE);
		}
		h = fnv_words(h, (const unsigned char *)piece, (size_t)k * sizeof(piece[0]));
	}
	return h;
}
