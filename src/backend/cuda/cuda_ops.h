/* Internal: running one op call on a CUDA stream (cuda_ops.cu). */
#ifndef FERRY_BACKEND_CUDA_OPS_H
#define FERRY_BACKEND_CUDA_OPS_H

#include <stddef.h>
#include <cuda_runtime.h>
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_cuda_ops;

/* Creates the cuBLAS handle; ws_bytes of device memory (outside the
 * planned arena) become the kernels' scratch for calls that bring none,
 * allocated on first need.  0 or -1 with err set. */
int ferry_cuda_ops_create(struct ferry_cuda_ops **out, size_t ws_bytes, char *err, size_t err_len);
void ferry_cuda_ops_free(struct ferry_cuda_ops *ops);

/* Bytes of scratch a call's kernels need (no device needed). */
size_t ferry_cuda_op_scratch(const struct ferry_op_call *c);
/* What of a call the CUDA kernels do not compute yet, or NULL. */
const char *ferry_cuda_op_unsupported(const struct ferry_op_call *c);

/* Enqueues op c on stream s.  0, or -1 with err naming the op and the
 * CUDA/cuBLAS error (launch errors included; errors while the kernel runs
 * surface at the next synchronisation). */
int ferry_cuda_run_op(struct ferry_cuda_ops *ops, cudaStream_t s, const struct ferry_op_call *c,
		      char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
