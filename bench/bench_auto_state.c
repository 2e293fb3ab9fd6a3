/*
 * The state search of --policy auto (ferry_policy_auto_state) against
 * reality: for every placement of the parameters and AdamW's state it
 * weighs (on the device; the optimizer streamed through the device; the
 * optimizer on host threads; each of the last two with the layers' weights
 * offloaded too), the predicted step time and the measured one, side by
 * side, then which placement auto picked against the one measured fastest.
 *
 *   bench_auto_state [--backend cpu|cuda] [--model gpt2|llama] [--layers 2]
 *                    [--channels 128] [--heads 4] [--batch 16] [--seq 64]
 *                    [--threads 1] [--rounds 11] [--repeats 3]
 *                    [--device-mem SIZE] [--policy P]
 *
 * A calibration in this process (no cache).  Each placement's activation
 * policy is the one ferry_policy_auto chooses for it under --device-mem
 * (the whole arena by default), as the state search does, or --policy P
 * for all.  Every placement's model is made and warmed up, then --rounds
 * rounds each time one full step of every placement in turn (interleaved,
 * so other work on the machine slows them alike).  Printed per placement:
 * the prediction, the measured median and minimum, the errors against
 * each, the ratio to the device placement measured (median of per-round
 * ratios) and predicted, and whether the predicted peak equals the arena's;
 * then the predicted busy time of the streams against the process's CPU
 * time per step (with --threads 1 each stream is one thread: a check of
 * the task durations that the machine's load does not move).
 */
#include "ferry/cost.h"
#include "ferry/model.h"
#include "ferry/platform.h"
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PLACES 5
#define MAX_ROUNDS 200

static const struct {
	const char *name;
	enum ferry_optim_place optimizer;
	bool offload_params;
} places[N_PLACES] = {
	{ "device", FERRY_OPTIM_DEVICE, false },
	{ "optimizer stream", FERRY_OPTIM_STREAM, false },
	{ "optimizer cpu", FERRY_OPTIM_CPU, false },
	{ "stream + offload-params", FERRY_OPTIM_STREAM, true },
	{ "cpu + offload-params", FERRY_OPTIM_CPU, true },
};

struct place {
	char policy[1024];
	ferry_model_t m;
	struct ferry_prediction pred;
	double ms[MAX_ROUNDS], cpu_ms[MAX_ROUNDS]; /* wall time; CPU time of the whole process */
	double med, min, ratio, cpu; /* ratio: to the first placement, median of per-round ratios */
	size_t peak;
	bool ok;
};

struct args {
	struct bench_run run;
	const char *policy;
	size_t device_mem;
};

static void usage(void)
{
	printf("usage: bench_auto_state [--backend cpu|cuda] [--model gpt2|llama] [--layers N] [--channels N]\n"
	       "                        [--heads N] [--batch B] [--seq T] [--threads N] [--rounds R]\n"
	       "                        [--repeats N] [--device-mem SIZE] [--policy P]\n"
	       "Calibrates in-process, then times each placement of the parameters and AdamW's state in\n"
	       "interleaved rounds: predicted against measured step time, and auto's pick against the\n"
	       "fastest measured.\n");
}

static int parse(int argc, char **argv, struct args *a)
{
	static const char *const model[] = { "--backend", "--model", "--layers", "--channels", "--heads", "--batch",
					      "--seq", "--threads", "--policy", "--device-mem", NULL };
	struct ferry_train_opts o;
	int rc;

	*a = (struct args){ .run = bench_run_defaults(11, 3) };
	rc = bench_run_parse("bench_auto_state", argc, argv, &a->run, &o, model, NULL, NULL);
	if (rc == CLI_HELP) {
		usage();
		return 0;
	}
	if (rc)
		return rc;
	a->policy = o.exec.policy;
	a->device_mem = o.device_mem;
	bench_run_finish(&a->run, MAX_ROUNDS, 11);
	return -1;
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

/* Placement i's activation policy and prediction, its model made and warmed up. */
static void prepare(const struct args *a, ferry_backend_t be, ferry_calibration_t cal,
		    const struct ferry_exec_opts *base, size_t cap, int i, struct place *p)
{
	static struct ferry_auto_result r;
	struct ferry_exec_opts o = *base;
	size_t before = ferry_backend_mem_live(be); /* the models made before stay */

	o.optimizer = places[i].optimizer;
	o.offload_params = places[i].offload_params;
	if (a->policy) {
		snprintf(p->policy, sizeof(p->policy), "%s", a->policy);
	} else if (ferry_policy_auto(&a->run.cfg, a->run.B, a->run.T, &o, cap, 0, cal, &r) == FERRY_OK) {
		snprintf(p->policy, sizeof(p->policy), "%s", r.policy);
	} else {
		fprintf(stderr, "%s: %s\n", places[i].name, ferry_last_error());
		return;
	}
	o.policy = p->policy;
	ferry_backend_mem_reset_peak(be);
	p->ok = !ferry_model_predict(&a->run.cfg, a->run.B, a->run.T, &o, cal, &p->pred) &&
		!ferry_model_create(be, &a->run.cfg, a->run.B, a->run.T, &o, &p->m) && !ferry_model_init_random(p->m, 1) &&
		!step(p->m, a->run.B, a->run.T, 0) && p->pred.device_peak_bytes <= cap;
	p->peak = ferry_backend_mem_peak(be) - before;
	if (!p->ok)
		fprintf(stderr, "%s: does not run: %s\n", places[i].name, ferry_last_error());
}

/* CPU time of every thread of the process: what the step's tasks cost,
 * without the time other work on the machine took the cores away. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void measure(const struct args *a, struct place *p)
{
	for (int r = 0; r < a->run.rounds; r++)
		for (int i = 0; i < N_PLACES; i++) {
			double t0 = now_s(), c0 = cpu_s();

			if (p[i].ok && step(p[i].m, a->run.B, a->run.T, r + 1))
				p[i].ok = false;
			p[i].ms[r] = (now_s() - t0) * 1e3;
			p[i].cpu_ms[r] = (cpu_s() - c0) * 1e3;
		}
	for (int i = 0; i < N_PLACES; i++) {
		double v[MAX_ROUNDS], q[MAX_ROUNDS];

		for (int r = 0; r < a->run.rounds; r++)
			v[r] = p[i].ms[r], q[r] = p[i].ms[r] / p[0].ms[r];
		p[i].med = median(v, a->run.rounds);
		p[i].min = v[0];
		p[i].ratio = median(q, a->run.rounds);
		for (int r = 0; r < a->run.rounds; r++)
			v[r] = p[i].cpu_ms[r];
		p[i].cpu = median(v, a->run.rounds);
	}
}

/* The table; returns the placement measured fastest: by the median of
 * per-round ratios, which other work on the machine moves least. */
static int report(const struct args *a, const struct place *p)
{
	double worst = 0, sum = 0;
	int n = 0, within = 0, best = -1;

	printf("%-24s %9s %9s %9s %8s %8s %8s %9s %5s  %s\n", "placement", "predicted", "median", "min", "vs med",
	       "vs min", "ratio", "pred.ratio", "peak", "activation policy");
	for (int i = 0; i < N_PLACES; i++) {
		double pr = p[i].pred.step_s * 1e3, err = pr / p[i].med - 1;

		if (!p[i].ok || !p[0].ok) {
			printf("%-24s does not run or fit\n", places[i].name);
			continue;
		}
		printf("%-24s %9.2f %9.2f %9.2f %+7.1f%% %+7.1f%% %8.3f %9.3f %5s  %.60s\n", places[i].name, pr,
		       p[i].med, p[i].min, err * 100, (pr / p[i].min - 1) * 100, p[i].ratio,
		       p[i].pred.step_s / p[0].pred.step_s, p[i].peak == p[i].pred.device_peak_bytes ? "exact" : "WRONG",
		       p[i].policy);
		worst = fmax(worst, fabs(err)), sum += fabs(err), n++, within += fabs(err) <= 0.10;
		if (best < 0 || p[i].ratio < p[best].ratio)
			best = i;
	}
	if (n)
		printf("error against the median: mean %.1f%%, largest %.1f%%, %d of %d within 10%%\n", 100 * sum / n,
		       100 * worst, within, n);
	(void)a;
	return best;
}

/* The tasks' own cost, whatever the load: the process's CPU time per step
 * (median) against the predicted busy time of all streams. */
static void report_work(const struct place *p)
{
	printf("\n%-24s %9s %9s %9s %9s %12s %8s\n", "placement", "compute", "copies", "host", "pred.busy",
	       "CPU ms/step", "error");
	for (int i = 0; i < N_PLACES; i++) {
		const struct ferry_prediction *q = &p[i].pred;
		double busy = (q->compute_s + q->copy_s + q->host_s) * 1e3;

		if (p[i].ok)
			printf("%-24s %9.2f %9.2f %9.2f %9.2f %12.2f %+7.1f%%\n", places[i].name, q->compute_s * 1e3,
			       q->copy_s * 1e3, q->host_s * 1e3, busy, p[i].cpu, (busy / p[i].cpu - 1) * 100);
	}
}

/* Which placement ferry_policy_auto_state picks, against the measured best. */
static void verdict(const struct args *a, ferry_calibration_t cal, const struct ferry_exec_opts *base, size_t cap,
		    const struct place *p, int best)
{
	static struct ferry_auto_result r;
	int pick = -1;

	if (ferry_policy_auto_state(&a->run.cfg, a->run.B, a->run.T, base, cap, 0, cal, &r) != FERRY_OK) {
		printf("auto: %s\n", ferry_last_error());
		return;
	}
	for (int i = 0; i < N_PLACES; i++)
		if (places[i].optimizer == r.optimizer && places[i].offload_params == r.offload_params)
			pick = i;
	if (pick < 0 || best < 0 || !p[pick].ok) {
		printf("auto picked a placement that was not measured\n");
		return;
	}
	printf("auto picked: %s (predicted %.2f ms); measured fastest (per-round ratio): %s\n", places[pick].name,
	       r.pred.step_s * 1e3, places[best].name);
	printf("auto's pick against the measured fastest: per-round ratio %+.1f%% (%s), median %+.1f%%, minimum "
	       "%+.1f%%\n", (p[pick].ratio / p[best].ratio - 1) * 100,
	       p[pick].ratio <= p[best].ratio * 1.03 ? "within 3%" : "MORE than 3% slower",
	       (p[pick].med / p[best].med - 1) * 100, (p[pick].min / p[best].min - 1) * 100);
}

int main(int argc, char **argv)
{
	static struct place p[N_PLACES];
	struct args a;
	ferry_backend_t be;
	ferry_calibration_t cal;
	size_t cap;
	int rc = parse(argc, argv, &a);

	if (rc >= 0)
		return rc;
	ferry_set_threads(a.run.threads);
	if (ferry_model_config_complete(&a.run.cfg) ||
	    ferry_backend_open(a.run.backend, &(struct ferry_backend_opts){ .threads = a.run.threads }, &be)) {
		fprintf(stderr, "bench_auto_state: %s\n", ferry_last_error());
		return 1;
	}
	struct ferry_exec_opts base = { .policy = "nothing_saveable", .act_dtype = ferry_backend_act_dtype(a.run.backend),
					.backend = a.run.backend };
	if (ferry_calibrate(be, &a.run.cfg, a.run.B, a.run.T, &base, a.run.repeats, NULL, &cal)) {
		fprintf(stderr, "bench_auto_state: %s\n", ferry_last_error());
		return 1;
	}
	cap = a.device_mem ? a.device_mem : ferry_backend_mem_capacity(be);
	printf("%s: %d layers, %d channels, batch %d x %d on %s; %d rounds; device memory %zu bytes\n", a.run.cfg.arch,
	       a.run.cfg.layers, a.run.cfg.channels, a.run.B, a.run.T, ferry_backend_description(be), a.run.rounds, cap);
	for (int i = 0; i < N_PLACES; i++)
		prepare(&a, be, cal, &base, cap, i, &p[i]);
	measure(&a, p);
	verdict(&a, cal, &base, cap, p, report(&a, p));
	report_work(p);
	for (int i = 0; i < N_PLACES; i++)
		ferry_model_free(p[i].m);
	ferry_calibration_free(cal);
	ferry_backend_close(be);
	return 0;
}
