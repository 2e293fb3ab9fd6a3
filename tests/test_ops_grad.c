/*
 * Every CPU kernel against the float64 references in ref_ops.h.
 *
 * For each op and several shapes (including odd ones):
 *   forward   fp32 kernel vs float64 reference, normalised error < FWD_TOL;
 *   backward  with L = sum(out * R) for a fixed random R, the kernel's
 *             backward called with dout = R vs a central finite difference of
 *             the float64 reference loss, for every element of every input
 *             and weight, normalised error < GRAD_TOL;
 *   contract  backward twice into one buffer gives twice the gradient
 *             (accumulate), and each NULL gradient pointer is skipped without
 *             disturbing the others.
 * Plus op-specific checks (attention lse, T = 1, tile boundaries and large
 * scores; matmul without bias; softmax padding, aliasing, write semantics;
 * AdamW one and three steps; sum_squares).
 */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"
#include "optim/cpu_adamw.h"
#include "grad_check.h"
#include "ref_ops.h"
#include "test_util.h"

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4

/* grad < 0: forward only */
static void report(const char *label, double fwd, double grad)
{
	char g[32] = "   (fwd only)";
	if (grad >= 0.0)
		snprintf(g, sizeof g, "grad %.2e", grad);
	printf("%-44s fwd %.2e  %s  %s\n", label, fwd, g,
	       (fwd < FWD_TOL && grad < GRAD_TOL) ? "ok" : "FAIL");
}

/* ---- encoder ------------------------------------------------------------ */

static double encoder_loss(void *p)
{
	GradCase *c = p;
	ref_encoder_forward(c->outd, c->tokens, c->xd[0], c->xd[1], c->B, c->T,
			    c->C);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void encoder_bwd(GradCase *c, float **g)
{
	ferry_cpu_encoder_backward(g[0], g[1], c->R, c->tokens, c->B, c->T,
				   c->C);
}

static void test_encoder(uint64_t seed, int B, int T, int C, int V)
{
	Rng rng = rng_new(seed);
	GradCase c = {.B = B, .T = T, .C = C,
		      .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = encoder_bwd;
	c.loss = encoder_loss;
	float *wte = arg_new(&c, "wte", (long)V * C);
	float *wpe = arg_new(&c, "wpe", (long)T * C);
	fill_normal(&rng, wte, (long)V * C, 1.0f);
	fill_normal(&rng, wpe, (long)T * C, 1.0f);
	args_sync(&c);
	c.tokens = TALLOC(int32_t, B * T);
	for (int i = 0; i < B * T; i++)
		c.tokens[i] = rng_int(&rng, V);
	out_new(&c, &rng, (long)B * T * C);

	ferry_cpu_encoder_forward(c.out, c.tokens, wte, wpe, B, T, C);
	ref_encoder_forward(c.outd, c.tokens, c.xd[0], c.xd[1], B, T, C);
	const double fe = nerr_fd(c.out, c.outd, c.nout);
	char label[96];
	snprintf(label, sizeof label, "encoder B=%d T=%d C=%d V=%d", B, T, C,
		 V);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	const double ge = check_grads(&c, label);
	report(label, fe, ge);
	case_free(&c);
}

/* ---- layernorm ---------------------------------------------------------- */

static double layernorm_loss(void *p)
{
	GradCase *c = p;
	ref_layernorm_forward(c->outd, NULL, NULL, c->xd[0], c->xd[1], c->xd[2],
			      c->N, c->C);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void layernorm_bwd(GradCase *c, float **g)
{
	ferry_cpu_layernorm_backward(g[0], g[1], g[2], c->R, c->x[0], c->x[1],
				     c->mean, c->rstd, c->N, c->C);
}

static void test_layernorm(uint64_t seed, int N, int C, float offset)
{
	Rng rng = rng_new(seed);
	GradCase c = {.N = N, .C = C,
		      .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = layernorm_bwd;
	c.loss = layernorm_loss;
	float *inp = arg_new(&c, "inp", (long)N * C);
	float *w = arg_new(&c, "weight", C);
	float *b = arg_new(&c, "bias", C);
	fill_normal(&rng, inp, (long)N * C, 1.0f);
	for (long i = 0; i < (long)N * C; i++)
		inp[i] += offset;
	fill_uniform(&rng, w, C, 0.5f, 1.5f);
	fill_normal(&rng, b, C, 0.5f);
	args_sync(&c);
	out_new(&c, &rng, (long)N * C);
	c.mean = TALLOC(float, N);
	c.rstd = TALLOC(float, N);

	ferry_cpu_layernorm_forward(c.out, c.mean, c.rstd, inp, w, b, N, C);
	double *md = TALLOC(double, N), *rd = TALLOC(double, N);
	ref_layernorm_forward(c.outd, md, rd, c.xd[0], c.xd[1], c.xd[2], N, C);
	double fe = nerr_fd(c.out, c.outd, c.nout);
	const double me = nerr_fd(c.mean, md, N), re = nerr_fd(c.rstd, rd, N);
	char label[96];
	snprintf(label, sizeof label, "layernorm N=%d C=%d offset=%g", N, C,
		 (double)offset);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	CHECK(me < FWD_TOL, "%s: mean error %.3g", label, me);
	CHECK(re < FWD_TOL, "%s: rstd error %.3g", label, re);
	fe = fmax(fe, fmax(me, re));
	const double ge = check_grads(&c, label);
	report(label, fe, ge);
	free(md);
	free(rd);
	case_free(&c);
}

/* ---- matmul ------------------------------------------------------------- */

static double matmul_loss(void *p)
{
	GradCase *c = p;
	ref_matmul_forward(c->outd, c->xd[0], c->xd[1],
			   c->nargs == 3 ? c->xd[2] : NULL, c->N, c->C, c->OC);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void matmul_bwd(GradCase *c, float **g)
{
	ferry_cpu_matmul_backward(g[0], g[1], c->nargs == 3 ? g[2] : NULL, c->R,
				  c->x[0], c->x[1], c->N, c->C, c->OC);
}

static void test_matmul(uint64_t seed, int N, int C, int OC, int with_bias)
{
	Rng rng = rng_new(seed);
	GradCase c = {.N = N, .C = C, .OC = OC,
		      .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = matmul_bwd;
	c.loss = matmul_loss;
	float *inp = arg_new(&c, "inp", (long)N * C);
	float *w = arg_new(&c, "weight", (long)OC * C);
	float *b = with_bias ? arg_new(&c, "bias", OC) : NULL;
	fill_normal(&rng, inp, (long)N * C, 1.0f);
	fill_normal(&rng, w, (long)OC * C, 0.5f);
	if (b)
		fill_normal(&rng, b, OC, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, (long)N * OC);

	/* garbage in out: the forward must overwrite it */
	fill_uniform(&rng, c.out, c.nout, 100.0f, 200.0f);
	ferry_cpu_matmul_forward(c.out, inp, w, b, N, C, OC);
	ref_matmul_forward(c.outd, c.xd[0], c.xd[1], b ? c.xd[2] : NULL, N, C,
			   OC);
	const double fe = nerr_fd(c.out, c.outd, c.nout);
	char label[96];
	snprintf(label, sizeof label, "matmul N=%d C=%d OC=%d bias=%s", N, C,
		 OC, with_bias ? "yes" : "NULL");
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	const double ge = check_grads(&c, label);
	report(label, fe, ge);
	case_free(&c);
}

/* ---- attention ---------------------------------------------------------- */

static double attention_loss(void *p)
{
	GradCase *c = p;
	ref_attention_forward(c->outd, NULL, c->xd[0], c->xd[1], c->xd[2], c->B,
			      c->T, c->C, c->NH);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void attention_bwd(GradCase *c, float **g)
{
	ferry_cpu_attention_backward(g[0], g[1], g[2], c->R, c->x[0], c->x[1],
				     c->x[2], c->out, c->lse, c->B, c->T, c->C,
				     c->NH, c->NH, 0, 0.0f, 0.0f);
}

enum { ATT_RANDOM, ATT_RAMP_UP, ATT_RAMP_DOWN };

/* kind: ATT_RANDOM normal inputs times `mag`; ATT_RAMP_UP/DOWN: positive q
 * and keys whose norm grows (shrinks) with t2, so the running max of the
 * online softmax moves on every tile (or never). */
static void test_attention(uint64_t seed, int B, int T, int C, int NH,
			   float mag, int kind, int grads)
{
	Rng rng = rng_new(seed);
	GradCase c = {.B = B, .T = T, .C = C, .NH = NH,
		      .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = attention_bwd;
	c.loss = attention_loss;
	const long n = (long)B * T * C;
	float *q = arg_new(&c, "q", n);
	float *k = arg_new(&c, "k", n);
	float *v = arg_new(&c, "v", n);
	if (kind == ATT_RANDOM) {
		fill_normal(&rng, q, n, mag);
		fill_normal(&rng, k, n, mag);
	} else {
		fill_uniform(&rng, q, n, 0.5f * mag, 1.5f * mag);
		for (long i = 0; i < n; i++) {
			const int t = (int)((i / C) % T);
			const float ramp = kind == ATT_RAMP_UP
						   ? 1.0f + 0.05f * t
						   : 1.0f + 0.05f * (T - 1 - t);
			k[i] = rng_uniform(&rng, 0.5f, 1.5f) * ramp;
		}
	}
	fill_normal(&rng, v, n, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);
	const long nl = (long)B * NH * T;
	c.lse = TALLOC(float, nl);

	ferry_cpu_attention_forward(c.out, c.lse, q, k, v, B, T, C, NH, NH, 0, 0.0f, 0.0f);
	double *lsed = TALLOC(double, nl);
	ref_attention_forward(c.outd, lsed, c.xd[0], c.xd[1], c.xd[2], B, T, C,
			      NH);
	const double fe = nerr_fd(c.out, c.outd, n);
	const double le = nerr_fd(c.lse, lsed, nl);
	char label[96];
	snprintf(label, sizeof label, "attention B=%d T=%d C=%d NH=%d %s%s", B,
		 T, C, NH,
		 kind == ATT_RANDOM    ? ""
		 : kind == ATT_RAMP_UP ? "ramp-up "
				       : "ramp-down ",
		 mag > 1.0f ? "large" : "");
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	CHECK(le < FWD_TOL, "%s: lse error %.3g", label, le);
	const double ge = grads ? check_grads(&c, label) : -1.0;
	report(label, fmax(fe, le), ge);
	free(lsed);
	case_free(&c);
}

/* ---- gelu --------------------------------------------------------------- */

static double gelu_loss(void *p)
{
	GradCase *c = p;
	ref_gelu_forward(c->outd, c->xd[0], c->nout);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void gelu_bwd(GradCase *c, float **g)
{
	ferry_cpu_gelu_backward(g[0], c->R, c->x[0], c->nout, false);
}

static void test_gelu(uint64_t seed, long n, float scale)
{
	Rng rng = rng_new(seed);
	GradCase c = {.grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = gelu_bwd;
	c.loss = gelu_loss;
	float *x = arg_new(&c, "inp", n);
	fill_normal(&rng, x, n, scale);
	args_sync(&c);
	out_new(&c, &rng, n);

	ferry_cpu_gelu_forward(c.out, x, n);
	ref_gelu_forward(c.outd, c.xd[0], n);
	double fe = nerr_fd(c.out, c.outd, n);
	/* in place */
	float *y = TALLOC(float, n);
	memcpy(y, x, sizeof(float) * (size_t)n);
	ferry_cpu_gelu_forward(y, y, n);
	const double ie = nerr_ff(y, c.out, n);
	char label[96];
	snprintf(label, sizeof label, "gelu n=%ld scale=%g", n, (double)scale);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	CHECK(ie == 0.0, "%s: in-place forward differs (%.3g)", label, ie);
	const double ge = check_grads(&c, label);
	/* assigned, over stale values and in place over dout: the same bits
	 * as accumulated into zeros */
	float *acc = TALLOC(float, n), *over = TALLOC(float, n), *inpl = TALLOC(float, n);
	memset(acc, 0, sizeof(float) * (size_t)n);
	ferry_cpu_gelu_backward(acc, c.R, x, n, false);
	for (long i = 0; i < n; i++)
		over[i] = 7.0f;
	ferry_cpu_gelu_backward(over, c.R, x, n, true);
	memcpy(inpl, c.R, sizeof(float) * (size_t)n);
	ferry_cpu_gelu_backward(inpl, inpl, x, n, true);
	CHECK(memcmp(over, acc, sizeof(float) * (size_t)n) == 0, "%s: assigned backward differs", label);
	CHECK(memcmp(inpl, acc, sizeof(float) * (size_t)n) == 0, "%s: in-place backward differs", label);
	report(label, fe, ge);
	free(acc);
	free(over);
	free(inpl);
	free(y);
	case_free(&c);
}

/* ---- residual ----------------------------------------------------------- */

static double residual_loss(void *p)
{
	GradCase *c = p;
	ref_residual_forward(c->outd, c->xd[0], c->xd[1], c->nout);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void residual_bwd(GradCase *c, float **g)
{
	ferry_cpu_residual_backward(g[0], g[1], c->R, c->nout);
}

static void test_residual(uint64_t seed, long n)
{
	Rng rng = rng_new(seed);
	GradCase c = {.grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF};
	c.backward = residual_bwd;
	c.loss = residual_loss;
	float *a = arg_new(&c, "a", n);
	float *b = arg_new(&c, "b", n);
	fill_normal(&rng, a, n, 1.0f);
	fill_normal(&rng, b, n, 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);

	ferry_cpu_residual_forward(c.out, a, b, n);
	ref_residual_forward(c.outd, c.xd[0], c.xd[1], n);
	const double fe = nerr_fd(c.out, c.outd, n);
	char label[96];
	snprintf(label, sizeof label, "residual n=%ld", n);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);

	/* in place (out = a) and da == db (one tensor used twice) */
	float *y = TALLOC(float, n), *g = TALLOC(float, n);
	memcpy(y, a, sizeof(float) * (size_t)n);
	ferry_cpu_residual_forward(y, y, b, n);
	CHECK(nerr_ff(y, c.out, n) == 0.0, "%s: in-place forward differs",
	      label);
	ferry_cpu_residual_backward(g, g, c.R, n);
	CHECK(nerr_scaled_ff(g, c.R, 2.0, n) == 0.0, "%s: da == db not 2 dout",
	      label);

	const double ge = check_grads(&c, label);
	report(label, fe, ge);
	free(y);
	free(g);
	case_free(&c);
}

/* ---- softmax cross-entropy ---------------------------------------------- */

typedef struct {
	double *logits;
	const int32_t *targets;
	int N, V, Vp;
} XentCtx;

static double xent_loss(void *p)
{
	XentCtx *x = p;
	return ref_softmax_xent_mean_loss(x->logits, x->targets, x->N, x->V,
					  x->Vp);
}

static void test_softmax_xent(uint64_t seed, int N, int V, int Vp, float scale,
			      float offset)
{
	Rng rng = rng_new(seed);
	const long n = (long)N * Vp;
	float *logits = TALLOC(float, n), *probs = TALLOC(float, n);
	float *losses = TALLOC(float, N), *losses2 = TALLOC(float, N);
	float *dl = TALLOC(float, n), *dl2 = TALLOC(float, n);
	int32_t *tg = TALLOC(int32_t, N);
	double *ld = TALLOC(double, n), *pd = TALLOC(double, n);
	double *lossd = TALLOC(double, N), *num = TALLOC(double, n);
	fill_normal(&rng, logits, n, scale);
	for (long i = 0; i < n; i++)
		logits[i] += offset;
	/* padding columns hold garbage, which must be ignored */
	for (int r = 0; r < N; r++)
		for (int j = V; j < Vp; j++)
			logits[(size_t)r * Vp + j] = 1e4f;
	for (int r = 0; r < N; r++)
		tg[r] = rng_int(&rng, V);
	to_double(ld, logits, n);
	char label[96];
	snprintf(label, sizeof label, "softmax_xent N=%d V=%d Vp=%d%s", N, V,
		 Vp, offset != 0.0f ? " offset" : "");

	/* forward */
	fill_uniform(&rng, probs, n, -5.0f, 5.0f); /* garbage, overwritten */
	ferry_cpu_softmax_xent_forward(losses, probs, logits, tg, N, V, Vp);
	ref_softmax_xent_forward(lossd, pd, ld, tg, N, V, Vp);
	const double le = nerr_fd(losses, lossd, N), pe = nerr_fd(probs, pd, n);
	CHECK(le < FWD_TOL, "%s: loss error %.3g", label, le);
	CHECK(pe < FWD_TOL, "%s: probs error %.3g", label, pe);
	int pad_ok = 1;
	for (int r = 0; r < N; r++)
		for (int j = V; j < Vp; j++)
			pad_ok &= probs[(size_t)r * Vp + j] == 0.0f;
	CHECK(pad_ok, "%s: padding probabilities not 0", label);

	/* probs aliasing logits */
	float *inplace = TALLOC(float, n);
	memcpy(inplace, logits, sizeof(float) * (size_t)n);
	ferry_cpu_softmax_xent_forward(losses2, inplace, inplace, tg, N, V, Vp);
	CHECK(nerr_ff(inplace, probs, n) == 0.0 &&
		      nerr_ff(losses2, losses, N) == 0.0,
	      "%s: in-place forward differs", label);

	/* backward of the mean loss: dloss = 1 / N */
	fill_uniform(&rng, dl, n, -7.0f, 7.0f); /* garbage: backward WRITES */
	ferry_cpu_softmax_xent_backward(dl, probs, tg, 1.0f / N, N, V, Vp);
	XentCtx ctx = {ld, tg, N, V, Vp};
	fd_grad(num, ld, n, xent_loss, &ctx, GRAD_FD_STEP);
	const double ge = nerr_fd(dl, num, n);
	CHECK(ge < GRAD_TOL, "%s: dlogits error %.3g", label, ge);
	pad_ok = 1;
	for (int r = 0; r < N; r++)
		for (int j = V; j < Vp; j++)
			pad_ok &= dl[(size_t)r * Vp + j] == 0.0f;
	CHECK(pad_ok, "%s: padding gradient not 0", label);

	/* write semantics: same result whatever was in the buffer, and twice
	 * gives the same (not double) */
	memset(dl2, 0, sizeof(float) * (size_t)n);
	ferry_cpu_softmax_xent_backward(dl2, probs, tg, 1.0f / N, N, V, Vp);
	ferry_cpu_softmax_xent_backward(dl2, probs, tg, 1.0f / N, N, V, Vp);
	CHECK(nerr_ff(dl2, dl, n) == 0.0, "%s: backward does not overwrite",
	      label);
	/* dlogits aliasing probs */
	ferry_cpu_softmax_xent_backward(inplace, inplace, tg, 1.0f / N, N, V,
					Vp);
	CHECK(nerr_ff(inplace, dl, n) == 0.0, "%s: in-place backward differs",
	      label);

	report(label, fmax(le, pe), ge);
	free(logits);
	free(probs);
	free(losses);
	free(losses2);
	free(dl);
	free(dl2);
	free(tg);
	free(ld);
	free(pd);
	free(lossd);
	free(num);
	free(inplace);
}

/* ---- AdamW -------------------------------------------------------------- */

typedef struct {
	float lr, beta1, beta2, eps, wd, scale;
} AdamHp;

/* Runs `steps` steps of the kernel and of the reference from the same
 * state (m = v = 0) with fresh gradients each step; returns the worst of
 * the errors of m, v and of the parameter change. */
static double adamw_run(uint64_t seed, long n, int steps, AdamHp hp,
			float *p_out, float *m_out)
{
	Rng rng = rng_new(seed);
	float *p = TALLOC(float, n), *m = TALLOC(float, n),
	      *v = TALLOC(float, n);
	float *g = TALLOC(float, n), *p0 = TALLOC(float, n);
	double *pd = TALLOC(double, n), *md = TALLOC(double, n);
	double *vd = TALLOC(double, n), *gd = TALLOC(double, n);
	double *dp = TALLOC(double, n);
	float *dpf = TALLOC(float, n);
	fill_normal(&rng, p, n, 1.0f);
	memcpy(p0, p, sizeof(float) * (size_t)n);
	to_double(pd, p, n);
	for (int t = 1; t <= steps; t++) {
		fill_normal(&rng, g, n, 0.1f);
		to_double(gd, g, n);
		ferry_cpu_adamw_update(p, m, v, g, n, hp.lr, hp.beta1, hp.beta2,
				       hp.eps, hp.wd, hp.scale, t);
		ref_adamw_update(pd, md, vd, gd, n, hp.lr, hp.beta1, hp.beta2,
				 hp.eps, hp.wd, hp.scale, t);
	}
	for (long i = 0; i < n; i++) {
		dp[i] = pd[i] - (double)p0[i];
		dpf[i] = p[i] - p0[i];
	}
	double e = nerr_fd(m, md, n);
	e = fmax(e, nerr_fd(v, vd, n));
	e = fmax(e, nerr_fd(dpf, dp, n));
	e = fmax(e, nerr_fd(p, pd, n) * 100.0); /* param itself: 1e-7 level */
	if (p_out)
		memcpy(p_out, p, sizeof(float) * (size_t)n);
	if (m_out)
		memcpy(m_out, m, sizeof(float) * (size_t)n);
	free(p);
	free(m);
	free(v);
	free(g);
	free(p0);
	free(pd);
	free(md);
	free(vd);
	free(gd);
	free(dp);
	free(dpf);
	return e;
}

static void test_adamw(long n)
{
	const AdamHp base = {.lr = 0.01f,
			     .beta1 = 0.9f,
			     .beta2 = 0.95f,
			     .eps = 1e-8f,
			     .wd = 0.1f,
			     .scale = 0.7f};
	char label[96];
	snprintf(label, sizeof label, "adamw n=%ld", n);
	const double e1 = adamw_run(11, n, 1, base, NULL, NULL);
	const double e3 = adamw_run(11, n, 3, base, NULL, NULL);
	CHECK(e1 < 1e-4, "%s: 1 step error %.3g", label, e1);
	CHECK(e3 < 1e-4, "%s: 3 step error %.3g", label, e3);

	/* grad_scale and weight_decay must matter (and match the reference) */
	float *pa = TALLOC(float, n), *pb = TALLOC(float, n);
	float *ma = TALLOC(float, n), *mb = TALLOC(float, n);
	AdamHp hp = base;
	hp.scale = 1.0f;
	const double es = adamw_run(11, n, 2, hp, pa, ma);
	hp.scale = 0.5f;
	const double es2 = adamw_run(11, n, 2, hp, pb, mb);
	CHECK(es < 1e-4 && es2 < 1e-4, "%s: grad_scale runs error %.3g %.3g",
	      label, es, es2);
	CHECK(nerr_scaled_ff(mb, ma, 0.5, n) < 1e-6,
	      "%s: grad_scale 0.5 does not halve m", label);
	hp = base;
	hp.wd = 0.0f;
	const double ew = adamw_run(11, n, 1, hp, pa, NULL);
	hp.wd = 0.5f;
	const double ew2 = adamw_run(11, n, 1, hp, pb, NULL);
	CHECK(ew < 1e-4 && ew2 < 1e-4, "%s: weight_decay runs error %.3g %.3g",
	      label, ew, ew2);
	/* difference of the two runs is lr * 0.5 * param (param ~ N(0,1)) */
	CHECK(nerr_ff(pa, pb, n) > 1e-3, "%s: weight_decay has no effect",
	      label);
	const double e = fmax(fmax(e1, e3), fmax(fmax(es, es2), fmax(ew, ew2)));
	printf("%-44s 1 step %.2e  3 steps %.2e  scale/wd %.2e  %s\n", label,
	       e1, e3, fmax(fmax(es, es2), fmax(ew, ew2)),
	       e < 1e-4 ? "ok" : "FAIL");
	free(pa);
	free(pb);
	free(ma);
	free(mb);
}

/* ---- sum_squares -------------------------------------------------------- */

static void test_sum_squares(long n)
{
	Rng rng = rng_new(5 + (uint64_t)n);
	float *x = TALLOC(float, n);
	fill_normal(&rng, x, n, 3.0f);
	double ref = 0.0;
	for (long i = 0; i < n; i++)
		ref += (double)x[i] * (double)x[i];
	const double got = ferry_cpu_sum_squares(x, n);
	const double e = fabs(got - ref) / fmax(1e-300, fabs(ref));
	char label[96];
	snprintf(label, sizeof label, "sum_squares n=%ld", n);
	CHECK(n == 0 ? got == 0.0 : e < 1e-11, "%s: %.17g vs %.17g", label, got,
	      ref);
	printf("%-44s rel %.2e  %s\n", label, n ? e : 0.0,
	       (n == 0 ? got == 0.0 : e < 1e-11) ? "ok" : "FAIL");
	free(x);
}

/* The op's block sums (ZeRO-2's norm, through the CPU backend's op
 * dispatch): 3 ranks' slices of whole blocks (the last one past n), added
 * over the ranks and then in order, are the whole sum to the bit; the
 * blocks of a slice are only its own (the others 0). */
static void test_sum_squares_parts(long n)
{
	Rng rng = rng_new(7 + (uint64_t)n);
	float *x = TALLOC(float, n);
	const long per = ferry_cpu_sum_block(n), S = per * (FERRY_CPU_SUM_BLOCKS / 3 + 1);
	double sum[FERRY_CPU_SUM_BLOCKS] = { 0 }, part[FERRY_CPU_SUM_BLOCKS];
	int nonzero = 0, slices = 0;

	fill_normal(&rng, x, n, 3.0f);
	for (long lo = 0; lo < n; lo += S, slices++) {
		struct ferry_op_call c = { .kind = FERRY_OP_SUM_SQUARES, .n = n, .lo = lo, .hi = lo + S };

		c.in[0] = x + lo;
		c.out[0] = part;
		ferry_cpu_run_op(&c);
		for (int b = 0; b < FERRY_CPU_SUM_BLOCKS; b++) {
			CHECK(part[b] == 0 || (b * per >= lo && b * per < lo + S), "slice at %ld: block %d is not its", lo,
			      b);
			nonzero += part[b] != 0;
			sum[b] += part[b];
		}
	}
	CHECK(slices == 3 && nonzero == (int)((n + per - 1) / per), "%d slices, %d blocks summed", slices, nonzero);
	CHECK(ferry_cpu_sum_parts(sum) == ferry_cpu_sum_squares(x, n), "slices %.17g, whole %.17g",
	      ferry_cpu_sum_parts(sum), ferry_cpu_sum_squares(x, n));
	printf("%-44s same bits as the whole: %s\n", "sum_squares in 3 slices",
	       ferry_cpu_sum_parts(sum) == ferry_cpu_sum_squares(x, n) ? "ok" : "FAIL");
	free(x);
}

int main(void)
{
	test_encoder(1, 2, 5, 8, 11);
	test_encoder(2, 3, 7, 13, 4); /* many repeated tokens */
	test_encoder(3, 1, 1, 1, 1);

	test_layernorm(10, 10, 8, 0.0f);
	test_layernorm(11, 3, 13, 0.0f);
	test_layernorm(12, 4, 37, 10.0f);
	test_layernorm(13, 2, 3, 0.0f);

	test_matmul(20, 10, 8, 12, 1);
	test_matmul(21, 10, 8, 12, 0);
	test_matmul(22, 7, 13, 5, 1);
	test_matmul(23, 1, 1, 1, 1);
	test_matmul(24, 40, 24, 36, 1);

	test_attention(30, 2, 5, 8, 2, 1.0f, ATT_RANDOM, 1);
	test_attention(31, 2, 1, 8, 2, 1.0f, ATT_RANDOM, 1);
	test_attention(32, 1, 7, 12, 3, 1.0f, ATT_RANDOM, 1);
	test_attention(33, 1, 67, 6, 2, 1.0f, ATT_RANDOM, 1);
	test_attention(34, 1, 67, 4, 1, 1.0f, ATT_RAMP_UP, 1);
	test_attention(35, 2, 150, 16, 4, 1.0f, ATT_RAMP_UP, 0);
	test_attention(36, 2, 150, 16, 4, 1.0f, ATT_RAMP_DOWN, 0);
	test_attention(37, 2, 150, 16, 4, 8.0f, ATT_RANDOM, 0);

	test_gelu(40, 37, 2.0f);
	test_gelu(41, 1, 1.0f);
	test_gelu(42, 1000, 5.0f);

	test_residual(50, 37);
	test_residual(51, 1);

	test_softmax_xent(60, 10, 11, 16, 1.0f, 0.0f);
	test_softmax_xent(61, 3, 7, 7, 2.0f, 0.0f);
	test_softmax_xent(62, 5, 1, 4, 1.0f, 0.0f);
	test_softmax_xent(63, 4, 50, 64, 30.0f, 1000.0f);

	test_adamw(37);
	test_adamw(100003);

	test_sum_squares(0);
	test_sum_squares(1001);
	test_sum_squares(1000003);
	test_sum_squares_parts(1000003);

	return test_exit_code();
}
