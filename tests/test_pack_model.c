/*
 * A packed row through the executor (ferry_exec_opts.packed): two documents
 * in one row, with their positions, give each document's loss alone (the
 * sums over counted targets), and the gradient and the FLOPs of the two
 * alone, for GPT-2 (a position table) and Llama (rotary positions); targets
 * below 0 count nothing; positions outside 0 .. t, or for a model made for
 * token streams, are refused.
 */
#include "ferry/model.h"
#include "ferry/train.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define T 12
#define A 5 /* the first document's tokens; the second has T - A */

static ferry_model_t make(ferry_backend_t be, const char *arch, bool packed, const float *params)
{
	struct ferry_model_config cfg = { .max_seq = 16, .vocab = 23, .layers = 2, .heads = 2, .channels = 16 };
	ferry_model_t m = NULL;

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	CHECK(ferry_model_create(be, &cfg, 1, T, &(struct ferry_exec_opts){ .packed = packed }, &m) == FERRY_OK,
	      "%s: create: %s", arch, ferry_last_error());
	if (m && params)
		CHECK(ferry_model_set_params(m, params) == FERRY_OK, "set params");
	return m;
}

/* Loss sum and gradient (times the rows, so of the loss sum) of a forward
 * over n tokens, positions pos (NULL: none given). */
static double loss_grad(ferry_model_t m, const int32_t *in, const int32_t *tg, const int32_t *pos, int n, float *g,
			size_t np)
{
	float l;

	CHECK(ferry_model_zero_grad(m) == FERRY_OK, "zero");
	if (pos)
		CHECK(ferry_model_set_positions(m, pos) == FERRY_OK, "positions: %s", ferry_last_error());
	CHECK(ferry_model_forward(m, in, tg, 1, n, &l) == FERRY_OK, "forward: %s", ferry_last_error());
	CHECK(ferry_model_backward(m) == FERRY_OK, "backward: %s", ferry_last_error());
	CHECK(ferry_model_get_grads(m, g) == FERRY_OK, "grads");
	for (size_t i = 0; i < np; i++)
		g[i] *= (float)n;
	return ferry_model_loss_sum(m);
}

static void check_arch(ferry_backend_t be, const char *arch)
{
	int32_t in[T], tg[T], pos[T], bad[T];
	ferry_model_t packed = make(be, arch, true, NULL), alone;
	size_t np;
	float *p, *g, *g1, *g2;
	Rng r = rng_new(7);
	double sum, s1, s2, worst = 0, scale = 0;

	if (!packed)
		return;
	np = ferry_model_num_params(packed);
	p = TALLOC(float, np);
	g = TALLOC(float, np);
	g1 = TALLOC(float, np);
	g2 = TALLOC(float, np);
	CHECK(ferry_model_init_random(packed, 3) == FERRY_OK, "init");
	CHECK(ferry_model_get_params(packed, p) == FERRY_OK, "get");
	for (size_t i = 0; i < np; i++)
		p[i] += 0.2f * rng_normal(&r);
	CHECK(ferry_model_set_params(packed, p) == FERRY_OK, "set");
	alone = make(be, arch, false, p);
	for (int t = 0; t < T; t++) {
		in[t] = rng_int(&r, 22);
		pos[t] = t < A ? t : t - A;
	}
	for (int t = 0; t < T; t++) /* each document's next token, some masked; none across */
		tg[t] = t + 1 < (t < A ? A : T) && t % 3 != 1 ? in[t + 1] : -1;
	sum = loss_grad(packed, in, tg, pos, T, g, np);
	s1 = loss_grad(alone, in, tg, NULL, A, g1, np);
	s2 = loss_grad(alone, in + A, tg + A, NULL, T - A, g2, np);
	CHECK(fabs(sum - (s1 + s2)) < 1e-5 * fabs(sum), "%s: packed loss sum %.9g, the documents alone %.9g + %.9g",
	      arch, sum, s1, s2);
	for (size_t i = 0; i < np; i++) {
		double d = fabs((double)g[i] - ((double)g1[i] + g2[i]));

		worst = d > worst ? d : worst;
		scale = fabs(g[i]) > scale ? fabs(g[i]) : scale;
	}
	CHECK(worst < 1e-5 * scale, "%s: packed gradient off by %.3g (largest %.3g)", arch, worst, scale);
	printf("%s: packed %.6f = %.6f + %.6f alone, gradient within %.2g of %.3g\n", arch, sum, s1, s2, worst, scale);

	{ /* what the step costs: attention within each document */
		double at = ferry_model_step_flops_at(packed, 1, T, pos), whole = ferry_model_step_flops(packed, 1, T),
		       docs = ferry_model_step_flops(packed, 1, A) + ferry_model_step_flops(packed, 1, T - A);

		CHECK(fabs(at - docs) < 1e-9 * docs && at < whole, "%s: FLOPs packed %.6g, the documents alone %.6g, "
		      "the row as one %.6g", arch, at, docs, whole);
		CHECK(ferry_model_step_flops_at(packed, 1, T, NULL) == whole, "%s: no positions: the row's FLOPs", arch);
	}
	memcpy(bad, pos, sizeof(bad));
	bad[3] = 4;
	CHECK(ferry_model_set_positions(packed, bad) == FERRY_OK, "positions are read at the forward");
	CHECK(ferry_model_loss(packed, in, tg, 1, T, NULL) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "position 4 of row 0, token 3"), "%s: a position past its index: %s", arch,
	      ferry_last_error());
	CHECK(ferry_model_set_positions(alone, pos) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "token streams"), "%s: positions for a stream model: %s", arch,
	      ferry_last_error());
	in[0] = -1;
	CHECK(ferry_model_loss(packed, in, tg, 1, T, NULL) == FERRY_ERR_INVALID, "an input below 0");
	free(p), free(g), free(g1), free(g2);
	ferry_model_free(packed);
	ferry_model_free(alone);
}

int main(void)
{
	ferry_backend_t be = NULL;

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)32 << 20 }, &be) != FERRY_OK) {
		fprintf(stderr, "cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	check_arch(be, "gpt2");
	check_arch(be, "llama");
	ferry_backend_close(be);
	return test_exit_code();
}
