/*
 * Internal: a trace of the tasks a schedule ran, for Perfetto.
 *
 * While a trace is on, every op, copy and zero a program submits is
 * bracketed by two timed events on its stream; after the work has run,
 * their completion times (relative to an origin event) give each task's
 * slice.  ferry_trace_write() writes Chrome trace JSON, which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: one track per stream, one
 * slice per task named by its tensor, with its program, layer and bytes,
 * and counters: the device arena's live bytes and the host memory the
 * model holds (both fixed over a step: every buffer is allocated before
 * step 1), and the offloaded activations held on the host, which rise as
 * the forward pass copies them out and fall as the backward pass brings
 * them back.
 */
#ifndef FERRY_SCHED_TRACE_H
#define FERRY_SCHED_TRACE_H

#include "sched/schedule.h"

struct ferry_trace_slice {
	char label[FERRY_SCHED_LABEL_CHARS];
	char program[32];
	enum ferry_task_kind kind;
	enum ferry_copy_kind copy_kind;
	int stream, layer;
	size_t bytes;
	int ev0, ev1; /* its events in the pool */
	const struct ferry_task *task; /* valid while its program is */
};

#define FERRY_TRACE_MAX_TIERS 8

struct ferry_sched_trace {
	ferry_backend_t be;
	bool on;
	ferry_event_t origin;
	int n, cap;                    /* slices */
	struct ferry_trace_slice *s;
	int n_ev, cap_ev, used_ev;     /* timed events: created, room, in use */
	ferry_event_t *ev;
	size_t device_live;            /* the arena's live bytes when it began */
	size_t host_bytes;             /* host memory of the traced model (its owner sets it) */
	/* with host tiers, that memory tier by tier (n_tiers 0: all DRAM) */
	int n_tiers;
	char tier_name[FERRY_TRACE_MAX_TIERS][64];
	size_t tier_bytes[FERRY_TRACE_MAX_TIERS];
};

/* Starts a trace (any earlier one is dropped): the origin is recorded on
 * stream `origin`. */
ferry_status ferry_trace_begin(struct ferry_sched_trace *tr, ferry_backend_t be, ferry_stream_t origin)
	FERRY_MUST_CHECK;
/* Around a task's submission on stream s: before (after == false) records
 * its start event and adds its slice; after records its end event. */
ferry_status ferry_trace_task(struct ferry_sched_trace *tr, const struct ferry_program *p,
			      const struct ferry_task *t, ferry_stream_t s, bool after) FERRY_MUST_CHECK;
/* After the traced work has run (the caller synchronised every stream):
 * writes the trace to path (whole or not at all) and ends it.  stream
 * names come from res; about describes the run (backend, model). */
ferry_status ferry_trace_write(struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
			       const char *about, const char *path) FERRY_MUST_CHECK;
/* The same, path NULL: no file; stats (may be NULL): span and busy time per
 * stream. */
struct ferry_trace_stats;
ferry_status ferry_trace_finish(struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
				const char *about, const char *path, struct ferry_trace_stats *stats)
	FERRY_MUST_CHECK;
/* A timeline not run (the cost model's): the slice of task t of program
 * p added (tr zeroed first, never begun; timed kinds only), then written
 * to path with each slice's start and end in seconds at times[2i] and
 * times[2i + 1]; released by ferry_trace_release. */
ferry_status ferry_trace_add(struct ferry_sched_trace *tr, const struct ferry_program *p, const struct ferry_task *t)
	FERRY_MUST_CHECK;
ferry_status ferry_trace_write_at(const struct ferry_sched_trace *tr, const struct ferry_sched_resources *res,
				  const char *about, const double *times, const char *path) FERRY_MUST_CHECK;
/* The same, writing nothing: each slice's start and end, in seconds from
 * the origin, into times[2i] and times[2i + 1] (tr->n slices). */
ferry_status ferry_trace_collect(struct ferry_sched_trace *tr, double *times) FERRY_MUST_CHECK;
/* Whether tasks of kind k are traced (a slice each); the others (records,
 * waits, markers) take no time of their own. */
bool ferry_trace_timed_kind(enum ferry_task_kind k);
void ferry_trace_release(struct ferry_sched_trace *tr);

#endif
