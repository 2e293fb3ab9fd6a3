/* Maps an op call's slots onto the CPU kernels' arguments. */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"

#include <assert.h>

void ferry_cpu_run_op(const struct ferry_op_call *c)
{
	int N = c->B * c->T;

	switch (c->kind) {
	case FERRY_OP_ENCODER:
		if (!c->backward)
			encoder_forward(c->out[0], c->tokens, c->w[0], c->w[1], c->B, c->T, c->C);
		else
			encoder_backward(c->dw[0], c->dw[1], c->dout[0], c->tokens, c->B, c->T, c->C);
		break;
	case FERRY_OP_LAYERNORM:
		if (!c->backward)
			layernorm_forward(c->out[0], c->out[1], c->out[2], c->in[0], c->w[0],
					  c->w[1], N, c->C);
		else
			layernorm_backward(c->din[0], c->dw[0], c->dw[1], c->dout[0], c->in[0],
					   c->w[0], c->out[1], c->out[2], N, c->C);
		break;
	case FERRY_OP_MATMUL:
		if (!c->backward)
			matmul_forward(c->out[0], c->in[0], c->w[0], c->w[1], N, c->C, c->OC);
		else
			matmul_backward(c->din[0], c->dw[0], c->dw[1], c->dout[0], c->in[0],
					c->w[0], N, c->C, c->OC);
		break;
	case FERRY_OP_ATTENTION:
		if (!c->backward)
			attention_forward(c->out[0], c->out[1], c->in[0], c->in[1], c->in[2],
					  c->B, c->T, c->C, c->NH);
		else
			attention_backward(c->din[0], c->din[1], c->din[2], c->dout[0], c->in[0],
					   c->in[1], c->in[2], c->out[0], c->out[1], c->B,
					   c->T, c->C, c->NH);
		break;
	case FERRY_OP_GELU:
		if (!c->backward)
			gelu_forward(c->out[0], c->in[0], c->n);
		else
			gelu_backward(c->din[0], c->dout[0], c->in[0], c->n);
		break;
	case FERRY_OP_RESIDUAL:
		if (!c->backward)
			residual_forward(c->out[0], c->in[0], c->in[1], c->n);
		else
			residual_backward(c->din[0], c->din[1], c->dout[0], c->n);
		break;
	case FERRY_OP_SOFTMAX_XENT:
		if (!c->backward)
			softmax_xent_forward(c->out[0], c->out[1], c->in[0], c->tokens, N, c->V,
					     c->Vp);
		else
			softmax_xent_backward(c->din[0], c->out[1], c->tokens, c->scalar[0], N,
					      c->V, c->Vp);
		break;
	case FERRY_OP_ADAMW:
		adamw_update(c->param, c->out[0], c->out[1], c->in[0], c->n, c->scalar[0],
			     c->scalar[1], c->scalar[2], c->scalar[3], c->scalar[4], c->scalar[5],
			     c->step);
		break;
	case FERRY_OP_SUM_SQUARES:
		*c->result += sum_squares(c->in[0], c->n);
		break;
	case FERRY_OP_SUM:
		*c->result += sum_all(c->in[0], c->n);
		break;
	case FERRY_OP_FILL:
		fill(c->out[0], c->scalar[0], c->n);
		break;
	case FERRY_OP_SGD:
		sgd_update(c->param, c->in[0], c->scalar[0], c->n);
		break;
	case FERRY_OP_COUNT:
		assert(0);
	}
}
