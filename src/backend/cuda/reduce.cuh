/*
 * The kernels' bf16 conversions and their warp and block reductions, with a
 * fixed shape and order so every lane gets the same bits run to run.
 */
#ifndef FERRY_BACKEND_CUDA_REDUCE_CUH
#define FERRY_BACKEND_CUDA_REDUCE_CUH

#include "kernels.cuh"

#include <math_constants.h>

#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16(x); }

/* Butterfly reductions: every lane ends with the same (bitwise) value. */
static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_xor_sync(FULL_MASK, v, off);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
	return v;
}

/* Block-wide sum or max (blockDim.x a multiple of 32, <= 1024); every
 * thread gets the result.  sh: 32 floats of shared memory.  Starts and ends
 * with a barrier-separated use of sh, so it can be called back to back; all
 * threads of the block must call it. */
template <bool IS_MAX>
static __device__ float block_reduce(float v, float *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = blockDim.x >> 5;

	v = IS_MAX ? warp_max(v) : warp_sum(v);
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	if (warp == 0) {
		float w = lane < nwarps ? sh[lane] : (IS_MAX ? -CUDART_INF_F : 0.0f);
		w = IS_MAX ? warp_max(w) : warp_sum(w);
		if (lane == 0)
			sh[0] = w;
	}
	__syncthreads();
	const float r = sh[0];
	__syncthreads(); /* sh free again */
	return r;
}

#endif
