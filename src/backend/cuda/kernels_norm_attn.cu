/*
 * CUDA kernels: layer normalisation, causal attention (flash-style, no T x T
 * matrix; softmax + cross-entropy is kernels_xent.cu).  Semantics as the CPU
 * references in src/ops/cpu/{layernorm,attention}.c; inputs/outputs bf16,
 * statistics float, all arithmetic fp32.  Every reduction has a fixed shape
 * and order, so results are bitwise reproducible run to run (no atomics).
 *
 * Workspace each launcher needs (bytes; the dispatcher checks its fixed
 * workspace against the extern "C" functions ferry_cuda_*_ws_bytes below):
 *
 *   layernorm_backward:  LN_ROW_BLOCKS * 2 * C * sizeof(float) = 512 * C
 *                        (0 when dweight == NULL and dbias == NULL)
 *   attention_backward:  B * NH * T * sizeof(float)           (D_t per query)
 *   all others:          none
 *
 * Limits: attention supports head sizes HS = C / NH with 1 <= HS <= 256
 * (C % NH == 0); any HS in range works (lanes beyond HS are masked), multiples
 * of 32 waste no lanes.  Other sizes return cudaErrorInvalidValue.
 *
 * Grouped-query attention: q and out are [B, T, C] (NH heads), k and v
 * [B, T, CK] with CK = NKV * HS (NKV key/value heads, NKV divides NH); query
 * head h reads kv head h / G, G = NH / NKV.  Only the index arithmetic
 * changes: with NKV == NH (G = 1, CK = C) every kernel does exactly the
 * arithmetic it did before GQA existed, so results are bitwise the same.
 *
 * Designs:
 *  - layernorm_forward: one warp per row, two-pass mean/variance as the CPU.
 *  - layernorm_backward: (1) column partial sums of dout*xhat and dout over a
 *    fixed partition of the rows into LN_ROW_BLOCKS row blocks, into ws;
 *    (2) sum of the partials over row blocks in order, += dweight/dbias;
 *    (3) dinp, one warp per row.  (1) runs before (3), so the sums read dout
 *    before any dinp is written.
 *  - attention: head sizes 32, 64, 96 and 128 run on tensor cores
 *    (kernels_flash_attn.cu); the kernels here take every other shape.
 *  - attention_forward: one warp per (b, h, query t); lane L holds elements
 *    i = e*32 + L (e < EPL = ceil(HS/32)) of q_t and of the output
 *    accumulator.  Keys 0..t are visited KU at a time: KU independent
 *    warp-shuffle dot products, then an online-softmax update (running max m
 *    and sum l; o and l rescaled by exp(m_old - m_new)).  Warps of a block
 *    take consecutive queries of one head so k/v rows are shared through L1.
 *  - attention_backward: kernel A, one warp per query t: D_t = dout_t.out_t
 *    (stored in ws) and dq_t; kernel B, one warp per (kv head, key t2): dk_t2
 *    and dv_t2 summing, in fp32 registers, over the G query heads of the
 *    group in order and, per head, over queries t >= t2 in order.  Each
 *    output row is owned by one warp, so no atomics and a fixed order.
 *  - attention's constants (Mistral's window, Gemma 2's scale and cap, as
 *    the CPU's attention.c): query t sees keys lo(t)..t, lo(t) = max(0,
 *    t - W + 1), so the forward and kernel A start at lo(t) and kernel B
 *    stops at the last query whose window holds its key; a given scale
 *    replaces 1/sqrt(HS); with a cap each scaled score s becomes cap
 *    tanh(s / cap) before the softmax and the backward multiplies ds by
 *    1 - tanh^2, recomputed with p.  Only these kernels take them (the
 *    tensor-core ones run plain causal attention); with none given (or a
 *    window of T or more) the arithmetic is the one without them.
 *  - packed documents (positions, as the CPU's): query t's first key is
 *    also no earlier than its document's start, t - positions[b, t]; kernel
 *    B stops at the first query of a later document (positions count up
 *    along a row, so no later query is in its key's document).  Without
 *    positions the arithmetic is the one without them.
 */
#include "kernels.cuh"
#include "tanh_forms.cuh"
#include "reduce.cuh"

#include <limits.h>
#include <math.h>
#include <math_constants.h>
#include <stddef.h>
#include <stdint.h>

#define LN_EPS 1e-5f
#define LN_ROW_BLOCKS 64 /* fixed row partition of layernorm_backward */
#define ROW_WARPS 8      /* rows (warps) per block, layernorm */
#define ATT_WARPS 8      /* queries/keys (warps) per block, attention */
#define ATT_MAX_HS 256

/* ---- layernorm ------------------------------------------------------------ */

/* One warp per row. */
static __global__ void __launch_bounds__(ROW_WARPS * 32)
	ln_forward_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *weight,
			  const bf16 *bias, int N, int C)
{
	const int lane = threadIdx.x & 31;
	const long row = (long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
	if (row >= N)
		return;
	const bf16 *x = inp + (size_t)row * C;
	bf16 *o = out + (size_t)row * C;

	float s = 0.0f;
	for (int c = lane; c < C; c += 32)
		s += bf2f(x[c]);
	const float m = warp_sum(s) / (float)C;
	float ss = 0.0f;
	for (int c = lane; c < C; c += 32) {
		const float d = bf2f(x[c]) - m;
		ss += d * d;
	}
	const float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + LN_EPS);
	/* x[c] is read and o[c] written by the same lane: safe if out == inp */
	for (int c = lane; c < C; c += 32)
		o[c] = f2bf((bf2f(x[c]) - m) * r * bf2f(weight[c]) + bf2f(bias[c]));
	if (lane == 0) {
		if (mean)
			mean[row] = m;
		if (rstd)
			rstd[row] = r;
	}
}

/* The same for C = 256 * CH with 16-byte aligned rows: each lane loads 8
 * values at a time (one warp keeps 512 bytes in flight per load, not 64)
 * and keeps its part of the row in registers between the two passes. */
template <int CH>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
	ln_backward_dinp_vec_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *weight,
				    const float *mean, const float *rstd, int N)
{
	constexpr int C = CH * 256;
	const int lane = threadIdx.x & 31;
	const long row = (long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
	if (row >= N)
		return;
	const size_t off = (size_t)row * C;
	const float m = mean[row], r = rstd[row];
	float gv[CH][8], xh[CH][8];
	float sg = 0.0f, sgx = 0.0f;
#pragma unroll
	for (int ch = 0; ch < CH; ch++) {
		const int c = (ch * 32 + lane) * 8;
		const uint4 xu = *(const uint4 *)(inp + off + c), du = *(const uint4 *)(dout + off + c);
		const uint4 wu = *(const uint4 *)(weight + c);
		const bf16 *xb = (const bf16 *)&xu, *db = (const bf16 *)&du, *wb = (const bf16 *)&wu;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			xh[ch][j] = (bf2f(xb[j]) - m) * r;
			gv[ch][j] = bf2f(db[j]) * bf2f(wb[j]);
			sg += gv[ch][j];
			sgx += gv[ch][j] * xh[ch][j];
		}
	}
	sg = warp_sum(sg) / (float)C;
	sgx = warp_sum(sgx) / (float)C;
#pragma unroll
	for (int ch = 0; ch < CH; ch++) {
		const int c = (ch * 32 + lane) * 8;
		uint4 gu = *(const uint4 *)(dinp + off + c);
		bf16 *gb = (bf16 *)&gu;
#pragma unroll
		for (int j = 0; j < 8; j++)
			gb[j] = f2bf(bf2f(gb[j]) + r * (gv[ch][j] - sg - xh[ch][j] * sgx));
		*(uint4 *)(dinp + off + c) = gu;
	}
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight.
 * One warp per row. */
static __global__ void __launch_bounds__(ROW_WARPS * 32)
	ln_backward_dinp_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *weight,
				const float *mean, const float *rstd, int N, int C)
{
	const int lane = threadIdx.x & 31;
	const long row = (long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
	if (row >= N)
		return;
	const size_t off = (size_t)row * C;
	const bf16 *x = inp + off, *d = dout + off;
	bf16 *g = dinp + off;
	const float m = mean[row], r = rstd[row];

	float sg = 0.0f, sgx = 0.0f;
	for (int c = lane; c < C; c += 32) {
		const float gc = bf2f(d[c]) * bf2f(weight[c]);
		sg += gc;
		sgx += gc * (bf2f(x[c]) - m) * r;
	}
	sg = warp_sum(sg) / (float)C;
	sgx = warp_sum(sgx) / (float)C;
	for (int c = lane; c < C; c += 32) {
		const float xhat = (bf2f(x[c]) - m) * r;
		const float gc = bf2f(d[c]) * bf2f(weight[c]);
		g[c] = f2bf(bf2f(g[c]) + r * (gc - sg - xhat * sgx));
	}
}

/* Block (32, 8), grid (ceil(C/32), LN_ROW_BLOCKS).  Row block rb covers rows
 * [rb*per, min(N, (rb+1)*per)), per = ceil(N / LN_ROW_BLOCKS).  Writes
 * ws[rb*2C + c] = sum dout*xhat and ws[rb*2C + C + c] = sum dout over the
 * row block (zeros for an empty row block). */
static __global__ void __launch_bounds__(256)
	ln_backward_colpart_kernel(float *ws, const bf16 *dout, const bf16 *inp, const float *mean,
				   const float *rstd, int N, int C)
{
	__shared__ float sw[8][33], sb[8][33];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int c = blockIdx.x * 32 + tx;
	const int rb = blockIdx.y;
	const long per = ((long)N + LN_ROW_BLOCKS - 1) / LN_ROW_BLOCKS;
	const long lo = (long)rb * per;
	const long hi = lo + per < (long)N ? lo + per : (long)N;

	float dw = 0.0f, db = 0.0f;
	if (c < C) {
		for (long r = lo + ty; r < hi; r += 8) {
			const size_t i = (size_t)r * C + c;
			const float d = bf2f(dout[i]);
			dw += d * (bf2f(inp[i]) - mean[r]) * rstd[r];
			db += d;
		}
	}
	sw[ty][tx] = dw;
	sb[ty][tx] = db;
	__syncthreads();
	if (ty == 0 && c < C) {
		float w = 0.0f, b = 0.0f;
		for (int y = 0; y < 8; y++) {
			w += sw[y][tx];
			b += sb[y][tx];
		}
		float *p = ws + (size_t)rb * 2 * C;
		p[c] = w;
		p[C + c] = b;
	}
}

/* j in [0, 2C): sum over the row blocks in order, += dweight (j < C) or
 * dbias (j >= C). */
static __global__ void __launch_bounds__(256)
	ln_backward_colsum_kernel(float *dweight, float *dbias, const float *ws, int C)
{
	const long j = (long)blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= 2L * C)
		return;
	float s = 0.0f;
	for (int rb = 0; rb < LN_ROW_BLOCKS; rb++)
		s += ws[(size_t)rb * 2 * C + j];
	if (j < C) {
		if (dweight)
			dweight[j] += s;
	} else if (dbias) {
		dbias[j - C] += s;
	}
}

/* ---- attention ------------------------------------------------------------ */

/* The first key query t sees: 0, or its window's start (W > 0: the last W
 * keys, itself included), or its document's start (pos: the row's
 * positions) if later, as the CPU's first_key. */
static __device__ __forceinline__ int first_key(int t, int W, const int32_t *pos)
{
	int lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;

	if (pos) {
		const int p = pos[t], back = p < 0 ? 0 : p > t ? t : p;
		lo = max(lo, t - back);
	}
	return lo;
}

/* The end of the queries that see key t2 of a row (pos: its positions):
 * the first query in (t2, tend) whose document starts after t2, else tend.
 * The whole warp calls it; every lane gets the answer. */
static __device__ __forceinline__ int doc_query_end(const int32_t *pos, int t2, int tend, int lane)
{
	if (!pos)
		return tend;
	for (int t0 = t2 + 1; t0 < tend; t0 += 32) {
		const int t = t0 + lane;
		const unsigned later = __ballot_sync(0xffffffffu, t < tend && first_key(t, 0, pos) > t2);

		if (later)
			return t0 + __ffs((int)later) - 1;
	}
	return tend;
}

/* A key's score from its dot product: times the scale, then with cap > 0
 * soft-capped, cap tanh(s / cap), and *slope = 1 - tanh^2 (d capped / d s;
 * 1 without a cap), as the CPU's scale_scores and capped_probs. */
static __device__ __forceinline__ float att_score(float dot, float scale, float cap, float *slope)
{
	const float s = dot * scale;

	*slope = 1.0f;
	if (cap <= 0.0f)
		return s;
	const float th = softcap_tanh(s, cap);

	*slope = 1.0f - th * th;
	return th * cap;
}

/* Keys (or queries) processed per step: independent shuffle reductions in
 * flight, bounded for register use at large head sizes. */
template <int EPL> struct att_unroll {
	static constexpr int KU = EPL <= 4 ? 4 : 2;
};

/* Warp per (b, h, query t).  Grid: B*NH*nqb blocks of ATT_WARPS warps; block
 * x -> head bh = x / nqb, query block nqb-1 - x % nqb (longest rows first). */
template <int EPL>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
	attn_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *pos,
			    int T, int C, int CK, int NH, int G, int HS, float scale, int W, float cap, int nqb)
{
	constexpr int KU = att_unroll<EPL>::KU;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int bh = (int)blockIdx.x / nqb;
	const int qb = nqb - 1 - (int)blockIdx.x % nqb;
	const int t = qb * ATT_WARPS + warp;
	if (t >= T)
		return; /* whole warp; no block barriers below */
	const int b = bh / NH, h = bh % NH, lo = first_key(t, W, pos ? pos + (size_t)b * T : nullptr);
	const size_t head = (size_t)b * T * C + (size_t)h * HS;
	const size_t rt = head + (size_t)t * C;
	const size_t kvhead = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const bf16 *kh = k + kvhead, *vh = v + kvhead;

	float qr[EPL], o[EPL];
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		qr[e] = i < HS ? bf2f(q[rt + i]) : 0.0f;
		o[e] = 0.0f;
	}
	float m = 0.0f, l = 0.0f; /* set by the first step (key lo always valid) */

	for (int t0 = lo; t0 <= t; t0 += KU) {
		float s[KU], sl[KU];
#pragma unroll
		for (int j = 0; j < KU; j++) {
			float part = 0.0f;
			if (t0 + j <= t) {
				const bf16 *kr = kh + (size_t)(t0 + j) * CK;
#pragma unroll
				for (int e = 0; e < EPL; e++) {
					const int i = e * 32 + lane;
					if (i < HS)
						part += qr[e] * bf2f(kr[i]);
				}
			}
			s[j] = part;
		}
#pragma unroll
		for (int j = 0; j < KU; j++)
			s[j] = att_score(warp_sum(s[j]), scale, cap, &sl[j]); /* all lanes, every j */

		float mn = t0 == lo ? s[0] : m;
#pragma unroll
		for (int j = 0; j < KU; j++)
			if (t0 + j <= t)
				mn = fmaxf(mn, s[j]);
		const float corr = t0 == lo ? 0.0f : expf(m - mn); /* l = o = 0 at t0 == lo */
		l *= corr;
#pragma unroll
		for (int e = 0; e < EPL; e++)
			o[e] *= corr;
#pragma unroll
		for (int j = 0; j < KU; j++) {
			if (t0 + j <= t) {
				const float p = expf(s[j] - mn);
				const bf16 *vr = vh + (size_t)(t0 + j) * CK;
				l += p;
#pragma unroll
				for (int e = 0; e < EPL; e++) {
					const int i = e * 32 + lane;
					if (i < HS)
						o[e] += p * bf2f(vr[i]);
				}
			}
		}
		m = mn;
	}

	const float inv = 1.0f / l;
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		if (i < HS)
			out[rt + i] = f2bf(o[e] * inv);
	}
	if (lane == 0)
		lse[(size_t)bh * T + t] = m + logf(l);
}

/* Kernel A: warp per (b, h, query t), same grid mapping as the forward.
 * D_t = dout_t . out_t -> Dws[bh*T + t];  when dq != NULL:
 * dq_t += scale * sum_{lo(t)<=t2<=t} p (dp - D_t) k_t2, p = exp(s - lse_t)
 * (lo(t): first_key),
 * dp = dout_t . v_t2 (with a cap: s capped, and each term times its slope). */
template <int EPL>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
	attn_backward_q_kernel(bf16 *dq, float *Dws, const bf16 *dout, const bf16 *q, const bf16 *k,
			       const bf16 *v, const bf16 *out, const float *lse, const int32_t *pos, int T, int C,
			       int CK, int NH, int G, int HS, float scale, int W, float cap, int nqb)
{
	constexpr int KU = att_unroll<EPL>::KU;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int bh = (int)blockIdx.x / nqb;
	const int qb = nqb - 1 - (int)blockIdx.x % nqb;
	const int t = qb * ATT_WARPS + warp;
	if (t >= T)
		return;
	const int b = bh / NH, h = bh % NH;
	const size_t head = (size_t)b * T * C + (size_t)h * HS;
	const size_t rt = head + (size_t)t * C;
	const size_t st = (size_t)bh * T + t;
	const size_t kvhead = (size_t)b * T * CK + (size_t)(h / G) * HS;
	const bf16 *kh = k + kvhead, *vh = v + kvhead;

	float qr[EPL], gr[EPL], acc[EPL];
	float dpart = 0.0f;
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		qr[e] = gr[e] = acc[e] = 0.0f;
		if (i < HS) {
			qr[e] = bf2f(q[rt + i]);
			gr[e] = bf2f(dout[rt + i]);
			dpart += gr[e] * bf2f(out[rt + i]);
		}
	}
	const float D = warp_sum(dpart);
	if (lane == 0)
		Dws[st] = D;
	if (!dq)
		return;
	const float lt = lse[st];

	for (int t0 = first_key(t, W, pos ? pos + (size_t)b * T : nullptr); t0 <= t; t0 += KU) {
		float kk[KU][EPL], sp[KU], dp[KU], sl[KU];
#pragma unroll
		for (int j = 0; j < KU; j++) {
			sp[j] = dp[j] = 0.0f;
#pragma unroll
			for (int e = 0; e < EPL; e++)
				kk[j][e] = 0.0f;
			if (t0 + j <= t) {
				const bf16 *kr = kh + (size_t)(t0 + j) * CK;
				const bf16 *vr = vh + (size_t)(t0 + j) * CK;
#pragma unroll
				for (int e = 0; e < EPL; e++) {
					const int i = e * 32 + lane;
					if (i < HS) {
						kk[j][e] = bf2f(kr[i]);
						sp[j] += qr[e] * kk[j][e];
						dp[j] += gr[e] * bf2f(vr[i]);
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < KU; j++) {
			sp[j] = att_score(warp_sum(sp[j]), scale, cap, &sl[j]);
			dp[j] = warp_sum(dp[j]);
		}
#pragma unroll
		for (int j = 0; j < KU; j++) {
			if (t0 + j <= t) {
				const float p = expf(sp[j] - lt);
				const float ds = cap > 0.0f ? p * (dp[j] - D) * sl[j] : p * (dp[j] - D);
#pragma unroll
				for (int e = 0; e < EPL; e++)
					acc[e] += ds * kk[j][e];
			}
		}
	}
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		if (i < HS)
			dq[rt + i] = f2bf(bf2f(dq[rt + i]) + scale * acc[e]);
	}
}

/* Kernel B's last step: adds one key's group sums, dk += scale * dka and
 * dv += dva, to row r2 of dk and dv (either may be NULL: not wanted),
 * rounding to bf16 once.  Inlined: the kernel's machine code is the same as
 * with this loop written in it. */
template <int EPL>
static __device__ __forceinline__ void attn_backward_kv_store(bf16 *dk, bf16 *dv, size_t r2,
							      const float (&dka)[EPL],
							      const float (&dva)[EPL], int HS,
							      float scale, int lane)
{
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		if (i < HS) {
			if (dk)
				dk[r2 + i] = f2bf(bf2f(dk[r2 + i]) + scale * dka[e]);
			if (dv)
				dv[r2 + i] = f2bf(bf2f(dv[r2 + i]) + dva[e]);
		}
	}
}

/* Kernel B: warp per (b, kv head kh, key t2); grid B*NKV*nkb blocks, block
 * x -> kv head x / nkb, key block x % nkb (small t2 = most queries first).
 * For each query head h = kh*G + g of the group (g = 0..G-1 in order) and
 * queries t2 <= t < t2 + W (W = 0: t < T, every later query; those whose
 * window holds t2), and with pos those of t2's document:
 * p = exp(q_t.k_t2 * scale - lse_t), dp = dout_t . v_t2,
 * ds = p (dp - D_t);  dv_t2 += sum p dout_t,  dk_t2 += scale * sum ds q_t
 * (with a cap: the score capped, ds times the cap's slope).
 * The group's sum stays in fp32 registers and is rounded to bf16 once. */
template <int EPL>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
	attn_backward_kv_kernel(bf16 *dk, bf16 *dv, const float *Dws, const bf16 *dout, const bf16 *q,
				const bf16 *k, const bf16 *v, const float *lse, const int32_t *pos, int T, int C,
				int CK, int NH, int G, int HS, float scale, int W, float cap, int nkb)
{
	constexpr int KU = att_unroll<EPL>::KU;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int NKV = NH / G;
	const int bkv = (int)blockIdx.x / nkb;
	const int kb = (int)blockIdx.x % nkb;
	const int t2 = kb * ATT_WARPS + warp;
	if (t2 >= T)
		return;
	const int b = bkv / NKV, kh = bkv % NKV;
	const size_t r2 = (size_t)b * T * CK + (size_t)kh * HS + (size_t)t2 * CK;
	/* queries t2 .. tend-1 see key t2 */
	const int tend = doc_query_end(pos ? pos + (size_t)b * T : nullptr, t2, W > 0 && W < T - t2 ? t2 + W : T,
				       lane);

	float kr[EPL], vr[EPL], dka[EPL], dva[EPL];
#pragma unroll
	for (int e = 0; e < EPL; e++) {
		const int i = e * 32 + lane;
		kr[e] = i < HS ? bf2f(k[r2 + i]) : 0.0f;
		vr[e] = i < HS ? bf2f(v[r2 + i]) : 0.0f;
		dka[e] = dva[e] = 0.0f;
	}

	/* query head h = kh*G + g: q/dout channels h*HS, lse/D rows b*NH + h */
	const int h0 = kh * G;
	size_t qoff = (size_t)b * T * C + (size_t)h0 * HS;
	size_t soff = ((size_t)b * NH + h0) * T;
	for (int g = 0; g < G; g++, qoff += HS, soff += T) {
		const bf16 *qh = q + qoff, *gh = dout + qoff;
		const float *lh = lse + soff, *Dh = Dws + soff;
		for (int t0 = t2; t0 < tend; t0 += KU) {
			float qq[KU][EPL], gg[KU][EPL], sp[KU], dp[KU], sl[KU];
#pragma unroll
			for (int j = 0; j < KU; j++) {
				sp[j] = dp[j] = 0.0f;
#pragma unroll
				for (int e = 0; e < EPL; e++)
					qq[j][e] = gg[j][e] = 0.0f;
				if (t0 + j < tend) {
					const bf16 *qrow = qh + (size_t)(t0 + j) * C;
					const bf16 *grow = gh + (size_t)(t0 + j) * C;
#pragma unroll
					for (int e = 0; e < EPL; e++) {
						const int i = e * 32 + lane;
						if (i < HS) {
							qq[j][e] = bf2f(qrow[i]);
							gg[j][e] = bf2f(grow[i]);
							sp[j] += qq[j][e] * kr[e];
							dp[j] += gg[j][e] * vr[e];
						}
					}
				}
			}
#pragma unroll
			for (int j = 0; j < KU; j++) {
				sp[j] = att_score(warp_sum(sp[j]), scale, cap, &sl[j]);
				dp[j] = warp_sum(dp[j]);
			}
#pragma unroll
			for (int j = 0; j < KU; j++) {
				const int t = t0 + j;
				if (t < tend) {
					const float p = expf(sp[j] - lh[t]);
					const float ds = cap > 0.0f ? p * (dp[j] - Dh[t]) * sl[j] : p * (dp[j] - Dh[t]);
#pragma unroll
					for (int e = 0; e < EPL; e++) {
						dva[e] += p * gg[j][e];
						dka[e] += ds * qq[j][e];
					}
				}
			}
		}
	}
	attn_backward_kv_store<EPL>(dk, dv, r2, dka, dva, HS, scale, lane);
}

/* ---- launchers --------------------------------------------------------------- */

static bool ws_ok(const void *ws, size_t ws_bytes, size_t need)
{
	return need == 0 || (ws != NULL && ws_bytes >= need && (uintptr_t)ws % sizeof(float) == 0);
}

/* Head size, lanes per element, row blocks, kv row stride CK and group
 * size G for attention with NKV kv heads (0: NH); false if unsupported. */
static bool att_shape(int B, int T, int C, int NH, int NKV, int *HS, int *EPL, int *nb, int *CK, int *G)
{
	if (NKV == 0)
		NKV = NH;
	if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0 || NKV <= 0 || NH % NKV != 0)
		return false;
	*HS = C / NH;
	if (*HS > ATT_MAX_HS)
		return false;
	*EPL = (*HS + 31) / 32;
	*nb = (T + ATT_WARPS - 1) / ATT_WARPS;
	*CK = NKV * *HS;
	*G = NH / NKV;
	return (long)B * NH * (long)*nb <= INT_MAX;
}

/* The window the kernels apply (a window of T keys or more holds every
 * earlier key: 0, the same arithmetic) and the score scale; true when
 * nothing differs from plain causal attention, the only kind the tensor-core
 * kernels compute.  False into *ok for a negative window. */
static bool att_consts(struct ferry_cuda_att_consts ac, int T, int HS, int *W, float *scale, bool *ok)
{
	*ok = ac.window >= 0;
	*W = ac.window < T ? ac.window : 0;
	*scale = ac.scale > 0.0f ? ac.scale : 1.0f / sqrtf((float)HS);
	return *W == 0 && ac.scale <= 0.0f && ac.cap <= 0.0f;
}

extern "C" {

size_t ferry_cuda_layernorm_backward_ws_bytes(int N, int C)
{
	(void)N;
	return (size_t)LN_ROW_BLOCKS * 2 * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

size_t ferry_cuda_attention_backward_ws_bytes(int B, int T, int C, int NH)
{
	(void)C;
	if (B <= 0 || T <= 0 || NH <= 0)
		return 0;
	return (size_t)B * NH * T * sizeof(float);
}

cudaError_t ferry_cuda_layernorm_forward(cudaStream_t s, bf16 *out, float *mean, float *rstd,
					 const bf16 *inp, const bf16 *weight, const bf16 *bias, int N, int C)
{
	if (N < 0 || C < 0)
		return cudaErrorInvalidValue;
	if (N == 0 || C == 0)
		return cudaSuccess;
	const unsigned grid = (unsigned)((N + ROW_WARPS - 1) / ROW_WARPS);
	ln_forward_kernel<<<grid, ROW_WARPS * 32, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
	return cudaGetLastError();
}

cudaError_t ferry_cuda_layernorm_backward(cudaStream_t s, bf16 *dinp, float *dweight, float *dbias,
					  const bf16 *dout, const bf16 *inp, const bf16 *weight,
					  const float *mean, const float *rstd, int N, int C, void *ws,
					  size_t ws_bytes)
{
	if (N < 0 || C < 0)
		return cudaErrorInvalidValue;
	if (N == 0 || C == 0 || (!dinp && !dweight && !dbias))
		return cudaSuccess;
	if (dweight || dbias) {
		if (!ws_ok(ws, ws_bytes, ferry_cuda_layernorm_backward_ws_bytes(N, C)))
			return cudaErrorInvalidValue;
		float *part = (float *)ws;
		const dim3 grid1((unsigned)((C + 31) / 32), LN_ROW_BLOCKS);
		ln_backward_colpart_kernel<<<grid1, dim3(32, 8), 0, s>>>(part, dout, inp, mean, rstd, N, C);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
		const unsigned grid2 = (unsigned)((2L * C + 255) / 256);
		ln_backward_colsum_kernel<<<grid2, 256, 0, s>>>(dweight, dbias, part, C);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	if (dinp) {
		const unsigned grid = (unsigned)((N + ROW_WARPS - 1) / ROW_WARPS);
		const bool vec = C % 256 == 0 && C <= 8 * 256 && ((uintptr_t)dinp | (uintptr_t)dout |
								    (uintptr_t)inp | (uintptr_t)weight) % 16 == 0;
#define LN_DINP_VEC(CH)                                                                                  \
	case CH:                                                                                         \
		ln_backward_dinp_vec_kernel<CH><<<grid, ROW_WARPS * 32, 0, s>>>(dinp, dout, inp, weight, mean, \
										 rstd, N);              \
		return cudaGetLastError()
		switch (vec ? C / 256 : 0) {
			LN_DINP_VEC(1);
			LN_DINP_VEC(2);
			LN_DINP_VEC(3);
			LN_DINP_VEC(4);
			LN_DINP_VEC(5);
			LN_DINP_VEC(6);
			LN_DINP_VEC(7);
			LN_DINP_VEC(8);
		default:
			break;
		}
#undef LN_DINP_VEC
		ln_backward_dinp_kernel<<<grid, ROW_WARPS * 32, 0, s>>>(dinp, dout, inp, weight, mean, rstd,
									N, C);
	}
	return cudaGetLastError();
}

cudaError_t ferry_cuda_attention_forward(cudaStream_t s, bf16 *out, float *lse, const bf16 *q,
					 const bf16 *k, const bf16 *v, const int32_t *pos, int B, int T, int C,
					 int NH, int NKV, struct ferry_cuda_att_consts ac)
{
	int HS, EPL, nqb, CK, G, W;
	float scale;
	bool ok;
	if (!att_shape(B, T, C, NH, NKV, &HS, &EPL, &nqb, &CK, &G))
		return cudaErrorInvalidValue;
	const bool plain = att_consts(ac, T, HS, &W, &scale, &ok);
	if (!ok)
		return cudaErrorInvalidValue;
	if (B == 0 || T == 0)
		return cudaSuccess;
	/* tensor cores where the shape allows (kernels_flash_attn.cu) */
	if (plain) {
		cudaError_t fe = ferry_cuda_flash_attention_forward(s, out, lse, q, k, v, pos, B, T, C, NH, NH / G);
		if (fe != cudaErrorNotSupported)
			return fe;
	}
	const unsigned grid = (unsigned)((long)B * NH * nqb);
	const int threads = ATT_WARPS * 32;
#define ATT_FWD(E)                                                                               \
	case E:                                                                                    \
		attn_forward_kernel<E><<<grid, threads, 0, s>>>(out, lse, q, k, v, pos, T, C, CK, NH, G, HS, \
								 scale, W, ac.cap, nqb);        \
		break
	switch (EPL) {
		ATT_FWD(1);
		ATT_FWD(2);
		ATT_FWD(3);
		ATT_FWD(4);
		ATT_FWD(5);
		ATT_FWD(6);
		ATT_FWD(7);
		ATT_FWD(8);
	default:
		return cudaErrorInvalidValue;
	}
#undef ATT_FWD
	return cudaGetLastError();
}

cudaError_t ferry_cuda_attention_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
					  const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
					  const float *lse, const int32_t *pos, int B, int T, int C, int NH,
					  int NKV, struct ferry_cuda_att_consts ac, void *ws, size_t ws_bytes)
{
	int HS, EPL, nb, CK, G, W;
	float scale;
	bool ok;
	if (!att_shape(B, T, C, NH, NKV, &HS, &EPL, &nb, &CK, &G))
		return cudaErrorInvalidValue;
	const bool plain = att_consts(ac, T, HS, &W, &scale, &ok);
	if (!ok)
		return cudaErrorInvalidValue;
	if (B == 0 || T == 0 || (!dq && !dk && !dv))
		return cudaSuccess;
	if (!ws_ok(ws, ws_bytes, ferry_cuda_attention_backward_ws_bytes(B, T, C, NH)))
		return cudaErrorInvalidValue;
	float *Dws = (float *)ws;
	if (plain) {
		cudaError_t fe = ferry_cuda_flash_attention_backward(s, dq, dk, dv, dout, q, k, v, out, lse, pos,
								     Dws, B, T, C, NH, NH / G);
		if (fe != cudaErrorNotSupported)
			return fe;
	}
	const unsigned grid = (unsigned)((long)B * NH * nb);
	const unsigned grid_kv = (unsigned)((long)B * (NH / G) * nb);
	const int threads = ATT_WARPS * 32;

	/* A: D (always; B needs it) and dq */
#define ATT_BWD_Q(E)                                                                                \
	case E:                                                                                       \
		attn_backward_q_kernel<E><<<grid, threads, 0, s>>>(dq, Dws, dout, q, k, v, out, lse, pos, T, C, \
								    CK, NH, G, HS, scale, W, ac.cap, nb); \
		break
	switch (EPL) {
		ATT_BWD_Q(1);
		ATT_BWD_Q(2);
		ATT_BWD_Q(3);
		ATT_BWD_Q(4);
		ATT_BWD_Q(5);
		ATT_BWD_Q(6);
		ATT_BWD_Q(7);
		ATT_BWD_Q(8);
	default:
		return cudaErrorInvalidValue;
	}
#undef ATT_BWD_Q
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess || (!dk && !dv))
		return e;

	/* B: dk, dv, one warp per (kv head, key) (reads D written by A, same stream) */
#define ATT_BWD_KV(E)                                                                             \
	case E:                                                                                     \
		attn_backward_kv_kernel<E><<<grid_kv, threads, 0, s>>>(dk, dv, Dws, dout, q, k, v, lse, pos, T, \
									C, CK, NH, G, HS, scale, W, ac.cap, \
									nb);                                \
		break
	switch (EPL) {
		ATT_BWD_KV(1);
		ATT_BWD_KV(2);
		ATT_BWD_KV(3);
		ATT_BWD_KV(4);
		ATT_BWD_KV(5);
		ATT_BWD_KV(6);
		ATT_BWD_KV(7);
		ATT_BWD_KV(8);
	default:
		return cudaErrorInvalidValue;
	}
#undef ATT_BWD_KV
	return cudaGetLastError();
}

} /* extern "C" */
