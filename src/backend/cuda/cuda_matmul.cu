/*
 * Row-major matrix products on cuBLAS (see cuda_matmul.h).
 *
 * cuBLAS is column-major.  A row-major matrix X[R, S] (leading dimension S)
 * is, read column-major with ld = S, the matrix X^T [S, R].  So each
 * row-major product is computed as its transpose, column-major:
 *
 * forward, out[N, OC] = inp[N, C] @ W[OC, C]^T:
 *   column-major out^T [OC, N] (ldc = OC) = W @ inp^T.
 *   The W buffer read column-major is W^T [C, OC] (ld C), so op(A) = W is
 *   OP_T of it: A = weight, lda = C.  The inp buffer read column-major is
 *   inp^T [C, N] (ld C) = op(B) with OP_N: B = inp, ldb = C.
 *   m = OC, n = N, k = C.        gemm(OP_T, OP_N, OC, N, C, W:C, inp:C, out:OC)
 *
 * dinp[N, C] += dout[N, OC] @ W[OC, C]:
 *   column-major dinp^T [C, N] (ldc = C) = W^T @ dout^T.
 *   W^T [C, OC] is the W buffer as is (OP_N, lda = C); dout^T [OC, N] is
 *   the dout buffer as is (OP_N, ldb = OC).
 *   m = C, n = N, k = OC, beta = 1.  gemm(OP_N, OP_N, C, N, OC, W:C, dout:OC, dinp:C)
 *
 * dW[OC, C] += dout[N, OC]^T @ inp[N, C]:
 *   column-major dW^T [C, OC] (ldc = C) = inp^T @ dout.
 *   inp^T [C, N] is the inp buffer as is (OP_N, lda = C); dout [N, OC] is
 *   the transpose of the dout buffer read column-major (dout^T [OC, N],
 *   ld OC), so OP_T, ldb = OC.
 *   m = C, n = OC, k = N, beta = 1.  gemm(OP_N, OP_T, C, OC, N, inp:C, dout:OC, dW:C)
 *
 * Check of the shapes: op(A) is m x k, op(B) is k x n, C is m x n with
 * lda >= rows of A as stored (OP_T: A stored k x m), ldb likewise:
 *   forward: A stored C x OC = k x m (OP_T) lda C; B stored C x N = k x n; C OC x N.
 *   dinp:    A stored C x OC = m x k lda C; B stored OC x N = k x n ldb OC; C C x N.
 *   dweight: A stored C x N = m x k lda C; B stored OC x N = n x k (OP_T) ldb OC; C C x OC.
 *
 * All with CUBLAS_COMPUTE_32F (fp32 accumulation), A and B bf16, C bf16
 * (out, dinp) or fp32 (dweight).  The math mode forbids reduced-precision
 * reductions (split-K partial sums kept in fp32, not bf16).
 *
 * Bias: the forward seeds out with the bias broadcast over rows and runs the
 * product with beta = 1, as the CPU does, so out = bf16(bias + product) is
 * rounded once (adding the bias afterwards would round twice).
 */
#include "backend/cuda/cuda_matmul.h"
#include "backend/cuda/kernels.cuh"

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

struct ferry_cuda_blas {
	cublasHandle_t h;
};

#define THREADS 256
#define MAX_BLOCKS 65535L

static void set_err(char *err, size_t err_len, const char *what, const char *why)
{
	if (err && err_len)
		snprintf(err, err_len, "%s: %s", what, why);
}

static int blas_fail(char *err, size_t err_len, const char *what, cublasStatus_t st)
{
	set_err(err, err_len, what, cublasGetStatusString(st));
	return -1;
}

static int cuda_fail(char *err, size_t err_len, const char *what, cudaError_t e)
{
	set_err(err, err_len, what, cudaGetErrorString(e));
	return -1;
}

/* out[row, :] = bias; one block per row (grid-stride over rows). */
static __global__ void bias_seed_kernel(bf16 *out, const bf16 *bias, int N, int OC)
{
	for (long row = blockIdx.x; row < N; row += gridDim.x) {
		bf16 *o = out + row * (long)OC;

		for (int c = threadIdx.x; c < OC; c += blockDim.x)
			o[c] = bias[c];
	}
}

extern "C" int ferry_cuda_blas_create(struct ferry_cuda_blas **out, char *err, size_t err_len)
{
	struct ferry_cuda_blas *b;
	cublasStatus_t st;

	*out = NULL;
	b = (struct ferry_cuda_blas *)calloc(1, sizeof(*b));
	if (!b) {
		set_err(err, err_len, "ferry_cuda_blas_create", "out of host memory");
		return -1;
	}
	st = cublasCreate(&b->h);
	if (st != CUBLAS_STATUS_SUCCESS) {
		free(b);
		return blas_fail(err, err_len, "cublasCreate", st);
	}
	st = cublasSetMathMode(b->h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
						    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
	if (st != CUBLAS_STATUS_SUCCESS) {
		cublasDestroy(b->h);
		free(b);
		return blas_fail(err, err_len, "cublasSetMathMode", st);
	}
	*out = b;
	return 0;
}

extern "C" void ferry_cuda_blas_free(struct ferry_cuda_blas *b)
{
	if (!b)
		return;
	cublasDestroy(b->h);
	free(b);
}

static int check_dims(const struct ferry_cuda_blas *b, int N, int C, int OC, const char *what, char *err,
		      size_t err_len)
{
	if (!b) {
		set_err(err, err_len, what, "no cuBLAS handle");
		return -1;
	}
	if (N < 0 || C < 0 || OC < 0) {
		set_err(err, err_len, what, "negative dimension");
		return -1;
	}
	return 0;
}

extern "C" int ferry_cuda_matmul_forward(struct ferry_cuda_blas *b, cudaStream_t s, void *out, const void *inp,
					 const void *weight, const void *bias, int N, int C, int OC, char *err,
					 size_t err_len)
{
	const float alpha = 1.0f;
	float beta = 0.0f;
	cublasStatus_t st;

	if (check_dims(b, N, C, OC, "matmul forward", err, err_len))
		return -1;
	if (N == 0 || OC == 0)
		return 0;
	st = cublasSetStream(b->h, s);
	if (st != CUBLAS_STATUS_SUCCESS)
		return blas_fail(err, err_len, "cublasSetStream (matmul forward)", st);
	if (bias) {
		const unsigned grid = (unsigned)(N > MAX_BLOCKS ? MAX_BLOCKS : N);
		cudaError_t e;

		bias_seed_kernel<<<grid, THREADS, 0, s>>>((bf16 *)out, (const bf16 *)bias, N, OC);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return cuda_fail(err, err_len, "matmul forward bias broadcast", e);
		beta = 1.0f;
	}
	/* column-major out^T [OC, N] = W @ inp^T (see the top of the file) */
	st = cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &alpha, weight, CUDA_R_16BF, C, inp,
			  CUDA_R_16BF, C, &beta, out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS)
		return blas_fail(err, err_len, "cublasGemmEx (matmul forward)", st);
	return 0;
}

extern "C" int ferry_cuda_matmul_backward(struct ferry_cuda_blas *b, cudaStream_t s, void *dinp, float *dweight,
					  float *dbias, const void *dout, const void *inp, const void *weight, int N,
					  int C, int OC, char *err, size_t err_len)
{
	const float alpha = 1.0f, beta = 1.0f;
	cublasStatus_t st;

	if (check_dims(b, N, C, OC, "matmul backward", err, err_len))
		return -1;
	/* An empty sum adds nothing. */
	if (N == 0 || C == 0 || OC == 0)
		return 0;
	if (dinp || dweight) {
		st = cublasSetStream(b->h, s);
		if (st != CUBLAS_STATUS_SUCCESS)
			return blas_fail(err, err_len, "cublasSetStream (matmul backward)", st);
	}
	if (dinp) {
		/* column-major dinp^T [C, N] += W^T @ dout^T */
		st = cublasGemmEx(b->h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &alpha, weight, CUDA_R_16BF, C, dout,
				  CUDA_R_16BF, OC, &beta, dinp, CUDA_R_16BF, C, CUBLAS_COMPUTE_32F,
				  CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			return blas_fail(err, err_len, "cublasGemmEx (matmul backward, dinp)", st);
	}
	if (dweight) {
		/* column-major dW^T [C, OC] += inp^T @ dout */
		st = cublasGemmEx(b->h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &alpha, inp, CUDA_R_16BF, C, dout,
				  CUDA_R_16BF, OC, &beta, dweight, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
				  CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			return blas_fail(err, err_len, "cublasGemmEx (matmul backward, dweight)", st);
	}
	if (dbias) {
		cudaError_t e = ferry_cuda_bias_backward(s, dbias, (const bf16 *)dout, N, OC);

		if (e != cudaSuccess)
			return cuda_fail(err, err_len, "matmul backward bias (ferry_cuda_bias_backward)", e);
	}
	return 0;
}
