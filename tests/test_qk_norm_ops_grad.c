/*
 * The RMSNorm over each head of q and k (Qwen 3's q_norm and k_norm:
 * w * x / rms over head_dim; Gemma 3's with 1 + w), declared as the rmsnorm
 * op with a statistic per head ([B, T, NH]) over a [B, T, NH x HS] tensor:
 *
 *   - ferry_op_call_shape makes its call rows of HS (T x NH rows), the
 *     gain's view HS; a norm with one statistic per token is as before;
 *   - that call, run by the CPU backend, against a float64 reference
 *     written here head by head over the [B, T, NH, HS] layout (forward and
 *     the statistic), and its backward against central finite differences
 *     of sum(out * R) for every element of x and of the gain (grad_check.h,
 *     with its accumulate and NULL-gradient contract), gain offsets 0 and 1,
 *     query and key/value head counts.
 */
#include "backend/cpu/cpu_ops.h"
#include "graph/layer.h"
#include "ops/op.h"
#include "grad_check.h"
#include "test_util.h"

#define FWD_TOL 2e-6
#define GRAD_TOL 5e-6

enum { T_X, T_Y, T_RSTD, T_TOKEN_RSTD, T_N };

/* A layer of two norms over x [B, T, QD]: per head (statistic [B, T, NH])
 * and per token ([B, T]), gain offset k. */
static struct ferry_layer_decl norm_layer(float k)
{
	const struct ferry_layer_decl d = {
		.n_tensors = T_N,
		.tensors = { [T_X] = { "x", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_QD } } },
			     [T_Y] = { "y", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_QD } } },
			     [T_RSTD] = { "rstd", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NH } } },
			     [T_TOKEN_RSTD] = { "token_rstd", { .d = { FERRY_DIM_B, FERRY_DIM_T } } } },
		.n_ops = 2,
		.ops = { { FERRY_OP_RMSNORM, { T_Y, T_RSTD, -1 }, { T_X, -1, -1 }, { { 0, 0 }, { -1, 0 } },
			   FERRY_SCALAR_NORM_EPS, .k = k },
			 { FERRY_OP_RMSNORM, { T_Y, T_TOKEN_RSTD, -1 }, { T_X, -1, -1 }, { { 0, 0 }, { -1, 0 } },
			   FERRY_SCALAR_NORM_EPS, .k = k } },
	};
	return d;
}

static struct ferry_dims norm_dims(int B, int T, int NH, int HS)
{
	struct ferry_dims d = { { 0 } };

	d.v[FERRY_DIM_B] = B;
	d.v[FERRY_DIM_T] = T;
	d.v[FERRY_DIM_NH] = NH;
	d.v[FERRY_DIM_HS] = HS;
	d.v[FERRY_DIM_QD] = (int64_t)NH * HS;
	d.v[FERRY_DIM_C] = 4 * HS;
	return d;
}

/* x [B, T, NH, HS] normalised head by head, in float64. */
static void ref_head_norm(double *out, double *rstd, const double *x, const double *w, int B, int T, int NH, int HS,
			  double eps, double offset)
{
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			for (int h = 0; h < NH; h++) {
				const size_t at = (((size_t)b * T + t) * NH + h) * HS;
				double ss = 0.0;

				for (int i = 0; i < HS; i++)
					ss += x[at + i] * x[at + i];
				const double r = 1.0 / sqrt(ss / HS + eps);
				for (int i = 0; i < HS; i++)
					out[at + i] = x[at + i] * r * (w[i] + offset);
				if (rstd)
					rstd[((size_t)b * T + t) * NH + h] = r;
			}
}

/* The case's call and offset, for its loss and backward. */
static struct ferry_op_call the_call;
static double the_offset;

static double head_loss(void *p)
{
	GradCase *c = p;

	ref_head_norm(c->outd, NULL, c->xd[0], c->xd[1], c->B, c->T, c->NH, c->HS, (double)c->eps, the_offset);
	return dot_d(c->outd, c->Rd, c->nout);
}

static void head_bwd(GradCase *c, float **g)
{
	struct ferry_op_call b = the_call;

	b.backward = true;
	b.dout[0] = c->R;
	b.din[0] = g[0];
	b.dw[0] = g[1];
	ferry_cpu_run_op(&b);
}

/* The declared call's sizes: per head, and per token for comparison. */
static void test_shape(void)
{
	const struct ferry_layer_decl d = norm_layer(1.0f);
	const struct ferry_dims dims = norm_dims(2, 5, 3, 8);
	float sc[FERRY_OP_SCALAR_COUNT] = { 0 };
	struct ferry_op_call h, t;

	sc[FERRY_SCALAR_NORM_EPS] = 1e-6f;
	ferry_op_call_shape(&d, 0, &dims, sc, 0, &h);
	ferry_op_call_shape(&d, 1, &dims, sc, 0, &t);
	const int ok = h.B == 2 && h.T == 15 && h.C == 8 && h.OC == 8 && ferry_op_weight_view(&h, 0) == 8 &&
		       h.scalar[0] == 1e-6f && h.scalar[1] == 1.0f && t.B == 2 && t.T == 5 && t.C == 24 && t.OC == 24;

	CHECK(ok, "per-head call B %d T %d C %d OC %d; per-token T %d C %d", h.B, h.T, h.C, h.OC, t.T, t.C);
	printf("%-60s %s\n", "call shape: rows of HS per head, per token unchanged", ok ? "ok" : "FAIL");
}

static void test_head_norm(uint64_t seed, int B, int T, int NH, int HS, float eps, float offset)
{
	Rng rng = rng_new(seed);
	const struct ferry_layer_decl d = norm_layer(offset);
	const struct ferry_dims dims = norm_dims(B, T, NH, HS);
	GradCase c = { .B = B, .T = T, .NH = NH, .HS = HS, .eps = eps, .backward = head_bwd, .loss = head_loss,
		       .grad_tol = GRAD_TOL };
	const long n = (long)B * T * NH * HS, rows = (long)B * T * NH;
	float *x = arg_new(&c, "inp", n), *w = arg_new(&c, "weight", HS);
	float sc[FERRY_OP_SCALAR_COUNT] = { 0 };
	double *rd = TALLOC(double, rows);
	char label[96];

	fill_normal(&rng, x, n, 1.5f);
	fill_normal(&rng, w, HS, offset ? 0.3f : 1.0f);
	args_sync(&c);
	out_new(&c, &rng, n);
	c.rstd = TALLOC(float, rows);
	sc[FERRY_SCALAR_NORM_EPS] = eps;
	ferry_op_call_shape(&d, 0, &dims, sc, 0, &the_call);
	the_call.in[0] = x;
	the_call.w[0] = w;
	the_call.out[0] = c.out;
	the_call.out[1] = c.rstd;
	the_offset = offset;
	ferry_cpu_run_op(&the_call);
	ref_head_norm(c.outd, rd, c.xd[0], c.xd[1], B, T, NH, HS, (double)eps, offset);
	const double fe = fmax(nerr_fd(c.out, c.outd, n), nerr_fd(c.rstd, rd, rows));
	snprintf(label, sizeof(label), "head rmsnorm %s B=%d T=%d heads=%d HS=%d", offset ? "1 + w" : "w", B, T, NH, HS);
	CHECK(fe < FWD_TOL, "%s: forward error %.3g", label, fe);
	const double ge = check_grads(&c, label);
	printf("%-60s fwd %.2e  grad %.2e  %s\n", label, fe, ge, fe < FWD_TOL && ge < GRAD_TOL ? "ok" : "FAIL");
	free(rd);
	case_free(&c);
}

int main(void)
{
	test_shape();
	test_head_norm(1, 2, 3, 4, 8, 1e-6f, 0.0f);  /* Qwen 3's q_norm */
	test_head_norm(2, 1, 5, 2, 16, 1e-6f, 0.0f); /* its k_norm, fewer heads */
	test_head_norm(3, 2, 3, 3, 8, 1e-6f, 1.0f);  /* Gemma 3's, 1 + w */
	test_head_norm(4, 1, 2, 2, 6, 1e-3f, 1.0f);
	return test_exit_code();
}
