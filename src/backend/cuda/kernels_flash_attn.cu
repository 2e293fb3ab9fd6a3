/*
 * Causal attention on tensor cores (flash-attention style): the T x T
 * matrix of scores is never stored; softmax statistics (running max and
 * sum, then the log-sum-exp) are kept per row.  Same semantics as the
 * warp-per-query kernels in kernels_norm_attn.cu (which remain for shapes
 * these do not take): q/out [B, T, C], k/v [B, T, NKV * HS], lse [B, NH, T];
 * backward adds into dq, dk, dv.
 *
 * Products are bf16 mma.sync m16n8k16 with fp32 accumulation, operands
 * read from shared memory with ldmatrix.  Score tiles stay in registers:
 * the accumulator layout of S = Q K^T is, register for register, the
 * A-operand layout of P V (FlashAttention-2's trick), so P never touches
 * shared memory.  P and the score gradients dS are rounded to bf16 before
 * their products (as FlashAttention-2 does); softmax statistics,
 * D = rowsum(dO * O) and every accumulator are fp32.  Key/value (and, in
 * backward, query) tiles are double-buffered with cp.async.
 *
 *  - forward: block = (b, h, 64 queries), 4 warps of 16 queries; per key
 *    tile S = Q K^T, online softmax, O = O * corr + P V.
 *  - backward A: block = (b, h, 64 queries): D into ws, and
 *    dq += scale * sum over key tiles of dS K, dS = P (dP - D), dP = dO V^T.
 *  - backward B: block = (b, kv head, 64 keys): over the group's query heads
 *    in order and query tiles in order, dv += P^T dO and dk += scale dS^T Q
 *    in registers.  No atomics anywhere: bitwise reproducible.
 *
 * Packed documents (positions, as the CPU's attention.c): a query sees only
 * the keys of its document, t - positions[b, t] .. t.  A query block starts
 * at the key tile of its first row's document (positions count up along a
 * row, so no row of the block starts earlier), a key block stops at the
 * query tile past the end of its last key's document, and within the tiles
 * visited keys before a row's document are masked like keys after it.  Rows
 * whose document starts past a whole tile see none of it: their running
 * max stays -inf and they add nothing.  Without positions nothing changes.
 *
 * Blocks with the most tiles to visit are launched first (causal work is
 * triangular).  Taken when HS is 32, 64, 96 or 128, C and NKV * HS are
 * multiples of 8 and the arrays are 16-byte aligned; otherwise the
 * launchers in kernels_norm_attn.cu use their own kernels.
 */
#include "kernels.cuh"

#include <math_constants.h>
#include <stdint.h>

#define FA_TILE 64   /* rows of a block's own tile, and of each inner tile */
#define FA_WARPS 4   /* 16 rows each */
#define FA_NT (FA_TILE / 8) /* 8-column accumulator tiles across an inner tile */
#define FA_LOG2E 1.4426950408889634f

/* ---- PTX wrappers ------------------------------------------------------------ */

static __device__ __forceinline__ uint32_t fa_smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 bf16 matrices; lane i gives row (i % 8) of matrix i / 8. */
static __device__ __forceinline__ void fa_ldsm4(uint32_t (&r)[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(fa_smem_addr(p)));
}

static __device__ __forceinline__ void fa_ldsm4_t(uint32_t (&r)[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(fa_smem_addr(p)));
}

/* c[16x8] += a[16x16] b[16x8] (bf16 in, fp32 accumulate) */
static __device__ __forceinline__ void fa_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&h;
}

static __device__ __forceinline__ float fa_exp2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* 16 bytes global -> shared; zeros when !valid (src is then not read). */
static __device__ __forceinline__ void fa_cp16(bf16 *dst, const bf16 *src, bool valid)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_smem_addr(dst)), "l"(src),
		     "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ void fa_cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

static __device__ __forceinline__ void fa_cp_wait_all(void)
{
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Where row t's document starts (pos: the row's positions; a position past
 * t reaches back to 0 at most), as the CPU's first_key without a window. */
static __device__ __forceinline__ int fa_doc_start(int t, const int32_t *pos)
{
	const int p = pos[t];

	return t - (p < 0 ? 0 : p > t ? t : p);
}

/* The end of the queries that see a key at or before kmax (< T): the first
 * query past kmax whose document starts after kmax, else T (pos NULL: T).
 * The whole block calls it, once. */
static __device__ int fa_query_end(const int32_t *pos, int kmax, int T)
{
	__shared__ int end;

	if (!pos)
		return T;
	if (threadIdx.x == 0)
		end = T;
	__syncthreads();
	for (int t0 = kmax + 1; t0 < T; t0 += blockDim.x) {
		const int t = t0 + threadIdx.x;
		const bool later = t < T && fa_doc_start(t, pos) > kmax;

		if (later)
			atomicMin(&end, t);
		if (__syncthreads_or(later)) /* a barrier: the atomics are in */
			break;
	}
	return end;
}

/* A query block's documents (pos NULL: none, all 0): lo, where this
 * thread's two rows' (qrow, qrow + 8) start; lo_last, where the block's last
 * row's starts (key tiles before it need the mask); kt0, the key tile
 * holding the start of its first row's, the first tile any row sees
 * (positions count up along a row). */
struct fa_docs {
	int lo[2];
	int lo_last, kt0;
};

static __device__ __forceinline__ fa_docs fa_block_docs(const int32_t *pos, int b, int T, int q0, int qrow)
{
	fa_docs d = { { 0, 0 }, 0, 0 };

	if (!pos)
		return d;
	const int32_t *pb = pos + (size_t)b * T;
	for (int i = 0; i < 2; i++)
		d.lo[i] = qrow + 8 * i < T ? fa_doc_start(qrow + 8 * i, pb) : 0;
	d.lo_last = fa_doc_start(min(q0 + FA_TILE, T) - 1, pb);
	d.kt0 = fa_doc_start(q0, pb) / FA_TILE;
	return d;
}

/* ---- tiles and products --------------------------------------------------- */

/* Row stride of a shared tile: 16 bytes of padding put the 8 rows an
 * ldmatrix reads in 8 different bank groups. */
template <int HS> struct fa_ld {
	static constexpr int v = HS + 8;
};

/* Rows r0 .. r0+63 of a head (row stride ld elements, HS columns) into a
 * shared tile, asynchronously; rows at or past T become zeros. */
template <int HS>
static __device__ __forceinline__ void fa_load_tile(bf16 *tile, const bf16 *src, size_t ld, int r0, int T)
{
	constexpr int VPR = HS / 8; /* 16-byte vectors per row */
	for (int i = threadIdx.x; i < FA_TILE * VPR; i += blockDim.x) {
		const int r = i / VPR, c = (i % VPR) * 8;
		const bool ok = r0 + r < T;
		fa_cp16(tile + r * fa_ld<HS>::v + c, src + (ok ? (size_t)(r0 + r) * ld + c : 0), ok);
	}
}

/* A-operand fragments of a warp's 16 rows (bf16 tile rows, stride fa_ld):
 * held in registers for every inner tile (HOIST), or read from shared
 * memory at each use (large heads, where registers run short). */
template <int HS, bool HOIST> struct fa_rows;
template <int HS> struct fa_rows<HS, true> {
	uint32_t f[HS / 16][4];
	__device__ __forceinline__ void init(const bf16 *A)
	{
		const int lane = threadIdx.x & 31;
#pragma unroll
		for (int k = 0; k < HS / 16; k++)
			fa_ldsm4(f[k], A + (lane & 15) * fa_ld<HS>::v + k * 16 + (lane >> 4) * 8);
	}
	__device__ __forceinline__ void get(uint32_t (&a)[4], int k) const
	{
		a[0] = f[k][0], a[1] = f[k][1], a[2] = f[k][2], a[3] = f[k][3];
	}
};
template <int HS> struct fa_rows<HS, false> {
	const bf16 *A;
	__device__ __forceinline__ void init(const bf16 *a) { A = a; }
	__device__ __forceinline__ void get(uint32_t (&a)[4], int k) const
	{
		const int lane = threadIdx.x & 31;
		fa_ldsm4(a, A + (lane & 15) * fa_ld<HS>::v + k * 16 + (lane >> 4) * 8);
	}
};

/* S[16 x 64] = A[16 x HS] B[64 x HS]^T, B a shared tile; S in accumulator
 * layout: S[j] holds columns 8j .. 8j+7. */
template <int HS, typename Rows>
static __device__ __forceinline__ void fa_mm_abt(float (&S)[FA_NT][4], const Rows &A, const bf16 *B)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int j = 0; j < FA_NT; j++)
		S[j][0] = S[j][1] = S[j][2] = S[j][3] = 0.0f;
#pragma unroll
	for (int kp = 0; kp < HS / 32; kp++) {
		uint32_t a0[4], a1[4];
		A.get(a0, 2 * kp);
		A.get(a1, 2 * kp + 1);
#pragma unroll
		for (int j = 0; j < FA_NT; j++) {
			uint32_t b[4]; /* rows 8j.., columns 32kp .. 32kp+31 */
			fa_ldsm4(b, B + (j * 8 + (lane & 7)) * fa_ld<HS>::v + kp * 32 + (lane >> 3) * 8);
			fa_mma(S[j], a0, b[0], b[1]);
			fa_mma(S[j], a1, b[2], b[3]);
		}
	}
}

/* The A operand of a product over an inner tile's 64 rows, from scores in
 * accumulator layout (rounded to bf16): k-step ks covers columns 16ks.. */
static __device__ __forceinline__ void fa_scores_to_a(uint32_t (&P)[FA_TILE / 16][4], const float (&S)[FA_NT][4])
{
#pragma unroll
	for (int ks = 0; ks < FA_TILE / 16; ks++) {
		P[ks][0] = fa_pack(S[2 * ks][0], S[2 * ks][1]);
		P[ks][1] = fa_pack(S[2 * ks][2], S[2 * ks][3]);
		P[ks][2] = fa_pack(S[2 * ks + 1][0], S[2 * ks + 1][1]);
		P[ks][3] = fa_pack(S[2 * ks + 1][2], S[2 * ks + 1][3]);
	}
}

/* acc[16 x HS] += P[16 x 64] V[64 x HS], V a shared tile (row = inner row). */
template <int HS>
static __device__ __forceinline__ void fa_mm_ab(float (&acc)[HS / 8][4], const uint32_t (&P)[FA_TILE / 16][4],
						const bf16 *V)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int ks = 0; ks < FA_TILE / 16; ks++) {
#pragma unroll
		for (int np = 0; np < HS / 16; np++) {
			uint32_t b[4]; /* rows 16ks.., columns 16np .. 16np+15, transposed */
			fa_ldsm4_t(b, V + (ks * 16 + (lane & 15)) * fa_ld<HS>::v + np * 16 + (lane >> 4) * 8);
			fa_mma(acc[2 * np], P[ks], b[0], b[1]);
			fa_mma(acc[2 * np + 1], P[ks], b[2], b[3]);
		}
	}
}

/* dst rows row0 + (lane / 4) and + 8 (accumulator layout) += mul * acc,
 * rounding to bf16 once; rows at or past T skipped. */
template <int HS>
static __device__ __forceinline__ void fa_add_rows(bf16 *dst, size_t ld, int row0, int T, const float (&acc)[HS / 8][4],
						   float mul)
{
	const int lane = threadIdx.x & 31, r = row0 + (lane >> 2), c = (lane & 3) * 2;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		if (r + 8 * half >= T)
			continue;
		bf16 *row = dst + (size_t)(r + 8 * half) * ld + c;
#pragma unroll
		for (int n = 0; n < HS / 8; n++) {
			__nv_bfloat162 *p = (__nv_bfloat162 *)(row + n * 8);
			const float2 old = __bfloat1622float2(*p);
			*p = __floats2bfloat162_rn(old.x + mul * acc[n][2 * half], old.y + mul * acc[n][2 * half + 1]);
		}
	}
}

/* ---- forward --------------------------------------------------------------- */

template <int HS> struct fa_fwd_smem {
	bf16 q[FA_TILE][fa_ld<HS>::v];
	bf16 k[2][FA_TILE][fa_ld<HS>::v], v[2][FA_TILE][fa_ld<HS>::v];
};

/* Online softmax over one score tile (scores scaled to log2 units): masks
 * keys past the query, at/after T or before the row's document (lo) when
 * `mask`, turns S into P, rescales O and updates the running max m and sum
 * l of the thread's two rows (q = row of S[.][0..1]; q + 8 that of
 * S[.][2..3]). */
template <int HS>
static __device__ __forceinline__ void fa_online_softmax(float (&S)[FA_NT][4], float (&O)[HS / 8][4], float (&m)[2],
							 float (&l)[2], float sl2, int q, int k0, int T, bool mask,
							 const int (&lo)[2])
{
	const int c0 = k0 + (threadIdx.x & 3) * 2;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float mx = -CUDART_INF_F;
#pragma unroll
		for (int j = 0; j < FA_NT; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int key = c0 + j * 8 + e;
				float s = S[j][2 * h + e] * sl2;
				if (mask && (key > q + 8 * h || key >= T || key < lo[h]))
					s = -CUDART_INF_F;
				S[j][2 * h + e] = s;
				mx = fmaxf(mx, s);
			}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		/* -inf while the row has seen none of its keys (its document
		 * starts past the tiles so far): then p = 0 and l, O stay 0 */
		const float mn = fmaxf(m[h], mx);
		const float mp = mn == -CUDART_INF_F ? 0.0f : mn;
		const float corr = m[h] == -CUDART_INF_F ? 0.0f : fa_exp2(m[h] - mn);
		float sum = 0.0f;
#pragma unroll
		for (int j = 0; j < FA_NT; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const float p = fa_exp2(S[j][2 * h + e] - mp);
				S[j][2 * h + e] = p;
				sum += p;
			}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		sum += __shfl_xor_sync(0xffffffffu, sum, 2);
		l[h] = l[h] * corr + sum;
		m[h] = mn;
#pragma unroll
		for (int n = 0; n < HS / 8; n++)
			O[n][2 * h] *= corr, O[n][2 * h + 1] *= corr;
	}
}

/* O / l rounded to bf16 into out, and the rows' log-sum-exp (natural log). */
template <int HS>
static __device__ __forceinline__ void fa_store_out(bf16 *oh, float *lse_row, int C, int q, int T,
						    const float (&O)[HS / 8][4], const float (&m)[2], const float (&l)[2])
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int row = q + 8 * h;
		if (row >= T)
			continue;
		const float inv = 1.0f / l[h];
		bf16 *orow = oh + (size_t)row * C + (lane & 3) * 2;
#pragma unroll
		for (int n = 0; n < HS / 8; n++)
			*(__nv_bfloat162 *)(orow + n * 8) = __floats2bfloat162_rn(O[n][2 * h] * inv, O[n][2 * h + 1] * inv);
		if ((lane & 3) == 0)
			lse_row[row] = (m[h] + log2f(l[h])) * (1.0f / FA_LOG2E);
	}
}

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *pos, int T,
			  int C, int CK, int NH, int G, float scale, int nqt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_fwd_smem<HS> &sm = *(fa_fwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nbh = (int)gridDim.x / nqt;
	const int bh = (int)blockIdx.x % nbh, qt = nqt - 1 - (int)blockIdx.x / nbh;
	const int b = bh / NH, h = bh % NH, q0 = qt * FA_TILE;
	const bf16 *qh = q + (size_t)b * T * C + (size_t)h * HS;
	const size_t kvoff = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const int qrow = q0 + warp * 16 + (lane >> 2); /* and qrow + 8 */
	const float sl2 = scale * FA_LOG2E;
	float O[HS / 8][4], m[2] = { -CUDART_INF_F, -CUDART_INF_F }, l[2] = { 0.0f, 0.0f };
#pragma unroll
	for (int n = 0; n < HS / 8; n++)
		O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
	const fa_docs dd = fa_block_docs(pos, b, T, q0, qrow);
	const int kt0 = dd.kt0, lo_last = dd.lo_last;
	const int(&lo)[2] = dd.lo;

	fa_load_tile<HS>(&sm.q[0][0], qh, C, q0, T);
	fa_load_tile<HS>(&sm.k[0][0][0], k + kvoff, CK, kt0 * FA_TILE, T);
	fa_load_tile<HS>(&sm.v[0][0][0], v + kvoff, CK, kt0 * FA_TILE, T);
	fa_cp_commit();
	fa_rows<HS, true> qf; /* the warp's queries, for every key tile */
	for (int kt = kt0; kt <= qt; kt++) {
		const int buf = (kt - kt0) & 1;
		fa_cp_wait_all();
		__syncthreads(); /* tile kt is in; every warp is done with tile kt - 1 */
		if (kt == kt0)
			qf.init(&sm.q[warp * 16][0]);
		if (kt < qt) {
			fa_load_tile<HS>(&sm.k[buf ^ 1][0][0], k + kvoff, CK, (kt + 1) * FA_TILE, T);
			fa_load_tile<HS>(&sm.v[buf ^ 1][0][0], v + kvoff, CK, (kt + 1) * FA_TILE, T);
			fa_cp_commit();
		}
		float S[FA_NT][4];
		fa_mm_abt<HS>(S, qf, &sm.k[buf][0][0]);
		const bool mask = kt == qt || (kt + 1) * FA_TILE > T || kt * FA_TILE < lo_last;
		fa_online_softmax<HS>(S, O, m, l, sl2, qrow, kt * FA_TILE, T, mask, lo);
		uint32_t P[FA_TILE / 16][4];
		fa_scores_to_a(P, S);
		fa_mm_ab<HS>(O, P, &sm.v[buf][0][0]);
	}
	fa_store_out<HS>(out + (size_t)b * T * C + (size_t)h * HS, lse + (size_t)bh * T, C, qrow, T, O, m, l);
}

/* ---- backward A: D and dq ---------------------------------------------------- */

template <int HS> struct fa_bwd_smem {
	bf16 a[FA_TILE][fa_ld<HS>::v], b[FA_TILE][fa_ld<HS>::v];       /* the block's own rows */
	bf16 c[2][FA_TILE][fa_ld<HS>::v], d[2][FA_TILE][fa_ld<HS>::v]; /* the inner tile's rows */
	float lse[2][FA_TILE], D[2][FA_TILE];                           /* the inner tile's (backward B) */
	int lo[2][FA_TILE];                                             /* its documents' starts (B) */
};

/* Score gradients in place: dP -> P (dP - D) per element, P recomputed from
 * S (log2 units) and the rows' log-sum-exp (log2 units); masked entries 0
 * (keys after the query, past T, or before the query's document: lor, the
 * rows', or loc, the columns', document starts).  Rows (r, r + 8) and
 * columns (c .. c+1 + 8j) per accumulator layout; ROWS_ARE_QUERIES says
 * which of the two indexes the queries. */
template <bool ROWS_ARE_QUERIES>
static __device__ __forceinline__ void fa_grad_scores(float (&S)[FA_NT][4], float (&dP)[FA_NT][4], int r, int c0,
						      const float (&lse2)[2], const float (&Dr)[2], const float *lse2c,
						      const float *Dc, int T, bool mask, const int (&lor)[2],
						      const int *loc)
{
#pragma unroll
	for (int j = 0; j < FA_NT; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int row = r + 8 * (i >> 1), col = c0 + j * 8 + (i & 1);
			const int qi = ROWS_ARE_QUERIES ? row : col, key = ROWS_ARE_QUERIES ? col : row;
			const float L = ROWS_ARE_QUERIES ? lse2[i >> 1] : lse2c[j * 8 + (i & 1)];
			const float D = ROWS_ARE_QUERIES ? Dr[i >> 1] : Dc[j * 8 + (i & 1)];
			const int lo = ROWS_ARE_QUERIES ? lor[i >> 1] : loc[j * 8 + (i & 1)];
			float p = fa_exp2(S[j][i] - L);
			if (mask && (key > qi || qi >= T || key >= T || key < lo))
				p = 0.0f;
			S[j][i] = p;
			dP[j][i] = p * (dP[j][i] - D);
		}
}

/* D = rowsum(dO * O) for the warp's 16 rows (two lanes a row), into Dws;
 * returns this lane's rows' values (rows lane / 4 and + 8). */
template <int HS>
static __device__ __forceinline__ void fa_rows_D(float (&Dr)[2], float *Dws_row, const bf16 *dout, const bf16 *out,
						 int C, int row0, int T)
{
	const int lane = threadIdx.x & 31, half = lane & 1, r = row0 + (lane >> 1);
	float D = 0.0f;
	if (r < T) {
		const bf16 *g = dout + (size_t)r * C, *o = out + (size_t)r * C;
		for (int c = half * (HS / 2); c < half * (HS / 2) + HS / 2; c += 2) {
			const float2 gv = __bfloat1622float2(*(const __nv_bfloat162 *)(g + c));
			const float2 ov = __bfloat1622float2(*(const __nv_bfloat162 *)(o + c));
			D += gv.x * ov.x + gv.y * ov.y;
		}
	}
	D += __shfl_xor_sync(0xffffffffu, D, 1);
	if (r < T && !half)
		Dws_row[r] = D;
	/* lane holding row i is 2i: rows lane/4 and lane/4 + 8 */
	Dr[0] = __shfl_sync(0xffffffffu, D, (lane >> 2) * 2);
	Dr[1] = __shfl_sync(0xffffffffu, D, (lane >> 2) * 2 + 16);
}

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_backward_q_kernel(bf16 *dq, float *Dws, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
			     const bf16 *out, const float *lse, const int32_t *pos, int T, int C, int CK, int NH, int G,
			     float scale, int nqt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_bwd_smem<HS> &sm = *(fa_bwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int nbh = (int)gridDim.x / nqt;
	const int bh = (int)blockIdx.x % nbh, qt = nqt - 1 - (int)blockIdx.x / nbh;
	const int b = bh / NH, h = bh % NH, q0 = qt * FA_TILE;
	const size_t head = (size_t)b * T * C + (size_t)h * HS;
	const size_t kvoff = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const int qrow = q0 + warp * 16 + (lane >> 2);
	const float sl2 = scale * FA_LOG2E;

	float Dr[2], lse2[2];
	fa_rows_D<HS>(Dr, Dws + (size_t)bh * T, dout + head, out + head, C, q0 + warp * 16, T);
	if (!dq)
		return; /* the whole block */
	for (int i = 0; i < 2; i++)
		lse2[i] = qrow + 8 * i < T ? lse[(size_t)bh * T + qrow + 8 * i] * FA_LOG2E : 0.0f;
	const fa_docs dd = fa_block_docs(pos, b, T, q0, qrow);
	const int kt0 = dd.kt0, lo_last = dd.lo_last;
	const int(&lo)[2] = dd.lo;

	fa_load_tile<HS>(&sm.a[0][0], q + head, C, q0, T);
	fa_load_tile<HS>(&sm.b[0][0], dout + head, C, q0, T);
	fa_load_tile<HS>(&sm.c[0][0][0], k + kvoff, CK, kt0 * FA_TILE, T);
	fa_load_tile<HS>(&sm.d[0][0][0], v + kvoff, CK, kt0 * FA_TILE, T);
	fa_cp_commit();
	float acc[HS / 8][4];
#pragma unroll
	for (int n = 0; n < HS / 8; n++)
		acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
	fa_rows<HS, (HS <= 64)> qf, gf; /* the warp's q and dO rows, set once tile kt0 is in */
	for (int kt = kt0; kt <= qt; kt++) {
		const int buf = (kt - kt0) & 1;
		fa_cp_wait_all();
		__syncthreads();
		if (kt == kt0) {
			qf.init(&sm.a[warp * 16][0]);
			gf.init(&sm.b[warp * 16][0]);
		}
		if (kt < qt) {
			fa_load_tile<HS>(&sm.c[buf ^ 1][0][0], k + kvoff, CK, (kt + 1) * FA_TILE, T);
			fa_load_tile<HS>(&sm.d[buf ^ 1][0][0], v + kvoff, CK, (kt + 1) * FA_TILE, T);
			fa_cp_commit();
		}
		float S[FA_NT][4], dP[FA_NT][4];
		fa_mm_abt<HS>(S, qf, &sm.c[buf][0][0]);  /* S = Q K^T */
		fa_mm_abt<HS>(dP, gf, &sm.d[buf][0][0]); /* dP = dO V^T */
#pragma unroll
		for (int j = 0; j < FA_NT; j++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				S[j][i] *= sl2;
		const bool mask = kt == qt || (kt + 1) * FA_TILE > T || kt * FA_TILE < lo_last;
		fa_grad_scores<true>(S, dP, qrow, kt * FA_TILE + (lane & 3) * 2, lse2, Dr, nullptr, nullptr, T, mask, lo,
				     nullptr);
		uint32_t dS[FA_TILE / 16][4];
		fa_scores_to_a(dS, dP);
		fa_mm_ab<HS>(acc, dS, &sm.c[buf][0][0]); /* dQ += dS K */
	}
	fa_add_rows<HS>(dq + head, C, q0 + warp * 16, T, acc, scale);
}

/* ---- backward B: dk and dv --------------------------------------------------- */

/* The inner (query) tile's rows of q and dO, their log-sum-exp (log2 units),
 * D and document starts (pos: the row's positions, or NULL), into buffer
 * `buf`, asynchronously. */
template <int HS>
static __device__ __forceinline__ void fa_load_q_tile(fa_bwd_smem<HS> &sm, int buf, const bf16 *qh, const bf16 *gh,
						      const float *lse_row, const float *D_row, const int32_t *pos,
						      int C, int q0, int T)
{
	fa_load_tile<HS>(&sm.c[buf][0][0], qh, C, q0, T);
	fa_load_tile<HS>(&sm.d[buf][0][0], gh, C, q0, T);
	for (int i = threadIdx.x; i < FA_TILE; i += blockDim.x) {
		sm.lse[buf][i] = q0 + i < T ? lse_row[q0 + i] * FA_LOG2E : 0.0f;
		sm.D[buf][i] = q0 + i < T ? D_row[q0 + i] : 0.0f;
		sm.lo[buf][i] = pos && q0 + i < T ? fa_doc_start(q0 + i, pos) : 0;
	}
}

template <int HS>
static __global__ void __launch_bounds__(FA_WARPS * 32)
	fa_backward_kv_kernel(bf16 *dk, bf16 *dv, const float *Dws, const bf16 *dout, const bf16 *q, const bf16 *k,
			      const bf16 *v, const float *lse, const int32_t *pos, int T, int C, int CK, int NH, int G,
			      float scale, int nkt)
{
	extern __shared__ __align__(128) unsigned char fa_smem_raw[];
	fa_bwd_smem<HS> &sm = *(fa_bwd_smem<HS> *)fa_smem_raw;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int NKV = NH / G, nbkv = (int)gridDim.x / nkt;
	const int bkv = (int)blockIdx.x % nbkv, kt = (int)blockIdx.x / nbkv; /* most work first */
	const int b = bkv / NKV, kh = bkv % NKV, k0 = kt * FA_TILE;
	const size_t kvoff = (size_t)b * T * CK + (size_t)kh * HS;
	const int key = k0 + warp * 16 + (lane >> 2);
	const float sl2 = scale * FA_LOG2E;
	const int32_t *pb = pos ? pos + (size_t)b * T : nullptr;

	fa_load_tile<HS>(&sm.a[0][0], k + kvoff, CK, k0, T);
	fa_load_tile<HS>(&sm.b[0][0], v + kvoff, CK, k0, T);
	{
		const int h = kh * G;
		fa_load_q_tile<HS>(sm, 0, q + (size_t)b * T * C + (size_t)h * HS, dout + (size_t)b * T * C + (size_t)h * HS,
				   lse + ((size_t)b * NH + h) * T, Dws + ((size_t)b * NH + h) * T, pb, C, k0, T);
	}
	fa_cp_commit();
	/* query tiles kt .. per head: to the last, or to the one holding the
	 * end of the block's last key's document */
	const int qend = fa_query_end(pb, min(k0 + FA_TILE, T) - 1, T);
	const int nqt = (qend + FA_TILE - 1) / FA_TILE - kt;
	float dka[HS / 8][4], dva[HS / 8][4];
#pragma unroll
	for (int n = 0; n < HS / 8; n++)
		for (int i = 0; i < 4; i++)
			dka[n][i] = dva[n][i] = 0.0f;
	fa_rows<HS, (HS <= 64)> kr, vr; /* the warp's keys and values, set once tile 0 is in */
	for (int it = 0; it < G * nqt; it++) {
		const int buf = it & 1;
		const int q0 = (kt + it % nqt) * FA_TILE;
		fa_cp_wait_all();
		__syncthreads();
		if (it == 0) {
			kr.init(&sm.a[warp * 16][0]);
			vr.init(&sm.b[warp * 16][0]);
		}
		if (it + 1 < G * nqt) { /* next (head, query tile), in order */
			const int h = kh * G + (it + 1) / nqt, nq0 = (kt + (it + 1) % nqt) * FA_TILE;
			const size_t head = (size_t)b * T * C + (size_t)h * HS, srow = ((size_t)b * NH + h) * T;
			fa_load_q_tile<HS>(sm, buf ^ 1, q + head, dout + head, lse + srow, Dws + srow, pb, C, nq0, T);
			fa_cp_commit();
		}
		float S[FA_NT][4], dP[FA_NT][4];
		fa_mm_abt<HS>(S, kr, &sm.c[buf][0][0]);  /* S^T = K Q^T */
		fa_mm_abt<HS>(dP, vr, &sm.d[buf][0][0]); /* dP^T = V dO^T */
#pragma unroll
		for (int j = 0; j < FA_NT; j++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				S[j][i] *= sl2;
		const bool mask = q0 == k0 || q0 + FA_TILE > T || k0 + FA_TILE > T || pb;
		const float none[2] = { 0.0f, 0.0f };
		const int no_lo[2] = { 0, 0 };
		fa_grad_scores<false>(S, dP, key, q0 + (lane & 3) * 2, none, none, sm.lse[buf] + (lane & 3) * 2,
				      sm.D[buf] + (lane & 3) * 2, T, mask, no_lo, sm.lo[buf] + (lane & 3) * 2);
		uint32_t Pa[FA_TILE / 16][4];
		fa_scores_to_a(Pa, S);
		fa_mm_ab<HS>(dva, Pa, &sm.d[buf][0][0]); /* dV += P^T dO */
		fa_scores_to_a(Pa, dP);
		fa_mm_ab<HS>(dka, Pa, &sm.c[buf][0][0]); /* dK += dS^T Q */
	}
	if (dv)
		fa_add_rows<HS>(dv + kvoff, CK, k0 + warp * 16, T, dva, 1.0f);
	if (dk)
		fa_add_rows<HS>(dk + kvoff, CK, k0 + warp * 16, T, dka, scale);
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
			      const int32_t *pos, int B, int T, int C, int CK, int NH, int G)
{
	const int nqt = (T + FA_TILE - 1) / FA_TILE;
	const float scale = 1.0f / sqrtf((float)HS);
	return fa_launch(fa_forward_kernel<HS>, sizeof(fa_fwd_smem<HS>), (unsigned)((long)B * NH * nqt), s, out, lse,
			 q, k, v, pos, T, C, CK, NH, G, scale, nqt);
}

template <int HS>
static cudaError_t fa_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
			       const bf16 *k, const bf16 *v, const bf16 *out, const float *lse, const int32_t *pos,
			       float *Dws, int B, int T, int C, int CK, int NH, int G)
{
	const int nt = (T + FA_TILE - 1) / FA_TILE;
	const float scale = 1.0f / sqrtf((float)HS);
	const size_t smem = sizeof(fa_bwd_smem<HS>);
	cudaError_t e = fa_launch(fa_backward_q_kernel<HS>, smem, (unsigned)((long)B * NH * nt), s, dq, Dws, dout, q,
				  k, v, out, lse, pos, T, C, CK, NH, G, scale, nt);
	if (e != cudaSuccess || (!dk && !dv))
		return e;
	return fa_launch(fa_backward_kv_kernel<HS>, smem, (unsigned)((long)B * (NH / G) * nt), s, dk, dv,
			 (const float *)Dws, dout, q, k, v, lse, pos, T, C, CK, NH, G, scale, nt);
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
					       const bf16 *v, const int32_t *pos, int B, int T, int C, int NH, int NKV)
{
	const int HS = C / NH, CK = NKV * HS, G = NH / NKV;
	const void *ptrs[] = { out, q, k, v };

	if (!fa_takes(HS, C, CK, (long)B * NH * ((T + FA_TILE - 1) / FA_TILE), ptrs, 4))
		return cudaErrorNotSupported;
	switch (HS) {
	case 32: return fa_forward<32>(s, out, lse, q, k, v, pos, B, T, C, CK, NH, G);
	case 64: return fa_forward<64>(s, out, lse, q, k, v, pos, B, T, C, CK, NH, G);
	case 96: return fa_forward<96>(s, out, lse, q, k, v, pos, B, T, C, CK, NH, G);
	default: return fa_forward<128>(s, out, lse, q, k, v, pos, B, T, C, CK, NH, G);
	}
}

cudaError_t ferry_cuda_flash_attention_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
						const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
						const float *lse, const int32_t *pos, float *Dws, int B, int T, int C,
						int NH, int NKV)
{
	const int HS = C / NH, CK = NKV * HS, G = NH / NKV;
	const void *ptrs[] = { dq, dk, dv, dout, q, k, v, out };

	if (!fa_takes(HS, C, CK, (long)B * NH * ((T + FA_TILE - 1) / FA_TILE), ptrs, 8))
		return cudaErrorNotSupported;
	switch (HS) {
	case 32: return fa_backward<32>(s, dq, dk, dv, dout, q, k, v, out, lse, pos, Dws, B, T, C, CK, NH, G);
	case 64: return fa_backward<64>(s, dq, dk, dv, dout, q, k, v, out, lse, pos, Dws, B, T, C, CK, NH, G);
	case 96: return fa_backward<96>(s, dq, dk, dv, dout, q, k, v, out, lse, pos, Dws, B, T, C, CK, NH, G);
	default: return fa_backward<128>(s, dq, dk, dv, dout, q, k, v, out, lse, pos, Dws, B, T, C, CK, NH, G);
	}
}

} /* extern "C" */
