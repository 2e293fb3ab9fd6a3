/*
 * Whole-model gradient check of GPT-2 on the CPU backend.
 *
 * For tiny configurations with random parameters (weights, biases and
 * layernorm gains/biases all N(0, PARAM_STD), padding rows of wte included):
 *   forward   ferry's fp32 mean loss vs a float64 reference model composed
 *             from the ref_ops.h forwards, relative error < LOSS_TOL;
 *   backward  ferry's analytic gradient vs a central finite difference of
 *             the float64 reference loss, for every parameter, normalised
 *             error per tensor < GRAD_TOL; every tensor's gradient nonzero;
 *   padding   rows V..Vp-1 of wte get gradient exactly 0 (numeric ~0 too);
 *   contract  a second forward + backward without zero_grad doubles the
 *             gradient; a repeated zero_grad + forward + backward gives
 *             bit-identical gradients.
 * Accumulation is checked over forward + backward pairs: backward consumes
 * the forward's probabilities (the softmax backward overwrites them with the
 * logit gradients), so a second backward after one forward is refused.
 *
 * Note: the key block of qkvb has a true gradient of 0 (a bias added to
 * every key shifts each score row by a constant, which softmax ignores), so
 * that block is checked only against fp32 noise.
 */
#include "ferry/backend.h"
#include "ferry/model.h"
#include "ref_ops.h"
#include "test_util.h"

#include <time.h>

#define PARAM_STD 0.3f
#define LOSS_TOL 1e-6 /* observed <= 5.3e-8 */
#define GRAD_TOL 5e-6 /* observed <= 7.5e-7 over 10 seeds (fp32 vs float64) */
#define CONTRACT_TOL 1e-6
#define FD_STEP 1e-5
#define PAD_FD_TOL 1e-12

struct gcase {
	const char *name;
	struct ferry_model_config cfg;
	int create_B, create_T; /* the model's size */
	int B, T;		/* the batch checked (<= the model's size) */
	uint64_t seed;
};

/* ---- float64 reference GPT-2 --------------------------------------------- */

/* llm.c's parameter layout (train_gpt2.c's ParameterTensors), written out
 * here independently of ferry's declaration; check_layout compares them. */
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB,
       FCPROJW, FCPROJB, LNFW, LNFB, N_PARAMS };
static const char *const llmc_names[N_PARAMS] = {
	"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
	"ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

static size_t llmc_sizes(const struct ferry_model_config *cfg, size_t s[N_PARAMS])
{
	size_t L = (size_t)cfg->layers, C = (size_t)cfg->channels, total = 0;

	s[WTE] = (size_t)cfg->padded_vocab * C;
	s[WPE] = (size_t)cfg->max_seq * C;
	s[LN1W] = s[LN1B] = s[ATTPROJB] = s[LN2W] = s[LN2B] = s[FCPROJB] = L * C;
	s[QKVW] = L * 3 * C * C;
	s[QKVB] = L * 3 * C;
	s[ATTPROJW] = L * C * C;
	s[FCW] = s[FCPROJW] = L * 4 * C * C;
	s[FCB] = L * 4 * C;
	s[LNFW] = s[LNFB] = C;
	for (int p = 0; p < N_PARAMS; p++)
		total += s[p];
	return total;
}

#define OK(call) CHECK((call) == FERRY_OK, "%s: %s", #call, ferry_last_error())

/* ferry's declared parameters are llm.c's, in its order and sizes. */
static void check_layout(const struct ferry_model_config *cfg)
{
	struct ferry_model_config c = *cfg;
	size_t sizes[N_PARAMS], off = 0;

	llmc_sizes(cfg, sizes);
	OK(ferry_model_config_complete(&c));
	CHECK(ferry_model_param_tensors(&c) == N_PARAMS, "%d parameter tensors",
	      ferry_model_param_tensors(&c));
	for (int p = 0; p < N_PARAMS && p < ferry_model_param_tensors(&c); p++) {
		struct ferry_param_info pi;

		OK(ferry_model_param_info(&c, p, &pi));
		CHECK(!strcmp(pi.name, llmc_names[p]) && pi.numel == sizes[p] && pi.offset == off,
		      "parameter %d: %s, %zu at %zu; llm.c: %s, %zu at %zu", p, pi.name, pi.numel,
		      pi.offset, llmc_names[p], sizes[p], off);
		off += sizes[p];
	}
}

struct refmodel {
	struct ferry_model_config cfg;
	int B, T;
	const int32_t *inputs, *targets;
	size_t sizes[N_PARAMS], off[N_PARAMS];
	double *params; /* n_params, llm.c order: the finite difference moves these */
	/* activations (one layer's worth, reused) */
	double *x, *ln, *q, *k, *v, *ctx, *proj, *mid, *fc, *act, *fcproj, *logits;
};

static void ref_init(struct refmodel *r, const struct ferry_model_config *cfg, int B, int T,
		     const int32_t *inputs, const int32_t *targets, const float *params)
{
	const size_t N = (size_t)B * T, C = (size_t)cfg->channels;
	size_t total, off = 0;

	memset(r, 0, sizeof(*r));
	r->cfg = *cfg;
	r->B = B;
	r->T = T;
	r->inputs = inputs;
	r->targets = targets;
	total = llmc_sizes(cfg, r->sizes);
	for (int p = 0; p < N_PARAMS; p++) {
		r->off[p] = off;
		off += r->sizes[p];
	}
	r->params = TALLOC(double, total);
	to_double(r->params, params, (long)total);
	r->x = TALLOC(double, N * C);
	r->ln = TALLOC(double, N * C);
	r->q = TALLOC(double, N * C);
	r->k = TALLOC(double, N * C);
	r->v = TALLOC(double, N * C);
	r->ctx = TALLOC(double, N * C);
	r->proj = TALLOC(double, N * C);
	r->mid = TALLOC(double, N * C);
	r->fc = TALLOC(double, N * 4 * C);
	r->act = TALLOC(double, N * 4 * C);
	r->fcproj = TALLOC(double, N * C);
	r->logits = TALLOC(double, N * (size_t)cfg->padded_vocab);
}

static void ref_free(struct refmodel *r)
{
	double *bufs[] = { r->params, r->x, r->ln, r->q, r->k, r->v, r->ctx, r->proj,
			   r->mid, r->fc, r->act, r->fcproj, r->logits };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		free(bufs[i]);
}

/* Tensor p of layer l (l = 0 for the unstacked ones). */
static const double *ref_w(const struct refmodel *r, int p, int l)
{
	const bool per_layer = p >= LN1W && p <= FCPROJB;
	const size_t stride = per_layer ? r->sizes[p] / (size_t)r->cfg.layers : 0;

	return r->params + r->off[p] + (size_t)l * stride;
}

/* The mean cross-entropy of the whole model, in float64. */
static double ref_loss(void *ctx)
{
	struct refmodel *r = ctx;
	const int B = r->B, T = r->T, C = r->cfg.channels, NH = r->cfg.heads;
	const int N = B * T;
	const long NC = (long)N * C;

	ref_encoder_forward(r->x, r->inputs, ref_w(r, WTE, 0),
			    ref_w(r, WPE, 0), B, T, C);
	for (int l = 0; l < r->cfg.layers; l++) {
		const double *qkvw = ref_w(r, QKVW, l);
		const double *qkvb = ref_w(r, QKVB, l);
		const size_t CC = (size_t)C * C;

		ref_layernorm_forward(r->ln, NULL, NULL, r->x, ref_w(r, LN1W, l),
				      ref_w(r, LN1B, l), N, C);
		ref_matmul_forward(r->q, r->ln, qkvw, qkvb, N, C, C);
		ref_matmul_forward(r->k, r->ln, qkvw + CC, qkvb + C, N, C, C);
		ref_matmul_forward(r->v, r->ln, qkvw + 2 * CC, qkvb + 2 * C, N, C, C);
		ref_attention_forward(r->ctx, NULL, r->q, r->k, r->v, B, T, C, NH);
		ref_matmul_forward(r->proj, r->ctx, ref_w(r, ATTPROJW, l),
				   ref_w(r, ATTPROJB, l), N, C, C);
		ref_residual_forward(r->mid, r->x, r->proj, NC);
		ref_layernorm_forward(r->ln, NULL, NULL, r->mid, ref_w(r, LN2W, l),
				      ref_w(r, LN2B, l), N, C);
		ref_matmul_forward(r->fc, r->ln, ref_w(r, FCW, l),
				   ref_w(r, FCB, l), N, C, 4 * C);
		ref_gelu_forward(r->act, r->fc, 4 * NC);
		ref_matmul_forward(r->fcproj, r->act, ref_w(r, FCPROJW, l),
				   ref_w(r, FCPROJB, l), N, 4 * C, C);
		ref_residual_forward(r->x, r->mid, r->fcproj, NC); /* the next layer's input */
	}
	ref_layernorm_forward(r->ln, NULL, NULL, r->x, ref_w(r, LNFW, 0),
			      ref_w(r, LNFB, 0), N, C);
	/* LM head tied to wte, over the padded vocabulary, no bias */
	ref_matmul_forward(r->logits, r->ln, ref_w(r, WTE, 0), NULL, N, C,
			   r->cfg.padded_vocab);
	return ref_softmax_xent_mean_loss(r->logits, r->targets, N, r->cfg.vocab,
					  r->cfg.padded_vocab);
}

/* ---- the check ------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* forward with targets + backward (no zero_grad); returns the loss */
static float fwd_bwd(ferry_model_t m, const struct gcase *gc, const int32_t *in,
		     const int32_t *tg)
{
	float loss = NAN;

	OK(ferry_model_forward(m, in, tg, gc->B, gc->T, &loss));
	OK(ferry_model_backward(m));
	return loss;
}

static void check_case(ferry_backend_t be, const struct gcase *gc)
{
	const struct ferry_model_config *cfg = &gc->cfg;
	const int N = gc->B * gc->T, V = cfg->vocab, Vp = cfg->padded_vocab, C = cfg->channels;
	size_t sizes[N_PARAMS];
	const size_t n = llmc_sizes(cfg, sizes);
	float *params = TALLOC(float, n), *g1 = TALLOC(float, n), *g2 = TALLOC(float, n);
	float *g3 = TALLOC(float, n);
	double *num = TALLOC(double, n);
	int32_t *in = TALLOC(int32_t, N), *tg = TALLOC(int32_t, N);
	Rng rng = rng_new(gc->seed);
	struct refmodel r;
	ferry_model_t m = NULL;
	float loss = NAN;
	double t0, t_fd;

	printf("%s: L=%d C=%d NH=%d V=%d Vp=%d maxT=%d, model %dx%d, batch %dx%d, %zu params\n",
	       gc->name, cfg->layers, C, cfg->heads, V, Vp, cfg->max_seq, gc->create_B,
	       gc->create_T, gc->B, gc->T, n);

	/* everything random, biases, gains and the padding rows of wte included */
	fill_normal(&rng, params, (long)n, PARAM_STD);
	for (int i = 0; i < N; i++) {
		in[i] = rng_int(&rng, V);
		tg[i] = rng_int(&rng, V);
	}
	tg[N - 1] = V - 1; /* the last real column is a target */

	OK(ferry_model_create(be, cfg, gc->create_B, gc->create_T, NULL, &m));
	if (!m)
		goto out;
	CHECK(ferry_model_num_params(m) == n, "num_params %zu, expected %zu",
	      ferry_model_num_params(m), n);
	OK(ferry_model_set_params(m, params));

	/* forward: the loss against the float64 model */
	ref_init(&r, cfg, gc->B, gc->T, in, tg, params);
	{
		const double ref = ref_loss(&r);

		OK(ferry_model_forward(m, in, tg, gc->B, gc->T, &loss));
		const double e = fabs((double)loss - ref) / fabs(ref);
		printf("  loss: ferry %.8f, float64 %.8f, rel err %.2e\n", loss, ref, e);
		CHECK(e < LOSS_TOL, "%s loss %.8f vs float64 %.8f: rel err %.3e", gc->name, loss,
		      ref, e);
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
	printf("  %-9s %6s %12s %12s %10s\n", "tensor", "n", "max|grad|", "max|num|", "nerr");
	for (int p = 0; p < N_PARAMS; p++) {
		const size_t o = r.off[p];
		const double e = nerr_fd(g1 + o, num + o, (long)sizes[p]);
		const double ga = max_abs_f(g1 + o, (long)sizes[p]);
		const double gn = max_abs_d(num + o, (long)sizes[p]);
		const char *name = llmc_names[p];

		printf("  %-9s %6zu %12.4e %12.4e %10.2e\n", name, sizes[p], ga, gn, e);
		CHECK(e < GRAD_TOL, "%s: %s gradient normalised error %.3e (max|grad| %.3e)",
		      gc->name, name, e, gn);
		CHECK(ga > 1e-6 && gn > 1e-6, "%s: %s gradient is ~zero (ferry %.3e, numeric %.3e)",
		      gc->name, name, ga, gn);
	}

	/* padding rows of wte: exactly zero in ferry, ~zero numerically */
	{
		const size_t o = r.off[WTE] + (size_t)V * C;
		const long np = (long)(Vp - V) * C;
		long nonzero = 0;

		for (long i = 0; i < np; i++)
			nonzero += g1[o + i] != 0.0f;
		const double pn = max_abs_d(num + o, np);
		printf("  wte padding rows %d..%d: %ld nonzero analytic, max|num| %.2e\n", V,
		       Vp - 1, nonzero, pn);
		CHECK(nonzero == 0, "%s: %ld gradients in wte padding rows are not exactly 0",
		      gc->name, nonzero);
		CHECK(pn <= PAD_FD_TOL, "%s: numeric gradient of wte padding rows %.3e", gc->name,
		      pn);
	}

	/* accumulation: a second forward + backward without zero_grad doubles it */
	{
		const float l2 = fwd_bwd(m, gc, in, tg);

		OK(ferry_model_get_grads(m, g2));
		const double e = nerr_scaled_ff(g2, g1, 2.0, (long)n);
		printf("  accumulate: second pass vs 2x first, nerr %.2e\n", e);
		CHECK(l2 == loss, "%s: loss changed between identical forwards (%.9g, %.9g)",
		      gc->name, l2, loss);
		CHECK(e < CONTRACT_TOL, "%s: accumulated gradient vs twice the gradient: %.3e",
		      gc->name, e);
	}

	/* one backward per forward: a second one is refused, not silently wrong */
	CHECK(ferry_model_backward(m) == FERRY_ERR_INVALID, "%s: second backward refused", gc->name);

	/* determinism: zero_grad + forward + backward again, bit for bit */
	{
		OK(ferry_model_zero_grad(m));
		fwd_bwd(m, gc, in, tg);
		OK(ferry_model_get_grads(m, g3));
		const bool same = memcmp(g1, g3, n * sizeof(float)) == 0;
		printf("  determinism: repeated gradient %s\n", same ? "bit-identical" : "DIFFERS");
		CHECK(same, "%s: gradients of two identical runs differ (nerr %.3e)", gc->name,
		      nerr_ff(g3, g1, (long)n));
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
}

int main(void)
{
	const struct gcase cases[] = {
		{ "two layers",
		  { .max_seq = 8, .vocab = 11, .padded_vocab = 16, .layers = 2, .heads = 2,
		    .channels = 8 },
		  2, 5, 2, 5, 1 },
		/* a batch smaller than the model's, HS = 4 with three heads */
		{ "one layer",
		  { .max_seq = 8, .vocab = 13, .padded_vocab = 20, .layers = 1, .heads = 3,
		    .channels = 12 },
		  2, 8, 1, 7, 2 },
	};
	ferry_backend_t be = NULL;
	const double t0 = now_s();

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)64 << 20 },
			       &be) != FERRY_OK) {
		fprintf(stderr, "cannot open the cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		check_layout(&cases[i].cfg);
		check_case(be, &cases[i]);
	}
	ferry_backend_close(be);
	printf("total %.2f s\n", now_s() - t0);
	return test_exit_code();
}
