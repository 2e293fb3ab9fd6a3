#include "core/host_fill.h"

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
