/*
 * CPU reference kernels (fp32, OpenMP, matrix products through BLAS).
 *
 * Dimension letters, used the same way everywhere:
 *   B batch, T time (sequence), C channels, NH heads, HS = C / NH head size,
 *   NKV key/value heads (grouped-query attention),
 *   OC output channels of a matrix product, N = B * T rows,
 *   V vocabulary, Vp vocabulary padded (rows of the embedding table).
 * Activations are row-major [N, C] (equivalently [B, T, C]).
 *
 * One forward and one backward per op; outputs first, then inputs, then sizes.
 * Forward functions overwrite their outputs.  Backward functions ACCUMULATE
 * (+=) into every gradient they are given, so callers zero gradients once and
 * several consumers of one tensor simply add up.  A NULL gradient pointer
 * means "not wanted" and is skipped.
 *
 * Names carry the prefix ferry_cpu_: libferry.a defines no global symbol
 * outside ferry_ (tests/cli/exports.sh), so a user's own encoder_forward or
 * fill never collides with ours at link time.
 */
#ifndef FERRY_OPS_CPU_KERNELS_H
#define FERRY_OPS_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

/* out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]; wpe may be NULL (no position
 * table: rotary models), and then also dwpe. */
void ferry_cpu_encoder_forward(float *out, const int32_t *tokens,
			       const float *wte, const float *wpe, int B, int T,
			       int C);
void ferry_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
				const int32_t *tokens, int B, int T, int C);

/* Packed documents (docs/data.md, version 3): the _pos variants of the
 * encoder, rope and attention take positions[B * T], row (b, t)'s position
 * in its document (each document's rows count 0, 1, 2, ... along a row);
 * NULL means t, and then they are their plain forms, bit for bit.  The
 * encoder reads wpe row positions[b, t], rope turns by positions[b, t], and
 * attention's query (b, t) sees only the keys of its own document. */
void ferry_cpu_encoder_forward_pos(float *out, const int32_t *tokens, const int32_t *positions,
				   const float *wte, const float *wpe, int B, int T, int C);
void ferry_cpu_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
				    const int32_t *positions, int B, int T, int C);

/* out = (inp - mean) * rstd * weight + bias per row of C; saves mean[N] and
 * rstd[N] (rstd = 1 / sqrt(var + 1e-5), biased variance). */
void ferry_cpu_layernorm_forward(float *out, float *mean, float *rstd,
				 const float *inp, const float *weight,
				 const float *bias, int N, int C);
void ferry_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias,
				  const float *dout, const float *inp,
				  const float *weight, const float *mean,
				  const float *rstd, int N, int C);

/* out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias[OC]; bias may be NULL. */
void ferry_cpu_matmul_forward(float *out, const float *inp, const float *weight,
			      const float *bias, int N, int C, int OC);
void ferry_cpu_matmul_backward(float *dinp, float *dweight, float *dbias,
			       const float *dout, const float *inp,
			       const float *weight, int N, int C, int OC);

/* Causal multi-head attention, query head h on channels [h*HS, (h+1)*HS) of
 * q and out (both [B, T, C], C = NH * HS).  Grouped-query attention: k and
 * v are [B, T, NKV * HS] with NKV key/value heads (NKV divides NH; NKV == NH
 * is plain multi-head attention), and query head h reads key/value head
 * h / (NH / NKV), as Hugging Face's repeat_kv.  Scores are q.k / sqrt(HS).
 * Saves lse[B, NH, T], the log-sum-exp of each query's scores, instead of
 * the T x T probabilities; backward recomputes them from q, k and lse.
 * W > 0: a sliding window (Mistral), query t sees keys t - W < t2 <= t;
 * W = 0: every earlier key.  scale > 0 replaces 1 / sqrt(HS); cap > 0
 * soft-caps the scaled scores, s -> cap tanh(s / cap) (Gemma 2); 0: none. */
void ferry_cpu_attention_forward(float *out, float *lse, const float *q,
				 const float *k, const float *v, int B, int T,
				 int C, int NH, int NKV, int W, float scale, float cap);
void ferry_cpu_attention_backward(float *dq, float *dk, float *dv,
				  const float *dout, const float *q,
				  const float *k, const float *v,
				  const float *out, const float *lse, int B,
				  int T, int C, int NH, int NKV, int W, float scale, float cap);
/* With positions (NULL: the above): keys t - positions[b, t] .. t only. */
void ferry_cpu_attention_forward_pos(float *out, float *lse, const float *q, const float *k, const float *v,
				     const int32_t *positions, int B, int T, int C, int NH, int NKV, int W,
				     float scale, float cap);
void ferry_cpu_attention_backward_pos(float *dq, float *dk, float *dv, const float *dout, const float *q,
				      const float *k, const float *v, const float *out, const float *lse,
				      const int32_t *positions, int B, int T, int C, int NH, int NKV, int W,
				      float scale, float cap);

/* RMSNorm (Llama): rstd = 1 / sqrt(mean(x^2) + eps) over each row of C,
 * out = x * rstd * (weight + offset) (no mean, no bias; offset 1 is
 * Gemma's 1 + w, 0 Llama's); saves rstd[N]. */
void ferry_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp,
			       const float *weight, int N, int C, float eps, float offset);
void ferry_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout,
				const float *inp, const float *weight,
				const float *rstd, int N, int C, float offset);

/* Rotary position embedding, Hugging Face rotate_half convention, on
 * inp/out [B, T, NH, HS] (HS even, out and inp distinct).  Row (b, t) has
 * position t; for i < HS/2, angle = t * inv_freq_i, inv_freq_i =
 * theta^(-2i/HS) scaled as rf says (ops/rope_freq.h):
 *   out[i]        = x[i] cos - x[i + HS/2] sin
 *   out[i + HS/2] = x[i + HS/2] cos + x[i] sin
 * Backward (the op is linear) applies the inverse rotation to dout. */
struct ferry_rope_freq;
void ferry_cpu_rope_forward(float *out, const float *inp, int B, int T, int NH,
			    int HS, const struct ferry_rope_freq *rf);
void ferry_cpu_rope_backward(float *dinp, const float *dout, int B, int T,
			     int NH, int HS, const struct ferry_rope_freq *rf);
/* With positions (NULL: the above): row (b, t) turns by positions[b, t]. */
void ferry_cpu_rope_forward_pos(float *out, const float *inp, const int32_t *positions, int B, int T, int NH,
				int HS, const struct ferry_rope_freq *rf);
void ferry_cpu_rope_backward_pos(float *dinp, const float *dout, const int32_t *positions, int B, int T,
				 int NH, int HS, const struct ferry_rope_freq *rf);

/* SwiGLU: out = silu(gate) * up, silu(x) = x * sigmoid(x), n values. */
void ferry_cpu_swiglu_forward(float *out, const float *gate, const float *up,
			      long n);
void ferry_cpu_swiglu_backward(float *dgate, float *dup, const float *dout,
			       const float *gate, const float *up, long n);

/* GeGLU (Gemma's MLP): out = gelu(gate) * up, GELU in its tanh form
 * (gelu_pytorch_tanh), n values; out may alias gate or up. */
void ferry_cpu_geglu_forward(float *out, const float *gate, const float *up, long n);
void ferry_cpu_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
			      long n);

/* out = inp * scale, n values (Gemma's embedding times sqrt(C)); backward
 * dinp += dout * scale, or with assign dinp = (dinp may be dout). */
void ferry_cpu_scale_forward(float *out, const float *inp, float scale, long n);
void ferry_cpu_scale_backward(float *dinp, const float *dout, float scale, long n, bool assign);

/* Soft-capping: out = cap tanh(inp / cap), n values (Gemma 2's final
 * logits); backward dinp += dout (1 - tanh^2(inp / cap)), or with assign
 * dinp = (dinp may be dout or inp: each element is read first). */
void ferry_cpu_softcap_forward(float *out, const float *inp, float cap, long n);
void ferry_cpu_softcap_backward(float *dinp, const float *dout, const float *inp, float cap, long n,
				bool assign);

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * Backward with assign overwrites dinp (which may be dout) instead. */
void ferry_cpu_gelu_forward(float *out, const float *inp, long n);
void ferry_cpu_gelu_backward(float *dinp, const float *dout, const float *inp,
			     long n, bool assign);

/* out = a + b */
void ferry_cpu_residual_forward(float *out, const float *a, const float *b,
				long n);
void ferry_cpu_residual_backward(float *da, float *db, const float *dout,
				 long n);

/* Softmax cross-entropy over the first V of Vp columns (padding columns get
 * probability 0).  losses[i] = -log softmax(logits[i])[targets[i]]; a
 * target below 0 is not counted: its loss is 0 (its probs are still
 * written).  probs may alias logits (computed in place). */
void ferry_cpu_softmax_xent_forward(float *losses, float *probs,
				    const float *logits, const int32_t *targets,
				    int N, int V, int Vp);
/* dlogits = dloss * (probs - onehot(targets)), padding columns 0, and a
 * whole row 0 where its target is below 0.  WRITES (does not accumulate);
 * dlogits may alias probs. */
void ferry_cpu_softmax_xent_backward(float *dlogits, const float *probs,
				     const int32_t *targets, float dloss, int N,
				     int V, int Vp);

/* Sum of squares of x, accumulated in double (for the global gradient norm). */
double ferry_cpu_sum_squares(const float *x, long n);
/* The sums above split an n-element array into FERRY_CPU_SUM_BLOCKS
 * blocks of ferry_cpu_sum_block(n) elements (the last shorter), each
 * summed alone, then the block sums added in order: the sum of squares of
 * an array split over ranks (ZeRO-2's gradient slices, each whole blocks)
 * is each rank's block sums (parts[b] for the blocks starting in [lo, hi),
 * x holding elements lo on; 0 for the others), added up over the ranks
 * (each block's is one rank's) and then in order by ferry_cpu_sum_parts:
 * the bits of the whole array's. */
#define FERRY_CPU_SUM_BLOCKS 256
long ferry_cpu_sum_block(long n);
void ferry_cpu_sum_squares_parts(const float *x, long n, long lo, long hi, double *parts);
double ferry_cpu_sum_parts(const double *parts);

/* Sum of x, accumulated in double, deterministic for a fixed thread count. */
double ferry_cpu_sum_all(const float *x, long n);
/* e = pred - target: dpred = scale * e, returns sum(e^2) (blocked and
 * ordered like the sums above: the same bits on any thread count). */
double ferry_cpu_squared_error(float *dpred, const float *pred, const float *target, float scale, long n);
/* x[:n] = value */
void ferry_cpu_fill(float *x, float value, long n);
/* param -= lr * grad */
void ferry_cpu_sgd_update(float *param, const float *grad, float lr, long n);

#endif
