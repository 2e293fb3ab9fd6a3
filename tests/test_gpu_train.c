/*
 * A whole small GPT-2 on the CUDA backend against the CPU backend: the
 * first step's loss and gradients, a short loss curve, the same bits on a
 * second run, every preset policy (the same bits, measured device peak ==
 * the plan's).
 * Exits 77 (skipped) without a GPU.
 */
#include "ferry/model.h"
#include "ferry/policy.h"
#include "ferry/tutorial.h"
#include "gpu_util.h"

#define STEPS 6

static const struct ferry_model_config cfg = { .max_seq = 64, .vocab = 97, .padded_vocab = 128,
					      .layers = 2, .heads = 2, .channels = 64 };
enum { B = 4, T = 32 };

static void batch(int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 13 + s * 7 + i / 9) % cfg.vocab;
		tg[i] = (in[i] * 5 + 3) % cfg.vocab;
	}
}

/* Trains STEPS steps; losses into loss[], first-step gradients into g0
 * (if not NULL).  Returns the measured device peak. */
static size_t train(const char *backend, const char *policy, float *loss, float *g0, size_t *planned)
{
	struct ferry_exec_opts o = { .policy = policy, .act_dtype = ferry_backend_act_dtype(backend),
				     .backend = backend };
	struct ferry_adamw opt = { 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m;
	int32_t in[B * T], tg[B * T];
	size_t peak;
	float norm;

	CHECK(ferry_model_plan(&cfg, B, T, &o, &plan) == FERRY_OK, "plan %s", ferry_last_error());
	*planned = plan.mem.peak_bytes;
	/* an arena of the plan's size: the GPU may be shared */
	if (ferry_backend_open(backend, &(struct ferry_backend_opts){ .device_mem = plan.mem.peak_bytes }, &be) !=
	    FERRY_OK) {
		CHECK(0, "open %s: %s", backend, ferry_last_error());
		return 0;
	}
	if (ferry_model_create(be, &cfg, B, T, &o, &m) != FERRY_OK) {
		CHECK(0, "create %s %s: %s", backend, policy, ferry_last_error());
		ferry_backend_close(be);
		return 0;
	}
	CHECK(ferry_model_init_random(m, 5) == FERRY_OK, "init");
	for (int s = 0; s < STEPS; s++) {
		batch(in, tg, s);
		CHECK(ferry_model_forward(m, in, tg, B, T, &loss[s]) == FERRY_OK, "forward %s", ferry_last_error());
		CHECK(ferry_model_zero_grad(m) == FERRY_OK, "zero");
		CHECK(ferry_model_backward(m) == FERRY_OK, "backward %s", ferry_last_error());
		if (s == 0 && g0)
			CHECK(ferry_model_get_grads(m, g0) == FERRY_OK, "grads");
		CHECK(ferry_model_update(m, &opt, s + 1, &norm) == FERRY_OK, "update %s", ferry_last_error());
	}
	peak = ferry_backend_mem_peak(be);
	ferry_model_free(m);
	ferry_backend_close(be);
	return peak;
}

/* The JAX tutorial's network: loss and gradients against the CPU, and the
 * measured peak against the plan for its policies. */
static void test_tutorial(void)
{
	static const char *const pols[] = { "everything_saveable", "nothing_saveable",
					    "save_and_offload_only_these_names([], [x])" };
	struct ferry_tutorial_config tc = { .layers = 3, .rows = 64, .channels = 32 };
	size_t nw = ferry_tutorial_weight_floats(&tc);
	float *w1 = TALLOC(float, nw), *w2 = TALLOC(float, nw), *x = TALLOC(float, 64 * 32);
	float *g[2][2] = { { TALLOC(float, nw), TALLOC(float, nw) }, { TALLOC(float, nw), TALLOC(float, nw) } };
	double loss[2];
	Rng rng = rng_new(9);

	fill_normal(&rng, w1, (long)nw, 0.2f);
	fill_normal(&rng, w2, (long)nw, 0.2f);
	fill_normal(&rng, x, 64 * 32, 1.0f);
	for (size_t pi = 0; pi < sizeof(pols) / sizeof(pols[0]); pi++) {
		for (int side = 0; side < 2; side++) {
			const char *name = side ? "cuda" : "cpu";
			struct ferry_exec_opts o = { .policy = pols[pi], .act_dtype = ferry_backend_act_dtype(name) };
			struct ferry_plan plan;
			ferry_backend_t be;
			ferry_tutorial_t t;

			CHECK(ferry_tutorial_plan(&tc, &o, &plan) == FERRY_OK, "plan");
			CHECK(ferry_backend_open(name, &(struct ferry_backend_opts){ .device_mem = plan.mem.peak_bytes },
						 &be) == FERRY_OK, "open %s", ferry_last_error());
			CHECK(ferry_tutorial_create(be, &tc, &o, &t) == FERRY_OK, "create %s", ferry_last_error());
			CHECK(ferry_tutorial_set(t, w1, w2, x) == FERRY_OK, "set");
			CHECK(ferry_tutorial_grad(t, &loss[side]) == FERRY_OK, "grad %s", ferry_last_error());
			CHECK(ferry_tutorial_get_grads(t, g[side][0], g[side][1]) == FERRY_OK, "grads");
			CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "tutorial %s %s: peak == plan", name,
			      pols[pi]);
			ferry_tutorial_free(t);
			ferry_backend_close(be);
		}
		printf("  tutorial %s: loss cpu %.5f cuda %.5f, dw1 nerr %.2e, dw2 nerr %.2e\n", pols[pi], loss[0],
		       loss[1], nerr_ff(g[1][0], g[0][0], (long)nw), nerr_ff(g[1][1], g[0][1], (long)nw));
		CHECK(fabs(loss[1] - loss[0]) <= 3e-2 * (1 + fabs(loss[0])), "tutorial loss %f vs %f", loss[1], loss[0]);
		CHECK(nerr_ff(g[1][0], g[0][0], (long)nw) < 5e-2 && nerr_ff(g[1][1], g[0][1], (long)nw) < 5e-2,
		      "tutorial gradients");
	}
	free(w1);
	free(w2);
	free(x);
	for (int i = 0; i < 4; i++)
		free(g[i / 2][i % 2]);
}

/* One tutorial Adam run on `name`: first step's loss and norm, weights and
 * moments after two steps. */
static void adam_run(const char *name, enum ferry_optim_place where, const float *w0, const float *x,
		     double *loss, double *norm, float *w, float *m)
{
	const struct ferry_tutorial_adam_config tc = { .layers = 3, .rows = 64, .channels = 96, .l2 = 1e-3f,
						       .clip = 1.0f, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
						       .eps = 1e-8f };
	struct ferry_exec_opts o = { .policy = "nothing_saveable", .optimizer = where,
				     .act_dtype = ferry_backend_act_dtype(name) };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_tutorial_adam_t t;

	CHECK(ferry_tutorial_adam_plan(&tc, &o, &plan) == FERRY_OK, "adam plan %s", ferry_last_error());
	CHECK(ferry_backend_open(name, &(struct ferry_backend_opts){ .device_mem = plan.mem.peak_bytes }, &be) ==
		      FERRY_OK, "open %s", ferry_last_error());
	CHECK(ferry_tutorial_adam_create(be, &tc, &o, &t) == FERRY_OK, "adam create %s", ferry_last_error());
	CHECK(ferry_tutorial_adam_set(t, w0, x) == FERRY_OK, "adam set");
	CHECK(ferry_tutorial_adam_step(t, loss, norm) == FERRY_OK, "adam step %s", ferry_last_error());
	CHECK(ferry_tutorial_adam_step(t, NULL, NULL) == FERRY_OK, "adam step 2 %s", ferry_last_error());
	CHECK(ferry_tutorial_adam_get(t, w, m, NULL, NULL) == FERRY_OK, "adam get");
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "tutorial adam %s: peak == plan", name);
	ferry_tutorial_adam_free(t);
	ferry_backend_close(be);
}

/* The tutorial's third network: the CUDA loss and norm against the CPU's,
 * and its streamed optimizer state bit for bit its device-resident one. */
static void test_tutorial_adam(void)
{
	const long nw = 3 * 96 * 96, nx = 64 * 96;
	float *w0 = TALLOC(float, nw), *x = TALLOC(float, nx), *w[3], *m[3];
	double loss[3], norm[3];
	Rng rng = rng_new(4);

	fill_normal(&rng, w0, nw, 0.1f);
	fill_normal(&rng, x, nx, 1.0f);
	for (int i = 0; i < 3; i++) {
		w[i] = TALLOC(float, nw);
		m[i] = TALLOC(float, nw);
		adam_run(i ? "cuda" : "cpu", i == 2 ? FERRY_OPTIM_STREAM : FERRY_OPTIM_DEVICE, w0, x, &loss[i],
			 &norm[i], w[i], m[i]);
	}
	printf("  tutorial adam: loss cpu %.6f cuda %.6f, norm cpu %.6f cuda %.6f\n", loss[0], loss[1], norm[0],
	       norm[1]);
	CHECK(fabs(loss[1] - loss[0]) <= 2e-2 * fabs(loss[0]), "tutorial adam loss %f vs %f", loss[1], loss[0]);
	CHECK(fabs(norm[1] - norm[0]) <= 3e-2 * fabs(norm[0]), "tutorial adam norm %f vs %f", norm[1], norm[0]);
	CHECK(!memcmp(w[1], w[2], nw * sizeof(float)) && !memcmp(m[1], m[2], nw * sizeof(float)),
	      "tutorial adam on the GPU: streamed state differs from the device's");
	free(w0);
	free(x);
	for (int i = 0; i < 3; i++)
		free(w[i]), free(m[i]);
}

int main(void)
{
	struct ferry_model_config full = cfg;
	size_t n_params, planned;
	float cpu_loss[STEPS], gpu_loss[STEPS], loss[STEPS];
	float *gc, *gg;

	gpu_or_skip();
	if (ferry_model_config_complete(&full) != FERRY_OK) {
		fprintf(stderr, "config: %s\n", ferry_last_error());
		return 1;
	}
	n_params = ferry_model_config_num_params(&full);
	gc = TALLOC(float, n_params);
	gg = TALLOC(float, n_params);
	train("cpu", "everything_saveable", cpu_loss, gc, &planned);
	size_t peak = train("cuda", "everything_saveable", gpu_loss, gg, &planned);
	CHECK(peak == planned, "cuda: measured peak %zu == planned %zu", peak, planned);

	/* deterministic kernels: a second run gives the same bits */
	float *g2 = TALLOC(float, n_params);
	train("cuda", "everything_saveable", loss, g2, &planned);
	CHECK(!memcmp(loss, gpu_loss, sizeof(loss)), "cuda: a second run's losses are the same bits");
	CHECK(!memcmp(g2, gg, sizeof(float) * n_params), "cuda: a second run's gradients are the same bits");
	free(g2);

	/* the first step's gradients, tensor by tensor */
	for (int p = 0; p < ferry_model_param_tensors(&full); p++) {
		struct ferry_param_info pi;
		double num = 0, den = 1e-8;

		if (ferry_model_param_info(&full, p, &pi) != FERRY_OK)
			return 1;
		for (size_t i = 0, off = pi.offset; i < pi.numel; i++) {
			double d = fabs((double)gg[off + i] - gc[off + i]);

			num = d > num || isnan(d) ? d : num;
			den = fabs(gc[off + i]) > den ? fabs(gc[off + i]) : den;
		}
		printf("  grad %-9s nerr %.2e\n", pi.name, num / den);
		CHECK(num / den < 8e-2, "%s gradient: normalised error %.3e", pi.name, num / den);
	}
	for (int s = 0; s < STEPS; s++) {
		printf("  step %d loss cpu %.5f cuda %.5f\n", s + 1, cpu_loss[s], gpu_loss[s]);
		CHECK(fabs(gpu_loss[s] - cpu_loss[s]) < 0.02 + 0.01 * cpu_loss[s], "step %d loss %f vs %f", s + 1,
		      gpu_loss[s], cpu_loss[s]);
	}
	CHECK(gpu_loss[STEPS - 1] < gpu_loss[0], "the loss falls on the GPU");

	for (int i = 0; i < ferry_policy_preset_count(); i++) {
		const char *p = ferry_policy_preset_name(i);

		peak = train("cuda", p, loss, NULL, &planned);
		CHECK(peak == planned, "%s: measured peak %zu == planned %zu", p, peak, planned);
		/* recomputation reruns the same kernels on the same inputs and
		 * offloading copies bits: every policy trains the same bits */
		for (int s = 0; s < STEPS; s++)
			CHECK(loss[s] == gpu_loss[s], "%s step %d: loss %.9g vs everything_saveable %.9g", p, s + 1,
			      loss[s], gpu_loss[s]);
		printf("  %-34s final loss %.5f, device peak %zu\n", p, loss[STEPS - 1], peak);
	}
	test_tutorial();
	test_tutorial_adam();
	free(gc);
	free(gg);
	return test_exit_code();
}
