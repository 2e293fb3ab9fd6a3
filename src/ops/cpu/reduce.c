/*
 * Reductions and small elementwise updates.
 *
 * Sums are split into a fixed number of blocks whatever the thread count,
 * each block summed in order, and the block sums added in order, so a sum
 * is bit-for-bit the same on any machine and any --threads: a resumed or
 * differently placed run must reproduce the gradient norm exactly.
 */
#include "ops/cpu/kernels.h"

#define SUM_BLOCKS FERRY_CPU_SUM_BLOCKS

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

/* parts[b] = block b's sum for the blocks of an n-element array that
 * start in [lo, hi) (lo a block's start; x holds elements lo on), 0 for
 * the others. */
static void blocked_parts(const float *x, long n, long lo, long hi, int squares, double *part)
{
	long per = ferry_cpu_sum_block(n);

#pragma omp parallel for schedule(static)
	for (int b = 0; b < SUM_BLOCKS; b++) {
		long a = (long)b * per, e = a + per < n ? a + per : n;

		part[b] = a >= lo && a < hi && a < e ? block_sum(x + (a - lo), 0, e - a, squares) : 0.0;
	}
}

double ferry_cpu_sum_parts(const double *part)
{
	double acc = 0.0;

	for (int b = 0; b < SUM_BLOCKS; b++)
		acc += part[b];
	return acc;
}

static double blocked_sum(const float *x, long n, int squares)
{
	double part[SUM_BLOCKS];

	blocked_parts(x, n, 0, n, squares, part);
	return ferry_cpu_sum_parts(part);
}

long ferry_cpu_sum_block(long n)
{
	return (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
}

void ferry_cpu_sum_squares_parts(const float *x, long n, long lo, long hi, double *parts)
{
	blocked_parts(x, n, lo, hi, 1, parts);
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
