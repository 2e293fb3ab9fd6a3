/*
 * Elementwise, embedding, optimizer and reduction kernels of the CUDA
 * backend (the "kernels_elementwise.cu" section of kernels.cuh).
 *
 * Conventions: bf16 values are widened to float with __bfloat162float and
 * narrowed with __float2bfloat16 (round to nearest even); all arithmetic is
 * fp32 (reductions: fp64).  Pointers may be slices of a buffer with only
 * 2-byte alignment: the GELU and residual kernels take 8 values (16 bytes)
 * a thread where every pointer is 16-byte aligned and the count a multiple
 * of 8, one value a thread elsewhere, with the same arithmetic per value,
 * so the same bits either way.  Pointers that the
 * CPU reference allows to alias (gelu out/inp, dinp/dout; residual out/a/b,
 * da/db; geglu out/gate/up; scale and softcap dinp/dout, softcap dinp/inp)
 * are not __restrict__; every element is read before it is written by the
 * same thread, so in-place use is safe.
 *
 * Launch shape: 256 threads per block, grid-stride loops over long indices,
 * at most 65535 blocks.  Sizes <= 0 launch nothing and return cudaSuccess.
 *
 * Determinism: everything here gives the same bits run to run.
 * encoder_backward's dwte has one block per token, which adds that token's
 * rows in row order, as the CPU does (the atomics that bucket the rows only
 * draw places that are then sorted back).  The sums use a fixed number of blocks
 * and a fixed combination tree, independent of the GPU, and
 * bias_backward a fixed per-column tree.
 */
#include "backend/cuda/tanh_forms.cuh"
#include "backend/cuda/kernels.cuh"

#include <math.h>
#include <stdint.h>

#define THREADS 256
#define MAX_BLOCKS 65535L

/* Reductions: pass 1 uses exactly SUM_BLOCKS blocks of SUM_THREADS. */
#define SUM_BLOCKS 256
#define SUM_THREADS 256

/* bias_backward: BB_COLS columns x BB_ROWS row groups per block. */
#define BB_COLS 32
#define BB_ROWS 16

static unsigned grid_for(long n)
{
	long g = (n + THREADS - 1) / THREADS;

	if (g > MAX_BLOCKS)
		g = MAX_BLOCKS;
	if (g < 1)
		g = 1;
	return (unsigned)g;
}

/* One block per row (grid-stride over rows), threads over the row. */
static unsigned rows_grid(long rows)
{
	return (unsigned)(rows > MAX_BLOCKS ? MAX_BLOCKS : (rows < 1 ? 1 : rows));
}

#define GRID_STRIDE(i, n)                                                              \
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
	     i += (long)gridDim.x * blockDim.x)

static __device__ __forceinline__ float f32(bf16 x)
{
	return __bfloat162float(x);
}

static __device__ __forceinline__ bf16 b16(float x)
{
	return __float2bfloat16(x); /* round to nearest even */
}

/* W values, loaded and stored in one access of 2 * W bytes. */
template <int W> struct alignas(2 * W) bf16s {
	bf16 v[W];
};

template <int W> static __device__ __forceinline__ bf16s<W> load(const bf16 *p)
{
	return *(const bf16s<W> *)p;
}

template <int W> static __device__ __forceinline__ void store(bf16 *p, const bf16s<W> &x)
{
	*(bf16s<W> *)p = x;
}

/* Whether 8 values a thread fit: n a multiple of 8, every pointer (NULL
 * too) 16-byte aligned. */
static bool by_eight(long n, const void *a, const void *b, const void *c = NULL, const void *d = NULL)
{
	return n % 8 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15u) == 0;
}

/* ---- encoder --------------------------------------------------------------- */

/* out[row, c] = wte[tokens[row], c] + wpe[p, c], p = row % T or pos[row]
 * (packed documents); one block per row.  wpe may be NULL (models with
 * rotary positions): out is the embedding row. */
static __global__ void encoder_forward_kernel(bf16 *out, const int32_t *tokens, const int32_t *pos,
					      const bf16 *wte, const bf16 *wpe, long N, int T, int C)
{
	for (long row = blockIdx.x; row < N; row += gridDim.x) {
		const bf16 *e = wte + (long)tokens[row] * C;
		bf16 *o = out + row * (long)C;

		if (!wpe) {
			for (int c = threadIdx.x; c < C; c += blockDim.x)
				o[c] = e[c];
			continue;
		}
		const bf16 *p = wpe + (pos ? (long)pos[row] : row % T) * (long)C;

		for (int c = threadIdx.x; c < C; c += blockDim.x)
			o[c] = b16(f32(e[c]) + f32(p[c]));
	}
}

/* dwpe[t] += the rows at position t, batch by batch (the CPU's order):
 * one thread per (t, c), which owns its element. */
static __global__ void encoder_backward_kernel(float *dwpe, const bf16 *dout, int B, int T, int C)
{
	const long TC = (long)T * C;

	GRID_STRIDE(i, TC) {
		const long t = i / C;
		const long c = i - t * C;
		float acc = dwpe[i];

		for (int b = 0; b < B; b++)
			acc += f32(dout[((long)b * T + t) * C + c]);
		dwpe[i] = acc; /* i == t * C + c */
	}
}

/* The embedding gradient without atomics on dwte, in linear time: a
 * counting sort buckets the rows by token (counts, their prefix sums, each
 * row into its token's bucket at an atomically drawn place), each bucket is
 * put back in row order (a row's place is the number of smaller rows in its
 * bucket), and one block per token adds its rows in that order, as the CPU
 * does.  Scratch: count[V] and fill[V] (zeroed), offset[V + 1], bucket[N]
 * and sorted[N], all int. */
static __global__ void count_tokens_kernel(int *count, const int32_t *tokens, long N, int V)
{
	GRID_STRIDE(i, N) {
		const int32_t tok = tokens[i];

		if (tok >= 0 && tok < V)
			atomicAdd(&count[tok], 1);
	}
}

/* offset[v] = count[0] + ... + count[v - 1], v <= V: one block, each thread
 * a contiguous run of tokens, the runs' totals scanned in shared memory. */
#define SCAN_THREADS 1024
static __global__ void __launch_bounds__(SCAN_THREADS) token_offsets_kernel(int *offset, const int *count, int V)
{
	__shared__ int run_total[SCAN_THREADS];
	const int per = (V + SCAN_THREADS - 1) / SCAN_THREADS;
	const int lo = threadIdx.x * per, hi = min(lo + per, V);
	int sum = 0;

	for (int v = lo; v < hi; v++)
		sum += count[v];
	run_total[threadIdx.x] = sum;
	__syncthreads();
	for (int step = 1; step < SCAN_THREADS; step *= 2) { /* inclusive scan of the runs */
		const int add = threadIdx.x >= step ? run_total[threadIdx.x - step] : 0;

		__syncthreads();
		run_total[threadIdx.x] += add;
		__syncthreads();
	}
	sum = run_total[threadIdx.x] - sum; /* tokens before this run */
	for (int v = lo; v < hi; v++) {
		offset[v] = sum;
		sum += count[v];
	}
	if (threadIdx.x == SCAN_THREADS - 1)
		offset[V] = run_total[SCAN_THREADS - 1];
}

static __global__ void bucket_rows_kernel(int *bucket, int *fill, const int *offset, const int32_t *tokens, long N,
					  int V)
{
	GRID_STRIDE(i, N) {
		const int32_t tok = tokens[i];

		if (tok >= 0 && tok < V)
			bucket[offset[tok] + atomicAdd(&fill[tok], 1)] = (int)i;
	}
}

/* dwte[tok] += its rows of dout in row order: block per token. */
static __global__ void __launch_bounds__(THREADS)
	embedding_backward_kernel(float *dwte, const bf16 *dout, const int *offset, const int *bucket, int *sorted,
				  int V, int C)
{
	for (int tok = blockIdx.x; tok < V; tok += gridDim.x) {
		const int first = offset[tok], k = offset[tok + 1] - first;
		const int *rows = bucket + first;

		if (k == 0)
			continue;
		if (k > 1) { /* k is the block's own: every thread takes this branch */
			for (int i = threadIdx.x; i < k; i += THREADS) {
				const int r = rows[i];
				int place = 0;

				for (int j = 0; j < k; j++)
					place += rows[j] < r;
				sorted[first + place] = r;
			}
			__syncthreads(); /* the block's writes to sorted[] are seen by all its threads */
			rows = sorted + first;
		}
		float *g = dwte + (long)tok * C;
		for (int c = threadIdx.x; c < C; c += THREADS) {
			float acc = g[c];

			for (int i = 0; i < k; i++)
				acc += f32(dout[(long)rows[i] * C + c]);
			g[c] = acc;
		}
	}
}

extern "C" size_t ferry_cuda_embedding_backward_ws_bytes(long N, int V)
{
	return sizeof(int) * (3 * (size_t)V + 1 + 2 * (size_t)N);
}

extern "C" cudaError_t ferry_cuda_encoder_forward(cudaStream_t s, bf16 *out, const int32_t *tokens,
						  const int32_t *pos, const bf16 *wte, const bf16 *wpe, int B, int T,
						  int C)
{
	const long N = (long)B * T;

	if (B <= 0 || T <= 0 || C <= 0)
		return cudaSuccess;
	encoder_forward_kernel<<<rows_grid(N), THREADS, 0, s>>>(out, tokens, pos, wte, wpe, N, T, C);
	return cudaGetLastError();
}

/* dtab[ids[row]] += dout[row] for the N rows, each table row's in row
 * order (the counting sort above), ids below V; ws as
 * ferry_cuda_embedding_backward_ws_bytes(N, V). */
static cudaError_t scatter_rows(cudaStream_t s, float *dtab, const bf16 *dout, const int32_t *ids, long N, int V,
				int C, void *ws)
{
	int *count = (int *)ws, *fill = count + V, *offset = fill + V, *bucket = offset + V + 1, *sorted = bucket + N;
	cudaError_t e = cudaMemsetAsync(count, 0, sizeof(int) * 2 * (size_t)V, s);

	if (e != cudaSuccess)
		return e;
	count_tokens_kernel<<<grid_for(N), THREADS, 0, s>>>(count, ids, N, V);
	token_offsets_kernel<<<1, SCAN_THREADS, 0, s>>>(offset, count, V);
	bucket_rows_kernel<<<grid_for(N), THREADS, 0, s>>>(bucket, fill, offset, ids, N, V);
	embedding_backward_kernel<<<(unsigned)(V > MAX_BLOCKS ? MAX_BLOCKS : V), THREADS, 0, s>>>(
		dtab, dout, offset, bucket, sorted, V, C);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const bf16 *dout,
						   const int32_t *tokens, const int32_t *pos, int B, int T, int C,
						   int V, void *ws, size_t ws_bytes)
{
	const long N = (long)B * T;
	cudaError_t e = cudaSuccess;

	if (B <= 0 || T <= 0 || C <= 0 || (!dwte && !dwpe))
		return cudaSuccess;
	if (dwpe && !pos)
		encoder_backward_kernel<<<grid_for((long)T * C), THREADS, 0, s>>>(dwpe, dout, B, T, C);
	if (!dwte && !(dwpe && pos))
		return cudaGetLastError();
	/* the table of positions has T rows: packed documents scatter into it as tokens do */
	if (N > 0x7fffffffL || V <= 0 || ws_bytes < ferry_cuda_embedding_backward_ws_bytes(N, V > T ? V : T))
		return cudaErrorInvalidValue;
	if (dwte)
		e = scatter_rows(s, dwte, dout, tokens, N, V, C, ws);
	if (e == cudaSuccess && dwpe && pos) /* after dwte's on the stream: the same scratch */
		e = scatter_rows(s, dwpe, dout, pos, N, T, C, ws);
	return e;
}

/* ---- GELU (tanh form) -------------------------------------------------------- */

/* W values a thread (W = 1 or 8: by_eight); n counts groups of W. */
template <int W> static __global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, long n)
{
	GRID_STRIDE(i, n) {
		const bf16s<W> x = load<W>(inp + i * W);
		bf16s<W> y;

		for (int k = 0; k < W; k++)
			y.v[k] = b16(gelu_value(f32(x.v[k])));
		store<W>(out + i * W, y);
	}
}

/* dinp += dout * d gelu / dx, or with assign dinp = ... (dinp may alias
 * dout: the in-place backward the planner chooses; each thread reads its
 * values before it writes them) */
template <int W>
static __global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, long n, bool assign)
{
	GRID_STRIDE(i, n) {
		const bf16s<W> x = load<W>(inp + i * W), g = load<W>(dout + i * W);
		bf16s<W> acc;

		if (!assign)
			acc = load<W>(dinp + i * W);
		for (int k = 0; k < W; k++) {
			float d;

			(void)gelu_value_slope(f32(x.v[k]), &d);
			acc.v[k] = b16((assign ? 0.0f : f32(acc.v[k])) + f32(g.v[k]) * d);
		}
		store<W>(dinp + i * W, acc);
	}
}

extern "C" cudaError_t ferry_cuda_gelu_forward(cudaStream_t s, bf16 *out, const bf16 *inp, long n)
{
	if (n <= 0)
		return cudaSuccess;
	if (by_eight(n, out, inp))
		gelu_forward_kernel<8><<<grid_for(n / 8), THREADS, 0, s>>>(out, inp, n / 8);
	else
		gelu_forward_kernel<1><<<grid_for(n), THREADS, 0, s>>>(out, inp, n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_gelu_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const bf16 *inp,
						long n, bool assign)
{
	if (n <= 0 || !dinp)
		return cudaSuccess;
	if (by_eight(n, dinp, dout, inp))
		gelu_backward_kernel<8><<<grid_for(n / 8), THREADS, 0, s>>>(dinp, dout, inp, n / 8, assign);
	else
		gelu_backward_kernel<1><<<grid_for(n), THREADS, 0, s>>>(dinp, dout, inp, n, assign);
	return cudaGetLastError();
}

/* ---- residual ------------------------------------------------------------------ */

template <int W> static __global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, long n)
{
	GRID_STRIDE(i, n) {
		const bf16s<W> x = load<W>(a + i * W), y = load<W>(b + i * W);
		bf16s<W> z;

		for (int k = 0; k < W; k++)
			z.v[k] = b16(f32(x.v[k]) + f32(y.v[k]));
		store<W>(out + i * W, z);
	}
}

/* x += scale_x * dout; y += dout when y != NULL.  x != y (the launcher folds
 * da == db into one pointer with scale 2, so it is rounded once). */
template <int W>
static __global__ void residual_backward_kernel(bf16 *x, float scale_x, bf16 *y, const bf16 *dout, long n)
{
	GRID_STRIDE(i, n) {
		const bf16s<W> d = load<W>(dout + i * W);
		bf16s<W> u = load<W>(x + i * W);

		for (int k = 0; k < W; k++)
			u.v[k] = b16(f32(u.v[k]) + scale_x * f32(d.v[k]));
		store<W>(x + i * W, u);
		if (y) {
			u = load<W>(y + i * W);
			for (int k = 0; k < W; k++)
				u.v[k] = b16(f32(u.v[k]) + f32(d.v[k]));
			store<W>(y + i * W, u);
		}
	}
}

extern "C" cudaError_t ferry_cuda_residual_forward(cudaStream_t s, bf16 *out, const bf16 *a, const bf16 *b, long n)
{
	if (n <= 0)
		return cudaSuccess;
	if (by_eight(n, out, a, b))
		residual_forward_kernel<8><<<grid_for(n / 8), THREADS, 0, s>>>(out, a, b, n / 8);
	else
		residual_forward_kernel<1><<<grid_for(n), THREADS, 0, s>>>(out, a, b, n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_residual_backward(cudaStream_t s, bf16 *da, bf16 *db, const bf16 *dout, long n)
{
	bf16 *x = da, *y = db;
	float scale = 1.0f;

	if (n <= 0)
		return cudaSuccess;
	if (x && x == y) { /* da == db: receives dout twice */
		y = NULL;
		scale = 2.0f;
	}
	if (!x) {
		x = y;
		y = NULL;
	}
	if (!x)
		return cudaSuccess;
	if (by_eight(n, x, y, dout))
		residual_backward_kernel<8><<<grid_for(n / 8), THREADS, 0, s>>>(x, scale, y, dout, n / 8);
	else
		residual_backward_kernel<1><<<grid_for(n), THREADS, 0, s>>>(x, scale, y, dout, n);
	return cudaGetLastError();
}

/* ---- Gemma 2: GeGLU, scale, soft cap ---------------------------------------------- */

/* out = gelu(gate) * up (out may alias gate or up) */
static __global__ void geglu_forward_kernel(bf16 *out, const bf16 *gate, const bf16 *up, long n)
{
	GRID_STRIDE(i, n)
		out[i] = b16(gelu_value(f32(gate[i])) * f32(up[i]));
}

/* dgate += dout * up * gelu'(gate), dup += dout * gelu(gate); either may
 * be NULL (the launcher skips both NULL).  All reads come first. */
static __global__ void geglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dout, const bf16 *gate,
					     const bf16 *up, long n)
{
	GRID_STRIDE(i, n) {
		const float d = f32(dout[i]), u = f32(up[i]);
		float slope;
		const float g = gelu_value_slope(f32(gate[i]), &slope);

		if (dgate)
			dgate[i] = b16(f32(dgate[i]) + d * u * slope);
		if (dup)
			dup[i] = b16(f32(dup[i]) + d * g);
	}
}

/* out = inp * scale (scale already the bf16 value) */
static __global__ void scale_forward_kernel(bf16 *out, const bf16 *inp, float scale, long n)
{
	GRID_STRIDE(i, n)
		out[i] = b16(f32(inp[i]) * scale);
}

/* dinp += dout * scale, or with assign dinp = ... (dinp may alias dout) */
static __global__ void scale_backward_kernel(bf16 *dinp, const bf16 *dout, float scale, long n, bool assign)
{
	GRID_STRIDE(i, n) {
		const float d = f32(dout[i]) * scale;

		dinp[i] = b16(assign ? d : f32(dinp[i]) + d);
	}
}

/* out = cap tanh(inp / cap), or inp when cap <= 0 (out may alias inp) */
static __global__ void softcap_forward_kernel(bf16 *out, const bf16 *inp, float cap, long n)
{
	GRID_STRIDE(i, n) {
		const float x = f32(inp[i]);

		out[i] = b16(cap > 0.0f ? softcap_tanh(x, cap) * cap : x);
	}
}

/* dinp += dout (1 - tanh^2(inp / cap)), or with assign dinp = ...; dinp may
 * alias dout or inp (both read before the write). */
static __global__ void softcap_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, float cap,
					       long n, bool assign)
{
	GRID_STRIDE(i, n) {
		const float th = cap > 0.0f ? softcap_tanh(f32(inp[i]), cap) : 0.0f;
		const float d = f32(dout[i]) * (1.0f - th * th);

		dinp[i] = b16(assign ? d : f32(dinp[i]) + d);
	}
}

extern "C" cudaError_t ferry_cuda_geglu_forward(cudaStream_t s, bf16 *out, const bf16 *gate, const bf16 *up, long n)
{
	if (n <= 0)
		return cudaSuccess;
	geglu_forward_kernel<<<grid_for(n), THREADS, 0, s>>>(out, gate, up, n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_geglu_backward(cudaStream_t s, bf16 *dgate, bf16 *dup, const bf16 *dout,
						 const bf16 *gate, const bf16 *up, long n)
{
	if (n <= 0 || (!dgate && !dup))
		return cudaSuccess;
	geglu_backward_kernel<<<grid_for(n), THREADS, 0, s>>>(dgate, dup, dout, gate, up, n);
	return cudaGetLastError();
}

/* The scale in the activation type, as transformers casts Gemma's
 * normalizer to the model's dtype (the CPU's fp32 is its own). */
static float scale_in_bf16(float scale)
{
	return __bfloat162float(__float2bfloat16(scale));
}

extern "C" cudaError_t ferry_cuda_scale_forward(cudaStream_t s, bf16 *out, const bf16 *inp, float scale, long n)
{
	if (n <= 0)
		return cudaSuccess;
	scale_forward_kernel<<<grid_for(n), THREADS, 0, s>>>(out, inp, scale_in_bf16(scale), n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_scale_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, float scale, long n,
						 bool assign)
{
	if (n <= 0 || !dinp)
		return cudaSuccess;
	scale_backward_kernel<<<grid_for(n), THREADS, 0, s>>>(dinp, dout, scale_in_bf16(scale), n, assign);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_softcap_forward(cudaStream_t s, bf16 *out, const bf16 *inp, float cap, long n)
{
	if (n <= 0)
		return cudaSuccess;
	softcap_forward_kernel<<<grid_for(n), THREADS, 0, s>>>(out, inp, cap, n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_softcap_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const bf16 *inp,
						   float cap, long n, bool assign)
{
	if (n <= 0 || !dinp)
		return cudaSuccess;
	softcap_backward_kernel<<<grid_for(n), THREADS, 0, s>>>(dinp, dout, inp, cap, n, assign);
	return cudaGetLastError();
}

/* ---- cast, fill ---------------------------------------------------------------- */

static __global__ void cast_kernel(bf16 *out, const float *in, long n)
{
	GRID_STRIDE(i, n)
		out[i] = b16(in[i]);
}

static __global__ void fill_kernel(bf16 *out, bf16 value, long n)
{
	GRID_STRIDE(i, n)
		out[i] = value;
}

extern "C" cudaError_t ferry_cuda_cast(cudaStream_t s, bf16 *out, const float *in, long n)
{
	if (n <= 0)
		return cudaSuccess;
	cast_kernel<<<grid_for(n), THREADS, 0, s>>>(out, in, n);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_fill(cudaStream_t s, bf16 *out, float value, long n)
{
	if (n <= 0)
		return cudaSuccess;
	fill_kernel<<<grid_for(n), THREADS, 0, s>>>(out, __float2bfloat16(value), n);
	return cudaGetLastError();
}

/* ---- optimizers ---------------------------------------------------------------- */

/* As the CPU AdamW (src/optim/cpu_adamw.c).  Division and square root use the
 * IEEE round-to-nearest intrinsics so that --use_fast_math does not turn
 * them into approximations. */
static __global__ void adamw_kernel(float *param, bf16 *param_copy, float *m, float *v, const float *grad,
				    long n, float lr, float beta1, float beta2, float eps, float wd,
				    float grad_scale, float inv_bc1, float inv_bc2)
{
	GRID_STRIDE(i, n) {
		const float g = grad[i] * grad_scale;
		const float mi = beta1 * m[i] + (1.0f - beta1) * g;
		const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
		const float upd = __fdiv_rn(mi * inv_bc1, __fsqrt_rn(vi * inv_bc2) + eps);
		float p = param[i];

		m[i] = mi;
		v[i] = vi;
		p -= lr * (upd + wd * p);
		param[i] = p;
		if (param_copy)
			param_copy[i] = b16(p);
	}
}

static __global__ void sgd_kernel(float *param, bf16 *param_copy, const float *grad, float lr, long n)
{
	GRID_STRIDE(i, n) {
		const float p = param[i] - lr * grad[i];

		param[i] = p;
		if (param_copy)
			param_copy[i] = b16(p);
	}
}

extern "C" cudaError_t ferry_cuda_adamw(cudaStream_t s, float *param, bf16 *param_copy, float *m, float *v,
					const float *grad, long n, float lr, float beta1, float beta2, float eps,
					float weight_decay, float grad_scale, int t)
{
	if (n <= 0)
		return cudaSuccess;
	if (t < 1)
		return cudaErrorInvalidValue; /* bias correction 1 - beta^0 = 0 */
	/* Bias corrections exactly as the CPU: in double, then to float. */
	const float inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
	const float inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, t)));

	adamw_kernel<<<grid_for(n), THREADS, 0, s>>>(param, param_copy, m, v, grad, n, lr, beta1, beta2, eps,
						     weight_decay, grad_scale, inv_bc1, inv_bc2);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_sgd(cudaStream_t s, float *param, bf16 *param_copy, const float *grad, float lr,
				      long n)
{
	if (n <= 0)
		return cudaSuccess;
	sgd_kernel<<<grid_for(n), THREADS, 0, s>>>(param, param_copy, grad, lr, n);
	return cudaGetLastError();
}

/* ---- deterministic sums ---------------------------------------------------------- */

static __device__ __forceinline__ double to_double(float x)
{
	return (double)x;
}

static __device__ __forceinline__ double to_double(bf16 x)
{
	return (double)__bfloat162float(x);
}

/* ws[blockIdx.x] = the sum of every thread's acc, by a fixed shared-memory
 * tree in double (the same order on any GPU). */
static __device__ void block_total(double *ws, double acc)
{
	__shared__ double sh[SUM_THREADS];

	sh[threadIdx.x] = acc;
	__syncthreads();
	for (int stride = SUM_THREADS / 2; stride > 0; stride >>= 1) {
		if (threadIdx.x < stride)
			sh[threadIdx.x] += sh[threadIdx.x + stride];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		ws[blockIdx.x] = sh[0];
}

/* Pass 1: block b (of exactly SUM_BLOCKS, SUM_THREADS threads each) sums
 * x[b*per, min((b+1)*per, n)): thread j takes elements j, j + SUM_THREADS,
 * ... of that range, then a fixed shared-memory tree in double; ws[b] gets
 * the block's total.  The result depends only on n, not on the GPU.  Only
 * blocks starting in [from, to) are summed, the others' totals 0, and x
 * holds elements from on (a rank's slice: from 0 to n for a whole array). */
template <typename T, bool SQUARES>
static __global__ void __launch_bounds__(SUM_THREADS)
	block_sums_kernel(double *ws, const T *x, long n, long per, long from, long to)
{
	const long lo = (long)blockIdx.x * per;
	const long hi = lo + per < n ? lo + per : n;
	double acc = 0.0;

	for (long i = lo + threadIdx.x; lo >= from && lo < to && i < hi; i += SUM_THREADS) {
		const double d = to_double(x[i - from]);

		acc += SQUARES ? d * d : d;
	}
	block_total(ws, acc);
}

/* Pass 2: one thread adds the block sums in order (as the CPU does). */
static __global__ void finish_sum_kernel(double *result, const double *ws)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		double total = 0.0;

		for (int b = 0; b < SUM_BLOCKS; b++)
			total += ws[b];
		*result += total;
	}
}

template <typename T, bool SQUARES>
static cudaError_t blocked_sum(cudaStream_t s, double *result, const T *x, long n, void *ws, size_t ws_bytes)
{
	if (n <= 0)
		return cudaSuccess;
	if (!result || !ws || ws_bytes < SUM_BLOCKS * sizeof(double) ||
	    (uintptr_t)ws % alignof(double) != 0)
		return cudaErrorInvalidValue;

	double *part = (double *)ws;
	const long per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
	cudaError_t e;

	block_sums_kernel<T, SQUARES><<<SUM_BLOCKS, SUM_THREADS, 0, s>>>(part, x, n, per, 0, n);
	e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	finish_sum_kernel<<<1, 1, 0, s>>>(result, part);
	return cudaGetLastError();
}

extern "C" size_t ferry_cuda_sum_ws_bytes(void)
{
	return SUM_BLOCKS * sizeof(double);
}

extern "C" cudaError_t ferry_cuda_sum_squares(cudaStream_t s, double *result, const float *x, long n, void *ws,
					      size_t ws_bytes)
{
	return blocked_sum<float, true>(s, result, x, n, ws, ws_bytes);
}

extern "C" cudaError_t ferry_cuda_sum_squares_parts(cudaStream_t s, double *parts, const float *x, long n, long lo,
						    long hi)
{
	const long per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;

	if (n <= 0 || lo < 0 || hi < lo || !parts || (uintptr_t)parts % alignof(double) != 0)
		return cudaErrorInvalidValue;
	block_sums_kernel<float, true><<<SUM_BLOCKS, SUM_THREADS, 0, s>>>(parts, x, n, per, lo, hi);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_sum(cudaStream_t s, double *result, const bf16 *x, long n, void *ws,
				      size_t ws_bytes)
{
	return blocked_sum<bf16, false>(s, result, x, n, ws, ws_bytes);
}

/* Pass 1 of ferry_cuda_squared_error: block_sums_kernel's blocks and
 * order over e^2, writing dpred on the way. */
static __global__ void __launch_bounds__(SUM_THREADS)
	squared_error_kernel(double *ws, bf16 *dpred, const bf16 *pred, const float *target, float scale, long n,
			     long per)
{
	const long lo = (long)blockIdx.x * per;
	const long hi = lo + per < n ? lo + per : n;
	double acc = 0.0;

	for (long i = lo + threadIdx.x; i < hi; i += SUM_THREADS) {
		const float e = __bfloat162float(pred[i]) - target[i];

		acc += (double)e * e;
		dpred[i] = __float2bfloat16(scale * e);
	}
	block_total(ws, acc);
}

extern "C" cudaError_t ferry_cuda_squared_error(cudaStream_t s, double *result, bf16 *dpred, const bf16 *pred,
						const float *target, float scale, long n, void *ws, size_t ws_bytes)
{
	if (n <= 0)
		return cudaSuccess;
	if (!result || !ws || ws_bytes < SUM_BLOCKS * sizeof(double) || (uintptr_t)ws % alignof(double) != 0)
		return cudaErrorInvalidValue;

	const long per = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
	cudaError_t e;

	squared_error_kernel<<<SUM_BLOCKS, SUM_THREADS, 0, s>>>((double *)ws, dpred, pred, target, scale, n, per);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	finish_sum_kernel<<<1, 1, 0, s>>>(result, (const double *)ws);
	return cudaGetLastError();
}

/* ---- bias ------------------------------------------------------------------------ */

/* Block (BB_COLS x BB_ROWS threads) owns columns [blockIdx.x * BB_COLS, +BB_COLS).
 * Thread (tx, ty) sums rows ty, ty + BB_ROWS, ... of column oc in order
 * (fp32; a warp reads BB_COLS consecutive columns of one row), then a fixed
 * tree over ty; dbias[oc] += the total.  Deterministic; no atomics. */
static __global__ void __launch_bounds__(BB_COLS *BB_ROWS)
	bias_backward_kernel(float *dbias, const bf16 *dout, int N, int OC)
{
	__shared__ float sh[BB_ROWS][BB_COLS + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const long oc = (long)blockIdx.x * BB_COLS + tx;
	float acc = 0.0f;

	if (oc < OC)
		for (long r = ty; r < N; r += BB_ROWS)
			acc += f32(dout[r * OC + oc]);
	sh[ty][tx] = acc;
	__syncthreads();
	for (int stride = BB_ROWS / 2; stride > 0; stride >>= 1) {
		if (ty < stride)
			sh[ty][tx] += sh[ty + stride][tx];
		__syncthreads();
	}
	if (ty == 0 && oc < OC)
		dbias[oc] += sh[0][tx];
}

/* out[row, :] += bias; one block per row. */
static __global__ void bias_add_kernel(bf16 *out, const bf16 *bias, int N, int OC)
{
	for (long row = blockIdx.x; row < N; row += gridDim.x) {
		bf16 *o = out + row * (long)OC;

		for (int c = threadIdx.x; c < OC; c += blockDim.x)
			o[c] = b16(f32(o[c]) + f32(bias[c]));
	}
}

extern "C" cudaError_t ferry_cuda_bias_backward(cudaStream_t s, float *dbias, const bf16 *dout, int N, int OC)
{
	if (!dbias || N <= 0 || OC <= 0)
		return cudaSuccess;
	const dim3 block(BB_COLS, BB_ROWS);
	const unsigned grid = (unsigned)(((long)OC + BB_COLS - 1) / BB_COLS);

	bias_backward_kernel<<<grid, block, 0, s>>>(dbias, dout, N, OC);
	return cudaGetLastError();
}

extern "C" cudaError_t ferry_cuda_bias_add(cudaStream_t s, bf16 *out, const bf16 *bias, int N, int OC)
{
	if (!bias || N <= 0 || OC <= 0)
		return cudaSuccess;
	bias_add_kernel<<<rows_grid(N), THREADS, 0, s>>>(out, bias, N, OC);
	return cudaGetLastError();
}
