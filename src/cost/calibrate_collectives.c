/*
 * Collectives in a calibration (cost/calibration.h): measured over the
 * ranks of a run at the sizes its step averages and gathers, and priced
 * from those, per engine and number of ranks, never across them (two
 * ranks on one machine and eight over a network are different things).
 */
#include "cost/calibration.h"
#include "core/clock.h"
#include "core/error.h"
#include "ferry/comm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

const char *ferry_calib_coll_name(enum ferry_calib_coll_kind k)
{
	static const char *const names[FERRY_COLL_KINDS] = { "all_reduce", "reduce_scatter", "all_gather" };

	return k >= 0 && k < FERRY_COLL_KINDS ? names[k] : "?";
}

static bool same_place(const struct ferry_calib_coll *e, enum ferry_calib_coll_kind k, const char *engine, int ranks)
{
	return e->kind == k && e->ranks == ranks && !strcmp(e->engine, engine);
}

void ferry_calib_add_coll(struct ferry_calibration *c, const struct ferry_calib_coll *e)
{
	for (int i = 0; i < c->n_coll; i++)
		if (same_place(&c->coll[i], e->kind, e->engine, e->ranks) && c->coll[i].bytes == e->bytes) {
			c->coll[i] = *e;
			return;
		}
	if (c->n_coll < FERRY_CALIB_MAX_COLL)
		c->coll[c->n_coll++] = *e;
}

/* The seconds at x bytes on the line through a and b (two sizes). */
static double on_line(const struct ferry_calib_coll *a, const struct ferry_calib_coll *b, double x)
{
	double slope = ((double)b->seconds - a->seconds) / ((double)b->bytes - (double)a->bytes);

	return a->seconds + slope * (x - (double)a->bytes);
}

double ferry_calib_coll_seconds(const struct ferry_calibration *c, enum ferry_calib_coll_kind k, const char *engine,
				int ranks, size_t bytes, bool *missing)
{
	const struct ferry_calib_coll *lo = NULL, *hi = NULL, *below_lo = NULL;

	for (int i = 0; i < c->n_coll; i++) {
		const struct ferry_calib_coll *e = &c->coll[i];

		if (!same_place(e, k, engine, ranks))
			continue;
		if (e->bytes <= bytes && (!lo || e->bytes > lo->bytes))
			below_lo = lo, lo = e;
		else if (e->bytes <= bytes && (!below_lo || e->bytes > below_lo->bytes))
			below_lo = e;
		if (e->bytes >= bytes && (!hi || e->bytes < hi->bytes))
			hi = e;
	}
	if (!lo && !hi) {
		*missing = true;
		return 0;
	}
	if (!lo) /* smaller than any measured: latency-bound */
		return hi->seconds;
	if (!hi) { /* larger than any: the bandwidth of the two largest */
		double s = below_lo ? on_line(below_lo, lo, (double)bytes) : 0;

		return s > lo->seconds ? s : lo->seconds * (double)bytes / (double)lo->bytes;
	}
	return lo == hi ? lo->seconds : on_line(lo, hi, (double)bytes);
}

void ferry_calib_add_comm_step(struct ferry_calibration *c, const struct ferry_calib_comm_step *e)
{
	struct ferry_calib_comm_step *old = (struct ferry_calib_comm_step *)ferry_calib_comm_step_find(c, e->engine,
												     e->ranks);

	if (old)
		*old = *e;
	else if (c->n_comm_step < FERRY_CALIB_MAX_COMM_STEP)
		c->comm_step[c->n_comm_step++] = *e;
}

const struct ferry_calib_comm_step *ferry_calib_comm_step_find(const struct ferry_calibration *c,
							      const char *engine, int ranks)
{
	for (int i = 0; i < c->n_comm_step; i++)
		if (c->comm_step[i].ranks == ranks && !strcmp(c->comm_step[i].engine, engine))
			return &c->comm_step[i];
	return NULL;
}

enum ferry_calib_coll_kind ferry_calib_coll_of_task(const struct ferry_task *t, int ranks, size_t *bytes)
{
	*bytes = t->bytes;
	switch (t->comm_job) {
	case FERRY_COMM_JOB_GATHER: /* `bytes` per rank */
		return FERRY_COLL_ALL_GATHER;
	case FERRY_COMM_JOB_COLLECT: /* `bytes` whole, gathered from the slices */
		*bytes = t->bytes / (size_t)(ranks > 0 ? ranks : 1);
		return FERRY_COLL_ALL_GATHER;
	case FERRY_COMM_JOB_SCATTER:
		return FERRY_COLL_REDUCE_SCATTER;
	default: /* averages, and the norm's doubles summed */
		return FERRY_COLL_ALL_REDUCE;
	}
}

double ferry_calib_comm_task_seconds(const struct ferry_calibration *c, const struct ferry_task *t, bool *missing)
{
	enum ferry_calib_coll_kind k;
	size_t bytes;

	if (!t->comm || ferry_comm_size(t->comm) < 2)
		return 0; /* one rank: nothing to exchange */
	k = ferry_calib_coll_of_task(t, ferry_comm_size(t->comm), &bytes);
	return ferry_calib_coll_seconds(c, k, ferry_comm_engine(t->comm), ferry_comm_size(t->comm), bytes, missing);
}

/* A sum in steps over a sum alone, 0 where too small to be one (none
 * measured), at most 1e4. */
static double ratio_of(double in, double alone)
{
	double r = alone > 0 ? in / alone : 0;

	return r < 1e-3 ? 0 : r > 1e4 ? 1e4 : r;
}

void ferry_calib_in_step_ratios(const double *r, int n, double *beside, double *idle)
{
	double in[2] = { 0, 0 }, alone[2] = { 0, 0 }; /* [0] idle, [1] beside */

	for (int i = 0; i + 2 < n; i += 3) {
		in[r[i + 2] >= 0.5] += r[i];
		alone[r[i + 2] >= 0.5] += r[i + 1];
	}
	*idle = ratio_of(in[0], alone[0]);
	*beside = ratio_of(in[1], alone[1]);
	if (*beside == 0)
		*beside = *idle;
	if (*idle == 0)
		*idle = *beside;
}

/* ---- measuring ------------------------------------------------------------------- */

/* One call of e's collective on buf (room for the largest of any kind). */
static ferry_status call(struct ferry_comm *comm, const struct ferry_calib_coll *e, char *buf)
{
	size_t n = e->bytes / sizeof(float), per = n / (size_t)e->ranks;

	switch (e->kind) {
	case FERRY_COLL_ALL_REDUCE:
		return ferry_comm_all_reduce(comm, buf, n, FERRY_COMM_F32, FERRY_COMM_AVG, NULL);
	case FERRY_COLL_REDUCE_SCATTER:
		return ferry_comm_reduce_scatter(comm, buf, buf + e->bytes, per ? per : 1, FERRY_COMM_F32,
						 FERRY_COMM_AVG, NULL);
	default:
		return ferry_comm_all_gather(comm, buf + (size_t)ferry_comm_rank(comm) * e->bytes, buf, e->bytes,
					     FERRY_COMM_BYTE, NULL);
	}
}

/* Calls to time at a size: at least `repeats`, more where they are
 * short (a call preempted on a shared machine takes milliseconds, and the
 * fastest of a few short ones is still one of those); the same count on
 * every rank, never from a time measured (ranks would diverge). */
static int calls_at(size_t bytes, int repeats)
{
	int n = bytes < ((size_t)1 << 20) ? 30 : bytes < ((size_t)16 << 20) ? 10 : repeats;

	return n > repeats ? n : repeats;
}

/* The fastest of the calls after a warm-up, each after a barrier (so no
 * rank's lateness counts), the slowest rank's, into e->seconds. */
static ferry_status time_one(struct ferry_comm *comm, struct ferry_calib_coll *e, char *buf, int repeats)
{
	double best = INFINITY;
	ferry_status st = call(comm, e, buf);

	for (int r = 0; r < calls_at(e->bytes, repeats) && !st; r++) {
		double t0;

		if ((st = ferry_comm_barrier(comm)))
			break;
		t0 = ferry_now_s();
		st = call(comm, e, buf);
		best = fmin(best, ferry_now_s() - t0);
	}
	if (!st)
		st = ferry_comm_all_reduce(comm, &best, 1, FERRY_COMM_F64, FERRY_COMM_MAX, NULL);
	e->seconds = best > 1e-9 ? best : 1e-9;
	return st;
}

/* Bytes a buffer needs for every entry (an all-gather's every slice, a
 * reduce-scatter's array and its slice behind). */
static size_t buffer_bytes(const struct ferry_calib_coll *want, int n, int ranks)
{
	size_t most = 0;

	for (int i = 0; i < n; i++) {
		size_t b = want[i].kind == FERRY_COLL_ALL_GATHER ? want[i].bytes * (size_t)ranks : 2 * want[i].bytes;

		most = b > most ? b : most;
	}
	return most + 64;
}

ferry_status ferry_calib_measure_collectives(struct ferry_comm *comm, struct ferry_calib_coll *want, int n,
					     int repeats, struct ferry_calibration *c)
{
	int ranks = ferry_comm_size(comm);
	char *buf;
	ferry_status st = FERRY_OK;

	if (ferry_comm_device_buffers(comm))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "calibrate: collectives of the %s engine (device buffers) "
				   "are not measured yet", ferry_comm_engine(comm));
	if (!(buf = ferry_calloc(buffer_bytes(want, n, ranks), 1)))
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory for the collectives");
	/* the engine's first calls set up its buffers between the ranks */
	for (int i = 0; i < 10 && !st; i++)
		st = ferry_comm_barrier(comm);
	for (int i = 0; i < n && !st; i++) {
		want[i].ranks = ranks;
		snprintf(want[i].engine, sizeof(want[i].engine), "%s", ferry_comm_engine(comm));
		if (!(st = time_one(comm, &want[i], buf, repeats)))
			ferry_calib_add_coll(c, &want[i]);
	}
	ferry_free(buf);
	return st;
}
