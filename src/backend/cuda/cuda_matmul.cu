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
 * Bias: out = bf16(product + bias), rounded once, as the CPU does (adding
 * the bias afterwards would round twice).  cuBLASLt adds it in the
 * product's epilogue, in fp32 before the rounding; where it has no
 * algorithm for the shape and the pointers' alignment, the forward seeds
 * out with the bias broadcast over rows and runs the product with beta = 1
 * (one more pass over out).  The epilogue's algorithms are asked for with
 * no workspace and no split-K reduction (so no partial sums in bf16, and
 * nothing outside the planned arena), and remembered per shape.
 */
#include "backend/cuda/cuda_matmul.h"
#include "backend/cuda/kernels.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A forward-with-bias shape and the cuBLASLt algorithm found for it. */
struct lt_choice {
	int N, C, OC;
	unsigned align;
	bool found;
	cublasLtMatmulAlgo_t algo;
};

#define LT_CHOICES 64

struct ferry_cuda_blas {
	cublasHandle_t h;
	cublasLtHandle_t lt; /* NULL: every bias goes the seeded way */
	struct lt_choice choice[LT_CHOICES];
	int n_choices;
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
	if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS)
		b->lt = NULL;
	*out = b;
	return 0;
}

extern "C" void ferry_cuda_blas_free(struct ferry_cuda_blas *b)
{
	if (!b)
		return;
	if (b->lt)
		cublasLtDestroy(b->lt);
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

/* The largest power of two up to 256 dividing the address. */
static unsigned align_of(const void *p)
{
	const uintptr_t a = (uintptr_t)p;
	unsigned al = 256;

	while (al > 1 && a % al)
		al >>= 1;
	return al;
}

/* The descriptors of out[N, OC] = inp[N, C] @ W^T + bias, column-major as
 * at the top of the file, and a preference for no workspace, no split-K
 * reduction and the pointers' alignment. */
struct lt_descs {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, d;
	cublasLtMatmulPreference_t pref;
};

static void lt_descs_free(struct lt_descs *x)
{
	if (x->pref)
		cublasLtMatmulPreferenceDestroy(x->pref);
	if (x->d)
		cublasLtMatrixLayoutDestroy(x->d);
	if (x->b)
		cublasLtMatrixLayoutDestroy(x->b);
	if (x->a)
		cublasLtMatrixLayoutDestroy(x->a);
	if (x->op)
		cublasLtMatmulDescDestroy(x->op);
}

static cublasStatus_t lt_descs_make(struct lt_descs *x, const void *bias, int N, int C, int OC, unsigned align)
{
	const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
	const cudaDataType_t bias_type = CUDA_R_16BF;
	const uint64_t no_workspace = 0;
	const uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE, al = align;
	const cublasLtMatmulPreferenceAttributes_t aligns[] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
	};
	cublasStatus_t st;

	*x = (struct lt_descs){};
	if ((st = cublasLtMatmulDescCreate(&x->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
	    (st = cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) ||
	    (st = cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb))) ||
	    (st = cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
						 sizeof(epilogue))) ||
	    (st = cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))) ||
	    (st = cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
						 sizeof(bias_type))) ||
	    (st = cublasLtMatrixLayoutCreate(&x->a, CUDA_R_16BF, C, OC, C)) ||
	    (st = cublasLtMatrixLayoutCreate(&x->b, CUDA_R_16BF, C, N, C)) ||
	    (st = cublasLtMatrixLayoutCreate(&x->d, CUDA_R_16BF, OC, N, OC)) ||
	    (st = cublasLtMatmulPreferenceCreate(&x->pref)) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(x->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						       &no_workspace, sizeof(no_workspace))) ||
	    (st = cublasLtMatmulPreferenceSetAttribute(x->pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
						       &no_split_k, sizeof(no_split_k))))
		return st;
	for (size_t i = 0; i < sizeof(aligns) / sizeof(*aligns); i++)
		if ((st = cublasLtMatmulPreferenceSetAttribute(x->pref, aligns[i], &al, sizeof(al))))
			return st;
	return CUBLAS_STATUS_SUCCESS;
}

/* The algorithm for the shape, asked for once; NULL when there is none. */
static const cublasLtMatmulAlgo_t *lt_algo(struct ferry_cuda_blas *b, const struct lt_descs *x, int N, int C,
					   int OC, unsigned align)
{
	cublasLtMatmulHeuristicResult_t res;
	struct lt_choice *c;
	int found = 0;

	for (int i = 0; i < b->n_choices; i++) {
		c = &b->choice[i];
		if (c->N == N && c->C == C && c->OC == OC && c->align == align)
			return c->found ? &c->algo : NULL;
	}
	if (cublasLtMatmulAlgoGetHeuristic(b->lt, x->op, x->a, x->b, x->d, x->d, x->pref, 1, &res, &found) !=
		    CUBLAS_STATUS_SUCCESS ||
	    res.state != CUBLAS_STATUS_SUCCESS)
		found = 0;
	if (b->n_choices == LT_CHOICES) /* more shapes than a model has: forget the oldest */
		b->n_choices = 0;
	c = &b->choice[b->n_choices++];
	*c = (struct lt_choice){ N, C, OC, align, found > 0, found > 0 ? res.algo : cublasLtMatmulAlgo_t{} };
	return c->found ? &c->algo : NULL;
}

/* out = inp @ W^T + bias in one cuBLASLt product; *done false (and 0)
 * when cuBLASLt has no algorithm here, for the seeded way. */
static int lt_forward_bias(struct ferry_cuda_blas *b, cudaStream_t s, void *out, const void *inp,
			   const void *weight, const void *bias, int N, int C, int OC, bool *done, char *err,
			   size_t err_len)
{
	const float alpha = 1.0f, beta = 0.0f;
	unsigned align = align_of(out);
	const cublasLtMatmulAlgo_t *algo;
	struct lt_descs x;
	cublasStatus_t st;

	*done = false;
	align = align_of(inp) < align ? align_of(inp) : align;
	align = align_of(weight) < align ? align_of(weight) : align;
	align = align_of(bias) < align ? align_of(bias) : align;
	if (!b->lt || align < 16)
		return 0;
	if ((st = lt_descs_make(&x, bias, N, C, OC, align))) {
		lt_descs_free(&x);
		return blas_fail(err, err_len, "cuBLASLt descriptors (matmul forward)", st);
	}
	algo = lt_algo(b, &x, N, C, OC, align);
	st = algo ? cublasLtMatmul(b->lt, x.op, &alpha, weight, x.a, inp, x.b, &beta, out, x.d, out, x.d, algo,
				   NULL, 0, s)
		  : CUBLAS_STATUS_SUCCESS;
	lt_descs_free(&x);
	if (st != CUBLAS_STATUS_SUCCESS)
		return blas_fail(err, err_len, "cublasLtMatmul (matmul forward, bias epilogue)", st);
	*done = algo != NULL;
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
		bool done;
		cudaError_t e;

		if (lt_forward_bias(b, s, out, inp, weight, bias, N, C, OC, &done, err, err_len))
			return -1;
		if (done)
			return 0;

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
