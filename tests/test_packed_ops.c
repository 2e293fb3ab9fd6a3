/*
 * Packed documents on the CPU kernels (issue 38): rows of B x T tokens hold
 * several documents, positions[b, t] is each row's position in its
 * document, and a target below 0 is not counted.
 *
 *   attention  through ferry_cpu_run_op with positions: forward against the
 *              float64 reference run on each document alone; out, lse, dq,
 *              dk, dv against the kernel run on each document alone
 *              (concatenated); finite-difference gradients; grouped-query,
 *              sliding window, soft cap, a custom scale, documents across
 *              key tiles, and the row-by-row path (HS > 256);
 *   rope       with positions equals rope of each document alone, bit for
 *              bit, forward and backward, and its gradient;
 *   encoder    likewise (wpe at the position), and dwpe's gradient;
 *   xent       targets -1: those rows' loss and gradient exactly 0, the
 *              others the bits of the counted rows run alone, also over
 *              row ranges (loss tiles) and in place;
 *   same bits  positions 0, 1, ..., T-1 (one document a row) give the bits
 *              of positions NULL for every op;
 *   flops      attention's pairs with documents (ferry_op_attention_pairs,
 *              ferry_op_flops_at) against each document's alone.
 */
#include "backend/cpu/cpu_ops.h"
#include "ops/cpu/kernels.h"
#include "ops/op.h"
#include "grad_check.h"
#include "ref_ops.h"
#include "test_util.h"

#include <string.h>

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4
#define ALONE_TOL 2e-6 /* packed vs alone, fp32 both: the key tiles differ */

/* positions of B rows from document lengths: lens lists each row's
 * documents in turn, each row's summing to T. */
static int32_t *positions_of(const int *lens, int B, int T)
{
	int32_t *pos = TALLOC(int32_t, (long)B * T);
	int d = 0;

	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; d++)
			for (int i = 0; i < lens[d]; i++, t++)
				pos[(size_t)b * T + t] = i;
	return pos;
}

/* The end of the document starting at row s of a row's positions. */
static int doc_end(const int32_t *pos, int s, int T)
{
	int e = s + 1;

	while (e < T && pos[e] != 0)
		e++;
	return e;
}

static int32_t *identity_positions(int B, int T)
{
	int32_t *pos = TALLOC(int32_t, (long)B * T);

	for (long n = 0; n < (long)B * T; n++)
		pos[n] = (int32_t)(n % T);
	return pos;
}

/* ---- attention ------------------------------------------------------------ */

typedef struct {
	GradCase g; /* first: the callbacks get a GradCase pointer */
	int32_t *pos;
	float scale, cap;
} PackCase;

/* The float64 reference on each document alone. */
static void ref_attention_docs(double *out, const double *q, const double *k, const double *v,
			       const int32_t *pos, int B, int T, int C, int NH, int NKV, int W, double scale,
			       double cap)
{
	const int KVC = NKV * (C / NH);

	for (int b = 0; b < B; b++)
		for (int s = 0, e; s < T; s = e) {
			e = doc_end(pos + (size_t)b * T, s, T);
			const size_t r = (size_t)b * T + s;
			ref_attention_capped_forward(out + r * C, NULL, q + r * C, k + r * KVC, v + r * KVC, 1, e - s,
						     C, NH, NKV, W, scale, cap);
		}
}

static double attention_loss(void *p)
{
	PackCase *pc = p;
	GradCase *c = &pc->g;

	ref_attention_docs(c->outd, c->xd[0], c->xd[1], c->xd[2], pc->pos, c->B, c->T, c->C, c->NH, c->NKV,
			   c->window, pc->scale, pc->cap);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void attention_bwd(GradCase *c, float **g)
{
	PackCase *pc = (PackCase *)c;

	ferry_cpu_attention_backward_pos(g[0], g[1], g[2], c->R, c->x[0], c->x[1], c->x[2], c->out, c->lse,
					 pc->pos, c->B, c->T, c->C, c->NH, c->NKV, c->window, pc->scale, pc->cap);
}

/* The attention op call on the given buffers (positions may be NULL). */
static struct ferry_op_call attention_call(const PackCase *pc, const int32_t *pos, float *out, float *lse)
{
	const GradCase *c = &pc->g;
	struct ferry_op_call call = {.kind = FERRY_OP_ATTENTION, .B = c->B, .T = c->T, .C = c->C,
				     .NH = c->NH, .NKV = c->NKV, .positions = pos};

	call.out[0] = out;
	call.out[1] = lse;
	for (int i = 0; i < 3; i++)
		call.in[i] = c->x[i];
	call.scalar[0] = (float)c->window;
	call.scalar[1] = pc->scale;
	call.scalar[2] = pc->cap;
	return call;
}

/* Forward and backward through ferry_cpu_run_op: out, lse, dq, dk, dv. */
static void attention_run(const PackCase *pc, const int32_t *pos, float *out, float *lse, float **d)
{
	struct ferry_op_call call = attention_call(pc, pos, out, lse);

	ferry_cpu_run_op(&call);
	call.backward = true;
	call.dout[0] = pc->g.R;
	for (int i = 0; i < 3; i++) {
		memset(d[i], 0, sizeof(float) * (size_t)pc->g.n[i]);
		call.din[i] = d[i];
	}
	ferry_cpu_run_op(&call);
}

/* The kernels on each document alone, written where the packed run writes. */
static void attention_alone(const PackCase *pc, float *out, float *lse, float **d)
{
	const GradCase *c = &pc->g;
	const int HS = c->C / c->NH, KVC = c->NKV * HS;
	float *lse1 = TALLOC(float, (long)c->NH * c->T);

	for (int i = 0; i < 3; i++)
		memset(d[i], 0, sizeof(float) * (size_t)c->n[i]);
	for (int b = 0; b < c->B; b++)
		for (int s = 0, e; s < c->T; s = e) {
			e = doc_end(pc->pos + (size_t)b * c->T, s, c->T);
			const int L = e - s;
			const size_t r = (size_t)b * c->T + s, rq = r * c->C, rk = r * KVC;

			ferry_cpu_attention_forward(out + rq, lse1, c->x[0] + rq, c->x[1] + rk, c->x[2] + rk, 1, L,
						    c->C, c->NH, c->NKV, c->window, pc->scale, pc->cap);
			ferry_cpu_attention_backward(d[0] + rq, d[1] + rk, d[2] + rk, c->R + rq, c->x[0] + rq,
						     c->x[1] + rk, c->x[2] + rk, out + rq, lse1, 1, L, c->C, c->NH,
						     c->NKV, c->window, pc->scale, pc->cap);
			for (int h = 0; h < c->NH; h++)
				memcpy(lse + ((size_t)b * c->NH + h) * c->T + s, lse1 + (size_t)h * L,
				       sizeof(float) * (size_t)L);
		}
	free(lse1);
}

static void test_attention(uint64_t seed, int B, int T, int NH, int NKV, int HS, int W, float scale, float cap,
			   const int *lens, bool grads)
{
	Rng rng = rng_new(seed);
	PackCase pc = {.g = {.B = B, .T = T, .C = NH * HS, .NH = NH, .NKV = NKV, .window = W,
			     .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_REQUIRED},
		       .scale = scale, .cap = cap};
	GradCase *c = &pc.g;
	const int C = NH * HS;
	const long nq = (long)B * T * C, nk = (long)B * T * NKV * HS, nl = (long)B * NH * T;

	c->backward = attention_bwd;
	c->loss = attention_loss;
	fill_normal(&rng, arg_new(c, "q", nq), nq, 1.0f);
	fill_normal(&rng, arg_new(c, "k", nk), nk, 1.0f);
	fill_normal(&rng, arg_new(c, "v", nk), nk, 1.0f);
	args_sync(c);
	out_new(c, &rng, nq);
	c->lse = TALLOC(float, nl);
	pc.pos = positions_of(lens, B, T);

	float *out2 = TALLOC(float, nq), *lse2 = TALLOC(float, nl), *d1[3], *d2[3];
	for (int i = 0; i < 3; i++) {
		d1[i] = TALLOC(float, c->n[i]);
		d2[i] = TALLOC(float, c->n[i]);
	}
	char label[128];
	snprintf(label, sizeof label, "attention B=%d T=%d NH=%d NKV=%d HS=%d W=%d scale=%g cap=%g", B, T, NH, NKV,
		 HS, W, scale, cap);

	/* packed against the reference on each document */
	attention_run(&pc, pc.pos, c->out, c->lse, d1);
	ref_attention_docs(c->outd, c->xd[0], c->xd[1], c->xd[2], pc.pos, B, T, C, NH, NKV, W, scale, cap);
	const double fe = nerr_fd(c->out, c->outd, nq);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g against each document alone", label, fe);

	/* packed against the kernels on each document alone */
	attention_alone(&pc, out2, lse2, d2);
	double ae = fmax(nerr_ff(c->out, out2, nq), nerr_ff(c->lse, lse2, nl));
	for (int i = 0; i < 3; i++) {
		const double e = nerr_ff(d1[i], d2[i], c->n[i]);
		CHECK(e < ALONE_TOL, "%s: d%s differs from each document alone (%.3g)", label, c->argname[i], e);
		ae = fmax(ae, e);
	}
	CHECK(ae < ALONE_TOL, "%s: packed differs from each document alone (%.3g)", label, ae);

	/* one document a row: the bits of positions NULL */
	int32_t *id = identity_positions(B, T);
	attention_run(&pc, id, c->out, c->lse, d1);
	attention_run(&pc, NULL, out2, lse2, d2);
	bool same = !memcmp(c->out, out2, sizeof(float) * (size_t)nq) &&
		    !memcmp(c->lse, lse2, sizeof(float) * (size_t)nl);
	for (int i = 0; i < 3; i++)
		same = same && !memcmp(d1[i], d2[i], sizeof(float) * (size_t)c->n[i]);
	CHECK(same, "%s: positions 0..T-1 are not the bits of positions NULL", label);

	double ge = -1.0;
	if (grads) {
		attention_run(&pc, pc.pos, c->out, c->lse, d1); /* the saved out, lse */
		ge = check_grads(c, label);
	}
	printf("%-72s fwd %.2e alone %.2e grad %.2e\n", label, fe, ae, ge);
	free(id);
	free(out2);
	free(lse2);
	for (int i = 0; i < 3; i++) {
		free(d1[i]);
		free(d2[i]);
	}
	free(pc.pos);
	case_free(c);
}

/* ---- rope ------------------------------------------------------------------- */

static double rope_loss(void *p)
{
	PackCase *pc = p;
	GradCase *c = &pc->g;

	/* rows as B * T rows of one batch, each at its position's frequencies */
	ref_rope_forward(c->outd, c->xd[0], c->freqs, 1, c->B * c->T, c->NH, c->HS);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void rope_bwd(GradCase *c, float **g)
{
	ferry_cpu_rope_backward_pos(g[0], c->R, ((PackCase *)c)->pos, c->B, c->T, c->NH, c->HS, &c->rf);
}

static struct ferry_op_call rope_call(const GradCase *c, const int32_t *pos, float *out)
{
	struct ferry_op_call call = {.kind = FERRY_OP_ROPE, .B = c->B, .T = c->T, .C = c->NH * c->HS,
				     .NH = c->NH, .positions = pos};

	call.out[0] = out;
	call.in[0] = c->x[0];
	call.scalar[0] = c->rf.theta;
	return call;
}

static void rope_run(const GradCase *c, const int32_t *pos, float *out, float *din)
{
	struct ferry_op_call call = rope_call(c, pos, out);

	ferry_cpu_run_op(&call);
	call.backward = true;
	call.dout[0] = c->R;
	memset(din, 0, sizeof(float) * (size_t)c->nout);
	call.din[0] = din;
	ferry_cpu_run_op(&call);
}

static void test_rope(uint64_t seed, int B, int T, int NH, int HS, float theta, const int *lens)
{
	Rng rng = rng_new(seed);
	PackCase pc = {.g = {.B = B, .T = T, .NH = NH, .HS = HS, .grad_tol = GRAD_TOL,
			     .nonzero = GRAD_NONZERO_REQUIRED}};
	GradCase *c = &pc.g;
	const long n = (long)B * T * NH * HS, C = (long)NH * HS;
	const int half = HS / 2;

	c->rf = (struct ferry_rope_freq){.theta = theta};
	c->backward = rope_bwd;
	c->loss = rope_loss;
	float *x = arg_new(c, "x", n);
	fill_normal(&rng, x, n, 1.0f);
	args_sync(c);
	out_new(c, &rng, n);
	pc.pos = positions_of(lens, B, T);
	double *f = TALLOC(double, (long)T * half);
	c->freqs = TALLOC(double, (long)B * T * half);
	ref_rope_freqs(f, T, HS, theta, 1);
	for (long r = 0; r < (long)B * T; r++)
		memcpy(c->freqs + r * half, f + (size_t)pc.pos[r] * half, sizeof(double) * (size_t)half);

	char label[96];
	snprintf(label, sizeof label, "rope B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
	float *din = TALLOC(float, n), *out2 = TALLOC(float, n), *din2 = TALLOC(float, n);
	rope_run(c, pc.pos, c->out, din);
	ref_rope_forward(c->outd, c->xd[0], c->freqs, 1, B * T, NH, HS);
	const double fe = nerr_fd(c->out, c->outd, n);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);

	/* each document alone: the same bits */
	memset(din2, 0, sizeof(float) * (size_t)n);
	for (int b = 0; b < B; b++)
		for (int s = 0, e; s < T; s = e) {
			e = doc_end(pc.pos + (size_t)b * T, s, T);
			const size_t o = ((size_t)b * T + s) * C;
			ferry_cpu_rope_forward(out2 + o, x + o, 1, e - s, NH, HS, &c->rf);
			ferry_cpu_rope_backward(din2 + o, c->R + o, 1, e - s, NH, HS, &c->rf);
		}
	CHECK(!memcmp(c->out, out2, sizeof(float) * (size_t)n), "%s: forward is not each document's alone", label);
	CHECK(!memcmp(din, din2, sizeof(float) * (size_t)n), "%s: backward is not each document's alone", label);

	int32_t *id = identity_positions(B, T);
	rope_run(c, id, c->out, din);
	rope_run(c, NULL, out2, din2);
	CHECK(!memcmp(c->out, out2, sizeof(float) * (size_t)n) && !memcmp(din, din2, sizeof(float) * (size_t)n),
	      "%s: positions 0..T-1 are not the bits of positions NULL", label);

	const double ge = check_grads(c, label);
	printf("%-72s fwd %.2e grad %.2e\n", label, fe, ge);
	free(id);
	free(f);
	free(din);
	free(out2);
	free(din2);
	free(pc.pos);
	case_free(c);
}

/* ---- encoder ---------------------------------------------------------------- */

static double encoder_loss(void *p)
{
	PackCase *pc = p;
	GradCase *c = &pc->g;

	for (long r = 0; r < (long)c->B * c->T; r++)
		for (int i = 0; i < c->C; i++)
			c->outd[r * c->C + i] = c->xd[0][(size_t)c->tokens[r] * c->C + i] +
						c->xd[1][(size_t)pc->pos[r] * c->C + i];
	return dot_d(c->outd, c->Rd, c->nout);
}

static void encoder_bwd(GradCase *c, float **g)
{
	ferry_cpu_encoder_backward_pos(g[0], g[1], c->R, c->tokens, ((PackCase *)c)->pos, c->B, c->T, c->C);
}

static void encoder_run(const GradCase *c, const int32_t *pos, float *out, float *dwte, float *dwpe, int V)
{
	struct ferry_op_call call = {.kind = FERRY_OP_ENCODER, .B = c->B, .T = c->T, .C = c->C,
				     .tokens = c->tokens, .positions = pos};

	call.out[0] = out;
	call.w[0] = c->x[0];
	call.w[1] = c->x[1];
	ferry_cpu_run_op(&call);
	call.backward = true;
	call.dout[0] = c->R;
	memset(dwte, 0, sizeof(float) * (size_t)V * c->C);
	memset(dwpe, 0, sizeof(float) * (size_t)c->T * c->C);
	call.dw[0] = dwte;
	call.dw[1] = dwpe;
	ferry_cpu_run_op(&call);
}

static void test_encoder(uint64_t seed, int B, int T, int C, int V, const int *lens)
{
	Rng rng = rng_new(seed);
	PackCase pc = {.g = {.B = B, .T = T, .C = C, .grad_tol = GRAD_TOL, .nonzero = GRAD_NONZERO_OFF}};
	GradCase *c = &pc.g;
	const long n = (long)B * T * C;

	c->backward = encoder_bwd;
	c->loss = encoder_loss;
	float *wte = arg_new(c, "wte", (long)V * C), *wpe = arg_new(c, "wpe", (long)T * C);
	fill_normal(&rng, wte, (long)V * C, 1.0f);
	fill_normal(&rng, wpe, (long)T * C, 1.0f);
	args_sync(c);
	c->tokens = TALLOC(int32_t, (long)B * T);
	for (long i = 0; i < (long)B * T; i++)
		c->tokens[i] = rng_int(&rng, V);
	out_new(c, &rng, n);
	pc.pos = positions_of(lens, B, T);

	char label[96];
	snprintf(label, sizeof label, "encoder B=%d T=%d C=%d V=%d", B, T, C, V);
	float *out2 = TALLOC(float, n), *g[4];
	for (int i = 0; i < 4; i++)
		g[i] = TALLOC(float, (long)(i % 2 ? T : V) * C);
	encoder_run(c, pc.pos, c->out, g[0], g[1], V);
	encoder_loss(&pc);
	const double fe = nerr_fd(c->out, c->outd, n);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);

	for (int b = 0; b < B; b++) /* each document alone: the same bits */
		for (int s = 0, e; s < T; s = e) {
			e = doc_end(pc.pos + (size_t)b * T, s, T);
			const size_t r = (size_t)b * T + s;
			ferry_cpu_encoder_forward(out2 + r * C, c->tokens + r, wte, wpe, 1, e - s, C);
		}
	CHECK(!memcmp(c->out, out2, sizeof(float) * (size_t)n), "%s: forward is not each document's alone", label);

	int32_t *id = identity_positions(B, T);
	encoder_run(c, id, c->out, g[0], g[1], V);
	encoder_run(c, NULL, out2, g[2], g[3], V);
	CHECK(!memcmp(c->out, out2, sizeof(float) * (size_t)n) &&
		      !memcmp(g[0], g[2], sizeof(float) * (size_t)V * C) &&
		      !memcmp(g[1], g[3], sizeof(float) * (size_t)T * C),
	      "%s: positions 0..T-1 are not the bits of positions NULL", label);

	const double ge = check_grads(c, label);
	printf("%-72s fwd %.2e grad %.2e\n", label, fe, ge);
	free(id);
	free(out2);
	for (int i = 0; i < 4; i++)
		free(g[i]);
	free(pc.pos);
	case_free(c);
}

/* ---- cross-entropy with uncounted targets ------------------------------------ */

/* Forward then backward through ferry_cpu_run_op on rows [r0, r0 + rows):
 * probs (then the gradient) in place over a copy of the logits. */
static void xent_rows(float *losses, float *grad, const float *logits, const int32_t *targets, int r0, int rows,
		      int V, int Vp, float dloss)
{
	struct ferry_op_call call = {.kind = FERRY_OP_SOFTMAX_XENT, .B = 1, .T = rows, .V = V, .Vp = Vp,
				     .tokens = targets + r0};
	float *g = grad + (size_t)r0 * Vp;

	memcpy(g, logits + (size_t)r0 * Vp, sizeof(float) * (size_t)rows * Vp);
	call.out[0] = losses + r0;
	call.out[1] = g;
	call.in[0] = g;
	ferry_cpu_run_op(&call);
	call.backward = true;
	call.din[0] = g;
	call.scalar[0] = dloss;
	ferry_cpu_run_op(&call);
}

static void test_xent(uint64_t seed, int N, int V, int Vp)
{
	Rng rng = rng_new(seed);
	const long n = (long)N * Vp;
	float *logits = TALLOC(float, n), *g = TALLOC(float, n), *g2 = TALLOC(float, n), *g3 = TALLOC(float, n);
	float *loss = TALLOC(float, N), *loss2 = TALLOC(float, N), *loss3 = TALLOC(float, N);
	int32_t *tg = TALLOC(int32_t, N), *tc = TALLOC(int32_t, N);
	int counted = 0;

	fill_normal(&rng, logits, n, 2.0f);
	for (int i = 0; i < N; i++)
		tg[i] = i % 3 == 1 || i == N - 1 ? -1 : rng_int(&rng, V);
	xent_rows(loss, g, logits, tg, 0, N, V, Vp, 0.25f);

	/* the counted rows alone, packed together */
	float *lc = TALLOC(float, n), *gc = TALLOC(float, n), *lossc = TALLOC(float, N);
	for (int i = 0; i < N; i++)
		if (tg[i] >= 0) {
			memcpy(lc + (size_t)counted * Vp, logits + (size_t)i * Vp, sizeof(float) * (size_t)Vp);
			tc[counted++] = tg[i];
		}
	xent_rows(lossc, gc, lc, tc, 0, counted, V, Vp, 0.25f);
	bool zero = true, same = true;
	for (int i = 0, j = 0; i < N; i++) {
		const float *gi = g + (size_t)i * Vp;
		if (tg[i] < 0) {
			zero = zero && loss[i] == 0.0f;
			for (int v = 0; v < Vp; v++)
				zero = zero && gi[v] == 0.0f;
			continue;
		}
		same = same && loss[i] == lossc[j] && !memcmp(gi, gc + (size_t)j * Vp, sizeof(float) * (size_t)Vp);
		j++;
	}
	CHECK(zero, "xent N=%d V=%d: an uncounted row's loss or gradient is not 0", N, V);
	CHECK(same, "xent N=%d V=%d: counted rows differ from the counted rows alone", N, V);

	/* over row ranges (loss tiles, tokens offset by the tile's first row) */
	for (int r0 = 0; r0 < N; r0 += 3)
		xent_rows(loss2, g2, logits, tg, r0, r0 + 3 <= N ? 3 : N - r0, V, Vp, 0.25f);
	CHECK(!memcmp(loss, loss2, sizeof(float) * (size_t)N) && !memcmp(g, g2, sizeof(float) * (size_t)n),
	      "xent N=%d V=%d: tiles of 3 rows differ from the whole", N, V);

	/* every target counted: the rows of the plain kernel */
	for (int i = 0; i < N; i++)
		tc[i] = tg[i] >= 0 ? tg[i] : rng_int(&rng, V);
	xent_rows(loss3, g3, logits, tc, 0, N, V, Vp, 0.25f);
	memcpy(g2, logits, sizeof(float) * (size_t)n);
	ferry_cpu_softmax_xent_forward(loss2, g2, g2, tc, N, V, Vp);
	ferry_cpu_softmax_xent_backward(g2, g2, tc, 0.25f, N, V, Vp);
	CHECK(!memcmp(loss3, loss2, sizeof(float) * (size_t)N) && !memcmp(g3, g2, sizeof(float) * (size_t)n),
	      "xent N=%d V=%d: the op call differs from the kernel", N, V);
	printf("xent N=%d V=%d Vp=%d: %d of %d rows counted  ok\n", N, V, Vp, counted, N);
	free(logits);
	free(g);
	free(g2);
	free(g3);
	free(loss);
	free(loss2);
	free(loss3);
	free(tg);
	free(tc);
	free(lc);
	free(gc);
	free(lossc);
}

/* ---- attention's FLOPs with documents ---------------------------------------- */

static void test_flops(int B, int T, int W, const int *lens)
{
	int32_t *pos = positions_of(lens, B, T);
	double want = 0;

	for (int b = 0; b < B; b++) /* each document alone: keys per query min(i + 1, W) */
		for (int s = 0, e; s < T; s = e) {
			e = doc_end(pos + (size_t)b * T, s, T);
			for (int i = 0; i < e - s; i++)
				want += W > 0 && W < i + 1 ? W : i + 1;
		}
	const double got = ferry_op_attention_pairs(pos, B, T, W);
	CHECK(got == want, "attention pairs B=%d T=%d W=%d: %.0f, each document alone %.0f", B, T, W, got, want);

	struct ferry_op_call c = {.kind = FERRY_OP_ATTENTION, .B = B, .T = T, .C = 64, .NH = 4};
	CHECK(ferry_op_flops_at(&c, NULL) == ferry_op_flops(&c), "flops without positions");
	c.scalar[0] = (float)W;
	const double f = ferry_op_flops_at(&c, pos), full = ferry_op_flops(&c);
	CHECK(f == 4.0 * 4 * want * 16 && (W > 0 || f < full), "attention flops with documents %.0f (causal %.0f)", f,
	      full);
	c.backward = true;
	CHECK(ferry_op_flops_at(&c, pos) == 2 * f, "backward flops with documents");
	printf("attention flops B=%d T=%d W=%d: %.0f with documents, %.0f causal\n", B, T, W, f, full);
	free(pos);
}

int main(void)
{
	/* small: finite differences too */
	test_attention(1, 2, 13, 2, 2, 4, 0, 0.0f, 0.0f, (const int[]){5, 1, 7, 13}, true);
	test_attention(2, 1, 12, 4, 2, 4, 0, 0.0f, 0.0f, (const int[]){3, 4, 5}, true);       /* GQA */
	test_attention(3, 1, 14, 2, 1, 4, 3, 0.0f, 0.0f, (const int[]){6, 2, 6}, true);       /* window */
	test_attention(4, 2, 11, 2, 2, 4, 0, 0.3f, 2.0f, (const int[]){4, 7, 2, 9}, true);    /* cap */
	test_attention(5, 1, 10, 2, 1, 4, 4, 0.4f, 1.5f, (const int[]){1, 9}, true);          /* all */
	/* documents across key tiles (64) and query blocks (16) */
	test_attention(6, 2, 150, 4, 2, 16, 0, 0.0f, 0.0f, (const int[]){70, 3, 77, 64, 1, 1, 84}, false);
	test_attention(7, 1, 200, 2, 2, 32, 40, 0.0f, 3.0f, (const int[]){130, 17, 53}, false);
	/* head size over 256: the row-by-row path */
	test_attention(8, 1, 20, 1, 1, 260, 0, 0.0f, 0.0f, (const int[]){7, 13}, false);
	test_attention(9, 1, 20, 2, 1, 258, 5, 0.0f, 2.0f, (const int[]){12, 8}, false);

	test_rope(20, 2, 9, 2, 8, 10000.0f, (const int[]){4, 5, 1, 3, 5});
	test_rope(21, 1, 6, 1, 260, 500000.0f, (const int[]){2, 4}); /* two chunks of pairs */

	test_encoder(30, 2, 7, 5, 6, (const int[]){3, 4, 7});
	test_encoder(31, 3, 5, 17, 3, (const int[]){1, 1, 1, 1, 1, 2, 3, 5});

	test_xent(40, 10, 7, 8);
	test_xent(41, 17, 50, 64);

	test_flops(2, 13, 0, (const int[]){5, 1, 7, 13});
	test_flops(1, 300, 0, (const int[]){100, 100, 100});
	test_flops(1, 30, 4, (const int[]){2, 10, 18});
	return test_exit_code();
}
