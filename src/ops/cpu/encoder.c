/*
 * Token + position embedding.
 *
 *   forward:  out[b,t,:] = wte[tokens[b,t], :] + wpe[p, :]
 *   backward: dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[p, :] += dout[b,t,:]
 *
 * p is t, or with packed documents positions[b,t] (the row's position in
 * its document).
 *
 * The backward pass is a scatter-add: several (b,t) may hold the same token,
 * so rows of dwte cannot be split between threads.  Instead each thread owns
 * a contiguous slice of the C channels and walks every row, which is race
 * free, deterministic, and keeps the inner loop contiguous.
 */
#include "ops/cpu/kernels.h"

#include <string.h>

#include <omp.h>
#include <stddef.h>

/* This thread's slice [lo, hi) of n columns, in chunks of 16 floats (one
 * cache line) so that neighbouring threads do not share lines. */
static void thread_slice(int n, int *lo, int *hi)
{
	int nt = omp_get_num_threads(), id = omp_get_thread_num();
	int per = (n + nt - 1) / nt;
	per = (per + 15) & ~15;
	long a = (long)id * per, b = a + per;
	*lo = (int)(a < n ? a : n);
	*hi = (int)(b < n ? b : n);
}

void ferry_cpu_encoder_forward(float *out, const int32_t *tokens,
			       const float *wte, const float *wpe, int B, int T,
			       int C)
{
	ferry_cpu_encoder_forward_pos(out, tokens, NULL, wte, wpe, B, T, C);
}

void ferry_cpu_encoder_forward_pos(float *out, const int32_t *tokens, const int32_t *positions,
				   const float *wte, const float *wpe, int B, int T, int C)
{
	const long N = (long)B * T;
#pragma omp parallel for schedule(static)
	for (long n = 0; n < N; n++) {
		const float *restrict e = wte + (size_t)tokens[n] * C;
		float *restrict o = out + (size_t)n * C;
		if (!wpe) { /* no position table (rotary models) */
			memcpy(o, e, (size_t)C * sizeof(float));
			continue;
		}
		const float *restrict p = wpe + (size_t)(positions ? positions[n] : n % T) * C;
		for (int c = 0; c < C; c++)
			o[c] = e[c] + p[c];
	}
}

void ferry_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
				const int32_t *tokens, int B, int T, int C)
{
	ferry_cpu_encoder_backward_pos(dwte, dwpe, dout, tokens, NULL, B, T, C);
}

void ferry_cpu_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
				    const int32_t *positions, int B, int T, int C)
{
	if (!dwte && !dwpe)
		return;
	const long N = (long)B * T;
#pragma omp parallel
	{
		int lo, hi;
		thread_slice(C, &lo, &hi);
		for (long n = 0; lo < hi && n < N; n++) {
			const float *restrict d = dout + (size_t)n * C;
			if (dwte) {
				float *restrict g =
					dwte + (size_t)tokens[n] * C;
				for (int c = lo; c < hi; c++)
					g[c] += d[c];
			}
			if (dwpe) {
				float *restrict g =
					dwpe + (size_t)(positions ? positions[n] : n % T) * C;
				for (int c = lo; c < hi; c++)
					g[c] += d[c];
			}
		}
	}
}
