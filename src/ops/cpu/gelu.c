/*
 * GELU, tanh approximation, elementwise on n values (ops/cpu/gelu_tanh.h).
 *
 * backward: dinp += dout * dy/dx, or with assign dinp = dout * dy/dx.  out
 * may alias inp (in-place forward); dinp may alias dout.
 */
#include "ops/cpu/kernels.h"

#include "ops/cpu/gelu_tanh.h"

void ferry_cpu_gelu_forward(float *out, const float *inp, long n)
{
#pragma omp parallel for schedule(static)
	for (long i = 0; i < n; i++)
		out[i] = gelu_value(inp[i]);
}

/* One loop per case, each `omp simd`: a loop-invariant branch on assign
 * inside the body kept GCC from vectorising it at all (17x slower than the
 * forward), and dinp == dout (in place) is safe to widen, as each element
 * reads its own index only. */
void ferry_cpu_gelu_backward(float *dinp, const float *dout, const float *inp,
			     long n, bool assign)
{
	if (!dinp)
		return;
	if (assign) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dinp[i] = 0.0f + dout[i] * gelu_slope(inp[i]); /* -0 to +0, as added to zeros */
	} else {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dinp[i] += dout[i] * gelu_slope(inp[i]);
	}
}
