/*
 * Soft-capping (Gemma 2's final logits), elementwise on n values:
 *
 *   out = cap tanh(inp / cap)      (transformers: x / cap, tanh, * cap)
 *   d out / d inp = 1 - tanh^2(inp / cap)
 *
 * The backward reads the input (the output is gone by then: the softmax
 * writes its probabilities over it), and may write dinp over inp or dout:
 * each element is read before it is written.  libm's tanhf, accurate to an
 * ulp: the capped logits are the loss's.  cap <= 0 is no cap: the
 * identity.
 */
#include "ops/cpu/kernels.h"

#include <math.h>

void ferry_cpu_softcap_forward(float *out, const float *inp, float cap, long n)
{
#pragma omp parallel for schedule(static)
	for (long i = 0; i < n; i++)
		out[i] = cap > 0.0f ? tanhf(inp[i] / cap) * cap : inp[i];
}

void ferry_cpu_softcap_backward(float *dinp, const float *dout, const float *inp, float cap, long n,
				bool assign)
{
	if (!dinp)
		return;
#pragma omp parallel for schedule(static)
	for (long i = 0; i < n; i++) {
		const float th = cap > 0.0f ? tanhf(inp[i] / cap) : 0.0f;
		const float d = dout[i] * (1.0f - th * th);

		dinp[i] = assign ? d : dinp[i] + d;
	}
}
