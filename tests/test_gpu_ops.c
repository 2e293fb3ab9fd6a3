/*
 * Every op, forward and backward, on the CUDA backend against the CPU
 * reference (ggml's test-backend-ops is the model): fresh random inputs,
 * rounded to bf16 where the GPU holds bf16 so only the arithmetic differs,
 * gradients pre-filled with random values so accumulation is checked too,
 * normalised error max|gpu - cpu| / max|cpu| under a bound per op.
 * Exits 77 (skipped) without a GPU.
 */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"
#include "gpu_util.h"

static ferry_backend_t gpu;
static ferry_stream_t gs;
static Rng rng;

/* One array on both sides: host fp32 for the CPU, device (type t) for the GPU. */
struct twin {
	float *h;
	void *d;
	ferry_buffer_t buf;
	enum ferry_dtype t;
	long n;
};

/* HASHED: uniform in [-scale, scale) from a hash of the index, filled in
 * parallel (for arrays of billions of values). */
enum init { ZERO, NORMAL, POSITIVE, HASHED };

static float hashed(long i, float scale)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return scale * ((float)(x & 0xffffff) / 8388608.0f - 1.0f);
}

static struct twin twin(long n, enum ferry_dtype t, enum init how, float scale)
{
	struct twin w = { TALLOC(float, n > 0 ? n : 1), NULL, NULL, t, n };

	if (how == HASHED) {
#pragma omp parallel for
		for (long i = 0; i < n; i++)
			w.h[i] = from_bf16(to_bf16(hashed(i, scale)));
		w.d = dev_put(gpu, gs, t, w.h, n, &w.buf);
		return w;
	}
	for (long i = 0; i < n; i++) {
		float v = how == ZERO ? 0.0f : how == NORMAL ? scale * rng_normal(&rng)
							     : scale * (0.5f + rng_uniform(&rng, 0, 1));
		w.h[i] = t == FERRY_BF16 ? from_bf16(to_bf16(v)) : v; /* the GPU's input exactly */
	}
	w.d = dev_put(gpu, gs, t, w.h, n, &w.buf);
	return w;
}

static void twin_free(struct twin *w)
{
	free(w->h);
	ferry_buffer_free(w->buf);
}

/* Runs the CPU call and the GPU call, then compares `out` arrays. */
static void run_pair(const char *what, struct ferry_op_call *cpu, struct ferry_op_call *gpu_call)
{
	ferry_cpu_run_op(cpu);
	if (ferry_stream_run_op(gs, gpu_call) != FERRY_OK || ferry_stream_synchronize(gs) != FERRY_OK)
		CHECK(0, "%s: %s", what, ferry_last_error());
}

static double compare(const char *what, const struct twin *w, double bound)
{
	float *g = TALLOC(float, w->n > 0 ? w->n : 1);
	double num = 0, den = 1e-6;

	dev_get(gs, w->t, w->d, g, w->n);
	for (long i = 0; i < w->n; i++) {
		double d = fabs((double)g[i] - w->h[i]);

		num = d > num || isnan(d) ? d : num;
		den = fabs(w->h[i]) > den ? fabs(w->h[i]) : den;
	}
	printf("  %-34s nerr %.2e (bound %.0e)\n", what, num / den, bound);
	CHECK(num / den <= bound, "%s: normalised error %.3e > %.0e", what, num / den, bound);
	free(g);
	return num / den;
}

#define BF FERRY_BF16
#define F32 FERRY_F32
/* Sets slot `field` of both calls from twin w. */
#define SET(field, w) (cc.field = (w).h, gc.field = (w).d)

static void test_matmul(int N, int C, int OC, bool bias)
{
	struct twin in = twin((long)N * C, BF, NORMAL, 1), wt = twin((long)OC * C, BF, NORMAL, 0.2f),
		    b = twin(OC, BF, NORMAL, 0.5f), out = twin((long)N * OC, BF, ZERO, 0),
		    dout = twin((long)N * OC, BF, NORMAL, 1), din = twin((long)N * C, BF, NORMAL, 1),
		    dw = twin((long)OC * C, F32, NORMAL, 1), db = twin(OC, F32, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_MATMUL, .B = 1, .T = N, .C = C, .OC = OC }, gc = cc;
	char name[96];

	SET(out[0], out); SET(in[0], in); SET(w[0], wt);
	if (bias)
		SET(w[1], b);
	snprintf(name, sizeof(name), "matmul %dx%dx%d%s", N, C, OC, bias ? " +bias" : "");
	run_pair(name, &cc, &gc);
	compare(name, &out, 2e-2);

	cc.backward = gc.backward = true;
	SET(dout[0], dout); SET(din[0], din); SET(dw[0], dw);
	if (bias)
		SET(dw[1], db);
	run_pair(name, &cc, &gc);
	compare("  d input", &din, 2e-2);
	compare("  d weight (fp32)", &dw, 1e-2);
	if (bias)
		compare("  d bias (fp32)", &db, 1e-2);
	struct twin *all[] = { &in, &wt, &b, &out, &dout, &din, &dw, &db };
	for (size_t i = 0; i < 8; i++)
		twin_free(all[i]);
}

static void test_layernorm(int N, int C)
{
	struct twin x = twin((long)N * C, BF, NORMAL, 2), g = twin(C, BF, NORMAL, 1), b = twin(C, BF, NORMAL, 1),
		    y = twin((long)N * C, BF, ZERO, 0), mean = twin(N, F32, ZERO, 0), rstd = twin(N, F32, ZERO, 0),
		    dy = twin((long)N * C, BF, NORMAL, 1), dx = twin((long)N * C, BF, NORMAL, 1),
		    dg = twin(C, F32, NORMAL, 1), db = twin(C, F32, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_LAYERNORM, .B = 1, .T = N, .C = C }, gc = cc;

	SET(out[0], y); SET(out[1], mean); SET(out[2], rstd); SET(in[0], x); SET(w[0], g); SET(w[1], b);
	run_pair("layernorm", &cc, &gc);
	compare("layernorm out", &y, 2e-2);
	compare("layernorm mean (fp32)", &mean, 1e-4);
	compare("layernorm rstd (fp32)", &rstd, 1e-4);
	cc.backward = gc.backward = true;
	SET(dout[0], dy); SET(din[0], dx); SET(dw[0], dg); SET(dw[1], db);
	/* backward reads the saved statistics: give both sides the CPU's */
	ferry_buffer_free(mean.buf);
	ferry_buffer_free(rstd.buf);
	gc.out[1] = mean.d = dev_put(gpu, gs, F32, mean.h, N, &mean.buf);
	gc.out[2] = rstd.d = dev_put(gpu, gs, F32, rstd.h, N, &rstd.buf);
	run_pair("layernorm backward", &cc, &gc);
	compare("  d input", &dx, 3e-2);
	compare("  d gain (fp32)", &dg, 1e-2);
	compare("  d bias (fp32)", &db, 1e-2);
	struct twin *all[] = { &x, &g, &b, &y, &mean, &rstd, &dy, &dx, &dg, &db };
	for (size_t i = 0; i < 10; i++)
		twin_free(all[i]);
}

static void test_attention(int B, int T, int C, int NH)
{
	long n = (long)B * T * C;
	struct twin q = twin(n, BF, NORMAL, 1), k = twin(n, BF, NORMAL, 1), v = twin(n, BF, NORMAL, 1),
		    o = twin(n, BF, ZERO, 0), lse = twin((long)B * NH * T, F32, ZERO, 0),
		    dout = twin(n, BF, NORMAL, 1), dq = twin(n, BF, NORMAL, 1), dk = twin(n, BF, NORMAL, 1),
		    dv = twin(n, BF, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_ATTENTION, .B = B, .T = T, .C = C, .NH = NH }, gc = cc;
	char name[64];

	snprintf(name, sizeof(name), "attention B%d T%d C%d NH%d", B, T, C, NH);
	SET(out[0], o); SET(out[1], lse); SET(in[0], q); SET(in[1], k); SET(in[2], v);
	run_pair(name, &cc, &gc);
	compare(name, &o, 2e-2);
	compare("  lse (fp32)", &lse, 1e-3);
	cc.backward = gc.backward = true;
	SET(dout[0], dout); SET(din[0], dq); SET(din[1], dk); SET(din[2], dv);
	run_pair(name, &cc, &gc);
	compare("  d query", &dq, 3e-2);
	compare("  d key", &dk, 3e-2);
	compare("  d value", &dv, 3e-2);
	struct twin *all[] = { &q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv };
	for (size_t i = 0; i < 9; i++)
		twin_free(all[i]);
}

static void test_elementwise(long n)
{
	struct twin a = twin(n, BF, NORMAL, 2), b = twin(n, BF, NORMAL, 1), o = twin(n, BF, ZERO, 0),
		    d = twin(n, BF, NORMAL, 1), da = twin(n, BF, NORMAL, 1), db = twin(n, BF, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_GELU, .n = n }, gc = cc;

	SET(out[0], o); SET(in[0], a);
	run_pair("gelu", &cc, &gc);
	compare("gelu", &o, 1e-2);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(din[0], da);
	run_pair("gelu backward", &cc, &gc);
	compare("gelu backward", &da, 2e-2);
	/* assigned in place over an output gradient of its own (d is used
	 * below) */
	struct twin di = twin(n, BF, NORMAL, 1);

	cc.grad_assign = gc.grad_assign = true;
	SET(dout[0], di); SET(din[0], di);
	run_pair("gelu backward, assigned in place", &cc, &gc);
	compare("gelu backward, assigned in place", &di, 2e-2);
	twin_free(&di);

	cc = (struct ferry_op_call){ .kind = FERRY_OP_RESIDUAL, .n = n };
	gc = cc;
	SET(out[0], o); SET(in[0], a); SET(in[1], b);
	run_pair("residual", &cc, &gc);
	compare("residual", &o, 1e-2);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(din[0], da); SET(din[1], db);
	run_pair("residual backward", &cc, &gc);
	compare("residual backward a", &da, 2e-2);
	compare("residual backward b", &db, 2e-2);
	SET(din[1], da); /* both inputs the same tensor: twice the gradient */
	run_pair("residual backward, da == db", &cc, &gc);
	compare("residual backward, da == db", &da, 2e-2);
	struct twin *all[] = { &a, &b, &o, &d, &da, &db };
	for (size_t i = 0; i < 6; i++)
		twin_free(all[i]);
}

static void test_encoder(int B, int T, int C, int V)
{
	int32_t *tok = TALLOC(int32_t, B * T);
	ferry_buffer_t tb;
	struct twin wte = twin((long)V * C, BF, NORMAL, 1), wpe = twin((long)T * C, BF, NORMAL, 1),
		    o = twin((long)B * T * C, BF, ZERO, 0), d = twin((long)B * T * C, BF, NORMAL, 1),
		    dwte = twin((long)V * C, F32, NORMAL, 1), dwpe = twin((long)T * C, F32, NORMAL, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_ENCODER, .B = B, .T = T, .C = C, .V = V }, gc;

	for (int i = 0; i < B * T; i++)
		tok[i] = rng_int(&rng, V / 4 + 1); /* repeats, to exercise accumulation */
	CHECK(ferry_buffer_alloc(gpu, sizeof(int32_t) * B * T, &tb) == FERRY_OK, "tokens");
	CHECK(ferry_memcpy_async(gs, ferry_buffer_ptr(tb), tok, sizeof(int32_t) * B * T, FERRY_COPY_H2D) == FERRY_OK,
	      "tokens up");
	gc = cc;
	cc.tokens = tok;
	gc.tokens = ferry_buffer_ptr(tb);
	SET(out[0], o); SET(w[0], wte); SET(w[1], wpe);
	run_pair("encoder", &cc, &gc);
	compare("encoder", &o, 1e-2);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(dw[0], dwte); SET(dw[1], dwpe);
	run_pair("encoder backward", &cc, &gc);
	/* both add the rows in row order, in fp32: the same bits */
	compare("encoder d wte (fp32, exact)", &dwte, 0);
	compare("encoder d wpe (fp32, exact)", &dwpe, 0);
	struct twin *all[] = { &wte, &wpe, &o, &d, &dwte, &dwpe };
	for (size_t i = 0; i < 6; i++)
		twin_free(all[i]);
	ferry_buffer_free(tb);
	free(tok);
}

static void test_softmax_xent(int N, int V, int Vp)
{
	int32_t *tg = TALLOC(int32_t, N);
	ferry_buffer_t tb;
	const bool huge = (long)N * Vp > 0x7fffffffL;
	struct twin logits = twin((long)N * Vp, BF, huge ? HASHED : NORMAL, 3), losses = twin(N, F32, ZERO, 0);
	struct ferry_op_call cc = { .kind = FERRY_OP_SOFTMAX_XENT, .B = 1, .T = N, .V = V, .Vp = Vp }, gc;

	for (int i = 0; i < N; i++)
		tg[i] = rng_int(&rng, V);
	CHECK(ferry_buffer_alloc(gpu, sizeof(int32_t) * N, &tb) == FERRY_OK, "targets");
	CHECK(ferry_memcpy_async(gs, ferry_buffer_ptr(tb), tg, sizeof(int32_t) * N, FERRY_COPY_H2D) == FERRY_OK, "up");
	gc = cc;
	cc.tokens = tg;
	gc.tokens = ferry_buffer_ptr(tb);
	SET(out[0], losses); SET(out[1], logits); SET(in[0], logits); /* in place, as the model runs it */
	run_pair("softmax_xent", &cc, &gc);
	compare("softmax_xent losses (fp32)", &losses, 1e-2);
	compare("softmax_xent probabilities", &logits, 2e-2);
	cc.backward = gc.backward = true;
	cc.scalar[0] = gc.scalar[0] = 1.0f / N;
	SET(din[0], logits);
	run_pair("softmax_xent backward", &cc, &gc);
	compare("softmax_xent d logits", &logits, 2e-2);
	twin_free(&logits);
	twin_free(&losses);
	ferry_buffer_free(tb);
	free(tg);
}

/* The third tutorial network's loss: e = pred (bf16) - target (fp32), the
 * sum of e^2 and d pred = scale * e. */
static void test_squared_error(struct twin *pred, struct twin *target, struct twin *dpred, long n)
{
	struct ferry_op_call cc = { .kind = FERRY_OP_SQUARED_ERROR, .n = n, .scalar = { 0.25f } }, gc = cc;
	double host_sum = 0, got = 0;
	ferry_buffer_t rb;

	CHECK(ferry_buffer_alloc(gpu, sizeof(double), &rb) == FERRY_OK, "result");
	CHECK(ferry_memset_zero_async(gs, ferry_buffer_ptr(rb), sizeof(double)) == FERRY_OK, "zero");
	cc.result = &host_sum;
	gc.result = ferry_buffer_ptr(rb);
	cc.in[0] = pred->h; gc.in[0] = pred->d;
	cc.in[1] = target->h; gc.in[1] = target->d;
	cc.out[0] = dpred->h; gc.out[0] = dpred->d;
	run_pair("squared_error", &cc, &gc);
	CHECK(ferry_memcpy_async(gs, &got, gc.result, sizeof(double), FERRY_COPY_D2H) == FERRY_OK &&
	      ferry_stream_synchronize(gs) == FERRY_OK, "down");
	printf("  %-34s %.9g vs %.9g\n", "squared error (sum)", got, host_sum);
	CHECK(fabs(got - host_sum) <= 1e-9 * (1 + fabs(host_sum)), "squared error %.17g vs %.17g", got, host_sum);
	compare("squared error gradient", dpred, 4e-3);
	ferry_buffer_free(rb);
}

/* The tutorial network's ops: sum, fill, cast, and SGD with its bf16 copy. */
static void test_small_ops(long n)
{
	struct twin x = twin(n, BF, NORMAL, 1), f = twin(n, F32, NORMAL, 1), o = twin(n, BF, ZERO, 0),
		    p = twin(n, F32, NORMAL, 1), g = twin(n, F32, NORMAL, 1), copy = twin(n, BF, ZERO, 0);
	struct ferry_op_call cc = { .kind = FERRY_OP_CAST, .n = n }, gc = cc;
	double host_sum = 0, got = 0;
	ferry_buffer_t rb;

	SET(out[0], o); SET(in[0], f);
	run_pair("cast", &cc, &gc);
	compare("cast fp32 -> bf16", &o, 4e-3);

	cc = (struct ferry_op_call){ .kind = FERRY_OP_FILL, .n = n, .scalar = { 1.0f } };
	gc = cc;
	SET(out[0], o);
	run_pair("fill", &cc, &gc);
	compare("fill", &o, 0);

	CHECK(ferry_buffer_alloc(gpu, sizeof(double), &rb) == FERRY_OK, "result");
	CHECK(ferry_memset_zero_async(gs, ferry_buffer_ptr(rb), sizeof(double)) == FERRY_OK, "zero");
	cc = (struct ferry_op_call){ .kind = FERRY_OP_SUM, .n = n, .result = &host_sum };
	gc = cc;
	gc.result = ferry_buffer_ptr(rb);
	SET(in[0], x);
	run_pair("sum", &cc, &gc);
	CHECK(ferry_memcpy_async(gs, &got, gc.result, sizeof(double), FERRY_COPY_D2H) == FERRY_OK &&
	      ferry_stream_synchronize(gs) == FERRY_OK, "down");
	printf("  %-34s %.9g vs %.9g\n", "sum (bf16 input)", got, host_sum);
	CHECK(fabs(got - host_sum) <= 1e-9 * (1 + fabs(host_sum)), "sum %.17g vs %.17g", got, host_sum);
	ferry_buffer_free(rb);

	test_squared_error(&x, &f, &o, n);

	cc = (struct ferry_op_call){ .kind = FERRY_OP_SGD, .n = n, .scalar = { 0.1f } };
	gc = cc;
	cc.param = p.h;
	gc.param = p.d;
	gc.param_copy = copy.d;
	SET(in[0], g);
	run_pair("sgd", &cc, &gc);
	compare("sgd param", &p, 1e-6);
	memcpy(copy.h, p.h, sizeof(float) * n);
	compare("sgd bf16 copy", &copy, 4e-3);
	struct twin *all[] = { &x, &f, &o, &p, &g, &copy };
	for (size_t i = 0; i < 6; i++)
		twin_free(all[i]);
}

/* ZeRO-2's gradient norm on a GPU: 4 ranks' block sums of their slices
 * (whole blocks; the last slice past n), added over the ranks and then in
 * order, give the GPU's whole sum to the bit (the same blocks), and the
 * CPU's parts the CPU's whole sum to the bit. */
static void test_sum_parts(const struct twin *g, long n, double whole_gpu)
{
	const long S = (n + FERRY_CPU_SUM_BLOCKS - 1) / FERRY_CPU_SUM_BLOCKS * (FERRY_CPU_SUM_BLOCKS / 4);
	double hsum[FERRY_CPU_SUM_BLOCKS] = { 0 }, dsum[FERRY_CPU_SUM_BLOCKS] = { 0 }, hp[FERRY_CPU_SUM_BLOCKS],
	       dp[FERRY_CPU_SUM_BLOCKS], h, d;
	ferry_buffer_t pb;

	CHECK(ferry_buffer_alloc(gpu, sizeof(dp), &pb) == FERRY_OK, "parts");
	for (long lo = 0; lo < n; lo += S) {
		struct ferry_op_call cc = { .kind = FERRY_OP_SUM_SQUARES, .n = n, .lo = lo, .hi = lo + S }, gc = cc;

		cc.in[0] = g->h + lo;
		gc.in[0] = (const float *)g->d + lo;
		cc.out[0] = hp;
		gc.out[0] = ferry_buffer_ptr(pb);
		run_pair("sum_squares parts", &cc, &gc);
		CHECK(ferry_memcpy_async(gs, dp, gc.out[0], sizeof(dp), FERRY_COPY_D2H) == FERRY_OK &&
		      ferry_stream_synchronize(gs) == FERRY_OK, "down");
		for (int b = 0; b < FERRY_CPU_SUM_BLOCKS; b++) {
			hsum[b] += hp[b];
			dsum[b] += dp[b];
		}
	}
	h = ferry_cpu_sum_parts(hsum);
	d = ferry_cpu_sum_parts(dsum);
	printf("  %-34s gpu %s, cpu %s, rel %.2e\n", "sum_squares over 4 slices", d == whole_gpu ? "same bits" : "DIFFERS",
	       h == ferry_cpu_sum_squares(g->h, n) ? "same bits" : "DIFFERS", fabs(d - h) / h);
	CHECK(d == whole_gpu, "GPU slices' parts %.17g, whole %.17g", d, whole_gpu);
	CHECK(h == ferry_cpu_sum_squares(g->h, n), "CPU slices' parts %.17g, whole %.17g", h,
	      ferry_cpu_sum_squares(g->h, n));
	CHECK(fabs(d - h) <= 1e-9 * h, "GPU %.17g vs CPU %.17g", d, h);
	ferry_buffer_free(pb);
}

static void test_optimizer(long n)
{
	struct twin p = twin(n, F32, NORMAL, 1), m = twin(n, F32, NORMAL, 0.1f), v = twin(n, F32, POSITIVE, 0.01f),
		    g = twin(n, F32, NORMAL, 1), copy = twin(n, BF, ZERO, 0);
	struct ferry_op_call cc = { .kind = FERRY_OP_ADAMW, .n = n, .step = 3,
				    .scalar = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f } }, gc = cc;
	double *res;
	ferry_buffer_t rb;

	cc.param = p.h; gc.param = p.d;
	SET(out[0], m); SET(out[1], v); SET(in[0], g);
	gc.param_copy = copy.d;
	run_pair("adamw", &cc, &gc);
	compare("adamw param", &p, 1e-5);
	compare("adamw m", &m, 1e-5);
	compare("adamw v", &v, 1e-5);
	memcpy(copy.h, p.h, sizeof(float) * n); /* the copy is the new param in bf16 */
	compare("adamw bf16 copy", &copy, 1e-2);

	cc = (struct ferry_op_call){ .kind = FERRY_OP_SUM_SQUARES, .n = n };
	gc = cc;
	SET(in[0], g);
	double host_res = 0;
	CHECK(ferry_buffer_alloc(gpu, sizeof(double), &rb) == FERRY_OK, "result");
	res = ferry_buffer_ptr(rb);
	CHECK(ferry_memset_zero_async(gs, res, sizeof(double)) == FERRY_OK, "zero");
	cc.result = &host_res;
	gc.result = res;
	run_pair("sum_squares", &cc, &gc);
	double got;
	CHECK(ferry_memcpy_async(gs, &got, res, sizeof(double), FERRY_COPY_D2H) == FERRY_OK &&
	      ferry_stream_synchronize(gs) == FERRY_OK, "down");
	printf("  %-34s rel %.2e\n", "sum_squares", fabs(got - host_res) / host_res);
	CHECK(fabs(got - host_res) <= 1e-9 * host_res, "sum_squares %.17g vs %.17g", got, host_res);
	ferry_buffer_free(rb);
	test_sum_parts(&g, n, got);
	struct twin *all[] = { &p, &m, &v, &g, &copy };
	for (size_t i = 0; i < 5; i++)
		twin_free(all[i]);
}

/* Softmax cross-entropy over a logits matrix of more than 2^31 elements
 * (index arithmetic past int: GPT-2's vocabulary at 42800 rows), in an
 * arena of its own, where the GPU has room for it. */
static void test_huge_logits(void)
{
	const int N = 42800, V = 50257, Vp = 50304;
	const size_t need = (size_t)N * Vp * 2 + ((size_t)64 << 20);

	ferry_stream_free(gs);
	ferry_backend_close(gpu);
	gpu = NULL;
	if (ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = need }, &gpu) != FERRY_OK) {
		printf("  softmax_xent over %.2e logits: skipped, no room on this GPU (%s)\n", (double)N * Vp,
		       ferry_last_error());
		gpu = NULL;
		return;
	}
	CHECK(ferry_stream_create(gpu, "test", &gs) == FERRY_OK, "stream");
	printf("  softmax_xent over %ld logits (more than 2^31):\n", (long)N * Vp);
	test_softmax_xent(N, V, Vp);
	ferry_stream_free(gs);
	ferry_backend_close(gpu);
	gpu = NULL;
}

int main(void)
{
	gpu_or_skip();
	rng = rng_new(2026);
	CHECK(ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = (size_t)1 << 30 }, &gpu) ==
		      FERRY_OK, "open: %s", ferry_last_error());
	CHECK(ferry_stream_create(gpu, "test", &gs) == FERRY_OK, "stream");
	printf("%s\n", ferry_backend_description(gpu));
	test_matmul(64, 96, 160, true);
	test_matmul(37, 64, 50, false);
	test_matmul(37, 64, 50, true);    /* a bias width not a multiple of 32 */
	test_matmul(128, 256, 1024, true);
	test_matmul(2048, 768, 2304, true);  /* GPT-2 124M's qkv at 2 x 1024 tokens */
	test_matmul(2048, 3072, 768, true);  /* and its MLP projection */
	test_matmul(1024, 768, 50304, false); /* and its logits */
	test_layernorm(77, 192);
	test_layernorm(256, 768);
	test_layernorm(77, 100);          /* channels not a multiple of 32 */
	test_attention(2, 64, 128, 4);   /* head size 32 */
	test_attention(1, 129, 256, 4);  /* head size 64, T not a multiple of anything */
	test_attention(2, 1, 64, 1);     /* one token */
	test_attention(1, 40, 96, 2);    /* head size 48 */
	test_attention(1, 70, 256, 2);   /* head size 128 */
	test_attention(1, 33, 256, 1);   /* head size 256, the largest */
	test_elementwise(100003);        /* one value a thread */
	test_elementwise(100000);        /* 8 values a thread: a multiple of 8, 16-byte aligned */
	test_encoder(3, 17, 64, 101);
	test_encoder(4, 1024, 768, 50257); /* GPT-2 124M's embedding at sequence 1024 */
	test_encoder(2, 300, 96, 3);        /* one token in every row: one long run */
	test_softmax_xent(33, 1000, 1024);
	test_softmax_xent(9, 1003, 1008); /* a vector of 8 half vocabulary, half padding */
	test_softmax_xent(7, 100, 101);   /* rows that are not 16-byte vectors */
	test_small_ops(70001);
	test_optimizer(50001);
	test_huge_logits(); /* closes the backend */
	return test_exit_code();
}
