/*
 * Float64 reference implementations of the CPU kernels' forward passes (and
 * of the AdamW step), written as plainly as possible: the ground truth for
 * the kernel tests and for finite-difference gradient checks of whole models.
 * Header-only (static functions): each tests/test_*.c is its own program.
 *
 * Layouts and semantics are exactly those of src/ops/cpu/kernels.h, with
 * double in place of float.  Optional outputs (mean/rstd, lse, probs) and
 * the matmul bias may be NULL.  The Llama ops (RMSNorm, RoPE, SwiGLU and
 * grouped-query attention) follow Hugging Face's formulas literally.
 */
#ifndef FERRY_TESTS_REF_OPS_H
#define FERRY_TESTS_REF_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :] */
static inline void ref_encoder_forward(double *out, const int32_t *tokens,
				       const double *wte, const double *wpe,
				       int B, int T, int C)
{
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			const size_t n = (size_t)b * T + t;
			const double *e = wte + (size_t)tokens[n] * C;
			const double *p = wpe + (size_t)t * C;
			for (int c = 0; c < C; c++)
				out[n * C + c] = e[c] + p[c];
		}
}

/* out = (x - mean) / sqrt(var + 1e-5) * weight + bias per row (biased var) */
static inline void ref_layernorm_forward(double *out, double *mean,
					 double *rstd, const double *inp,
					 const double *weight,
					 const double *bias, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const double *x = inp + (size_t)n * C;
		double m = 0.0, var = 0.0;
		for (int c = 0; c < C; c++)
			m += x[c];
		m /= C;
		for (int c = 0; c < C; c++)
			var += (x[c] - m) * (x[c] - m);
		var /= C;
		const double r = 1.0 / sqrt(var + 1e-5);
		for (int c = 0; c < C; c++)
			out[(size_t)n * C + c] =
				(x[c] - m) * r * weight[c] + bias[c];
		if (mean)
			mean[n] = m;
		if (rstd)
			rstd[n] = r;
	}
}

/* out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias[OC] (bias may be NULL) */
static inline void ref_matmul_forward(double *out, const double *inp,
				      const double *weight, const double *bias,
				      int N, int C, int OC)
{
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++) {
			double s = bias ? bias[o] : 0.0;
			for (int c = 0; c < C; c++)
				s += inp[(size_t)n * C + c] *
				     weight[(size_t)o * C + c];
			out[(size_t)n * OC + o] = s;
		}
}

/* Causal softmax attention, grouped-query: q and out are [B, T, NH * HS]
 * (C = NH * HS), k and v [B, T, NKV * HS]; query head h uses key/value head
 * h / (NH / NKV) (Hugging Face repeat_kv).  Scores scaled by 1/sqrt(HS);
 * lse[B, NH, T] (may be NULL) gets log sum exp of each query's scores.
 * Materialises each score row (test code may allocate). */
/* With a sliding window W > 0 (Mistral), query t attends to keys
 * t - W < t2 <= t only, as transformers' sliding-window causal mask.
 * Gemma 2: scale > 0 replaces 1/sqrt(HS) (query_pre_attn_scalar^-1/2), and
 * cap > 0 soft-caps each scaled score, s -> cap tanh(s / cap), as
 * transformers' eager_attention_forward. */
static inline void ref_attention_capped_forward(double *out, double *lse,
						const double *q, const double *k,
						const double *v, int B, int T,
						int C, int NH, int NKV, int W,
						double scale_given, double cap)
{
	const int HS = C / NH, G = NH / NKV, KVC = NKV * HS;
	const double scale = scale_given > 0 ? scale_given : 1.0 / sqrt((double)HS);
	double *s = (double *)malloc(sizeof(double) * (size_t)T);
	if (!s) {
		fprintf(stderr, "ref_attention_forward: out of memory\n");
		exit(1);
	}
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const size_t base =
					(size_t)b * T * C + (size_t)h * HS;
				const size_t kvbase = (size_t)b * T * KVC +
						      (size_t)(h / G) * HS;
				const double *qt = q + base + (size_t)t * C;
				double m = -INFINITY, z = 0.0;
				const int lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;
				for (int t2 = lo; t2 <= t; t2++) {
					const double *kk =
						k + kvbase + (size_t)t2 * KVC;
					double d = 0.0;
					for (int i = 0; i < HS; i++)
						d += qt[i] * kk[i];
					s[t2] = cap > 0 ? cap * tanh(d * scale / cap) : d * scale;
					m = fmax(m, s[t2]);
				}
				for (int t2 = lo; t2 <= t; t2++) {
					s[t2] = exp(s[t2] - m);
					z += s[t2];
				}
				double *ot = out + base + (size_t)t * C;
				for (int i = 0; i < HS; i++) {
					double acc = 0.0;
					for (int t2 = lo; t2 <= t; t2++)
						acc += s[t2] / z *
						       v[kvbase +
							 (size_t)t2 * KVC + i];
					ot[i] = acc;
				}
				if (lse)
					lse[((size_t)b * NH + h) * T + t] =
						m + log(z);
			}
	free(s);
}

static inline void ref_attention_window_forward(double *out, double *lse,
						const double *q, const double *k,
						const double *v, int B, int T,
						int C, int NH, int NKV, int W)
{
	ref_attention_capped_forward(out, lse, q, k, v, B, T, C, NH, NKV, W, 0.0, 0.0);
}

static inline void ref_attention_gqa_forward(double *out, double *lse,
					     const double *q, const double *k,
					     const double *v, int B, int T,
					     int C, int NH, int NKV)
{
	ref_attention_window_forward(out, lse, q, k, v, B, T, C, NH, NKV, 0);
}

/* Causal multi-head attention: the above with NKV = NH (k, v [B, T, C]). */
static inline void ref_attention_forward(double *out, double *lse,
					 const double *q, const double *k,
					 const double *v, int B, int T, int C,
					 int NH)
{
	ref_attention_gqa_forward(out, lse, q, k, v, B, T, C, NH, NH);
}

/* RMSNorm, as Hugging Face's LlamaRMSNorm: variance = mean(x^2),
 * y = weight * (x * rsqrt(variance + eps)); rstd (may be NULL) gets
 * rsqrt(variance + eps) per row.  Gemma2RMSNorm scales by (1 + weight):
 * offset 1. */
static inline void ref_rmsnorm_offset_forward(double *out, double *rstd,
					      const double *inp, const double *weight,
					      int N, int C, double eps, double offset)
{
	for (int n = 0; n < N; n++) {
		const double *x = inp + (size_t)n * C;
		double var = 0.0;
		for (int c = 0; c < C; c++)
			var += x[c] * x[c];
		var /= C;
		const double r = 1.0 / sqrt(var + eps);
		for (int c = 0; c < C; c++)
			out[(size_t)n * C + c] = (offset + weight[c]) * (x[c] * r);
		if (rstd)
			rstd[n] = r;
	}
}

static inline void ref_rmsnorm_forward(double *out, double *rstd,
				       const double *inp, const double *weight,
				       int N, int C, double eps)
{
	ref_rmsnorm_offset_forward(out, rstd, inp, weight, N, C, eps, 0.0);
}

/* transformers' rope_scaling (modeling_rope_utils.py), written from its
 * formulas in double: type 0 none, 1 "linear" (inv_freq / factor), 2
 * "llama3" (_compute_llama3_parameters: by wavelength 2 pi / inv_freq,
 * above orig / low divided by factor, below orig / high kept, between
 * smoothed with s = (orig / wavelen - low) / (high - low)). */
struct ref_rope_scaling {
	int type;
	double factor, low, high, orig;
};

static inline double ref_rope_scale(double inv, const struct ref_rope_scaling *s)
{
	if (!s || s->type == 0)
		return inv;
	if (s->type == 1)
		return inv / s->factor;
	const double wavelen = 2.0 * M_PI / inv;
	const double low_wavelen = s->orig / s->low, high_wavelen = s->orig / s->high;
	const double llama = wavelen > low_wavelen ? inv / s->factor : inv;
	if (wavelen < high_wavelen || wavelen > low_wavelen)
		return llama;
	const double smooth = (s->orig / wavelen - s->low) / (s->high - s->low);
	return (1.0 - smooth) * llama / s->factor + smooth * llama;
}

/* Hugging Face's rotary frequencies (LlamaRotaryEmbedding): freqs[t, i] =
 * t * inv_freq[i], inv_freq = 1 / theta^(arange(0, HS, 2) / HS) scaled as
 * sc says (NULL: not), for t < T, i < HS/2.  hf_float32: with HF's float32
 * roundings (of arange / HS, of the power, of the division, of the scaled
 * frequency and of the product), else exactly in double. */
static inline void ref_rope_freqs_scaled(double *freqs, int T, int HS, double theta,
					 const struct ref_rope_scaling *sc, int hf_float32)
{
	const int half = HS / 2;
	for (int i = 0; i < half; i++) {
		double inv;
		if (hf_float32) {
			const float e = (float)(2 * i) / (float)HS;
			inv = (double)(1.0f / (float)pow(theta, (double)e));
			inv = (double)(float)ref_rope_scale(inv, sc);
		} else {
			inv = ref_rope_scale(1.0 / pow(theta, (double)(2 * i) / HS), sc);
		}
		for (int t = 0; t < T; t++)
			freqs[(size_t)t * half + i] =
				hf_float32 ? (double)((float)t * (float)inv)
					   : (double)t * inv;
	}
}

static inline void ref_rope_freqs(double *freqs, int T, int HS, double theta,
				  int hf_float32)
{
	ref_rope_freqs_scaled(freqs, T, HS, theta, NULL, hf_float32);
}

/* Rotary position embedding, written as Hugging Face's apply_rotary_pos_emb
 * on inp/out [B, T, NH, HS]: emb = cat(freqs, freqs), cos = cos(emb),
 * sin = sin(emb), out = x * cos + rotate_half(x) * sin with rotate_half(x) =
 * cat(-x2, x1), x1 = x[:HS/2], x2 = x[HS/2:].  freqs[T, HS/2] from
 * ref_rope_freqs. */
static inline void ref_rope_forward(double *out, const double *inp,
				    const double *freqs, int B, int T, int NH,
				    int HS)
{
	const int half = HS / 2;
	double *emb = (double *)malloc(sizeof(double) * (size_t)HS);
	double *rot = (double *)malloc(sizeof(double) * (size_t)HS);
	if (!emb || !rot) {
		fprintf(stderr, "ref_rope_forward: out of memory\n");
		exit(1);
	}
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			for (int i = 0; i < HS; i++) /* cat(freqs, freqs) */
				emb[i] = freqs[(size_t)t * half + i % half];
			for (int h = 0; h < NH; h++) {
				const size_t o =
					(((size_t)b * T + t) * NH + h) * HS;
				const double *x = inp + o;
				for (int i = 0; i < half; i++) {
					rot[i] = -x[half + i]; /* -x2 */
					rot[half + i] = x[i];  /* x1 */
				}
				for (int i = 0; i < HS; i++)
					out[o + i] = x[i] * cos(emb[i]) +
						     rot[i] * sin(emb[i]);
			}
		}
	free(emb);
	free(rot);
}

/* SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + e^-x) */
static inline void ref_swiglu_forward(double *out, const double *gate,
				      const double *up, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

/* GELU, tanh form */
static inline void ref_gelu_forward(double *out, const double *inp, long n)
{
	const double k = 0.79788456080286535588 /* sqrt(2 / pi) */;
	for (long i = 0; i < n; i++) {
		const double x = inp[i];
		out[i] = 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
	}
}

/* GeGLU (Gemma's MLP): out = gelu_tanh(gate) * up */
static inline void ref_geglu_forward(double *out, const double *gate,
				     const double *up, long n)
{
	ref_gelu_forward(out, gate, n);
	for (long i = 0; i < n; i++)
		out[i] *= up[i];
}

/* Soft-capping (Gemma 2's logits): out = cap tanh(x / cap) */
static inline void ref_softcap_forward(double *out, const double *inp,
				       double cap, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = cap * tanh(inp[i] / cap);
}

/* out = a + b */
static inline void ref_residual_forward(double *out, const double *a,
					const double *b, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

/* Softmax over the first V of Vp columns; losses[i] = -log p[targets[i]].
 * probs (may be NULL) gets 0 in the padding columns. */
static inline void ref_softmax_xent_forward(double *losses, double *probs,
					    const double *logits,
					    const int32_t *targets, int N,
					    int V, int Vp)
{
	for (int n = 0; n < N; n++) {
		const double *x = logits + (size_t)n * Vp;
		double m = -INFINITY, z = 0.0;
		for (int j = 0; j < V; j++)
			m = fmax(m, x[j]);
		for (int j = 0; j < V; j++)
			z += exp(x[j] - m);
		losses[n] = log(z) + m - x[targets[n]];
		if (probs) {
			for (int j = 0; j < V; j++)
				probs[(size_t)n * Vp + j] = exp(x[j] - m) / z;
			for (int j = V; j < Vp; j++)
				probs[(size_t)n * Vp + j] = 0.0;
		}
	}
}

/* Mean of the N losses (the usual training loss). */
static inline double ref_softmax_xent_mean_loss(const double *logits,
						const int32_t *targets, int N,
						int V, int Vp)
{
	double *losses = (double *)malloc(sizeof(double) * (size_t)N);
	if (!losses) {
		fprintf(stderr, "ref_softmax_xent_mean_loss: out of memory\n");
		exit(1);
	}
	ref_softmax_xent_forward(losses, NULL, logits, targets, N, V, Vp);
	double s = 0.0;
	for (int n = 0; n < N; n++)
		s += losses[n];
	free(losses);
	return s / N;
}

/* AdamW step t >= 1: g = grad * grad_scale, bias-corrected moments,
 * decoupled weight decay. */
static inline void ref_adamw_update(double *param, double *m, double *v,
				    const double *grad, long n, double lr,
				    double beta1, double beta2, double eps,
				    double weight_decay, double grad_scale,
				    int t)
{
	const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
	for (long i = 0; i < n; i++) {
		const double g = grad[i] * grad_scale;
		m[i] = beta1 * m[i] + (1.0 - beta1) * g;
		v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
		const double mhat = m[i] / bc1, vhat = v[i] / bc2;
		param[i] -= lr * (mhat / (sqrt(vhat) + eps) +
				  weight_decay * param[i]);
	}
}

#endif
