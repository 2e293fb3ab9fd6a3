/*
 * Packed documents on the CUDA backend against the CPU's (issue 38):
 * attention with positions (the tensor-core kernels at head sizes 32, 64
 * and 128, the warp-per-query ones at other sizes and with a window, a
 * scale or a soft cap; grouped-query; documents across 64-row tiles and of
 * one row), rope and the encoder with positions, and softmax_xent with
 * targets -1 (those rows' loss and gradient exactly 0).  Inputs rounded to
 * bf16 where the GPU holds bf16, gradients pre-filled so accumulation is
 * checked too; normalised error max|gpu - cpu| / max|cpu| under the bounds
 * of test_gpu_ops.c.  Exits 77 (skipped) without a GPU.
 */
#include "backend/cpu/cpu_ops.h"
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

static struct twin twin(long n, enum ferry_dtype t, float scale)
{
	struct twin w = { TALLOC(float, n > 0 ? n : 1), NULL, NULL, t, n };

	for (long i = 0; i < n; i++) {
		const float v = scale * rng_normal(&rng);

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

/* int32 ids (tokens, targets, positions) on the device. */
static const int32_t *ids_up(const int32_t *h, long n, ferry_buffer_t *keep)
{
	CHECK(ferry_buffer_alloc(gpu, sizeof(int32_t) * (size_t)n, keep) == FERRY_OK, "ids: %s", ferry_last_error());
	CHECK(ferry_memcpy_async(gs, ferry_buffer_ptr(*keep), h, sizeof(int32_t) * (size_t)n, FERRY_COPY_H2D) ==
		      FERRY_OK,
	      "ids up");
	return ferry_buffer_ptr(*keep);
}

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
		const double d = fabs((double)g[i] - w->h[i]);

		num = d > num || isnan(d) ? d : num;
		den = fabs(w->h[i]) > den ? fabs(w->h[i]) : den;
	}
	printf("  %-44s nerr %.2e (bound %.0e)\n", what, num / den, bound);
	CHECK(num / den <= bound, "%s: normalised error %.3e > %.0e", what, num / den, bound);
	free(g);
	return num / den;
}

#define BF FERRY_BF16
#define F32 FERRY_F32
#define SET(field, w) (cc.field = (w).h, gc.field = (w).d)

/* positions of B rows from document lengths, each row's summing to T */
static int32_t *positions_of(const int *lens, int B, int T)
{
	int32_t *pos = TALLOC(int32_t, (long)B * T);

	for (int b = 0, d = 0; b < B; b++)
		for (int t = 0; t < T; d++)
			for (int i = 0; i < lens[d]; i++, t++)
				pos[(size_t)b * T + t] = i;
	return pos;
}

static void test_attention(const char *what, int B, int T, int NH, int NKV, int HS, int W, float scale, float cap,
			   const int *lens)
{
	const int C = NH * HS;
	const long n = (long)B * T * C, nk = (long)B * T * NKV * HS;
	int32_t *pos = positions_of(lens, B, T);
	ferry_buffer_t pb;
	struct twin q = twin(n, BF, 1), k = twin(nk, BF, 1), v = twin(nk, BF, 1), o = twin(n, BF, 0),
		    lse = twin((long)B * NH * T, F32, 0), dout = twin(n, BF, 1), dq = twin(n, BF, 1),
		    dk = twin(nk, BF, 1), dv = twin(nk, BF, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_ATTENTION, .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV,
				    .scalar = { (float)W, scale, cap } },
			     gc = cc;
	char name[128];

	snprintf(name, sizeof name, "attention %s B%d T%d NH%d NKV%d HS%d W%d", what, B, T, NH, NKV, HS, W);
	cc.positions = pos;
	gc.positions = ids_up(pos, (long)B * T, &pb);
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
	ferry_buffer_free(pb);
	free(pos);
}

/* One row a document (positions 0 .. T-1) runs the kernels' masked paths
 * (the tensor-core ones' included) to the bits of positions NULL. */
static void test_attention_identity(int B, int T, int NH, int NKV, int HS, int W, float cap)
{
	const int C = NH * HS;
	const long n = (long)B * T * C, nk = (long)B * T * NKV * HS, nl = (long)B * NH * T;
	int32_t *pos = TALLOC(int32_t, (long)B * T);
	ferry_buffer_t pb;
	struct twin q = twin(n, BF, 1), k = twin(nk, BF, 1), v = twin(nk, BF, 1), dout = twin(n, BF, 1);
	struct twin r[2][5];
	float *h[2][5];
	const long len[5] = { n, nl, n, nk, nk };
	char name[96];

	for (long i = 0; i < (long)B * T; i++)
		pos[i] = (int32_t)(i % T);
	const int32_t *dpos = ids_up(pos, (long)B * T, &pb);
	snprintf(name, sizeof name, "attention B%d T%d NH%d HS%d W%d: positions 0..T-1", B, T, NH, HS, W);
	for (int run = 0; run < 2; run++) {
		for (int i = 0; i < 5; i++)
			r[run][i] = twin(len[i], i == 1 ? F32 : BF, 0);
		struct ferry_op_call gc = { .kind = FERRY_OP_ATTENTION, .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV,
					    .scalar = { (float)W, 0, cap }, .positions = run ? dpos : NULL };
		gc.out[0] = r[run][0].d;
		gc.out[1] = r[run][1].d;
		gc.in[0] = q.d;
		gc.in[1] = k.d;
		gc.in[2] = v.d;
		CHECK(ferry_stream_run_op(gs, &gc) == FERRY_OK, "%s: forward %s", name, ferry_last_error());
		gc.backward = true;
		gc.dout[0] = dout.d;
		for (int i = 0; i < 3; i++)
			gc.din[i] = r[run][2 + i].d;
		CHECK(ferry_stream_run_op(gs, &gc) == FERRY_OK, "%s: backward %s", name, ferry_last_error());
		for (int i = 0; i < 5; i++) {
			h[run][i] = TALLOC(float, len[i]);
			dev_get(gs, r[run][i].t, r[run][i].d, h[run][i], len[i]);
		}
	}
	bool same = true;
	for (int i = 0; i < 5; i++)
		same = same && !memcmp(h[0][i], h[1][i], sizeof(float) * (size_t)len[i]);
	printf("  %-44s %s\n", name, same ? "same bits" : "DIFFER");
	CHECK(same, "%s: not the bits of positions NULL", name);
	for (int run = 0; run < 2; run++)
		for (int i = 0; i < 5; i++) {
			twin_free(&r[run][i]);
			free(h[run][i]);
		}
	struct twin *all[] = { &q, &k, &v, &dout };
	for (size_t i = 0; i < 4; i++)
		twin_free(all[i]);
	ferry_buffer_free(pb);
	free(pos);
}

static void test_rope(int B, int T, int NH, int HS, const int *lens)
{
	const long n = (long)B * T * NH * HS;
	int32_t *pos = positions_of(lens, B, T);
	ferry_buffer_t pb;
	struct twin x = twin(n, BF, 1), o = twin(n, BF, 0), d = twin(n, BF, 1), dx = twin(n, BF, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_ROPE, .B = B, .T = T, .C = NH * HS, .NH = NH,
				    .scalar = { 500000.0f, 2, 8, 1, 4, 64 } }, /* llama3 scaling */
			     gc = cc;
	char name[64];

	snprintf(name, sizeof name, "rope B%d T%d NH%d HS%d", B, T, NH, HS);
	cc.positions = pos;
	gc.positions = ids_up(pos, (long)B * T, &pb);
	SET(out[0], o); SET(in[0], x);
	run_pair(name, &cc, &gc);
	compare(name, &o, 1e-2);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(din[0], dx);
	run_pair(name, &cc, &gc);
	compare("  backward", &dx, 2e-2);
	struct twin *all[] = { &x, &o, &d, &dx };
	for (size_t i = 0; i < 4; i++)
		twin_free(all[i]);
	ferry_buffer_free(pb);
	free(pos);
}

static void test_encoder(int B, int T, int C, int V, const int *lens)
{
	int32_t *tok = TALLOC(int32_t, (long)B * T), *pos = positions_of(lens, B, T);
	ferry_buffer_t tb, pb;
	struct twin wte = twin((long)V * C, BF, 1), wpe = twin((long)T * C, BF, 1), o = twin((long)B * T * C, BF, 0),
		    d = twin((long)B * T * C, BF, 1), dwte = twin((long)V * C, F32, 1), dwpe = twin((long)T * C, F32, 1);
	struct ferry_op_call cc = { .kind = FERRY_OP_ENCODER, .B = B, .T = T, .C = C, .V = V }, gc;
	char name[64];

	snprintf(name, sizeof name, "encoder B%d T%d C%d V%d", B, T, C, V);
	for (long i = 0; i < (long)B * T; i++)
		tok[i] = rng_int(&rng, V / 4 + 1); /* repeats */
	gc = cc;
	cc.tokens = tok;
	gc.tokens = ids_up(tok, (long)B * T, &tb);
	cc.positions = pos;
	gc.positions = ids_up(pos, (long)B * T, &pb);
	SET(out[0], o); SET(w[0], wte); SET(w[1], wpe);
	run_pair(name, &cc, &gc);
	compare(name, &o, 1e-2);
	cc.backward = gc.backward = true;
	SET(dout[0], d); SET(dw[0], dwte); SET(dw[1], dwpe);
	run_pair(name, &cc, &gc);
	/* both add the rows in row order, in fp32: the same bits */
	compare("  d wte (fp32, exact)", &dwte, 0);
	compare("  d wpe by position (fp32, exact)", &dwpe, 0);
	struct twin *all[] = { &wte, &wpe, &o, &d, &dwte, &dwpe };
	for (size_t i = 0; i < 6; i++)
		twin_free(all[i]);
	ferry_buffer_free(tb);
	ferry_buffer_free(pb);
	free(tok);
	free(pos);
}

/* Rows whose target is -1 (every third, and the last): loss exactly 0 and
 * gradient row exactly 0 on the GPU; the rest as the CPU's. */
static void test_softmax_xent(int N, int V, int Vp)
{
	int32_t *tg = TALLOC(int32_t, N);
	ferry_buffer_t tb;
	struct twin logits = twin((long)N * Vp, BF, 3), losses = twin(N, F32, 0);
	struct ferry_op_call cc = { .kind = FERRY_OP_SOFTMAX_XENT, .B = 1, .T = N, .V = V, .Vp = Vp }, gc;
	char name[64];

	snprintf(name, sizeof name, "softmax_xent N%d V%d Vp%d, targets -1", N, V, Vp);
	for (int i = 0; i < N; i++)
		tg[i] = i % 3 == 2 || i == N - 1 ? -1 : rng_int(&rng, V);
	gc = cc;
	cc.tokens = tg;
	gc.tokens = ids_up(tg, N, &tb);
	SET(out[0], losses); SET(out[1], logits); SET(in[0], logits); /* in place, as the model runs it */
	run_pair(name, &cc, &gc);
	compare(name, &losses, 1e-2);
	float *g = TALLOC(float, (long)N * Vp);
	bool zero = true;

	dev_get(gs, F32, losses.d, g, N);
	for (int i = 0; i < N; i++)
		zero = zero && (tg[i] >= 0 || g[i] == 0.0f);
	CHECK(zero, "%s: an uncounted row's loss is not 0", name);
	compare("  probabilities", &logits, 2e-2);
	cc.backward = gc.backward = true;
	cc.scalar[0] = gc.scalar[0] = 1.0f / N;
	SET(din[0], logits);
	run_pair(name, &cc, &gc);
	compare("  d logits", &logits, 2e-2);
	dev_get(gs, BF, logits.d, g, (long)N * Vp);
	for (int i = 0; i < N; i++)
		for (int j = 0; tg[i] < 0 && j < Vp; j++)
			zero = zero && g[(size_t)i * Vp + j] == 0.0f;
	CHECK(zero, "%s: an uncounted row's gradient is not 0", name);
	free(g);
	twin_free(&logits);
	twin_free(&losses);
	ferry_buffer_free(tb);
	free(tg);
}

int main(void)
{
	gpu_or_skip();
	rng = rng_new(38);
	CHECK(ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = (size_t)1 << 30 }, &gpu) ==
		      FERRY_OK,
	      "open: %s", ferry_last_error());
	CHECK(ferry_stream_create(gpu, "test", &gs) == FERRY_OK, "stream");
	printf("%s\n", ferry_backend_description(gpu));
	/* tensor cores: documents across 64-row tiles, of one row, a row of one document */
	test_attention("flash", 2, 200, 4, 4, 64, 0, 0, 0, (const int[]){ 70, 1, 60, 69, 200 });
	test_attention("flash", 1, 300, 4, 2, 128, 0, 0, 0, (const int[]){ 5, 130, 64, 64, 1, 36 });
	test_attention("flash", 3, 129, 2, 1, 32, 0, 0, 0, (const int[]){ 129, 1, 1, 127, 64, 65 });
	/* warp per query: other head sizes, window, scale and cap */
	test_attention("warp", 2, 150, 2, 2, 48, 0, 0, 0, (const int[]){ 40, 40, 70, 3, 147 });
	test_attention("warp window", 1, 180, 4, 2, 64, 50, 0, 0, (const int[]){ 100, 30, 50 });
	test_attention("warp cap", 2, 90, 2, 1, 64, 0, 0.2f, 30.0f, (const int[]){ 33, 57, 1, 89 });
	test_attention("warp HS 256", 1, 70, 1, 1, 256, 0, 0, 0, (const int[]){ 9, 61 });
	test_attention_identity(2, 130, 4, 2, 64, 0, 0);  /* tensor cores */
	test_attention_identity(1, 100, 2, 2, 48, 30, 5); /* warp per query */
	test_rope(2, 100, 4, 64, (const int[]){ 60, 40, 1, 99 });
	test_rope(1, 50, 2, 100, (const int[]){ 17, 33 }); /* pairs not a multiple of 8 */
	test_encoder(3, 64, 64, 101, (const int[]){ 10, 54, 64, 1, 1, 62 });
	test_encoder(2, 1024, 768, 50257, (const int[]){ 500, 524, 1, 1023 }); /* GPT-2 124M's shape */
	test_softmax_xent(33, 1000, 1024);
	test_softmax_xent(7, 100, 101); /* rows that are not 16-byte vectors */
	ferry_stream_free(gs);
	ferry_backend_close(gpu);
	return test_exit_code();
}
