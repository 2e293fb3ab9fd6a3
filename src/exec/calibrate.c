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
 *  - the CPU AdamW over a million floats.
 */
#include "exec/model_internal.h"
#include "optim/cpu_adamw.h"
#include "plan/calibration.h"
#include "core/error.h"

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
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

/* One traced step's slices into the samples. */
static ferry_status read_slices(ferry_model_t m, struct samples *a)
{
	struct ferry_sched_trace *tr = &m->trace;
	double *t = ferry_calloc((size_t)(2 * tr->n + 1), sizeof(double));
	ferry_status st;

	if (!t)
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	st = ferry_trace_collect(tr, t);
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

/* A warm-up step, then `repeats` traced ones. */
static ferry_status traced_steps(ferry_model_t m, int B, int T, int repeats, struct samples *a)
{
	struct ferry_adamw opt = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f };
	long n = (long)B * T;
	int32_t *in = ferry_calloc((size_t)n, sizeof(int32_t)), *tg = ferry_calloc((size_t)n, sizeof(int32_t));
	ferry_status st = in && tg ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	float loss, norm;

	for (int s = 0; s <= repeats && !st; s++) {
		batch(m->cfg.vocab, in, tg, n, s);
		if (s > 0 && (st = ferry_model_trace_begin(m)))
			break;
		if ((st = ferry_model_step_submit(m, in, tg, B, T)) ||
		    (st = ferry_model_step_finish(m, &opt, s + 1, &loss, &norm)) || (st = ferry_model_sync(m)))
			break;
		if (s > 0)
			st = read_slices(m, a);
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
	if (a->d2d_s > 0)
		c->d2d_Bps = a->d2d_bytes / a->d2d_s;
	return st;
}

/* Ops at the model's shapes, from traced steps. */
static ferry_status calibrate_ops(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				  const struct ferry_exec_opts *opts, int repeats, struct ferry_calibration *c)
{
	struct samples a;
	ferry_model_t m = NULL;
	ferry_status st;

	memset(&a, 0, sizeof(a));
	if (!(st = ferry_model_create(be, cfg, B, T, opts, &m)) && !(st = ferry_model_init_random(m, 1)))
		st = traced_steps(m, B, T, repeats, &a);
	ferry_model_free(m);
	if (!st)
		st = op_medians(&a, c);
	ferry_free(a.v);
	return st;
}

/* The CPU AdamW's rate over a million floats (what one layer's slice is,
 * give or take). */
static ferry_status calibrate_adamw(struct ferry_calibration *c, int repeats)
{
	const long n = 1 << 20;
	float *buf = ferry_calloc((size_t)(4 * n), sizeof(float));
	struct ferry_cpu_adamw_args a = { .n = n, .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					  .weight_decay = 0.1f, .grad_scale = 1, .step = 1 };
	double best = 0;
	ferry_status st = FERRY_OK;

	if (!buf)
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	a.param = buf, a.m = buf + n, a.v = buf + 2 * n, a.grad = buf + 3 * n;
	for (int r = 0; r <= repeats && !st; r++) {
		double t0 = now_s();

		st = ferry_cpu_adamw_step(&a);
		if (r > 0 && (best == 0 || now_s() - t0 < best))
			best = now_s() - t0;
	}
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
	for (int i = 0; i < plan.n_tensors; i++) {
		size_t b = plan.tensors[i].layer_bytes;
		bool seen = b == 0;

		for (int k = 0; k < n; k++)
			seen |= sizes[k] == b;
		if (!seen && n < max)
			sizes[n++] = b;
	}
	return n;
}

ferry_status ferry_calibrate(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			     const struct ferry_exec_opts *opts, int repeats, ferry_calibration_t base,
			     ferry_calibration_t *out)
{
	struct ferry_calibration *c = ferry_calib_new();
	size_t sizes[16];
	int n_sizes;
	ferry_status st = c ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");

	*out = NULL;
	if (repeats < 1)
		repeats = 1;
	if (!st)
		st = ferry_machine_fingerprint(be, c->fingerprint, sizeof(c->fingerprint));
	for (int i = 0; base && !st && i < base->n_ops; i++) /* what this run does not measure again */
		st = ferry_calib_add_op(c, &base->ops[i]);
	if (!st && base) {
		for (int i = 0; i < base->n_copy; i++)
			ferry_calib_add_copy(c, &base->copy[i]);
		c->d2d_Bps = base->d2d_Bps, c->zero_Bps = base->zero_Bps;
		c->adamw_floats_per_s = base->adamw_floats_per_s;
	}
	if (!st)
		st = calibrate_ops(be, cfg, B, T, opts, repeats, c);
	n_sizes = st ? 0 : transfer_sizes(cfg, B, T, opts, sizes, 16);
	if (!st && n_sizes)
		st = ferry_calib_measure_copies(be, sizes, n_sizes, repeats, c);
	if (!st)
		st = calibrate_adamw(c, repeats);
	if (st)
		ferry_calibration_free(c);
	else
		*out = c;
	return st;
}
