#include "ops/op.h"
#include "ops/rope_freq.h"

#include <assert.h>

#define IN FERRY_NEEDS_IN
#define OUT FERRY_NEEDS_OUT

static const struct ferry_op_info op_table[FERRY_OP_COUNT] = {
	[FERRY_OP_ENCODER] = { "encoder", 0, 1, 2, 0, 0, false },
	/* layernorm backward needs x, mean and rstd (and the gain, a weight) */
	[FERRY_OP_LAYERNORM] = { "layernorm", 1, 3, 2, IN(0) | OUT(1) | OUT(2), 0x6, false, .rows = true },
	/* d(in) needs the weight only; d(weight) needs the input */
	[FERRY_OP_MATMUL] = { "matmul", 1, 1, 2, IN(0), 0, true, .rows = true },
	/* flash-style backward: q, k, v, the output and the log-sum-exp; it
	   takes the window, the scale and the soft cap */
	[FERRY_OP_ATTENTION] = { "attention", 3, 2, 0, IN(0) | IN(1) | IN(2) | OUT(0) | OUT(1), 0x2, false,
				 .n_scalars = 3 },
	/* elementwise: d in[i] needs only d out[i], so it may overwrite it */
	[FERRY_OP_GELU] = { "gelu", 1, 1, 0, IN(0), 0, false, true, .rows = true },
	[FERRY_OP_RESIDUAL] = { "residual", 2, 1, 0, 0, 0, false, .rows = true },
	[FERRY_OP_SOFTMAX_XENT] = { "softmax_xent", 1, 2, 0, OUT(1), 0x3, false, .rows = true },
	[FERRY_OP_ADAMW] = { "adamw", 1, 2, 1, 0, 0x3, false },
	[FERRY_OP_SUM_SQUARES] = { "sum_squares", 1, 0, 0, 0, 0, false },
	[FERRY_OP_SUM] = { "sum", 1, 0, 0, 0, 0, false },
	[FERRY_OP_FILL] = { "fill", 0, 1, 0, 0, 0, false },
	[FERRY_OP_SGD] = { "sgd", 1, 0, 1, 0, 0, false },
	[FERRY_OP_CAST] = { "cast", 1, 1, 0, 0, 0, false },
	/* rmsnorm backward needs x and rstd (and the gain, a weight) */
	[FERRY_OP_RMSNORM] = { "rmsnorm", 1, 2, 1, IN(0) | OUT(1), 0x2, false, .rows = true },
	/* rope is linear: d in is the inverse rotation of d out; it takes theta
	   and the scaling's constants */
	[FERRY_OP_ROPE] = { "rope", 1, 1, 0, 0, 0, false, .n_scalars = FERRY_ROPE_N_SCALARS },
	[FERRY_OP_SWIGLU] = { "swiglu", 2, 1, 0, IN(0) | IN(1), 0, false, .rows = true },
	[FERRY_OP_SQUARED_ERROR] = { "squared_error", 2, 1, 0, 0, 0, false },
	[FERRY_OP_GEGLU] = { "geglu", 2, 1, 0, IN(0) | IN(1), 0, false, .rows = true },
	/* linear: its backward reads nothing, and may assign over d out */
	[FERRY_OP_SCALE] = { "scale", 1, 1, 0, 0, 0, false, true },
	/* its backward reads the input: the softmax overwrites the output */
	[FERRY_OP_SOFTCAP] = { "softcap", 1, 1, 0, IN(0), 0, false, true, .rows = true },
};

const struct ferry_op_info *ferry_op_info(enum ferry_op_kind kind)
{
	assert(kind >= 0 && kind < FERRY_OP_COUNT);
	return &op_table[kind];
}

double ferry_op_attention_pairs(const int32_t *positions, int B, int T, int W)
{
	double pairs = 0;

	for (long n = 0; n < (long)B * T; n++) {
		const long t = n % T;
		long first = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;

		if (positions) {
			const long back = positions[n] < 0 ? 0 : positions[n] > t ? t : positions[n];

			first = t - back > first ? t - back : first;
		}
		pairs += (double)(t - first + 1);
	}
	return pairs;
}

double ferry_op_flops_at(const struct ferry_op_call *c, const int32_t *host_positions)
{
	if (c->kind != FERRY_OP_ATTENTION || !host_positions)
		return ferry_op_flops(c);
	const double hs = c->NH ? (double)c->C / c->NH : 0;
	const double pairs = c->NH * ferry_op_attention_pairs(host_positions, c->B, c->T, (int)c->scalar[0]);

	return (c->backward ? 8.0 : 4.0) * pairs * hs;
}

double ferry_op_flops(const struct ferry_op_call *c)
{
	double N = (double)c->B * c->T;
	double hs = c->NH ? (double)c->C / c->NH : 0;

	switch (c->kind) {
	case FERRY_OP_MATMUL:
		/* forward one product; backward two (d input, d weight) */
		return (c->backward ? 4.0 : 2.0) * N * c->C * c->OC;
	case FERRY_OP_ATTENTION: {
		/* grouped-query attention (NKV < NH) does the same products:
		 * causal: T(T+1)/2 score pairs per head, q.k and p.v each 2*hs */
		double pairs = (double)c->B * c->NH * c->T * (c->T + 1) / 2.0;
		return (c->backward ? 8.0 : 4.0) * pairs * hs;
	}
	case FERRY_OP_LAYERNORM:
		return (c->backward ? 12.0 : 8.0) * N * c->C;
	case FERRY_OP_RMSNORM:
		/* like layernorm, less the mean and the bias */
		return (c->backward ? 10.0 : 6.0) * N * c->C;
	case FERRY_OP_ROPE:
		/* two products and a sum per element, either direction */
		return 6.0 * N * c->C;
	case FERRY_OP_GELU:
	case FERRY_OP_SWIGLU:
	case FERRY_OP_GEGLU:
	case FERRY_OP_SOFTCAP:
		return (c->backward ? 20.0 : 12.0) * (double)c->n;
	case FERRY_OP_SCALE:
		return (double)c->n;
	case FERRY_OP_RESIDUAL:
		return (double)c->n;
	case FERRY_OP_SOFTMAX_XENT:
		return 5.0 * N * c->Vp;
	case FERRY_OP_ADAMW:
		return 12.0 * (double)c->n;
	case FERRY_OP_SUM_SQUARES:
	case FERRY_OP_SGD:
		return 2.0 * (double)c->n;
	case FERRY_OP_SUM:
		return (double)c->n;
	case FERRY_OP_SQUARED_ERROR:
		return 4.0 * (double)c->n;
	case FERRY_OP_FILL:
	case FERRY_OP_CAST:
		return 0;
	case FERRY_OP_ENCODER:
		return N * c->C;
	case FERRY_OP_COUNT:
		break;
	}
	return 0;
}
