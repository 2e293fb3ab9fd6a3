/*
 * Gemma 2's ops' CPU kernels against float64 references written from
 * transformers' Gemma2 formulas (tests/ref_ops.h):
 *
 *   rmsnorm   with the gain offset 1 (Gemma2RMSNorm's x rsqrt(..) (1 + w)),
 *             and with no gain (Gemma 4's v norm: the offset 1 alone);
 *   geglu     gelu_pytorch_tanh(gate) * up;
 *   scale     x * s (the embedding's sqrt(C));
 *   softcap   c tanh(x / c) (the final logits);
 *   attention with query_pre_attn_scalar's scale and soft-capped scores,
 *             with and without a window, grouped-query, on the tiled path
 *             (head sizes 8, 64 and Gemma's 256) and the row-by-row one
 *             (264), scores large enough that the cap bends them.
 *
 * Each: the forward against float64 (normalised error), the backward
 * against central finite differences of sum(out * R) for every element of
 * every input (grad_check.h, with its accumulate and NULL-gradient
 * contract); the in-place and assigning backward of scale and softcap; a
 * cap of 0 (or a scale of 0) leaving the op exactly as it was.  Then the
 * op table rows, the CPU backend's op calls (the model constants in
 * scalar[], bit for bit the kernels'), and the per-layer window of
 * ferry_op_call_shape (Gemma 2's even layers, Qwen 2's from
 * max_window_layers, Gemma 3's five of six and their rotary base).
 */
#include "backend/cpu/cpu_ops.h"
#include "graph/layer.h"
#include "ops/cpu/kernels.h"
#include "ops/op.h"
#include "grad_check.h"
#include "ref_ops.h"
#include "test_util.h"

/* Normalised error bounds (fp32 kernels against float64); the measured
 * errors are printed. */
#define NORM_FWD_TOL 2e-6
#define NORM_GRAD_TOL 5e-6
#define ELEM_FWD_TOL 2e-6
#define ELEM_GRAD_TOL 5e-6
#define ATT_FWD_TOL 3e-6
#define ATT_GRAD_TOL 1e-5

static void report(const char *label, double fwd, double fwd_tol, double grad, double grad_tol)
{
	printf("%-60s fwd %.2e  grad %.2e  %s\n", label, fwd, grad,
	       (fwd < fwd_tol && grad < grad_tol) ? "ok" : "FAIL");
}

static int bits_equal(const float *a, const float *b, long n)
{
	return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* ---- RMSNorm with the gain offset --------------------------------------------------- */

static double norm_loss(void *p)
{
	GradCase *c = p;

	ref_rmsnorm_offset_forward(c->outd, NULL, c->xd[0], c->xd[1], c->N, c->C, (double)c->eps, 1.0);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void norm_bwd(GradCase *c, float **g)
{
	ferry_cpu_rmsnorm_backward(g[0], g[1], c->R, c->x[0], c->x[1], c->rstd, c->N, c->C, 1.0f);
}

/* Gains around 0, as Gemma's start. */
static void test_norm(uint64_t seed, int N, int C, float eps)
{
	Rng rng = rng_new(seed);
	GradCase c = { .N = N, .C = C, .eps = eps, .backward = norm_bwd, .loss = norm_loss,
		       .grad_tol = NORM_GRAD_TOL };
	const long n = (long)N * C;
	float *x = arg_new(&c, "inp", n), *w = arg_new(&c, "weight", C);
	double *rd = TALLOC(double, N);
	char label[96];

	fill_normal(&rng, x, n, 1.0f);
	fill_normal(&rng, w, C, 0.3f);
	args_sync(&c);
	out_new(&c, &rng, n);
	c.rstd = TALLOC(float, N);
	ferry_cpu_rmsnorm_forward(c.out, c.rstd, x, w, N, C, eps, 1.0f);
	ref_rmsnorm_offset_forward(c.outd, rd, c.xd[0], c.xd[1], N, C, (double)eps, 1.0);
	const double fe = fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.rstd, rd, N));
	snprintf(label, sizeof(label), "rmsnorm 1 + w N=%d C=%d eps=%g", N, C, (double)eps);
	CHECK(fe < NORM_FWD_TOL, "%s: forward error %.3g", label, fe);
	report(label, fe, NORM_FWD_TOL, check_grads(&c, label), NORM_GRAD_TOL);
	free(rd);
	case_free(&c);
}

/* No gain (Gemma 4's v norm, with_scale=False): no weight, the offset 1
 * alone; the reference's gains are zeros. */
static double *norm0_zero;

static double norm0_loss(void *p)
{
	GradCase *c = p;

	ref_rmsnorm_offset_forward(c->outd, NULL, c->xd[0], norm0_zero, c->N, c->C, (double)c->eps, 1.0);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void norm0_bwd(GradCase *c, float **g)
{
	ferry_cpu_rmsnorm_backward(g[0], NULL, c->R, c->x[0], NULL, c->rstd, c->N, c->C, 1.0f);
}

static void test_norm_no_gain(uint64_t seed, int N, int C)
{
	Rng rng = rng_new(seed);
	GradCase c = { .N = N, .C = C, .eps = 1e-6f, .backward = norm0_bwd, .loss = norm0_loss,
		       .grad_tol = NORM_GRAD_TOL };
	const long n = (long)N * C;
	float *x = arg_new(&c, "inp", n);
	double *rd = TALLOC(double, N);
	char label[96];

	norm0_zero = TALLOC(double, C);
	memset(norm0_zero, 0, sizeof(double) * (size_t)C);
	fill_normal(&rng, x, n, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);
	c.rstd = TALLOC(float, N);
	ferry_cpu_rmsnorm_forward(c.out, c.rstd, x, NULL, N, C, c.eps, 1.0f);
	ref_rmsnorm_offset_forward(c.outd, rd, c.xd[0], norm0_zero, N, C, (double)c.eps, 1.0);
	const double fe = fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.rstd, rd, N));
	snprintf(label, sizeof(label), "rmsnorm, no gain N=%d C=%d", N, C);
	CHECK(fe < NORM_FWD_TOL, "%s: forward error %.3g", label, fe);
	report(label, fe, NORM_FWD_TOL, check_grads(&c, label), NORM_GRAD_TOL);
	free(rd);
	free(norm0_zero);
	case_free(&c);
}

/* ---- GeGLU ----------------------------------------------------------------------------- */

static double geglu_loss(void *p)
{
	GradCase *c = p;

	ref_geglu_forward(c->outd, c->xd[0], c->xd[1], c->nout);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void geglu_bwd(GradCase *c, float **g)
{
	ferry_cpu_geglu_backward(g[0], g[1], c->R, c->x[0], c->x[1], c->nout);
}

static void test_geglu(uint64_t seed, long n, float spread)
{
	Rng rng = rng_new(seed);
	GradCase c = { .backward = geglu_bwd, .loss = geglu_loss, .grad_tol = ELEM_GRAD_TOL };
	float *gate = arg_new(&c, "gate", n), *up = arg_new(&c, "up", n);
	char label[96];

	fill_normal(&rng, gate, n, spread);
	fill_normal(&rng, up, n, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);
	ferry_cpu_geglu_forward(c.out, gate, up, n);
	ref_geglu_forward(c.outd, c.xd[0], c.xd[1], n);
	const double fe = nerr_fd(c.out, c.outd, n);
	snprintf(label, sizeof(label), "geglu n=%ld gate spread %g", n, (double)spread);
	CHECK(fe < ELEM_FWD_TOL, "%s: forward error %.3g", label, fe);
	report(label, fe, ELEM_FWD_TOL, check_grads(&c, label), ELEM_GRAD_TOL);
	case_free(&c);
}

/* ---- scale and softcap ---------------------------------------------------------------- */

static double scale_loss(void *p)
{
	GradCase *c = p;
	double s = 0.0;

	for (long i = 0; i < c->nout; i++)
		s += c->xd[0][i] * (double)c->eps * c->Rd[i];
	return s;
}

static void scale_bwd(GradCase *c, float **g)
{
	ferry_cpu_scale_backward(g[0], c->R, c->eps, c->nout, false);
}

static double softcap_loss(void *p)
{
	GradCase *c = p;

	ref_softcap_forward(c->outd, c->xd[0], (double)c->eps, c->nout);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void softcap_bwd(GradCase *c, float **g)
{
	ferry_cpu_softcap_backward(g[0], c->R, c->x[0], c->eps, c->nout, false);
}

/* The assigning backward, into a buffer holding garbage, over dout and
 * over the input itself (the epilogue's in-place gradient), equals the
 * accumulating one into zeros, bit for bit. */
static int assign_matches(GradCase *c, bool softcap)
{
	const long n = c->nout;
	float *ref = TALLOC(float, n), *g = TALLOC(float, n);
	int ok = 1;

	(softcap ? softcap_bwd : scale_bwd)(c, &ref);
	for (int where = 0; where < 3; where++) {
		if (where == 0)
			fill_uniform(&(Rng){ 5 }, g, n, 100.0f, 200.0f);
		else
			memcpy(g, where == 1 ? c->R : c->x[0], sizeof(float) * (size_t)n);
		if (softcap)
			ferry_cpu_softcap_backward(g, where == 1 ? g : c->R, where == 2 ? g : c->x[0], c->eps, n, true);
		else
			ferry_cpu_scale_backward(g, where == 1 ? g : c->R, c->eps, n, true);
		ok &= bits_equal(g, ref, n) || (!softcap && where == 2);
	}
	free(ref);
	free(g);
	return ok;
}

static void test_elementwise(uint64_t seed, long n, float k, bool softcap)
{
	Rng rng = rng_new(seed);
	GradCase c = { .eps = k, .backward = softcap ? softcap_bwd : scale_bwd,
		       .loss = softcap ? softcap_loss : scale_loss, .grad_tol = ELEM_GRAD_TOL };
	float *x = arg_new(&c, "inp", n);
	char label[96];

	fill_normal(&rng, x, n, softcap ? 2.0f * k : 1.0f); /* past the cap: tanh bends */
	args_sync(&c);
	out_new(&c, &rng, n);
	if (softcap) {
		ferry_cpu_softcap_forward(c.out, x, k, n);
		ref_softcap_forward(c.outd, c.xd[0], (double)k, n);
	} else {
		ferry_cpu_scale_forward(c.out, x, k, n);
		for (long i = 0; i < n; i++)
			c.outd[i] = c.xd[0][i] * (double)k;
	}
	const double fe = nerr_fd(c.out, c.outd, n);
	snprintf(label, sizeof(label), "%s n=%ld %s %g", softcap ? "softcap" : "scale", n, softcap ? "cap" : "by",
		 (double)k);
	CHECK(fe < ELEM_FWD_TOL, "%s: forward error %.3g", label, fe);
	report(label, fe, ELEM_FWD_TOL, check_grads(&c, label), ELEM_GRAD_TOL);
	CHECK(assign_matches(&c, softcap), "%s: the assigning backward (in place) differs", label);
	case_free(&c);
}

/* A cap of 0 is the identity, both ways, bit for bit. */
static void test_softcap_none(void)
{
	const long n = 37;
	Rng rng = rng_new(8);
	float *x = TALLOC(float, n), *y = TALLOC(float, n), *d = TALLOC(float, n), *g = TALLOC(float, n);

	fill_normal(&rng, x, n, 50.0f);
	fill_normal(&rng, d, n, 1.0f);
	ferry_cpu_softcap_forward(y, x, 0.0f, n);
	ferry_cpu_softcap_backward(g, d, x, 0.0f, n, true);
	CHECK(bits_equal(x, y, n) && bits_equal(d, g, n), "softcap with cap 0 is not the identity");
	printf("%-60s %s\n", "softcap cap 0: the identity, bitwise", bits_equal(x, y, n) ? "ok" : "FAIL");
	free(x);
	free(y);
	free(d);
	free(g);
}

/* ---- attention with Gemma 2's scale and soft cap ----------------------------------- */

struct att { float scale, cap; };

static double att_loss(void *p)
{
	GradCase *c = p;
	const struct att *a = (const struct att *)c->tokens;

	ref_attention_capped_forward(c->outd, NULL, c->xd[0], c->xd[1], c->xd[2], c->B, c->T, c->C, c->NH, c->NKV,
				     c->window, (double)a->scale, (double)a->cap);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void att_bwd(GradCase *c, float **g)
{
	const struct att *a = (const struct att *)c->tokens;

	ferry_cpu_attention_backward(g[0], g[1], g[2], c->R, c->x[0], c->x[1], c->x[2], c->out, c->lse, c->B, c->T,
				     c->C, c->NH, c->NKV, c->window, a->scale, a->cap);
}

/* The backward at `samples` random entries of each input against central
 * finite differences (every entry would take minutes at large shapes). */
static double sampled_grads(GradCase *c, Rng *rng, int samples, const char *label)
{
	double worst = 0.0;
	float *g[3];

	for (int a = 0; a < 3; a++)
		g[a] = TALLOC(float, c->n[a]); /* zeroed: the kernel accumulates */
	att_bwd(c, g);
	for (int a = 0; a < 3; a++) {
		double err = 0.0, mag = 0.0;

		for (int i = 0; i < samples; i++) {
			const long e = (long)rng_int(rng, (int)c->n[a]);
			double num;

			fd_grad(&num, c->xd[a] + e, 1, att_loss, c, GRAD_FD_STEP);
			err = fmax(err, fabs(g[a][e] - num));
			mag = fmax(mag, fabs(num));
		}
		err /= fmax(1e-6, mag);
		CHECK(err < ATT_GRAD_TOL, "%s: d%s error %.3g at %d sampled entries", label, c->argname[a], err,
		      samples);
		worst = fmax(worst, err);
		free(g[a]);
	}
	return worst;
}

/* q and k with spread `spread`: scores of a few units, past the cap where
 * it is small.  samples 0: every entry's gradient. */
static void test_attention(uint64_t seed, int B, int T, int NH, int NKV, int HS, int W, float qpas, float cap,
			   float spread, int samples)
{
	Rng rng = rng_new(seed);
	const int C = NH * HS;
	GradCase c = { .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .window = W, .backward = att_bwd,
		       .loss = att_loss, .grad_tol = ATT_GRAD_TOL };
	const long n = (long)B * T * C, nkv = (long)B * T * NKV * HS, nl = (long)B * NH * T;
	struct att *a = TALLOC(struct att, 1);
	double *lsed = TALLOC(double, nl);
	char label[128];

	a->scale = qpas > 0 ? (float)pow(qpas, -0.5) : 0.0f;
	a->cap = cap;
	c.tokens = (int32_t *)a; /* case_free frees it */
	c.nonzero = T == 1 || W == 1 ? GRAD_NONZERO_WAIVED : GRAD_NONZERO_REQUIRED;
	fill_normal(&rng, arg_new(&c, "q", n), n, spread);
	fill_normal(&rng, arg_new(&c, "k", nkv), nkv, spread);
	fill_normal(&rng, arg_new(&c, "v", nkv), nkv, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);
	c.lse = TALLOC(float, nl);
	ferry_cpu_attention_forward(c.out, c.lse, c.x[0], c.x[1], c.x[2], B, T, C, NH, NKV, W, a->scale, cap);
	ref_attention_capped_forward(c.outd, lsed, c.xd[0], c.xd[1], c.xd[2], B, T, C, NH, NKV, W, a->scale, cap);
	const double fe = fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.lse, lsed, nl));
	snprintf(label, sizeof(label), "attention B=%d T=%d NH=%d NKV=%d HS=%d W=%d qpas=%g cap=%g", B, T, NH, NKV,
		 HS, W, (double)qpas, (double)cap);
	CHECK(fe < ATT_FWD_TOL, "%s: forward error %.3g", label, fe);
	report(label, fe, ATT_FWD_TOL, samples ? sampled_grads(&c, &rng, samples, label) : check_grads(&c, label),
	       ATT_GRAD_TOL);
	free(lsed);
	case_free(&c);
}

/* A scale of 1/sqrt(HS) given is the default's arithmetic, and the cap
 * changes the result (it acts). */
static void test_attention_defaults(void)
{
	Rng rng = rng_new(31);
	const int B = 1, T = 70, NH = 2, HS = 16, C = NH * HS;
	const long n = (long)B * T * C, nl = (long)B * NH * T;
	float *q = TALLOC(float, n), *k = TALLOC(float, n), *v = TALLOC(float, n);
	float *o1 = TALLOC(float, n), *o2 = TALLOC(float, n), *l1 = TALLOC(float, nl), *l2 = TALLOC(float, nl);

	fill_normal(&rng, q, n, 2.0f);
	fill_normal(&rng, k, n, 2.0f);
	fill_normal(&rng, v, n, 1.0f);
	ferry_cpu_attention_forward(o1, l1, q, k, v, B, T, C, NH, NH, 0, 0.0f, 0.0f);
	ferry_cpu_attention_forward(o2, l2, q, k, v, B, T, C, NH, NH, 0, 1.0f / sqrtf((float)HS), 0.0f);
	const int same = bits_equal(o1, o2, n) && bits_equal(l1, l2, nl);
	ferry_cpu_attention_forward(o2, l2, q, k, v, B, T, C, NH, NH, 0, 0.0f, 2.0f);
	const int differs = !bits_equal(o1, o2, n);

	CHECK(same, "attention: the default scale given differs from none given");
	CHECK(differs, "attention: a cap of 2 changes nothing");
	printf("%-60s %s\n", "attention: given 1/sqrt(HS) is the default, bitwise; cap acts",
	       same && differs ? "ok" : "FAIL");
	free(q);
	free(k);
	free(v);
	free(o1);
	free(o2);
	free(l1);
	free(l2);
}

/* ---- the op table, the CPU backend's calls, the per-layer window ---------------------- */

static void test_op_rows(void)
{
	const struct ferry_op_info *g = ferry_op_info(FERRY_OP_GEGLU), *s = ferry_op_info(FERRY_OP_SCALE);
	const struct ferry_op_info *c = ferry_op_info(FERRY_OP_SOFTCAP), *a = ferry_op_info(FERRY_OP_ATTENTION);
	const int ok = !strcmp(g->name, "geglu") && g->n_in == 2 && g->n_out == 1 &&
		       g->bwd_needs == (FERRY_NEEDS_IN(0) | FERRY_NEEDS_IN(1)) && !g->bwd_in_place &&
		       !strcmp(s->name, "scale") && s->n_in == 1 && s->bwd_needs == 0 && s->bwd_in_place &&
		       !strcmp(c->name, "softcap") && c->n_in == 1 && c->bwd_needs == FERRY_NEEDS_IN(0) &&
		       c->bwd_in_place && a->n_scalars == 3;

	CHECK(ok, "geglu, scale, softcap or attention's op table row");
	printf("%-60s %s\n", "op table: geglu, scale, softcap; attention takes 3 constants", ok ? "ok" : "FAIL");
}

/* Through ferry_cpu_run_op, with the constants in scalar[] as a model's
 * reach them: the kernels' bits. */
static void test_op_calls(void)
{
	Rng rng = rng_new(77);
	const int B = 2, T = 7, NH = 2, HS = 8, C = NH * HS, N = B * T;
	const long n = (long)N * C;
	float *x = TALLOC(float, n), *y = TALLOC(float, n), *d = TALLOC(float, n), *w = TALLOC(float, C);
	float *o1 = TALLOC(float, n), *o2 = TALLOC(float, n), *g1 = TALLOC(float, n), *g2 = TALLOC(float, n);
	float *l1 = TALLOC(float, N * NH), *l2 = TALLOC(float, N * NH);
	int ok = 1;

	fill_normal(&rng, x, n, 2.0f);
	fill_normal(&rng, y, n, 2.0f);
	fill_normal(&rng, d, n, 1.0f);
	fill_normal(&rng, w, C, 0.3f);
	struct ferry_op_call r = { .kind = FERRY_OP_RMSNORM, .B = B, .T = T, .C = C, .scalar = { 1e-6f, 1.0f },
				   .out = { o1, l1 }, .in = { x }, .w = { w } };
	ferry_cpu_run_op(&r);
	ferry_cpu_rmsnorm_forward(o2, l2, x, w, N, C, 1e-6f, 1.0f);
	ok &= bits_equal(o1, o2, n);
	struct ferry_op_call a = { .kind = FERRY_OP_ATTENTION, .B = B, .T = T, .C = C, .NH = NH, .NKV = 1,
				   .scalar = { 3.0f, 0.125f, 1.5f }, .out = { o1, l1 }, .in = { x, y, y } };
	ferry_cpu_run_op(&a);
	ferry_cpu_attention_forward(o2, l2, x, y, y, B, T, C, NH, 1, 3, 0.125f, 1.5f);
	ok &= bits_equal(o1, o2, n) && bits_equal(l1, l2, N * NH);
	a.backward = true;
	a.dout[0] = d;
	a.din[0] = g1;
	ferry_cpu_run_op(&a);
	ferry_cpu_attention_backward(g2, NULL, NULL, d, x, y, y, o2, l2, B, T, C, NH, 1, 3, 0.125f, 1.5f);
	ok &= bits_equal(g1, g2, n);
	for (int k = 0; k < 3; k++) {
		const enum ferry_op_kind kind = k == 0 ? FERRY_OP_GEGLU : k == 1 ? FERRY_OP_SCALE : FERRY_OP_SOFTCAP;
		struct ferry_op_call e = { .kind = kind, .n = n, .scalar = { 3.5f }, .out = { o1 }, .in = { x, y } };

		ferry_cpu_run_op(&e);
		if (k == 0)
			ferry_cpu_geglu_forward(o2, x, y, n);
		else if (k == 1)
			ferry_cpu_scale_forward(o2, x, 3.5f, n);
		else
			ferry_cpu_softcap_forward(o2, x, 3.5f, n);
		ok &= bits_equal(o1, o2, n);
	}
	CHECK(ok, "op calls differ from the kernels");
	printf("%-60s %s\n", "CPU backend op calls (Gemma's constants), bitwise", ok ? "ok" : "FAIL");
	float *const bufs[] = { x, y, d, w, o1, o2, g1, g2, l1, l2 };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		free(bufs[i]);
}

/* ferry_op_call_shape: the window reaches layer l's attention where the
 * model's rule says (every second layer from 0: Gemma 2; from layer 3 on:
 * Qwen 2's max_window_layers), the scale and cap everywhere, and an op's
 * own constant k after its model constants. */
static void test_layer_window(void)
{
	const struct ferry_layer_decl d = {
		.n_tensors = 6,
		.tensors = { { "q", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			     { "ctx", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			     { "lse", { .d = { FERRY_DIM_B, FERRY_DIM_NH, FERRY_DIM_T } } },
			     { "y", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			     { "rstd", { .d = { FERRY_DIM_B, FERRY_DIM_T } } } },
		.n_ops = 2,
		.ops = { { FERRY_OP_ATTENTION, { 1, 2, -1 }, { 0, 0, 0 }, { { -1, 0 }, { -1, 0 } },
			   FERRY_SCALAR_ATTN_WINDOW },
			 { FERRY_OP_RMSNORM, { 3, 4, -1 }, { 1, -1, -1 }, { { 0, 0 }, { -1, 0 } }, FERRY_SCALAR_NORM_EPS,
			   .k = 1.0f } },
	};
	struct ferry_dims dims = { { 0 } };
	float sc[FERRY_OP_SCALAR_COUNT] = { 0 };
	struct ferry_op_call c;
	int ok = 1;

	dims.v[FERRY_DIM_B] = 1;
	dims.v[FERRY_DIM_T] = 4;
	dims.v[FERRY_DIM_C] = 8;
	dims.v[FERRY_DIM_NH] = 2;
	sc[FERRY_SCALAR_ATTN_WINDOW] = 5.0f;
	sc[FERRY_SCALAR_ATTN_SCALE] = 0.25f;
	sc[FERRY_SCALAR_ATTN_SOFTCAP] = 50.0f;
	sc[FERRY_SCALAR_NORM_EPS] = 1e-6f;
	for (int rule = 0; rule < 2; rule++) {
		sc[FERRY_SCALAR_WINDOW_EVERY] = rule ? 0.0f : 2.0f;
		sc[FERRY_SCALAR_WINDOW_FROM] = rule ? 3.0f : 0.0f;
		for (int l = -1; l < 6; l++) {
			const bool windowed = l < 0 || (rule ? l >= 3 : l % 2 == 0);

			ferry_op_call_shape(&d, 0, &dims, sc, l, &c);
			ok &= c.scalar[0] == (windowed ? 5.0f : 0.0f) && c.scalar[1] == 0.25f && c.scalar[2] == 50.0f;
		}
	}
	ferry_op_call_shape(&d, 1, &dims, sc, 0, &c);
	ok &= c.scalar[0] == 1e-6f && c.scalar[1] == 1.0f;
	CHECK(ok, "the per-layer window or an op's constant k");
	printf("%-60s %s\n", "per-layer window (every 2nd; from layer 3), k after eps", ok ? "ok" : "FAIL");
}

/* Gemma 3's rules: the window on five layers of six (every sixth, index + 1
 * a multiple of 6, full), and the windowed layers' rotary base, unscaled,
 * where the full ones keep rope_theta and its scaling. */
static void test_gemma3_layers(void)
{
	const struct ferry_layer_decl d = {
		.n_tensors = 4,
		.tensors = { { "q", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			     { "ctx", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			     { "lse", { .d = { FERRY_DIM_B, FERRY_DIM_NH, FERRY_DIM_T } } },
			     { "qr", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } } },
		.n_ops = 2,
		.ops = { { FERRY_OP_ATTENTION, { 1, 2, -1 }, { 3, 3, 3 }, { { -1, 0 }, { -1, 0 } },
			   FERRY_SCALAR_ATTN_WINDOW },
			 { FERRY_OP_ROPE, { 3, -1, -1 }, { 0, -1, -1 }, { { -1, 0 }, { -1, 0 } }, FERRY_SCALAR_ROPE_THETA } },
	};
	struct ferry_dims dims = { { 0 } };
	float sc[FERRY_OP_SCALAR_COUNT] = { 0 };
	struct ferry_op_call a, r;
	int ok = 1;

	dims.v[FERRY_DIM_B] = 1;
	dims.v[FERRY_DIM_T] = 4;
	dims.v[FERRY_DIM_C] = 8;
	dims.v[FERRY_DIM_NH] = 2;
	dims.v[FERRY_DIM_HS] = 4;
	sc[FERRY_SCALAR_ATTN_WINDOW] = 5.0f;
	sc[FERRY_SCALAR_WINDOW_FULL_EVERY] = 6.0f;
	sc[FERRY_SCALAR_ROPE_THETA] = 1e6f;
	sc[FERRY_SCALAR_ROPE_TYPE] = 1.0f; /* linear */
	sc[FERRY_SCALAR_ROPE_FACTOR] = 8.0f;
	sc[FERRY_SCALAR_ROPE_LOCAL_THETA] = 1e4f;
	for (int l = 0; l < 13; l++) {
		const bool full = l == 5 || l == 11;

		ferry_op_call_shape(&d, 0, &dims, sc, l, &a);
		ferry_op_call_shape(&d, 1, &dims, sc, l, &r);
		ok &= a.scalar[0] == (full ? 0.0f : 5.0f) && ferry_window_at_layer(sc, l) == !full;
		ok &= full ? r.scalar[0] == 1e6f && r.scalar[1] == 1.0f && r.scalar[2] == 8.0f
			   : r.scalar[0] == 1e4f && r.scalar[1] == 0.0f && r.scalar[2] == 0.0f;
	}
	sc[FERRY_SCALAR_ROPE_LOCAL_THETA] = 0.0f; /* none: every layer rope_theta's, as before */
	ferry_op_call_shape(&d, 1, &dims, sc, 0, &r);
	ok &= r.scalar[0] == 1e6f && r.scalar[1] == 1.0f && r.NH == 2;
	CHECK(ok, "Gemma 3's full layers or windowed layers' rotary base");
	printf("%-60s %s\n", "Gemma 3: every 6th layer full; windowed layers' base 1e4", ok ? "ok" : "FAIL");
}

int main(void)
{
	test_op_rows();
	test_op_calls();
	test_layer_window();
	test_gemma3_layers();
	test_norm(1, 6, 16, 1e-6f);
	test_norm(2, 3, 37, 1e-3f);
	test_norm_no_gain(16, 5, 24);
	test_geglu(3, 257, 1.0f);
	test_geglu(4, 64, 4.0f);
	test_elementwise(5, 300, 48.0f, false); /* sqrt(2304) */
	test_elementwise(6, 300, 30.0f, true);
	test_elementwise(7, 41, 2.5f, true);
	test_softcap_none();
	/* Gemma 2 2B's constants on a small head: qpas 256 (not HS), cap 50 */
	test_attention(10, 2, 9, 4, 2, 8, 0, 256.0f, 50.0f, 4.0f, 0);
	/* a cap of 1.5: most scores bent; a window of 3 */
	test_attention(11, 1, 12, 2, 1, 8, 3, 0.0f, 1.5f, 2.0f, 0);
	test_attention(12, 1, 7, 2, 2, 6, 2, 4.0f, 0.0f, 1.0f, 0);
	/* the tiled path across key tiles (T > 64) at head sizes 64 and 256 */
	test_attention(13, 1, 70, 2, 1, 64, 20, 64.0f, 2.0f, 1.5f, 60);
	test_attention(14, 1, 66, 1, 1, 256, 0, 256.0f, 1.0f, 0.5f, 60);
	/* the row-by-row path (HS > 256) */
	test_attention(15, 1, 6, 2, 1, 264, 4, 144.0f, 1.0f, 0.3f, 0);
	test_attention_defaults();
	return test_exit_code();
}
