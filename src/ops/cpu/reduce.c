/*
 * Reductions and small elementwise updates.
 *
 * Sums are split into a fixed number of blocks whatever the thread count,
 * each block summed in order, and the block sums added in order, so a sum
 * is bit-for-bit the same on any machine and any --threads: a resumed or
 * differently placed run must reproduce the gradient norm exactly.
 */
#include "ops/cpu/kernels.h"

#define SUM_BLOCKS 256

/* Eight interleaved accumulators, added in a fixed order at the end: the
 * compiler can keep them in vector registers, and the result does not
 * depend on it. */
#define LANES 8

static double block_sum(const float *x, long lo, long hi, int squares)
{
	double acc[LANES] = { 0 }, total = 0.0;
	long i = lo;

	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++)
			acc[j] += squares ? (double)x[i + j] * x[i + j] : (double)x[i + j];
	for (; i < hi; i++)
		acc[0] += squares ? (double)x[i] * x[i] : (double)x[i];
	for (int j = 0; j < LANES; j++)
		total += acc[j];
	return total;
}

static double blocked_sum(const float *x, long n, int squares)
{
	double part[SUM_BLOCKS], acc = 0.0;
	long per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;

#pragma omp parallel for schedule(static)
	for (int b = 0; b < SUM_BLOCKS; b++) {
		long lo = (long)b * per, hi = lo + per < n ? lo + per : n;

		part[b] = lo < hi ? block_sum(x, lo, hi, squares) : 0.0;
	}
	for (int b = 0; b < SUM_BLOCKS; b++)
		acc += part[b];
	return acc;
}

double ferry_cpu_sum_squares(const float *x, long n)
{
	return blocked_sum(x, n, 1);
}

double ferry_cpu_sum_all(const float *x, long n)
{
	return blocked_sum(x, n, 0);
}

/* One block of ferry_cpu_squared_error, lanes as in block_sum. */
static double block_squared_error(float *dpred, const float *pred, const float *target, float scale, long lo,
				  long hi)
{
	double acc[LANES] = { 0 }, total = 0.0;

	for (long i = lo; i < hi; i++) {
		const float e = pred[i] - target[i];

		acc[(i - lo) % LANES] += (double)e * e;
		dpred[i] = scale * e;
	}
	for (int j = 0; j < LANES; j++)
		total += acc[j];
	return total;
}

double ferry_cpu_squared_error(float *dpred, const float *pred, const float *target, float scale, long n)
{
	double part[SUM_BLOCKS], acc = 0.0;
	long per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;

#pragma omp parallel for schedule(static)
	for (int b = 0; b < SUM_BLOCKS; b++) {
		long lo = (long)b * per, hi = lo + per < n ? lo + per : n;

		part[b] = lo < hi ? block_squared_error(dpred, pred, target, scale, lo, hi) : 0.0;
	}
	for (int b = 0; b < SUM_BLOCKS; b++)
		acc += part[b];
	return acc;
}

void ferry_cpu_fill(float *x, float value, long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++)
		x[i] = value;
}

void ferry_cpu_sgd_update(float *param, const float *grad, float lr, long n)
{
#pragma omp parallel for simd schedule(static)
	for (long i = 0; i < n; i++)
		param[i] -= lr * grad[i];
}
