/*
 * Policies on the GPU against the CPU backend at real sizes: GPT-2 124M at
 * 4 x 1024 tokens, a grouped-query Llama at 2 x 1024, and at 2 x 1024 a
 * Mistral with a window of 256 and a Gemma 2 (window 256 on its even
 * layers, head size 256 != C / NH, its default caps), a Qwen 3 and a
 * Gemma 3 (per-head q/k norms; six layers, the last full), each trained two
 * steps on the CPU (fp32, everything kept: the reference) and on the GPU
 * (bf16) under full recomputation and the offloading presets.  Per
 * parameter tensor, the first step's GPU gradients are within a few bf16
 * roundings of the CPU's (max error over the tensor's max magnitude), and
 * both steps' losses agree; every GPU policy trains the same bits.
 * Exits 77 (skipped) without a GPU.
 */
#include "ferry/model.h"
#include "gpu_util.h"

#define STEPS 2

struct shape {
	const char *what;
	struct ferry_model_config cfg;
	int B, T;
};

struct run {
	float loss[STEPS];
	float *g0; /* the first step's gradients */
};

static void batch(const struct shape *sh, int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < sh->B * sh->T; i++) {
		in[i] = (int32_t)(((unsigned)i * 2654435761u + (unsigned)s * 40503u) % (unsigned)sh->cfg.vocab);
		tg[i] = (int32_t)(((unsigned)in[i] * 7u + 11u + (unsigned)i % 5u) % (unsigned)sh->cfg.vocab);
	}
}

/* Trains STEPS steps of sh on backend under policy into r (g0 allocated
 * by the caller, or NULL). */
static void train(const struct shape *sh, const char *backend, const char *policy, struct run *r)
{
	struct ferry_exec_opts o = { .policy = policy, .act_dtype = ferry_backend_act_dtype(backend),
				     .backend = backend };
	struct ferry_adamw opt = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	size_t N = (size_t)sh->B * sh->T;
	int32_t *in = TALLOC(int32_t, N), *tg = TALLOC(int32_t, N);
	ferry_backend_t be;
	ferry_model_t m;
	float norm;

	if (ferry_backend_open(backend, &(struct ferry_backend_opts){ 0 }, &be) != FERRY_OK) {
		CHECK(0, "open %s: %s", backend, ferry_last_error());
		exit(test_exit_code());
	}
	if (ferry_model_create(be, &sh->cfg, sh->B, sh->T, &o, &m) != FERRY_OK) {
		CHECK(0, "%s: create %s %s: %s", sh->what, backend, policy, ferry_last_error());
		exit(test_exit_code());
	}
	CHECK(ferry_model_init_random(m, 11) == FERRY_OK, "init");
	for (int s = 0; s < STEPS; s++) {
		batch(sh, in, tg, s);
		CHECK(ferry_model_forward(m, in, tg, sh->B, sh->T, &r->loss[s]) == FERRY_OK, "forward %s",
		      ferry_last_error());
		CHECK(ferry_model_zero_grad(m) == FERRY_OK, "zero");
		CHECK(ferry_model_backward(m) == FERRY_OK, "backward %s", ferry_last_error());
		if (s == 0 && r->g0)
			CHECK(ferry_model_get_grads(m, r->g0) == FERRY_OK, "grads");
		CHECK(ferry_model_update(m, &opt, s + 1, &norm) == FERRY_OK, "update %s", ferry_last_error());
	}
	ferry_model_free(m);
	ferry_backend_close(be);
	free(in);
	free(tg);
}

/* Per parameter tensor: max |gpu - cpu| over max |cpu| under bound. */
static void compare_grads(const struct shape *sh, const char *policy, const float *gc, const float *gg)
{
	double worst = 0;

	for (int p = 0; p < ferry_model_param_tensors(&sh->cfg); p++) {
		struct ferry_param_info pi;
		double num = 0, den = 1e-12;

		if (ferry_model_param_info(&sh->cfg, p, &pi) != FERRY_OK)
			return;
		for (size_t i = 0, off = pi.offset; i < pi.numel; i++) {
			double d = fabs((double)gg[off + i] - gc[off + i]);

			num = d > num || isnan(d) ? d : num;
			den = fabs(gc[off + i]) > den ? fabs(gc[off + i]) : den;
		}
		/* bf16 activations and weights through a dozen layers: a few
		 * bf16 roundings (2^-8 each) of the tensor's largest value */
		CHECK(num / den < 8e-2, "%s %s: %s gradient, normalised error %.3e", sh->what, policy, pi.name,
		      num / den);
		worst = num / den > worst ? num / den : worst;
	}
	printf("  %s %-22s worst gradient tensor nerr %.2e\n", sh->what, policy, worst);
}

static void check_shape(struct shape *sh)
{
	static const char *const policies[] = { "everything_saveable", "nothing_saveable", "qkv_proj_offloaded",
						"minimal_offloaded" };
	struct run cpu, gpu, first = { { 0 }, NULL };
	size_t n;

	if (ferry_model_config_complete(&sh->cfg) != FERRY_OK) {
		CHECK(0, "config %s: %s", sh->what, ferry_last_error());
		return;
	}
	n = ferry_model_config_num_params(&sh->cfg);
	cpu.g0 = TALLOC(float, n);
	gpu.g0 = TALLOC(float, n);
	train(sh, "cpu", "everything_saveable", &cpu);
	for (size_t p = 0; p < sizeof(policies) / sizeof(*policies); p++) {
		train(sh, "cuda", policies[p], &gpu);
		compare_grads(sh, policies[p], cpu.g0, gpu.g0);
		for (int s = 0; s < STEPS; s++) {
			printf("  %s %-22s step %d loss cpu %.5f cuda %.5f\n", sh->what, policies[p], s + 1, cpu.loss[s],
			       gpu.loss[s]);
			CHECK(fabs(gpu.loss[s] - cpu.loss[s]) < 0.01 + 2e-3 * cpu.loss[s], "%s %s step %d: loss %f vs %f",
			      sh->what, policies[p], s + 1, gpu.loss[s], cpu.loss[s]);
		}
		if (p == 0)
			first = gpu;
		else /* recomputation reruns the same kernels, offloading copies bits */
			CHECK(!memcmp(first.loss, gpu.loss, sizeof(gpu.loss)), "%s %s: the same losses as %s", sh->what,
			      policies[p], policies[0]);
	}
	free(cpu.g0);
	free(gpu.g0);
}

int main(void)
{
	struct shape gpt2 = { "gpt2-124M", { .arch = "gpt2", .max_seq = 1024, .vocab = 50257, .layers = 12,
					     .heads = 12, .channels = 768 }, 4, 1024 };
	struct shape llama = { "llama-gqa", { .arch = "llama", .max_seq = 1024, .vocab = 32000, .layers = 4,
					      .heads = 16, .kv_heads = 4, .channels = 2048, .ffn = 5632 }, 2, 1024 };

	struct shape mistral = { "mistral-window", { .arch = "mistral", .max_seq = 1024, .vocab = 32000, .layers = 4,
						     .heads = 16, .kv_heads = 4, .channels = 2048, .ffn = 5632,
						     .sliding_window = 256 }, 2, 1024 };
	struct shape gemma2 = { "gemma2", { .arch = "gemma2", .max_seq = 1024, .vocab = 32000, .layers = 4,
					    .heads = 8, .kv_heads = 4, .channels = 1024, .head_size = 256,
					    .ffn = 4096, .sliding_window = 256 }, 2, 1024 };
	/* per-head q/k norms; Gemma 3's sixth layer full, its rope bases */
	struct shape qwen3 = { "qwen3", { .arch = "qwen3", .max_seq = 1024, .vocab = 32000, .layers = 4, .heads = 16,
					  .kv_heads = 8, .channels = 1024, .head_size = 128, .ffn = 3072 }, 2, 1024 };
	struct shape gemma3 = { "gemma3", { .arch = "gemma3", .max_seq = 1024, .vocab = 32000, .layers = 6,
					    .heads = 4, .kv_heads = 1, .channels = 1024, .head_size = 256,
					    .ffn = 4096, .sliding_window = 256 }, 2, 1024 };

	gpu_or_skip();
	check_shape(&gpt2);
	check_shape(&llama);
	check_shape(&mistral);
	check_shape(&gemma2);
	check_shape(&qwen3);
	check_shape(&gemma3);
	return test_exit_code();
}
