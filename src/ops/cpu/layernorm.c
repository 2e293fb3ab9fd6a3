/*
 * Layer normalisation over the C channels of each of N rows.
 *
 *   forward:  mean = sum(x) / C,  var = sum((x - mean)^2) / C (biased,
 *             two-pass so a large common offset does not cancel),
 *             rstd = 1 / sqrt(var + 1e-5),  xhat = (x - mean) * rstd,
 *             out = xhat * weight + bias.
 *   backward: g = dout * weight,
 *             dinp    += rstd * (g - mean(g) - xhat * mean(g * xhat))
 *             dweight += sum over rows of dout * xhat
 *             dbias   += sum over rows of dout
 *
 * dinp is row-parallel.  dweight/dbias are sums over rows, so for them each
 * thread owns a slice of the channels and walks every row (no races, no
 * scratch, deterministic).  xhat is recomputed from inp, mean and rstd.
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>

#define LN_EPS 1e-5f

/* This thread's slice [lo, hi) of n columns, 16-float aligned chunks. */
static void thread_slice(int n, int *lo, int *hi)
{
	int nt = omp_get_num_threads(), id = omp_get_thread_num();
	int per = (n + nt - 1) / nt;
	per = (per + 15) & ~15;
	long a = (long)id * per, b = a + per;
	*lo = (int)(a < n ? a : n);
	*hi = (int)(b < n ? b : n);
}

void ferry_cpu_layernorm_forward(float *out, float *mean, float *rstd,
				 const float *inp, const float *weight,
				 const float *bias, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *restrict x = inp + (size_t)n * C;
		float *restrict o = out + (size_t)n * C;
		float s = 0.0f;
#pragma omp simd reduction(+ : s)
		for (int c = 0; c < C; c++)
			s += x[c];
		const float m = s / (float)C;
		float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
		for (int c = 0; c < C; c++) {
			float d = x[c] - m;
			ss += d * d;
		}
		const float r = 1.0f / sqrtf(ss / (float)C + LN_EPS);
		for (int c = 0; c < C; c++)
			o[c] = (x[c] - m) * r * weight[c] + bias[c];
		mean[n] = m;
		rstd[n] = r;
	}
}

void ferry_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias,
				  const float *dout, const float *inp,
				  const float *weight, const float *mean,
				  const float *rstd, int N, int C)
{
	if (dinp) {
#pragma omp parallel for schedule(static)
		for (int n = 0; n < N; n++) {
			const float *restrict x = inp + (size_t)n * C;
			const float *restrict d = dout + (size_t)n * C;
			float *restrict g = dinp + (size_t)n * C;
			const float m = mean[n], r = rstd[n];
			float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
			for (int c = 0; c < C; c++) {
				float gc = d[c] * weight[c];
				sg += gc;
				sgx += gc * (x[c] - m) * r;
			}
			sg /= (float)C;
			sgx /= (float)C;
			for (int c = 0; c < C; c++) {
				float xhat = (x[c] - m) * r;
				g[c] += r *
					(d[c] * weight[c] - sg - xhat * sgx);
			}
		}
	}
	if (dweight || dbias) {
#pragma omp parallel
		{
			int lo, hi;
			thread_slice(C, &lo, &hi);
			for (int n = 0; lo < hi && n < N; n++) {
				const float *restrict x = inp + (size_t)n * C;
				const float *restrict d = dout + (size_t)n * C;
				const float m = mean[n], r = rstd[n];
				if (dweight)
					for (int c = lo; c < hi; c++)
						dweight[c] +=
							d[c] * (x[c] - m) * r;
				if (dbias)
					for (int c = lo; c < hi; c++)
						dbias[c] += d[c];
			}
		}
	}
}
