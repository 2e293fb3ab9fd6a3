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
 * alias probs, so neither uses restrict.  Targets must lie in [0, V), or
 * below 0: a row not counted (a prompt token of a conversation, issue 38),
 * its loss 0 and its gradient 0.
 */
#include "ops/cpu/kernels.h"
#include "ops/cpu/fastmath.h"

#include <math.h>
#include <stddef.h>

/* Row max and sum in eight interleaved lanes combined in a fixed order:
 * vectorisable, and the same bits on every machine. */
#define LANES 8

static float row_max(const float *x, int V)
{
	float lane[LANES], m;
	int j = 0;

	for (int k = 0; k < LANES; k++)
		lane[k] = x[0];
	for (; j + LANES <= V; j += LANES)
		for (int k = 0; k < LANES; k++)
			lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
	m = lane[0];
	for (int k = 1; k < LANES; k++)
		m = lane[k] > m ? lane[k] : m;
	for (; j < V; j++)
		m = x[j] > m ? x[j] : m;
	return m;
}

static double row_sum(const float *p, int V)
{
	double lane[LANES] = { 0 }, z = 0.0;
	int j = 0;

	for (; j + LANES <= V; j += LANES)
		for (int k = 0; k < LANES; k++)
			lane[k] += p[j + k];
	for (; j < V; j++)
		lane[0] += p[j];
	for (int k = 0; k < LANES; k++)
		z += lane[k];
	return z;
}

void ferry_cpu_softmax_xent_forward(float *losses, float *probs,
				    const float *logits, const int32_t *targets,
				    int N, int V, int Vp)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * Vp;
		float *p = probs + (size_t)n * Vp;
		const float m = row_max(x, V);
		const float xt = targets[n] >= 0 ? x[targets[n]] : 0.0f;

		for (int j = 0; j < V; j++)
			p[j] = fast_expf(x[j] - m);
		const double z = row_sum(p, V);
		const float inv = (float)(1.0 / z);
		for (int j = 0; j < V; j++)
			p[j] *= inv;
		for (int j = V; j < Vp; j++)
			p[j] = 0.0f;
		losses[n] = targets[n] >= 0 ? (float)(log(z) + (double)m - (double)xt) : 0.0f;
	}
}

void ferry_cpu_softmax_xent_backward(float *dlogits, const float *probs,
				     const int32_t *targets, float dloss, int N,
				     int V, int Vp)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *p = probs + (size_t)n * Vp;
		float *g = dlogits + (size_t)n * Vp;

		if (targets[n] < 0) { /* not counted */
			for (int j = 0; j < Vp; j++)
				g[j] = 0.0f;
			continue;
		}
		const float pt = p[targets[n]];
		for (int j = 0; j < V; j++)
			g[j] = dloss * p[j];
		g[targets[n]] = dloss * (pt - 1.0f);
		for (int j = V; j < Vp; j++)
			g[j] = 0.0f;
	}
}
