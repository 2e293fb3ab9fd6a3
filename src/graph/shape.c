/* Shapes as products of named dimensions. */
#include "graph/shape.h"

#include <stdio.h>

bool ferry_shape_numel(const struct ferry_shape *s, const struct ferry_dims *dims, int64_t *out)
{
	int64_t n = s->k ? s->k : 1;

	for (int i = 0; i < FERRY_SHAPE_MAX_DIMS && s->d[i] != FERRY_DIM_NONE; i++) {
		int64_t v = dims->v[s->d[i]];

		if (v < 0 || __builtin_mul_overflow(n, v, &n))
			return false;
	}
	*out = n;
	return true;
}

int64_t ferry_shape_row_width(const struct ferry_shape *s, const struct ferry_dims *dims)
{
	int64_t n = s->k ? s->k : 1;
	int i = 0;

	if (s->d[0] == FERRY_DIM_B && s->d[1] == FERRY_DIM_T)
		i = 2;
	for (; i < FERRY_SHAPE_MAX_DIMS && s->d[i] != FERRY_DIM_NONE; i++)
		n *= dims->v[s->d[i]];
	return n;
}

const char *ferry_dim_name(enum ferry_dim d)
{
	static const char *const names[FERRY_DIM_COUNT] = {
		[FERRY_DIM_NONE] = "?", [FERRY_DIM_B] = "B", [FERRY_DIM_T] = "T",
		[FERRY_DIM_C] = "C", [FERRY_DIM_NH] = "NH", [FERRY_DIM_NKV] = "NKV",
		[FERRY_DIM_HS] = "HS", [FERRY_DIM_QD] = "NH*HS", [FERRY_DIM_KVD] = "NKV*HS",
		[FERRY_DIM_FFN] = "FFN", [FERRY_DIM_V] = "V",
		[FERRY_DIM_VP] = "Vp", [FERRY_DIM_MAXT] = "maxT", [FERRY_DIM_L] = "L",
	};

	return d >= 0 && d < FERRY_DIM_COUNT ? names[d] : "?";
}

void ferry_shape_format(const struct ferry_shape *s, char *buf, size_t n)
{
	size_t used = (size_t)snprintf(buf, n, "[");

	for (int i = 0; i < FERRY_SHAPE_MAX_DIMS && s->d[i] != FERRY_DIM_NONE && used < n; i++) {
		if (i == 0 && s->k > 1)
			used += (size_t)snprintf(buf + used, n - used, "%d x ", s->k);
		if (used < n)
			used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
						 ferry_dim_name(s->d[i]));
	}
	if (used < n)
		snprintf(buf + used, n - used, "]");
}
