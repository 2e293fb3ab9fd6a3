/*
 * Times one training step (forward, backward, AdamW) of GPT-2 on the CPU
 * backend and sets it against the sgemm rate measured in the same run.
 *
 *   bench_gpt2_step [--model gpt2|llama --layers 12 --channels 768 --heads 12 --vocab 50257
 *                    --max-seq 1024 --batch 4 --seq 64 --steps 5 --threads 0
 *                    --backend cpu|cuda --policy P]
 *
 * Defaults are the GPT-2 124M shape at batch 4 x 64 tokens.  Prints ms/step
 * (median of the timed steps), the model's FLOP/s and, on the CPU backend,
 * that as a fraction of the sgemm rate measured in the same run.
 */
#include "ferry/model.h"
#include "ferry/platform.h"
#include "backend/run_op.h"
#include "ops/op.h"
#include "bench_util.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Best of several n x n x n sgemms, in FLOP/s. */
static double sgemm_rate(int n)
{
	float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
	      *c = malloc(sizeof(float) * n * n);
	double best = 0;

	if (!a || !b || !c) {
		fprintf(stderr, "bench: out of memory\n");
		exit(1);
	}
	for (long i = 0; i < (long)n * n; i++) {
		a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
		b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
	}
	for (int r = 0; r < 6; r++) {
		double t = now_s();

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		t = now_s() - t;
		if (r > 0 && 2.0 * n * n * n / t > best)
			best = 2.0 * n * n * n / t;
	}
	free(a);
	free(b);
	free(c);
	return best;
}

/* Where a step's time goes, per op kind and direction. */
static void print_breakdown(ferry_backend_t be, int steps, double step_ms)
{
	struct ferry_op_stats st[64];
	int n = ferry_backend_op_stats(be, st, 64);
	double total = 0;

	printf("per step, by op (%d steps):\n", steps);
	printf("  %-14s %-8s %6s %10s %6s %10s\n", "op", "pass", "calls", "ms", "share", "GFLOP/s");
	for (int i = 0; i < n; i++) {
		double ms = st[i].seconds * 1e3 / steps;

		total += ms;
		printf("  %-14s %-8s %6ld %10.1f %5.1f%% %10.1f\n", st[i].name, st[i].backward ? "backward" : "forward",
		       st[i].calls / steps, ms, 100.0 * ms / step_ms,
		       st[i].seconds > 0 ? st[i].flops / st[i].seconds / 1e9 : 0.0);
	}
	printf("  %-14s %-8s %6s %10.1f %5.1f%%  (the rest: copies, memsets, waits)\n", "all ops", "", "",
	       total, 100.0 * total / step_ms);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_gpt2_step [--model gpt2|llama] [--layers N] [--channels N] [--heads N]\n"
		   "                       [--vocab N] [--max-seq N] [--batch B] [--seq T] [--steps N]\n"
		   "                       [--threads N] [--backend cpu|cuda] [--policy P] [--trace FILE]\n"
		   "\n"
		   "Times a training step (forward, backward, AdamW) of a model: the median of\n"
		   "--steps timed steps after a warm-up one, the model's FLOP/s and, on the CPU\n"
		   "backend, that as a fraction of a 2048^3 sgemm measured in the same run, then\n"
		   "where the time goes per op.  Defaults: the GPT-2 124M shape (12 layers, 768\n"
		   "channels, 12 heads, vocabulary 50257, max sequence 1024) at batch 4 x 64,\n"
		   "5 steps, all cores, cpu, everything_saveable.  --trace writes the last step's\n"
		   "tasks as Chrome trace JSON (Perfetto opens it).\n");
}

static int check(ferry_status st, const char *what)
{
	if (st) {
		fprintf(stderr, "bench: %s: %s\n", what, ferry_last_error());
		exit(1);
	}
	return 0;
}


/* Best of several n x n x n matrix products through the backend's own
 * matmul op (bf16 on a GPU, fp32 accumulation, as the model's), in FLOP/s:
 * the rate the model's FLOP/s is set against.  Data is pseudo-random (a
 * GPU multiplies zeros faster). */
static double device_matmul_rate(ferry_backend_t be, int n)
{
	size_t bytes = (size_t)n * n * ferry_dtype_size(ferry_backend_act_dtype(ferry_backend_name(be)));
	ferry_buffer_t buf[3];
	ferry_stream_t s;
	unsigned char *host = malloc(bytes);
	double best = 0;

	if (!host)
		return 0;
	for (size_t i = 0; i < bytes; i++) /* bf16 in [-1, 1], a few bits of noise */
		host[i] = (i & 1) ? (unsigned char)(0x3c + (i * 7919 >> 3) % 3) | ((i * 104729 >> 5) & 0x80)
				  : (unsigned char)(i * 2654435761u >> 11);
	check(ferry_stream_create(be, "matmul", &s), "stream");
	for (int i = 0; i < 3; i++) {
		check(ferry_buffer_alloc(be, bytes, &buf[i]), "matmul buffer");
		check(ferry_memcpy_async(s, ferry_buffer_ptr(buf[i]), host, bytes, FERRY_COPY_H2D), "copy");
	}
	struct ferry_op_call c = { .kind = FERRY_OP_MATMUL, .B = 1, .T = n, .C = n, .OC = n };
	c.in[0] = ferry_buffer_ptr(buf[0]);
	c.w[0] = ferry_buffer_ptr(buf[1]);
	c.out[0] = ferry_buffer_ptr(buf[2]);
	check(ferry_stream_synchronize(s), "sync");
	for (int r = 0; r < 4; r++) {
		double t = now_s();

		for (int k = 0; k < 10; k++)
			check(ferry_stream_run_op(s, &c), "matmul");
		check(ferry_stream_synchronize(s), "sync");
		t = (now_s() - t) / 10;
		if (r > 0 && 2.0 * n * n * n / t > best)
			best = 2.0 * n * n * n / t;
	}
	for (int i = 0; i < 3; i++)
		ferry_buffer_free(buf[i]);
	ferry_stream_free(s);
	free(host);
	return best;
}

/* What the step runs: the model, the batch, the backend (from ferry's
 * model flags), the timed steps and the trace file. */
struct step_args {
	struct ferry_train_opts o;
	int steps;
	const char *trace;
};

/* argv into *a over the defaults (the GPT-2 124M shape at batch 4 x 64, 5
 * steps, all cores, cpu): -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct step_args *a)
{
	static const char *const model[] = { "--backend", "--model", "--layers", "--channels", "--heads", "--vocab",
					     "--max-seq", "--batch", "--seq", "--threads", "--policy", NULL };
	static const struct cli_flag own[] = {
		{ .name = "--steps", .value = "N", .type = CLI_INT, .at = offsetof(struct step_args, steps), .min = 1,
		  .max = 100000, .range = "--steps must be from 1 to 100000, not %d" },
		{ .name = "--trace", .value = "FILE", .type = CLI_STRING, .at = offsetof(struct step_args, trace) },
		{ NULL },
	};
	int rc;

	ferry_cli_model_flags_default(&a->o);
	a->o.model = (struct ferry_model_config){ .max_seq = 1024, .vocab = 50257, .layers = 12, .heads = 12,
						  .channels = 768 };
	a->o.backend = "cpu";
	a->o.B = 4;
	a->o.T = 64;
	a->o.threads = 0;
	a->steps = 5;
	rc = bench_parse("bench_gpt2_step", argc, argv, &a->o, model, own, a, NULL, NULL);
	if (rc == CLI_HELP)
		usage(stdout);
	return rc == CLI_HELP ? 0 : rc ? rc : -1;
}

int main(int argc, char **argv)
{
	static struct step_args a;
	struct ferry_model_config cfg;
	struct ferry_adamw opt = { 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	int B, T, steps, threads;
	const char *backend, *policy, *trace;
	ferry_backend_t be;
	ferry_model_t m;
	int32_t *in, *tg;
	double *times, flops, sg, ms;
	float loss, norm;
	int rc = parse_args(argc, argv, &a);

	if (rc >= 0)
		return rc;
	ferry_blas_relaunch_if_slow(argv);
	cfg = a.o.model, B = a.o.B, T = a.o.T, threads = a.o.threads, backend = a.o.backend;
	policy = a.o.exec.policy, steps = a.steps, trace = a.trace;
	if (ferry_model_config_complete(&cfg) != FERRY_OK) {
		fprintf(stderr, "bench: %s\n", ferry_last_error());
		return 2;
	}
	ferry_set_threads(threads);

	printf("cpu: %s, %d threads, BLAS core %s (%s)\n", ferry_cpu_name(), ferry_get_threads(),
	       ferry_blas_corename(), ferry_blas_core_origin());
	sg = 0;
	if (!strcmp(backend, "cpu")) {
		sg = sgemm_rate(2048);
		printf("sgemm 2048^3: %.1f GFLOP/s\n", sg / 1e9);
	}
	check(ferry_backend_open(backend, &(struct ferry_backend_opts){ .threads = threads, .profile = true }, &be),
	      "backend");
	printf("backend: %s\n", ferry_backend_description(be));
	if (strcmp(backend, "cpu")) {
		sg = device_matmul_rate(be, 8192);
		printf("matmul 8192^3 through the backend: %.1f GFLOP/s\n", sg / 1e9);
	}
	check(ferry_model_create(be, &cfg, B, T, &(struct ferry_exec_opts){ .policy = policy }, &m), "model");
	check(ferry_model_init_random(m, 42), "init");
	in = malloc(sizeof(int32_t) * B * T);
	tg = malloc(sizeof(int32_t) * B * T);
	times = malloc(sizeof(double) * steps);
	if (!in || !tg || !times)
		return 1;
	for (int i = 0; i < B * T; i++) {
		in[i] = (int32_t)(((long)i * 7919 + 13) % cfg.vocab);
		tg[i] = (int32_t)(((long)i * 104729 + 7) % cfg.vocab);
	}
	printf("model: %d layers, %d channels, %d heads, vocab %d (padded %d): %.1fM parameters; "
	       "batch %d x %d\n", cfg.layers, cfg.channels, cfg.heads, cfg.vocab, cfg.padded_vocab,
	       ferry_model_num_params(m) / 1e6, B, T);
	for (int s = -1; s < steps; s++) { /* step -1 warms up */
		double t = now_s();

		/* the trainer's step (one host synchronisation), then a wait for
		 * its queued update so that the step is timed whole; the last
		 * one traced when asked (written after it is timed) */
		if (trace && s == steps - 1)
			check(ferry_model_trace_begin(m), "trace");
		check(ferry_model_step_submit(m, in, tg, B, T), "step");
		check(ferry_model_step_finish(m, &opt, s + 2, &loss, &norm), "step");
		check(ferry_model_sync(m), "update");
		t = now_s() - t;
		if (trace && s == steps - 1)
			check(ferry_model_trace_end(m, trace), "trace");
		if (s >= 0)
			times[s] = t;
		else
			ferry_backend_op_stats_reset(be); /* time the measured steps only */
		printf("  step %d: %.1f ms, loss %.4f\n", s + 1, t * 1e3, loss);
	}
	ms = median(times, steps) * 1e3;
	flops = ferry_model_step_flops(m, B, T) / (ms / 1e3);
	printf("step: %.1f ms (median of %d), model %.1f GFLOP/step, %.1f GFLOP/s", ms, steps,
	       ferry_model_step_flops(m, B, T) / 1e9, flops / 1e9);
	if (sg > 0)
		printf(" = %.2f of %s", flops / sg, strcmp(backend, "cpu") ? "matmul" : "sgemm");
	printf(", %.0f tokens/s\n", B * T / (ms / 1e3));
	print_breakdown(be, steps, ms);
	free(in);
	free(tg);
	free(times);
	ferry_model_free(m);
	ferry_backend_close(be);
	return 0;
}
