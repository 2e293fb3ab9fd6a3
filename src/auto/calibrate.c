/*
 * ferry_calibrate: measures, on a backend, what the cost model needs at a
 * model's shapes.
 *
 *  - ops: one warm-up step, then `repeats` traced steps of the model; each
 *    op's duration is its traced slice (timed events on its stream around
 *    it), the fastest call at the same shape; zeroing and device copies
 *    give their bandwidth the same way (over all their calls);
 *  - host<->device copies at the sizes of the model's layer activations
 *    (what an offload moves): each direction alone, then both at once;
 *  - how much copies slow compute: traced steps of the model with every
 *    activation it can offload offloaded; the compute ops that ran beside a
 *    copy for most of their time against those that ran beside none, each
 *    over its calibrated duration (the ratio of the two medians; on a GPU
 *    about 1, on the CPU backend, whose copies take cores, more);
 *  - what the traced slices do not cover: the compute stream's gaps
 *    between tasks (per task) and the step's wall time outside the traced
 *    span, from the same steps (the fastest one);
 *  - the CPU AdamW over the model's parameter count (1 to 16 million);
 *  - with host tiers (opts->host_tiers), each CPU-less node against DRAM
 *    and the NVMe tier's file I/O (calibrate_tiers.c);
 *  - the in-step factor: the fastest untraced step against the cost
 *    model's prediction from all of the above (fit_in_step);
 *  - last, on several ranks (opts->comm), the collectives the step runs,
 *    at its sizes, every rank at once (each rank's steps above ran on
 *    their own, beside the other ranks', as data parallel steps run
 *    them; the collectives apart: cost/calibrate_collectives.c), then
 *    traced data-parallel steps: how much longer the collectives take
 *    inside them, and how much they slow the compute ops beside them;
 *  - meanwhile, the share of the CPUs' time other processes took (a busy
 *    machine's calibration predicts slow steps: cost/machine_load.c).
 */
#include "exec/model_internal.h"
#include "cost/calibrate_tiers.h"
#include "cost/calibration.h"
#include "core/clock.h"
#include "core/error.h"
#include "ferry/comm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sample {
	struct ferry_calib_op op;
	double s;
};

struct samples {
	int n, cap;
	struct sample *v;
	double zero_bytes, zero_s, d2d_bytes, d2d_s;
	/* the fastest traced step's compute-stream gaps per task, and its
	 * time outside the traced span (negative: none traced yet) */
	double gap_s, outside_s;
	double untraced_s; /* the fastest untraced step's wall time (0: none) */
};

static ferry_status add_sample(struct samples *a, const struct ferry_op_call *c, double s)
{
	struct sample *x;

	if (a->n == a->cap) {
		int cap = a->cap ? 2 * a->cap : 1024;
		struct sample *v = ferry_calloc((size_t)cap, sizeof(*v));

		if (!v)
			return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
		if (a->n)
			memcpy(v, a->v, (size_t)a->n * sizeof(*v));
		ferry_free(a->v);
		a->v = v;
		a->cap = cap;
	}
	x = &a->v[a->n++];
	memset(x, 0, sizeof(*x));
	x->op.kind = c->kind, x->op.backward = c->backward;
	x->op.B = c->B, x->op.T = c->T, x->op.C = c->C, x->op.NH = c->NH, x->op.OC = c->OC;
	x->op.V = c->V, x->op.Vp = c->Vp, x->op.NKV = c->NKV, x->op.n = c->n;
	x->op.flops = ferry_op_flops(c);
	x->s = s;
	return FERRY_OK;
}

/* Orders samples by shape, then duration. */
static int cmp_sample(const void *pa, const void *pb)
{
	const struct sample *a = pa, *b = pb;
	const int ka[] = { a->op.kind, a->op.backward, a->op.B, a->op.T, a->op.C, a->op.NH, a->op.OC, a->op.V,
			   a->op.Vp, a->op.NKV };
	const int kb[] = { b->op.kind, b->op.backward, b->op.B, b->op.T, b->op.C, b->op.NH, b->op.OC, b->op.V,
			   b->op.Vp, b->op.NKV };

	for (int i = 0; i < 10; i++)
		if (ka[i] != kb[i])
			return ka[i] < kb[i] ? -1 : 1;
	if (a->op.n != b->op.n)
		return a->op.n < b->op.n ? -1 : 1;
	return (a->s > b->s) - (a->s < b->s);
}

/* What the slices of a step do not cover, from the compute stream's
 * point of view: the gaps between its tasks (dispatch, waits for the host)
 * per task, and the step's wall time outside the traced span (the host's
 * own work: staging the batch, the loss, patching the update). */
static void step_overheads(ferry_model_t m, const double *t, double wall, struct samples *a)
{
	const struct ferry_sched_trace *tr = &m->trace;
	double lo = 0, hi = 0, busy = 0;
	int n_c = 0;

	for (int i = 0; i < tr->n; i++) {
		lo = i == 0 || t[2 * i] < lo ? t[2 * i] : lo;
		hi = i == 0 || t[2 * i + 1] > hi ? t[2 * i + 1] : hi;
		if (tr->s[i].task->stream == m->compute)
			busy += t[2 * i + 1] - t[2 * i], n_c++;
	}
	if (!n_c || hi <= lo)
		return;
	double gap = (hi - lo - busy) / n_c, outside = wall > hi - lo ? wall - (hi - lo) : 0;

	if (a->gap_s < 0 || gap + outside / n_c < a->gap_s + a->outside_s / n_c)
		a->gap_s = gap > 0 ? gap : 0, a->outside_s = outside;
}

/* The traced step's slice times (start, end per slice) into *t (freed by
 * the caller with ferry_free, also on error). */
static ferry_status trace_times(ferry_model_t m, double **t)
{
	*t = ferry_calloc((size_t)(2 * m->trace.n + 1), sizeof(double));
	if (!*t)
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	return ferry_trace_collect(&m->trace, *t);
}

/* One traced step's slices (and its wall time) into the samples. */
static ferry_status read_slices(ferry_model_t m, double wall, struct samples *a)
{
	struct ferry_sched_trace *tr = &m->trace;
	double *t;
	ferry_status st = trace_times(m, &t);
	for (int i = 0; i < tr->n && !st; i++) {
		const struct ferry_task *k = tr->s[i].task;
		double s = t[2 * i + 1] - t[2 * i];

		if (k->kind == FERRY_TASK_OP)
			st = add_sample(a, &k->call, s);
		else if (k->kind == FERRY_TASK_ZERO)
			a->zero_bytes += (double)k->bytes, a->zero_s += s;
		else if (k->kind == FERRY_TASK_COPY && k->copy_kind == FERRY_COPY_D2D)
			a->d2d_bytes += (double)k->bytes, a->d2d_s += s;
	}
	if (!st)
		step_overheads(m, t, wall, a);
	ferry_free(t);
	return st;
}

static void batch(int vocab, int32_t *in, int32_t *tg, long n, int s)
{
	for (long i = 0; i < n; i++) {
		in[i] = (int32_t)((i * 7919 + s * 104729 + 13) % vocab);
		tg[i] = (int32_t)((i * 104729 + s * 7919 + 7) % vocab);
	}
}

/* Training step s (>= 0) on a synthetic batch, waited for. */
static ferry_status one_step(ferry_model_t m, int B, int T, int s)
{
	struct ferry_adamw opt = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f };
	long n = (long)B * T;
	int32_t *in = ferry_calloc((size_t)n, sizeof(int32_t)), *tg = ferry_calloc((size_t)n, sizeof(int32_t));
	ferry_status st = in && tg ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	float loss, norm;

	if (!st) {
		batch(m->cfg.vocab, in, tg, n, s);
		if (!(st = ferry_model_step_submit(m, in, tg, B, T)) &&
		    !(st = ferry_model_step_finish(m, &opt, s + 1, &loss, &norm)))
			st = ferry_model_sync(m);
	}
	ferry_free(in);
	ferry_free(tg);
	return st;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* An untraced step, timed into wall[*n] while there is room. */
static ferry_status untraced_step(ferry_model_t m, int B, int T, int s, double *wall, int *n, int max)
{
	double t0 = ferry_now_s();
	ferry_status st = one_step(m, B, T, s);

	if (!st && *n < max)
		wall[(*n)++] = ferry_now_s() - t0;
	return st;
}

/* A warm-up step, then `repeats` traced ones, each followed by two
 * untraced ones (at most 11 in all, one more at the end): the fastest
 * untraced step is a whole step as training runs it (the fastest: other
 * work only adds time, as for the ops), taken beside the traced ones so
 * that both see the machine alike (apart, the fit moved 0.90 to 1.17). */
static ferry_status traced_steps(ferry_model_t m, int B, int T, int repeats, struct samples *a)
{
	enum { MAX_UNTRACED = 11 };
	ferry_status st = one_step(m, B, T, 0);
	double wall[MAX_UNTRACED];
	int n = 0, s = 1;

	for (int r = 1; r <= repeats && !st; r++) {
		double t0 = ferry_now_s();

		if (!(st = ferry_model_trace_begin(m)) && !(st = one_step(m, B, T, s++)))
			st = read_slices(m, ferry_now_s() - t0, a);
		for (int k = 0; k < 2 && !st && n < MAX_UNTRACED - 1; k++)
			st = untraced_step(m, B, T, s++, wall, &n, MAX_UNTRACED);
	}
	if (!st)
		st = untraced_step(m, B, T, s, wall, &n, MAX_UNTRACED);
	if (!st) {
		qsort(wall, (size_t)n, sizeof(double), cmp_double);
		a->untraced_s = wall[0];
	}
	return st;
}

/* Each shape's fastest call into c (on a shared machine other work only
 * ever adds time to a call, so the fastest is the op's own cost; on a
 * quiet one it is within the calls' jitter of the median), and how much
 * the calls vary. */
static ferry_status op_medians(struct samples *a, struct ferry_calibration *c)
{
	ferry_status st = FERRY_OK;
	double *spread = ferry_calloc((size_t)a->n + 1, sizeof(double));
	int n_spread = 0;

	if (!spread)
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	qsort(a->v, (size_t)a->n, sizeof(*a->v), cmp_sample);
	for (int i = 0; i < a->n && !st;) {
		int j = i;

		while (j < a->n && cmp_sample(&(struct sample){ a->v[i].op, 0 }, &(struct sample){ a->v[j].op, 0 }) == 0)
			j++;
		struct ferry_calib_op e = a->v[i].op;

		double med = (j - i) % 2 ? a->v[i + (j - i) / 2].s : (a->v[i + (j - i) / 2 - 1].s + a->v[i + (j - i) / 2].s) / 2;

		e.seconds = a->v[i].s; /* samples sorted by duration within a shape */
		if (j - i >= 4 && med > 0)
			spread[n_spread++] = (a->v[i + 3 * (j - i) / 4].s - a->v[i + (j - i) / 4].s) / med;
		st = ferry_calib_add_op(c, &e);
		i = j;
	}
	if (n_spread) {
		qsort(spread, (size_t)n_spread, sizeof(double), cmp_double);
		c->op_spread = spread[n_spread / 2];
	}
	ferry_free(spread);
	if (a->zero_s > 0)
		c->zero_Bps = a->zero_bytes / a->zero_s;
	if (a->gap_s >= 0)
		c->task_gap_s = a->gap_s, c->step_host_s = a->outside_s;
	if (a->d2d_s > 0)
		c->d2d_Bps = a->d2d_bytes / a->d2d_s;
	return st;
}

/* Ops at the model's shapes, from traced steps. */
static ferry_status calibrate_ops(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				  const struct ferry_exec_opts *opts, int repeats, struct ferry_calibration *c,
				  double *untraced_s)
{
	struct samples a;
	ferry_model_t m = NULL;
	ferry_status st;

	memset(&a, 0, sizeof(a));
	a.gap_s = -1;
	if (!(st = ferry_model_create(be, cfg, B, T, opts, &m)) && !(st = ferry_model_init_random(m, 1)))
		st = traced_steps(m, B, T, repeats, &a);
	ferry_model_free(m);
	if (!st)
		st = op_medians(&a, c);
	*untraced_s = a.untraced_s;
	ferry_free(a.v);
	return st;
}

/* The in-step factor: the fastest traced call of each op, summed, falls
 * short of the fastest whole untraced step (calls run slower among the
 * step's other work than at their best: 5% on the CPU backend here), so
 * the factor on the ops' durations at which the cost model predicts it.
 * The prediction is close to linear in it: secant steps from 1 and 2.
 * Kept within [2/3, 1.5]: a whole step cannot dodge a busy machine as a
 * fastest call can (2.1x and 4x came out under load); left 0 (1) without
 * a measured step or where the ops do not move the prediction. */
#define IN_STEP_MIN (2.0 / 3)
#define IN_STEP_MAX 1.5

static ferry_status fit_in_step(const struct ferry_model_config *cfg, int B, int T,
				const struct ferry_exec_opts *opts, double untraced_s, struct ferry_calibration *c)
{
	double f0 = 1, f1 = 2, p0, p1, f;
	struct ferry_prediction p;
	ferry_status st;

	c->in_step_factor = f0;
	if (untraced_s <= 0 || ferry_model_predict(cfg, B, T, opts, c, &p)) {
		c->in_step_factor = 0;
		return FERRY_OK; /* nothing to fit: the durations stay as traced */
	}
	p0 = p.step_s;
	for (int it = 0; it < 3; it++) {
		c->in_step_factor = f1;
		if ((st = ferry_model_predict(cfg, B, T, opts, c, &p)))
			return st;
		p1 = p.step_s;
		if (!(p1 > p0 * (1 + 1e-9) || p1 < p0 * (1 - 1e-9))) {
			f1 = it ? f1 : 0; /* the ops do not move the prediction */
			break;
		}
		f = f1 + (untraced_s - p1) * (f1 - f0) / (p1 - p0);
		f0 = f1, p0 = p1;
		f1 = f < IN_STEP_MIN ? IN_STEP_MIN : f > IN_STEP_MAX ? IN_STEP_MAX : f;
		if (fabs(f1 - f0) < 1e-3)
			break;
	}
	c->in_step_factor = f1;
	return FERRY_OK;
}

/* What cover() counts: host<->device copies (those of one direction
 * never overlap each other: one stream each), collectives (one stream),
 * or the compute stream's tasks. */
enum beside { BESIDE_COPIES, BESIDE_COMM, BESIDE_COMPUTE };

/* Of [a, b], the fraction that the trace's tasks of kind `what` cover. */
static double cover(const ferry_model_t m, const double *t, double a, double b, enum beside what)
{
	const struct ferry_sched_trace *tr = &m->trace;
	double in = 0;

	for (int j = 0; j < tr->n; j++) {
		const struct ferry_task *k = tr->s[j].task;
		double lo = t[2 * j] > a ? t[2 * j] : a, hi = t[2 * j + 1] < b ? t[2 * j + 1] : b;
		bool counts = what == BESIDE_COMM      ? k->kind == FERRY_TASK_COMM
			      : what == BESIDE_COMPUTE ? k->stream == m->compute
						       : k->kind == FERRY_TASK_COPY && k->copy_kind != FERRY_COPY_D2D;

		if (counts && hi > lo)
			in += hi - lo;
	}
	return b > a ? (in > b - a ? 1 : in / (b - a)) : 0;
}

/* One traced step's compute ops: per op its duration, its calibrated
 * duration and the time copies (or with comm collectives) ran beside it
 * (op[3i..3i+2]). */
static void overlap_ops(const ferry_model_t m, const struct ferry_calibration *c, const double *t, double *op,
			int *n, int max, bool comm)
{
	const struct ferry_sched_trace *tr = &m->trace;

	for (int i = 0; i < tr->n && *n < max; i++) {
		const struct ferry_task *k = tr->s[i].task;
		const struct ferry_calib_op *e = k->kind == FERRY_TASK_OP ? ferry_calib_find(c, &k->call) : NULL;

		if (!e || e->seconds <= 0 || k->stream != m->compute)
			continue;
		op[3 * *n] = t[2 * i + 1] - t[2 * i];
		op[3 * *n + 1] = e->seconds;
		op[3 * *n + 2] = cover(m, t, t[2 * i], t[2 * i + 1], comm ? BESIDE_COMM : BESIDE_COPIES) * op[3 * *n];
		(*n)++;
	}
}

/* A traced step's slice times, then its compute ops as overlap_ops reads
 * them and (comm) its collectives' ratios as comm_ratios reads them. */
static void comm_ratios(const ferry_model_t m, const struct ferry_calibration *c, const double *t, double *r, int *n,
			int max);

static ferry_status read_overlap(ferry_model_t m, const struct ferry_calibration *c, double *op, int *n, double *r,
				 int *nr, int max, bool comm)
{
	double *t;
	ferry_status st = trace_times(m, &t);

	if (!st) {
		overlap_ops(m, c, t, op, n, max, comm);
		if (comm)
			comm_ratios(m, c, t, r, nr, max);
	}
	ferry_free(t);
	return st;
}

/* The spec that offloads every activation the backward pass reads. */
static void offload_all(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			char *spec, size_t n)
{
	struct ferry_exec_opts o = *opts;
	struct ferry_plan plan;
	size_t w = (size_t)snprintf(spec, n, "custom:");

	o.policy = "everything_saveable";
	if (ferry_model_plan(cfg, B, T, &o, &plan) != FERRY_OK)
		return;
	for (int i = 0; i < plan.n_tensors && w < n; i++)
		if (plan.tensors[i].needed)
			w += (size_t)snprintf(spec + w, n - w, "%s%s=offload", w > 7 ? "," : "", plan.tensors[i].name);
}

static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The slowdown f from ops (d, e, c): those beside no copy give the load's
 * own inflation r (the median d / e); an op beside copies for a fraction p
 * of its time, at f there, takes d = r e (1 + p (f - 1)), so each op beside
 * copies for over 30% of its time gives f = 1 + (d / (r e) - 1) / p, and
 * the median of those is the answer (medians: one op preempted by another
 * process must not decide it).  0 when fewer than 3 ops ran beside copies. */
static double slowdown(const double *op, int n)
{
	double *r = ferry_calloc((size_t)n + 1, sizeof(double)), inflation, f;
	int k = 0;

	if (!r)
		return 0;
	for (int i = 0; i < n; i++)
		if (op[3 * i + 2] == 0)
			r[k++] = op[3 * i] / op[3 * i + 1];
	inflation = k >= 3 ? median_of(r, k) : 0;
	k = 0;
	for (int i = 0; inflation > 0 && i < n; i++) {
		double p = op[3 * i + 2] / op[3 * i];

		if (p > 0.3)
			r[k++] = 1 + (op[3 * i] / (inflation * op[3 * i + 1]) - 1) / p;
	}
	f = k >= 3 ? median_of(r, k) : 0;
	ferry_free(r);
	return f <= 0 ? 0 : f < 1 ? 1 : f > 4 ? 4 : f;
}

/* How much copies slow compute (c->copy_compute_slowdown; left 0 when the
 * offloading model does not fit or no op ran beside copies). */
static ferry_status calibrate_overlap(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				      const struct ferry_exec_opts *opts, int repeats, struct ferry_calibration *c)
{
	enum { MAX = 8192 };
	struct ferry_exec_opts o = *opts;
	char spec[2048];
	double *ops = ferry_calloc(3 * MAX, sizeof(double));
	int n = 0;
	ferry_model_t m = NULL;
	ferry_status st = ops ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");

	offload_all(cfg, B, T, opts, spec, sizeof(spec));
	o.policy = spec;
	if (!st && ferry_model_create(be, cfg, B, T, &o, &m) == FERRY_OK && ferry_model_init_random(m, 1) == FERRY_OK)
		st = one_step(m, B, T, 0); /* the warm-up step */
	for (int r = 1; m && !st && r <= repeats; r++)
		if (!(st = ferry_model_trace_begin(m)) && !(st = one_step(m, B, T, r)))
			st = read_overlap(m, c, ops, &n, NULL, NULL, MAX, false);
	if (!st && slowdown(ops, n) > 0) /* else the earlier calibration's, if any */
		c->copy_compute_slowdown = slowdown(ops, n);
	ferry_model_free(m);
	ferry_free(ops);
	return st;
}

/* One traced step's collectives: each one's slice, its time alone and
 * the fraction of its slice the compute stream ran tasks beside it
 * (r[3i..3i+2]). */
static void comm_ratios(const ferry_model_t m, const struct ferry_calibration *c, const double *t, double *r, int *n,
			int max)
{
	const struct ferry_sched_trace *tr = &m->trace;

	for (int i = 0; i < tr->n && *n < max; i++) {
		const struct ferry_task *k = tr->s[i].task;
		enum ferry_calib_coll_kind kind;
		bool missing = false;
		size_t bytes;
		double alone;

		if (k->kind != FERRY_TASK_COMM)
			continue;
		kind = ferry_calib_coll_of_task(k, ferry_comm_size(m->comm), &bytes);
		alone = ferry_calib_coll_seconds(c, kind, ferry_comm_engine(m->comm), ferry_comm_size(m->comm), bytes,
						 &missing);
		if (!missing && alone > 0 && *n + 2 < max) { /* (in step, alone, beside compute) */
			r[(*n)++] = t[2 * i + 1] - t[2 * i];
			r[(*n)++] = alone;
			r[(*n)++] = cover(m, t, t[2 * i], t[2 * i + 1], BESIDE_COMPUTE);
		}
	}
}

/* The (in step, alone, beside compute) triples of n / 3 collectives, the
 * same on every rank of comm, taken across the ranks: a collective's
 * shortest slice is the last rank's to arrive, which waits for none (its
 * time in the step, into the triples), and the longest less the shortest
 * is how long the first waited for the last; the fraction beside compute
 * is the ranks' mean (every rank's compute threads share the cores).  The
 * median of those waits (*skew): by how much the ranks reach a collective
 * apart.  The triples stay as traced, and no skew, where the ranks traced
 * different numbers of collectives. */
static ferry_status across_ranks(ferry_comm_t comm, double *r, int n, double *skew)
{
	int most = n, least = n, k = n / 3;
	double *lo = ferry_calloc((size_t)k + 1, 3 * sizeof(double)), *hi = lo ? lo + k + 1 : NULL,
	       *p = lo ? hi + k + 1 : NULL;
	ferry_status st = lo ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");

	*skew = 0;
	if (!st && !(st = ferry_comm_all_reduce(comm, &most, 1, FERRY_COMM_I32, FERRY_COMM_MAX, NULL)))
		st = ferry_comm_all_reduce(comm, &least, 1, FERRY_COMM_I32, FERRY_COMM_MIN, NULL);
	if (st || most != least || k == 0) {
		ferry_free(lo);
		return st;
	}
	for (int i = 0; i < k; i++)
		lo[i] = hi[i] = r[3 * i], p[i] = r[3 * i + 2];
	if (!(st = ferry_comm_all_reduce(comm, lo, (size_t)k, FERRY_COMM_F64, FERRY_COMM_MIN, NULL)) &&
	    !(st = ferry_comm_all_reduce(comm, hi, (size_t)k, FERRY_COMM_F64, FERRY_COMM_MAX, NULL)))
		st = ferry_comm_all_reduce(comm, p, (size_t)k, FERRY_COMM_F64, FERRY_COMM_AVG, NULL);
	for (int i = 0; !st && i < k; i++)
		r[3 * i] = lo[i], r[3 * i + 2] = p[i], hi[i] -= lo[i];
	if (!st)
		*skew = median_of(hi, k);
	ferry_free(lo);
	return st;
}

/* The collectives inside data-parallel steps over opts->comm's ranks:
 * traced steps of the model with every rank at once; the collectives'
 * slices, across the ranks (across_ranks), over their time alone beside
 * compute and not (ferry_calib_in_step_ratios), the ranks' skew, and the compute ops
 * beside them as for copies (slowdown).  Not measured (left as it was)
 * where the model cannot run on these ranks (the same on every rank). */
static ferry_status calibrate_comm_step(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
					const struct ferry_exec_opts *opts, int repeats, struct ferry_calibration *c)
{
	enum { MAX = 8192 };
	double *ops = ferry_calloc(3 * MAX, sizeof(double)), *ratio = ferry_calloc(MAX, sizeof(double)), skew;
	int n = 0, nr = 0;
	ferry_model_t m = NULL;
	ferry_status st = ops && ratio ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");

	if (!st && ferry_model_create(be, cfg, B, T, opts, &m) == FERRY_OK && ferry_model_init_random(m, 1) == FERRY_OK)
		st = one_step(m, B, T, 0); /* the warm-up step */
	for (int r = 1; m && !st && r <= repeats; r++)
		if (!(st = ferry_model_trace_begin(m)) && !(st = one_step(m, B, T, r)))
			st = read_overlap(m, c, ops, &n, ratio, &nr, MAX, true);
	if (!st) /* every rank, also one whose model did not run (its count differs: no skew) */
		st = across_ranks(opts->comm, ratio, nr, &skew);
	if (!st && m && nr >= 3) {
		struct ferry_calib_comm_step e = { .ranks = ferry_comm_size(opts->comm),
						   .compute_slowdown = slowdown(ops, n),
						   .skew_s = skew };

		ferry_calib_in_step_ratios(ratio, nr, &e.in_step, &e.in_step_idle);
		snprintf(e.engine, sizeof(e.engine), "%s", ferry_comm_engine(opts->comm));
		ferry_calib_add_comm_step(c, &e);
	}
	ferry_model_free(m);
	ferry_free(ops);
	ferry_free(ratio);
	return st;
}

/* The CPU AdamW's rate over as many floats as the model has parameters
 * (1 to 16 million): its state as large as the step's, out of the caches
 * as the step's is (over one cached million it ran 3x faster than a
 * step's update on the CPU backend). */
static ferry_status calibrate_adamw(struct ferry_calibration *c, const struct ferry_model_config *cfg, int repeats)
{
	const long n = ferry_calib_adamw_floats(cfg);
	float *buf = ferry_calloc((size_t)(4 * n), sizeof(float));
	double best = 0;
	ferry_status st;

	if (!buf)
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	st = ferry_calib_time_adamw(buf, n, repeats, &best);
	ferry_free(buf);
	if (!st && best > 0)
		c->adamw_floats_per_s = (double)n / best;
	return st;
}

/* The sizes an offload moves: each layer activation's, largest first. */
static int transfer_sizes(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			  size_t *sizes, int max)
{
	struct ferry_plan plan;
	int n = 0;

	if (ferry_model_plan(cfg, B, T, opts, &plan) != FERRY_OK)
		return 0;
	for (int i = 0; i < plan.n_tensors; i++)
		n = ferry_calib_add_size(sizes, n, max, plan.tensors[i].layer_bytes);
	return n;
}

/* One collective to measure, unless want already has it. */
static void want_coll(struct ferry_calib_coll *want, int *n, int max, enum ferry_calib_coll_kind k, size_t bytes)
{
	for (int i = 0; i < *n; i++)
		if (want[i].kind == k && want[i].bytes == bytes)
			return;
	if (*n < max)
		want[(*n)++] = (struct ferry_calib_coll){ .kind = k, .bytes = bytes };
}

/* The collectives a step runs over opts->comm's ranks, each kind and size
 * once (ferry_calib_coll_of_task).  From the step's programs, built dry. */
static int step_collectives(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			    struct ferry_calib_coll *want, int max)
{
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	const struct ferry_program *p;
	ferry_model_t m;
	int n = 0;

	if (ferry_model_build(NULL, cfg, B, T, opts, &m) != FERRY_OK)
		return 0;
	ferry_model_step_keys(B, T, keys);
	for (int i = 0; i < FERRY_STEP_PROGRAMS && ferry_model_program(m, &keys[i], &p) == FERRY_OK; i++)
		for (int j = 0; j < p->n; j++) {
			const struct ferry_task *t = &p->t[j];
			enum ferry_calib_coll_kind kind;
			size_t bytes;

			if (t->kind != FERRY_TASK_COMM)
				continue;
			kind = ferry_calib_coll_of_task(t, ferry_comm_size(opts->comm), &bytes);
			want_coll(want, &n, max, kind, bytes);
		}
	ferry_model_free(m);
	return n;
}

/* What this run does not measure again, from the earlier calibration. */
static ferry_status keep_base(struct ferry_calibration *c, const struct ferry_calibration *base)
{
	ferry_status st = FERRY_OK;

	for (int i = 0; i < base->n_ops && !st; i++)
		st = ferry_calib_add_op(c, &base->ops[i]);
	for (int i = 0; i < base->n_copy; i++)
		ferry_calib_add_copy(c, &base->copy[i]);
	c->d2d_Bps = base->d2d_Bps, c->zero_Bps = base->zero_Bps;
	c->adamw_floats_per_s = base->adamw_floats_per_s;
	c->cxl_copy_factor = base->cxl_copy_factor, c->cxl_adamw_factor = base->cxl_adamw_factor;
	c->n_cxl = base->n_cxl;
	memcpy(c->cxl, base->cxl, sizeof(c->cxl));
	c->nvme_read_Bps = base->nvme_read_Bps, c->nvme_write_Bps = base->nvme_write_Bps;
	memcpy(c->nvme_dir, base->nvme_dir, sizeof(c->nvme_dir));
	memcpy(c->nvme_mode, base->nvme_mode, sizeof(c->nvme_mode));
	c->copy_compute_slowdown = base->copy_compute_slowdown;
	for (int i = 0; i < base->n_coll; i++)
		ferry_calib_add_coll(c, &base->coll[i]);
	for (int i = 0; i < base->n_comm_step; i++)
		ferry_calib_add_comm_step(c, &base->comm_step[i]);
	return st;
}

/* What the parts measure, in words, and the progress callback. */
struct progress {
	ferry_calib_progress_fn fn;
	void *ctx;
	int part, parts;
};

static const char *plural(long n)
{
	return n == 1 ? "" : "s";
}

static void report(struct progress *p, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	p->part++;
	if (!p->fn)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	p->fn(p->ctx, what, p->part, p->parts);
}

/* The collectives of the step over opts->comm's ranks, every rank at
 * once (after agreeing that every rank got this far), alone, then inside
 * traced data-parallel steps. */
static ferry_status calibrate_collectives(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
					  const struct ferry_exec_opts *opts, struct ferry_calib_coll *want, int n,
					  int repeats, ferry_status st, struct ferry_calibration *c, struct progress *p)
{
	ferry_comm_t host = ferry_comm_host(opts->comm);
	int ranks = ferry_comm_size(opts->comm);

	if ((st = ferry_comm_agree(host, st)))
		return st;
	report(p, "the collectives over %d ranks (%s) at the step's %d size%s", ranks, ferry_comm_engine(opts->comm),
	       n, plural(n));
	if ((st = ferry_comm_agree(host, ferry_calib_measure_collectives(opts->comm, want, n, repeats < 3 ? 3 : repeats,
									  c))))
		return st;
	report(p, "the collectives inside %d traced data-parallel step%s over %d ranks", repeats, plural(repeats),
	       ranks);
	return ferry_comm_agree(host, calibrate_comm_step(be, cfg, B, T, opts, repeats, c));
}

/* Every measurement, in order; the parts as the progress reports them. */
static ferry_status measure(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			    const struct ferry_exec_opts *opts, const struct ferry_exec_opts *o, int repeats,
			    struct ferry_calibration *c, struct progress *p)
{
	size_t sizes[FERRY_CALIB_MAX_SIZES];
	const int n_sizes = transfer_sizes(cfg, B, T, o, sizes, FERRY_CALIB_MAX_SIZES);
	struct ferry_calib_coll want[FERRY_CALIB_MAX_COLL];
	const bool ranks = opts->comm && ferry_comm_size(opts->comm) > 1;
	const int n_coll = ranks ? step_collectives(cfg, B, T, opts, want, FERRY_CALIB_MAX_COLL) : 0;
	double untraced_s = 0;
	ferry_status st;

	p->parts = 3 + (n_sizes > 0) + (opts->host_tiers != NULL) + 2 * ranks;
	report(p, "the model's ops: a warm-up step, then %d traced step%s, each with two untraced", repeats,
	       plural(repeats));
	st = calibrate_ops(be, cfg, B, T, o, repeats, c, &untraced_s);
	if (!st)
		report(p, "compute beside copies: %d traced step%s with every activation offloaded", repeats,
		       plural(repeats));
	if (!st)
		st = calibrate_overlap(be, cfg, B, T, o, repeats, c);
	if (!st && n_sizes)
		report(p, "host<->device copies at %d size%s", n_sizes, plural(n_sizes));
	if (!st && n_sizes)
		st = ferry_calib_measure_copies(be, sizes, n_sizes, repeats, c);
	if (!st)
		report(p, "the CPU AdamW over %.1f million floats", (double)ferry_calib_adamw_floats(cfg) / 1e6);
	if (!st)
		st = calibrate_adamw(c, cfg, repeats);
	if (!st && opts->host_tiers)
		report(p, "the host tiers");
	if (!st && opts->host_tiers)
		st = ferry_calib_measure_tiers(be, opts->host_tiers, sizes, n_sizes, ferry_calib_adamw_floats(cfg),
					       repeats, c);
	if (!st)
		st = fit_in_step(cfg, B, T, o, untraced_s, c);
	if (ranks) /* (also with an error: the other ranks wait for it) */
		st = calibrate_collectives(be, cfg, B, T, opts, want, n_coll, repeats, st, c, p);
	return st;
}

ferry_status ferry_calibrate_progress(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				      const struct ferry_exec_opts *opts, int repeats, ferry_calibration_t base,
				      ferry_calib_progress_fn progress, void *ctx, ferry_calibration_t *out)
{
	struct ferry_calibration *c = ferry_calib_new();
	/* the model's own runs on the backend's host memory: the tiers' figures
	 * are against it, measured apart */
	struct ferry_exec_opts o = *opts;
	struct progress p = { .fn = progress, .ctx = ctx };
	struct ferry_cpu_sample load0, load1;
	ferry_status st = c ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");

	*out = NULL;
	o.host_tiers = NULL;
	o.comm = NULL; /* each rank's steps on its own (beside the others'); the collectives apart */
	if (repeats < 1)
		repeats = 1;
	ferry_cpu_sample_take(&load0);
	if (!st)
		st = ferry_machine_fingerprint(be, c->fingerprint, sizeof(c->fingerprint));
	if (!st && base)
		st = keep_base(c, base);
	if (!st)
		st = measure(be, cfg, B, T, opts, &o, repeats, c, &p);
	if (st) {
		ferry_calibration_free(c);
		return st;
	}
	ferry_cpu_sample_take(&load1);
	c->others_cpu = ferry_cpu_others_share(&load0, &load1);
	*out = c;
	return FERRY_OK;
}

ferry_status ferry_calibrate(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			     const struct ferry_exec_opts *opts, int repeats, ferry_calibration_t base,
			     ferry_calibration_t *out)
{
	return ferry_calibrate_progress(be, cfg, B, T, opts, repeats, base, NULL, NULL, out);
}
