/*
 * CUDA kernels of the ops, as host-side launchers (C linkage).
 *
 * Types (mixed precision): activations, their gradients and the weights the
 * kernels read are bf16 (`bf16` below); statistics (layernorm mean/rstd,
 * attention lse, per-row losses), weight gradients, fp32 master weights and
 * AdamW moments are float.  Accumulation is in fp32 everywhere.
 * Same dimension letters and semantics as the CPU kernels
 * (src/ops/cpu/kernels.h): forward overwrites outputs; backward ACCUMULATES
 * (+=) into every gradient it is given; NULL gradients are skipped.
 *
 * Every launcher enqueues on `s`, never synchronises, and returns
 * cudaGetLastError() after its launches (cudaSuccess when n == 0 etc.).
 * Scratch memory, where a kernel needs it, comes from `ws` (ws_bytes
 * available, from cuda_ops.cu); a launcher needing more returns
 * cudaErrorInvalidValue.
 */
#ifndef FERRY_BACKEND_CUDA_KERNELS_CUH
#define FERRY_BACKEND_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/rope_freq.h"

typedef __nv_bfloat16 bf16;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernels_elementwise.cu ------------------------------------------------ */
/* Packed documents (issue 38): the encoder, rope and attention take pos,
 * positions[B * T] in device memory (row (b, t)'s position in its document,
 * counting 0, 1, ... along a row; ops/op.h), or NULL for t.  NULL gives the
 * arithmetic of before, bit for bit. */
/* out[b,t,:] = wte[tok] + wpe[pos[b,t]] (pos NULL: t) */
cudaError_t ferry_cuda_encoder_forward(cudaStream_t s, bf16 *out, const int32_t *tokens, const int32_t *pos,
				       const bf16 *wte, const bf16 *wpe, int B, int T, int C);
/* dwte[tok] += dout rows; dwpe[pos] += dout (float grads), each in the
 * CPU's row order: the same bits as the CPU backend, run to run.  Tokens
 * are below V, positions below T; dwte, and dwpe with positions, need
 * ferry_cuda_embedding_backward_ws_bytes(B * T, max(V, T)) bytes of ws. */
cudaError_t ferry_cuda_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const bf16 *dout,
					const int32_t *tokens, const int32_t *pos, int B, int T, int C, int V,
					void *ws, size_t ws_bytes);
size_t ferry_cuda_embedding_backward_ws_bytes(long N, int V);
cudaError_t ferry_cuda_gelu_forward(cudaStream_t s, bf16 *out, const bf16 *inp, long n);
/* dinp += dout * gelu'(inp), or with assign dinp = ... (dinp may be dout) */
cudaError_t ferry_cuda_gelu_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const bf16 *inp, long n,
				     bool assign);
cudaError_t ferry_cuda_residual_forward(cudaStream_t s, bf16 *out, const bf16 *a, const bf16 *b, long n);
/* da += dout; db += dout (either may be NULL; da may equal db) */
cudaError_t ferry_cuda_residual_backward(cudaStream_t s, bf16 *da, bf16 *db, const bf16 *dout, long n);
/* out (bf16) = in (float) */
cudaError_t ferry_cuda_cast(cudaStream_t s, bf16 *out, const float *in, long n);
cudaError_t ferry_cuda_fill(cudaStream_t s, bf16 *out, float value, long n);
/* AdamW as the CPU's adamw_update, on float param/m/v/grad; also writes
 * param_copy (bf16) = new param when param_copy != NULL. */
cudaError_t ferry_cuda_adamw(cudaStream_t s, float *param, bf16 *param_copy, float *m, float *v,
			     const float *grad, long n, float lr, float beta1, float beta2, float eps,
			     float weight_decay, float grad_scale, int t);
/* param -= lr * grad; param_copy = param when non-NULL */
cudaError_t ferry_cuda_sgd(cudaStream_t s, float *param, bf16 *param_copy, const float *grad, float lr,
			   long n);
/* *result (device double) += sum(x^2) over float x / += sum(x) over bf16
 * x; deterministic (fixed block count, fixed combination order), using ws. */
cudaError_t ferry_cuda_sum_squares(cudaStream_t s, double *result, const float *x, long n, void *ws,
				   size_t ws_bytes);
/* The block sums of ferry_cuda_sum_squares for the blocks of an n-element
 * array that start in [lo, hi) (x holds elements lo on; lo a block's
 * start), 0 for the others, into parts[SUM_BLOCKS]: the CPU's
 * ferry_cpu_sum_squares_parts, so the ranks' parts added up and then in
 * order give the whole array's sum (ZeRO-2's gradient norm). */
cudaError_t ferry_cuda_sum_squares_parts(cudaStream_t s, double *parts, const float *x, long n, long lo, long hi);
cudaError_t ferry_cuda_sum(cudaStream_t s, double *result, const bf16 *x, long n, void *ws,
			   size_t ws_bytes);
/* e = pred - target: dpred = scale * e (bf16), *result (device double) +=
 * sum(e^2), deterministic as the sums above, using ws. */
cudaError_t ferry_cuda_squared_error(cudaStream_t s, double *result, bf16 *dpred, const bf16 *pred,
				     const float *target, float scale, long n, void *ws, size_t ws_bytes);
/* dbias[OC] += column sums of dout [N, OC] (float out, bf16 in) */
cudaError_t ferry_cuda_bias_backward(cudaStream_t s, float *dbias, const bf16 *dout, int N, int OC);
/* out[N, OC] += bias[OC] broadcast over rows */
cudaError_t ferry_cuda_bias_add(cudaStream_t s, bf16 *out, const bf16 *bias, int N, int OC);

/* ---- kernels_norm_attn.cu ------------------------------------------------ */
cudaError_t ferry_cuda_layernorm_forward(cudaStream_t s, bf16 *out, float *mean, float *rstd,
					 const bf16 *inp, const bf16 *weight, const bf16 *bias, int N, int C);
/* dinp (bf16) +=, dweight/dbias (float) += */
cudaError_t ferry_cuda_layernorm_backward(cudaStream_t s, bf16 *dinp, float *dweight, float *dbias,
					  const bf16 *dout, const bf16 *inp, const bf16 *weight,
					  const float *mean, const float *rstd, int N, int C, void *ws,
					  size_t ws_bytes);
/* Attention's constants (the op's scalar[0..2]): the sliding window, keys
 * per query (0: every earlier key; negative: cudaErrorInvalidValue), the
 * score scale (<= 0: 1/sqrt(HS)) and the scores' soft cap (<= 0: none). */
struct ferry_cuda_att_consts {
	int window;
	float scale;
	float cap;
};
/* Causal attention, q/out [B, T, C], head h on channels h*HS.. (HS = C/NH);
 * k/v [B, T, NKV*HS] with NKV kv heads (grouped-query; NKV divides NH, 0
 * means NH): query head h reads kv head h / (NH/NKV).  Saves lse [B, NH, T]
 * (float).  Flash-style: no T x T matrix in memory.  Backward sums the
 * query heads of a group into dk/dv in a fixed order (no atomics).  With
 * pos, query (b, t) sees only keys t - pos[b, t] .. t (its document). */
cudaError_t ferry_cuda_attention_forward(cudaStream_t s, bf16 *out, float *lse, const bf16 *q,
					 const bf16 *k, const bf16 *v, const int32_t *pos, int B, int T, int C,
					 int NH, int NKV, struct ferry_cuda_att_consts ac);
cudaError_t ferry_cuda_attention_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
					  const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
					  const float *lse, const int32_t *pos, int B, int T, int C, int NH,
					  int NKV, struct ferry_cuda_att_consts ac, void *ws, size_t ws_bytes);
/* kernels_flash_attn.cu: the same on tensor cores, for head sizes 32, 64,
 * 96, 128 with 16-byte aligned arrays and no window, scale or cap (pos
 * taken); cudaErrorNotSupported for other shapes (then the kernels above
 * run).  Dws: B * NH * T floats. */
cudaError_t ferry_cuda_flash_attention_forward(cudaStream_t s, bf16 *out, float *lse, const bf16 *q,
					       const bf16 *k, const bf16 *v, const int32_t *pos, int B, int T,
					       int C, int NH, int NKV);
cudaError_t ferry_cuda_flash_attention_backward(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv,
						const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
						const bf16 *out, const float *lse, const int32_t *pos, float *Dws,
						int B, int T, int C, int NH, int NKV);
/* Scratch bytes the two launchers above need in ws. */
size_t ferry_cuda_layernorm_backward_ws_bytes(int N, int C);
/* Scratch of ferry_cuda_sum, ferry_cuda_sum_squares and ferry_cuda_squared_error. */
size_t ferry_cuda_sum_ws_bytes(void);
size_t ferry_cuda_attention_backward_ws_bytes(int B, int T, int C, int NH);

/* losses[N] (float) and probs (bf16, may alias logits) over the first V of
 * Vp columns, padding columns 0; a target below 0 is not counted: loss 0 */
cudaError_t ferry_cuda_softmax_xent_forward(cudaStream_t s, float *losses, bf16 *probs, const bf16 *logits,
					    const int32_t *targets, int N, int V, int Vp);
/* dlogits = dloss * (probs - onehot), WRITES (may alias probs); a row
 * whose target is below 0 gets 0 */
cudaError_t ferry_cuda_softmax_xent_backward(cudaStream_t s, bf16 *dlogits, const bf16 *probs,
					     const int32_t *targets, float dloss, int N, int V, int Vp);

/* ---- kernels_llama.cu ------------------------------------------------------ */
/* RMSNorm (Llama): rstd[N] (float) = 1 / sqrt(mean(x^2) + eps) per row of
 * C, out = x * rstd * gain, gain = weight + offset (Gemma's 1 + w; offset
 * 0: weight itself, Llama's).  rstd may be NULL. */
cudaError_t ferry_cuda_rmsnorm_forward(cudaStream_t s, bf16 *out, float *rstd, const bf16 *inp,
				       const bf16 *weight, int N, int C, float eps, float offset);
/* dinp (bf16) +=, dweight (float) += (either may be NULL); ws: see below */
cudaError_t ferry_cuda_rmsnorm_backward(cudaStream_t s, bf16 *dinp, float *dweight, const bf16 *dout,
					const bf16 *inp, const bf16 *weight, const float *rstd, int N, int C,
					float offset, void *ws, size_t ws_bytes);
size_t ferry_cuda_rmsnorm_backward_ws_bytes(int N, int C);
/* Rotary embedding (HF rotate_half) on [B, T, NH, HS], C = NH * HS, HS
 * even, row (b, t) at position t (pos NULL) or pos[b, t]; rf the base and scaling
 * (ops/rope_freq.h, the CPU's formula).  Forward writes out
 * (may equal inp); backward dinp += the inverse rotation of dout. */
cudaError_t ferry_cuda_rope_forward(cudaStream_t s, bf16 *out, const bf16 *inp, const int32_t *pos, int B, int T,
				    int C, int NH, struct ferry_rope_freq rf);
cudaError_t ferry_cuda_rope_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const int32_t *pos, int B,
				     int T, int C, int NH, struct ferry_rope_freq rf);
/* out = silu(gate) * up over n values (out may alias gate or up); backward
 * dgate +=, dup += (either may be NULL). */
cudaError_t ferry_cuda_swiglu_forward(cudaStream_t s, bf16 *out, const bf16 *gate, const bf16 *up, long n);
cudaError_t ferry_cuda_swiglu_backward(cudaStream_t s, bf16 *dgate, bf16 *dup, const bf16 *dout,
				       const bf16 *gate, const bf16 *up, long n);

/* ---- kernels_elementwise.cu: Gemma 2's ---------------------------------------- */
/* GeGLU: out = gelu_tanh(gate) * up over n values (out may alias gate or
 * up); backward dgate += dout * up * gelu'(gate), dup += dout *
 * gelu(gate) (either may be NULL). */
cudaError_t ferry_cuda_geglu_forward(cudaStream_t s, bf16 *out, const bf16 *gate, const bf16 *up, long n);
cudaError_t ferry_cuda_geglu_backward(cudaStream_t s, bf16 *dgate, bf16 *dup, const bf16 *dout,
				      const bf16 *gate, const bf16 *up, long n);
/* out = inp * scale, the scale first rounded to bf16 (the activation type,
 * as transformers casts Gemma's normalizer); backward dinp += dout * that
 * scale, or with assign dinp = ... (dinp may be dout). */
cudaError_t ferry_cuda_scale_forward(cudaStream_t s, bf16 *out, const bf16 *inp, float scale, long n);
cudaError_t ferry_cuda_scale_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, float scale, long n,
				      bool assign);
/* Soft cap: out = cap tanh(inp / cap) (cap <= 0: out = inp); backward
 * dinp += dout (1 - tanh^2(inp / cap)), or with assign dinp = ... (dinp
 * may be dout or inp). */
cudaError_t ferry_cuda_softcap_forward(cudaStream_t s, bf16 *out, const bf16 *inp, float cap, long n);
cudaError_t ferry_cuda_softcap_backward(cudaStream_t s, bf16 *dinp, const bf16 *dout, const bf16 *inp,
					float cap, long n, bool assign);

#ifdef __cplusplus
}
#endif
#endif
