/*
 * The Llama ops on the CUDA backend against the CPU reference: RMSNorm,
 * RoPE, SwiGLU and grouped-query attention, forward and every gradient; and
 * those of Gemma 2 and Mistral: RMSNorm's gain offset, GeGLU, the scale,
 * the soft cap (their in-place backward too) and attention's window, score
 * scale and soft cap; the norm over each head of Qwen 3 and Gemma 3; on
 * fresh random inputs (rounded to bf16 where the GPU holds bf16, so both
 * sides read the same values and only the arithmetic differs), gradients
 * pre-filled with random values so accumulation is checked too.  Exits 77
 * (skipped) without a GPU.
 *
 * Error bounds, checked per element (not only the largest error):
 *
 *   |gpu_i - cpu_i| <= rtol * |cpu_i| + atol * max_j |cpu_j|
 *
 * rtol: a bf16 result is the GPU's fp32 value rounded once to nearest,
 * which moves it by at most 2^-8 (0.39%) of itself (8 significant bits);
 * the GPU's fp32 value differs from the CPU's only by fp32 arithmetic
 * (summation order, __expf, the order of products), ~1e-6 relative.  So
 * RTOL_BF16 = 5e-3 is one bf16 rounding plus margin, and a kernel off by
 * more than about one bf16 step at any element fails.  fp32 results (rstd,
 * lse, the gain's gradient) are not rounded to bf16: their rtol is 1e-4 or
 * 1e-3 (fp32 sums of up to a few thousand terms in a different order).
 * atol covers elements where cancellation makes cpu_i much smaller than the
 * terms it is made of, so a relative bound alone would demand more than
 * fp32 gives: elementwise ops (rope, swiglu) have no sums and get 1e-4 of
 * the largest value; ops with reductions (rmsnorm's row sums, attention's
 * sums over keys and queries) get 1e-3.  A wrong kernel (a wrong pairing, a
 * missing factor, a head mapped to the wrong kv head, a dropped key, a
 * gradient written instead of accumulated) is off by O(10%-100%) of the
 * values involved, far beyond these bounds.
 *
 * Beyond the CPU comparison: attention with NKV == NH must give exactly the
 * bits of NKV == 0 (the multi-head path that existed before grouped-query
 * attention); grouped-query attention must give exactly the bits of
 * multi-head attention with k and v repeated per query head (forward, lse
 * and dq: the same arithmetic on the same values), and dk/dv equal to that
 * run's per-head gradients summed over each group (bf16 bound); a second
 * backward run must reproduce dk/dv bit for bit (no float atomics).
 */
#include "backend/cpu/cpu_ops.h"
#include "gpu_util.h"

static ferry_backend_t gpu;
static ferry_stream_t gs;
static Rng rng;

#define RTOL_BF16 5e-3
#define ATOL_ELEM 1e-4   /* elementwise ops, fraction of max |cpu| */
#define ATOL_REDUCE 1e-3 /* ops with sums */

/* One array on both sides: host fp32 for the CPU, device (type t) for the
 * GPU.  The device pointer is `off` elements into its allocation, so off =
 * 1 gives a bf16 pointer that is only 2-byte aligned (the kernels' scalar
 * path). */
struct twin {
	float *h;
	void *d;
	ferry_buffer_t buf;
	enum ferry_dtype t;
	long n;
};

enum init { ZERO, NORMAL };

static void upload(struct twin *w)
{
	size_t es = ferry_dtype_size(w->t);
	char *host = test_alloc((size_t)w->n * es + 1);

	for (long i = 0; i < w->n; i++) {
		if (w->t == FERRY_BF16) {
			uint16_t b = to_bf16(w->h[i]);

			w->h[i] = from_bf16(b); /* the GPU's value exactly */
			memcpy(host + 2 * i, &b, 2);
		} else {
			memcpy(host + 4 * i, &w->h[i], 4);
		}
	}
	if (ferry_memcpy_async(gs, w->d, host, (size_t)w->n * es, FERRY_COPY_H2D) != FERRY_OK ||
	    ferry_stream_synchronize(gs) != FERRY_OK) {
		fprintf(stderr, "upload: %s\n", ferry_last_error());
		exit(1);
	}
	free(host);
}

static struct twin twin_off(long n, enum ferry_dtype t, enum init how, float scale, int off)
{
	struct twin w = { TALLOC(float, n > 0 ? n : 1), NULL, NULL, t, n };
	size_t es = ferry_dtype_size(t);

	for (long i = 0; i < n; i++)
		w.h[i] = how == ZERO ? 0.0f : scale * rng_normal(&rng);
	if (ferry_buffer_alloc(gpu, (size_t)(n + off) * es + 16, &w.buf) != FERRY_OK) {
		fprintf(stderr, "device alloc: %s\n", ferry_last_error());
		exit(1);
	}
	w.d = (char *)ferry_buffer_ptr(w.buf) + (size_t)off * es;
	upload(&w);
	return w;
}

static struct twin twin(long n, enum ferry_dtype t, enum init how, float scale)
{
	return twin_off(n, t, how, scale, 0);
}

static void twin_free(struct twin *w)
{
	free(w->h);
	ferry_buffer_free(w->buf);
}

static float *download(const struct twin *w)
{
	float *g = TALLOC(float, w->n > 0 ? w->n : 1);

	dev_get(gs, w->t, w->d, g, w->n);
	return g;
}

static void run_pair(const char *what, struct ferry_op_call *cpu, struct ferry_op_call *gpu_call)
{
	ferry_cpu_run_op(cpu);
	if (ferry_stream_run_op(gs, gpu_call) != FERRY_OK || ferry_stream_synchronize(gs) != FERRY_OK)
		CHECK(0, "%s: %s", what, ferry_last_error());
}

/* Per element: |gpu - cpu| <= rtol scale_i + atol max|cpu|, scale_i =
 * |cpu_i| unless given.  Prints the worst element (as a fraction of its
 * allowance) and the normalised error max|gpu - cpu| / max|cpu|. */
static void compare_scaled(const char *what, const struct twin *w, const double *scale, double rtol, double atol)
{
	float *g = download(w);
	double mx = 0, worst = 0, nerr = 0;
	long bad = 0, wi = -1;

	for (long i = 0; i < w->n; i++)
		mx = fmax(mx, fabs((double)w->h[i]));
	for (long i = 0; i < w->n; i++) {
		double d = fabs((double)g[i] - w->h[i]);
		double allow = rtol * (scale ? scale[i] : fabs((double)w->h[i])) + atol * mx;
		double r = isnan(d) ? INFINITY : (allow > 0 ? d / allow : (d > 0 ? INFINITY : 0));

		if (r > 1)
			bad++;
		if (r > worst || wi < 0) {
			worst = r;
			wi = i;
		}
		nerr = isnan(d) ? INFINITY : fmax(nerr, d);
	}
	nerr /= fmax(mx, 1e-30);
	printf("  %-40s nerr %.2e, worst element at %.2f of its bound (rtol %.0e, atol %.0e)\n", what, nerr, worst,
	       rtol, atol);
	CHECK(bad == 0, "%s: %ld of %ld elements out of bounds; worst [%ld] gpu %.8g cpu %.8g", what, bad, w->n, wi,
	      wi >= 0 ? g[wi] : 0.0, wi >= 0 ? w->h[wi] : 0.0);
	free(g);
}

static void compare(const char *what, const struct twin *w, double rtol, double atol)
{
	compare_scaled(what, w, NULL, rtol, atol);
}

/* Takes the GPU's current values as both sides' values (before another
 * accumulation, so each comparison sees one bf16 rounding, not several). */
static void adopt(struct twin *w)
{
	float *g = download(w);

	memcpy(w->h, g, sizeof(float) * (size_t)w->n);
	free(g);
}

/* Exactly the same bits on the device (bf16 arrays of one shape). */
static void same_bits(const char *what, const struct twin *a, const struct twin *b)
{
	float *x = download(a), *y = download(b);
	long diff = 0;

	for (long i = 0; i < a->n; i++)
		diff += memcmp(&x[i], &y[i], sizeof(float)) != 0;
	printf("  %-40s %s\n", what, diff ? "DIFFERENT" : "bitwise equal");
	CHECK(a->n == b->n && diff == 0, "%s: %ld of %ld values differ", what, diff, a->n);
	free(x);
	free(y);
}

#define BF FERRY_BF16
#define F32 FERRY_F32
#define SET(field, w) (cc.field = (w).h, gc.field = (w).d)

/* ---- RMSNorm ---------------------------------------------------------------- */

/* x ~ N(0, xs^2).  xs = 2: rstd ~ 0.5, so a kernel that forgot it is 2x
 * off; xs = 3e-3: mean(x^2) ~ 1e-5 ~ eps, so a kernel that drops or
 * misplaces eps is off by a large factor. */
static void test_rmsnorm_offset(int B, int T, int C, float xs, float eps, int off, float offset)
{
	const long N = (long)B * T, n = N * C;
	struct twin x = twin_off(n, BF, NORMAL, xs, off), g = twin_off(C, BF, NORMAL, 1, off),
		    y = twin_off(n, BF, ZERO, 0, off), rstd = twin(N, F32, ZERO, 0),
		    dy = twin_off(n, BF, NORMAL, 1, off), dx = twin_off(n, BF, NORMAL, 0.5f, off),
		    dg = twin(C, F32, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_RMSNORM, .B = B, .T = T, .C = C, .scalar = { eps, offset } },
			     gc;
	char name[96];

	snprintf(name, sizeof(name), "rmsnorm B%d T%d C%d x*%g eps %.0e%s%s", B, T, C, xs, eps,
		 off ? " unaligned" : "", offset != 0.0f ? " gain 1 + w" : "");
	gc = cc;
	SET(out[0], y); SET(out[1], rstd); SET(in[0], x); SET(w[0], g);
	run_pair(name, &cc, &gc);
	compare(name, &y, RTOL_BF16, ATOL_ELEM);
	compare("  rstd (fp32)", &rstd, 1e-4, 0);

	/* backward reads the saved rstd: give both sides the CPU's */
	upload(&rstd);
	cc.backward = gc.backward = true;
	SET(dout[0], dy); SET(din[0], dx); SET(dw[0], dg);
	run_pair(name, &cc, &gc);
	compare("  d input", &dx, RTOL_BF16, ATOL_REDUCE);
	/* fp32 sums over B*T rows in different orders: ~1e-6 relative to the
	 * sum of |terms|, which near a cancelling column exceeds |sum| */
	compare("  d gain (fp32)", &dg, 1e-3, 1e-4);

	/* no gain gradient wanted: d input alone (still accumulating) */
	adopt(&dx);
	cc.dw[0] = gc.dw[0] = NULL;
	run_pair(name, &cc, &gc);
	compare("  d input again, no d gain", &dx, RTOL_BF16, ATOL_REDUCE);
	struct twin *all[] = { &x, &g, &y, &rstd, &dy, &dx, &dg };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		twin_free(all[i]);
}

static void test_rmsnorm(int B, int T, int C, float xs, float eps, int off)
{
	test_rmsnorm_offset(B, T, C, xs, eps, off, 0.0f);
}

/* A one-input op: forward x -> y, then backward dy -> dx (+=), each
 * compared as elementwise. */
static void unary_pair(const char *name, struct ferry_op_call *cc, struct ferry_op_call *gc, const struct twin *x,
		       struct twin *y, const struct twin *dy, struct twin *dx)
{
	cc->out[0] = y->h, gc->out[0] = y->d;
	cc->in[0] = x->h, gc->in[0] = x->d;
	run_pair(name, cc, gc);
	compare(name, y, RTOL_BF16, ATOL_ELEM);
	cc->backward = gc->backward = true;
	cc->dout[0] = dy->h, gc->dout[0] = dy->d;
	cc->din[0] = dx->h, gc->din[0] = dx->d;
	run_pair(name, cc, gc);
	compare("  d input (+=)", dx, RTOL_BF16, ATOL_ELEM);
}

/* ---- RoPE -------------------------------------------------------------------- */

/* scaling: 0 none, else llama3 with Llama 3.1's constants (factor 8, low
 * 1, high 4, original context 8192): the same frequencies as the CPU. */
static void test_rope_scaling(int B, int T, int NH, int HS, float theta, int off, int scaling)
{
	const int C = NH * HS;
	const long n = (long)B * T * C;
	struct twin x = twin_off(n, BF, NORMAL, 1, off), y = twin_off(n, BF, ZERO, 0, off),
		    dy = twin_off(n, BF, NORMAL, 1, off), dx = twin_off(n, BF, NORMAL, 0.5f, off);
	struct ferry_op_call cc = { .kind = FERRY_OP_ROPE, .B = B, .T = T, .C = C, .NH = NH, .scalar = { theta } },
			     gc;
	char name[96];

	if (scaling) {
		const float llama31[] = { 2.0f, 8.0f, 1.0f, 4.0f, 8192.0f };
		memcpy(&cc.scalar[1], llama31, sizeof(llama31));
	}
	snprintf(name, sizeof(name), "rope B%d T%d NH%d HS%d theta %.0f%s%s", B, T, NH, HS, theta,
		 off ? " unaligned" : "", scaling ? " llama3" : "");
	gc = cc;
	unary_pair(name, &cc, &gc, &x, &y, &dy, &dx);
	struct twin *all[] = { &x, &y, &dy, &dx };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		twin_free(all[i]);
}

static void test_rope(int B, int T, int NH, int HS, float theta, int off)
{
	test_rope_scaling(B, T, NH, HS, theta, off, 0);
}

/* ---- SwiGLU, GeGLU ------------------------------------------------------------- */

/* kind: FERRY_OP_SWIGLU or FERRY_OP_GEGLU (the same slots). */
static void test_glu(enum ferry_op_kind kind, long n, int off)
{
	struct twin a = twin_off(n, BF, NORMAL, 3, off), u = twin_off(n, BF, NORMAL, 1, off),
		    o = twin_off(n, BF, ZERO, 0, off), d = twin_off(n, BF, NORMAL, 1, off),
		    da = twin_off(n, BF, NORMAL, 0.5f, off), du = twin_off(n, BF, NORMAL, 0.5f, off);
	struct ferry_op_call cc = { .kind = kind, .n = n }, gc = cc;
	char name[96];

	/* saturated gates, where exp(-x) overflows or vanishes: finite results */
	const float extreme[] = { -100.0f, -90.0f, -30.0f, 30.0f, 90.0f, 100.0f };
	for (int i = 0; i < 6 && i < n; i++)
		a.h[(long)i * (n / 6)] = extreme[i];
	upload(&a);

	snprintf(name, sizeof(name), "%s n %ld%s", ferry_op_info(kind)->name, n, off ? " unaligned" : "");
	SET(out[0], o); SET(in[0], a); SET(in[1], u);
	run_pair(name, &cc, &gc);
	compare(name, &o, RTOL_BF16, ATOL_ELEM);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(din[0], da); SET(din[1], du);
	run_pair(name, &cc, &gc);
	compare("  d gate", &da, RTOL_BF16, ATOL_ELEM);
	compare("  d up", &du, RTOL_BF16, ATOL_ELEM);
	/* one gradient at a time */
	adopt(&da);
	adopt(&du);
	cc.din[0] = gc.din[0] = NULL;
	run_pair(name, &cc, &gc);
	compare("  d up alone", &du, RTOL_BF16, ATOL_ELEM);
	compare("  d gate untouched", &da, 0, 0);
	adopt(&du); /* the CPU and GPU results differ by rounding: start equal */
	SET(din[0], da);
	cc.din[1] = gc.din[1] = NULL;
	run_pair(name, &cc, &gc);
	compare("  d gate alone", &da, RTOL_BF16, ATOL_ELEM);
	compare("  d up untouched", &du, 0, 0);
	struct twin *all[] = { &a, &u, &o, &d, &da, &du };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		twin_free(all[i]);
}

static void test_swiglu(long n, int off)
{
	test_glu(FERRY_OP_SWIGLU, n, off);
}

/* ---- scale, soft cap (unary, in-place backward) ----------------------------------- */

/* kind FERRY_OP_SCALE (k: the factor) or FERRY_OP_SOFTCAP (k: the cap; x ~
 * N(0, xs^2) reaching far into the cap's saturation).  Backward twice: +=
 * into a pre-filled gradient, then the planner's in-place form (assign,
 * din == dout).  The GPU rounds the scale to bf16 (the activation type):
 * the CPU is given that value. */
static void test_unary(enum ferry_op_kind kind, long n, float k, float xs, int off)
{
	struct twin x = twin_off(n, BF, NORMAL, xs, off), y = twin_off(n, BF, ZERO, 0, off),
		    dy = twin_off(n, BF, NORMAL, 1, off), dx = twin_off(n, BF, NORMAL, 0.5f, off);
	struct ferry_op_call cc = { .kind = kind, .n = n, .scalar = { k } }, gc = cc;
	char name[96];

	if (kind == FERRY_OP_SCALE)
		cc.scalar[0] = from_bf16(to_bf16(k));
	snprintf(name, sizeof(name), "%s %g n %ld x*%g%s", ferry_op_info(kind)->name, k, n, xs,
		 off ? " unaligned" : "");
	unary_pair(name, &cc, &gc, &x, &y, &dy, &dx);
	cc.grad_assign = gc.grad_assign = true;
	SET(din[0], dy); /* over its own output gradient */
	run_pair(name, &cc, &gc);
	compare("  d input in place (assign over d out)", &dy, RTOL_BF16, ATOL_ELEM);
	struct twin *all[] = { &x, &y, &dy, &dx };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		twin_free(all[i]);
}

/* ---- grouped-query attention -------------------------------------------------- */

struct att {
	struct twin q, k, v, o, lse, dout, dq, dk, dv;
	int W;          /* the op's constants: window (0: none), */
	float scale;    /* score scale (0: 1/sqrt(HS)) */
	float cap;      /* and soft cap (0: none) */
};

static struct att att_new(int B, int T, int NH, int NKV, int HS)
{
	const long nq = (long)B * T * NH * HS, nkv = (long)B * T * NKV * HS;
	struct att a = {
		.q = twin(nq, BF, NORMAL, 1), .k = twin(nkv, BF, NORMAL, 1), .v = twin(nkv, BF, NORMAL, 1),
		.o = twin(nq, BF, ZERO, 0), .lse = twin((long)B * NH * T, F32, ZERO, 0),
		.dout = twin(nq, BF, NORMAL, 1), .dq = twin(nq, BF, NORMAL, 0.5f),
		.dk = twin(nkv, BF, NORMAL, 0.5f), .dv = twin(nkv, BF, NORMAL, 0.5f),
	};
	return a;
}

static void att_free(struct att *a)
{
	struct twin *all[] = { &a->q, &a->k, &a->v, &a->o, &a->lse, &a->dout, &a->dq, &a->dk, &a->dv };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		twin_free(all[i]);
}

static void att_calls(struct att *a, struct ferry_op_call *cc, struct ferry_op_call *gc, int B, int T, int NH,
		      int NKV, int HS, bool backward)
{
	*cc = (struct ferry_op_call){ .kind = FERRY_OP_ATTENTION, .backward = backward, .B = B, .T = T,
				      .C = NH * HS, .NH = NH, .NKV = NKV,
				      .scalar = { (float)a->W, a->scale, a->cap } };
	*gc = *cc;
	struct twin *outs[] = { &a->o, &a->lse }, *ins[] = { &a->q, &a->k, &a->v };
	for (int i = 0; i < 2; i++) {
		cc->out[i] = outs[i]->h;
		gc->out[i] = outs[i]->d;
	}
	for (int i = 0; i < 3; i++) {
		cc->in[i] = ins[i]->h;
		gc->in[i] = ins[i]->d;
	}
	if (backward) {
		struct twin *dins[] = { &a->dq, &a->dk, &a->dv };
		cc->dout[0] = a->dout.h;
		gc->dout[0] = a->dout.d;
		for (int i = 0; i < 3; i++) {
			cc->din[i] = dins[i]->h;
			gc->din[i] = dins[i]->d;
		}
	}
}

/* Per element of dq, dk, dv: |result| plus the sum of the magnitudes of
 * the terms it adds (dv: sum p |dO|; dk, dq: scale sum |dS| |q| or |k|,
 * dS = p (dP - D) times the cap's slope 1 - tanh^2 where a cap is given),
 * over the keys of each query's window, into mq, mk, mv.  The GPU rounds
 * each P and dS to bf16 before its product (as FlashAttention-2 does), so
 * where terms cancel the error is a bf16 rounding of the terms, not of the
 * result.  Reads the CPU's out and lse; threads own kv heads (and their
 * query heads). */
static void att_term_magnitudes(const struct att *a, int B, int T, int NH, int NKV, int HS, double *mq,
				double *mk, double *mv)
{
	const int C = NH * HS, CK = NKV * HS, G = NH / NKV;
	const double scale = a->scale > 0 ? a->scale : 1.0 / sqrt((double)HS);

#pragma omp parallel for schedule(dynamic)
	for (int bk = 0; bk < B * NKV; bk++) {
		const int b = bk / NKV, kh = bk % NKV;
		for (int h = kh * G; h < kh * G + G; h++)
			for (int t = 0; t < T; t++) {
				const float *q = a->q.h + ((size_t)b * T + t) * C + (size_t)h * HS;
				const float *g = a->dout.h + ((size_t)b * T + t) * C + (size_t)h * HS;
				const float *o = a->o.h + ((size_t)b * T + t) * C + (size_t)h * HS;
				const double lse = a->lse.h[((size_t)b * NH + h) * T + t];
				double D = 0;
				for (int i = 0; i < HS; i++)
					D += (double)g[i] * o[i];
				for (int j = a->W > 0 && t - a->W + 1 > 0 ? t - a->W + 1 : 0; j <= t; j++) {
					const size_t kr = ((size_t)b * T + j) * CK + (size_t)kh * HS;
					const float *k = a->k.h + kr, *v = a->v.h + kr;
					double sc = 0, dp = 0;
					for (int i = 0; i < HS; i++) {
						sc += (double)q[i] * k[i];
						dp += (double)g[i] * v[i];
					}
					double s = sc * scale, slope = 1;
					if (a->cap > 0) {
						const double th = tanh(s / a->cap);
						s = a->cap * th;
						slope = 1 - th * th;
					}
					const double p = exp(s - lse), ds = fabs(p * (dp - D)) * slope;
					double *dq = mq + ((size_t)b * T + t) * C + (size_t)h * HS;
					for (int i = 0; i < HS; i++) {
						dq[i] += scale * ds * fabs(k[i]);
						mk[kr + i] += scale * ds * fabs(q[i]);
						mv[kr + i] += p * fabs(g[i]);
					}
				}
			}
	}
}

/* GPU against CPU, forward and backward.  NKV as the call passes it (0 is
 * NH); W, scale, cap: the op's constants (0: none). */
static void test_attention_consts(int B, int T, int NH, int NKV, int HS, int W, float scale, float cap)
{
	const int nkv = NKV ? NKV : NH;
	struct att a = att_new(B, T, NH, nkv, HS);
	struct ferry_op_call cc, gc;
	char name[128];

	a.W = W;
	a.scale = scale;
	a.cap = cap;
	snprintf(name, sizeof(name), "attention B%d T%d NH%d NKV%d HS%d", B, T, NH, NKV, HS);
	if (W || scale > 0 || cap > 0)
		snprintf(name + strlen(name), sizeof(name) - strlen(name), " window %d scale %g cap %g", W, scale,
			 cap);
	att_calls(&a, &cc, &gc, B, T, NH, NKV, HS, false);
	run_pair(name, &cc, &gc);
	compare(name, &a.o, RTOL_BF16, ATOL_REDUCE);
	compare("  lse (fp32)", &a.lse, 1e-4, 1e-4);

	/* backward reads out and lse: give both sides the same (the CPU's,
	 * out rounded to bf16 as the GPU stores it), so D = dout . out agrees */
	upload(&a.o);
	upload(&a.lse);
	att_calls(&a, &cc, &gc, B, T, NH, NKV, HS, true);
	run_pair(name, &cc, &gc);
	double *m[3] = { test_alloc(sizeof(double) * (size_t)a.dq.n), test_alloc(sizeof(double) * (size_t)a.dk.n),
			 test_alloc(sizeof(double) * (size_t)a.dv.n) };
	struct twin *d[3] = { &a.dq, &a.dk, &a.dv };
	const char *label[3] = { "  d query (bound: terms)", "  d key (bound: terms)", "  d value (bound: terms)" };
	for (int i = 0; i < 3; i++)
		memset(m[i], 0, sizeof(double) * (size_t)d[i]->n);
	att_term_magnitudes(&a, B, T, NH, nkv, HS, m[0], m[1], m[2]);
	for (int i = 0; i < 3; i++) {
		for (long e = 0; e < d[i]->n; e++)
			m[i][e] += fabs((double)d[i]->h[e]);
		compare_scaled(label[i], d[i], m[i], RTOL_BF16, ATOL_REDUCE);
		free(m[i]);
	}
	att_free(&a);
}

static void test_attention(int B, int T, int NH, int NKV, int HS)
{
	test_attention_consts(B, T, NH, NKV, HS, 0, 0.0f, 0.0f);
}

/* Runs GPU attention forward + backward on a's device arrays. */
static void gpu_attention(struct att *a, int B, int T, int NH, int NKV, int HS, const char *what)
{
	struct ferry_op_call cc, gc;

	att_calls(a, &cc, &gc, B, T, NH, NKV, HS, false);
	CHECK(ferry_stream_run_op(gs, &gc) == FERRY_OK, "%s forward: %s", what, ferry_last_error());
	att_calls(a, &cc, &gc, B, T, NH, NKV, HS, true);
	CHECK(ferry_stream_run_op(gs, &gc) == FERRY_OK && ferry_stream_synchronize(gs) == FERRY_OK,
	      "%s backward: %s", what, ferry_last_error());
}

/* Copies a's inputs and gradient pre-fills into b (same shapes). */
static void att_copy_inputs(struct att *b, const struct att *a)
{
	const struct twin *src[] = { &a->q, &a->k, &a->v, &a->dout, &a->dq, &a->dk, &a->dv };
	struct twin *dst[] = { &b->q, &b->k, &b->v, &b->dout, &b->dq, &b->dk, &b->dv };

	for (int i = 0; i < 7; i++) {
		memcpy(dst[i]->h, src[i]->h, sizeof(float) * (size_t)src[i]->n);
		upload(dst[i]);
	}
}

/* NKV == NH must be the multi-head path (NKV == 0) bit for bit. */
static void test_attention_mha_same(int B, int T, int NH, int HS)
{
	struct att a = att_new(B, T, NH, NH, HS), b = att_new(B, T, NH, NH, HS);
	char name[96];

	snprintf(name, sizeof(name), "attention NKV == NH vs NKV 0, T%d", T);
	att_copy_inputs(&b, &a);
	gpu_attention(&a, B, T, NH, 0, HS, "NKV 0");
	gpu_attention(&b, B, T, NH, NH, HS, "NKV == NH");
	printf("%s\n", name);
	same_bits("  out", &a.o, &b.o);
	same_bits("  lse", &a.lse, &b.lse);
	same_bits("  d query", &a.dq, &b.dq);
	same_bits("  d key", &a.dk, &b.dk);
	same_bits("  d value", &a.dv, &b.dv);
	att_free(&a);
	att_free(&b);
}

/* Grouped-query attention against multi-head attention on k and v repeated
 * per query head (Hugging Face's repeat_kv), both on the GPU; and a second
 * grouped backward must reproduce the first bit for bit. */
static void test_attention_gqa_vs_repeat(int B, int T, int NH, int NKV, int HS)
{
	const int G = NH / NKV, C = NH * HS, CK = NKV * HS;
	struct att g = att_new(B, T, NH, NKV, HS), m = att_new(B, T, NH, NH, HS);
	char name[96];

	snprintf(name, sizeof(name), "attention GQA NH%d NKV%d vs repeated k/v, T%d", NH, NKV, T);
	printf("%s\n", name);
	/* m: same q, dout, dq pre-fill; k, v repeated; dk, dv start at 0 */
	memcpy(m.q.h, g.q.h, sizeof(float) * (size_t)g.q.n);
	memcpy(m.dout.h, g.dout.h, sizeof(float) * (size_t)g.dout.n);
	memcpy(m.dq.h, g.dq.h, sizeof(float) * (size_t)g.dq.n);
	for (long r = 0; r < (long)B * T; r++)
		for (int h = 0; h < NH; h++)
			for (int i = 0; i < HS; i++) {
				m.k.h[r * C + h * HS + i] = g.k.h[r * CK + (h / G) * HS + i];
				m.v.h[r * C + h * HS + i] = g.v.h[r * CK + (h / G) * HS + i];
			}
	memset(m.dk.h, 0, sizeof(float) * (size_t)m.dk.n);
	memset(m.dv.h, 0, sizeof(float) * (size_t)m.dv.n);
	struct twin *up[] = { &m.q, &m.k, &m.v, &m.dout, &m.dq, &m.dk, &m.dv };
	for (int i = 0; i < 7; i++)
		upload(up[i]);

	gpu_attention(&g, B, T, NH, NKV, HS, "GQA");
	gpu_attention(&m, B, T, NH, NH, HS, "repeated");
	same_bits("  out", &g.o, &m.o);
	same_bits("  lse", &g.lse, &m.lse);
	same_bits("  d query", &g.dq, &m.dq);

	/* dk, dv: the pre-fill plus the sum over each group of the repeated
	 * run's per-head gradients.  Those were each rounded to bf16, the
	 * grouped sum only once, so the allowance is one bf16 rounding of
	 * |pre-fill + sum| plus one of each |head's gradient|. */
	float *mk = download(&m.dk), *mv = download(&m.dv);
	struct twin *gk[] = { &g.dk, &g.dv };
	float *mh[] = { mk, mv };
	for (int w = 0; w < 2; w++) {
		double *scale = TALLOC(double, gk[w]->n);
		for (long r = 0; r < (long)B * T; r++)
			for (int kh = 0; kh < NKV; kh++)
				for (int i = 0; i < HS; i++) {
					const long o = r * CK + kh * HS + i;
					double s = gk[w]->h[o], sa = 0;
					for (int j = 0; j < G; j++) {
						const float x = mh[w][r * C + (kh * G + j) * HS + i];
						s += x;
						sa += fabs(x);
					}
					gk[w]->h[o] = (float)s;
					scale[o] = fabs(s) + sa;
				}
		compare_scaled(w ? "  d value vs summed heads" : "  d key vs summed heads", gk[w], scale,
			       RTOL_BF16, ATOL_REDUCE);
		free(scale);
	}
	free(mk);
	free(mv);
	att_free(&g);
	att_free(&m);

	/* reproducible: two grouped runs from the same inputs and pre-fill */
	struct att r1 = att_new(B, T, NH, NKV, HS), r2 = att_new(B, T, NH, NKV, HS);
	att_copy_inputs(&r2, &r1);
	gpu_attention(&r1, B, T, NH, NKV, HS, "GQA run 1");
	gpu_attention(&r2, B, T, NH, NKV, HS, "GQA run 2");
	same_bits("  out, two runs", &r1.o, &r2.o);
	same_bits("  d query, two runs", &r1.dq, &r2.dq);
	same_bits("  d key, two runs", &r1.dk, &r2.dk);
	same_bits("  d value, two runs", &r1.dv, &r2.dv);
	att_free(&r1);
	att_free(&r2);
}

int main(void)
{
	gpu_or_skip();
	rng = rng_new(20260514);
	CHECK(ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = (size_t)2 << 30 }, &gpu) ==
		      FERRY_OK, "open: %s", ferry_last_error());
	CHECK(ferry_stream_create(gpu, "test", &gs) == FERRY_OK, "stream");
	printf("%s\n", ferry_backend_description(gpu));

	/* Llama shapes of the brief: B 2, NH 8 (NKV 2), HS 64, T 1024 and a
	 * ragged 1000; then widths/offsets that take the narrower and scalar
	 * vector paths of the kernels */
	test_rmsnorm(2, 1024, 512, 2, 1e-5f, 0);
	test_rmsnorm(2, 1000, 512, 2, 1e-6f, 0);
	test_rmsnorm(2, 1000, 512, 3e-3f, 1e-5f, 0); /* eps matters */
	test_rmsnorm(2, 1000, 4096, 2, 1e-5f, 0);    /* several vectors per thread */
	test_rmsnorm(1, 77, 100, 2, 1e-5f, 0);       /* C % 8 != 0: 4-wide */
	test_rmsnorm(1, 77, 99, 2, 1e-5f, 0);        /* odd C: scalar */
	test_rmsnorm(2, 33, 512, 2, 1e-5f, 1);       /* 2-byte aligned pointers: scalar */

	test_rope(2, 1024, 8, 64, 10000.0f, 0);  /* queries (Llama 2 theta) */
	test_rope(2, 1024, 2, 64, 500000.0f, 0); /* keys, NKV heads (Llama 3 theta) */
	test_rope(2, 1000, 8, 64, 10000.0f, 0);
	test_rope(1, 1000, 32, 128, 500000.0f, 0); /* Llama width */
	test_rope_scaling(1, 1000, 32, 128, 500000.0f, 0, 1); /* Llama 3.1's rope_scaling */
	test_rope_scaling(2, 300, 8, 64, 500000.0f, 1, 1);
	test_rope(2, 37, 3, 12, 10000.0f, 0);      /* HS/2 = 6: 2-wide */
	test_rope(2, 37, 3, 6, 10000.0f, 0);       /* HS/2 = 3: scalar */
	test_rope(2, 100, 8, 64, 10000.0f, 1);     /* 2-byte aligned: scalar */

	test_swiglu(2L * 1024 * 1376, 0); /* [B, T, intermediate] */
	test_swiglu(2L * 1000 * 1376, 0);
	test_swiglu(100003, 0); /* a tail after the 8-wide part */
	test_swiglu(100003, 1); /* 2-byte aligned: scalar */

	test_attention(2, 1024, 8, 2, 64); /* grouped-query, G = 4 */
	test_attention(2, 1024, 12, 12, 64); /* GPT-2 124M's heads */
	test_attention(1, 2048, 8, 2, 128); /* Llama's head size at sequence 2048 */
	test_attention(2, 1000, 8, 2, 64);
	test_attention(2, 1000, 8, 8, 64); /* NKV == NH: multi-head */
	test_attention(2, 1000, 8, 0, 64); /* NKV 0 means NH */
	test_attention(1, 257, 4, 1, 128); /* multi-query, HS 128 */
	test_attention(2, 100, 6, 3, 32);  /* G = 2 */
	test_attention_mha_same(2, 1000, 8, 64);
	test_attention_gqa_vs_repeat(2, 1000, 8, 2, 64);
	test_attention_gqa_vs_repeat(1, 129, 4, 1, 48);

	/* Gemma 2 and Mistral: the gain offset, GeGLU, scale, soft cap */
	test_rmsnorm_offset(2, 1000, 512, 2, 1e-6f, 0, 1.0f);
	test_rmsnorm_offset(1, 77, 99, 2, 1e-6f, 1, 1.0f); /* scalar path */
	/* Qwen 3's and Gemma 3's norm over each head of q and k: the call
	 * ferry_op_call_shape makes of it is rows of HS, T x heads of them
	 * (tests/test_qk_norm_ops_grad.c) */
	test_rmsnorm_offset(2, 1000 * 16, 128, 2, 1e-6f, 0, 0.0f); /* Qwen 3 8B's 32 heads of 128, half */
	test_rmsnorm_offset(1, 1000 * 8, 256, 2, 1e-6f, 0, 1.0f);  /* Gemma 3's heads of 256, 1 + w */
	test_glu(FERRY_OP_GEGLU, 2L * 1000 * 1376, 0);
	test_glu(FERRY_OP_GEGLU, 100003, 1);
	test_unary(FERRY_OP_SCALE, 2L * 1000 * 512, 48.0f, 1, 0);       /* sqrt(2304), exact in bf16 */
	test_unary(FERRY_OP_SCALE, 100003, sqrtf(2048.0f), 1, 1);      /* rounded to bf16 */
	test_unary(FERRY_OP_SOFTCAP, 2L * 1000 * 1024, 30.0f, 40.0f, 0); /* final logits: saturating */
	test_unary(FERRY_OP_SOFTCAP, 100003, 30.0f, 3.0f, 1);          /* near the identity */
	test_unary(FERRY_OP_SOFTCAP, 4096, 0.0f, 3.0f, 0);             /* no cap: the identity */
	/* attention's constants: a window (HS 64 would take the tensor cores
	 * without it), the window cutting key tiles mid-way, a scale and a cap
	 * small enough to bend every score, and Gemma 2's head size 256 */
	test_attention_consts(2, 1000, 8, 2, 64, 100, 0.0f, 0.0f);
	test_attention_consts(1, 257, 4, 1, 128, 37, 0.0f, 0.0f);
	test_attention_consts(2, 300, 8, 2, 64, 0, 0.1f, 0.0f);
	test_attention_consts(2, 300, 8, 2, 64, 0, 0.0f, 1.5f);
	test_attention_consts(1, 300, 4, 2, 256, 128, 0.0625f, 1.5f);
	test_attention_consts(1, 1000, 8, 4, 256, 0, 0.0625f, 50.0f);     /* Gemma 2's global layers */
	test_attention_consts(2, 100, 6, 3, 32, 1, 0.0f, 0.0f);          /* window 1: each query itself */
	test_attention_consts(2, 100, 6, 3, 32, 100, 0.0f, 0.0f);        /* window = T: none */

	ferry_stream_free(gs);
	ferry_backend_close(gpu);
	return test_exit_code();
}
