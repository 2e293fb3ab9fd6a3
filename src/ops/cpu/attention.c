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

static inline float dot(const float *restrict a, const float *restrict b, int n)
{
	float s = 0.0f;
#pragma omp simd reduction(+ : s)
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* One query row: q_t (HS values) against key/value rows 0..t (row stride
 * KVC).  Writes out_t and returns lse_t. */
static inline float attend_row(float *restrict ot, const float *restrict qt,
			       const float *k, const float *v, int t, int KVC,
			       int HS, float scale)
{
	float s[ATT_TILE];
	float m = 0.0f, l = 0.0f;

	for (int k0 = 0; k0 <= t; k0 += ATT_TILE) {
		const int nk = t + 1 - k0 < ATT_TILE ? t + 1 - k0 : ATT_TILE;
		float tmax = -INFINITY;
		for (int j = 0; j < nk; j++) {
			s[j] = dot(qt, k + (size_t)(k0 + j) * KVC, HS) * scale;
			tmax = s[j] > tmax ? s[j] : tmax;
		}
		if (k0 == 0) { /* first tile: start the running max */
			m = tmax;
			for (int i = 0; i < HS; i++)
				ot[i] = 0.0f;
		} else if (tmax > m) { /* new max: rescale what we have */
			const float corr = fast_expf(m - tmax);
			l *= corr;
			for (int i = 0; i < HS; i++)
				ot[i] *= corr;
			m = tmax;
		}
		for (int j = 0; j < nk; j++) {
			const float p = fast_expf(s[j] - m);
			const float *restrict vj = v + (size_t)(k0 + j) * KVC;
			l += p;
			for (int i = 0; i < HS; i++)
				ot[i] += p * vj[i];
		}
	}
	const float inv = 1.0f / l;
	for (int i = 0; i < HS; i++)
		ot[i] *= inv;
	return m + logf(l);
}

void ferry_cpu_attention_forward(float *out, float *lse, const float *q,
				 const float *k, const float *v, int B, int T,
				 int C, int NH, int NKV)
{
	assert(NKV > 0 && NH % NKV == 0);
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const float scale = 1.0f / sqrtf((float)HS);

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
					v + kvhead, t, KVC, HS, scale);
			}
}

/* Backward of one (b, h) head.  All pointers point at row 0 of batch b, at
 * channel h*HS for the query side (dq, dout, q, out: rows C apart) and at the
 * channels of h's key/value head for the key side (dk, dv, k, v: rows KVC
 * apart).  Gradients may be NULL. */
static void attend_head_backward(float *dq, float *dk, float *dv,
				 const float *dout, const float *q,
				 const float *k, const float *v,
				 const float *out, const float *lse, int T,
				 int C, int KVC, int HS, float scale)
{
	for (int t = 0; t < T; t++) {
		const size_t rt = (size_t)t * C;
		const float *restrict qt = q + rt;
		const float *restrict gt = dout + rt;
		const float Dt = dot(gt, out + rt, HS);
		for (int t2 = 0; t2 <= t; t2++) {
			const size_t r2 = (size_t)t2 * KVC;
			const float *restrict k2 = k + r2;
			const float p = fast_expf(dot(qt, k2, HS) * scale - lse[t]);
			if (dv) {
				float *restrict g = dv + r2;
				for (int i = 0; i < HS; i++)
					g[i] += p * gt[i];
			}
			if (!dq && !dk)
				continue;
			const float dp = dot(gt, v + r2, HS);
			const float ds = p * (dp - Dt) * scale;
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

void ferry_cpu_attention_backward(float *dq, float *dk, float *dv,
				  const float *dout, const float *q,
				  const float *k, const float *v,
				  const float *out, const float *lse, int B,
				  int T, int C, int NH, int NKV)
{
	if (!dq && !dk && !dv)
		return;
	assert(NKV > 0 && NH % NKV == 0);
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const float scale = 1.0f / sqrtf((float)HS);

#pragma omp parallel for collapse(2) schedule(static)
	for (int b = 0; b < B; b++)
		for (int kh = 0; kh < NKV; kh++) {
			const size_t okv = (size_t)b * T * KVC + (size_t)kh * HS;
			for (int h = kh * G; h < (kh + 1) * G; h++) {
				const size_t o =
					(size_t)b * T * C + (size_t)h * HS;
				attend_head_backward(
					dq ? dq + o : NULL,
					dk ? dk + okv : NULL,
					dv ? dv + okv : NULL, dout + o, q + o,
					k + okv, v + okv, out + o,
					lse + ((size_t)b * NH + h) * T, T, C,
					KVC, HS, scale);
			}
		}
}
