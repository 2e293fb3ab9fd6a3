/*
 * A trace of the tasks a schedule ran (see trace.h): timed events around
 * each task, read back after the run, written as Chrome trace JSON.
 */
#include "sched/trace.h"
#include "core/error.h"
#include "ferry/plan.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ferry_status ferry_trace_begin(struct ferry_sched_trace *tr, ferry_backend_t be, ferry_stream_t origin)
{
	ferry_status st;

	if (tr->be && tr->be != be)
		ferry_trace_release(tr);
	tr->be = be;
	tr->device_live = ferry_backend_mem_live(be);
	tr->n = 0;
	tr->used_ev = 0;
	tr->on = false;
	if (!tr->origin && (st = ferry_event_create_timed(be, &tr->origin)))
		return st;
	if ((st = ferry_event_record(tr->origin, origin)))
		return st;
	tr->on = true;
	return FERRY_OK;
}

/* The next timed event of the pool (made on first use). */
static ferry_status next_event(struct ferry_sched_trace *tr, int *index)
{
	ferry_status st;

	if (tr->used_ev == tr->cap_ev) {
		int cap = tr->cap_ev ? 2 * tr->cap_ev : 512;
		ferry_event_t *ev = ferry_calloc((size_t)cap, sizeof(*ev));

		if (!ev)
			return ferry_error(FERRY_ERR_NOMEM, "trace: out of host memory");
		if (tr->n_ev)
			memcpy(ev, tr->ev, sizeof(*ev) * (size_t)tr->n_ev);
		ferry_free(tr->ev);
		tr->ev = ev;
		tr->cap_ev = cap;
	}
	if (tr->used_ev == tr->n_ev) {
		if ((st = ferry_event_create_timed(tr->be, &tr->ev[tr->n_ev])))
			return st;
		tr->n_ev++;
	}
	*index = tr->used_ev++;
	return FERRY_OK;
}

static ferry_status add_slice(struct ferry_sched_trace *tr, const struct ferry_program *p, const struct ferry_task *t)
{
	struct ferry_trace_slice *sl;

	if (tr->n == tr->cap) {
		int cap = tr->cap ? 2 * tr->cap : 256;
		struct ferry_trace_slice *s = ferry_calloc((size_t)cap, sizeof(*s));

		if (!s)
			return ferry_error(FERRY_ERR_NOMEM, "trace: out of host memory");
		if (tr->n)
			memcpy(s, tr->s, sizeof(*s) * (size_t)tr->n);
		ferry_free(tr->s);
		tr->s = s;
		tr->cap = cap;
	}
	sl = &tr->s[tr->n++];
	memset(sl, 0, sizeof(*sl));
	snprintf(sl->label, sizeof(sl->label), "%s", t->label);
	snprintf(sl->program, sizeof(sl->program), "%s", p->name);
	sl->kind = t->kind;
	sl->copy_kind = t->copy_kind;
	sl->stream = t->stream;
	sl->layer = t->layer;
	sl->bytes = t->kind == FERRY_TASK_OP ? 0 : t->bytes;
	sl->ev0 = sl->ev1 = -1;
	sl->task = t;
	return FERRY_OK;
}

bool ferry_trace_timed_kind(enum ferry_task_kind k)
{
	return k == FERRY_TASK_OP || k == FERRY_TASK_COPY || k == FERRY_TASK_ZERO || k == FERRY_TASK_HOST ||
	       k == FERRY_TASK_FILE || k == FERRY_TASK_COMM;
}

ferry_status ferry_trace_task(struct ferry_sched_trace *tr, const struct ferry_program *p,
			      const struct ferry_task *t, ferry_stream_t s, bool after)
{
	ferry_status st;
	int e = -1;

	if (!tr || !tr->on || !ferry_trace_timed_kind(t->kind))
		return FERRY_OK;
	if (!after && (st = add_slice(tr, p, t)))
		return st;
	if ((st = next_event(tr, &e)) || (st = ferry_event_record(tr->ev[e], s)))
		return st;
	if (after)
		tr->s[tr->n - 1].ev1 = e;
	else
		tr->s[tr->n - 1].ev0 = e;
	return FERRY_OK;
}

static const char *slice_kind(const struct ferry_trace_slice *sl)
{
	if (sl->kind == FERRY_TASK_COPY)
		return sl->copy_kind == FERRY_COPY_D2H ? "copy to host" :
		       sl->copy_kind == FERRY_COPY_H2D ? "copy to device" : "copy on device";
	if (sl->kind == FERRY_TASK_FILE)
		return sl->copy_kind == FERRY_COPY_D2H ? "write to NVMe" : "read from NVMe";
	return ferry_task_kind_name(sl->kind);
}

/* One slice as a complete ("X") event, times in microseconds from t0. */
static json_t *slice_json(const struct ferry_trace_slice *sl, double start, double end, double t0)
{
	json_t *args = json_pack("{s:s, s:i, s:I}", "program", sl->program, "layer", sl->layer, "bytes",
				 (json_int_t)sl->bytes);

	return json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", sl->label[0] ? sl->label : "(task)",
			 "cat", slice_kind(sl), "ph", "X", "ts", (start - t0) * 1e6, "dur", (end - start) * 1e6,
			 "pid", 1, "tid", sl->stream, "args", args);
}

/* Slice times from the origin: times[2i], times[2i+1]; and the earliest. */
static ferry_status read_times(const struct ferry_sched_trace *tr, double *times, double *t0)
{
	ferry_status st;

	*t0 = 0;
	for (int i = 0; i < tr->n; i++) {
		const struct ferry_trace_slice *sl = &tr->s[i];

		if (sl->ev0 < 0 || sl->ev1 < 0)
			return ferry_error(FERRY_ERR_INVALID, "trace: task '%s' was not submitted whole", sl->label);
		if ((st = ferry_event_elapsed(tr->origin, tr->ev[sl->ev0], &times[2 * i])) ||
		    (st = ferry_event_elapsed(tr->origin, tr->ev[sl->ev1], &times[2 * i + 1])))
			return st;
		if (i == 0 || times[2 * i] < *t0)
			*t0 = times[2 * i];
	}
	return FERRY_OK;
}

static json_t *counter(const char *name, const char *key, double ts, double value)
{
	return json_pack("{s:s, s:s, s:i, s:f, s:{s:f}}", "ph", "C", "name", name, "pid", 1, "ts", ts, "args", key,
			 value);
}

/* Offloaded activations on the host: + when a forward copy out of a
 * layer's tensor ends, - when a backward copy in ends (the losses the
 * forward sends the host are not a layer's). */
static double held_delta(const struct ferry_trace_slice *sl)
{
	if (sl->kind != FERRY_TASK_COPY || sl->layer < 0)
		return 0;
	if (sl->copy_kind == FERRY_COPY_D2H && !strcmp(sl->program, "forward"))
		return (double)sl->bytes;
	if (sl->copy_kind == FERRY_COPY_H2D && !strcmp(sl->program, "backward"))
		return -(double)sl->bytes;
	return 0;
}

static int cmp_change(const void *a, const void *b)
{
	const double *x = a, *y = b;

	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Host memory at time ts: one counter per host tier, and what is outside
 * the tiers (all of it without tiers: DRAM). */
static void add_host_counters(json_t *ev, const struct ferry_sched_trace *tr, double ts)
{
	char name[96];
	size_t tiered = 0;

	for (int i = 0; i < tr->n_tiers; i++) {
		snprintf(name, sizeof(name), "host memory (tier %d: %s)", i, tr->tier_name[i]);
		json_array_append_new(ev, counter(name, "bytes", ts, (double)tr->tier_bytes[i]));
		tiered += tr->tier_bytes[i];
	}
	if (!tr->n_tiers)
		json_array_append_new(ev, counter("host memory (tier 0: DRAM)", "bytes", ts, (double)tr->host_bytes));
	else if (tr->host_bytes > tiered)
		json_array_append_new(ev, counter("host memory (outside the tiers: DRAM)", "bytes", ts,
						  (double)(tr->host_bytes - tiered)));
}

/* The counter tracks (times in microseconds from t0). */
static void add_counters(json_t *ev, const struct ferry_sched_trace *tr, const double *times, double t0)
{
	const char *held = "offloaded activations on the host";
	double end = 0, *ch = ferry_calloc((size_t)(2 * tr->n + 2), sizeof(double)), level = 0;
	int n = 0;

	for (int i = 0; i < tr->n; i++) {
		double t = (times[2 * i + 1] - t0) * 1e6, d = held_delta(&tr->s[i]);

		end = t > end ? t : end;
		if (ch && d != 0)
			ch[2 * n] = t, ch[2 * n + 1] = d, n++;
	}
	for (int k = 0; k < 2; k++) {
		json_array_append_new(ev, counter("device memory", "live bytes", k ? end : 0, (double)tr->device_live));
		add_host_counters(ev, tr, k ? end : 0);
	}
	json_array_append_new(ev, counter(held, "bytes", 0, 0));
	if (!ch)
		return;
	qsort(ch, (size_t)n, 2 * sizeof(double), cmp_change);
	for (int i = 0; i < n; i++) {
		level += ch[2 * i + 1];
		json_array_append_new(ev, counter(held, "bytes", ch[2 * i], level));
	}
	ferry_free(ch);
}

static json_t *trace_json(const struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
			  const char *about, const double *times, double t0)
{
	json_t *ev = json_array(), *root;

	json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:{s:s}}", "ph", "M", "name", "process_name", "pid",
					    1, "args", "name", about ? about : "ferry"));
	for (int s = 0; s < res->n_streams; s++)
		json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "ph", "M", "name",
						    "thread_name", "pid", 1, "tid", s, "args", "name",
						    res->stream_name[s]));
	for (int i = 0; i < tr->n; i++)
		json_array_append_new(ev, slice_json(&tr->s[i], times[2 * i], times[2 * i + 1], t0));
	add_counters(ev, tr, times, t0);
	root = json_pack("{s:o, s:s}", "traceEvents", ev, "displayTimeUnit", "ms");
	return root;
}

/* Span and busy time per stream (tasks of one stream never overlap). */
static void trace_stats(const struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
			const double *times, double t0, struct ferry_trace_stats *st)
{
	double end = t0;

	memset(st, 0, sizeof(*st));
	st->n_streams = res->n_streams < FERRY_SCHED_MAX_STREAMS ? res->n_streams : FERRY_SCHED_MAX_STREAMS;
	for (int s = 0; s < st->n_streams; s++)
		snprintf(st->stream[s], sizeof(st->stream[s]), "%s", res->stream_name[s]);
	for (int i = 0; i < tr->n; i++) {
		if (tr->s[i].stream < FERRY_SCHED_MAX_STREAMS)
			st->busy_s[tr->s[i].stream] += times[2 * i + 1] - times[2 * i];
		if (times[2 * i + 1] > end)
			end = times[2 * i + 1];
	}
	st->span_s = end - t0;
}

/* The trace as JSON into path, whole or not at all. */
static ferry_status write_json(json_t *root, const char *path)
{
	char tmp[4200];

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()) >= sizeof(tmp))
		return ferry_error(FERRY_ERR_INVALID, "trace: path too long");
	if (json_dump_file(root, tmp, JSON_COMPACT) != 0) {
		unlink(tmp);
		return ferry_error(FERRY_ERR_IO, "cannot write the trace to %s", tmp);
	}
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		return ferry_error(FERRY_ERR_IO, "cannot rename the trace to %s", path);
	}
	return FERRY_OK;
}

ferry_status ferry_trace_add(struct ferry_sched_trace *tr, const struct ferry_program *p, const struct ferry_task *t)
{
	return ferry_trace_timed_kind(t->kind) ? add_slice(tr, p, t) : FERRY_OK;
}

ferry_status ferry_trace_write_at(const struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
				  const char *about, const double *times, const char *path)
{
	double t0 = 0;
	json_t *root;
	ferry_status st;

	for (int i = 0; i < tr->n; i++)
		t0 = i == 0 || times[2 * i] < t0 ? times[2 * i] : t0;
	if (!(root = trace_json(tr, res, about, times, t0)))
		return ferry_error(FERRY_ERR_NOMEM, "trace: out of host memory");
	st = write_json(root, path);
	json_decref(root);
	return st;
}

ferry_status ferry_trace_write(struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
			       const char *about, const char *path)
{
	return ferry_trace_finish(tr, res, about, path, NULL);
}

ferry_status ferry_trace_finish(struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
				const char *about, const char *path, struct ferry_trace_stats *stats)
{
	double *times, t0;
	ferry_status st;

	if (!tr->on)
		return ferry_error(FERRY_ERR_INVALID, "trace: none was started");
	tr->on = false;
	times = ferry_calloc((size_t)(tr->n ? 2 * tr->n : 1), sizeof(double));
	if (!times)
		return ferry_error(FERRY_ERR_NOMEM, "trace: out of host memory");
	if ((st = read_times(tr, times, &t0))) {
		ferry_free(times);
		return st;
	}
	if (stats)
		trace_stats(tr, res, times, t0, stats);
	st = path ? ferry_trace_write_at(tr, res, about, times, path) : FERRY_OK;
	ferry_free(times);
	return st;
}

ferry_status ferry_trace_collect(struct ferry_sched_trace *tr, double *times)
{
	double t0;

	if (!tr->on)
		return ferry_error(FERRY_ERR_INVALID, "trace: none was started");
	tr->on = false;
	return read_times(tr, times, &t0);
}

void ferry_trace_release(struct ferry_sched_trace *tr)
{
	for (int i = 0; i < tr->n_ev; i++)
		ferry_event_free(tr->ev[i]);
	if (tr->origin)
		ferry_event_free(tr->origin);
	ferry_free(tr->ev);
	ferry_free(tr->s);
	memset(tr, 0, sizeof(*tr));
}
