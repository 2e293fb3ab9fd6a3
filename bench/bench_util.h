/* Small helpers shared by the benchmarks. */
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "model_flags.h"
#include "ferry/model.h"

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static inline double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	return v[n / 2];
}

/* What the calibrated benchmarks (bench_cost_model, bench_auto_state)
 * run: the model and batch, the backend, and how many rounds of how many
 * steps. */
struct bench_run {
	const char *backend;
	struct ferry_model_config cfg;
	int B, T, threads, rounds, repeats;
};

/* Their defaults: a 2-layer, 128-channel GPT-2 on batches of 16 x 64, one
 * thread, on the CPU. */
static inline struct bench_run bench_run_defaults(int rounds, int repeats)
{
	return (struct bench_run){ .backend = "cpu", .B = 16, .T = 64, .threads = 1, .rounds = rounds,
				   .repeats = repeats,
				   .cfg = { .arch = "gpt2", .max_seq = 256, .vocab = 257, .layers = 2, .heads = 4,
					    .channels = 128 } };
}

/* argv into o, the model flags named in `model` (NULL-terminated) from
 * ferry's own table (tools/ferry/model_flags.c: parsed, checked and refused
 * as ferry train does them), and into dst the benchmark's own flags (own,
 * ending with { NULL }; NULL: none).  o keeps what it held for the flags
 * not given.  Other arguments go to arg (NULL: an unknown flag).  Returns
 * 0, CLI_HELP at --help, else the exit code after a message that starts
 * with the program's name. */
static inline int bench_parse(const char *prog, int argc, char **argv, struct ferry_train_opts *o,
			      const char *const *model, const struct cli_flag *own, void *dst, cli_arg_fn arg, void *ctx)
{
	const struct cli_group groups[] = { { ferry_cli_model_flags, o, NULL, model }, { own, dst, NULL, NULL },
					    { NULL } };

	ferry_cli_program = NULL; /* "bench_x: ...", not "ferry bench_x: ..." */
	return ferry_cli_parse(&(struct cli_command){ .cmd = prog, .groups = groups, .arg = arg, .ctx = ctx }, argc,
			       argv);
}

/* argv into r and o (bench_parse): the model flags named in `model`, and
 * --rounds and --repeats; r's model, batch, backend and threads are o's
 * defaults and come back from it, and o keeps the rest (--policy,
 * --device-mem). */
static inline int bench_run_parse(const char *prog, int argc, char **argv, struct bench_run *r,
				  struct ferry_train_opts *o, const char *const *model, cli_arg_fn arg, void *ctx)
{
	static const struct cli_flag run_flags[] = {
		{ .name = "--rounds", .value = "R", .type = CLI_INT, .at = offsetof(struct bench_run, rounds) },
		{ .name = "--repeats", .value = "N", .type = CLI_INT, .at = offsetof(struct bench_run, repeats) },
		{ NULL },
	};
	int rc;

	ferry_cli_model_flags_default(o);
	o->backend = r->backend;
	o->threads = r->threads;
	o->model = r->cfg;
	o->B = r->B;
	o->T = r->T;
	rc = bench_parse(prog, argc, argv, o, model, run_flags, r, arg, ctx);
	r->backend = o->backend;
	r->threads = o->threads;
	r->cfg = o->model;
	r->B = o->B;
	r->T = o->T;
	return rc;
}

/* After the flags: a Llama gets its default MLP width and the byte
 * vocabulary; rounds out of [1, max] become fallback. */
static inline void bench_run_finish(struct bench_run *r, int max_rounds, int fallback)
{
	if (!strcmp(r->cfg.arch, "llama"))
		r->cfg.ffn = 0, r->cfg.vocab = 257;
	if (r->rounds < 1 || r->rounds > max_rounds)
		r->rounds = fallback;
}

#endif
