/*
 * SwiGLU (Llama's MLP non-linearity), elementwise on n values:
 *
 *   s = sigmoid(gate) = 1 / (1 + e^-gate),  silu = gate * s,
 *   out = silu * up
 *   d silu / d gate = s (1 + gate (1 - s))
 *
 * backward: dgate += dout * up * d silu / d gate,  dup += dout * silu.
 * out may alias gate or up (each value is read before it is written).
 * e^-gate is fast_expf (clamped to [-87, 88]), so the loops vectorise; for
 * gate < -88, s ~ 6e-39 instead of smaller, and silu ~ 0 either way.
 */
#include "ops/cpu/kernels.h"

#include "ops/cpu/fastmath.h"

void ferry_cpu_swiglu_forward(float *out, const float *gate, const float *up,
			      long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++) {
		const float x = gate[i];
		const float s = 1.0f / (1.0f + fast_expf(-x));
		out[i] = x * s * up[i];
	}
}

void ferry_cpu_swiglu_backward(float *dgate, float *dup, const float *dout,
			       const float *gate, const float *up, long n)
{
	if (!dgate && !dup)
		return;
	if (dgate && dup) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++) {
			const float x = gate[i], d = dout[i];
			const float s = 1.0f / (1.0f + fast_expf(-x));
			dgate[i] += d * up[i] * s * (1.0f + x * (1.0f - s));
			dup[i] += d * (x * s);
		}
	} else if (dgate) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++) {
			const float x = gate[i];
			const float s = 1.0f / (1.0f + fast_expf(-x));
			dgate[i] += dout[i] * up[i] * s * (1.0f + x * (1.0f - s));
		}
	} else {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++) {
			const float x = gate[i];
			const float s = 1.0f / (1.0f + fast_expf(-x));
			dup[i] += dout[i] * (x * s);
		}
	}
}
