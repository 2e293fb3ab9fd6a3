/* ferry bench: placements side by side on one model and batch, in one process. */
#include "auto_flags.h"
#include "calib_cache.h"
#include "cli_args.h"
#include "cli_clock.h"
#include "commands.h"
#include "model_flags.h"
#include "tier_flags.h"
#include "ferry/model.h"
#include "ferry/platform.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "bench";

#define MAX_PLACEMENTS 32

static void usage(void)
{
	printf("usage: ferry bench [model, batch and memory flags of ferry train] [--steps N]\n"
	       "                   [--json FILE] [POLICY ...]\n"
	       "\n"
	       "Trains the same model on the same batches under each policy (default: full\n"
	       "recomputation, everything kept, dots_saveable, qkv_proj_offloaded,\n"
	       "minimal_offloaded) in this one process and prints, side by side: the median\n"
	       "step time of --steps timed steps (default 5) after a warm-up one, the ratio to\n"
	       "full recomputation (nothing_saveable), the measured device peak, the host\n"
	       "memory the plan puts there, and how long the compute stream stood idle in a\n"
	       "traced step (waiting for copies, or for the host).  A policy that does not\n"
	       "fit --device-mem is listed with why.  --json FILE writes the rows too.\n"
	       "With a calibration of this machine (ferry calibrate, same flags), each row\n"
	       "also has the cost model's predicted step time, its error against the\n"
	       "measured one, and the transfer time it predicts the compute stream waits.\n"
	       "POLICY auto: --policy auto's choice on this machine (see ferry plan --help).\n"
	       "With --offload-optimizer stream, every row streams AdamW's state.\n"
	       "\n");
	ferry_cli_model_flags_help(stdout);
}

struct row {
	const char *policy;
	bool ok;
	char why[200];
	double ms, idle_ms;
	double spread;               /* the steps' interquartile range over their median */
	size_t peak, host;
	bool predicted;
	struct ferry_prediction pred;
	const char *spec;            /* what runs: the policy, or auto's choice */
	struct ferry_auto_result *autor;
};

struct bench_args {
	struct ferry_train_opts o;
	const char *json;
	const char *policies[MAX_PLACEMENTS];
	int n, steps;
	bool shape_given;
};

/* bench's own flags, besides the model's (the usage's text says them) */
static const struct cli_flag bench_flags[] = {
	{ .name = "--steps",
	  .value = "N", .type = CLI_INT, .at = offsetof(struct bench_args, steps), .min = 1, .max = 1000,
	  .range = "--steps must be 1..1000", .usage = true },
	{ .name = "--json", .value = "FILE", .type = CLI_STRING, .at = offsetof(struct bench_args, json) },
	{ NULL },
};

/* POLICY: one more row */
static int policy_arg(const char *cmd, const char *arg, void *ctx)
{
	struct bench_args *a = ctx;

	if (!strncmp(arg, "--", 2))
		return ferry_cli_usage_error(cmd, "unknown flag '%s'", arg);
	if (a->n == MAX_PLACEMENTS)
		return ferry_cli_usage_error(cmd, "at most %d policies", MAX_PLACEMENTS);
	a->policies[a->n++] = arg;
	return 0;
}

static int parse(int argc, char **argv, struct bench_args *a)
{
	unsigned given = 0;
	const struct cli_group groups[] = { ferry_cli_model_flags_group(&a->o, &given), ferry_cli_tier_flags_group(),
					    { bench_flags, a, NULL, NULL }, { NULL } };
	int rc;

	ferry_cli_model_flags_default(&a->o);
	a->steps = 5;
	rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups, .files = true, .arg = policy_arg, .ctx = a }, argc, argv);
	a->shape_given = given & MODEL_GIVEN_SHAPE;
	if (rc == CLI_HELP)
		usage();
	if (rc)
		return rc == CLI_HELP ? 0 : rc;
	if (!a->n) {
		static const char *const dflt[] = { "nothing_saveable", "everything_saveable", "dots_saveable",
						    "qkv_proj_offloaded", "minimal_offloaded" };
		for (size_t i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
			a->policies[a->n++] = dflt[i];
	}
	return -1;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* Synthetic batches, the same for every policy. */
static void batch(int vocab, int32_t *in, int32_t *tg, long n, int s)
{
	for (long i = 0; i < n; i++) {
		in[i] = (int32_t)((i * 7919 + s * 104729 + 13) % vocab);
		tg[i] = (int32_t)((i * 104729 + s * 7919 + 7) % vocab);
	}
}

/* Warm-up, timed steps, and one more traced; fills r (r->why on failure). */
static void run_steps(ferry_model_t m, const struct bench_args *a, int32_t *in, int32_t *tg, struct row *r)
{
	struct ferry_adamw opt = a->o.adamw;
	const int vocab = ferry_model_config(m)->vocab;
	double *ms = malloc(sizeof(double) * (size_t)a->steps);
	struct ferry_trace_stats ts;
	float loss, norm;
	ferry_status st = ms ? FERRY_OK : FERRY_ERR_NOMEM;

	opt.lr = 1e-4f;
	for (int s = 0; s <= a->steps + 1 && !st; s++) {
		const double t0 = cli_now_s();

		batch(vocab, in, tg, (long)a->o.B * a->o.T, s);
		if (s == a->steps + 1 && (st = ferry_model_trace_begin(m)))
			break;
		if ((st = ferry_model_step_submit(m, in, tg, a->o.B, a->o.T)) ||
		    (st = ferry_model_step_finish(m, &opt, s + 1, &loss, &norm)) || (st = ferry_model_sync(m)))
			break;
		if (s >= 1 && s <= a->steps)
			ms[s - 1] = (cli_now_s() - t0) * 1e3;
	}
	if (!st && !(st = ferry_model_trace_end_stats(m, NULL, &ts))) {
		qsort(ms, (size_t)a->steps, sizeof(double), cmp_double);
		r->ms = ms[a->steps / 2];
		r->spread = r->ms > 0 ? (ms[3 * a->steps / 4] - ms[a->steps / 4]) / r->ms : 0;
		r->idle_ms = (ts.span_s - ts.busy_s[0]) * 1e3; /* stream 0 is compute */
		r->ok = true;
	} else {
		snprintf(r->why, sizeof(r->why), "%s", ferry_last_error());
	}
	free(ms);
}

/* As ferry calibrate does: steps of one policy that vary much mean a busy
 * machine, and timings to take again when it is quiet. */
static void warn_busy(const struct row *rows, int n)
{
	const struct row *worst = NULL;

	for (int i = 0; i < n; i++)
		if (rows[i].ok && rows[i].spread > CALIB_BUSY_SPREAD && (!worst || rows[i].spread > worst->spread))
			worst = &rows[i];
	if (worst)
		fprintf(stderr, "ferry bench: warning: the steps of %s vary by %.0f%% (interquartile range over "
				"median): the machine looked busy, bench again when it is quiet\n",
			worst->policy, worst->spread * 100);
}

/* --policy auto's row: the search on this machine's calibration, under
 * --device-mem (or the arena's capacity); 1 when it cannot run. */
static int choose_auto(const struct bench_args *a, const struct ferry_model_config *cfg, ferry_backend_t be,
		       ferry_calibration_t calib, struct row *r)
{
	size_t cap = a->o.device_mem ? a->o.device_mem : ferry_backend_mem_capacity(be);

	if (!calib) {
		snprintf(r->why, sizeof(r->why), "auto needs this machine's calibration: run ferry calibrate");
		return 1;
	}
	if (!(r->autor = calloc(1, sizeof(*r->autor))) || auto_policy_search(&a->o, cfg, calib, cap, 0, false, r->autor) != FERRY_OK) {
		snprintf(r->why, sizeof(r->why), "%s", r->autor ? ferry_last_error() : "out of host memory");
		return 1;
	}
	r->spec = r->autor->policy;
	printf("auto: %s (predicted %.1f ms, %d placements searched)\n", r->spec, r->autor->pred.step_s * 1e3,
	       r->autor->evaluations);
	return 0;
}

/* The options a row runs with: the flags', its policy, and auto's tiles. */
static struct ferry_exec_opts row_opts(const struct bench_args *a, const struct row *r)
{
	struct ferry_exec_opts o = a->o.exec;

	o.policy = r->spec;
	if (r->autor)
		o.mlp_tile = r->autor->mlp_tile, o.loss_tile = r->autor->loss_tile;
	return o;
}

/* One policy: its plan, a model, its steps. */
static void bench_one(const struct bench_args *a, const struct ferry_model_config *cfg, ferry_backend_t be,
		      struct row *r)
{
	struct ferry_exec_opts o = row_opts(a, r);
	struct ferry_plan plan;
	ferry_model_t m = NULL;
	long n = (long)a->o.B * a->o.T;
	int32_t *in = malloc(sizeof(int32_t) * (size_t)n), *tg = malloc(sizeof(int32_t) * (size_t)n);

	ferry_backend_mem_reset_peak(be);
	if (!in || !tg) {
		snprintf(r->why, sizeof(r->why), "out of host memory");
	} else if (ferry_model_plan(cfg, a->o.B, a->o.T, &o, &plan) != FERRY_OK ||
		   ferry_model_create(be, cfg, a->o.B, a->o.T, &o, &m) != FERRY_OK ||
		   ferry_model_init_random(m, a->o.seed) != FERRY_OK) {
		snprintf(r->why, sizeof(r->why), "%s", ferry_last_error());
	} else {
		for (int k = 0; k < FERRY_TK_COUNT; k++)
			r->host += plan.mem.host_kind_bytes[k];
		run_steps(m, a, in, tg, r);
		r->peak = ferry_backend_mem_peak(be);
	}
	ferry_model_free(m);
	free(in);
	free(tg);
}

/* "  12.3 (+4%)  0.5 ms": the prediction, its error, its exposed transfer time. */
static const char *predicted(const struct row *r, char *buf, size_t n)
{
	if (!r->predicted)
		return "           -";
	snprintf(buf, n, "%7.1f (%+.0f%%) %6.1f ms", r->pred.step_s * 1e3, (r->pred.step_s * 1e3 / r->ms - 1) * 100,
		 r->pred.exposed_copy_s * 1e3);
	return buf;
}

static void print_rows(const struct row *rows, int n, double base)
{
	char peak[FERRY_SIZE_CHARS], host[FERRY_SIZE_CHARS], pred[64];

	printf("%-34s %10s %8s %12s %12s %14s  %s\n", "policy", "ms/step", "vs remat", "device peak", "host",
	       "compute idle", "predicted (error) exposed");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (!r->ok) {
			printf("%-34.34s  does not run: %s\n", r->policy, r->why);
			continue;
		}
		char ratio[16] = "-";

		if (base > 0)
			snprintf(ratio, sizeof(ratio), "%.2fx", r->ms / base);
		printf("%-34.34s %10.1f %8s %12s %12s %11.1f ms  %s\n", r->policy, r->ms, ratio,
		       ferry_format_size(r->peak, peak), ferry_format_size(r->host, host), r->idle_ms,
		       predicted(r, pred, sizeof(pred)));
	}
}

static int write_json(const char *path, const struct row *rows, int n, double base)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "ferry bench: cannot write --json %s\n", path);
		return 1;
	}
	fprintf(f, "[");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		fprintf(f, "%s\n {\"policy\": \"%s\", \"runs\": %s", i ? "," : "", r->policy, r->ok ? "true" : "false");
		if (r->autor && r->spec)
			fprintf(f, ", \"auto_policy\": \"%s\"", r->spec);
		if (r->ok)
			fprintf(f, ", \"ms_per_step\": %.3f, \"vs_full_remat\": %.4f, \"device_peak_bytes\": %zu, "
				   "\"host_bytes\": %zu, \"compute_idle_ms\": %.3f", r->ms, base > 0 ? r->ms / base : 0.0,
				r->peak, r->host, r->idle_ms);
		if (r->ok && r->predicted)
			fprintf(f, ", \"predicted_ms\": %.3f, \"predicted_exposed_copy_ms\": %.3f, "
				   "\"predicted_device_peak_bytes\": %zu", r->pred.step_s * 1e3,
				r->pred.exposed_copy_s * 1e3, r->pred.device_peak_bytes);
		fprintf(f, "}");
	}
	fprintf(f, "\n]\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "ferry bench: cannot write --json %s\n", path);
		return 1;
	}
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_args a = { 0 };
	struct row rows[MAX_PLACEMENTS] = { { 0 } };
	struct ferry_model_config cfg;
	ferry_backend_t be;
	ferry_calibration_t calib = NULL;
	char path[4200] = "";
	double base = 0;
	int rc = parse(argc, argv, &a);

	if (rc >= 0)
		return rc;
	ferry_set_threads(a.o.threads);
	if (ferry_cli_model_flags_backend(CMD, &a.o, stdout) || ferry_cli_model_flags_config(CMD, &a.o, &cfg) ||
	    ferry_cli_model_flags_places(CMD, &a.o) || ferry_cli_tier_flags_setup(CMD, &a.o))
		return 1;
	if (ferry_backend_open(a.o.backend, &(struct ferry_backend_opts){ .device_mem = a.o.device_mem,
									  .threads = a.o.threads }, &be) != FERRY_OK) {
		ferry_cli_tier_flags_release(&a.o);
		return ferry_cli_fail(CMD);
	}
	printf("%s: %d layers, %d channels, batch %d x %d on %s\n", cfg.arch, cfg.layers, cfg.channels, a.o.B, a.o.T,
	       ferry_backend_description(be));
	if (calib_cache_load(be, &calib, path, sizeof(path)) != FERRY_OK)
		printf("no predictions: %s\n", ferry_last_error());
	for (int i = 0; i < a.n; i++) {
		struct ferry_exec_opts o;

		rows[i].policy = rows[i].spec = a.policies[i];
		if (is_auto_policy(rows[i].policy) && choose_auto(&a, &cfg, be, calib, &rows[i]))
			continue;
		o = row_opts(&a, &rows[i]);
		rows[i].predicted = calib && ferry_model_predict(&cfg, a.o.B, a.o.T, &o, calib, &rows[i].pred) == FERRY_OK;
		bench_one(&a, &cfg, be, &rows[i]);
		if (rows[i].ok && !strcmp(rows[i].policy, "nothing_saveable"))
			base = rows[i].ms;
	}
	ferry_calibration_free(calib);
	ferry_backend_close(be);
	ferry_cli_tier_flags_release(&a.o);
	print_rows(rows, a.n, base);
	warn_busy(rows, a.n);
	rc = a.json ? write_json(a.json, rows, a.n, base) : 0;
	for (int i = 0; i < a.n; i++)
		free(rows[i].autor);
	return rc;
}
