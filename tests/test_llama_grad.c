/*
 * Whole-model gradient check of the Llama family on the CPU backend: Llama
 * (with and without rope_scaling), Qwen 2 (Llama with q, k, v biases, and
 * its sliding window from max_window_layers on), Mistral (a sliding window
 * on every layer) and Gemma 2 (RMSNorm by 1 + w, norms before and after
 * attention and MLP, GeGLU, the embedding times sqrt(C), scores scaled by
 * query_pre_attn_scalar^-1/2 and soft-capped, a window on the even layers,
 * soft-capped logits).
 *
 * The parameter layout is written out here from Hugging Face's
 * LlamaForCausalLM (module names, [out, in] weights, no biases), independently
 * of ferry's declaration, and checked against ferry_model_param_info: names,
 * hf_name per layer, stacking [L, ...], shapes, offsets, sizes, and a tied LM
 * head that has no storage.
 *
 * For tiny configurations with random parameters (matrices and the
 * embedding N(0, PARAM_STD), norm gains 1 + N(0, PARAM_STD), padding rows
 * of the embedding included):
 *   forward   ferry's fp32 mean loss vs a float64 reference model composed
 *             from the ref_ops.h forwards (RMSNorm, RoPE as HF's rotate_half
 *             with exact double angles, grouped-query attention, SwiGLU),
 *             relative error < LOSS_TOL;
 *   backward  ferry's analytic gradient vs a central finite difference of
 *             the float64 reference loss, for every parameter, normalised
 *             error per tensor < GRAD_TOL; every tensor's gradient nonzero;
 *   padding   rows V..Vp-1 of the embedding (and of an untied head) get
 *             gradient exactly 0 (numeric ~0 too);
 *   contract  a second forward + backward without zero_grad doubles the
 *             gradient; a repeated zero_grad + forward + backward gives
 *             bit-identical gradients;
 *   init      ferry_model_init_random: norm gains exactly 1, weights and the
 *             embedding mean ~0 and std ~0.02 (Hugging Face's
 *             initializer_range, no residual scaling), padding rows 0.
 */
#include "ferry/backend.h"
#include "ferry/model.h"
#include "ref_ops.h"
#include "test_util.h"

#include <time.h>

/* With weights of std 0.3 and gains ~1 the two-layer case is ill-conditioned
 * (moving every parameter by half an ulp moves the float64 gradient by 2e-6,
 * normalised) and fp32 lands up to 8e-6 away; 0.2 keeps it well-conditioned
 * while every gradient stays large. */
#define PARAM_STD 0.2f
#define LOSS_TOL 1e-6 /* observed <= 6.2e-8 over 8 seeds */
#define GRAD_TOL 1e-5 /* observed <= 1.7e-6 over 8 seeds (fp32 vs float64) */
#define CONTRACT_TOL 1e-6
#define FD_STEP 1e-5
#define PAD_FD_TOL 1e-12
#define INIT_STD 0.02

struct gcase {
	const char *name;
	struct ferry_model_config cfg; /* as the user gives it (0: defaults) */
	int create_B, create_T;        /* the model's size */
	int B, T;                      /* the batch checked (<= the model's size) */
	uint64_t seed;
};

/* ---- Hugging Face's Llama parameter layout, written out ------------------ */

/* Qwen2ForCausalLM is the same with a bias on q_proj, k_proj and v_proj
 * (in ferry's array after Llama's tensors; absent for a Llama);
 * Gemma2ForCausalLM with two more norms per layer (after Llama's). */
enum {
	EMBED, IN_NORM, QW, KW, VW, OW, POST_NORM, GATEW, UPW, DOWNW, NORM, LM_HEAD, QB, KB, VB, PRE_FFW, POST_FFW,
	N_PARAMS
};

static const struct {
	const char *name;   /* the module's own name */
	const char *module; /* its path in LlamaForCausalLM (per layer: below model.layers.N) */
	bool per_layer;
	bool gain;          /* an RMSNorm gain */
	bool bias;          /* Qwen2's: module.bias, zero at init */
} hf[N_PARAMS] = {
	[EMBED] = { "embed_tokens", "model.embed_tokens", false, false },
	[IN_NORM] = { "input_layernorm", "input_layernorm", true, true },
	[QW] = { "q_proj", "self_attn.q_proj", true, false },
	[KW] = { "k_proj", "self_attn.k_proj", true, false },
	[VW] = { "v_proj", "self_attn.v_proj", true, false },
	[OW] = { "o_proj", "self_attn.o_proj", true, false },
	[POST_NORM] = { "post_attention_layernorm", "post_attention_layernorm", true, true },
	[GATEW] = { "gate_proj", "mlp.gate_proj", true, false },
	[UPW] = { "up_proj", "mlp.up_proj", true, false },
	[DOWNW] = { "down_proj", "mlp.down_proj", true, false },
	[NORM] = { "norm", "model.norm", false, true },
	[LM_HEAD] = { "lm_head", "lm_head", false, false },
	[QB] = { "q_bias", "self_attn.q_proj", true, false, true },
	[KB] = { "k_bias", "self_attn.k_proj", true, false, true },
	[VB] = { "v_bias", "self_attn.v_proj", true, false, true },
	[PRE_FFW] = { "pre_feedforward_layernorm", "pre_feedforward_layernorm", true, true },
	[POST_FFW] = { "post_feedforward_layernorm", "post_feedforward_layernorm", true, true },
};

/* The completed dimensions the layout depends on. */
struct dims {
	int L, C, NH, NKV, HS, QD, KVD, F, V, Vp;
	bool tied;
	bool qkv_bias; /* Qwen 2 */
	bool gemma;    /* Gemma 2 */
	int window, window_every, window_from; /* sliding window, on the layers l >= from, l % every == 0 */
	double eps, theta;
	double attn_scale, attn_cap, final_cap; /* Gemma 2 (0: 1/sqrt(HS), none, none) */
	struct ref_rope_scaling rs;
};

static struct dims dims_of(const struct ferry_model_config *c)
{
	struct dims d = { .L = c->layers, .C = c->channels, .NH = c->heads, .NKV = c->kv_heads,
			  .HS = c->head_size, .F = c->ffn, .V = c->vocab, .Vp = c->padded_vocab,
			  .tied = c->tie_embeddings > 0, .eps = c->norm_eps, .theta = c->rope_theta,
			  .qkv_bias = !strcmp(c->arch, "qwen2"), .gemma = !strcmp(c->arch, "gemma2"),
			  .window = c->sliding_window, .window_every = c->window_layers_every,
			  .window_from = c->window_layers_from,
			  .attn_scale = c->query_pre_attn_scalar ? pow(c->query_pre_attn_scalar, -0.5) : 0.0,
			  .attn_cap = c->attn_softcap > 0 ? c->attn_softcap : 0.0,
			  .final_cap = c->final_softcap > 0 ? c->final_softcap : 0.0,
			  .rs = { c->rope_scaling.type, c->rope_scaling.factor, c->rope_scaling.low_freq_factor,
				  c->rope_scaling.high_freq_factor, c->rope_scaling.original_max_pos } };

	d.QD = d.NH * d.HS;
	d.KVD = d.NKV * d.HS;
	return d;
}

/* One layer's shape of parameter p, [out, in] for the linear maps. */
static int hf_shape(const struct dims *d, int p, int64_t shape[2])
{
	switch (p) {
	case EMBED: case LM_HEAD: shape[0] = d->Vp; shape[1] = d->C; return 2;
	case IN_NORM: case POST_NORM: case NORM: case PRE_FFW: case POST_FFW: shape[0] = d->C; return 1;
	case QW: shape[0] = d->QD; shape[1] = d->C; return 2;
	case KW: case VW: shape[0] = d->KVD; shape[1] = d->C; return 2;
	case OW: shape[0] = d->C; shape[1] = d->QD; return 2;
	case GATEW: case UPW: shape[0] = d->F; shape[1] = d->C; return 2;
	case DOWNW: shape[0] = d->C; shape[1] = d->F; return 2;
	case QB: shape[0] = d->QD; return 1;
	case KB: case VB: shape[0] = d->KVD; return 1;
	}
	return 0;
}

/* Elements of parameter p over all layers (0 for a tied head), its offset in
 * the array (declaration order, absent tensors take no room); returns the
 * array's length. */
static size_t hf_layout(const struct dims *d, size_t size[N_PARAMS], size_t off[N_PARAMS])
{
	size_t total = 0;

	for (int p = 0; p < N_PARAMS; p++) {
		int64_t s[2] = { 1, 1 };

		hf_shape(d, p, s);
		size[p] = (size_t)(s[0] * s[1]) * (hf[p].per_layer ? (size_t)d->L : 1);
		if ((p == LM_HEAD && d->tied) || (hf[p].bias && !d->qkv_bias) ||
		    ((p == PRE_FFW || p == POST_FFW) && !d->gemma))
			size[p] = 0;
		off[p] = total;
		total += size[p];
	}
	return total;
}

/* Parameter tensors of the family: Llama's 12, Qwen 2's 15, Gemma 2's 14. */
static int n_params(const struct dims *d)
{
	return d->qkv_bias ? PRE_FFW : d->gemma ? QB + 2 : QB;
}

/* The layout entry of ferry's parameter i (Gemma 2's norms follow Llama's
 * tensors in ferry's array). */
static int fam_param(const struct dims *d, int i)
{
	return d->gemma && i >= QB ? i - QB + PRE_FFW : i;
}

/* Hugging Face's name of parameter p in layer l. */
static void hf_name(char *buf, size_t n, int p, int l)
{
	if (hf[p].per_layer)
		snprintf(buf, n, "model.layers.%d.%s.%s", l, hf[p].module, hf[p].bias ? "bias" : "weight");
	else
		snprintf(buf, n, "%s.weight", hf[p].module);
}

#define OK(call) CHECK((call) == FERRY_OK, "%s: %s", #call, ferry_last_error())

/* ferry's hf_name format for layer l; refuses formats other than one %d. */
static bool ferry_hf_name(char *buf, size_t n, const char *fmt, bool per_layer, int l)
{
	const char *pc = strchr(fmt, '%');

	if (!per_layer)
		return !pc && snprintf(buf, n, "%s", fmt) > 0;
	if (!pc || pc[1] != 'd' || strchr(pc + 2, '%'))
		return false;
	snprintf(buf, n, "%.*s%d%s", (int)(pc - fmt), fmt, l, pc + 2);
	return true;
}

/* ferry's declared parameters are Hugging Face's, in this order and layout. */
static void check_layout(const struct gcase *gc, const struct dims *d)
{
	size_t size[N_PARAMS], off[N_PARAMS];
	const size_t total = hf_layout(d, size, off);
	struct ferry_model_config c = gc->cfg;

	const int np = n_params(d);

	OK(ferry_model_config_complete(&c));
	CHECK(ferry_model_param_tensors(&c) == np, "%s: %d parameter tensors", gc->name,
	      ferry_model_param_tensors(&c));
	CHECK(ferry_model_config_num_params(&c) == total, "%s: %zu parameters, Hugging Face %zu", gc->name,
	      ferry_model_config_num_params(&c), total);
	for (int i = 0; i < np && i < ferry_model_param_tensors(&c); i++) {
		const int p = fam_param(d, i);
		struct ferry_param_info pi;
		int64_t shape[2] = { 0, 0 };
		const int ndim = hf_shape(d, p, shape);
		const bool present = !(p == LM_HEAD && d->tied);

		OK(ferry_model_param_info(&c, i, &pi));
		CHECK(pi.name && !strcmp(pi.name, hf[p].name), "%s: parameter %d is %s, expected %s", gc->name, i,
		      pi.name ? pi.name : "(null)", hf[p].name);
		CHECK(ferry_model_param_find(&c, hf[p].name) == i, "%s: param_find(%s) = %d, expected %d", gc->name,
		      hf[p].name, ferry_model_param_find(&c, hf[p].name), i);
		CHECK(pi.layers == (hf[p].per_layer ? d->L : 0), "%s: %s stacked over %d layers", gc->name,
		      hf[p].name, pi.layers);
		CHECK(pi.ndim == ndim && pi.shape[0] == shape[0] && (ndim < 2 || pi.shape[1] == shape[1]),
		      "%s: %s shape %dd [%lld, %lld], Hugging Face %dd [%lld, %lld]", gc->name, hf[p].name, pi.ndim,
		      (long long)pi.shape[0], (long long)(pi.ndim > 1 ? pi.shape[1] : 0), ndim,
		      (long long)shape[0], (long long)(ndim > 1 ? shape[1] : 0));
		CHECK(pi.present == present, "%s: %s present %d, expected %d", gc->name, hf[p].name, pi.present,
		      present);
		CHECK(pi.numel == size[p] && pi.offset == off[p], "%s: %s: %zu at %zu, expected %zu at %zu",
		      gc->name, hf[p].name, pi.numel, pi.offset, size[p], off[p]);
		CHECK(!present || pi.layer_numel * (size_t)(pi.layers ? pi.layers : 1) == pi.numel,
		      "%s: %s: layer slice %zu x %d != %zu", gc->name, hf[p].name, pi.layer_numel, pi.layers,
		      pi.numel);
		CHECK(pi.hf_name != NULL, "%s: %s has no Hugging Face name", gc->name, hf[p].name);
		for (int l = 0; pi.hf_name && l < (hf[p].per_layer ? d->L : 1); l++) {
			char want[128], got[128];

			hf_name(want, sizeof(want), p, l);
			CHECK(ferry_hf_name(got, sizeof(got), pi.hf_name, hf[p].per_layer, l) && !strcmp(got, want),
			      "%s: layer %d of %s: Hugging Face name '%s' (format '%s'), expected '%s'", gc->name, l,
			      hf[p].name, got, pi.hf_name, want);
		}
	}
}

/* ---- float64 reference Llama --------------------------------------------- */

struct refmodel {
	struct dims d;
	int B, T;
	const int32_t *inputs, *targets;
	size_t size[N_PARAMS], off[N_PARAMS];
	double *params; /* Hugging Face layout: the finite difference moves these */
	double *freqs;  /* [T, HS/2] rotary angles, exact */
	/* activations (one layer's worth, reused) */
	double *x, *ln, *qr, *kr, *q, *k, *v, *ctx, *out, *mid, *gate, *up, *h, *mlpwo, *logits;
};

static void ref_init(struct refmodel *r, const struct dims *d, int B, int T, const int32_t *inputs,
		     const int32_t *targets, const float *params)
{
	const size_t N = (size_t)B * T;
	size_t total;

	memset(r, 0, sizeof(*r));
	r->d = *d;
	r->B = B;
	r->T = T;
	r->inputs = inputs;
	r->targets = targets;
	total = hf_layout(d, r->size, r->off);
	r->params = TALLOC(double, total);
	to_double(r->params, params, (long)total);
	r->freqs = TALLOC(double, (size_t)T * d->HS / 2);
	ref_rope_freqs_scaled(r->freqs, T, d->HS, d->theta, &d->rs, 0);
	r->x = TALLOC(double, N * d->C);
	r->ln = TALLOC(double, N * d->C);
	r->qr = TALLOC(double, N * d->QD);
	r->kr = TALLOC(double, N * d->KVD);
	r->q = TALLOC(double, N * d->QD);
	r->k = TALLOC(double, N * d->KVD);
	r->v = TALLOC(double, N * d->KVD);
	r->ctx = TALLOC(double, N * d->QD);
	r->out = TALLOC(double, N * d->C);
	r->mid = TALLOC(double, N * d->C);
	r->gate = TALLOC(double, N * d->F);
	r->up = TALLOC(double, N * d->F);
	r->h = TALLOC(double, N * d->F);
	r->mlpwo = TALLOC(double, N * d->C);
	r->logits = TALLOC(double, N * d->Vp);
}

static void ref_free(struct refmodel *r)
{
	double *bufs[] = { r->params, r->freqs, r->x, r->ln, r->qr, r->kr, r->q, r->k, r->v, r->ctx,
			   r->out, r->mid, r->gate, r->up, r->h, r->mlpwo, r->logits };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		free(bufs[i]);
}

/* Tensor p of layer l (l = 0 for the unstacked ones). */
static const double *ref_w(const struct refmodel *r, int p, int l)
{
	const size_t stride = hf[p].per_layer ? r->size[p] / (size_t)r->d.L : 0;

	return r->params + r->off[p] + (size_t)l * stride;
}

/* Bias p of layer l, NULL for a Llama. */
static const double *ref_b(const struct refmodel *r, int p, int l)
{
	return r->d.qkv_bias ? ref_w(r, p, l) : NULL;
}

/* The window of layer l: the model's where its rule acts (0: none). */
static int ref_window(const struct dims *d, int l)
{
	return l >= d->window_from && (d->window_every <= 1 || l % d->window_every == 0) ? d->window : 0;
}

/* RMSNorm as the family's: Gemma2RMSNorm scales by 1 + w. */
static void ref_norm(const struct refmodel *r, double *out, const double *x, int p, int l)
{
	ref_rmsnorm_offset_forward(out, NULL, x, ref_w(r, p, l), r->B * r->T, r->d.C, r->d.eps,
				   r->d.gemma ? 1.0 : 0.0);
}

/* Layer l's attention from its input norm r->ln into r->out. */
static void ref_attention_block(struct refmodel *r, int l)
{
	const struct dims *d = &r->d;
	const int B = r->B, T = r->T, C = d->C, N = B * T;

	ref_matmul_forward(r->qr, r->ln, ref_w(r, QW, l), ref_b(r, QB, l), N, C, d->QD);
	ref_matmul_forward(r->kr, r->ln, ref_w(r, KW, l), ref_b(r, KB, l), N, C, d->KVD);
	ref_matmul_forward(r->v, r->ln, ref_w(r, VW, l), ref_b(r, VB, l), N, C, d->KVD);
	ref_rope_forward(r->q, r->qr, r->freqs, B, T, d->NH, d->HS);
	ref_rope_forward(r->k, r->kr, r->freqs, B, T, d->NKV, d->HS);
	ref_attention_capped_forward(r->ctx, NULL, r->q, r->k, r->v, B, T, d->QD, d->NH, d->NKV, ref_window(d, l),
				     d->attn_scale, d->attn_cap);
	ref_matmul_forward(r->out, r->ctx, ref_w(r, OW, l), NULL, N, d->QD, C);
}

/* Layer l's MLP from r->ln into r->mlpwo: SwiGLU, Gemma's GeGLU. */
static void ref_mlp_block(struct refmodel *r, int l)
{
	const struct dims *d = &r->d;
	const int N = r->B * r->T, C = d->C;
	const long NF = (long)N * d->F;

	ref_matmul_forward(r->gate, r->ln, ref_w(r, GATEW, l), NULL, N, C, d->F);
	ref_matmul_forward(r->up, r->ln, ref_w(r, UPW, l), NULL, N, C, d->F);
	(d->gemma ? ref_geglu_forward : ref_swiglu_forward)(r->h, r->gate, r->up, NF);
	ref_matmul_forward(r->mlpwo, r->h, ref_w(r, DOWNW, l), NULL, N, d->F, C);
}

/* One decoder layer, r->x to r->x.  Llama: x + attn(norm(x)), then
 * + mlp(norm(.)); Gemma 2 normalises each branch's output too
 * (post_attention_layernorm, post_feedforward_layernorm) and the MLP's
 * input with pre_feedforward_layernorm. */
static void ref_layer(struct refmodel *r, int l)
{
	const long NC = (long)r->B * r->T * r->d.C;
	const bool g = r->d.gemma;

	ref_norm(r, r->ln, r->x, IN_NORM, l);
	ref_attention_block(r, l);
	if (g)
		ref_norm(r, r->ln, r->out, POST_NORM, l);
	ref_residual_forward(r->mid, r->x, g ? r->ln : r->out, NC);
	ref_norm(r, r->ln, r->mid, g ? PRE_FFW : POST_NORM, l);
	ref_mlp_block(r, l);
	if (g)
		ref_norm(r, r->ln, r->mlpwo, POST_FFW, l);
	ref_residual_forward(r->x, r->mid, g ? r->ln : r->mlpwo, NC); /* the next layer's input */
}

/* The mean cross-entropy of the whole model, in float64. */
static double ref_loss(void *ctx)
{
	struct refmodel *r = ctx;
	const struct dims *d = &r->d;
	const int B = r->B, T = r->T, C = d->C, N = B * T;
	const double *embed = ref_w(r, EMBED, 0);
	/* Gemma: transformers' normalizer, sqrt(C) cast to the model's dtype
	   (float32 here) */
	const double normalizer = d->gemma ? (double)(float)sqrt((double)C) : 1.0;

	for (int n = 0; n < N; n++) /* token embedding, no positions */
		for (int c = 0; c < C; c++)
			r->x[(size_t)n * C + c] = embed[(size_t)r->inputs[n] * C + c] * normalizer;
	for (int l = 0; l < d->L; l++)
		ref_layer(r, l);
	ref_norm(r, r->ln, r->x, NORM, 0);
	ref_matmul_forward(r->logits, r->ln, ref_w(r, d->tied ? EMBED : LM_HEAD, 0), NULL, N, C, d->Vp);
	if (d->final_cap > 0)
		ref_softcap_forward(r->logits, r->logits, d->final_cap, (long)N * d->Vp);
	return ref_softmax_xent_mean_loss(r->logits, r->targets, N, d->V, d->Vp);
}

/* ---- the check ------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* forward with targets + backward (no zero_grad); returns the loss */
static float fwd_bwd(ferry_model_t m, const struct gcase *gc, const int32_t *in, const int32_t *tg)
{
	float loss = NAN;

	OK(ferry_model_forward(m, in, tg, gc->B, gc->T, &loss));
	OK(ferry_model_backward(m));
	return loss;
}

/* ferry_model_init_random: gains exactly 1, weights N(0, 0.02), padding rows
 * 0, and nothing stored for a tied head. */
static void check_init(ferry_model_t m, const struct gcase *gc, const struct dims *d)
{
	size_t size[N_PARAMS], off[N_PARAMS];
	const size_t n = hf_layout(d, size, off);
	float *p0 = TALLOC(float, n);
	double all_s = 0, all_ss = 0;
	size_t all_n = 0, sum_present = 0;

	OK(ferry_model_init_random(m, gc->seed + 100));
	OK(ferry_model_get_params(m, p0));
	for (int p = 0; p < n_params(d); p++) {
		struct ferry_param_info pi;

		OK(ferry_model_param_info(ferry_model_config(m), p, &pi));
		if (pi.present)
			sum_present += pi.numel;
	}
	CHECK(ferry_model_num_params(m) == sum_present && sum_present == n,
	      "%s: num_params %zu, present tensors %zu, Hugging Face %zu", gc->name, ferry_model_num_params(m),
	      sum_present, n);
	printf("  init: %-24s %6s %10s %10s\n", "tensor", "n", "mean", "std");
	for (int i = 0; i < n_params(d); i++) {
		const int p = fam_param(d, i);
		const float *x = p0 + off[p];
		size_t cnt = size[p];

		if (!size[p]) {
			printf("  init: %-24s   (tied to embed_tokens, no storage)\n", hf[p].name);
			continue;
		}
		if (hf[p].bias) {
			size_t nonzero = 0;

			for (size_t i = 0; i < cnt; i++)
				nonzero += x[i] != 0.0f;
			printf("  init: %-24s %6zu %10s %10s  (%zu not exactly 0)\n", hf[p].name, cnt, "0", "0", nonzero);
			CHECK(nonzero == 0, "%s: %zu values of %s are not 0 at init", gc->name, nonzero, hf[p].name);
			continue;
		}
		if (hf[p].gain) { /* Gemma's scale by 1 + w: its gains start at 0 */
			const float one = d->gemma ? 0.0f : 1.0f;
			size_t not_one = 0;

			for (size_t i = 0; i < cnt; i++)
				not_one += x[i] != one;
			printf("  init: %-24s %6zu %10g %10s  (%zu not exactly that)\n", hf[p].name, cnt, one, "0",
			       not_one);
			CHECK(not_one == 0, "%s: %zu gains of %s are not exactly %g", gc->name, not_one, hf[p].name, one);
			continue;
		}
		if (p == EMBED || p == LM_HEAD) { /* padding rows: exactly 0, left out of the statistics */
			size_t nonzero = 0;

			cnt = (size_t)d->V * d->C;
			for (size_t i = cnt; i < size[p]; i++)
				nonzero += x[i] != 0.0f;
			CHECK(nonzero == 0, "%s: %zu values in the padding rows of %s", gc->name, nonzero,
			      hf[p].name);
		}
		double s = 0, ss = 0;

		for (size_t i = 0; i < cnt; i++) {
			s += x[i];
			ss += (double)x[i] * x[i];
		}
		all_s += s;
		all_ss += ss;
		all_n += cnt;
		const double mean = s / (double)cnt, sd = sqrt(ss / (double)cnt - mean * mean);
		/* 4 standard errors (the draws are fixed by the seed: no flakiness) */
		const double mean_tol = 4 * INIT_STD / sqrt((double)cnt);
		const double sd_tol = fmax(0.1, 4 / sqrt(2.0 * (double)cnt));

		printf("  init: %-24s %6zu %10.2e %10.4f\n", hf[p].name, cnt, mean, sd);
		CHECK(fabs(mean) < mean_tol, "%s: init mean of %s %.3e (bound %.1e)", gc->name, hf[p].name, mean,
		      mean_tol);
		CHECK(fabs(sd / INIT_STD - 1) < sd_tol, "%s: init std of %s %.4f, expected %.2f +- %.0f%%",
		      gc->name, hf[p].name, sd, INIT_STD, 100 * sd_tol);
	}
	{
		const double mean = all_s / (double)all_n, sd = sqrt(all_ss / (double)all_n - mean * mean);

		printf("  init: all %zu weights: mean %.2e, std %.4f\n", all_n, mean, sd);
		CHECK(fabs(mean) < 5 * INIT_STD / sqrt((double)all_n) && fabs(sd / INIT_STD - 1) < 0.1,
		      "%s: init of all weights: mean %.3e std %.4f", gc->name, mean, sd);
	}
	free(p0);
}

static void check_case(ferry_backend_t be, const struct gcase *gc)
{
	struct ferry_model_config cfg = gc->cfg;
	const double t_case = now_s();

	if (ferry_model_config_complete(&cfg) != FERRY_OK) {
		CHECK(0, "%s: config: %s", gc->name, ferry_last_error());
		return;
	}
	const struct dims d = dims_of(&cfg);
	const int N = gc->B * gc->T, V = d.V, Vp = d.Vp, C = d.C;
	size_t size[N_PARAMS], off[N_PARAMS];
	const size_t n = hf_layout(&d, size, off);
	float *params = TALLOC(float, n), *g1 = TALLOC(float, n), *g2 = TALLOC(float, n);
	float *g3 = TALLOC(float, n);
	double *num = TALLOC(double, n);
	int32_t *in = TALLOC(int32_t, N), *tg = TALLOC(int32_t, N);
	Rng rng = rng_new(gc->seed);
	struct refmodel r;
	ferry_model_t m = NULL;
	float loss = NAN;
	double t0, t_fd;

	printf("%s: L=%d C=%d NH=%d NKV=%d HS=%d FFN=%d V=%d Vp=%d theta=%g eps=%g %s head, maxT=%d, "
	       "model %dx%d, batch %dx%d, %zu params; window %d on layers %% %d from %d, scale %g, caps %g %g\n",
	       gc->name, d.L, C, d.NH, d.NKV, d.HS, d.F, V, Vp, d.theta, d.eps, d.tied ? "tied" : "untied",
	       cfg.max_seq, gc->create_B, gc->create_T, gc->B, gc->T, n, d.window, d.window_every, d.window_from,
	       d.attn_scale, d.attn_cap, d.final_cap);
	check_layout(gc, &d);

	/* everything random, the padding rows of the embedding included; gains
	 * around 1 (Gemma's scale by 1 + w: around 0) */
	fill_normal(&rng, params, (long)n, PARAM_STD);
	for (int p = 0; p < N_PARAMS && !d.gemma; p++)
		if (hf[p].gain)
			for (size_t i = 0; i < size[p]; i++)
				params[off[p] + i] += 1.0f;
	for (int i = 0; i < N; i++) {
		in[i] = rng_int(&rng, V);
		tg[i] = rng_int(&rng, V);
	}
	tg[N - 1] = V - 1; /* the last real column is a target */
	in[0] = V - 1;     /* and the last real row an input */

	OK(ferry_model_create(be, &gc->cfg, gc->create_B, gc->create_T, NULL, &m));
	if (!m)
		goto out;
	CHECK(!strcmp(ferry_model_config(m)->arch, gc->cfg.arch), "%s: arch %s", gc->name, ferry_model_config(m)->arch);
	CHECK(ferry_model_num_params(m) == n, "%s: num_params %zu, expected %zu", gc->name,
	      ferry_model_num_params(m), n);
	check_init(m, gc, &d);
	OK(ferry_model_set_params(m, params));

	/* forward: the loss against the float64 model */
	ref_init(&r, &d, gc->B, gc->T, in, tg, params);
	{
		const double ref = ref_loss(&r);

		OK(ferry_model_forward(m, in, tg, gc->B, gc->T, &loss));
		const double e = fabs((double)loss - ref) / fabs(ref);
		printf("  loss: ferry %.8f, float64 %.8f, rel err %.2e\n", loss, ref, e);
		CHECK(e < LOSS_TOL, "%s loss %.8f vs float64 %.8f: rel err %.3e", gc->name, loss, ref, e);
	}

	/* analytic gradient */
	OK(ferry_model_zero_grad(m));
	OK(ferry_model_backward(m));
	OK(ferry_model_get_grads(m, g1));

	/* numeric gradient of the float64 loss, every parameter */
	t0 = now_s();
	fd_grad(num, r.params, (long)n, ref_loss, &r, FD_STEP);
	t_fd = now_s() - t0;
	printf("  finite differences: %zu params in %.2f s\n", n, t_fd);

	/* per tensor */
	printf("  %-24s %6s %12s %12s %10s\n", "tensor", "n", "max|grad|", "max|num|", "nerr");
	for (int i = 0; i < n_params(&d); i++) {
		const int p = fam_param(&d, i);
		const size_t o = off[p];
		const char *name = hf[p].name;

		if (!size[p]) {
			printf("  %-24s (tied: its gradient is embed_tokens')\n", name);
			continue;
		}
		const double e = nerr_fd(g1 + o, num + o, (long)size[p]);
		const double ga = max_abs_f(g1 + o, (long)size[p]);
		const double gn = max_abs_d(num + o, (long)size[p]);

		printf("  %-24s %6zu %12.4e %12.4e %10.2e\n", name, size[p], ga, gn, e);
		CHECK(e < GRAD_TOL, "%s: %s gradient normalised error %.3e (max|grad| %.3e)", gc->name, name, e, gn);
		CHECK(ga > 1e-6 && gn > 1e-6, "%s: %s gradient is ~zero (ferry %.3e, numeric %.3e)", gc->name, name,
		      ga, gn);
	}

	/* padding rows of the embedding (and of an untied head): exactly zero
	 * in ferry, ~zero numerically */
	for (int p = 0; p < N_PARAMS && Vp > V; p++) {
		if (!(p == EMBED || p == LM_HEAD) || !size[p])
			continue;
		const size_t o = off[p] + (size_t)V * C;
		const long np = (long)(Vp - V) * C;
		long nonzero = 0;

		for (long i = 0; i < np; i++)
			nonzero += g1[o + i] != 0.0f;
		const double pn = max_abs_d(num + o, np);
		printf("  %s padding rows %d..%d: %ld nonzero analytic, max|num| %.2e\n", hf[p].name, V, Vp - 1,
		       nonzero, pn);
		CHECK(nonzero == 0, "%s: %ld gradients in %s padding rows are not exactly 0", gc->name, nonzero,
		      hf[p].name);
		CHECK(pn <= PAD_FD_TOL, "%s: numeric gradient of %s padding rows %.3e", gc->name, hf[p].name, pn);
	}

	/* accumulation: a second forward + backward without zero_grad doubles it */
	{
		const float l2 = fwd_bwd(m, gc, in, tg);

		OK(ferry_model_get_grads(m, g2));
		const double e = nerr_scaled_ff(g2, g1, 2.0, (long)n);
		printf("  accumulate: second pass vs 2x first, nerr %.2e\n", e);
		CHECK(l2 == loss, "%s: loss changed between identical forwards (%.9g, %.9g)", gc->name, l2, loss);
		CHECK(e < CONTRACT_TOL, "%s: accumulated gradient vs twice the gradient: %.3e", gc->name, e);
	}

	/* one backward per forward */
	CHECK(ferry_model_backward(m) == FERRY_ERR_INVALID, "%s: second backward refused", gc->name);

	/* determinism: zero_grad + forward + backward again, bit for bit */
	{
		OK(ferry_model_zero_grad(m));
		fwd_bwd(m, gc, in, tg);
		OK(ferry_model_get_grads(m, g3));
		const bool same = memcmp(g1, g3, n * sizeof(float)) == 0;
		printf("  determinism: repeated gradient %s\n", same ? "bit-identical" : "DIFFERS");
		CHECK(same, "%s: gradients of two identical runs differ (nerr %.3e)", gc->name, nerr_ff(g3, g1, (long)n));
	}

	ref_free(&r);
out:
	ferry_model_free(m);
	free(params);
	free(g1);
	free(g2);
	free(g3);
	free(num);
	free(in);
	free(tg);
	printf("  %s: %.2f s\n", gc->name, now_s() - t_case);
}

int main(void)
{
	const struct gcase cases[] = {
		/* grouped-query attention (2 query heads per kv head), untied head,
		 * the default epsilon and theta, vocabulary not padded */
		{ "two layers, GQA",
		  { .arch = "llama", .max_seq = 8, .vocab = 13, .layers = 2, .heads = 4, .kv_heads = 2,
		    .channels = 16, .ffn = 24 },
		  2, 8, 2, 8, 1 },
		/* multi-query attention, tied head, HS = 6 (three rotary pairs),
		 * Llama 3's theta, a large epsilon, a padded vocabulary and a batch
		 * smaller than the model's */
		{ "one layer, MQA, tied",
		  { .arch = "llama", .max_seq = 8, .vocab = 11, .padded_vocab = 16, .layers = 1, .heads = 2,
		    .kv_heads = 1, .channels = 12, .ffn = 20, .norm_eps = 1e-3f, .rope_theta = 500000.0f,
		    .tie_embeddings = 1 },
		  2, 8, 1, 7, 2 },
		/* head size not C / NH (q is 12 wide, the residual 8), multi-head,
		 * an untied head over a padded vocabulary */
		{ "one layer, HS != C/NH",
		  { .arch = "llama", .max_seq = 6, .vocab = 9, .padded_vocab = 12, .layers = 1, .heads = 2,
		    .channels = 8, .head_size = 6, .ffn = 16 },
		  3, 6, 3, 6, 3 },
		/* Llama 3.1's rope_scaling: with theta 10000, HS 8 and an
		 * original context of 64 the four pairs are kept (wavelength
		 * 6.3 < 64/4), smoothed (62.8) and divided by 8 (628, 6283) */
		{ "two layers, llama3 rope scaling",
		  { .arch = "llama", .max_seq = 8, .vocab = 13, .layers = 2, .heads = 4, .kv_heads = 2,
		    .channels = 16, .head_size = 8, .ffn = 24,
		    .rope_scaling = { FERRY_ROPE_SCALING_LLAMA3, 8.0f, 1.0f, 4.0f, 64 } },
		  2, 8, 2, 8, 4 },
		{ "one layer, linear rope scaling",
		  { .arch = "llama", .max_seq = 8, .vocab = 11, .layers = 1, .heads = 2, .channels = 8, .ffn = 16,
		    .rope_scaling = { FERRY_ROPE_SCALING_LINEAR, 0.25f } },
		  2, 8, 2, 8, 5 },
		/* Qwen 2: biases on q, k, v; tied as the small ones are, its theta */
		{ "qwen2, two layers, GQA, tied",
		  { .arch = "qwen2", .max_seq = 8, .vocab = 13, .padded_vocab = 16, .layers = 2, .heads = 4,
		    .kv_heads = 2, .channels = 16, .ffn = 24, .norm_eps = 1e-6f, .rope_theta = 1000000.0f,
		    .tie_embeddings = 1 },
		  2, 8, 2, 8, 6 },
		{ "qwen2, one layer, untied",
		  { .arch = "qwen2", .max_seq = 6, .vocab = 9, .layers = 1, .heads = 2, .kv_heads = 1,
		    .channels = 8, .ffn = 16 },
		  2, 6, 2, 5, 7 },
		/* Qwen 2's use_sliding_window: a window of 2 on layers from 1
		 * (max_window_layers), the first layer full */
		{ "qwen2, window from layer 1",
		  { .arch = "qwen2", .max_seq = 8, .vocab = 11, .layers = 2, .heads = 2, .kv_heads = 1,
		    .channels = 8, .ffn = 16, .sliding_window = 2, .window_layers_from = 1 },
		  2, 8, 2, 8, 8 },
		/* Mistral: a window of 3 on every layer, shorter than the batch */
		{ "mistral, two layers, window 3",
		  { .arch = "mistral", .max_seq = 8, .vocab = 13, .layers = 2, .heads = 4, .kv_heads = 2,
		    .channels = 16, .ffn = 24, .sliding_window = 3 },
		  2, 8, 2, 8, 9 },
		/* Gemma 2: a window of 3 on layers 0 and 2, full on 1; scores
		 * scaled by 1/sqrt(12) (not the head size, 4), caps small enough to
		 * bend them (1.5 on scores, 2 on logits); tied, its default */
		{ "gemma2, three layers, window, caps",
		  { .arch = "gemma2", .max_seq = 8, .vocab = 13, .layers = 3, .heads = 4, .kv_heads = 2,
		    .channels = 16, .ffn = 24, .sliding_window = 3, .query_pre_attn_scalar = 12,
		    .attn_softcap = 1.5f, .final_softcap = 2.0f },
		  2, 8, 2, 8, 10 },
		/* Gemma 2 with its default caps (50, 30), head size 6 != C / NH,
		 * an untied head over a padded vocabulary */
		{ "gemma2, one layer, HS != C/NH, untied",
		  { .arch = "gemma2", .max_seq = 6, .vocab = 9, .padded_vocab = 12, .layers = 1, .heads = 2,
		    .channels = 8, .head_size = 6, .ffn = 16, .tie_embeddings = -1 },
		  3, 6, 3, 6, 11 },
		/* Gemma 2 without caps (config.json's null) */
		{ "gemma2, two layers, no caps",
		  { .arch = "gemma2", .max_seq = 6, .vocab = 9, .layers = 2, .heads = 2, .kv_heads = 1,
		    .channels = 8, .ffn = 16, .attn_softcap = -1.0f, .final_softcap = -1.0f },
		  2, 6, 2, 6, 12 },
	};
	ferry_backend_t be = NULL;
	const double t0 = now_s();

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)64 << 20 }, &be) !=
	    FERRY_OK) {
		fprintf(stderr, "cannot open the cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(be, &cases[i]);
	ferry_backend_close(be);
	printf("total %.2f s\n", now_s() - t0);
	return test_exit_code();
}
