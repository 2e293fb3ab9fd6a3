/*
 * CUDA kernels of the Llama ops: RMS normalisation, rotary position
 * embedding (RoPE, Hugging Face rotate_half convention) and SwiGLU.
 * Semantics as the CPU references src/ops/cpu/{rmsnorm,rope,swiglu}.c;
 * inputs, outputs and activation gradients bf16, rstd and the gain's
 * gradient float, all arithmetic fp32.  No atomics: every result is the same
 * bits run to run.
 *
 * Vector access: pointers may be slices of a buffer with only 2-byte
 * alignment, so every kernel is a template on V, the bf16 values per access
 * (8 = 16-byte loads and stores, 4, 2, or 1 = scalar).  The launcher picks
 * the widest V that divides the row/pair length and to which every pointer
 * the kernel touches is aligned, so the fast path needs nothing from the
 * caller and odd sizes or offsets still work (scalar).
 *
 * Designs:
 *  - rmsnorm_forward: one block per row (up to RMS_THREADS threads over the
 *    row, V values each); sum of squares by a warp-shuffle + shared-memory
 *    block reduction, rstd = 1 / sqrt(ss / C + eps) with IEEE division and
 *    square root (as the CPU: --use_fast_math would otherwise make them
 *    approximate), then y = (x * rstd) * gain, gain = weight (+ offset,
 *    Gemma's 1 + w, when one is given).  Element c is read in both
 *    passes and written by the same thread, after the reduction's barriers:
 *    y may alias x.
 *  - rmsnorm_backward: (1) column partial sums of dout * xhat over a fixed
 *    partition of the rows into RMS_ROW_BLOCKS row blocks, into ws;
 *    (2) sum over the row blocks in order, += dweight; (3) dinp, one block
 *    per row: dinp += rstd * (g - xhat * mean(g * xhat)), g = dout * gain.
 *    (1) runs before (3), so the column sums read dout before any dinp is
 *    written.  Workspace: RMS_ROW_BLOCKS * C floats (0 without dweight).
 *  - rope: one block per (position t, group of RP_ROWS batch rows).  The
 *    block first builds the cos/sin table of its position in shared memory,
 *    exactly as the CPU reference (and HF) round it: inv_freq =
 *    1 / float(pow(theta, float(2i) / HS)) scaled as the model's
 *    rope_scaling says (ops/rope_freq.h, one formula for both), angle =
 *    float(t) * inv_freq
 *    rounded to float, cos/sin of that angle evaluated in double and
 *    rounded to float (double math is not touched by --use_fast_math, and
 *    the float IEEE intrinsics keep the float roundings exact), so the
 *    tables agree with the CPU's to the last bit or so.  It then rotates
 *    every head of its rows, V pairs per thread.  HS/2 double cos/sin per
 *    block, shared by up to RP_ROWS * NH heads; no workspace.  Each pair is
 *    read and written by one thread (in place works).  Packed documents
 *    (positions): rows of one t no longer share a position, so a block
 *    takes one row (b, t) and builds the table of positions[b, t].
 *  - swiglu: elementwise grid-stride, V values per thread per step, the
 *    n % V tail handled by scalar code in the same kernel.
 */
#include "backend/cuda/kernels.cuh"

#include <limits.h>
#include <math.h>
#include <stdint.h>

#define FULL_MASK 0xffffffffu
#define RMS_THREADS 256     /* most threads per rmsnorm row block */
#define RMS_ROW_BLOCKS 64   /* fixed row partition of rmsnorm_backward's dweight */
#define RP_ROWS 4           /* batch rows per rope block (share the cos/sin table) */
#define RP_THREADS 256      /* most threads per rope block */
#define EW_THREADS 256      /* swiglu */
#define EW_MAX_BLOCKS 65535L

/* ---- helpers --------------------------------------------------------------- */

static __device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16(x); }

/* V consecutive bf16 at p (aligned to 2V bytes) <-> V floats. */
template <int V> struct bfvec;

template <> struct bfvec<1> {
	static __device__ __forceinline__ void load(const bf16 *p, float *f) { f[0] = bf2f(*p); }
	static __device__ __forceinline__ void store(bf16 *p, const float *f) { *p = f2bf(f[0]); }
};

/* V = 2, 4, 8: one 4-, 8- or 16-byte access of bf16 pairs. */
template <int V, typename W> struct bfvec_wide {
	static_assert(sizeof(W) == 2 * V, "vector word size");
	static __device__ __forceinline__ void load(const bf16 *p, float *f)
	{
		const W w = *reinterpret_cast<const W *>(p);
		const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&w);
#pragma unroll
		for (int k = 0; k < V / 2; k++) {
			const float2 x = __bfloat1622float2(h[k]);
			f[2 * k] = x.x;
			f[2 * k + 1] = x.y;
		}
	}
	static __device__ __forceinline__ void store(bf16 *p, const float *f)
	{
		W w;
		__nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&w);
#pragma unroll
		for (int k = 0; k < V / 2; k++)
			h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]); /* round to nearest even */
		*reinterpret_cast<W *>(p) = w;
	}
};

template <> struct bfvec<2> : bfvec_wide<2, unsigned int> {};
template <> struct bfvec<4> : bfvec_wide<4, uint2> {};
template <> struct bfvec<8> : bfvec_wide<8, uint4> {};

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_xor_sync(FULL_MASK, v, off);
	return v;
}

/* Block-wide sum (blockDim.x a multiple of 32, <= 1024); every thread gets
 * the same bits.  sh: 32 floats of shared memory; ends with a barrier after
 * the last read of sh, so it can be called again.  All threads must call. */
static __device__ float block_sum(float v, float *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = blockDim.x >> 5;

	v = warp_sum(v);
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	if (warp == 0) {
		float w = lane < nwarps ? sh[lane] : 0.0f;
		w = warp_sum(w);
		if (lane == 0)
			sh[0] = w;
	}
	__syncthreads();
	const float r = sh[0];
	__syncthreads();
	return r;
}

static bool aligned(const void *p, int bytes)
{
	return p == NULL || (uintptr_t)p % (uintptr_t)bytes == 0;
}

/* Widest V in {8, 4, 2, 1} dividing len with every pointer aligned to 2V
 * bytes (NULL pointers do not count). */
static int pick_vec(long len, const void *a, const void *b, const void *c, const void *d, const void *e)
{
	for (int v = 8; v > 1; v >>= 1)
		if (len % v == 0 && aligned(a, 2 * v) && aligned(b, 2 * v) && aligned(c, 2 * v) &&
		    aligned(d, 2 * v) && aligned(e, 2 * v))
			return v;
	return 1;
}

/* Threads for a row of `units` V-wide accesses: a multiple of 32 in
 * [32, maxt]. */
static int row_threads(long units, int maxt)
{
	long t = (units + 31) / 32 * 32;
	return (int)(t < 32 ? 32 : (t > maxt ? maxt : t));
}

/* ---- RMSNorm ---------------------------------------------------------------- */

/* A channel's gain: its weight, or weight + offset (Gemma's 1 + w); offset
 * 0 gives the weight itself, Llama's arithmetic, as the CPU's gain(). */
static __device__ __forceinline__ float gain_of(float w, float offset)
{
	return offset != 0.0f ? w + offset : w;
}

/* V gains of weight from c, 0 with no weight (Gemma 4's v norm: the
 * offset 1 alone). */
template <int V> static __device__ __forceinline__ void load_gain(const bf16 *weight, int c, float *g)
{
	if (weight) {
		bfvec<V>::load(weight + c, g);
		return;
	}
#pragma unroll
	for (int k = 0; k < V; k++)
		g[k] = 0.0f;
}

/* One block per row; thread j takes accesses c = (j + k*blockDim.x) * V. */
template <int V>
static __global__ void __launch_bounds__(RMS_THREADS)
	rms_forward_kernel(bf16 *out, float *rstd, const bf16 *inp, const bf16 *weight, int C, float eps,
			   float offset)
{
	__shared__ float sh[32];
	const size_t row = blockIdx.x;
	const bf16 *x = inp + row * C;
	bf16 *y = out + row * C;
	const int step = blockDim.x * V;

	float ss = 0.0f;
	for (int c = threadIdx.x * V; c < C; c += step) {
		float f[V];
		bfvec<V>::load(x + c, f);
#pragma unroll
		for (int k = 0; k < V; k++)
			ss += f[k] * f[k];
	}
	ss = block_sum(ss, sh);
	const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(ss, (float)C) + eps));
	for (int c = threadIdx.x * V; c < C; c += step) {
		float f[V], g[V];
		bfvec<V>::load(x + c, f);
		load_gain<V>(weight, c, g);
#pragma unroll
		for (int k = 0; k < V; k++)
			f[k] = (f[k] * r) * gain_of(g[k], offset);
		bfvec<V>::store(y + c, f);
	}
	if (threadIdx.x == 0 && rstd)
		rstd[row] = r;
}

/* dinp += r * (g - xhat * mean(g * xhat)), g = dout * gain, xhat = x * r.
 * One block per row. */
template <int V>
static __global__ void __launch_bounds__(RMS_THREADS)
	rms_backward_dinp_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *weight,
				 const float *rstd, int C, float offset)
{
	__shared__ float sh[32];
	const size_t row = blockIdx.x;
	const size_t off = row * C;
	const bf16 *x = inp + off, *d = dout + off;
	bf16 *dx = dinp + off;
	const float r = rstd[row];
	const int step = blockDim.x * V;

	float sgx = 0.0f;
	for (int c = threadIdx.x * V; c < C; c += step) {
		float xf[V], df[V], wf[V];
		bfvec<V>::load(x + c, xf);
		bfvec<V>::load(d + c, df);
		load_gain<V>(weight, c, wf);
#pragma unroll
		for (int k = 0; k < V; k++)
			sgx += df[k] * gain_of(wf[k], offset) * (xf[k] * r);
	}
	sgx = __fdiv_rn(block_sum(sgx, sh), (float)C);
	for (int c = threadIdx.x * V; c < C; c += step) {
		float xf[V], df[V], wf[V], gf[V];
		bfvec<V>::load(x + c, xf);
		bfvec<V>::load(d + c, df);
		load_gain<V>(weight, c, wf);
		bfvec<V>::load(dx + c, gf);
#pragma unroll
		for (int k = 0; k < V; k++)
			gf[k] += r * (df[k] * gain_of(wf[k], offset) - (xf[k] * r) * sgx);
		bfvec<V>::store(dx + c, gf);
	}
}

/* Block (32, 8), grid (ceil(C / (32 V)), RMS_ROW_BLOCKS).  Row block rb
 * covers rows [rb*per, min(N, (rb+1)*per)), per = ceil(N / RMS_ROW_BLOCKS);
 * thread (tx, ty) owns columns (blockIdx.x*32 + tx)*V + k, k < V, and rows
 * lo + ty, lo + ty + 8, ...  ws[rb*C + c] = sum over the row block of
 * dout * x * rstd (0 for an empty row block), ty combined in order. */
template <int V>
static __global__ void __launch_bounds__(256)
	rms_backward_colpart_kernel(float *ws, const bf16 *dout, const bf16 *inp, const float *rstd, int N,
				    int C)
{
	__shared__ float sw[8][32 * V + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int c0 = (blockIdx.x * 32 + tx) * V;
	const int rb = blockIdx.y;
	const long per = ((long)N + RMS_ROW_BLOCKS - 1) / RMS_ROW_BLOCKS;
	const long lo = (long)rb * per;
	const long hi = lo + per < (long)N ? lo + per : (long)N;

	float acc[V];
#pragma unroll
	for (int k = 0; k < V; k++)
		acc[k] = 0.0f;
	if (c0 < C) { /* C % V == 0, so c0 < C means all V columns are */
		for (long r = lo + ty; r < hi; r += 8) {
			const size_t i = (size_t)r * C + c0;
			const float rs = rstd[r];
			float df[V], xf[V];
			bfvec<V>::load(dout + i, df);
			bfvec<V>::load(inp + i, xf);
#pragma unroll
			for (int k = 0; k < V; k++)
				acc[k] += df[k] * (xf[k] * rs);
		}
	}
#pragma unroll
	for (int k = 0; k < V; k++)
		sw[ty][tx * V + k] = acc[k];
	__syncthreads();
	if (ty == 0 && c0 < C) {
#pragma unroll
		for (int k = 0; k < V; k++) {
			float w = 0.0f;
			for (int y = 0; y < 8; y++)
				w += sw[y][tx * V + k];
			ws[(size_t)rb * C + c0 + k] = w;
		}
	}
}

/* dweight[c] += sum over the row blocks, in order, of ws[rb*C + c]. */
static __global__ void __launch_bounds__(256) rms_backward_colsum_kernel(float *dweight, const float *ws, int C)
{
	const long c = (long)blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	float s = 0.0f;
	for (int rb = 0; rb < RMS_ROW_BLOCKS; rb++)
		s += ws[(size_t)rb * C + c];
	dweight[c] += s;
}

/* ---- RoPE -------------------------------------------------------------------- */

/* Block (t, row group yb): rows (b, t) for b in [yb*RP_ROWS, min(B, +RP_ROWS)),
 * at position t; with pos, row (yb, t) alone, at position pos[yb, t].
 * Dynamic shared memory: cos then sin, HS/2 floats each.  DIR = +1: out =
 * R x (writes); DIR = -1: out += R^T x (accumulates). */
template <int V, int DIR>
static __global__ void __launch_bounds__(RP_THREADS)
	rope_kernel(bf16 *out, const bf16 *inp, const int32_t *pos, int B, int T, int NH, int HS,
		    struct ferry_rope_freq rf)
{
	extern __shared__ float tab[];
	const int half = HS / 2;
	float *cs = tab, *sn = tab + half;
	const int t = blockIdx.x;
	const int rows = pos ? 1 : RP_ROWS;
	const int b_lo = blockIdx.y * rows;
	const int b_hi = b_lo + rows < B ? b_lo + rows : B;
	const int at = pos ? pos[(size_t)b_lo * T + t] : t;

	for (int j = threadIdx.x; j < half; j += blockDim.x) {
		/* As src/ops/cpu/rope.c: the frequency by the shared formula
		 * (float exponent, power in double rounded to float, float
		 * reciprocal, the scaling), float angle, double cos/sin. */
		const float inv = ferry_rope_inv_freq(&rf, j, HS);
		const float a = __fmul_rn((float)at, inv);
		double sd, cd;
		sincos((double)a, &sd, &cd);
		cs[j] = (float)cd;
		sn[j] = (float)sd;
	}
	__syncthreads();

	const int per_head = half / V; /* V-wide pair groups per head */
	const int units = NH * per_head;
	const size_t C = (size_t)NH * HS;

	for (int b = b_lo; b < b_hi; b++) {
		const size_t row = ((size_t)b * T + t) * C;
		for (int u = threadIdx.x; u < units; u += blockDim.x) {
			const int h = u / per_head;
			const int j0 = (u - h * per_head) * V;
			const size_t o = row + (size_t)h * HS + j0;
			float x1[V], x2[V], y1[V], y2[V];
			bfvec<V>::load(inp + o, x1);
			bfvec<V>::load(inp + o + half, x2);
			if (DIR < 0) {
				bfvec<V>::load(out + o, y1);
				bfvec<V>::load(out + o + half, y2);
			}
#pragma unroll
			for (int k = 0; k < V; k++) {
				const float c = cs[j0 + k], s = sn[j0 + k];
				if (DIR > 0) {
					y1[k] = x1[k] * c - x2[k] * s;
					y2[k] = x2[k] * c + x1[k] * s;
				} else {
					y1[k] += x1[k] * c + x2[k] * s;
					y2[k] += x2[k] * c - x1[k] * s;
				}
			}
			bfvec<V>::store(out + o, y1);
			bfvec<V>::store(out + o + half, y2);
		}
	}
}

/* ---- SwiGLU ------------------------------------------------------------------ */

/* s = sigmoid(x): __expf under --use_fast_math (relative error ~1e-6 over
 * the range that matters); for x < -88, e^-x = inf and s = 0 (the CPU's
 * clamped exp gives ~6e-39: silu ~ 0 either way, no NaN). */
static __device__ __forceinline__ float sigmoidf(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

template <int V>
static __global__ void swiglu_forward_kernel(bf16 *out, const bf16 *gate, const bf16 *up, long n)
{
	const long nv = n / V;
	const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x;
	const long nthreads = (long)gridDim.x * blockDim.x;

	for (long i = tid; i < nv; i += nthreads) {
		float g[V], u[V];
		bfvec<V>::load(gate + i * V, g);
		bfvec<V>::load(up + i * V, u);
#pragma unroll
		for (int k = 0; k < V; k++)
			g[k] = g[k] * sigmoidf(g[k]) * u[k];
		bfvec<V>::store(out + i * V, g);
	}
	for (long i = nv * V + tid; i < n; i += nthreads) {
		const float g = bf2f(gate[i]);
		out[i] = f2bf(g * sigmoidf(g) * bf2f(up[i]));
	}
}

/* dgate += dout * up * s (1 + x (1 - s)), dup += dout * (x s); either may be
 * NULL (not both). */
template <int V>
static __global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dout, const bf16 *gate,
					      const bf16 *up, long n)
{
	const long nv = n / V;
	const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x;
	const long nthreads = (long)gridDim.x * blockDim.x;

	for (long i = tid; i < nv; i += nthreads) {
		float d[V], x[V], u[V], a[V];
		bfvec<V>::load(dout + i * V, d);
		bfvec<V>::load(gate + i * V, x);
		if (dgate) {
			bfvec<V>::load(up + i * V, u);
			bfvec<V>::load(dgate + i * V, a);
#pragma unroll
			for (int k = 0; k < V; k++) {
				const float s = sigmoidf(x[k]);
				a[k] += d[k] * u[k] * s * (1.0f + x[k] * (1.0f - s));
			}
			bfvec<V>::store(dgate + i * V, a);
		}
		if (dup) {
			bfvec<V>::load(dup + i * V, a);
#pragma unroll
			for (int k = 0; k < V; k++)
				a[k] += d[k] * (x[k] * sigmoidf(x[k]));
			bfvec<V>::store(dup + i * V, a);
		}
	}
	for (long i = nv * V + tid; i < n; i += nthreads) {
		const float d = bf2f(dout[i]), x = bf2f(gate[i]);
		const float s = sigmoidf(x);
		if (dgate)
			dgate[i] = f2bf(bf2f(dgate[i]) + d * bf2f(up[i]) * s * (1.0f + x * (1.0f - s)));
		if (dup)
			dup[i] = f2bf(bf2f(dup[i]) + d * (x * s));
	}
}

static unsigned ew_grid(long n, int V)
{
	long g = (n / V + EW_THREADS - 1) / EW_THREADS;
	if (g > EW_MAX_BLOCKS)
		g = EW_MAX_BLOCKS;
	return (unsigned)(g < 1 ? 1 : g);
}

/* ---- launchers ---------------------------------------------------------------- */

static bool ws_ok(const void *ws, size_t ws_bytes, size_t need)
{
	return need == 0 || (ws != NULL && ws_bytes >= need && (uintptr_t)ws % sizeof(float) == 0);
}

extern "C" {

size_t ferry_cuda_rmsnorm_backward_ws_bytes(int N, int C)
{
	(void)N;
	return (size_t)RMS_ROW_BLOCKS * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

cudaError_t ferry_cuda_rmsnorm_forward(cudaStream_t s, bf16 *out, float *rstd, const bf16 *inp,
				       const bf16 *weight, int N, int C, float eps, float offset)
{
	if (N < 0 || C < 0)
		return cudaErrorInvalidValue;
	if (N == 0 || C == 0)
		return cudaSuccess;
	const int V = pick_vec(C, out, inp, weight, NULL, NULL);
	const int threads = row_threads(C / V, RMS_THREADS);
	switch (V) {
	case 8:
		rms_forward_kernel<8><<<(unsigned)N, threads, 0, s>>>(out, rstd, inp, weight, C, eps, offset);
		break;
	case 4:
		rms_forward_kernel<4><<<(unsigned)N, threads, 0, s>>>(out, rstd, inp, weight, C, eps, offset);
		break;
	case 2:
		rms_forward_kernel<2><<<(unsigned)N, threads, 0, s>>>(out, rstd, inp, weight, C, eps, offset);
		break;
	default:
		rms_forward_kernel<1><<<(unsigned)N, threads, 0, s>>>(out, rstd, inp, weight, C, eps, offset);
		break;
	}
	return cudaGetLastError();
}

cudaError_t ferry_cuda_rmsnorm_backward(cudaStream_t s, bf16 *dinp, float *dweight, const bf16 *dout,
					const bf16 *inp, const bf16 *weight, const float *rstd, int N, int C,
					float offset, void *ws, size_t ws_bytes)
{
	cudaError_t e;

	if (N < 0 || C < 0)
		return cudaErrorInvalidValue;
	if (N == 0 || C == 0 || (!dinp && !dweight))
		return cudaSuccess;
	if (dweight) {
		if (!ws_ok(ws, ws_bytes, ferry_cuda_rmsnorm_backward_ws_bytes(N, C)))
			return cudaErrorInvalidValue;
		float *part = (float *)ws;
		const bool v2 = C % 2 == 0 && aligned(dout, 4) && aligned(inp, 4);
		const dim3 block(32, 8);
		if (v2) {
			const dim3 grid((unsigned)((C / 2 + 31) / 32), RMS_ROW_BLOCKS);
			rms_backward_colpart_kernel<2><<<grid, block, 0, s>>>(part, dout, inp, rstd, N, C);
		} else {
			const dim3 grid((unsigned)((C + 31) / 32), RMS_ROW_BLOCKS);
			rms_backward_colpart_kernel<1><<<grid, block, 0, s>>>(part, dout, inp, rstd, N, C);
		}
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
		rms_backward_colsum_kernel<<<(unsigned)((C + 255) / 256), 256, 0, s>>>(dweight, part, C);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	if (dinp) {
		const int V = pick_vec(C, dinp, dout, inp, weight, NULL);
		const int threads = row_threads(C / V, RMS_THREADS);
		switch (V) {
		case 8:
			rms_backward_dinp_kernel<8><<<(unsigned)N, threads, 0, s>>>(dinp, dout, inp, weight, rstd, C,
										     offset);
			break;
		case 4:
			rms_backward_dinp_kernel<4><<<(unsigned)N, threads, 0, s>>>(dinp, dout, inp, weight, rstd, C,
										     offset);
			break;
		case 2:
			rms_backward_dinp_kernel<2><<<(unsigned)N, threads, 0, s>>>(dinp, dout, inp, weight, rstd, C,
										     offset);
			break;
		default:
			rms_backward_dinp_kernel<1><<<(unsigned)N, threads, 0, s>>>(dinp, dout, inp, weight, rstd, C,
										     offset);
			break;
		}
	}
	return cudaGetLastError();
}

/* dir = +1 forward (out = rope(inp)), -1 backward (out += rope^-1(inp)). */
static cudaError_t rope_launch(cudaStream_t s, bf16 *out, const bf16 *inp, const int32_t *pos, int B, int T,
			       int C, int NH, struct ferry_rope_freq rf, int dir)
{
	if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0 || (C / NH) % 2 != 0)
		return cudaErrorInvalidValue;
	if (B == 0 || T == 0 || C == 0 || !out)
		return cudaSuccess;
	const int HS = C / NH, half = HS / 2;
	const long yblocks = pos ? (long)B : ((long)B + RP_ROWS - 1) / RP_ROWS; /* rope_kernel's row groups */
	if (yblocks > 65535)
		return cudaErrorInvalidValue;
	const int V = pick_vec(half, out, inp, NULL, NULL, NULL);
	const dim3 grid((unsigned)T, (unsigned)yblocks);
	const int threads = row_threads((long)NH * (half / V), RP_THREADS);
	const size_t shmem = (size_t)HS * sizeof(float); /* cos and sin, HS/2 each */
	if (shmem > 48 * 1024)
		return cudaErrorInvalidValue; /* HS > 12288: beyond the default shared memory */
#define ROPE_CASE(VV)                                                                              \
	case VV:                                                                                   \
		if (dir > 0)                                                                       \
			rope_kernel<VV, 1><<<grid, threads, shmem, s>>>(out, inp, pos, B, T, NH, HS, rf);  \
		else                                                                                    \
			rope_kernel<VV, -1><<<grid, threads, shmem, s>>>(out, inp, pos, B, T, NH, HS, rf); \
		break
	switch (V) {
		ROPE_CASE(8);
		ROPE_CASE(4);
		ROPE_CASE(2);
		ROPE_CASE(1);
	default:
		return cudaErrorInvalidValue;
	}
#undef ROPE_CASE
	return cudaGetLastError();
}

cudaError_t ferry_cuda_rope_forward(cudaStream_t s, bf16 *out, const bf16 *inp, const int32_t *pos, int B, int T,
				    int C, int NH, struct ferry_rope_freq rf)
{
	return rope_launch(s, out, inp, pos, B, T, C, NH, rf, 1);
}

cudaError_t ferry_cuda_rope_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const int32_t *pos, int B,
				     int T, int C, int NH, struct ferry_rope_freq rf)
{
	return rope_launch(s, dinp, dout, pos, B, T, C, NH, rf, -1);
}

cudaError_t ferry_cuda_swiglu_forward(cudaStream_t s, bf16 *out, const bf16 *gate, const bf16 *up, long n)
{
	if (n <= 0)
		return cudaSuccess;
	/* n itself need not divide by V: the tail is scalar */
	const int V = pick_vec(8, out, gate, up, NULL, NULL);
	switch (V) {
	case 8:
		swiglu_forward_kernel<8><<<ew_grid(n, 8), EW_THREADS, 0, s>>>(out, gate, up, n);
		break;
	case 4:
		swiglu_forward_kernel<4><<<ew_grid(n, 4), EW_THREADS, 0, s>>>(out, gate, up, n);
		break;
	case 2:
		swiglu_forward_kernel<2><<<ew_grid(n, 2), EW_THREADS, 0, s>>>(out, gate, up, n);
		break;
	default:
		swiglu_forward_kernel<1><<<ew_grid(n, 1), EW_THREADS, 0, s>>>(out, gate, up, n);
		break;
	}
	return cudaGetLastError();
}

cudaError_t ferry_cuda_swiglu_backward(cudaStream_t s, bf16 *dgate, bf16 *dup, const bf16 *dout,
				       const bf16 *gate, const bf16 *up, long n)
{
	if (n <= 0 || (!dgate && !dup))
		return cudaSuccess;
	const int V = pick_vec(8, dgate, dup, dout, gate, dgate ? up : NULL);
	switch (V) {
	case 8:
		swiglu_backward_kernel<8><<<ew_grid(n, 8), EW_THREADS, 0, s>>>(dgate, dup, dout, gate, up, n);
		break;
	case 4:
		swiglu_backward_kernel<4><<<ew_grid(n, 4), EW_THREADS, 0, s>>>(dgate, dup, dout, gate, up, n);
		break;
	case 2:
		swiglu_backward_kernel<2><<<ew_grid(n, 2), EW_THREADS, 0, s>>>(dgate, dup, dout, gate, up, n);
		break;
	default:
		swiglu_backward_kernel<1><<<ew_grid(n, 1), EW_THREADS, 0, s>>>(dgate, dup, dout, gate, up, n);
		break;
	}
	return cudaGetLastError();
}

} /* extern "C" */
