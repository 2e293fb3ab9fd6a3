/*
 * Fully connected layer, weights stored [OC, C] (one row per output).
 *
 *   forward:  out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias[OC]
 *   backward: dinp[N, C]     += dout[N, OC] @ weight[OC, C]
 *             dweight[OC, C] += dout[N, OC]^T @ inp[N, C]
 *             dbias[OC]      += column sums of dout
 *
 * The products go through OpenBLAS sgemm (row-major, beta = 1 to
 * accumulate).  The forward seeds out with the bias and lets sgemm add the
 * product on top.  dbias is a sum over rows: each thread owns a slice of
 * the OC columns and walks every row.
 */
#include "ops/cpu/kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stddef.h>

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

void ferry_cpu_matmul_forward(float *out, const float *inp, const float *weight,
			      const float *bias, int N, int C, int OC)
{
	float beta = 0.0f;
	if (bias) {
#pragma omp parallel for schedule(static)
		for (int n = 0; n < N; n++) {
			float *restrict o = out + (size_t)n * OC;
			for (int j = 0; j < OC; j++)
				o[j] = bias[j];
		}
		beta = 1.0f;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f,
		    inp, C, weight, C, beta, out, OC);
}

void ferry_cpu_matmul_backward(float *dinp, float *dweight, float *dbias,
			       const float *dout, const float *inp,
			       const float *weight, int N, int C, int OC)
{
	if (dinp)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
			    1.0f, dout, OC, weight, C, 1.0f, dinp, C);
	if (dweight)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
			    1.0f, dout, OC, inp, C, 1.0f, dweight, C);
	if (dbias) {
#pragma omp parallel
		{
			int lo, hi;
			thread_slice(OC, &lo, &hi);
			for (int n = 0; lo < hi && n < N; n++) {
				const float *restrict d = dout + (size_t)n * OC;
				for (int j = lo; j < hi; j++)
					dbias[j] += d[j];
			}
		}
	}
}
