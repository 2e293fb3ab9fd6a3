/*
 * CUDA kernels: softmax + cross-entropy, as the CPU's
 * src/ops/cpu/softmax_xent.c; logits and probabilities bf16, losses and all
 * arithmetic fp32, every reduction of a fixed shape and order.
 *
 *  - forward: one block per row.  Rows of 16-byte vectors: one pass for the
 *    running max and sum of exp, one writing probabilities.  Otherwise:
 *    block max, block sum of exp, then probabilities written (safe in place:
 *    each element is read and written by the same thread, after both
 *    reductions).
 *  - backward: elementwise, one block per row.
 */
#include "kernels.cuh"
#include "reduce.cuh"

#include <math.h>
#include <stdint.h>

#define XENT_THREADS 512

/* ---- softmax + cross-entropy ----------------------------------------------- */

/* One block per row.  A target below 0 is not counted (loss 0); one at V
 * or above gives loss NaN (and no out-of-bounds read). */
static __global__ void __launch_bounds__(XENT_THREADS)
	xent_forward_kernel(float *losses, bf16 *probs, const bf16 *logits, const int32_t *targets,
			    int V, int Vp)
{
	__shared__ float sh[32];
	const int tid = threadIdx.x, nt = blockDim.x;
	const size_t n = blockIdx.x;
	const bf16 *x = logits + n * (size_t)Vp;
	bf16 *p = probs + n * (size_t)Vp;
	const int tgt = targets[n];
	const bool tgt_ok = tgt >= 0 && tgt < V;
	float xt = 0.0f;
	if (tid == 0 && tgt_ok)
		xt = bf2f(x[tgt]); /* before the barriers that precede any write */

	float mx = -CUDART_INF_F;
	for (int j = tid; j < V; j += nt)
		mx = fmaxf(mx, bf2f(x[j]));
	mx = block_reduce<true>(mx, sh);
	float z = 0.0f;
	for (int j = tid; j < V; j += nt)
		z += expf(bf2f(x[j]) - mx);
	z = block_reduce<false>(z, sh); /* barrier: all reads above are done */

	/* In place is safe: element j is read and written by the same thread. */
	const float inv = 1.0f / z;
	for (int j = tid; j < V; j += nt)
		p[j] = f2bf(expf(bf2f(x[j]) - mx) * inv);
	for (int j = V + tid; j < Vp; j += nt)
		p[j] = f2bf(0.0f);
	if (tid == 0)
		losses[n] = tgt < 0 ? 0.0f : tgt_ok ? logf(z) + mx - xt : CUDART_NAN_F;
}

/* One block per row, elementwise (safe when dlogits == probs); a row not
 * counted (target below 0) gets 0. */
static __global__ void __launch_bounds__(XENT_THREADS)
	xent_backward_kernel(bf16 *dlogits, const bf16 *probs, const int32_t *targets, float dloss,
			     int V, int Vp)
{
	const size_t n = blockIdx.x;
	const bf16 *p = probs + n * (size_t)Vp;
	bf16 *g = dlogits + n * (size_t)Vp;
	const int tgt = targets[n];
	for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
		float d = 0.0f;
		if (j < V && tgt >= 0)
			d = dloss * (bf2f(p[j]) - (j == tgt ? 1.0f : 0.0f));
		g[j] = f2bf(d);
	}
}

/* Merges (m2, s2) into (m, s): running maxima and sums of exp(x - max). */
static __device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2)
{
	const float M = fmaxf(m, m2);

	if (M == -CUDART_INF_F)
		return; /* both empty */
	s = s * expf(m - M) + s2 * expf(m2 - M);
	m = M;
}

/* (max, sum of exp(x - max)) over the block; all threads get the result. */
static __device__ void block_reduce_ms(float &m, float &s, float *shm, float *shs)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		ms_merge(m, s, __shfl_xor_sync(FULL_MASK, m, o), __shfl_xor_sync(FULL_MASK, s, o));
	if (lane == 0) {
		shm[warp] = m;
		shs[warp] = s;
	}
	__syncthreads();
	m = -CUDART_INF_F;
	s = 0.0f;
	for (int w = 0; w < nwarps; w++) /* every thread, in the same order */
		ms_merge(m, s, shm[w], shs[w]);
	__syncthreads(); /* shm, shs free again */
}

/* The forward for rows of 16-byte aligned vectors (Vp % 8 == 0): one pass
 * reads each vector of 8 logits once for the running max and sum, a second
 * writes the probabilities (in place is safe: a thread rewrites only the
 * vectors it read, after the block's reduction). */
static __global__ void __launch_bounds__(XENT_THREADS)
	xent_forward_vec_kernel(float *losses, bf16 *probs, const bf16 *logits, const int32_t *targets, int V,
				int Vp)
{
	__shared__ float shm[32], shs[32];
	const size_t n = blockIdx.x;
	const uint4 *x = (const uint4 *)(logits + n * (size_t)Vp);
	uint4 *p = (uint4 *)(probs + n * (size_t)Vp);
	const int nv = Vp / 8, tgt = targets[n];
	const bool tgt_ok = tgt >= 0 && tgt < V;
	const float xt = threadIdx.x == 0 && tgt_ok ? bf2f(logits[n * (size_t)Vp + tgt]) : 0.0f;
	float m = -CUDART_INF_F, s = 0.0f;

	for (int j = threadIdx.x; j < nv; j += blockDim.x) {
		const uint4 u = x[j];
		const bf16 *b = (const bf16 *)&u;
		float v[8], cm = -CUDART_INF_F;
#pragma unroll
		for (int e = 0; e < 8; e++) {
			v[e] = j * 8 + e < V ? bf2f(b[e]) : -CUDART_INF_F;
			cm = fmaxf(cm, v[e]);
		}
		if (cm == -CUDART_INF_F)
			continue; /* padding only */
		if (cm > m) {
			s *= expf(m - cm);
			m = cm;
		}
#pragma unroll
		for (int e = 0; e < 8; e++)
			s += expf(v[e] - m);
	}
	block_reduce_ms(m, s, shm, shs);
	const float inv = 1.0f / s;
	for (int j = threadIdx.x; j < nv; j += blockDim.x) {
		uint4 u = x[j];
		bf16 *b = (bf16 *)&u;
#pragma unroll
		for (int e = 0; e < 8; e++)
			b[e] = f2bf(j * 8 + e < V ? expf(bf2f(b[e]) - m) * inv : 0.0f);
		p[j] = u;
	}
	if (threadIdx.x == 0)
		losses[n] = tgt < 0 ? 0.0f : tgt_ok ? logf(s) + m - xt : CUDART_NAN_F;
}

/* The backward for 16-byte aligned rows, 8 values at a time. */
static __global__ void __launch_bounds__(XENT_THREADS)
	xent_backward_vec_kernel(bf16 *dlogits, const bf16 *probs, const int32_t *targets, float dloss, int V,
				 int Vp)
{
	const size_t n = blockIdx.x;
	const uint4 *p = (const uint4 *)(probs + n * (size_t)Vp);
	uint4 *g = (uint4 *)(dlogits + n * (size_t)Vp);
	const int tgt = targets[n];

	for (int j = threadIdx.x; j < Vp / 8; j += blockDim.x) {
		uint4 u = p[j];
		bf16 *b = (bf16 *)&u;
#pragma unroll
		for (int e = 0; e < 8; e++) {
			const int i = j * 8 + e;
			b[e] = f2bf(i < V && tgt >= 0 ? dloss * (bf2f(b[e]) - (i == tgt ? 1.0f : 0.0f)) : 0.0f);
		}
		g[j] = u;
	}
}

/* Whether rows of Vp bf16 values can be read as 16-byte vectors. */
static bool xent_vec_ok(const void *a, const void *b, int Vp)
{
	return Vp % 8 == 0 && ((uintptr_t)a | (uintptr_t)b) % 16 == 0;
}

extern "C" {

cudaError_t ferry_cuda_softmax_xent_forward(cudaStream_t s, float *losses, bf16 *probs, const bf16 *logits,
					    const int32_t *targets, int N, int V, int Vp)
{
	if (N < 0 || V <= 0 || Vp < V)
		return cudaErrorInvalidValue;
	if (N == 0)
		return cudaSuccess;
	if (xent_vec_ok(probs, logits, Vp))
		xent_forward_vec_kernel<<<(unsigned)N, XENT_THREADS, 0, s>>>(losses, probs, logits, targets, V, Vp);
	else
		xent_forward_kernel<<<(unsigned)N, XENT_THREADS, 0, s>>>(losses, probs, logits, targets, V, Vp);
	return cudaGetLastError();
}

cudaError_t ferry_cuda_softmax_xent_backward(cudaStream_t s, bf16 *dlogits, const bf16 *probs,
					     const int32_t *targets, float dloss, int N, int V, int Vp)
{
	if (N < 0 || V <= 0 || Vp < V)
		return cudaErrorInvalidValue;
	if (N == 0)
		return cudaSuccess;
	if (xent_vec_ok(dlogits, probs, Vp))
		xent_backward_vec_kernel<<<(unsigned)N, XENT_THREADS, 0, s>>>(dlogits, probs, targets, dloss, V, Vp);
	else
		xent_backward_kernel<<<(unsigned)N, XENT_THREADS, 0, s>>>(dlogits, probs, targets, dloss, V, Vp);
	return cudaGetLastError();
}

} /* extern "C" */
