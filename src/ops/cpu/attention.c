/*
 * Causal multi-head self-attention without materialising the T x T matrix.
 *
 * Head h of q, k, v, out ([B, T, C]) is channels [h*HS, (h+1)*HS).  For a
 * query row t and key rows t2 <= t:
 *
 *   s[t2] = q_t . k_t2 * scale,  scale = 1 / sqrt(HS)
 *   p[t2] = exp(s[t2] - lse_t),  lse_t = log sum_t2 exp(s[t2])
 *   out_t = sum_t2 p[t2] v_t2
 *
 * Forward: keys are visited in tiles of ATT_TILE with an online softmax
 * (running max m and running sum l; when a tile raises the max the partial
 * sum and the partial output are rescaled by exp(m_old - m_new)).  Scores
 * live in a fixed-size stack tile, so any T works with no allocation.  Only
 * lse[B, NH, T] = m + log(l) is saved.  Query rows are independent, so the
 * forward is parallel over (b, h, t).
 *
 * Backward (flash-attention style, recomputes p from q, k and lse):
 *   D_t = dout_t . out_t   (= sum_t2 p[t2] dp[t2])
 *   for t2 <= t:  dp = dout_t . v_t2,  ds = p (dp - D_t)
 *     dq_t += scale ds k_t2,  dk_t2 += scale ds q_t,  dv_t2 += p dout_t
 * dk and dv rows receive contributions from many queries, so the backward is
 * parallel over (b, h) only: each thread owns whole heads and no two threads
 * write the same memory.  All gradients accumulate in place; no scratch.
 *
 * Scores are computed a key tile at a time against that tile transposed
 * (kt[d][j]), so the products for the tile's keys are one vector FMA per
 * channel d, summed over d in order, with no horizontal reduction per key:
 * the forward takes blocks of ATT_QBLOCK query rows per transposed tile, the
 * backward walks key tiles outermost and every later query inside (the order
 * in which each dq, dk and dv row receives its terms is the row-by-row one).
 * Head sizes above ATT_MAX_HS (a tile per thread on the stack) take the
 * row-by-row path below with a dot product per key.
 *
 * Sliding window (Mistral): with window W > 0, query t sees keys t2 with
 * t - W < t2 <= t (the last W keys, itself included, as transformers'
 * sliding-window causal mask); W = 0 is plain causal attention.  Keys
 * outside the window are not masked but never visited: a query's key range
 * is cut to [lo(t), t], lo(t) = max(0, t - W + 1), key tiles wholly before
 * a query block's window are skipped, and within a tile each row's range is
 * cut to its window.  The tiles stay aligned to multiples of ATT_TILE, so
 * with W = 0 (or W >= T) the arithmetic is the unwindowed one, bit for bit.
 *
 * Packed documents: with positions (row b's, positions[b * T + t] the
 * position of row t in its document), query t sees only the keys of its
 * document, t - positions[t] .. t, intersected with the window.  That is a
 * later first key, lo(t) = max(window's, t - positions[t]), cut the same way
 * as the window's: tiles wholly before it are never visited, and a row's
 * keys before it are never computed.  Documents follow each other along a
 * row, so lo(t) never decreases (each document's positions count 0, 1, ...);
 * the backward stops a key tile's rows at the first row whose document
 * starts after the tile.  Without positions lo(t) is the window's: the
 * arithmetic, bit for bit, of before.
 *
 * Scale and soft-capping (Gemma 2): the scale is 1 / sqrt(HS) unless one is
 * given (Gemma 2's query_pre_attn_scalar^-1/2); with cap > 0 each scaled
 * score s becomes cap tanh(s / cap) before the softmax (transformers'
 * attn_logit_softcapping), and the backward multiplies ds by its slope,
 * 1 - tanh^2, recomputed with p.  cap = 0 leaves the arithmetic as it was,
 * bit for bit.
 *
 * Grouped-query attention: k and v have NKV heads (rows of KVC = NKV * HS
 * channels) and query head h reads key/value head h / G, G = NH / NKV (Hugging
 * Face's repeat_kv, without the copy).  The arithmetic per query head is the
 * same as with NKV == NH, which gives exactly the multi-head results.  In the
 * backward the G query heads of a group all add into one dk/dv head, so a
 * thread owns a whole group (b, kv head) and walks its G query heads in
 * order: still no races, no scratch, and deterministic.
 */
#include "ops/cpu/kernels.h"
#include "ops/cpu/fastmath.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

#define ATT_TILE 64
#define ATT_QBLOCK 16
#define ATT_MAX_HS 256

static inline float dot(const float *restrict a, const float *restrict b, int n)
{
	float s = 0.0f;
#pragma omp simd reduction(+ : s)
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static inline int min_int(int a, int b)
{
	return a < b ? a : b;
}

static inline int max_int(int a, int b)
{
	return a > b ? a : b;
}

/* The first key query t sees: 0, or its window's start (W > 0), or its
 * document's start (pos: the row's positions) if later.  A position past t
 * (a row that starts inside a document) reaches back to 0 at most. */
static inline int first_key(int t, int W, const int32_t *pos)
{
	const int lo = W > 0 ? max_int(0, t - W + 1) : 0;

	if (!pos)
		return lo;
	return max_int(lo, t - min_int(t, max_int(0, pos[t])));
}

/* Rows k0 .. k0+nk-1 (stride KVC) transposed: kt[d * ATT_TILE + j]. */
static void transpose_tile(float *restrict kt, const float *restrict k, int k0, int nk, int KVC, int HS)
{
	for (int j = 0; j < nk; j++) {
		const float *restrict kj = k + (size_t)(k0 + j) * KVC;
		for (int d = 0; d < HS; d++)
			kt[d * ATT_TILE + j] = kj[d];
	}
}

/* s[j] = x . row j of the tile, j < n, summed over d in order. */
static inline void tile_dots(float *restrict s, const float *restrict x, const float *restrict kt, int n,
			     int HS)
{
	for (int j = 0; j < n; j++)
		s[j] = 0.0f;
	for (int d = 0; d < HS; d++) {
		const float xd = x[d];
		const float *restrict kd = kt + d * ATT_TILE;
#pragma omp simd
		for (int j = 0; j < n; j++)
			s[j] += xd * kd[j];
	}
}

/* acc[0 .. HS) += sum over j < n of w[j] * row (k0 + j) of x (stride KVC),
 * j in order.  Called with a constant HS, the loops have fixed trip counts
 * and acc stays in registers across the rows. */
static inline __attribute__((always_inline)) void add_rows(float *restrict acc, const float *restrict w,
							   const float *x, int k0, int n, int KVC, int HS)
{
	for (int j = 0; j < n; j++) {
		const float *restrict xj = x + (size_t)(k0 + j) * KVC;
		for (int i = 0; i < HS; i++)
			acc[i] += w[j] * xj[i];
	}
}

static void add_rows_any(float *restrict acc, const float *restrict w, const float *x, int k0, int n, int KVC,
			 int HS)
{
	if (HS == 64)
		add_rows(acc, w, x, k0, n, KVC, 64);
	else if (HS == 128)
		add_rows(acc, w, x, k0, n, KVC, 128);
	else
		add_rows(acc, w, x, k0, n, KVC, HS);
}

/* Scores s[0..n) scaled, then soft-capped when cap > 0 (in transformers'
 * order: times scale, over cap, tanh, times cap). */
static inline void scale_scores(float *restrict s, int n, float scale, float cap)
{
	if (cap > 0.0f)
		for (int j = 0; j < n; j++)
			s[j] = tanhf(s[j] * scale / cap) * cap;
	else
		for (int j = 0; j < n; j++)
			s[j] *= scale;
}

/* Query row t's part of one key tile (scores s, n keys from k0): the online
 * softmax step.  m, l: the row's running max and sum, m = -INFINITY before
 * the row's first tile. */
static inline void attend_tile_row(float *restrict ot, float *restrict s, float *m, float *l,
				   const float *v, int k0, int n, int KVC, int HS, float scale, float cap)
{
	float tmax = -INFINITY;

	scale_scores(s, n, scale, cap);
	for (int j = 0; j < n; j++)
		tmax = s[j] > tmax ? s[j] : tmax;
	if (*m == -INFINITY) {
		*m = tmax;
		*l = 0.0f;
		for (int i = 0; i < HS; i++)
			ot[i] = 0.0f;
	} else if (tmax > *m) {
		const float corr = fast_expf(*m - tmax);
		*l *= corr;
		for (int i = 0; i < HS; i++)
			ot[i] *= corr;
		*m = tmax;
	}
#pragma omp simd
	for (int j = 0; j < n; j++) /* the exponentials vectorised, then summed in order */
		s[j] = fast_expf(s[j] - *m);
	for (int j = 0; j < n; j++)
		*l += s[j];
	add_rows_any(ot, s, v, k0, n, KVC, HS);
}

/* One query row: q_t (HS values) against key/value rows lo..t (row
 * stride KVC), a dot product per key (head sizes too large for a transposed
 * tile).  Writes out_t and returns lse_t. */
static float attend_row(float *restrict ot, const float *restrict qt, const float *k, const float *v, int t,
			int lo, int KVC, int HS, float scale, float cap)
{
	float s[ATT_TILE], m = -INFINITY, l = 0.0f;

	for (int k0 = lo; k0 <= t; k0 += ATT_TILE) {
		const int n = min_int(ATT_TILE, t + 1 - k0);

		for (int j = 0; j < n; j++)
			s[j] = dot(qt, k + (size_t)(k0 + j) * KVC, HS);
		attend_tile_row(ot, s, &m, &l, v, k0, n, KVC, HS, scale, cap);
	}
	const float inv = 1.0f / l;

	for (int i = 0; i < HS; i++)
		ot[i] *= inv;
	return m + logf(l);
}

/* Query rows t0 .. t0+nq-1 of one head (q, out rows C apart; k, v rows KVC
 * apart; lse of the head; pos: the row's positions or NULL), each key
 * tile transposed once for the block; tiles before the first row's first
 * key skipped. */
static void attend_block(float *out, float *lse, const float *q, const float *k, const float *v, int t0, int nq,
			 int W, const int32_t *pos, int C, int KVC, int HS, float scale, float cap)
{
	float kt[ATT_MAX_HS * ATT_TILE], s[ATT_TILE], m[ATT_QBLOCK], l[ATT_QBLOCK];
	const int last = t0 + nq - 1;

	for (int r = 0; r < nq; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	int lo = first_key(t0, W, pos);

	for (int r = 1; pos && r < nq; r++) /* the block's earliest key (t0's, documents in order) */
		lo = min_int(lo, first_key(t0 + r, W, pos));
	for (int k0 = lo / ATT_TILE * ATT_TILE; k0 <= last; k0 += ATT_TILE) {
		const int nk = min_int(ATT_TILE, last + 1 - k0);

		transpose_tile(kt, k, k0, nk, KVC, HS);
		for (int r = 0; r < nq; r++) {
			const int t = t0 + r;
			const int j0 = max_int(0, first_key(t, W, pos) - k0);
			const int n = min_int(nk, t + 1 - k0) - j0;

			if (n <= 0)
				continue;
			tile_dots(s, q + (size_t)t * C, kt + j0, n, HS);
			attend_tile_row(out + (size_t)t * C, s, &m[r], &l[r], v, k0 + j0, n, KVC, HS, scale, cap);
		}
	}
	for (int r = 0; r < nq; r++) {
		float *restrict ot = out + (size_t)(t0 + r) * C;
		const float inv = 1.0f / l[r];

		for (int i = 0; i < HS; i++)
			ot[i] *= inv;
		lse[t0 + r] = m[r] + logf(l[r]);
	}
}

static void attention_forward_tiled(float *out, float *lse, const float *q, const float *k, const float *v,
				    const int32_t *pos, int B, int T, int C, int NH, int NKV, int W, float scale,
				    float cap)
{
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const int NQB = (T + ATT_QBLOCK - 1) / ATT_QBLOCK;

#pragma omp parallel for collapse(3) schedule(static, 1)
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int qb = 0; qb < NQB; qb++) {
				const size_t row0 = (size_t)b * T * C + (size_t)h * HS;
				const size_t kvhead = (size_t)b * T * KVC + (size_t)(h / G) * HS;
				const int t0 = qb * ATT_QBLOCK;

				attend_block(out + row0, lse + ((size_t)b * NH + h) * T, q + row0, k + kvhead,
					     v + kvhead, t0, min_int(ATT_QBLOCK, T - t0), W,
					     pos ? pos + (size_t)b * T : NULL, C, KVC, HS, scale, cap);
			}
}

/* The scale of scores: given, or 1 / sqrt(HS). */
static float score_scale(float given, int HS)
{
	return given > 0.0f ? given : 1.0f / sqrtf((float)HS);
}

void ferry_cpu_attention_forward(float *out, float *lse, const float *q,
				 const float *k, const float *v, int B, int T,
				 int C, int NH, int NKV, int W, float scale_given, float cap)
{
	ferry_cpu_attention_forward_pos(out, lse, q, k, v, NULL, B, T, C, NH, NKV, W, scale_given, cap);
}

void ferry_cpu_attention_forward_pos(float *out, float *lse, const float *q, const float *k, const float *v,
				     const int32_t *positions, int B, int T, int C, int NH, int NKV, int W,
				     float scale_given, float cap)
{
	assert(NKV > 0 && NH % NKV == 0 && W >= 0);
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const float scale = score_scale(scale_given, HS);

	if (HS <= ATT_MAX_HS) {
		attention_forward_tiled(out, lse, q, k, v, positions, B, T, C, NH, NKV, W, scale, cap);
		return;
	}
#pragma omp parallel for collapse(3) schedule(static, 1)
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const size_t row = (size_t)b * T * C +
						   (size_t)t * C + (size_t)h * HS;
				const size_t kvhead = (size_t)b * T * KVC +
						      (size_t)(h / G) * HS;
				lse[((size_t)b * NH + h) * T + t] = attend_row(
					out + row, q + row, k + kvhead,
					v + kvhead, t,
					first_key(t, W, positions ? positions + (size_t)b * T : NULL), KVC, HS,
					scale, cap);
			}
}

/* Backward of one (b, h) head.  All pointers point at row 0 of batch b, at
 * channel h*HS for the query side (dq, dout, q, out: rows C apart) and at the
 * channels of h's key/value head for the key side (dk, dv, k, v: rows KVC
 * apart; pos: batch b's positions or NULL).  Gradients may be NULL. */
static void attend_head_backward(float *dq, float *dk, float *dv,
				 const float *dout, const float *q,
				 const float *k, const float *v,
				 const float *out, const float *lse, int T,
				 int W, const int32_t *pos, int C, int KVC, int HS, float scale, float cap)
{
	for (int t = 0; t < T; t++) {
		const size_t rt = (size_t)t * C;
		const float *restrict qt = q + rt;
		const float *restrict gt = dout + rt;
		const float Dt = dot(gt, out + rt, HS);
		for (int t2 = first_key(t, W, pos); t2 <= t; t2++) {
			const size_t r2 = (size_t)t2 * KVC;
			const float *restrict k2 = k + r2;
			float p, slope = 1.0f; /* d capped score / d score */

			if (cap > 0.0f) {
				const float th = tanhf(dot(qt, k2, HS) * scale / cap);

				p = fast_expf(th * cap - lse[t]);
				slope = 1.0f - th * th;
			} else {
				p = fast_expf(dot(qt, k2, HS) * scale - lse[t]);
			}
			if (dv) {
				float *restrict g = dv + r2;
				for (int i = 0; i < HS; i++)
					g[i] += p * gt[i];
			}
			if (!dq && !dk)
				continue;
			const float dp = dot(gt, v + r2, HS);
			const float ds = cap > 0.0f ? p * (dp - Dt) * slope * scale : p * (dp - Dt) * scale;
			if (dq) {
				float *restrict g = dq + rt;
				for (int i = 0; i < HS; i++)
					g[i] += ds * k2[i];
			}
			if (dk) {
				float *restrict g = dk + r2;
				for (int i = 0; i < HS; i++)
					g[i] += ds * qt[i];
			}
		}
	}
}

/* p = exp(capped score - lse) over a tile's scores s (in place), and the
 * cap's slope 1 - tanh^2 into slope. */
static void capped_probs(float *restrict s, float *restrict slope, int n, float scale, float cap, float lse_t)
{
	for (int j = 0; j < n; j++) {
		const float th = tanhf(s[j] * scale / cap);

		s[j] = fast_expf(th * cap - lse_t);
		slope[j] = 1.0f - th * th;
	}
}

/* One query row t against one key tile (n keys from k0; kt, vt: the tile's
 * k and v transposed): p = exp(q.k scale - lse), dv += p dout,
 * ds = p (dout.v - D) scale, dq_t += ds k, dk += ds q_t (with a cap, p of
 * the capped score and ds times the cap's slope).  s, ds: ATT_TILE floats
 * of scratch. */
static inline void backward_tile_row(float *dq, float *dk, float *dv, const float *restrict qt,
				     const float *restrict gt, float Dt, float lse_t, const float *k,
				     const float *restrict kt, const float *restrict vt, int k0, int n,
				     int KVC, int HS, float scale, float cap, float *restrict s, float *restrict ds)
{
	float slope[ATT_TILE];

	tile_dots(s, qt, kt, n, HS);
	if (cap > 0.0f) {
		capped_probs(s, slope, n, scale, cap, lse_t);
	} else {
#pragma omp simd
		for (int j = 0; j < n; j++)
			s[j] = fast_expf(s[j] * scale - lse_t);
	}
	for (int j = 0; dv && j < n; j++) {
		float *restrict g = dv + (size_t)(k0 + j) * KVC;
		for (int i = 0; i < HS; i++)
			g[i] += s[j] * gt[i];
	}
	if (!dq && !dk)
		return;
	tile_dots(ds, gt, vt, n, HS);
	if (cap > 0.0f) {
		for (int j = 0; j < n; j++)
			ds[j] = s[j] * (ds[j] - Dt) * slope[j] * scale;
	} else {
#pragma omp simd
		for (int j = 0; j < n; j++)
			ds[j] = s[j] * (ds[j] - Dt) * scale;
	}
	if (dq)
		add_rows_any(dq, ds, k, k0, n, KVC, HS);
	for (int j = 0; dk && j < n; j++) {
		float *restrict g = dk + (size_t)(k0 + j) * KVC;
		for (int i = 0; i < HS; i++)
			g[i] += ds[j] * qt[i];
	}
}

/* attend_head_backward, key tiles outermost: each tile's k and v are
 * transposed once for every query at or after it whose window reaches it
 * (t < k0 + nk - 1 + W) and whose document starts in it or before, each
 * row cut to its first key. */
static void attend_head_backward_tiled(float *dq, float *dk, float *dv, const float *dout, const float *q,
				       const float *k, const float *v, const float *out, const float *lse, int T,
				       int W, const int32_t *pos, int C, int KVC, int HS, float scale, float cap)
{
	float kt[ATT_MAX_HS * ATT_TILE], vt[ATT_MAX_HS * ATT_TILE], s[ATT_TILE], ds[ATT_TILE];

	for (int k0 = 0; k0 < T; k0 += ATT_TILE) {
		const int nk = min_int(ATT_TILE, T - k0);
		const int tend = W > 0 ? min_int(T, k0 + nk - 1 + W) : T;

		transpose_tile(kt, k, k0, nk, KVC, HS);
		if (dq || dk)
			transpose_tile(vt, v, k0, nk, KVC, HS);
		for (int t = k0; t < tend; t++) {
			const size_t rt = (size_t)t * C;
			const int lo = first_key(t, W, pos);

			if (lo >= k0 + nk) /* a later document: so are the rows after it */
				break;
			const int j0 = max_int(0, lo - k0);

			backward_tile_row(dq ? dq + rt : NULL, dk, dv, q + rt, dout + rt, dot(dout + rt, out + rt, HS),
					  lse[t], k, kt + j0, vt + j0, k0 + j0, min_int(nk, t + 1 - k0) - j0, KVC, HS,
					  scale, cap, s, ds);
		}
	}
}

void ferry_cpu_attention_backward(float *dq, float *dk, float *dv,
				  const float *dout, const float *q,
				  const float *k, const float *v,
				  const float *out, const float *lse, int B,
				  int T, int C, int NH, int NKV, int W, float scale_given, float cap)
{
	ferry_cpu_attention_backward_pos(dq, dk, dv, dout, q, k, v, out, lse, NULL, B, T, C, NH, NKV, W,
					 scale_given, cap);
}

void ferry_cpu_attention_backward_pos(float *dq, float *dk, float *dv, const float *dout, const float *q,
				      const float *k, const float *v, const float *out, const float *lse,
				      const int32_t *positions, int B, int T, int C, int NH, int NKV, int W,
				      float scale_given, float cap)
{
	if (!dq && !dk && !dv)
		return;
	assert(NKV > 0 && NH % NKV == 0 && W >= 0);
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const float scale = score_scale(scale_given, HS);

#pragma omp parallel for collapse(2) schedule(static)
	for (int b = 0; b < B; b++)
		for (int kh = 0; kh < NKV; kh++) {
			const size_t okv = (size_t)b * T * KVC + (size_t)kh * HS;
			for (int h = kh * G; h < (kh + 1) * G; h++) {
				const size_t o =
					(size_t)b * T * C + (size_t)h * HS;
				(HS <= ATT_MAX_HS ? attend_head_backward_tiled : attend_head_backward)(
					dq ? dq + o : NULL,
					dk ? dk + okv : NULL,
					dv ? dv + okv : NULL, dout + o, q + o,
					k + okv, v + okv, out + o,
					lse + ((size_t)b * NH + h) * T, T, W,
					positions ? positions + (size_t)b * T : NULL, C, KVC, HS, scale, cap);
			}
		}
}
