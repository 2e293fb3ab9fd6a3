/*
 * Matrix products of the CUDA backend through cuBLAS, with the row-major
 * semantics of the CPU's matmul_forward / matmul_backward
 * (src/ops/cpu/kernels.h), weights stored [OC, C]:
 *
 *   forward:  out[N, OC]     = inp[N, C] @ weight[OC, C]^T + bias[OC]
 *   backward: dinp[N, C]     += dout[N, OC] @ weight[OC, C]
 *             dweight[OC, C] += dout[N, OC]^T @ inp[N, C]
 *             dbias[OC]      += column sums of dout
 *
 * Activations, weights, bias and dinp are bf16 (passed as void pointers so
 * that this header stays plain C); dweight and dbias are fp32.  fp32
 * accumulation throughout.  bias, dinp, dweight, dbias may be NULL.
 * Calls are enqueued on stream s and do not synchronise; one handle must be
 * used from one host thread at a time.  Functions returning int give 0, or
 * -1 with a message in err (err_len bytes) naming the failed call and the
 * cuBLAS status or CUDA error.
 */
#ifndef FERRY_BACKEND_CUDA_MATMUL_H
#define FERRY_BACKEND_CUDA_MATMUL_H

#include <stddef.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_cuda_blas; /* a cuBLAS handle */

/* Needs the current CUDA device to be set. */
int ferry_cuda_blas_create(struct ferry_cuda_blas **out, char *err, size_t err_len);
void ferry_cuda_blas_free(struct ferry_cuda_blas *b);

/* out, inp, weight, bias: bf16.  out must not overlap inp or weight. */
int ferry_cuda_matmul_forward(struct ferry_cuda_blas *b, cudaStream_t s, void *out, const void *inp,
			      const void *weight, const void *bias, int N, int C, int OC, char *err,
			      size_t err_len);

/* dinp, dout, inp, weight: bf16; dweight, dbias: fp32.  Accumulates (+=). */
int ferry_cuda_matmul_backward(struct ferry_cuda_blas *b, cudaStream_t s, void *dinp, float *dweight,
			       float *dbias, const void *dout, const void *inp, const void *weight, int N,
			       int C, int OC, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
