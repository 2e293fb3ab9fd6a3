/* Maps an op call's slots onto the CPU kernels' arguments (all fp32). */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"
#include "ops/rope_freq.h"
#include "optim/cpu_adamw.h"

#include <assert.h>
#include <string.h>

#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))

/* The forward kernel of a model op. */
static void run_forward(const struct ferry_op_call *c)
{
	int N = c->B * c->T;
	int NKV = c->NKV ? c->NKV : c->NH; /* attention's key/value heads */

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		ferry_cpu_encoder_forward_pos(F(c->out[0]), c->tokens, c->positions, CF(c->w[0]), CF(c->w[1]),
					      c->B, c->T, c->C);
		break;
	case FERRY_OP_LAYERNORM:
		ferry_cpu_layernorm_forward(F(c->out[0]), F(c->out[1]), F(c->out[2]),
					    CF(c->in[0]), CF(c->w[0]), CF(c->w[1]), N,
					    c->C);
		break;
	case FERRY_OP_MATMUL:
		ferry_cpu_matmul_forward(F(c->out[0]), CF(c->in[0]), CF(c->w[0]),
					 CF(c->w[1]), N, c->C, c->OC);
		break;
	case FERRY_OP_ATTENTION:
		ferry_cpu_attention_forward_pos(F(c->out[0]), F(c->out[1]), CF(c->in[0]), CF(c->in[1]),
						CF(c->in[2]), c->positions, c->B, c->T, c->C, c->NH, NKV,
						(int)c->scalar[0], c->scalar[1], c->scalar[2]);
		break;
	case FERRY_OP_GELU:
		ferry_cpu_gelu_forward(F(c->out[0]), CF(c->in[0]), c->n);
		break;
	case FERRY_OP_RESIDUAL:
		ferry_cpu_residual_forward(F(c->out[0]), CF(c->in[0]), CF(c->in[1]), c->n);
		break;
	case FERRY_OP_SOFTMAX_XENT:
		ferry_cpu_softmax_xent_forward(F(c->out[0]), F(c->out[1]), CF(c->in[0]),
					       c->tokens, N, c->V, c->Vp);
		break;
	case FERRY_OP_RMSNORM:
		ferry_cpu_rmsnorm_forward(F(c->out[0]), F(c->out[1]), CF(c->in[0]),
					  CF(c->w[0]), N, c->C, c->scalar[0], c->scalar[1]);
		break;
	case FERRY_OP_ROPE: {
		const struct ferry_rope_freq rf = ferry_rope_freq_of(c->scalar);
		ferry_cpu_rope_forward_pos(F(c->out[0]), CF(c->in[0]), c->positions, c->B, c->T, c->NH,
					   c->C / c->NH, &rf);
		break;
	}
	case FERRY_OP_SWIGLU:
		ferry_cpu_swiglu_forward(F(c->out[0]), CF(c->in[0]), CF(c->in[1]), c->n);
		break;
	case FERRY_OP_GEGLU:
		ferry_cpu_geglu_forward(F(c->out[0]), CF(c->in[0]), CF(c->in[1]), c->n);
		break;
	case FERRY_OP_SCALE:
		ferry_cpu_scale_forward(F(c->out[0]), CF(c->in[0]), c->scalar[0], c->n);
		break;
	case FERRY_OP_SOFTCAP:
		ferry_cpu_softcap_forward(F(c->out[0]), CF(c->in[0]), c->scalar[0], c->n);
		break;
	default:
		assert(0); /* not a model op: ferry_cpu_run_op routes those */
	}
}

/* The backward kernel of a model op. */
static void run_backward(const struct ferry_op_call *c)
{
	int N = c->B * c->T;
	int NKV = c->NKV ? c->NKV : c->NH; /* attention's key/value heads */

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		ferry_cpu_encoder_backward_pos(F(c->dw[0]), F(c->dw[1]), CF(c->dout[0]), c->tokens,
					       c->positions, c->B, c->T, c->C);
		break;
	case FERRY_OP_LAYERNORM:
		ferry_cpu_layernorm_backward(F(c->din[0]), F(c->dw[0]), F(c->dw[1]),
					     CF(c->dout[0]), CF(c->in[0]), CF(c->w[0]),
					     CF(c->out[1]), CF(c->out[2]), N, c->C);
		break;
	case FERRY_OP_MATMUL:
		ferry_cpu_matmul_backward(F(c->din[0]), F(c->dw[0]), F(c->dw[1]),
					  CF(c->dout[0]), CF(c->in[0]), CF(c->w[0]), N,
					  c->C, c->OC);
		break;
	case FERRY_OP_ATTENTION:
		ferry_cpu_attention_backward_pos(F(c->din[0]), F(c->din[1]), F(c->din[2]), CF(c->dout[0]),
						 CF(c->in[0]), CF(c->in[1]), CF(c->in[2]), CF(c->out[0]),
						 CF(c->out[1]), c->positions, c->B, c->T, c->C, c->NH, NKV,
						 (int)c->scalar[0], c->scalar[1], c->scalar[2]);
		break;
	case FERRY_OP_GELU:
		ferry_cpu_gelu_backward(F(c->din[0]), CF(c->dout[0]), CF(c->in[0]), c->n,
					c->grad_assign);
		break;
	case FERRY_OP_RESIDUAL:
		ferry_cpu_residual_backward(F(c->din[0]), F(c->din[1]), CF(c->dout[0]),
					    c->n);
		break;
	case FERRY_OP_SOFTMAX_XENT:
		ferry_cpu_softmax_xent_backward(F(c->din[0]), CF(c->out[1]), c->tokens,
						c->scalar[0], N, c->V, c->Vp);
		break;
	case FERRY_OP_RMSNORM:
		ferry_cpu_rmsnorm_backward(F(c->din[0]), F(c->dw[0]), CF(c->dout[0]),
					   CF(c->in[0]), CF(c->w[0]), CF(c->out[1]), N,
					   c->C, c->scalar[1]);
		break;
	case FERRY_OP_ROPE: {
		const struct ferry_rope_freq rf = ferry_rope_freq_of(c->scalar);
		ferry_cpu_rope_backward_pos(F(c->din[0]), CF(c->dout[0]), c->positions, c->B, c->T, c->NH,
					    c->C / c->NH, &rf);
		break;
	}
	case FERRY_OP_SWIGLU:
		ferry_cpu_swiglu_backward(F(c->din[0]), F(c->din[1]), CF(c->dout[0]),
					  CF(c->in[0]), CF(c->in[1]), c->n);
		break;
	case FERRY_OP_GEGLU:
		ferry_cpu_geglu_backward(F(c->din[0]), F(c->din[1]), CF(c->dout[0]), CF(c->in[0]), CF(c->in[1]),
					 c->n);
		break;
	case FERRY_OP_SCALE:
		ferry_cpu_scale_backward(F(c->din[0]), CF(c->dout[0]), c->scalar[0], c->n, c->grad_assign);
		break;
	case FERRY_OP_SOFTCAP:
		ferry_cpu_softcap_backward(F(c->din[0]), CF(c->dout[0]), CF(c->in[0]), c->scalar[0], c->n,
					   c->grad_assign);
		break;
	default:
		assert(0); /* not a model op: ferry_cpu_run_op routes those */
	}
}

/* Optimizer steps, reductions, fills and casts: no backward. */
static void run_param_op(const struct ferry_op_call *c)
{
	switch (c->kind) {
	case FERRY_OP_ADAMW:
		ferry_cpu_adamw_update(c->param, F(c->out[0]), F(c->out[1]), CF(c->in[0]), c->n,
				       c->scalar[0], c->scalar[1], c->scalar[2], c->scalar[3],
				       c->scalar[4], c->scalar[5], c->step);
		if (c->param_copy) /* the weights the kernels read (fp32 here) */
			memcpy(c->param_copy, c->param, (size_t)c->n * sizeof(float));
		break;
	case FERRY_OP_SUM_SQUARES:
		if (c->out[0])
			ferry_cpu_sum_squares_parts(CF(c->in[0]), c->n, c->lo, c->hi, c->out[0]);
		else
			*c->result += ferry_cpu_sum_squares(CF(c->in[0]), c->n);
		break;
	case FERRY_OP_SUM:
		*c->result += ferry_cpu_sum_all(CF(c->in[0]), c->n);
		break;
	case FERRY_OP_SQUARED_ERROR:
		*c->result += ferry_cpu_squared_error(F(c->out[0]), CF(c->in[0]), CF(c->in[1]), c->scalar[0], c->n);
		break;
	case FERRY_OP_FILL:
		ferry_cpu_fill(F(c->out[0]), c->scalar[0], c->n);
		break;
	case FERRY_OP_SGD:
		ferry_cpu_sgd_update(c->param, CF(c->in[0]), c->scalar[0], c->n);
		break;
	case FERRY_OP_CAST: /* fp32 to fp32 */
		if (c->out[0] != c->in[0])
			memcpy(c->out[0], c->in[0], (size_t)c->n * sizeof(float));
		break;
	default:
		assert(0); /* a model op: ferry_cpu_run_op routes those */
	}
}

void ferry_cpu_run_op(const struct ferry_op_call *c)
{
	switch (c->kind) {
	case FERRY_OP_ENCODER:
	case FERRY_OP_LAYERNORM:
	case FERRY_OP_MATMUL:
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
		if (!c->backward)
			run_forward(c);
		else
			run_backward(c);
		break;
	case FERRY_OP_ADAMW:
	case FERRY_OP_SUM_SQUARES:
	case FERRY_OP_SUM:
	case FERRY_OP_SQUARED_ERROR:
	case FERRY_OP_FILL:
	case FERRY_OP_SGD:
	case FERRY_OP_CAST:
		run_param_op(c);
		break;
	case FERRY_OP_COUNT:
		assert(0);
	}
}
