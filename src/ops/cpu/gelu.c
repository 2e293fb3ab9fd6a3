/*
 * GELU, tanh approximation, elementwise on n values.
 *
 *   u = sqrt(2/pi) (x + 0.044715 x^3),  y = 0.5 x (1 + tanh u)
 *   dy/dx = 0.5 (1 + tanh u)
 *         + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *
 * backward: dinp += dout * dy/dx, or with assign dinp = dout * dy/dx.  out
 * may alias inp (in-place forward); dinp may alias dout.
 */
#include "ops/cpu/kernels.h"

#include "ops/cpu/fastmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

void ferry_cpu_gelu_forward(float *out, const float *inp, long n)
{
#pragma omp parallel for schedule(static)
	for (long i = 0; i < n; i++) {
		const float x = inp[i];
		const float u = GELU_K * (x + GELU_A * x * x * x);
		out[i] = 0.5f * x * (1.0f + fast_tanhf(u));
	}
}

/* dy/dx at x. */
static inline float gelu_slope(float x)
{
	const float u = GELU_K * (x + GELU_A * x * x * x);
	const float th = fast_tanhf(u);
	const float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);

	return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
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
