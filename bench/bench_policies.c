/*
 * Compares activation policies side by side: for each preset (or the
 * policies given on the command line), the planned device and host memory
 * and the measured time of a training step of GPT-2 on the CPU backend.
 *
 *   bench_policies [--backend cpu|cuda --layers 6 --channels 384 --heads 6
 *                   --batch 4 --seq 256 --steps 3 --depth 2] [policy ...]
 *
 * On the CPU backend "device" and "host" are the same RAM and copies are
 * memcpy on other threads, so the times show the cost of recomputation and
 * of the copies' CPU work, not PCIe; the GPU benchmark is the one that says
 * whether offloading beats recomputation there.
 */
#include "ferry/model.h"
#include "ferry/platform.h"
#include "bench_util.h"
#include "ferry/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Median step time in ms, or a negative number on failure. */
static const char *backend = "cpu";

static double time_policy(const struct ferry_model_config *cfg, int B, int T, int steps,
			  const struct ferry_exec_opts *o, size_t *measured_peak)
{
	struct ferry_adamw opt = { 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
	double times[64], ms = -1;
	float loss, norm;

	if (!in || !tg || ferry_backend_open(backend, NULL, &be) || ferry_model_create(be, cfg, B, T, o, &m) ||
	    ferry_model_init_random(m, 1))
		goto out;
	for (int i = 0; i < B * T; i++) {
		in[i] = (int32_t)(((long)i * 7919 + 13) % cfg->vocab);
		tg[i] = (int32_t)(((long)i * 104729 + 7) % cfg->vocab);
	}
	for (int s = -1; s < steps; s++) {
		double t = now_s();

		if (ferry_model_forward(m, in, tg, B, T, &loss) || ferry_model_zero_grad(m) ||
		    ferry_model_backward(m) || ferry_model_update(m, &opt, s + 2, &norm))
			goto out;
		if (s >= 0)
			times[s] = (now_s() - t) * 1e3;
	}
	ms = median(times, steps);
	*measured_peak = ferry_backend_mem_peak(be);
out:
	if (ms < 0)
		fprintf(stderr, "bench: %s: %s\n", o->policy, ferry_last_error());
	ferry_model_free(m);
	ferry_backend_close(be);
	free(in);
	free(tg);
	return ms;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_policies [--backend cpu|cuda] [--layers N] [--channels N] [--heads N]\n"
		   "                      [--model gpt2|llama] [--kv-heads N] [--ffn N] [--vocab N]\n"
		   "                      [--batch B] [--seq T] [--steps N] [--depth D] [POLICY...]\n"
		   "\n"
		   "For each policy (default: every preset), the planned device and host memory,\n"
		   "the measured device peak and the median time of --steps training steps of\n"
		   "the model (1..64, default 3), side by side.  Defaults: 6 layers, 384 channels,\n"
		   "6 heads, batch 4 x 256, prefetch depth 2, cpu.\n");
}

/* What is compared: the model, the batch, the backend (from ferry's model
 * flags), the timed steps, the prefetch depth and the policies. */
struct policy_args {
	struct ferry_train_opts o;
	int steps, depth, n_pol;
	const char *policies[64];
};

/* A policy named on the command line. */
static int policy_arg(const char *cmd, const char *arg, void *ctx)
{
	struct policy_args *a = ctx;

	if (a->n_pol == 64) {
		fprintf(stderr, "%s: more than 64 policies\n", cmd);
		return 2;
	}
	a->policies[a->n_pol++] = arg;
	return 0;
}

/* argv into *a over the defaults (6 layers, 384 channels, 6 heads, batch 4
 * x 256, 3 steps, prefetch depth 2, cpu): -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct policy_args *a)
{
	static const char *const model[] = { "--backend", "--model", "--layers", "--channels", "--heads", "--kv-heads",
					     "--ffn", "--vocab", "--batch", "--seq", NULL };
	static const struct cli_flag own[] = {
		{ .name = "--steps", .value = "N", .type = CLI_INT, .at = offsetof(struct policy_args, steps), .min = 1,
		  .max = 64, .range = "--steps must be 1..64, not %d" },
		{ .name = "--depth", .value = "D", .type = CLI_INT, .at = offsetof(struct policy_args, depth), .min = 1,
		  .max = 64, .range = "--depth must be 1..64, not %d" },
		{ NULL },
	};
	int rc;

	ferry_cli_model_flags_default(&a->o);
	a->o.model = (struct ferry_model_config){ .vocab = 257, .layers = 6, .heads = 6, .channels = 384 };
	a->o.backend = "cpu";
	a->o.B = 4;
	a->o.T = 256;
	a->steps = 3;
	a->depth = 2;
	rc = bench_parse("bench_policies", argc, argv, &a->o, model, own, a, policy_arg, a);
	if (rc == CLI_HELP)
		usage(stdout);
	a->o.model.max_seq = a->o.T; /* --seq is the longest sequence too */
	return rc == CLI_HELP ? 0 : rc ? rc : -1;
}

int main(int argc, char **argv)
{
	static struct policy_args a;
	struct ferry_model_config cfg;
	const char **policies = a.policies;
	int n_pol, B, T, steps, depth;
	double base = 0;
	int rc = parse_args(argc, argv, &a);

	if (rc >= 0)
		return rc;
	ferry_blas_relaunch_if_slow(argv);
	backend = a.o.backend;
	cfg = a.o.model, B = a.o.B, T = a.o.T, steps = a.steps, depth = a.depth, n_pol = a.n_pol;
	if (!n_pol) {
		policies[n_pol++] = "everything_saveable";
		for (int i = 0; i < ferry_policy_preset_count() && n_pol < 64; i++)
			if (strcmp(ferry_policy_preset_name(i), "everything_saveable"))
				policies[n_pol++] = ferry_policy_preset_name(i);
	}
	if (ferry_model_config_complete(&cfg) != FERRY_OK) {
		fprintf(stderr, "bench: %s\n", ferry_last_error());
		return 2;
	}
	ferry_set_threads(0);
	printf("%s %d layers, %d channels, %d heads (%d kv), ffn %d, vocab %d, batch %d x %d, prefetch depth %d, "
	       "%s backend (%d CPU threads)\n", cfg.arch, cfg.layers, cfg.channels, cfg.heads, cfg.kv_heads, cfg.ffn,
	       cfg.vocab, B, T, depth, backend, ferry_get_threads());
	printf("%-34s %10s %10s %10s %6s %9s %7s\n", "policy", "device MiB", "measured", "host MiB",
	       "remat", "ms/step", "vs 1st");
	for (int i = 0; i < n_pol; i++) {
		struct ferry_exec_opts o = { .policy = policies[i], .prefetch_depth = depth,
					     .act_dtype = ferry_backend_act_dtype(backend), .backend = backend };
		struct ferry_plan plan;
		size_t measured = 0;
		double ms;

		if (ferry_model_plan(&cfg, B, T, &o, &plan)) {
			fprintf(stderr, "bench: %s: %s\n", policies[i], ferry_last_error());
			continue;
		}
		ms = time_policy(&cfg, B, T, steps, &o, &measured);
		if (ms < 0)
			continue;
		if (base == 0) /* the first policy that ran (the first one did not fit, say) */
			base = ms;
		printf("%-34.34s %10.1f %10.1f %10.1f %3d/%-2d %9.1f %6.2fx\n", policies[i],
		       plan.mem.peak_bytes / 1048576.0, measured / 1048576.0,
		       plan.mem.host_total_bytes / 1048576.0, plan.n_recompute_ops, plan.n_ops, ms,
		       base > 0 ? ms / base : 0.0);
		fflush(stdout);
	}
	return 0;
}
