/*
 * The cost model's simulation (see cost_model.h): time advances from one
 * task's end to the next; between two such instants every running task
 * progresses at its rate (1, or 1/both_slowdown for a copy while the other
 * direction copies on its own engine; a collective's by whether the
 * compute stream runs a task).
 */
#include "cost/cost_model.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

#define NS FERRY_SCHED_MAX_STREAMS

struct sim {
	const struct ferry_sim_params *prm;
	const struct ferry_task **t; /* every task, in submission order */
	const double *dur;
	int n, gate, compute;        /* gate: first task after the host's synchronisation */
	int *order[NS], len[NS], pos[NS];
	int *rec_of;                 /* WAIT: the record it refers to, -1 none */
	double *reached;             /* RECORD: when its stream reached it, < 0 not yet */
	bool copy_stream[NS];        /* the stream moves data between host and device */
	bool comm_stream[NS];        /* the stream runs collectives */
	int running[NS];             /* the task running on each stream, -1 none */
	double left[NS], wait_since[NS];
	double comm_from[NS];        /* a collective: when the other ranks have reached it */
	double ready[NS];            /* when the events the stream last waited for were recorded */
	int engine_of[NS];           /* the engine the running task holds, -1 none */
	bool engine_busy[2];
	int gate_need;               /* compute tasks before the gate */
	bool released;
	double release_t, now;
	struct ferry_sim_result *out;
};

static bool host_copy(const struct ferry_task *t)
{
	return t->kind == FERRY_TASK_COPY && (t->copy_kind == FERRY_COPY_D2H || t->copy_kind == FERRY_COPY_H2D);
}

static int engine(const struct sim *s, const struct ferry_task *t)
{
	return s->prm->shared_copy_engine || t->copy_kind == FERRY_COPY_D2H ? 0 : 1;
}

/* Streams' task lists and each wait's record. */
static ferry_status index_tasks(struct sim *s, int n_events_hint)
{
	int *last = NULL, n_ev = n_events_hint;

	for (int g = 0; g < s->n; g++)
		if (s->t[g]->event + 1 > n_ev)
			n_ev = s->t[g]->event + 1;
	last = ferry_calloc((size_t)(n_ev + 1), sizeof(int));
	for (int k = 0; k < NS; k++)
		s->order[k] = ferry_calloc((size_t)(s->n + 1), sizeof(int));
	s->rec_of = ferry_calloc((size_t)(s->n + 1), sizeof(int));
	s->reached = ferry_calloc((size_t)(s->n + 1), sizeof(double));
	bool ok = last && s->rec_of && s->reached;

	for (int k = 0; k < NS; k++)
		ok &= s->order[k] != NULL;
	if (!ok) {
		ferry_free(last);
		return ferry_error(FERRY_ERR_NOMEM, "cost model: out of host memory");
	}
	for (int e = 0; e < n_ev; e++)
		last[e] = -1;
	for (int g = 0; g < s->n; g++) {
		const struct ferry_task *t = s->t[g];

		if (t->stream < 0 || t->stream >= NS) {
			ferry_free(last);
			return ferry_error(FERRY_ERR_INVALID, "cost model: task %d on stream %d", g, t->stream);
		}
		s->order[t->stream][s->len[t->stream]++] = g;
		s->reached[g] = -1;
		s->rec_of[g] = t->kind == FERRY_TASK_WAIT && t->event >= 0 ? last[t->event] : -1;
		if (t->kind == FERRY_TASK_RECORD && t->event >= 0)
			last[t->event] = g;
		if (host_copy(t))
			s->copy_stream[t->stream] = true;
		if (t->kind == FERRY_TASK_COMM)
			s->comm_stream[t->stream] = true;
		if (g < s->gate && t->stream == s->compute)
			s->gate_need++;
	}
	ferry_free(last);
	return FERRY_OK;
}

/* When task g started (end: ended), for the timeline. */
static void mark(struct sim *s, int g, bool end)
{
	if (s->prm->times)
		s->prm->times[2 * g + end] = s->now;
}

/* One task leaves its stream's queue. */
static void advance(struct sim *s, int k)
{
	mark(s, s->order[k][s->pos[k]], true);
	s->pos[k]++;
	if (!s->released && k == s->compute && s->pos[k] == s->gate_need) {
		s->released = true;
		s->release_t = s->now + s->prm->sync_s;
	}
}

/* Tries the next task of stream k at the current time: true if it moved. */
static bool try_stream(struct sim *s, int k)
{
	int g;
	const struct ferry_task *t;

	if (s->running[k] >= 0 || s->pos[k] == s->len[k])
		return false;
	g = s->order[k][s->pos[k]];
	t = s->t[g];
	if (g >= s->gate && !(s->released && s->now >= s->release_t))
		return false;
	switch (t->kind) {
	case FERRY_TASK_RECORD:
		s->reached[g] = s->now;
		break;
	case FERRY_TASK_WAIT: {
		int r = s->rec_of[g];

		if (r >= 0 && s->reached[r] < 0) {
			if (s->wait_since[k] < 0)
				s->wait_since[k] = s->now;
			return false;
		}
		if (r >= 0)
			s->ready[k] = fmax(s->ready[k], s->reached[r]);
		if (k == s->compute && r >= 0 && s->wait_since[k] >= 0 && s->copy_stream[s->t[r]->stream])
			s->out->exposed_copy_s += s->now - s->wait_since[k];
		else if (k == s->compute && r >= 0 && s->wait_since[k] >= 0 && s->comm_stream[s->t[r]->stream])
			s->out->exposed_comm_s += s->now - s->wait_since[k];
		s->wait_since[k] = -1;
		break;
	}
	case FERRY_TASK_GRADS_DONE:
		break;
	default:
		if (host_copy(t)) {
			if (s->engine_busy[engine(s, t)])
				return false;
			s->engine_busy[engine(s, t)] = true;
			s->engine_of[k] = engine(s, t);
		}
		s->running[k] = g;
		s->left[k] = s->dur[g] > 0 ? s->dur[g] : 0;
		/* the other ranks reach it skew later: it waits for them first */
		s->comm_from[k] = fmax(s->now, s->ready[k] + s->prm->comm_skew_s);
		mark(s, g, false);
		return true;
	}
	mark(s, g, false);
	advance(s, k);
	return true;
}

/* Starts everything that can start now; streams whose next task comes
 * first in submission order go first (they asked for an engine first). */
static void start_ready(struct sim *s)
{
	bool moved = true;

	while (moved) {
		int best = -1;

		moved = false;
		for (int k = 0; k < NS; k++) {
			if (s->running[k] >= 0 || s->pos[k] == s->len[k])
				continue;
			if (!host_copy(s->t[s->order[k][s->pos[k]]])) {
				moved |= try_stream(s, k);
			} else if (best < 0 || s->order[k][s->pos[k]] < s->order[best][s->pos[best]]) {
				best = k;
			}
		}
		if (best >= 0)
			moved |= try_stream(s, best);
	}
}

static bool comm_running(const struct sim *s)
{
	for (int k = 0; k < NS; k++)
		if (s->running[k] >= 0 && s->t[s->running[k]]->kind == FERRY_TASK_COMM)
			return true;
	return false;
}

/* The compute stream's rate: slowed while copies or collectives run. */
static double compute_rate(const struct sim *s)
{
	double f = 1;

	if ((s->engine_busy[0] || s->engine_busy[1]) && s->prm->copy_compute_slowdown > f)
		f = s->prm->copy_compute_slowdown;
	if (s->prm->comm_compute_slowdown > f && comm_running(s))
		f = s->prm->comm_compute_slowdown;
	return 1 / f;
}

/* A collective's rate: none while it waits for the other ranks, then by
 * whether the compute stream runs a task beside it. */
static double comm_rate(const struct sim *s, int k)
{
	double f = s->running[s->compute] >= 0 ? s->prm->comm_beside : s->prm->comm_idle;

	if (s->comm_from[k] > s->now + 1e-12)
		return 0;
	return f > 0 ? 1 / f : 1;
}

static double rate(const struct sim *s, int k)
{
	int e = s->engine_of[k];

	if (e < 0 && s->t[s->running[k]]->kind == FERRY_TASK_COMM)
		return comm_rate(s, k);
	if (e < 0)
		return k == s->compute ? compute_rate(s) : 1;
	if (s->prm->shared_copy_engine || !s->engine_busy[1 - e] || s->prm->both_slowdown <= 1)
		return 1;
	return 1 / s->prm->both_slowdown;
}

/* Moves time to the next task's end (or the host's release); false when
 * nothing runs and nothing can. */
static bool step_time(struct sim *s)
{
	double dt = INFINITY, r[NS] = { 0 };

	for (int k = 0; k < NS; k++)
		if (s->running[k] >= 0) {
			r[k] = rate(s, k);
			dt = fmin(dt, r[k] > 0 ? s->left[k] / r[k] : s->comm_from[k] - s->now);
		}
	if (s->released && s->now < s->release_t)
		dt = fmin(dt, s->release_t - s->now);
	if (!isfinite(dt))
		return false;
	s->now += dt;
	for (int k = 0; k < NS; k++) {
		if (s->running[k] < 0)
			continue;
		s->left[k] -= dt * r[k];
		s->out->busy_s[k] += dt;
		if (s->engine_of[k] >= 0)
			s->out->copy_s += dt;
		if (s->t[s->running[k]]->kind == FERRY_TASK_COMM)
			s->out->comm_s += dt;
		if (s->left[k] <= 1e-12) {
			if (s->engine_of[k] >= 0)
				s->engine_busy[s->engine_of[k]] = false;
			s->engine_of[k] = -1;
			s->running[k] = -1;
			advance(s, k);
		}
	}
	return true;
}

static bool finished(const struct sim *s)
{
	for (int k = 0; k < NS; k++)
		if (s->pos[k] < s->len[k])
			return false;
	return true;
}

static ferry_status simulate(struct sim *s)
{
	for (int k = 0; k < NS; k++) {
		s->running[k] = s->engine_of[k] = -1;
		s->wait_since[k] = -1;
	}
	if (s->gate_need == 0) {
		s->released = true;
		s->release_t = s->prm->sync_s;
	}
	for (;;) {
		start_ready(s);
		if (finished(s))
			break;
		if (!step_time(s)) {
			for (int k = 0; k < NS; k++)
				if (s->pos[k] < s->len[k])
					return ferry_error(FERRY_ERR_INVALID, "cost model: stream %d waits forever at "
							   "task '%s'", k, s->t[s->order[k][s->pos[k]]]->label);
		}
	}
	s->out->step_s = s->now;
	return FERRY_OK;
}

ferry_status ferry_sim_run(const struct ferry_program *const *progs, int n, int sync_after, int compute_stream,
			   const double *dur, const struct ferry_sim_params *prm, struct ferry_sim_result *out)
{
	struct sim s;
	ferry_status st;
	int total = 0;

	memset(&s, 0, sizeof(s));
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < n; i++)
		total += progs[i]->n;
	s.prm = prm;
	s.dur = dur;
	s.out = out;
	s.compute = compute_stream;
	s.gate = total;
	s.t = ferry_calloc((size_t)total + 1, sizeof(*s.t));
	if (!s.t)
		return ferry_error(FERRY_ERR_NOMEM, "cost model: out of host memory");
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < progs[i]->n; k++)
			s.t[s.n++] = &progs[i]->t[k];
		if (i == sync_after)
			s.gate = s.n;
	}
	out->n_tasks = s.n;
	st = index_tasks(&s, 0);
	if (!st)
		st = simulate(&s);
	for (int k = 0; k < NS; k++)
		ferry_free(s.order[k]);
	ferry_free(s.rec_of);
	ferry_free(s.reached);
	ferry_free(s.t);
	return st;
}
