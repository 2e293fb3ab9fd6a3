/*
 * A constant factor, elementwise on n values: out = inp * scale (Gemma
 * scales its embedding by sqrt(C)).  The op's scale is already in the
 * activation type (fp32 here).  backward: dinp += dout * scale, or with
 * assign dinp = dout * scale, in place over dout when they alias.
 */
#include "ops/cpu/kernels.h"

void ferry_cpu_scale_forward(float *out, const float *inp, float scale, long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++)
		out[i] = inp[i] * scale;
}

void ferry_cpu_scale_backward(float *dinp, const float *dout, float scale, long n, bool assign)
{
	if (!dinp)
		return;
	if (assign) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dinp[i] = dout[i] * scale;
	} else {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dinp[i] += dout[i] * scale;
	}
}
