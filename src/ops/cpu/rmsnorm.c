/*
 * RMS normalisation (Llama, Hugging Face LlamaRMSNorm) over the C channels
 * of each of N rows.
 *
 *   forward:  rstd = 1 / sqrt(sum(x^2) / C + eps),  xhat = x * rstd,
 *             out = xhat * weight   (HF: weight * (x * rsqrt(var + eps)))
 *   backward: g = dout * weight,
 *             dinp    += rstd * (g - xhat * mean(g * xhat))
 *             dweight += sum over rows of dout * xhat
 *
 * (d rstd / d x_j = -rstd^3 x_j / C, so sum_c g_c x_c * d rstd / d x_j =
 * -rstd xhat_j mean(g * xhat).)
 *
 * dinp is row-parallel.  dweight is a sum over rows, so for it each thread
 * owns a slice of the channels and walks every row in order (no races, no
 * scratch, deterministic for a fixed thread count), as layernorm.c does.
 * xhat is recomputed from inp and rstd.
 *
 * Gemma's RMSNorm scales by 1 + weight (its gains start at 0): offset is
 * added to every gain, in the forward and in g; 0 is Llama's, bit for bit.
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <stdbool.h>
#include <omp.h>
#include <stddef.h>

/* This thread's slice [lo, hi) of n columns, in 16-float aligned chunks. */
static void column_slice(int n, int *lo, int *hi)
{
	const int nt = omp_get_num_threads(), id = omp_get_thread_num();
	int per = (n + nt - 1) / nt;
	per = (per + 15) & ~15;
	const long a = (long)id * per, b = a + per;
	*lo = (int)(a < n ? a : n);
	*hi = (int)(b < n ? b : n);
}

/* Channel c's gain: weight[c], or weight[c] + offset (Gemma's 1 + w), or
 * with no weight (Gemma 4's v norm) the offset alone.  `on` is a constant
 * at each call, so that without an offset the arithmetic is the plain
 * product it always was. */
static inline __attribute__((always_inline)) float gain(const float *weight, int c, float offset, bool on)
{
	return on ? (weight ? weight[c] : 0.0f) + offset : weight[c];
}

static inline __attribute__((always_inline)) void forward_row(float *restrict o, const float *restrict x,
							      const float *weight, float r, int C, float offset,
							      bool on)
{
#pragma omp simd
	for (int c = 0; c < C; c++)
		o[c] = (x[c] * r) * gain(weight, c, offset, on);
}

void ferry_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp,
			       const float *weight, int N, int C, float eps, float offset)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *restrict x = inp + (size_t)n * C;
		float *restrict o = out + (size_t)n * C;
		float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
		for (int c = 0; c < C; c++)
			ss += x[c] * x[c];
		const float r = 1.0f / sqrtf(ss / (float)C + eps);
		if (offset != 0.0f)
			forward_row(o, x, weight, r, C, offset, true);
		else
			forward_row(o, x, weight, r, C, 0.0f, false);
		rstd[n] = r;
	}
}

/* One row's dinp += rstd (g - xhat mean(g xhat)), g = dout * gain. */
static inline __attribute__((always_inline)) void backward_row(float *restrict g, const float *restrict d,
							       const float *restrict x, const float *weight, float r,
							       int C, float offset, bool on)
{
	float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
	for (int c = 0; c < C; c++)
		sgx += d[c] * gain(weight, c, offset, on) * (x[c] * r);
	sgx /= (float)C;
#pragma omp simd
	for (int c = 0; c < C; c++)
		g[c] += r * (d[c] * gain(weight, c, offset, on) - (x[c] * r) * sgx);
}

void ferry_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout,
				const float *inp, const float *weight,
				const float *rstd, int N, int C, float offset)
{
	if (dinp) {
#pragma omp parallel for schedule(static)
		for (int n = 0; n < N; n++) {
			const size_t row = (size_t)n * C;

			if (offset != 0.0f)
				backward_row(dinp + row, dout + row, inp + row, weight, rstd[n], C, offset, true);
			else
				backward_row(dinp + row, dout + row, inp + row, weight, rstd[n], C, 0.0f, false);
		}
	}
	if (dweight) {
#pragma omp parallel
		{
			int lo, hi;
			column_slice(C, &lo, &hi);
			for (int n = 0; lo < hi && n < N; n++) {
				const float *restrict x = inp + (size_t)n * C;
				const float *restrict d = dout + (size_t)n * C;
				const float r = rstd[n];
#pragma omp simd
				for (int c = lo; c < hi; c++)
					dweight[c] += d[c] * (x[c] * r);
			}
		}
	}
}
