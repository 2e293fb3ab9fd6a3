/*
 * GELU in its tanh form (GPT-2's gelu, Gemma's gelu_pytorch_tanh), shared
 * by the GELU and GeGLU kernels:
 *
 *   u = sqrt(2/pi) (x + 0.044715 x^3),  y = 0.5 x (1 + tanh u)
 *   dy/dx = 0.5 (1 + tanh u)
 *         + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 */
#ifndef FERRY_OPS_CPU_GELU_TANH_H
#define FERRY_OPS_CPU_GELU_TANH_H

#include "ops/cpu/fastmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static inline float gelu_value(float x)
{
	const float u = GELU_K * (x + GELU_A * x * x * x);

	return 0.5f * x * (1.0f + fast_tanhf(u));
}

/* dy/dx at x. */
static inline float gelu_slope(float x)
{
	const float u = GELU_K * (x + GELU_A * x * x * x);
	const float th = fast_tanhf(u);
	const float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);

	return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

#endif
