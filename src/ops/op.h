/*
 * Op kinds: what each op reads and writes, which of those its backward pass
 * needs, and its cost.  The graph engine reads this table to derive a layer's
 * residuals; backends read ferry_op_call to run one op.
 *
 * Slots: an op has up to 3 inputs (in), 3 outputs (out) and 2 weights (w).
 * Backward receives the same pointers plus the gradients of the outputs
 * (dout), and accumulates into the gradients of inputs (din) and weights (dw)
 * -- or, told to (grad_assign), a bwd_in_place op assigns its din[0].
 */
#ifndef FERRY_OPS_OP_H
#define FERRY_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_op_kind {
	FERRY_OP_ENCODER,      /* out0 = wte[tokens] + wpe[t]; w0 wte, w1 wpe */
	FERRY_OP_LAYERNORM,    /* out0 y, out1 mean, out2 rstd; in0 x; w0 g, w1 b */
	FERRY_OP_MATMUL,       /* out0 = in0 @ w0^T + w1 (w1 may be NULL) */
	FERRY_OP_ATTENTION,    /* out0 context, out1 lse; in0 q, in1 k, in2 v
				  (k, v: NKV heads, grouped-query); scalar[0]
				  window, [1] scale, [2] soft cap */
	FERRY_OP_GELU,         /* out0 = gelu(in0) */
	FERRY_OP_RESIDUAL,     /* out0 = in0 + in1 */
	FERRY_OP_SOFTMAX_XENT, /* out0 losses[N], out1 probs (may alias in0); in0 logits */
	FERRY_OP_ADAMW,        /* w0 param, out0 m, out1 v, in0 grad */
	FERRY_OP_SUM_SQUARES,  /* *result += sum(in0^2); with out0, the block
				  sums instead (ferry_cpu_sum_squares_parts):
				  out0[b] (double, FERRY_CPU_SUM_BLOCKS) for
				  the blocks of an n-element array starting in
				  [lo, hi), in0 holding elements lo on */
	FERRY_OP_SUM,          /* *result += sum(in0) */
	FERRY_OP_FILL,         /* out0[:n] = scalar[0] */
	FERRY_OP_SGD,          /* param -= scalar[0] * in0 (the gradient) */
	FERRY_OP_CAST,         /* out0 (activation type) = in0 (fp32), n values */
	FERRY_OP_RMSNORM,      /* out0 y, out1 rstd [N] (fp32); in0 x; w0 gain;
				  eps in scalar[0], a gain offset in scalar[1].
				  rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd *
				  (gain + offset) (Llama RMSNorm; Gemma's 1 + w;
				  no w0, offset 1: no gain, Gemma 4's v norm).
				  A rstd of g values per token normalises each
				  token's g groups: T is then T x g, C its 1/g
				  (q/k norms over each head; graph/op_call.c) */
	FERRY_OP_ROPE,         /* out0 = rope(in0), [B, T, NH, HS], C = NH * HS,
				  theta and scaling in scalar[0..5]
				  (ops/rope_freq.h); position of row (b, t) is t;
				  Hugging Face rotate_half convention */
	FERRY_OP_SWIGLU,       /* out0 = silu(in0) * in1, n values; in0 gate, in1 up */
	FERRY_OP_SQUARED_ERROR, /* e = in0 - in1 (in0 a prediction, in1 an fp32 target):
				   *result += sum(e^2), out0 = scalar[0] * e, n values;
				   a mean-squared-error loss and its gradient */
	FERRY_OP_GEGLU,        /* out0 = gelu_tanh(in0) * in1, n values; in0 gate, in1 up */
	FERRY_OP_SCALE,        /* out0 = in0 * scalar[0] (rounded to the
				  activation type), n values */
	FERRY_OP_SOFTCAP,      /* out0 = c tanh(in0 / c), c = scalar[0], n values */
	FERRY_OP_COUNT
};

#define FERRY_OP_MAX_IN 3
#define FERRY_OP_MAX_OUT 3
#define FERRY_OP_MAX_W 2

/* Bits of what backward reads besides the output gradients. */
#define FERRY_NEEDS_IN(i) (1u << (i))
#define FERRY_NEEDS_OUT(i) (1u << (8 + (i)))

struct ferry_op_info {
	const char *name;
	int n_in, n_out, n_w;
	unsigned bwd_needs;      /* FERRY_NEEDS_IN / FERRY_NEEDS_OUT bits */
	unsigned out_no_grad;    /* bit i: output i is a statistic, no gradient */
	bool is_dot;             /* a matrix product (for dots_saveable) */
	bool bwd_in_place;       /* unary and elementwise: backward may assign
				    din[0] over dout[0] (grad_assign), each
				    element read before it is written */
	int n_scalars;           /* model constants it takes, consecutive from
				    its declared one, into scalar[0..) (0: 1) */
	bool rows;               /* each row (token) of its tensors is computed
				    from the same row alone, position aside: it
				    may run over any range of rows (tiles) */
};

const struct ferry_op_info *ferry_op_info(enum ferry_op_kind kind);

/* Everything a backend needs to run one op, forward or backward.
 * Element types: activations (in, out, din, dout) and weights (w) are the
 * backend's activation type, except statistics outputs (out_no_grad: layer
 * norm mean/rstd, rmsnorm rstd, attention lse, per-row losses), which are
 * fp32; weight gradients (dw), param, grads of adamw/sgd/sum_squares are
 * fp32. */
struct ferry_op_call {
	enum ferry_op_kind kind;
	bool backward;
	int B, T, C, NH, OC, V, Vp; /* as the kind needs; N = B * T */
	int NKV;                    /* attention's key/value heads (grouped-query
				       attention, NKV divides NH; k and v are
				       [B, T, NKV * C / NH]); 0 means NH */
	long n;                     /* element count (gelu, residual, adamw) */
	long lo, hi;                /* sum_squares' block sums: the slice */
	void *out[FERRY_OP_MAX_OUT];
	const void *in[FERRY_OP_MAX_IN];
	const void *w[FERRY_OP_MAX_W];
	const void *dout[FERRY_OP_MAX_OUT];
	void *din[FERRY_OP_MAX_IN];
	void *dw[FERRY_OP_MAX_W];
	const int32_t *tokens;      /* encoder: inputs; softmax_xent: targets,
				       a target below 0 not counted (its loss
				       and its logits' gradient 0) */
	const int32_t *positions;   /* packed documents (docs/data.md, version
				       3): row (b, t)'s position in its
				       document, in the backend's memory as
				       tokens are; NULL: t.  Encoder: wpe at
				       it; rope: its angle; attention: query
				       (b, t) sees keys t - positions[b, t] ..
				       t of row b (its document), and the
				       window within them */
	double *result;             /* sum_squares, sum, squared_error */
	float *param;               /* adamw, sgd: fp32 parameters updated in place */
	void *param_copy;           /* adamw, sgd: their activation-type copy, also
				       updated (NULL when the type is fp32) */
	float scalar[8];            /* softmax_xent: [0] dloss;
				       adamw: lr, beta1, beta2, eps, wd, grad_scale;
				       rmsnorm: [0] eps, [1] gain offset;
				       rope: [0] theta, [1..5] scaling
				       (ops/rope_freq.h); attention: [0]
				       sliding window, keys per query (0:
				       every earlier key), [1] score scale
				       (0: 1/sqrt(HS)), [2] soft cap (0: none);
				       scale: [0] the factor; softcap: [0] c */
	int step;                   /* adamw: t >= 1 */
	bool grad_assign;           /* backward of a bwd_in_place op: din[0] =
				       its gradient, not +=; din[0] may be
				       dout[0] (the planner aliases them) */
	void *ws;                   /* kernel scratch the executor provides (the
				       tensor table's workspace); NULL: the
				       backend's own */
	size_t ws_bytes;
};

/* FLOPs of one call (forward or backward), for benchmarks and planning.
 * Attention's count every earlier key (call->positions may be in device
 * memory, so it is not read): with packed documents, an upper bound. */
double ferry_op_flops(const struct ferry_op_call *call);
/* The (query, key) pairs attention scores in one head over B rows of T:
 * each query's keys from its first (its document's start, positions in
 * host memory, or 0 when NULL; the window's if later, W > 0) to itself. */
double ferry_op_attention_pairs(const int32_t *positions, int B, int T, int W);
/* ferry_op_flops with attention's pairs counted from positions in host
 * memory (NULL: ferry_op_flops itself): what packing saves. */
double ferry_op_flops_at(const struct ferry_op_call *call, const int32_t *host_positions);

#ifdef __cplusplus
}
#endif
#endif
