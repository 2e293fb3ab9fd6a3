/*
 * Causal attention on tensor cores (flash-attention style): the T x T
 * matrix of scores is never stored; each block keeps a 64-row tile of it in
 * shared memory and the softmax statistics (running max and sum) per row.
 * Same semantics as the warp-per-query kernels in kernels_norm_attn.cu
 * (which remain for shapes these do not take): q/out [B, T, C], k/v
 * [B, T, NKV * HS], lse [B, NH, T]; backward adds into dq, dk, dv.
 *
 * Products run as bf16 WMMA 16x16x16 fragments with fp32 accumulation.
 * Probabilities P and score gradients dS are rounded to bf16 before their
 * products (as FlashAttention-2 does); softmax statistics, D = rowsum(dO*O)
 * and every accumulator are fp32.
 *
 *  - forward: block = (b, h, 64 queries), 4 warps of 16 queries.  Per key
 *    tile: S = Q K^T (smem, fp32), online softmax per row (two lanes a row),
 *    O = O * corr + P V with O in shared memory.
 *  - backward A: block = (b, h, 64 queries): D_t into ws, and
 *    dq += scale * sum over key tiles of dS K, dS = P (dP - D), dP = dO V^T.
 *  - backward B: block = (b, kv head, 64 keys): over the group's query heads
 *    in order and query tiles in order, dv += P^T dO and dk += scale dS^T Q,
 *    accumulated in registers.  No atomics anywhere: bitwise reproducible.
 *
 * Taken when HS is 32, 64, 96 or 128, C and NKV * HS are multiples of 8 and
 * the arrays are 16-byte aligned (vector loads); otherwise the launchers in
 * kernels_norm_attn.cu use their own kernels.
 */
#include "kernels.cuh"

#include <math_constants.h>
#include <mma.h>
#include <stdint.h>

using namespace nvcuda;

#define FA_TILE 64   /* rows of a block's own tile, and of each inner tile */
#define FA_WARPS 4   /* 16 rows each */
#define FA_PAD 8     /* bf16 row padding (spreads rows over banks; keeps 16-byte rows) */
#define FA_SLD (FA_TILE + 4) /* fp32 score rows */
#define FA_PLD (FA_TILE + 8) /* bf16 probability rows */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows r0.. r0+63 of a head (row stride ld elements, HS columns) into a
 * shared tile of row stride HS + FA_PAD; rows at or past T are zeros. */
template <int HS>
static __device__ __forceinline__ void fa_load_tile(bf16 *tile, const bf16 *src, size_t ld, int r0, int T)
{
	constexpr int VPR = HS / 8; /* 16-byte vectors per row */
	for (int i = threadIdx.x; i < FA_TILE * VPR; i += blockDim.x) {
		const int r = i / VPR, c = (i % VPR) * 8;
		uint4 val = make_uint4(0, 0, 0, 0);
		if (r0 + r < T)
			val = *(const uint4 *)(src + (size_t)(r0 + r) * ld + c);
		*(uint4 *)(tile + r * (HS + FA_PAD) + c) = val;
	}
}

/* S[16][64] (fp32, row stride FA_SLD) = A[16][HS] B[64][HS]^T, both bf16 in
 * shared memory with row stride HS + FA_PAD.  One warp. */
template <int HS>
static __device__ __forceinline__ void fa_mm_abt(float *S, const bf16 *A, const bf16 *B)
{
#pragma unroll
	for (int n = 0; n < FA_TILE / 16; n++) {
		frag_c c;
		wmma::fill_fragment(c, 0.0f);
#pragma unroll
		for (int k = 0; k < HS / 16; k++) {
			frag_a a;
			frag_bt b;
			wmma::load_matrix_sync(a, A + k * 16, HS + FA_PAD);
			wmma::load_matrix_sync(b, B + n * 16 * (HS + FA_PAD) + k * 16, HS + FA_PAD);
			wmma::mma_sync(c, a, b, c);
		}
		wmma::store_matrix_sync(S + n * 16, c, FA_SLD, wmma::mem_row_major);
	}
}

/* The warp's 16 rows of A (bf16, row stride HS + FA_PAD) as matrix_a
 * fragments: loaded once and kept in registers while the inner tiles
 * change. */
template <int HS>
static __device__ __forceinline__ void fa_load_rows(frag_a (&a)[HS / 16], const bf16 *A)
{
#pragma unroll
	for (int k = 0; k < HS / 16; k++)
		wmma::load_matrix_sync(a[k], A + k * 16, HS + FA_PAD);
}

/* fa_mm_abt with A already in fragments. */
template <int HS>
static __device__ __forceinline__ void fa_mm_abt(float *S, const frag_a (&a)[HS / 16], const bf16 *B)
{
#pragma unroll
	for (int n = 0; n < FA_TILE / 16; n++) {
		frag_c c;
		wmma::fill_fragment(c, 0.0f);
#pragma unroll
		for (int k = 0; k < HS / 16; k++) {
			frag_bt b;
			wmma::load_matrix_sync(b, B + n * 16 * (HS + FA_PAD) + k * 16, HS + FA_PAD);
			wmma::mma_sync(c, a[k], b, c);
		}
		wmma::store_matrix_sync(S + n * 16, c, FA_SLD, wmma::mem_row_major);
	}
}

/* A warp's 16 rows as the A operand of fa_mm_abt: held in registers
 * (HOIST) or read from shared memory each time (large heads, whose
 * fragments and accumulators would not fit in registers together). */
template <int HS, bool HOIST> struct fa_rows;
template <int HS> struct fa_rows<HS, true> {
	frag_a f[HS / 16];
	__device__ void init(const bf16 *A) { fa_load_rows<HS>(f, A); }
	__device__ void mm(float *S, const bf16 *B) const { fa_mm_abt<HS>(S, f, B); }
};
template <int HS> struct fa_rows<HS, false> {
	const bf16 *A;
	__device__ void init(const bf16 *a) { A = a; }
	__device__ void mm(float *S, const bf16 *B) const { fa_mm_abt<HS>(S, A, B); }
};

/* acc[16][HS] += P[16][64] (bf16, row stride FA_PLD) V[64][HS] (bf16, row
 * stride HS + FA_PAD).  One warp. */
template <int HS>
static __device__ __forceinline__ void fa_mm_ab(frag_c (&acc)[HS / 16], const bf16 *P, const bf16 *V)
{
#pragma unroll
	for (int k = 0; k < FA_TILE / 16; k++) {
		frag_a a;
		wmma::load_matrix_sync(a, P + k * 16, FA_PLD);
#pragma unroll
		for (int n = 0; n < HS / 16; n++) {
			frag_b b;
			wmma::load_matrix_sync(b, V + k * 16 * (HS + FA_PAD) + n * 16, HS + FA_PAD);
			wmma::mma_sync(acc[n], a, b, acc[n]);
		}
	}
}

/* dst[row][0..HS) += mul * acc, rounding to bf16 once; acc goes through the
 * warp's fp32 scratch (16 x (HS + 4) floats).  Rows at or past T skipped. */
template <int HS>
static __device__ __forceinline__ void fa_add_rows(bf16 *dst, size_t ld, int row0, int T, frag_c (&acc)[HS / 16],
						   float *scratch, float mul)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int n = 0; n < HS / 16; n++)
		wmma::store_matrix_sync(scratch + n * 16, acc[n], HS + 4, wmma::mem_row_major);
	__syncwarp();
	for (int i = lane; i < 16 * HS; i += 32) {
		const int r = i / HS, c = i % HS;
		if (row0 + r < T) {
			bf16 *p = dst + (size_t)(row0 + r) * ld + c;
			*p = __float2bfloat16(__bfloat162float(*p) + mul * scratch[r * (HS + 4) + c]);
		}
	}
	__syncwarp();
}

/* ---- forward --------------------------------------------------------------- */

template <int HS> struct fa_fwd_smem {
	bf16 q[FA_TILE][HS + FA_PAD], k[FA_TILE][HS + FA_PAD], v[FA_TILE][HS + FA_PAD];
	float s[FA_WARPS][16][FA_SLD];
	bf16 p[FA_WARPS][16][FA_PLD];
	float o[FA_WARPS][16][HS + 4];
};

/* One row's online-softmax step over a score tile (two lanes a row, each
 * 32 columns): masks keys past the query or past T, writes P (bf16),
 * rescales the row of O and updates the running max m and sum l. */
template <int HS>
static __device__ __forceinline__ void fa_softmax_row(float *srow, bf16 *prow, float *orow, int q, int k0, int T,
						      float scale, float &m, float &l)
{
	const int half = threadIdx.x & 1;
	float mx = -CUDART_INF_F;
	for (int c = half * 32; c < half * 32 + 32; c++) {
		const int key = k0 + c;
		const float s = key <= q && key < T ? srow[c] * scale : -CUDART_INF_F;
		srow[c] = s;
		mx = fmaxf(mx, s);
	}
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
	const float mn = fmaxf(m, mx); /* finite: key 0 is in the first tile */
	const float corr = m == -CUDART_INF_F ? 0.0f : __expf(m - mn);
	float sum = 0.0f;
	for (int c = half * 32; c < half * 32 + 32; c++) {
		const float p = __expf(srow[c] - mn);
		sum += p;
		prow[c] = __float2bfloat16(p);
	}
	sum += __shfl_xor_sync(0xffffffffu, sum, 1);
	l = l * corr + sum;
	m = mn;
	for (int c = half * (HS / 2); c < half * (HS / 2) + HS / 2; c++)
		orow[c] *= corr;
}

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T, int C, int CK,
			  int NH, int G, float scale, int nqt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_fwd_smem<HS> &sm = *(fa_fwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int bh = (int)blockIdx.x / nqt, qt = nqt - 1 - (int)blockIdx.x % nqt;
	const int b = bh / NH, h = bh % NH, q0 = qt * FA_TILE;
	const bf16 *qh = q + (size_t)b * T * C + (size_t)h * HS;
	const size_t kvoff = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const int r = lane >> 1, qrow = q0 + warp * 16 + r; /* this lane pair's row */
	float m = -CUDART_INF_F, l = 0.0f;

	fa_load_tile<HS>(&sm.q[0][0], qh, C, q0, T);
	for (int i = lane; i < 16 * (HS + 4); i += 32)
		(&sm.o[warp][0][0])[i] = 0.0f;
	__syncthreads();
	frag_a qf[HS / 16]; /* the warp's queries, for every key tile */
	fa_load_rows<HS>(qf, &sm.q[warp * 16][0]);
	for (int kt = 0; kt <= qt; kt++) {
		__syncthreads(); /* the previous tile's K, V are no longer read */
		fa_load_tile<HS>(&sm.k[0][0], k + kvoff, CK, kt * FA_TILE, T);
		fa_load_tile<HS>(&sm.v[0][0], v + kvoff, CK, kt * FA_TILE, T);
		__syncthreads();
		fa_mm_abt<HS>(&sm.s[warp][0][0], qf, &sm.k[0][0]);
		__syncwarp();
		fa_softmax_row<HS>(sm.s[warp][r], sm.p[warp][r], sm.o[warp][r], qrow, kt * FA_TILE, T, scale, m, l);
		__syncwarp();
		frag_c acc[HS / 16];
#pragma unroll
		for (int n = 0; n < HS / 16; n++)
			wmma::load_matrix_sync(acc[n], &sm.o[warp][0][n * 16], HS + 4, wmma::mem_row_major);
		fa_mm_ab<HS>(acc, &sm.p[warp][0][0], &sm.v[0][0]);
#pragma unroll
		for (int n = 0; n < HS / 16; n++)
			wmma::store_matrix_sync(&sm.o[warp][0][n * 16], acc[n], HS + 4, wmma::mem_row_major);
		__syncwarp();
	}
	if (qrow < T) {
		const int half = lane & 1;
		const float inv = 1.0f / l;
		bf16 *orow = out + (size_t)b * T * C + (size_t)h * HS + (size_t)qrow * C;
		for (int c = half * (HS / 2); c < half * (HS / 2) + HS / 2; c++)
			orow[c] = __float2bfloat16(sm.o[warp][r][c] * inv);
		if (!half)
			lse[(size_t)bh * T + qrow] = m + logf(l);
	}
}

/* ---- backward A: D and dq ---------------------------------------------------- */

template <int HS> struct fa_bwd_smem {
	bf16 a[FA_TILE][HS + FA_PAD], b[FA_TILE][HS + FA_PAD]; /* the block's own rows (q, do or k, v) */
	bf16 c[FA_TILE][HS + FA_PAD], d[FA_TILE][HS + FA_PAD]; /* the inner tile's rows */
	float s[FA_WARPS][2][16][FA_SLD];                       /* scores and dP (then fp32 scratch) */
	bf16 p[FA_WARPS][2][16][FA_PLD];                        /* P and dS (bf16) */
	float lse[FA_TILE], D[FA_TILE];                         /* the inner tile's (backward B) */
};

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_backward_q_kernel(bf16 *dq, float *Dws, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
			     const bf16 *out, const float *lse, int T, int C, int CK, int NH, int G, float scale,
			     int nqt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_bwd_smem<HS> &sm = *(fa_bwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1;
	const int bh = (int)blockIdx.x / nqt, qt = nqt - 1 - (int)blockIdx.x % nqt;
	const int b = bh / NH, h = bh % NH, q0 = qt * FA_TILE;
	const size_t head = (size_t)b * T * C + (size_t)h * HS;
	const size_t kvoff = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const int r = lane >> 1, qrow = q0 + warp * 16 + r;

	fa_load_tile<HS>(&sm.a[0][0], q + head, C, q0, T);
	fa_load_tile<HS>(&sm.b[0][0], dout + head, C, q0, T);
	float D = 0.0f, lt = 0.0f;
	if (qrow < T) {
		const bf16 *grow = dout + head + (size_t)qrow * C, *orow = out + head + (size_t)qrow * C;
		for (int c = half * (HS / 2); c < half * (HS / 2) + HS / 2; c++)
			D += __bfloat162float(grow[c]) * __bfloat162float(orow[c]);
		lt = lse[(size_t)bh * T + qrow];
	}
	D += __shfl_xor_sync(0xffffffffu, D, 1);
	if (qrow < T && !half)
		Dws[(size_t)bh * T + qrow] = D;
	if (!dq)
		return; /* the whole block */

	frag_c acc[HS / 16];
#pragma unroll
	for (int n = 0; n < HS / 16; n++)
		wmma::fill_fragment(acc[n], 0.0f);
	__syncthreads();
	frag_a qf[HS / 16], gf[HS / 16]; /* the warp's q and dO rows, for every key tile */
	fa_load_rows<HS>(qf, &sm.a[warp * 16][0]);
	fa_load_rows<HS>(gf, &sm.b[warp * 16][0]);
	for (int kt = 0; kt <= qt; kt++) {
		__syncthreads();
		fa_load_tile<HS>(&sm.c[0][0], k + kvoff, CK, kt * FA_TILE, T);
		fa_load_tile<HS>(&sm.d[0][0], v + kvoff, CK, kt * FA_TILE, T);
		__syncthreads();
		fa_mm_abt<HS>(&sm.s[warp][0][0][0], qf, &sm.c[0][0]); /* S = Q K^T */
		fa_mm_abt<HS>(&sm.s[warp][1][0][0], gf, &sm.d[0][0]); /* dP = dO V^T */
		__syncwarp();
		for (int c = half * 32; c < half * 32 + 32; c++) {
			const int key = kt * FA_TILE + c;
			const float p = key <= qrow && key < T ? __expf(sm.s[warp][0][r][c] * scale - lt) : 0.0f;
			sm.p[warp][1][r][c] = __float2bfloat16(p * (sm.s[warp][1][r][c] - D));
		}
		__syncwarp();
		fa_mm_ab<HS>(acc, &sm.p[warp][1][0][0], &sm.c[0][0]); /* dQ += dS K */
	}
	fa_add_rows<HS>(dq + head, C, q0 + warp * 16, T, acc, &sm.s[warp][0][0][0], scale);
}

/* ---- backward B: dk and dv --------------------------------------------------- */

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_backward_kv_kernel(bf16 *dk, bf16 *dv, const float *Dws, const bf16 *dout, const bf16 *q, const bf16 *k,
			      const bf16 *v, const float *lse, int T, int C, int CK, int NH, int G, float scale,
			      int nkt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_bwd_smem<HS> &sm = *(fa_bwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1;
	const int NKV = NH / G;
	const int bkv = (int)blockIdx.x / nkt, kt = (int)blockIdx.x % nkt;
	const int b = bkv / NKV, kh = bkv % NKV, k0 = kt * FA_TILE;
	const size_t kvoff = (size_t)b * T * CK + (size_t)kh * HS;
	const int r = lane >> 1, key = k0 + warp * 16 + r;

	fa_load_tile<HS>(&sm.a[0][0], k + kvoff, CK, k0, T);
	fa_load_tile<HS>(&sm.b[0][0], v + kvoff, CK, k0, T);
	frag_c dka[HS / 16], dva[HS / 16];
#pragma unroll
	for (int n = 0; n < HS / 16; n++) {
		wmma::fill_fragment(dka[n], 0.0f);
		wmma::fill_fragment(dva[n], 0.0f);
	}
	__syncthreads();
	fa_rows<HS, (HS <= 64)> kr, vr; /* the warp's keys and values, for every query tile */
	kr.init(&sm.a[warp * 16][0]);
	vr.init(&sm.b[warp * 16][0]);
	for (int g = 0; g < G; g++) {
		const int h = kh * G + g;
		const size_t head = (size_t)b * T * C + (size_t)h * HS, srow = ((size_t)b * NH + h) * T;
		for (int qt = kt; qt * FA_TILE < T; qt++) {
			const int q0 = qt * FA_TILE;
			__syncthreads();
			fa_load_tile<HS>(&sm.c[0][0], q + head, C, q0, T);
			fa_load_tile<HS>(&sm.d[0][0], dout + head, C, q0, T);
			for (int i = threadIdx.x; i < FA_TILE; i += blockDim.x) {
				sm.lse[i] = q0 + i < T ? lse[srow + q0 + i] : 0.0f;
				sm.D[i] = q0 + i < T ? Dws[srow + q0 + i] : 0.0f;
			}
			__syncthreads();
			kr.mm(&sm.s[warp][0][0][0], &sm.c[0][0]); /* S^T = K Q^T */
			vr.mm(&sm.s[warp][1][0][0], &sm.d[0][0]); /* dP^T = V dO^T */
			__syncwarp();
			for (int c = half * 32; c < half * 32 + 32; c++) {
				const int qi = q0 + c;
				const bool ok = qi >= key && qi < T && key < T;
				const float p = ok ? __expf(sm.s[warp][0][r][c] * scale - sm.lse[c]) : 0.0f;
				sm.p[warp][0][r][c] = __float2bfloat16(p);
				sm.p[warp][1][r][c] = __float2bfloat16(p * (sm.s[warp][1][r][c] - sm.D[c]));
			}
			__syncwarp();
			fa_mm_ab<HS>(dva, &sm.p[warp][0][0][0], &sm.d[0][0]); /* dV += P^T dO */
			fa_mm_ab<HS>(dka, &sm.p[warp][1][0][0], &sm.c[0][0]); /* dK += dS^T Q */
		}
	}
	if (dv)
		fa_add_rows<HS>(dv + kvoff, CK, k0 + warp * 16, T, dva, &sm.s[warp][0][0][0], 1.0f);
	if (dk)
		fa_add_rows<HS>(dk + kvoff, CK, k0 + warp * 16, T, dka, &sm.s[warp][0][0][0], scale);
}

/* ---- launchers ------------------------------------------------------------------ */

static bool fa_aligned(const void *p)
{
	return p == nullptr || (uintptr_t)p % 16 == 0;
}

/* Launches kernel K<HS> with its shared memory (more than the default 48 KB:
 * raised once per kernel). */
template <typename Kern, typename... Args>
static cudaError_t fa_launch(Kern kern, size_t smem, unsigned grid, cudaStream_t s, Args... args)
{
	cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return e;
	kern<<<grid, FA_WARPS * 32, smem, s>>>(args...);
	return cudaGetLastError();
}

template <int HS>
static cudaError_t fa_forward(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
			      int B, int T, int C, int CK, int NH, int G)
{
	const int nqt = (T + FA_TILE - 1) / FA_TILE;
	const float scale = 1.0f / sqrtf((float)HS);
	return fa_launch(fa_forward_kernel<HS>, sizeof(fa_fwd_smem<HS>), (unsigned)((long)B * NH * nqt), s, out, lse,
			 q, k, v, T, C, CK, NH, G, scale, nqt);
}

template <int HS>
static cudaError_t fa_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
			       const bf16 *k, const bf16 *v, const bf16 *out, const float *lse, float *Dws, int B,
			       int T, int C, int CK, int NH, int G)
{
	const int nt = (T + FA_TILE - 1) / FA_TILE;
	const float scale = 1.0f / sqrtf((float)HS);
	const size_t smem = sizeof(fa_bwd_smem<HS>);
	cudaError_t e = fa_launch(fa_backward_q_kernel<HS>, smem, (unsigned)((long)B * NH * nt), s, dq, Dws, dout, q,
				  k, v, out, lse, T, C, CK, NH, G, scale, nt);
	if (e != cudaSuccess || (!dk && !dv))
		return e;
	return fa_launch(fa_backward_kv_kernel<HS>, smem, (unsigned)((long)B * (NH / G) * nt), s, dk, dv,
			 (const float *)Dws, dout, q, k, v, lse, T, C, CK, NH, G, scale, nt);
}

/* Whether these kernels take the shape and the arrays. */
static bool fa_takes(int HS, int C, int CK, long blocks, const void *const *ptrs, int n)
{
	if ((HS != 32 && HS != 64 && HS != 96 && HS != 128) || C % 8 || CK % 8 || blocks > 0x7fffffffL)
		return false;
	for (int i = 0; i < n; i++)
		if (!fa_aligned(ptrs[i]))
			return false;
	return true;
}

extern "C" {

cudaError_t ferry_cuda_flash_attention_forward(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
					       const bf16 *v, int B, int T, int C, int NH, int NKV)
{
	const int HS = C / NH, CK = NKV * HS, G = NH / NKV;
	const void *ptrs[] = { out, q, k, v };

	if (!fa_takes(HS, C, CK, (long)B * NH * ((T + FA_TILE - 1) / FA_TILE), ptrs, 4))
		return cudaErrorNotSupported;
	switch (HS) {
	case 32: return fa_forward<32>(s, out, lse, q, k, v, B, T, C, CK, NH, G);
	case 64: return fa_forward<64>(s, out, lse, q, k, v, B, T, C, CK, NH, G);
	case 96: return fa_forward<96>(s, out, lse, q, k, v, B, T, C, CK, NH, G);
	default: return fa_forward<128>(s, out, lse, q, k, v, B, T, C, CK, NH, G);
	}
}

cudaError_t ferry_cuda_flash_attention_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
						const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
						const float *lse, float *Dws, int B, int T, int C, int NH, int NKV)
{
	const int HS = C / NH, CK = NKV * HS, G = NH / NKV;
	const void *ptrs[] = { dq, dk, dv, dout, q, k, v };

	if (!fa_takes(HS, C, CK, (long)B * NH * ((T + FA_TILE - 1) / FA_TILE), ptrs, 7))
		return cudaErrorNotSupported;
	switch (HS) {
	case 32: return fa_backward<32>(s, dq, dk, dv, dout, q, k, v, out, lse, Dws, B, T, C, CK, NH, G);
	case 64: return fa_backward<64>(s, dq, dk, dv, dout, q, k, v, out, lse, Dws, B, T, C, CK, NH, G);
	case 96: return fa_backward<96>(s, dq, dk, dv, dout, q, k, v, out, lse, Dws, B, T, C, CK, NH, G);
	default: return fa_backward<128>(s, dq, dk, dv, dout, q, k, v, out, lse, Dws, B, T, C, CK, NH, G);
	}
}

} /* extern "C" */
