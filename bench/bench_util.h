/* Small helpers shared by the benchmarks. */
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Flag f with value v (NULL: none) when it is one of the run's: 1 (both
 * consumed), else 0. */
static inline int bench_run_flag(struct bench_run *r, const char *f, const char *v)
{
	int *ip = !strcmp(f, "--layers") ? &r->cfg.layers : !strcmp(f, "--channels") ? &r->cfg.channels :
		  !strcmp(f, "--heads") ? &r->cfg.heads : !strcmp(f, "--batch") ? &r->B :
		  !strcmp(f, "--seq") ? &r->T : !strcmp(f, "--threads") ? &r->threads :
		  !strcmp(f, "--rounds") ? &r->rounds : !strcmp(f, "--repeats") ? &r->repeats : NULL;

	if (!v)
		return 0;
	if (ip)
		*ip = atoi(v);
	else if (!strcmp(f, "--backend"))
		r->backend = v;
	else if (!strcmp(f, "--model"))
		snprintf(r->cfg.arch, sizeof(r->cfg.arch), "%s", v);
	else
		return 0;
	return 1;
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
