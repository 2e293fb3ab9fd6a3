/*
 * Residual connection, elementwise on n values.
 *
 *   forward:  out = a + b
 *   backward: da += dout,  db += dout
 *
 * No restrict: out may alias a or b (in-place add), and da may equal db
 * (then it receives dout twice, as it should).  The compiler versions the
 * loops for the non-overlapping case.
 */
#include "ops/cpu/kernels.h"

void ferry_cpu_residual_forward(float *out, const float *a, const float *b,
				long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

void ferry_cpu_residual_backward(float *da, float *db, const float *dout,
				 long n)
{
	if (da) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			da[i] += dout[i];
	}
	if (db) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			db[i] += dout[i];
	}
}
