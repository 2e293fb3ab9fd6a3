/*
 * Softmax + cross-entropy over the first V of Vp columns of each of N rows
 * (columns V..Vp-1 are vocabulary padding: probability 0, gradient 0).
 *
 *   m = max_j x_j,  Z = sum_j exp(x_j - m)
 *   probs_j = exp(x_j - m) / Z
 *   losses  = -log probs_target = log Z + m - x_target
 *   backward: dlogits_j = dloss * (probs_j - [j == target])
 *
 * The loss is computed from log Z rather than from the rounded probability,
 * and Z is accumulated in double.  probs may alias logits (row-wise in-place:
 * the target logit is read before the row is overwritten), and dlogits may
 * alias probs, so neither uses restrict.  Targets must lie in [0, V).
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <stddef.h>

void softmax_xent_forward(float *losses, float *probs, const float *logits,
			  const int32_t *targets, int N, int V, int Vp)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * Vp;
		float *p = probs + (size_t)n * Vp;
		float m = x[0];
		for (int j = 1; j < V; j++)
			m = x[j] > m ? x[j] : m;
		const float xt = x[targets[n]];
		double z = 0.0;
		for (int j = 0; j < V; j++) {
			const float e = expf(x[j] - m);
			p[j] = e;
			z += e;
		}
		const float inv = (float)(1.0 / z);
		for (int j = 0; j < V; j++)
			p[j] *= inv;
		for (int j = V; j < Vp; j++)
			p[j] = 0.0f;
		losses[n] = (float)(log(z) + (double)m - (double)xt);
	}
}

void softmax_xent_backward(float *dlogits, const float *probs,
			   const int32_t *targets, float dloss, int N, int V,
			   int Vp)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *p = probs + (size_t)n * Vp;
		float *g = dlogits + (size_t)n * Vp;
		const float pt = p[targets[n]];
		for (int j = 0; j < V; j++)
			g[j] = dloss * p[j];
		g[targets[n]] = dloss * (pt - 1.0f);
		for (int j = V; j < Vp; j++)
			g[j] = 0.0f;
	}
}
