/*
 * GeGLU (Gemma's MLP non-linearity), elementwise on n values:
 *
 *   out = gelu(gate) * up,  gelu in its tanh form (ops/cpu/gelu_tanh.h)
 *
 * backward: dgate += dout * up * gelu'(gate),  dup += dout * gelu(gate).
 * out may alias gate or up (each value is read before it is written).
 */
#include "ops/cpu/kernels.h"

#include "ops/cpu/gelu_tanh.h"

void ferry_cpu_geglu_forward(float *out, const float *gate, const float *up, long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++)
		out[i] = gelu_value(gate[i]) * up[i];
}

void ferry_cpu_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
			      long n)
{
	if (dgate) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dgate[i] += dout[i] * up[i] * gelu_slope(gate[i]);
	}
	if (dup) {
#pragma omp parallel for simd schedule(static)
		for (long i = 0; i < n; i++)
			dup[i] += dout[i] * gelu_value(gate[i]);
	}
}
