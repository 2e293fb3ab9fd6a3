/*
 * The cost model against reality: for every policy preset and for
 * --policy auto's choice (or the policies given; "auto" names the choice,
 * "again" a second model of the first policy),
 * the predicted step time and the measured one, side by side, on one
 * backend (CPU by default), and auto against the fastest preset measured.
 *
 *   bench_cost_model [--backend cpu|cuda] [--model gpt2|llama] [--layers 2]
 *                    [--channels 128] [--heads 4] [--batch 16] [--seq 64]
 *                    [--threads 1] [--rounds 15] [--repeats 5] [policy ...]
 *
 * First a calibration in this process (ferry_calibrate: --repeats traced
 * steps under nothing_saveable, copies at the model's transfer sizes), no
 * cache involved.  Then every policy's model is made and warmed up, and
 * --rounds rounds each time one full step (ferry_model_step_submit, _finish,
 * ferry_model_sync) of every policy in turn: interleaved, so that other
 * work on the machine slows every policy alike.  Printed per policy: the
 * prediction, the measured median and minimum, the error of the prediction
 * against each, and whether the peak device memory predicted equals the
 * arena's measured peak; then the largest and mean errors.  Then, since
 * wall time on a shared machine includes the time other processes hold the
 * cores, the process's CPU time per step (median) against the predicted
 * busy time of all streams: a check of the calibrated task durations that
 * the machine's load does not move (with --threads 1, the CPU backend's
 * streams are one thread each and waiting threads sleep).
 */
#include "ferry/cost.h"
#include "ferry/model.h"
#include "ferry/platform.h"
#include "ferry/policy.h"
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POL 32
#define MAX_ROUNDS 200

struct pol {
	const char *name;
	char spec[1024]; /* the policy run: the name, or auto's choice */
	ferry_model_t m;
	struct ferry_prediction pred;
	double ms[MAX_ROUNDS], cpu_ms[MAX_ROUNDS]; /* wall time; CPU time of the whole process */
	size_t peak;
	bool ok;
};

struct args {
	struct bench_run run;
	int n;
	const char *pol[MAX_POL];
};

static void usage(void)
{
	printf("usage: bench_cost_model [--backend cpu|cuda] [--model gpt2|llama] [--layers N] [--channels N]\n"
	       "                        [--heads N] [--batch B] [--seq T] [--threads N] [--rounds R]\n"
	       "                        [--repeats N] [policy ...]\n"
	       "Calibrates in-process, then times every policy (default: every preset and auto) in\n"
	       "interleaved rounds and prints predicted against measured step time (median and\n"
	       "minimum), and auto's choice against the fastest preset measured.\n");
}

/* A policy to time */
static int policy_arg(const char *prog, const char *arg, void *ctx)
{
	struct args *a = ctx;

	if (arg[0] == '-' || a->n == MAX_POL) {
		fprintf(stderr, "%s: bad argument '%s'\n", prog, arg);
		return 2;
	}
	a->pol[a->n++] = arg;
	return 0;
}

static int parse(int argc, char **argv, struct args *a)
{
	static const char *const model[] = { "--backend", "--model", "--layers", "--channels", "--heads", "--batch",
					      "--seq", "--threads", NULL };
	struct ferry_train_opts o;
	int rc;

	*a = (struct args){ .run = bench_run_defaults(15, 5) };
	rc = bench_run_parse("bench_cost_model", argc, argv, &a->run, &o, model, policy_arg, a);
	if (rc == CLI_HELP) {
		usage();
		return 0;
	}
	if (rc)
		return rc;
	bench_run_finish(&a->run, MAX_ROUNDS, 15);
	if (!a->n) {
		for (int i = 0; i < ferry_policy_preset_count() && i < MAX_POL - 1; i++)
			a->pol[a->n++] = ferry_policy_preset_name(i);
		a->pol[a->n++] = "auto";
		a->pol[a->n++] = "again";
	}
	return -1;
}

/* The 1-minute load average ("?" where unknown): how busy the machine was. */
static const char *loadavg(char *buf, size_t n)
{
	FILE *f = fopen("/proc/loadavg", "r");

	snprintf(buf, n, "?");
	if (f) {
		if (!fgets(buf, (int)n, f))
			snprintf(buf, n, "?");
		buf[strcspn(buf, " ")] = 0;
		fclose(f);
	}
	return buf;
}

/* CPU time of every thread of the process: what the step's tasks cost,
 * without the time other work on the machine took the cores away. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ferry_status step(ferry_model_t m, int B, int T, int s)
{
	static int32_t in[1 << 16], tg[1 << 16];
	struct ferry_adamw opt = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f };
	int vocab = ferry_model_config(m)->vocab;
	float loss, norm;
	ferry_status st;

	for (long i = 0; i < (long)B * T && i < (1 << 16); i++) {
		in[i] = (int32_t)((i * 7919 + s * 104729 + 13) % vocab);
		tg[i] = (int32_t)((i * 104729 + s * 7919 + 7) % vocab);
	}
	if ((st = ferry_model_step_submit(m, in, tg, B, T)) || (st = ferry_model_step_finish(m, &opt, s + 1, &loss, &norm)))
		return st;
	return ferry_model_sync(m);
}

/* Median over rounds of policy i's step time over the first policy's, the
 * same round (other work on the machine slows both alike). */
static double ratio_median(const struct args *a, const struct pol *p, int i)
{
	double v[MAX_ROUNDS];

	for (int r = 0; r < a->run.rounds; r++)
		v[r] = p[i].ms[r] / p[0].ms[r];
	return median(v, a->run.rounds);
}

struct errs {
	double worst, sum;
	int n, within;
};

static void count(struct errs *e, double err)
{
	e->worst = fmax(e->worst, fabs(err));
	e->sum += fabs(err);
	e->within += fabs(err) <= 0.10;
	e->n++;
}

/* The tasks' own cost, whatever the load: the process's CPU time per step
 * (median) against the predicted busy time of all streams. */
static void report_work(const struct args *a, struct pol *p)
{
	struct errs e = { 0 };

	printf("\n%-34s %12s %12s %8s\n", "policy", "CPU ms/step", "pred. busy", "error");
	for (int i = 0; i < a->n; i++) {
		double v[MAX_ROUNDS], cpu, busy = (p[i].pred.compute_s + p[i].pred.copy_s + p[i].pred.host_s) * 1e3;

		if (!p[i].ok)
			continue;
		memcpy(v, p[i].cpu_ms, sizeof(double) * (size_t)a->run.rounds);
		cpu = median(v, a->run.rounds);
		printf("%-34.34s %12.2f %12.2f %+7.1f%%\n", p[i].name, cpu, busy, (busy / cpu - 1) * 100);
		count(&e, busy / cpu - 1);
	}
	printf("error of the predicted busy time against CPU time: mean %.1f%%, largest %.1f%%, %d of %d within 10%%\n",
	       100 * e.sum / e.n, 100 * e.worst, e.within, e.n);
}

static double median_ms(const struct args *a, const struct pol *p)
{
	double v[MAX_ROUNDS];

	memcpy(v, p->ms, sizeof(double) * (size_t)a->run.rounds);
	return median(v, a->run.rounds);
}

static bool is_preset(const char *name)
{
	for (int i = 0; i < ferry_policy_preset_count(); i++)
		if (!strcmp(name, ferry_policy_preset_name(i)))
			return true;
	return false;
}

static double min_ms(const struct args *a, const struct pol *p)
{
	double m = p->ms[0];

	for (int r = 1; r < a->run.rounds; r++)
		m = fmin(m, p->ms[r]);
	return m;
}

/* Whether two policies place every activation alike (then any measured
 * difference between them is the machine's noise). */
static bool same_placement(const struct args *a, const char *x, const char *y)
{
	static struct ferry_plan px, py;
	struct ferry_exec_opts ox = { .policy = x }, oy = { .policy = y };

	if (ferry_model_plan(&a->run.cfg, a->run.B, a->run.T, &ox, &px) ||
	    ferry_model_plan(&a->run.cfg, a->run.B, a->run.T, &oy, &py) || px.n_tensors != py.n_tensors)
		return false;
	for (int t = 0; t < px.n_tensors; t++) /* what backward does not read has no place */
		if (px.tensors[t].needed != py.tensors[t].needed || px.tensors[t].stored != py.tensors[t].stored ||
		    px.tensors[t].recomputed != py.tensors[t].recomputed ||
		    (px.tensors[t].needed && px.tensors[t].placement != py.tensors[t].placement))
			return false;
	return true;
}

/* Auto's row against the fastest preset measured, by the median of
 * per-round ratios to the preset of least median, and by the fastest
 * step against the least minimum (other work only adds time: the steadier
 * of the two on a shared machine, and the one judged): issue 11 asks for
 * at most 3% slower. */
static void report_auto(const struct args *a, const struct pol *p)
{
	int au = -1, best = -1, best_min = -1;
	double v[MAX_ROUNDS];

	for (int i = 0; i < a->n; i++) {
		if (p[i].ok && !strcmp(p[i].name, "auto"))
			au = i;
		if (!p[i].ok || !is_preset(p[i].name))
			continue;
		if (best < 0 || median_ms(a, &p[i]) < median_ms(a, &p[best]))
			best = i;
		if (best_min < 0 || min_ms(a, &p[i]) < min_ms(a, &p[best_min]))
			best_min = i;
	}
	if (au < 0 || best < 0)
		return;
	for (int r = 0; r < a->run.rounds; r++)
		v[r] = p[au].ms[r] / p[best].ms[r];
	double rat = median(v, a->run.rounds), rmin = min_ms(a, &p[au]) / min_ms(a, &p[best_min]);

	printf("\nauto chose %s\n", p[au].spec);
	for (int i = 0; i < a->n; i++)
		if (p[i].ok && is_preset(p[i].name) && same_placement(a, p[au].spec, p[i].name))
			printf("(the placement of %s)\n", p[i].name);
	printf("auto against the fastest preset measured: per-round ratio to %s (least median) %+.1f%%; fastest step "
	       "against %s's %+.1f%% (%s 3%%); predicted %+.1f%%\n", p[best].name, (rat - 1) * 100, p[best_min].name,
	       (rmin - 1) * 100, rmin <= 1.03 ? "within" : "NOT within",
	       (p[au].pred.step_s / p[best_min].pred.step_s - 1) * 100);
}

/* Two models of one schedule measured in the same rounds: how far apart
 * the machine puts identical work (which model's memory, which core),
 * the floor under every error above. */
static void report_floor(const struct args *a, const struct pol *p)
{
	for (int i = 1; i < a->n; i++)
		if (p[i].ok && p[0].ok && !strcmp(p[i].spec, p[0].spec)) {
			double med = median_ms(a, &p[i]) / median_ms(a, &p[0]) - 1, mn = min_ms(a, &p[i]) / min_ms(a, &p[0]) - 1;

			printf("\nthe same schedule in two models (%s): medians %+.1f%% apart, fastest steps %+.1f%%: what "
			       "this machine does to identical work\n", p[0].name, med * 100, mn * 100);
			return;
		}
}

static void report(const struct args *a, struct pol *p)
{
	struct errs med_e = { 0 }, min_e = { 0 }, rat_e = { 0 };

	printf("%-34s %9s %9s %9s %8s %8s %8s %8s %9s %5s\n", "policy", "predicted", "median", "min", "spread", "vs med",
	       "vs min", "ratio", "pred.ratio", "peak");
	for (int i = 0; i < a->n; i++) {
		double v[MAX_ROUNDS], med, mn, pr = p[i].pred.step_s * 1e3, rat, prat;

		if (!p[i].ok || !p[0].ok) {
			printf("%-34.34s does not run\n", p[i].name);
			continue;
		}
		memcpy(v, p[i].ms, sizeof(double) * (size_t)a->run.rounds);
		med = median(v, a->run.rounds);
		mn = v[0];
		rat = ratio_median(a, p, i);
		prat = p[i].pred.step_s / p[0].pred.step_s;
		printf("%-34.34s %9.2f %9.2f %9.2f %7.0f%% %+7.1f%% %+7.1f%% %8.3f %9.3f %5s\n", p[i].name, pr, med, mn,
		       (v[3 * a->run.rounds / 4] - v[a->run.rounds / 4]) / med * 100, (pr / med - 1) * 100, (pr / mn - 1) * 100,
		       rat, prat, p[i].peak == p[i].pred.device_peak_bytes ? "exact" : "WRONG");
		count(&med_e, pr / med - 1);
		count(&min_e, pr / mn - 1);
		count(&rat_e, prat / rat - 1);
	}
	if (!med_e.n)
		return;
	printf("(spread: interquartile range of the measured steps over their median; ratio: to %s, the median of "
	       "per-round ratios)\n", p[0].name);
	printf("error against the median: mean %.1f%%, largest %.1f%%, %d of %d within 10%%\n", 100 * med_e.sum / med_e.n,
	       100 * med_e.worst, med_e.within, med_e.n);
	printf("error against the minimum: mean %.1f%%, largest %.1f%%, %d of %d within 10%%\n",
	       100 * min_e.sum / min_e.n, 100 * min_e.worst, min_e.within, min_e.n);
	printf("error of the ratio to %s: mean %.1f%%, largest %.1f%%, %d of %d within 10%%\n", p[0].name,
	       100 * rat_e.sum / rat_e.n, 100 * rat_e.worst, rat_e.within, rat_e.n);
	report_work(a, p);
	report_floor(a, p);
	report_auto(a, p);
}

/* --policy auto's choice for this model on the in-process calibration. */
static int choose_auto(const struct args *a, ferry_calibration_t cal, const struct ferry_exec_opts *o, char *spec,
		       size_t n)
{
	static struct ferry_auto_result r;

	if (ferry_policy_auto(&a->run.cfg, a->run.B, a->run.T, o, 0, 0, cal, &r)) {
		fprintf(stderr, "bench_cost_model: auto: %s\n", ferry_last_error());
		return 1;
	}
	snprintf(spec, n, "%s", r.policy);
	return 0;
}

int main(int argc, char **argv)
{
	struct args a;
	static struct pol p[MAX_POL];
	ferry_backend_t be;
	ferry_calibration_t cal;
	char load[64];
	int rc = parse(argc, argv, &a);

	if (rc >= 0)
		return rc;
	ferry_set_threads(a.run.threads);
	if (ferry_model_config_complete(&a.run.cfg) ||
	    ferry_backend_open(a.run.backend, &(struct ferry_backend_opts){ .threads = a.run.threads }, &be)) {
		fprintf(stderr, "bench_cost_model: %s\n", ferry_last_error());
		return 1;
	}
	struct ferry_exec_opts cal_opts = { .policy = "nothing_saveable", .act_dtype = ferry_backend_act_dtype(a.run.backend),
					    .backend = a.run.backend };
	if (ferry_calibrate(be, &a.run.cfg, a.run.B, a.run.T, &cal_opts, a.run.repeats, NULL, &cal)) {
		fprintf(stderr, "bench_cost_model: %s\n", ferry_last_error());
		return 1;
	}
	printf("%s: %d layers, %d channels, batch %d x %d on %s; %d rounds; load average %s on %d cores\n",
	       a.run.cfg.arch, a.run.cfg.layers, a.run.cfg.channels, a.run.B, a.run.T, ferry_backend_description(be), a.run.rounds,
	       loadavg(load, sizeof(load)), ferry_cpu_count());
	struct ferry_calib_summary cs;

	ferry_calibration_summary(cal, &cs);
	printf("calibrated outside the ops: %.1f us of compute-stream gap a task, %.2f ms of host work a step; "
	       "inside whole steps ops take %.2fx their fastest traced call\n",
	       cs.task_gap_s * 1e6, cs.step_host_s * 1e3, cs.in_step_factor);
	for (int i = 0; i < a.n; i++) {
		struct ferry_exec_opts o = cal_opts;

		size_t before = ferry_backend_mem_live(be); /* the models made before stay */

		static char again[64];

		p[i].name = a.pol[i];
		snprintf(p[i].spec, sizeof(p[i].spec), "%s", a.pol[i]);
		if (!strcmp(a.pol[i], "again") && i > 0) { /* the same schedule, another model */
			snprintf(again, sizeof(again), "%s (again)", a.pol[0]);
			p[i].name = again;
			snprintf(p[i].spec, sizeof(p[i].spec), "%s", a.pol[0]);
		}
		if (!strcmp(a.pol[i], "auto") && choose_auto(&a, cal, &o, p[i].spec, sizeof(p[i].spec)))
			continue;
		o.policy = p[i].spec;
		ferry_backend_mem_reset_peak(be);
		p[i].ok = !ferry_model_predict(&a.run.cfg, a.run.B, a.run.T, &o, cal, &p[i].pred) &&
			  !ferry_model_create(be, &a.run.cfg, a.run.B, a.run.T, &o, &p[i].m) && !ferry_model_init_random(p[i].m, 1) &&
			  !step(p[i].m, a.run.B, a.run.T, 0);
		p[i].peak = ferry_backend_mem_peak(be) - before;
	}
	for (int r = 0; r < a.run.rounds; r++)
		for (int i = 0; i < a.n; i++) {
			double t0 = now_s(), c0 = cpu_s();

			if (p[i].ok && step(p[i].m, a.run.B, a.run.T, r + 1))
				p[i].ok = false;
			p[i].ms[r] = (now_s() - t0) * 1e3;
			p[i].cpu_ms[r] = (cpu_s() - c0) * 1e3;
		}
	printf("load average after the rounds: %s\n", loadavg(load, sizeof(load)));
	report(&a, p);
	for (int i = 0; i < a.n; i++)
		ferry_model_free(p[i].m);
	ferry_calibration_free(cal);
	ferry_backend_close(be);
	return 0;
}
