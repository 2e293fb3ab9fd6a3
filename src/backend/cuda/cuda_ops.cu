/*
 * Maps an op call onto the CUDA kernels (kernels.cuh) and cuBLAS
 * (cuda_matmul.h).  Types follow struct ferry_op_call's rules: activations
 * and weights bf16, statistics and weight gradients fp32.
 */
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_matmul.h"
#include "backend/cuda/kernels.cuh"

#include <stdio.h>
#include <stdlib.h>

/* One cuBLAS handle per backend.  Kernel scratch (layernorm backward needs
 * 512 * C bytes, rmsnorm backward 256 * C, attention backward 4 * B*NH*T,
 * the embedding's backward 4 * (3 * V + 1 + 2 * B*T), reductions a few KiB) comes with the call when a model runs it (the
 * tensor table's workspace, planned and in the arena); a call without one
 * (an op run directly, as the GPU tests do) uses the backend's own, taken
 * on first need.  Sharing either is safe because ferry's models run their
 * ops on one stream (copies use the others); a launcher needing more
 * scratch than it is given refuses. */
struct ferry_cuda_ops {
	struct ferry_cuda_blas *blas;
	void *ws;         /* the backend's own scratch, for calls without one */
	size_t ws_bytes;
};

struct scratch {
	void *p;
	size_t bytes;
};

#define BF(p) ((bf16 *)(p))
#define CBF(p) ((const bf16 *)(p))
#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))

extern "C" int ferry_cuda_ops_create(struct ferry_cuda_ops **out, size_t ws_bytes, char *err, size_t err_len)
{
	struct ferry_cuda_ops *ops = (struct ferry_cuda_ops *)calloc(1, sizeof(*ops));

	*out = NULL;
	if (!ops) {
		snprintf(err, err_len, "out of host memory");
		return -1;
	}
	if (ferry_cuda_blas_create(&ops->blas, err, err_len)) {
		free(ops);
		return -1;
	}
	ops->ws_bytes = ws_bytes; /* allocated on first need */
	*out = ops;
	return 0;
}

extern "C" void ferry_cuda_ops_free(struct ferry_cuda_ops *ops)
{
	if (!ops)
		return;
	cudaFree(ops->ws);
	ferry_cuda_blas_free(ops->blas);
	free(ops);
}

static int launched(cudaError_t e, const struct ferry_op_call *c, char *err, size_t err_len)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(err, err_len, "%s %s: %s", ferry_op_info(c->kind)->name, c->backward ? "backward" : "forward",
		 cudaGetErrorString(e));
	return -1;
}

/* The embedding's rows: the vocabulary, padded or not (tokens are below). */
static int embedding_rows(const struct ferry_op_call *c)
{
	return c->Vp > c->V ? c->Vp : c->V;
}

/* Bytes of scratch a call's kernels need. */
static size_t op_scratch_need(const struct ferry_op_call *c)
{
	int N = c->B * c->T;

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		/* dwte's buckets, then dwpe's by position (packed documents) in the same scratch */
		return c->backward ? ferry_cuda_embedding_backward_ws_bytes(N, embedding_rows(c) > c->T
										     ? embedding_rows(c)
										     : c->T)
				   : 0;
	case FERRY_OP_LAYERNORM:
		return c->backward ? ferry_cuda_layernorm_backward_ws_bytes(N, c->C) : 0;
	case FERRY_OP_ATTENTION:
		return c->backward ? ferry_cuda_attention_backward_ws_bytes(c->B, c->T, c->C, c->NH) : 0;
	case FERRY_OP_RMSNORM:
		return c->backward ? ferry_cuda_rmsnorm_backward_ws_bytes(N, c->C) : 0;
	case FERRY_OP_SUM_SQUARES:
	case FERRY_OP_SUM:
	case FERRY_OP_SQUARED_ERROR:
		return ferry_cuda_sum_ws_bytes();
	default:
		return 0;
	}
}

extern "C" size_t ferry_cuda_op_scratch(const struct ferry_op_call *c)
{
	return op_scratch_need(c);
}

/* Ops and constants the kernels here do not compute, refused when a model
 * is planned rather than failing at its first launch: none now (Mistral's
 * and Gemma 2's have kernels); an op added without a CUDA kernel names
 * itself here until it has one. */
extern "C" const char *ferry_cuda_op_unsupported(const struct ferry_op_call *c)
{
	(void)c;
	return NULL;
}

/* Attention's constants: the op's window, scale and cap. */
static struct ferry_cuda_att_consts att_consts_of(const struct ferry_op_call *c)
{
	return (struct ferry_cuda_att_consts){ (int)c->scalar[0], c->scalar[1], c->scalar[2] };
}

/* The call's scratch, or the backend's own (allocated on first need);
 * a clear error when what is there would not fit. */
static int scratch_for(struct ferry_cuda_ops *ops, const struct ferry_op_call *c, struct scratch *out, char *err,
		       size_t err_len)
{
	size_t need = op_scratch_need(c);
	cudaError_t e;

	*out = (struct scratch){ c->ws, c->ws_bytes };
	if (!need || (c->ws && c->ws_bytes >= need))
		return 1;
	if (!ops->ws && need <= ops->ws_bytes && (e = cudaMalloc(&ops->ws, ops->ws_bytes)) != cudaSuccess) {
		ops->ws = NULL;
		cudaGetLastError(); /* clear it: the next launch must not report it as its own */
		snprintf(err, err_len, "cudaMalloc of a %zu-byte kernel workspace: %s", ops->ws_bytes,
			 cudaGetErrorString(e));
		return 0;
	}
	*out = (struct scratch){ ops->ws, ops->ws_bytes };
	if (need <= out->bytes)
		return 1;
	snprintf(err, err_len, "%s %s needs %zu bytes of scratch, the workspace has %zu", ferry_op_info(c->kind)->name,
		 c->backward ? "backward" : "forward", need, c->ws ? c->ws_bytes : ops->ws_bytes);
	return 0;
}

/* The forward kernel of a model op (matmul aside: cuBLAS). */
static cudaError_t run_forward(cudaStream_t s, const struct ferry_op_call *c)
{
	int N = c->B * c->T;
	int NKV = c->NKV ? c->NKV : c->NH; /* attention's key/value heads */

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		return ferry_cuda_encoder_forward(s, BF(c->out[0]), c->tokens, c->positions, CBF(c->w[0]),
						  CBF(c->w[1]), c->B, c->T, c->C);
	case FERRY_OP_LAYERNORM:
		return ferry_cuda_layernorm_forward(s, BF(c->out[0]), F(c->out[1]), F(c->out[2]), CBF(c->in[0]),
						    CBF(c->w[0]), CBF(c->w[1]), N, c->C);
	case FERRY_OP_ATTENTION:
		return ferry_cuda_attention_forward(s, BF(c->out[0]), F(c->out[1]), CBF(c->in[0]), CBF(c->in[1]),
						    CBF(c->in[2]), c->positions, c->B, c->T, c->C, c->NH, NKV,
						    att_consts_of(c));
	case FERRY_OP_GELU:
		return ferry_cuda_gelu_forward(s, BF(c->out[0]), CBF(c->in[0]), c->n);
	case FERRY_OP_RESIDUAL:
		return ferry_cuda_residual_forward(s, BF(c->out[0]), CBF(c->in[0]), CBF(c->in[1]), c->n);
	case FERRY_OP_SOFTMAX_XENT:
		return ferry_cuda_softmax_xent_forward(s, F(c->out[0]), BF(c->out[1]), CBF(c->in[0]), c->tokens, N,
						       c->V, c->Vp);
	case FERRY_OP_RMSNORM:
		return ferry_cuda_rmsnorm_forward(s, BF(c->out[0]), F(c->out[1]), CBF(c->in[0]), CBF(c->w[0]), N,
						  c->C, c->scalar[0], c->scalar[1]);
	case FERRY_OP_ROPE:
		return ferry_cuda_rope_forward(s, BF(c->out[0]), CBF(c->in[0]), c->positions, c->B, c->T, c->C,
					       c->NH, ferry_rope_freq_of(c->scalar));
	case FERRY_OP_SWIGLU:
		return ferry_cuda_swiglu_forward(s, BF(c->out[0]), CBF(c->in[0]), CBF(c->in[1]), c->n);
	case FERRY_OP_GEGLU:
		return ferry_cuda_geglu_forward(s, BF(c->out[0]), CBF(c->in[0]), CBF(c->in[1]), c->n);
	case FERRY_OP_SCALE:
		return ferry_cuda_scale_forward(s, BF(c->out[0]), CBF(c->in[0]), c->scalar[0], c->n);
	case FERRY_OP_SOFTCAP:
		return ferry_cuda_softcap_forward(s, BF(c->out[0]), CBF(c->in[0]), c->scalar[0], c->n);
	default:
		return cudaErrorInvalidValue; /* not routed here by ferry_cuda_run_op */
	}
}

/* The backward kernel of a model op (matmul aside: cuBLAS); ws was
 * checked by scratch_for. */
static cudaError_t run_backward(struct scratch ws, cudaStream_t s, const struct ferry_op_call *c)
{
	int N = c->B * c->T;
	int NKV = c->NKV ? c->NKV : c->NH; /* attention's key/value heads */

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		return ferry_cuda_encoder_backward(s, F(c->dw[0]), F(c->dw[1]), CBF(c->dout[0]), c->tokens,
						   c->positions, c->B, c->T, c->C, embedding_rows(c), ws.p,
						   ws.bytes);
	case FERRY_OP_LAYERNORM:
		return ferry_cuda_layernorm_backward(s, BF(c->din[0]), F(c->dw[0]), F(c->dw[1]), CBF(c->dout[0]),
						     CBF(c->in[0]), CBF(c->w[0]), CF(c->out[1]), CF(c->out[2]), N,
						     c->C, ws.p, ws.bytes);
	case FERRY_OP_ATTENTION:
		return ferry_cuda_attention_backward(s, BF(c->din[0]), BF(c->din[1]), BF(c->din[2]),
						     CBF(c->dout[0]), CBF(c->in[0]), CBF(c->in[1]), CBF(c->in[2]),
						     CBF(c->out[0]), CF(c->out[1]), c->positions, c->B, c->T, c->C,
						     c->NH, NKV, att_consts_of(c), ws.p, ws.bytes);
	case FERRY_OP_GELU:
		return c->din[0] ? ferry_cuda_gelu_backward(s, BF(c->din[0]), CBF(c->dout[0]), CBF(c->in[0]), c->n,
							    c->grad_assign)
				 : cudaSuccess;
	case FERRY_OP_RESIDUAL:
		return ferry_cuda_residual_backward(s, BF(c->din[0]), BF(c->din[1]), CBF(c->dout[0]), c->n);
	case FERRY_OP_SOFTMAX_XENT:
		return ferry_cuda_softmax_xent_backward(s, BF(c->din[0]), CBF(c->out[1]), c->tokens, c->scalar[0],
							N, c->V, c->Vp);
	case FERRY_OP_RMSNORM:
		return ferry_cuda_rmsnorm_backward(s, BF(c->din[0]), F(c->dw[0]), CBF(c->dout[0]), CBF(c->in[0]),
						   CBF(c->w[0]), CF(c->out[1]), N, c->C, c->scalar[1], ws.p, ws.bytes);
	case FERRY_OP_ROPE:
		return ferry_cuda_rope_backward(s, BF(c->din[0]), CBF(c->dout[0]), c->positions, c->B, c->T, c->C,
						c->NH, ferry_rope_freq_of(c->scalar));
	case FERRY_OP_SWIGLU:
		return ferry_cuda_swiglu_backward(s, BF(c->din[0]), BF(c->din[1]), CBF(c->dout[0]), CBF(c->in[0]),
						  CBF(c->in[1]), c->n);
	case FERRY_OP_GEGLU:
		return ferry_cuda_geglu_backward(s, BF(c->din[0]), BF(c->din[1]), CBF(c->dout[0]), CBF(c->in[0]),
						 CBF(c->in[1]), c->n);
	case FERRY_OP_SCALE:
		return ferry_cuda_scale_backward(s, BF(c->din[0]), CBF(c->dout[0]), c->scalar[0], c->n,
						 c->grad_assign);
	case FERRY_OP_SOFTCAP:
		return ferry_cuda_softcap_backward(s, BF(c->din[0]), CBF(c->dout[0]), CBF(c->in[0]), c->scalar[0],
						   c->n, c->grad_assign);
	default:
		return cudaErrorInvalidValue; /* not routed here by ferry_cuda_run_op */
	}
}

/* Optimizer steps, reductions, fills and casts: no backward. */
static cudaError_t run_param_op(struct scratch ws, cudaStream_t s, const struct ferry_op_call *c)
{
	switch (c->kind) {
	case FERRY_OP_ADAMW:
		return ferry_cuda_adamw(s, c->param, BF(c->param_copy), F(c->out[0]), F(c->out[1]), CF(c->in[0]),
					c->n, c->scalar[0], c->scalar[1], c->scalar[2], c->scalar[3],
					c->scalar[4], c->scalar[5], c->step);
	case FERRY_OP_SUM_SQUARES:
		if (c->out[0])
			return ferry_cuda_sum_squares_parts(s, (double *)c->out[0], CF(c->in[0]), c->n, c->lo, c->hi);
		return ferry_cuda_sum_squares(s, c->result, CF(c->in[0]), c->n, ws.p, ws.bytes);
	case FERRY_OP_SUM:
		return ferry_cuda_sum(s, c->result, CBF(c->in[0]), c->n, ws.p, ws.bytes);
	case FERRY_OP_SQUARED_ERROR:
		return ferry_cuda_squared_error(s, c->result, BF(c->out[0]), CBF(c->in[0]), CF(c->in[1]), c->scalar[0],
						c->n, ws.p, ws.bytes);
	case FERRY_OP_FILL:
		return ferry_cuda_fill(s, BF(c->out[0]), c->scalar[0], c->n);
	case FERRY_OP_SGD:
		return ferry_cuda_sgd(s, c->param, BF(c->param_copy), CF(c->in[0]), c->scalar[0], c->n);
	case FERRY_OP_CAST:
		return ferry_cuda_cast(s, BF(c->out[0]), CF(c->in[0]), c->n);
	default:
		return cudaErrorInvalidValue; /* not routed here by ferry_cuda_run_op */
	}
}

/* Matmul through cuBLAS, which reports its own errors. */
static int run_matmul(struct ferry_cuda_ops *ops, cudaStream_t s, const struct ferry_op_call *c, char *err,
		      size_t err_len)
{
	int N = c->B * c->T;

	if (!c->backward)
		return ferry_cuda_matmul_forward(ops->blas, s, c->out[0], c->in[0], c->w[0], c->w[1], N, c->C, c->OC,
						 err, err_len);
	return ferry_cuda_matmul_backward(ops->blas, s, c->din[0], F(c->dw[0]), F(c->dw[1]), c->dout[0], c->in[0],
					  c->w[0], N, c->C, c->OC, err, err_len);
}

extern "C" int ferry_cuda_run_op(struct ferry_cuda_ops *ops, cudaStream_t s, const struct ferry_op_call *c,
				 char *err, size_t err_len)
{
	cudaError_t e = cudaSuccess;
	struct scratch ws;

	if (!scratch_for(ops, c, &ws, err, err_len))
		return -1;
	switch (c->kind) {
	case FERRY_OP_MATMUL:
		return run_matmul(ops, s, c, err, err_len);
	case FERRY_OP_ENCODER:
	case FERRY_OP_LAYERNORM:
	case FERRY_OP_ATTENTION:
	case FERRY_OP_GELU:
	case FERRY_OP_RESIDUAL:
	case FERRY_OP_SOFTMAX_XENT:
	case FERRY_OP_RMSNORM:
	case FERRY_OP_ROPE:
	case FERRY_OP_SWIGLU:
	case FERRY_OP_GEGLU:
	case FERRY_OP_SCALE:
	case FERRY_OP_SOFTCAP:
		e = !c->backward ? run_forward(s, c) : run_backward(ws, s, c);
		break;
	case FERRY_OP_ADAMW:
	case FERRY_OP_SUM_SQUARES:
	case FERRY_OP_SUM:
	case FERRY_OP_SQUARED_ERROR:
	case FERRY_OP_FILL:
	case FERRY_OP_SGD:
	case FERRY_OP_CAST:
		e = run_param_op(ws, s, c);
		break;
	case FERRY_OP_COUNT:
		snprintf(err, err_len, "bad op kind");
		return -1;
	}
	return launched(e, c, err, err_len);
}
