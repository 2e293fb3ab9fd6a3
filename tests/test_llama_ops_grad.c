/*
 * The Llama ops' CPU kernels (RMSNorm, RoPE, SwiGLU, grouped-query
 * attention) against float64 references written from Hugging Face's
 * formulas (tests/ref_ops.h).
 *
 * For each op and several shapes (including odd ones):
 *   forward   fp32 kernel vs float64 reference, normalised error below the
 *             op's bound;
 *   backward  with L = sum(out * R) for a fresh random R, the kernel's
 *             backward called with dout = R vs a central finite difference of
 *             the float64 reference loss, for every element of every input
 *             and weight, normalised error below the op's bound;
 *   contract  backward twice into one buffer gives twice the gradient
 *             (accumulate), and each NULL gradient pointer is skipped without
 *             disturbing the others.
 * Plus: RoPE angles against exact double angles at long positions (float32
 * angles as HF) and position 0 is the identity; SwiGLU at extreme gates;
 * grouped-query attention against plain multi-head attention with the key
 * and value heads repeated (repeat_kv) and, for NKV == NH, against each head
 * run alone (bit for bit); the op table and the CPU backend's op calls
 * (NKV = 0 means NH, bit for bit).
 */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"
#include "ops/op.h"
#include "grad_check.h"
#include "ref_ops.h"
#include "test_util.h"

/* Normalised error bounds, per op (the fp32 kernels against float64).  The
 * measured errors are printed; the bounds leave a factor of about 10 over the
 * worst of them (fp32 rounding is ~6e-8). */
#define RMSNORM_FWD_TOL 2e-6
#define RMSNORM_GRAD_TOL 5e-6
#define ROPE_FWD_TOL 1e-6
#define ROPE_GRAD_TOL 1e-6
#define SWIGLU_FWD_TOL 2e-6
#define SWIGLU_GRAD_TOL 3e-6
#define ATT_FWD_TOL 2e-6
#define ATT_GRAD_TOL 5e-6

/* out_new, with garbage in out: the forward must overwrite it. */
static void out_new_dirty(GradCase *c, Rng *rng, long nout)
{
	out_new(c, rng, nout);
	fill_uniform(rng, c->out, nout, 100.0f, 200.0f);
}

static void report(const char *label, double fwd, double fwd_tol, double grad,
		   double grad_tol)
{
	printf("%-52s fwd %.2e  grad %.2e  %s\n", label, fwd, grad,
	       (fwd < fwd_tol && grad < grad_tol) ? "ok" : "FAIL");
}

static int bits_equal(const float *a, const float *b, long n)
{
	return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* ---- RMSNorm ------------------------------------------------------------ */

static double rmsnorm_loss(void *p)
{
	GradCase *c = p;
	ref_rmsnorm_forward(c->outd, NULL, c->xd[0], c->xd[1], c->N, c->C,
			    (double)c->eps);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void rmsnorm_bwd(GradCase *c, float **g)
{
	ferry_cpu_rmsnorm_backward(g[0], g[1], c->R, c->x[0], c->x[1], c->rstd,
				   c->N, c->C, 0.0f);
}

static void test_rmsnorm(uint64_t seed, int N, int C, float eps, float scale,
			 float offset)
{
	Rng rng = rng_new(seed);
	GradCase c = {.N = N, .C = C, .eps = eps};
	c.backward = rmsnorm_bwd;
	c.loss = rmsnorm_loss;
	c.grad_tol = RMSNORM_GRAD_TOL;
	const long n = (long)N * C;
	float *inp = arg_new(&c, "inp", n);
	float *w = arg_new(&c, "weight", C);
	fill_normal(&rng, inp, n, scale);
	for (long i = 0; i < n; i++)
		inp[i] += offset;
	fill_uniform(&rng, w, C, 0.5f, 1.5f);
	args_sync(&c);
	out_new_dirty(&c, &rng, n);
	c.rstd = TALLOC(float, N);

	ferry_cpu_rmsnorm_forward(c.out, c.rstd, inp, w, N, C, eps, 0.0f);
	double *rd = TALLOC(double, N);
	ref_rmsnorm_forward(c.outd, rd, c.xd[0], c.xd[1], N, C, (double)eps);
	const double fe =
		fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.rstd, rd, N));
	char label[96];
	snprintf(label, sizeof label, "rmsnorm N=%d C=%d eps=%g scale=%g%s", N,
		 C, (double)eps, (double)scale, offset != 0.0f ? " offset" : "");
	CHECK(fe < RMSNORM_FWD_TOL, "%s: forward error %.3g", label, fe);
	const double ge = check_grads(&c, label);
	report(label, fe, RMSNORM_FWD_TOL, ge, RMSNORM_GRAD_TOL);
	free(rd);
	case_free(&c);
}

/* ---- RoPE --------------------------------------------------------------- */

static double rope_loss(void *p)
{
	GradCase *c = p;
	ref_rope_forward(c->outd, c->xd[0], c->freqs, c->B, c->T, c->NH, c->HS);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void rope_bwd(GradCase *c, float **g)
{
	ferry_cpu_rope_backward(g[0], c->R, c->B, c->T, c->NH, c->HS, &c->rf);
}

/* Plain RoPE of base theta. */
static struct ferry_rope_freq plain(float theta)
{
	return (struct ferry_rope_freq){.theta = theta};
}

/* The kernel's constants for a reference scaling (NULL: none). */
static struct ferry_rope_freq scaled(float theta, const struct ref_rope_scaling *sc)
{
	struct ferry_rope_freq r = plain(theta);
	if (sc) {
		r.type = sc->type;
		r.factor = (float)sc->factor;
		r.low_freq_factor = (float)sc->low;
		r.high_freq_factor = (float)sc->high;
		r.original_max_pos = (float)sc->orig;
	}
	return r;
}

static void test_rope_scaled(uint64_t seed, int B, int T, int NH, int HS, float theta,
			     const struct ref_rope_scaling *sc)
{
	Rng rng = rng_new(seed);
	GradCase c = {.B = B, .T = T, .NH = NH, .HS = HS, .rf = scaled(theta, sc)};
	c.backward = rope_bwd;
	c.loss = rope_loss;
	c.grad_tol = ROPE_GRAD_TOL;
	const long n = (long)B * T * NH * HS;
	float *x = arg_new(&c, "inp", n);
	fill_normal(&rng, x, n, 1.0f);
	args_sync(&c);
	out_new_dirty(&c, &rng, n);
	c.freqs = TALLOC(double, (long)T * (HS / 2));
	ref_rope_freqs_scaled(c.freqs, T, HS, (double)theta, sc, 1);

	ferry_cpu_rope_forward(c.out, x, B, T, NH, HS, &c.rf);
	ref_rope_forward(c.outd, c.xd[0], c.freqs, B, T, NH, HS);
	const double fe = nerr_fd(c.out, c.outd, n);
	char label[96];
	snprintf(label, sizeof label, "rope B=%d T=%d NH=%d HS=%d theta=%g%s", B,
		 T, NH, HS, (double)theta,
		 !sc ? "" : sc->type == 1 ? " linear" : " llama3");
	CHECK(fe < ROPE_FWD_TOL, "%s: forward error %.3g", label, fe);

	/* position 0 is the identity, exactly */
	int id0 = 1;
	for (int b = 0; b < B; b++) {
		const long o = (long)b * T * NH * HS;
		id0 &= bits_equal(c.out + o, x + o, (long)NH * HS);
	}
	CHECK(id0, "%s: position 0 is not the identity", label);

	const double ge = check_grads(&c, label);
	report(label, fe, ROPE_FWD_TOL, ge, ROPE_GRAD_TOL);
	case_free(&c);
}

static void test_rope(uint64_t seed, int B, int T, int NH, int HS, float theta)
{
	test_rope_scaled(seed, B, T, NH, HS, theta, NULL);
}

/* The kernel's frequencies against transformers' scaling written in double
 * (ref_rope_scale), read back from the kernel itself: at position 1 a unit
 * vector in channel i turns to (cos inv_i, sin inv_i), so atan2 gives the
 * frequency the kernel used.  Llama 3.1's and 3.2's constants put pairs in
 * all three bands (kept, divided by factor, smoothed between). */
static void test_rope_freqs(int HS, float theta, const struct ref_rope_scaling *sc)
{
	const int half = HS / 2, T = 2;
	const struct ferry_rope_freq rf = scaled(theta, sc);
	float *x = TALLOC(float, (long)T * HS), *y = TALLOC(float, (long)T * HS);
	int bands[3] = {0, 0, 0};
	double worst = 0.0;

	for (int i = 0; i < half; i++) {
		memset(x, 0, sizeof(float) * (size_t)T * HS);
		x[HS + i] = 1.0f; /* position 1, channel i */
		ferry_cpu_rope_forward(y, x, 1, T, 1, HS, &rf);
		const double got = atan2((double)y[HS + half + i], (double)y[HS + i]);
		const double inv = 1.0 / pow((double)theta, (double)(2 * i) / HS);
		const double want = ref_rope_scale(inv, sc);
		const double err = fabs(got - want) / want;
		worst = fmax(worst, err);
		bands[want == inv ? 0 : fabs(want * sc->factor - inv) <= 1e-12 * inv ? 1 : 2]++;
	}
	char label[96];
	snprintf(label, sizeof label, "rope freqs HS=%d theta=%g %s factor=%g", HS, (double)theta,
		 sc->type == 1 ? "linear" : "llama3", sc->factor);
	CHECK(worst < 1e-6, "%s: frequency off by %.3g (relative)", label, worst);
	CHECK(sc->type != 2 || (bands[0] && bands[1] && bands[2]),
	      "%s: bands kept %d, divided %d, smoothed %d: not all three", label, bands[0], bands[1],
	      bands[2]);
	printf("%-52s max rel error %.2e (kept %d, divided %d, smoothed %d)  %s\n", label, worst,
	       bands[0], bands[1], bands[2], worst < 1e-6 ? "ok" : "FAIL");
	free(x);
	free(y);
}

/* Long positions: the kernel's angles are HF's float32 ones.  Against HF's
 * float32 freqs the error stays at rounding level; against exact double
 * angles it grows with t like the float32 rounding of t * inv_freq (half an
 * ulp of the angle, |out| ~ |x|), which we bound (and print). */
static void test_rope_long(uint64_t seed, int T, int HS, float theta)
{
	Rng rng = rng_new(seed);
	const int NH = 2, half = HS / 2;
	const long n = (long)T * NH * HS;
	float *x = TALLOC(float, n), *y = TALLOC(float, n);
	double *xd = TALLOC(double, n), *yd = TALLOC(double, n);
	double *fr = TALLOC(double, (long)T * half);
	fill_normal(&rng, x, n, 1.0f);
	to_double(xd, x, n);
	const struct ferry_rope_freq rf = plain(theta);
	ferry_cpu_rope_forward(y, x, 1, T, NH, HS, &rf);

	ref_rope_freqs(fr, T, HS, (double)theta, 1);
	ref_rope_forward(yd, xd, fr, 1, T, NH, HS);
	const double e_hf = nerr_fd(y, yd, n);

	ref_rope_freqs(fr, T, HS, (double)theta, 0);
	ref_rope_forward(yd, xd, fr, 1, T, NH, HS);
	const double e_exact = nerr_fd(y, yd, n);
	/* Angle error: half an ulp of the largest angle, (T - 1) rad, from the
	 * product, plus (T - 1) times inv_freq's relative error (the power's and
	 * the division's roundings, half an ulp each).  An angle error d moves
	 * an output by at most |x1| d + |x2| d, so relative to max|x| ~ max|out|
	 * twice the angle error bounds the normalised error. */
	const double ulp = ldexp(1.0, ilogb((double)(T - 1)) - 23);
	const double bound =
		2.0 * (0.5 * ulp + 2.0 * (T - 1) * ldexp(1.0, -24)) + 1e-6;

	char label[96];
	snprintf(label, sizeof label, "rope long T=%d HS=%d theta=%g", T, HS,
		 (double)theta);
	CHECK(e_hf < ROPE_FWD_TOL, "%s: vs HF float32 angles %.3g", label,
	      e_hf);
	CHECK(e_exact < bound, "%s: vs exact angles %.3g (bound %.3g)", label,
	      e_exact, bound);
	printf("%-52s vs HF fp32 angles %.2e  vs exact angles %.2e (bound "
	       "%.1e)  %s\n",
	       label, e_hf, e_exact, bound,
	       (e_hf < ROPE_FWD_TOL && e_exact < bound) ? "ok" : "FAIL");
	free(x);
	free(y);
	free(xd);
	free(yd);
	free(fr);
}

/* ---- SwiGLU ------------------------------------------------------------- */

static double swiglu_loss(void *p)
{
	GradCase *c = p;
	ref_swiglu_forward(c->outd, c->xd[0], c->xd[1], c->nout);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void swiglu_bwd(GradCase *c, float **g)
{
	ferry_cpu_swiglu_backward(g[0], g[1], c->R, c->x[0], c->x[1], c->nout);
}

static void test_swiglu(uint64_t seed, long n, float scale)
{
	Rng rng = rng_new(seed);
	GradCase c = {0};
	c.backward = swiglu_bwd;
	c.loss = swiglu_loss;
	c.grad_tol = SWIGLU_GRAD_TOL;
	float *gate = arg_new(&c, "gate", n);
	float *up = arg_new(&c, "up", n);
	fill_normal(&rng, gate, n, scale);
	fill_normal(&rng, up, n, 1.0f);
	args_sync(&c);
	out_new_dirty(&c, &rng, n);

	ferry_cpu_swiglu_forward(c.out, gate, up, n);
	ref_swiglu_forward(c.outd, c.xd[0], c.xd[1], n);
	const double fe = nerr_fd(c.out, c.outd, n);
	/* out aliasing gate, then up */
	float *y = TALLOC(float, n);
	memcpy(y, gate, sizeof(float) * (size_t)n);
	ferry_cpu_swiglu_forward(y, y, up, n);
	int alias_ok = bits_equal(y, c.out, n);
	memcpy(y, up, sizeof(float) * (size_t)n);
	ferry_cpu_swiglu_forward(y, gate, y, n);
	alias_ok &= bits_equal(y, c.out, n);
	char label[96];
	snprintf(label, sizeof label, "swiglu n=%ld scale=%g", n,
		 (double)scale);
	CHECK(fe < SWIGLU_FWD_TOL, "%s: forward error %.3g", label, fe);
	CHECK(alias_ok, "%s: in-place forward differs", label);
	const double ge = check_grads(&c, label);
	report(label, fe, SWIGLU_FWD_TOL, ge, SWIGLU_GRAD_TOL);
	free(y);
	case_free(&c);
}

/* Extreme gates: finite, and the right limits (silu(x) -> x for x >> 0,
 * -> 0 for x << 0; d silu -> 1 and 0). */
static void test_swiglu_extremes(void)
{
	const float gate[6] = {-1000.0f, -100.0f, -20.0f, 20.0f, 100.0f,
			       1000.0f};
	float up[6], out[6], dg[6] = {0}, du[6] = {0}, dout[6];
	for (int i = 0; i < 6; i++)
		up[i] = dout[i] = 1.0f;
	ferry_cpu_swiglu_forward(out, gate, up, 6);
	ferry_cpu_swiglu_backward(dg, du, dout, gate, up, 6);
	int ok = 1;
	for (int i = 0; i < 6; i++) {
		const double x = gate[i];
		const double s = 1.0 / (1.0 + exp(-x));
		const double ref = x * s, dref = s * (1.0 + x * (1.0 - s));
		ok &= isfinite(out[i]) && isfinite(dg[i]) && isfinite(du[i]);
		ok &= fabs(out[i] - ref) <= 1e-6 * fmax(1.0, fabs(ref));
		ok &= fabs(dg[i] - dref) <= 1e-5;
		ok &= du[i] == out[i];
	}
	CHECK(ok, "swiglu extremes: non-finite or wrong limits");
	printf("%-52s %s\n", "swiglu gates +-20, +-100, +-1000",
	       ok ? "ok" : "FAIL");
}

/* ---- grouped-query attention -------------------------------------------- */

static double gqa_loss(void *p)
{
	GradCase *c = p;
	ref_attention_window_forward(c->outd, NULL, c->xd[0], c->xd[1],
				     c->xd[2], c->B, c->T, c->C, c->NH, c->NKV,
				     c->window);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void gqa_bwd(GradCase *c, float **g)
{
	ferry_cpu_attention_backward(g[0], g[1], g[2], c->R, c->x[0], c->x[1],
				     c->x[2], c->out, c->lse, c->B, c->T, c->C,
				     c->NH, c->NKV, c->window, 0.0f, 0.0f);
}

/* [B, T, NKV * HS] -> [B, T, NH * HS], kv head h / G copied to head h
 * (Hugging Face repeat_kv, in our [B, T, heads, HS] layout). */
static void repeat_kv(float *dst, const float *src, int B, int T, int NH,
		      int NKV, int HS)
{
	const int G = NH / NKV;
	for (long r = 0; r < (long)B * T; r++)
		for (int h = 0; h < NH; h++)
			memcpy(dst + (r * NH + h) * HS,
			       src + (r * NKV + h / G) * HS,
			       sizeof(float) * (size_t)HS);
}

/* Gradient of the repeated tensor back to the kv heads: sum over each
 * group, in double (the reference for GQA's dk, dv). */
static void sum_kv_groups(double *dst, const float *src, int B, int T, int NH,
			  int NKV, int HS)
{
	const int G = NH / NKV;
	memset(dst, 0, sizeof(double) * (size_t)B * T * NKV * HS);
	for (long r = 0; r < (long)B * T; r++)
		for (int h = 0; h < NH; h++)
			for (int i = 0; i < HS; i++)
				dst[(r * NKV + h / G) * HS + i] +=
					src[(r * NH + h) * HS + i];
}

/* GQA against multi-head attention on explicitly repeated k and v: forward
 * and lse bit for bit (same arithmetic per query head), dq bit for bit, and
 * dk, dv the group sums of the repeated gradients (summation order differs,
 * so to rounding). */
static double check_gqa_vs_repeat(GradCase *c, const char *label)
{
	const int B = c->B, T = c->T, C = c->C, NH = c->NH, NKV = c->NKV;
	const int HS = C / NH, W = c->window;
	const long n = (long)B * T * C, nkv = (long)B * T * NKV * HS;
	const long nl = (long)B * NH * T;
	float *kr = TALLOC(float, n), *vr = TALLOC(float, n);
	float *o = TALLOC(float, n), *lse = TALLOC(float, nl);
	float *dq = TALLOC(float, n), *dkr = TALLOC(float, n),
	      *dvr = TALLOC(float, n);
	float *gq = TALLOC(float, n), *gk = TALLOC(float, nkv),
	      *gv = TALLOC(float, nkv);
	double *sk = TALLOC(double, nkv), *sv = TALLOC(double, nkv);

	repeat_kv(kr, c->x[1], B, T, NH, NKV, HS);
	repeat_kv(vr, c->x[2], B, T, NH, NKV, HS);
	ferry_cpu_attention_forward(o, lse, c->x[0], kr, vr, B, T, C, NH, NH, W, 0.0f, 0.0f);
	CHECK(bits_equal(o, c->out, n) && bits_equal(lse, c->lse, nl),
	      "%s: forward != repeat_kv + multi-head, bit for bit", label);

	ferry_cpu_attention_backward(dq, dkr, dvr, c->R, c->x[0], kr, vr, o,
				     lse, B, T, C, NH, NH, W, 0.0f, 0.0f);
	ferry_cpu_attention_backward(gq, gk, gv, c->R, c->x[0], c->x[1],
				     c->x[2], c->out, c->lse, B, T, C, NH, NKV, W, 0.0f, 0.0f);
	CHECK(bits_equal(gq, dq, n),
	      "%s: dq != repeat_kv + multi-head, bit for bit", label);
	sum_kv_groups(sk, dkr, B, T, NH, NKV, HS);
	sum_kv_groups(sv, dvr, B, T, NH, NKV, HS);
	const double e = fmax(nerr_fd(gk, sk, nkv), nerr_fd(gv, sv, nkv));
	CHECK(e < 1e-6, "%s: dk/dv != group sums of repeated (%.3g)", label,
	      e);
	free(kr);
	free(vr);
	free(o);
	free(lse);
	free(dq);
	free(dkr);
	free(dvr);
	free(gq);
	free(gk);
	free(gv);
	free(sk);
	free(sv);
	return e;
}

/* NKV == NH: every head computed alone (NH = 1 on its own [B, T, HS]
 * slices) gives the same bits as the multi-head call, forward and
 * backward: the multi-head path is exactly per-head attention. */
static int check_heads_alone(GradCase *c)
{
	const int B = c->B, T = c->T, C = c->C, NH = c->NH, HS = C / NH;
	const int W = c->window;
	const long n = (long)B * T * C, nh = (long)B * T * HS;
	float *s[4], *g[3], *o = TALLOC(float, nh), *lse = TALLOC(float, B * T);
	float *full[3];
	int ok = 1;
	for (int a = 0; a < 4; a++)
		s[a] = TALLOC(float, nh);
	for (int a = 0; a < 3; a++) {
		g[a] = TALLOC(float, nh);
		full[a] = TALLOC(float, n);
	}
	ferry_cpu_attention_backward(full[0], full[1], full[2], c->R, c->x[0],
				     c->x[1], c->x[2], c->out, c->lse, B, T, C,
				     NH, NH, W, 0.0f, 0.0f);
	for (int h = 0; h < NH; h++) {
		const float *srcs[4] = {c->x[0], c->x[1], c->x[2], c->R};
		for (int a = 0; a < 4; a++)
			for (long r = 0; r < (long)B * T; r++)
				memcpy(s[a] + r * HS, srcs[a] + r * C + h * HS,
				       sizeof(float) * (size_t)HS);
		for (int a = 0; a < 3; a++)
			memset(g[a], 0, sizeof(float) * (size_t)nh);
		ferry_cpu_attention_forward(o, lse, s[0], s[1], s[2], B, T, HS,
					    1, 1, W, 0.0f, 0.0f);
		ferry_cpu_attention_backward(g[0], g[1], g[2], s[3], s[0], s[1],
					     s[2], o, lse, B, T, HS, 1, 1, W, 0.0f, 0.0f);
		for (long r = 0; r < (long)B * T; r++) {
			ok &= bits_equal(o + r * HS, c->out + r * C + h * HS,
					 HS);
			for (int a = 0; a < 3; a++)
				ok &= bits_equal(g[a] + r * HS,
						 full[a] + r * C + h * HS, HS);
		}
		for (int b = 0; b < B; b++)
			ok &= bits_equal(lse + (long)b * T,
					 c->lse + ((long)b * NH + h) * T, T);
	}
	for (int a = 0; a < 4; a++)
		free(s[a]);
	for (int a = 0; a < 3; a++) {
		free(g[a]);
		free(full[a]);
	}
	free(o);
	free(lse);
	return ok;
}

/* A window W >= T cuts nothing: the same bits as no window (W = 0),
 * forward and backward. */
static int check_wide_window_is_full(GradCase *c)
{
	const int B = c->B, T = c->T, C = c->C, NH = c->NH, NKV = c->NKV;
	const long n = (long)B * T * C, nkv = (long)B * T * NKV * (C / NH), nl = (long)B * NH * T;
	float *o = TALLOC(float, n), *lse = TALLOC(float, nl);
	float *g[3] = { TALLOC(float, n), TALLOC(float, nkv), TALLOC(float, nkv) };
	float *h[3] = { TALLOC(float, n), TALLOC(float, nkv), TALLOC(float, nkv) };
	int ok;

	ferry_cpu_attention_forward(o, lse, c->x[0], c->x[1], c->x[2], B, T, C, NH, NKV, 0, 0.0f, 0.0f);
	ok = bits_equal(o, c->out, n) && bits_equal(lse, c->lse, nl);
	ferry_cpu_attention_backward(g[0], g[1], g[2], c->R, c->x[0], c->x[1], c->x[2], o, lse, B, T, C, NH, NKV, 0,
				     0.0f, 0.0f);
	ferry_cpu_attention_backward(h[0], h[1], h[2], c->R, c->x[0], c->x[1], c->x[2], o, lse, B, T, C, NH, NKV,
				     c->window, 0.0f, 0.0f);
	ok &= bits_equal(g[0], h[0], n) && bits_equal(g[1], h[1], nkv) && bits_equal(g[2], h[2], nkv);
	for (int a = 0; a < 3; a++) {
		free(g[a]);
		free(h[a]);
	}
	free(o);
	free(lse);
	return ok;
}

static void test_gqa_window(uint64_t seed, int B, int T, int NH, int NKV, int HS, int W)
{
	Rng rng = rng_new(seed);
	const int C = NH * HS;
	GradCase c = {.B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .window = W};
	c.backward = gqa_bwd;
	c.loss = gqa_loss;
	c.grad_tol = ATT_GRAD_TOL;
	/* one key (T = 1, or a window of 1): dq = dk = 0 */
	c.nonzero = T == 1 || W == 1 ? GRAD_NONZERO_WAIVED : GRAD_NONZERO_REQUIRED;
	const long n = (long)B * T * C, nkv = (long)B * T * NKV * HS;
	float *q = arg_new(&c, "q", n);
	float *k = arg_new(&c, "k", nkv);
	float *v = arg_new(&c, "v", nkv);
	fill_normal(&rng, q, n, 1.0f);
	fill_normal(&rng, k, nkv, 1.0f);
	fill_normal(&rng, v, nkv, 1.0f);
	args_sync(&c);
	out_new_dirty(&c, &rng, n);
	const long nl = (long)B * NH * T;
	c.lse = TALLOC(float, nl);

	ferry_cpu_attention_forward(c.out, c.lse, q, k, v, B, T, C, NH, NKV, W, 0.0f, 0.0f);
	double *lsed = TALLOC(double, nl);
	ref_attention_window_forward(c.outd, lsed, c.xd[0], c.xd[1], c.xd[2],
				     B, T, C, NH, NKV, W);
	const double fe = fmax(nerr_fd(c.out, c.outd, n),
			       nerr_fd(c.lse, lsed, nl));
	char label[96];
	if (W)
		snprintf(label, sizeof label, "attention B=%d T=%d NH=%d NKV=%d HS=%d W=%d", B, T, NH, NKV, HS, W);
	else
		snprintf(label, sizeof label, "attention B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
	CHECK(fe < ATT_FWD_TOL, "%s: forward error %.3g", label, fe);
	const double ge = check_grads(&c, label);
	report(label, fe, ATT_FWD_TOL, ge, ATT_GRAD_TOL);
	const double re = check_gqa_vs_repeat(&c, label);
	printf("%-52s repeat_kv: fwd, lse, dq bitwise; dk, dv %.2e\n", "", re);
	if (NKV == NH) {
		const int ok = check_heads_alone(&c);
		CHECK(ok, "%s: multi-head != each head alone, bit for bit",
		      label);
		printf("%-52s each head alone: bitwise %s\n", "",
		       ok ? "ok" : "FAIL");
	}
	if (W >= T) {
		const int ok = check_wide_window_is_full(&c);
		CHECK(ok, "%s: a window >= T != no window, bit for bit", label);
		printf("%-52s window >= T is no window: bitwise %s\n", "", ok ? "ok" : "FAIL");
	}
	free(lsed);
	case_free(&c);
}

static void test_gqa(uint64_t seed, int B, int T, int NH, int NKV, int HS)
{
	test_gqa_window(seed, B, T, NH, NKV, HS, 0);
}

/* Head sizes the tiled kernels specialise (64, 128), one they do not (32),
 * and one above their stack tile (264: the row-by-row path), at sequences
 * across several key tiles: the forward against the float64 reference
 * everywhere, the gradients against central finite differences at
 * `samples` random entries of each of q, k and v (every entry would take
 * minutes at these sizes). */
static void test_attention_sampled(uint64_t seed, int B, int T, int NH, int NKV, int HS, int W, int samples)
{
	Rng rng = rng_new(seed);
	const int C = NH * HS;
	GradCase c = {.B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .window = W};
	const long n = (long)B * T * C, nkv = (long)B * T * NKV * HS, nl = (long)B * NH * T;
	float *g[3];
	double fe, ge = 0.0;
	char label[96];

	c.loss = gqa_loss;
	fill_normal(&rng, arg_new(&c, "q", n), n, 1.0f);
	fill_normal(&rng, arg_new(&c, "k", nkv), nkv, 1.0f);
	fill_normal(&rng, arg_new(&c, "v", nkv), nkv, 1.0f);
	args_sync(&c);
	out_new_dirty(&c, &rng, n);
	c.lse = TALLOC(float, nl);
	double *lsed = TALLOC(double, nl);
	ferry_cpu_attention_forward(c.out, c.lse, c.x[0], c.x[1], c.x[2], B, T, C, NH, NKV, W, 0.0f, 0.0f);
	ref_attention_window_forward(c.outd, lsed, c.xd[0], c.xd[1], c.xd[2], B, T, C, NH, NKV, W);
	fe = fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.lse, lsed, nl));
	if (W)
		snprintf(label, sizeof label, "attention B=%d T=%d NH=%d NKV=%d HS=%d W=%d", B, T, NH, NKV, HS, W);
	else
		snprintf(label, sizeof label, "attention B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
	CHECK(fe < ATT_FWD_TOL, "%s: forward error %.3g", label, fe);
	for (int a = 0; a < 3; a++)
		g[a] = TALLOC(float, c.n[a]); /* zeroed: the kernel accumulates */
	gqa_bwd(&c, g);
	for (int a = 0; a < 3; a++) {
		double err = 0.0, mag = 0.0;

		for (int i = 0; i < samples; i++) {
			const long e = (long)rng_int(&rng, (int)c.n[a]);
			double num;

			fd_grad(&num, c.xd[a] + e, 1, gqa_loss, &c, GRAD_FD_STEP);
			err = fmax(err, fabs(g[a][e] - num));
			mag = fmax(mag, fabs(num));
		}
		err /= fmax(1e-6, mag);
		CHECK(err < ATT_GRAD_TOL * 4, "%s: d%s error %.3g at %d sampled entries", label, c.argname[a], err,
		      samples);
		ge = fmax(ge, err);
		free(g[a]);
	}
	report(label, fe, ATT_FWD_TOL, ge, ATT_GRAD_TOL * 4);
	free(lsed);
	case_free(&c);
}

/* ---- op table and CPU backend op calls ---------------------------------- */

static void test_op_table(void)
{
	const struct ferry_op_info *r = ferry_op_info(FERRY_OP_RMSNORM);
	const struct ferry_op_info *p = ferry_op_info(FERRY_OP_ROPE);
	const struct ferry_op_info *s = ferry_op_info(FERRY_OP_SWIGLU);
	CHECK(!strcmp(r->name, "rmsnorm") && r->n_in == 1 && r->n_out == 2 &&
		      r->n_w == 1 &&
		      r->bwd_needs == (FERRY_NEEDS_IN(0) | FERRY_NEEDS_OUT(1)) &&
		      r->out_no_grad == 0x2 && !r->is_dot,
	      "rmsnorm op_table entry");
	CHECK(!strcmp(p->name, "rope") && p->n_in == 1 && p->n_out == 1 &&
		      p->n_w == 0 && p->bwd_needs == 0 && p->out_no_grad == 0,
	      "rope op_table entry");
	CHECK(!strcmp(s->name, "swiglu") && s->n_in == 2 && s->n_out == 1 &&
		      s->n_w == 0 &&
		      s->bwd_needs == (FERRY_NEEDS_IN(0) | FERRY_NEEDS_IN(1)) &&
		      s->out_no_grad == 0,
	      "swiglu op_table entry");
	struct ferry_op_call a = {.kind = FERRY_OP_ATTENTION, .B = 2, .T = 8,
				  .C = 32, .NH = 4, .NKV = 1};
	struct ferry_op_call m = a;
	m.NKV = 0;
	CHECK(ferry_op_flops(&a) == ferry_op_flops(&m) && ferry_op_flops(&a) > 0,
	      "attention FLOPs change with NKV");
	struct ferry_op_call f = {.kind = FERRY_OP_RMSNORM, .B = 2, .T = 3,
				  .C = 8, .NH = 2, .n = 48};
	CHECK(ferry_op_flops(&f) > 0, "rmsnorm FLOPs");
	f.kind = FERRY_OP_ROPE;
	CHECK(ferry_op_flops(&f) > 0, "rope FLOPs");
	f.kind = FERRY_OP_SWIGLU;
	CHECK(ferry_op_flops(&f) > 0, "swiglu FLOPs");
	printf("%-52s %s\n", "op table entries and FLOPs",
	       test_failed() ? "FAIL" : "ok");
}

/* Each new kind through ferry_cpu_run_op gives the kernels' bits; attention
 * with NKV = 0 gives NKV = NH's bits, and NKV = 2 the kernel's GQA. */
static void test_cpu_op_calls(void)
{
	Rng rng = rng_new(99);
	const int B = 2, T = 9, NH = 4, HS = 8, C = NH * HS, N = B * T;
	const long n = (long)N * C;
	float *x = TALLOC(float, n), *y = TALLOC(float, n), *w = TALLOC(float, C);
	float *d = TALLOC(float, n), *r1 = TALLOC(float, n), *r2 = TALLOC(float, n);
	float *o1 = TALLOC(float, n), *o2 = TALLOC(float, n);
	float *s1 = TALLOC(float, N * NH), *s2 = TALLOC(float, N * NH);
	float *g1 = TALLOC(float, n), *g2 = TALLOC(float, n);
	float *h1 = TALLOC(float, n), *h2 = TALLOC(float, n);
	float *dw1 = TALLOC(float, C), *dw2 = TALLOC(float, C);
	fill_normal(&rng, x, n, 1.0f);
	fill_normal(&rng, y, n, 1.0f);
	fill_normal(&rng, d, n, 1.0f);
	fill_uniform(&rng, w, C, 0.5f, 1.5f);
	int ok = 1;

	/* rmsnorm */
	struct ferry_op_call c = {.kind = FERRY_OP_RMSNORM, .B = B, .T = T,
				  .C = C, .NH = NH};
	c.scalar[0] = 1e-5f;
	c.out[0] = o1;
	c.out[1] = s1;
	c.in[0] = x;
	c.w[0] = w;
	ferry_cpu_run_op(&c);
	ferry_cpu_rmsnorm_forward(o2, s2, x, w, N, C, 1e-5f, 0.0f);
	ok &= bits_equal(o1, o2, n) && bits_equal(s1, s2, N);
	c.backward = true;
	c.dout[0] = d;
	c.din[0] = g1;
	c.dw[0] = dw1;
	ferry_cpu_run_op(&c);
	ferry_cpu_rmsnorm_backward(g2, dw2, d, x, w, s2, N, C, 0.0f);
	ok &= bits_equal(g1, g2, n) && bits_equal(dw1, dw2, C);

	/* rope */
	memset(g1, 0, sizeof(float) * (size_t)n);
	memset(g2, 0, sizeof(float) * (size_t)n);
	struct ferry_op_call p = {.kind = FERRY_OP_ROPE, .B = B, .T = T,
				  .C = C, .NH = NH};
	/* llama3 scaling, as a model's constants reach the op */
	const float consts[FERRY_ROPE_N_SCALARS] = {500000.0f, 2.0f, 8.0f, 1.0f, 4.0f, 64.0f};
	memcpy(p.scalar, consts, sizeof(consts));
	const struct ferry_rope_freq prf = ferry_rope_freq_of(consts);
	p.out[0] = o1;
	p.in[0] = x;
	ferry_cpu_run_op(&p);
	ferry_cpu_rope_forward(o2, x, B, T, NH, HS, &prf);
	ok &= bits_equal(o1, o2, n);
	p.backward = true;
	p.dout[0] = d;
	p.din[0] = g1;
	ferry_cpu_run_op(&p);
	ferry_cpu_rope_backward(g2, d, B, T, NH, HS, &prf);
	ok &= bits_equal(g1, g2, n);

	/* swiglu */
	memset(g1, 0, sizeof(float) * (size_t)n);
	memset(g2, 0, sizeof(float) * (size_t)n);
	struct ferry_op_call s = {.kind = FERRY_OP_SWIGLU, .n = n};
	s.out[0] = o1;
	s.in[0] = x;
	s.in[1] = y;
	ferry_cpu_run_op(&s);
	ferry_cpu_swiglu_forward(o2, x, y, n);
	ok &= bits_equal(o1, o2, n);
	s.backward = true;
	s.dout[0] = d;
	s.din[0] = g1;
	s.din[1] = h1;
	ferry_cpu_run_op(&s);
	ferry_cpu_swiglu_backward(g2, h2, d, x, y, n);
	ok &= bits_equal(g1, g2, n) && bits_equal(h1, h2, n);
	CHECK(ok, "rmsnorm/rope/swiglu op calls differ from the kernels");

	/* attention: NKV = 0 vs NKV = NH (the GPT-2 path), and NKV = 2 */
	int aok = 1;
	for (int nkv = 0; nkv <= 2; nkv += 2) {
		const long nk = (long)N * (nkv ? nkv : NH) * HS;
		/* with NKV = 2, a window of 2 from the op's scalar[0] */
		const int W = nkv ? 2 : 0;
		struct ferry_op_call a = {.kind = FERRY_OP_ATTENTION, .B = B,
					  .T = T, .C = C, .NH = NH, .NKV = nkv,
					  .scalar = { (float)W }};
		a.out[0] = o1;
		a.out[1] = s1;
		a.in[0] = x;
		a.in[1] = y;
		a.in[2] = d;
		ferry_cpu_run_op(&a);
		ferry_cpu_attention_forward(o2, s2, x, y, d, B, T, C, NH,
					    nkv ? nkv : NH, W, 0.0f, 0.0f);
		aok &= bits_equal(o1, o2, n) && bits_equal(s1, s2, N * NH);
		memset(g1, 0, sizeof(float) * (size_t)n);
		memset(g2, 0, sizeof(float) * (size_t)n);
		memset(h1, 0, sizeof(float) * (size_t)n);
		memset(h2, 0, sizeof(float) * (size_t)n);
		memset(r1, 0, sizeof(float) * (size_t)n);
		memset(r2, 0, sizeof(float) * (size_t)n);
		a.backward = true;
		a.dout[0] = x;
		a.din[0] = g1;
		a.din[1] = h1;
		a.din[2] = r1;
		ferry_cpu_run_op(&a);
		ferry_cpu_attention_backward(g2, h2, r2, x, x, y, d, o2, s2, B,
					     T, C, NH, nkv ? nkv : NH, W, 0.0f, 0.0f);
		aok &= bits_equal(g1, g2, n) && bits_equal(h1, h2, nk) &&
		       bits_equal(r1, r2, nk);
	}
	CHECK(aok, "attention op calls (NKV = 0 / 2) differ from the kernel");
	printf("%-52s %s\n", "CPU backend op calls (NKV = 0 is NH, bitwise)",
	       ok && aok ? "ok" : "FAIL");
	free(x);
	free(y);
	free(w);
	free(d);
	free(r1);
	free(r2);
	free(o1);
	free(o2);
	free(s1);
	free(s2);
	free(g1);
	free(g2);
	free(h1);
	free(h2);
	free(dw1);
	free(dw2);
}

int main(void)
{
	test_op_table();

	test_rmsnorm(10, 10, 8, 1e-5f, 1.0f, 0.0f);
	test_rmsnorm(11, 3, 13, 1e-6f, 1.0f, 0.0f);
	test_rmsnorm(12, 4, 37, 1e-5f, 1.0f, 3.0f);
	test_rmsnorm(13, 2, 3, 1e-5f, 0.01f, 0.0f); /* eps matters */
	test_rmsnorm(14, 5, 64, 1e-6f, 10.0f, 0.0f);
	/* C = 1: y = w x / sqrt(x^2 + eps), dy/dx = w eps / (x^2 + eps)^1.5,
	 * which fp32 gets by cancellation unless x^2 ~ eps */
	test_rmsnorm(15, 3, 1, 1e-5f, 0.003f, 0.0f);

	test_rope(20, 2, 5, 2, 8, 10000.0f);
	test_rope(21, 1, 17, 3, 6, 500000.0f);
	test_rope(22, 3, 4, 1, 2, 10000.0f);
	test_rope(23, 1, 3, 2, 300, 10000.0f); /* two chunks of pairs */
	test_rope(24, 2, 17, 4, 16, 500000.0f);
	/* Llama 3.1 8B, Llama 3.2 1B, and a linear factor */
	const struct ref_rope_scaling l31 = {2, 8.0, 1.0, 4.0, 8192.0}, l32 = {2, 32.0, 1.0, 4.0, 8192.0},
				      lin = {1, 4.0, 0, 0, 0}, small = {2, 8.0, 1.0, 4.0, 64.0};
	test_rope_freqs(128, 500000.0f, &l31);
	test_rope_freqs(64, 500000.0f, &l32);
	test_rope_freqs(64, 10000.0f, &lin);
	/* orig 64: with HS 16 the pairs fall in all three bands at short T */
	test_rope_scaled(27, 2, 17, 4, 16, 500000.0f, &small);
	test_rope_scaled(28, 1, 9, 3, 8, 10000.0f, &lin);
	test_rope_long(25, 4096, 128, 500000.0f);
	test_rope_long(26, 2048, 64, 10000.0f);

	test_swiglu(30, 37, 2.0f);
	test_swiglu(31, 1, 1.0f);
	test_swiglu(32, 1000, 6.0f);
	test_swiglu_extremes();

	test_gqa(40, 2, 5, 4, 2, 8);
	test_gqa(41, 1, 17, 4, 1, 8);
	test_gqa(42, 2, 17, 4, 2, 8);
	test_gqa(43, 1, 17, 4, 4, 8);
	test_gqa(44, 2, 1, 4, 2, 8);
	test_gqa(45, 1, 9, 6, 3, 4);
	test_gqa(46, 1, 70, 2, 1, 4); /* more keys than one tile */
	test_attention_sampled(47, 1, 150, 4, 2, 64, 0, 40);
	test_attention_sampled(48, 2, 70, 2, 1, 128, 0, 40);
	test_attention_sampled(49, 1, 131, 2, 2, 32, 0, 40);
	test_attention_sampled(50, 1, 20, 1, 1, 264, 0, 40);

	/* sliding windows (Mistral): smaller than, equal to and larger than T,
	 * a window of one key, GQA and multi-head */
	test_gqa_window(60, 2, 17, 4, 2, 8, 5);
	test_gqa_window(61, 1, 17, 4, 4, 8, 1);
	test_gqa_window(62, 2, 17, 4, 2, 8, 17);
	test_gqa_window(63, 1, 17, 4, 1, 8, 40);
	test_gqa_window(64, 1, 9, 6, 3, 4, 3);
	test_gqa_window(65, 1, 70, 2, 1, 4, 30); /* keys over two tiles */
	test_gqa_window(66, 2, 1, 4, 2, 8, 4);
	/* across tiles: windows not dividing the tile (64) nor T (150, 131),
	 * skipped tiles, a window of one tile exactly, the row-by-row path */
	test_attention_sampled(67, 1, 150, 4, 2, 64, 70, 40);
	test_attention_sampled(68, 2, 150, 2, 1, 128, 64, 40);
	test_attention_sampled(69, 1, 131, 2, 2, 32, 3, 40);
	test_attention_sampled(70, 1, 131, 2, 1, 32, 100, 40);
	test_attention_sampled(71, 1, 20, 1, 1, 264, 7, 40);

	test_cpu_op_calls();

	return test_exit_code();
}
