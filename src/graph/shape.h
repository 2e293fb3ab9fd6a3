/*
 * Named dimensions and shapes as products of them.
 *
 * A model declares every tensor's shape in terms of named dimensions
 * (batch, sequence, channels, heads, ...), never in numbers, so one
 * declaration serves every size: { .d = { B, T, C } } is [B, T, C], and
 * { .k = 3, .d = { C, C } } is GPT-2's fused [3C, C] QKV weight.  A model's
 * dimension values are one struct ferry_dims; sizes are computed in 64 bits
 * with overflow detection.
 */
#ifndef FERRY_GRAPH_SHAPE_H
#define FERRY_GRAPH_SHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ferry_dim {
	FERRY_DIM_NONE,  /* ends a shape's list */
	FERRY_DIM_B,     /* batch */
	FERRY_DIM_T,     /* sequence */
	FERRY_DIM_C,     /* channels (model width) */
	FERRY_DIM_NH,    /* attention (query) heads */
	FERRY_DIM_NKV,   /* key/value heads (grouped-query attention) */
	FERRY_DIM_HS,    /* head size */
	FERRY_DIM_QD,    /* query width, NH x HS */
	FERRY_DIM_KVD,   /* key/value width, NKV x HS */
	FERRY_DIM_FFN,   /* MLP hidden width */
	FERRY_DIM_V,     /* vocabulary */
	FERRY_DIM_VP,    /* vocabulary padded (rows of the embedding table) */
	FERRY_DIM_MAXT,  /* longest sequence (rows of a position table) */
	FERRY_DIM_L,     /* layers */
	FERRY_DIM_COUNT
};

#define FERRY_SHAPE_MAX_DIMS 5

/* k x d[0] x d[1] x ..., the list ending at the first FERRY_DIM_NONE;
 * k = 0 means 1. */
struct ferry_shape {
	int k;
	enum ferry_dim d[FERRY_SHAPE_MAX_DIMS];
};

struct ferry_dims {
	int64_t v[FERRY_DIM_COUNT];
};

/* Elements of a shape; false when the product overflows int64. */
bool ferry_shape_numel(const struct ferry_shape *s, const struct ferry_dims *dims, int64_t *out);

/* Elements per row of an activation: numel / (B x T) for a shape that
 * starts with B, T (its row width); 1 for [B, T]. */
int64_t ferry_shape_row_width(const struct ferry_shape *s, const struct ferry_dims *dims);

/* "B", "T", "C", ... */
const char *ferry_dim_name(enum ferry_dim d);

/* Writes "[3 x C, C]"-style text into buf. */
void ferry_shape_format(const struct ferry_shape *s, char *buf, size_t n);

#endif
