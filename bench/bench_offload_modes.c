/*
 * Step time per offloading mode, and how much of the optimizer stays
 * exposed: for each mode (AdamW on the device, streamed, on host threads in
 * the exact and the speculative clipping order, each with and without the
 * parameters offloaded), the median over the steps of: the whole step; the
 * compute alone (the same step submitted again with no update: zeroing,
 * forward, backward, the norm); their difference, the optimizer's exposed
 * time; and the time from the norm reaching the host to the end of the
 * update (in the speculative order the early updates are before that
 * point: the step's synchronisation waits for them).  Each step is
 * followed by its compute-only twin, so a burst of other work on the
 * machine tends to hit both.  Also the measured device peak and the host
 * bytes.
 *
 *   bench_offload_modes [--backend cpu|cuda] [--layers 12] [--channels 256]
 *                       [--heads 4] [--batch 4] [--seq 128] [--steps 5]
 *                       [--policy P] [--clip 0] [--threads 0]
 *
 * --clip 0 (the default) clips no step, so the speculative order keeps
 * every early update; a small --clip (0.01) redoes every step, the worst
 * case.  On the CPU backend "device" and "host" are the same
 * cores and memory: the host AdamW competes with the backward for them.
 * --threads N gives every stream of the CPU backend N threads (0: all
 * cores each): with N = 1 on two cores, the compute stream and the host
 * AdamW's stream each have a core, as a GPU and its host would.
 */
#include "ferry/model.h"
#include "ferry/platform.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mode {
	const char *name;
	enum ferry_optim_place optimizer;
	bool params, speculative;
};

struct row {
	double step_ms, compute_ms, tail_ms;
	size_t peak, host;
	int undone;
	bool ok;
};

static const char *backend = "cpu";
static float clip = 0.0f; /* off */

static void tokens(const struct ferry_model_config *cfg, int32_t *in, int32_t *tg, int n, int s)
{
	for (int i = 0; i < n; i++) {
		in[i] = (int32_t)(((long)i * 7919 + 13 + s) % cfg->vocab);
		tg[i] = (int32_t)(((long)i * 104729 + 7 + s) % cfg->vocab);
	}
}

/* One whole step (the speculative order armed where the mode says):
 * t[0] until the norm is on the host (forward, backward, the norm, and in
 * the speculative order the early updates), t[1] from then until the
 * update has run: the optimizer's exposed time. */
static int step(ferry_model_t m, const struct mode *md, const int32_t *in, const int32_t *tg, int B, int T, int t,
		double *times)
{
	struct ferry_adamw opt = { 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, clip };
	double t0 = now_s(), t1;
	float loss, norm;

	if (md->speculative && ferry_model_step_speculate(m, &opt, t))
		return -1;
	if (ferry_model_step_submit(m, in, tg, B, T) || ferry_model_step_finish(m, &opt, t, &loss, &norm))
		return -1;
	t1 = now_s();
	if (ferry_model_sync(m))
		return -1;
	times[0] = (t1 - t0) * 1e3;
	times[1] = (now_s() - t1) * 1e3;
	return 0;
}

static void run_mode(const struct ferry_model_config *cfg, int B, int T, int steps, const char *policy,
		     const struct mode *md, struct row *r)
{
	struct ferry_exec_opts o = { .policy = policy, .optimizer = md->optimizer, .offload_params = md->params,
				     .clip_order = md->speculative ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT };
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	struct ferry_plan plan;
	int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
	double ts[64], tc[64], te[64];
	int t = 1;

	memset(r, 0, sizeof(*r));
	if (!in || !tg || ferry_model_plan(cfg, B, T, &o, &plan) || ferry_backend_open(backend, NULL, &be) ||
	    ferry_model_create(be, cfg, B, T, &o, &m) || ferry_model_init_random(m, 1))
		goto out;
	for (int s = -1; s < steps; s++) { /* step -1 warms up */
		double x[2];

		tokens(cfg, in, tg, B * T, s);
		if (step(m, md, in, tg, B, T, t++, x))
			goto out;
		if (s >= 0) {
			ts[s] = x[0] + x[1];
			te[s] = x[1];
		}
		x[0] = now_s(); /* the compute alone: the same step with no update */
		if (ferry_model_step_submit(m, in, tg, B, T) || ferry_model_sync(m))
			goto out;
		if (s >= 0)
			tc[s] = (now_s() - x[0]) * 1e3;
	}
	r->step_ms = median(ts, steps);
	r->compute_ms = median(tc, steps);
	r->tail_ms = median(te, steps);
	r->peak = ferry_backend_mem_peak(be);
	r->host = plan.mem.host_total_bytes;
	r->undone = md->speculative ? ferry_model_speculation_undone(m) : 0;
	r->ok = true;
out:
	if (!r->ok)
		fprintf(stderr, "bench_offload_modes: %s: %s\n", md->name, ferry_last_error());
	ferry_model_free(m);
	ferry_backend_close(be);
	free(in);
	free(tg);
}

static void usage(const char *argv0)
{
	printf("usage: %s [--backend cpu|cuda] [--layers 12] [--channels 256] [--heads 4] [--batch 4]\n"
	       "       [--seq 128] [--steps 5] [--policy P] [--clip 0] [--threads 0]\n"
	       "Step time per offloading mode: until the gradient norm is on the host, and from\n"
	       "then until the update has run (the optimizer's exposed time).\n", argv0);
}

/* What each mode runs: the model, the batch, the backend, the policy and
 * the threads (from ferry's model flags), the timed steps and the clip. */
struct mode_args {
	struct ferry_train_opts o;
	int steps;
	float clip;
};

/* argv into *a over the defaults (12 layers, 256 channels, 4 heads, batch
 * 4 x 128, 5 steps, no clipping, all cores, cpu): -1 to go on, else the
 * exit code. */
static int parse_args(int argc, char **argv, struct mode_args *a)
{
	static const char *const model[] = { "--backend", "--layers", "--channels", "--heads", "--batch", "--seq",
					     "--policy", "--threads", NULL };
	static const struct cli_flag own[] = {
		{ .name = "--steps", .value = "N", .type = CLI_INT, .at = offsetof(struct mode_args, steps), .min = 1,
		  .max = 64, .range = "--steps from 1 to 64, not %d" },
		{ .name = "--clip", .value = "X", .type = CLI_FLOAT, .at = offsetof(struct mode_args, clip) },
		{ NULL },
	};
	int rc;

	ferry_cli_model_flags_default(&a->o);
	a->o.model = (struct ferry_model_config){ .arch = "gpt2", .vocab = 257, .layers = 12, .heads = 4,
						  .channels = 256 };
	a->o.backend = "cpu";
	a->o.B = 4;
	a->o.T = 128;
	a->o.threads = 0;
	a->o.exec.policy = "everything_saveable";
	a->steps = 5;
	rc = bench_parse("bench_offload_modes", argc, argv, &a->o, model, own, a, NULL, NULL);
	if (rc == CLI_HELP)
		usage(argv[0]);
	a->o.model.max_seq = a->o.T; /* --seq is the longest sequence too */
	return rc == CLI_HELP ? 0 : rc ? rc : -1;
}

int main(int argc, char **argv)
{
	static const struct mode modes[] = {
		{ "optimizer device", FERRY_OPTIM_DEVICE, false, false },
		{ "optimizer stream", FERRY_OPTIM_STREAM, false, false },
		{ "optimizer cpu, exact", FERRY_OPTIM_CPU, false, false },
		{ "optimizer cpu, speculative", FERRY_OPTIM_CPU, false, true },
		{ "params + optimizer stream", FERRY_OPTIM_STREAM, true, false },
		{ "params + cpu, exact", FERRY_OPTIM_CPU, true, false },
		{ "params + cpu, speculative", FERRY_OPTIM_CPU, true, true },
	};
	static struct mode_args a;
	struct ferry_model_config cfg;
	int B, T, steps, rc = parse_args(argc, argv, &a);
	const char *policy;

	if (rc >= 0)
		return rc;
	ferry_blas_relaunch_if_slow(argv);
	/* OpenMP and OpenBLAS on the same threads, as ferry train runs them */
	ferry_set_threads(a.o.threads);
	cfg = a.o.model, B = a.o.B, T = a.o.T, steps = a.steps, policy = a.o.exec.policy;
	backend = a.o.backend;
	clip = a.clip;
	printf("gpt2 %d layers, %d channels, batch %d x %d, %s, clip %g, %s backend (%d CPU threads), median of "
	       "%d steps\n", cfg.layers, cfg.channels, B, T, policy, clip, backend, ferry_get_threads(), steps);
	printf("%-28s %9s %11s %11s %11s %7s %12s %12s\n", "mode", "step ms", "compute ms", "exposed ms",
	       "after norm", "redone", "device peak", "host bytes");
	for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
		struct row r;

		run_mode(&cfg, B, T, steps, policy, &modes[k], &r);
		if (!r.ok)
			continue;
		printf("%-28s %9.1f %11.1f %11.1f %11.1f %7d %12zu %12zu\n", modes[k].name, r.step_ms, r.compute_ms,
		       r.step_ms - r.compute_ms, r.tail_ms, r.undone, r.peak, r.host);
		fflush(stdout);
	}
	return 0;
}
