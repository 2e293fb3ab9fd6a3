/*
 * The GPU kernels' tanh forms: GELU in its tanh form, shared by the GELU
 * (GPT-2) and GeGLU (Gemma) kernels (the CPU's is src/ops/cpu/gelu_tanh.h),
 * and the soft cap's tanh (Gemma 2's attention scores and logits).
 */
#ifndef FERRY_BACKEND_CUDA_TANH_FORMS_CUH
#define FERRY_BACKEND_CUDA_TANH_FORMS_CUH

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/*
 * With u = sqrt(2/pi) (x + 0.044715 x^3) and s = 1 / (1 + e^(-2u)):
 *   1 + tanh u = 2 s,  1 - tanh u = 2 (1 - s),  1 - tanh^2 u = 4 s (1 - s),
 * so   gelu(x) = 0.5 x (1 + tanh u) = x s
 * and  d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx
 *                  = s + 2 x s (1 - s) du/dx,   1 - s = e^(-2u) s.
 * Written this way, not with tanhf: under --use_fast_math tanhf becomes
 * tanh.approx.f32, whose absolute error near tanh = -1 (~5e-4) would wreck
 * gelu for negative x (the CPU's fast_tanhf is exact at both ends for the
 * same reason).  Here errors are relative (__expf, fast reciprocal).
 * Only e^(-|2u|) <= 1 is computed, so nothing overflows:
 *   u >= 0: e = e^(-2u), s = 1 / (1 + e),  1 - s = e / (1 + e)
 *   u <  0: e = e^(2u),  s = e / (1 + e),  1 - s = 1 / (1 + e)
 * (for u = -inf: e = 0, s = 0, 1 - s = 1).
 */
static __device__ __forceinline__ void gelu_parts(float x, float *s, float *one_minus_s)
{
	const float u = GELU_K * (x + GELU_A * x * x * x);
	const float e = expf(-2.0f * fabsf(u));
	const float r = 1.0f / (1.0f + e);

	if (u >= 0.0f) {
		*s = r;
		*one_minus_s = e * r;
	} else {
		*s = e * r;
		*one_minus_s = r;
	}
}

/* gelu(x) = x s. */
static __device__ __forceinline__ float gelu_value(float x)
{
	float sg, sm;

	gelu_parts(x, &sg, &sm);
	return x * sg;
}

/* gelu(x) = x s, and its slope s + 2 x s (1 - s) du/dx. */
static __device__ __forceinline__ float gelu_value_slope(float x, float *slope)
{
	const float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
	float sg, sm;

	gelu_parts(x, &sg, &sm);
	*slope = sg + 2.0f * x * sg * sm * du;
	return x * sg;
}

/* tanh(x / cap) of a soft cap, cap tanh(x / cap): in double, rounded to
 * float (the CPU's tanhf to about an ulp).  --use_fast_math would turn a
 * float tanhf into tanh.approx, ~5e-4 off near +-1, where the cap's slope
 * 1 - tanh^2 would lose every digit; double math it leaves alone. */
static __device__ __forceinline__ float softcap_tanh(float x, float cap)
{
	return (float)tanh((double)x / (double)cap);
}

#endif
