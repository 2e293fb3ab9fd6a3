/*
 * Internal: the cost model, a discrete-event simulation of a prepared
 * schedule (sched/schedule.h).
 *
 * Given the programs a step submits, in order, and how long each task takes
 * on its own, it replays them as the backend would: every stream runs its
 * tasks in submission order; a wait holds its stream until the record it
 * refers to (the last one of that event submitted before it) has been
 * reached; the host's synchronisation inside a step (after the gradient
 * norm) holds everything submitted after it until the compute stream has
 * run everything before it.  Copies between host and device run on copy
 * engines: one per direction, slowed by a factor while both directions move
 * at once, or a single engine both directions share (one copy at a time);
 * the compute stream may be slowed while copies run (shared cores).
 *
 * Collectives (data parallel) run on a stream of their own, with the
 * events of the others, each for its calibrated time alone stretched by
 * one factor while the compute stream runs a task and by another while it
 * runs none (CPU backend: the comm threads share the cores with the
 * compute threads, and get them back when the backward is done); the
 * compute stream may be slowed while one runs, as while copies do.
 *
 * What it gives: the step time, how long the compute stream waited for
 * copies (exposed transfer time) and for collectives, and each stream's
 * busy time.  Memory is
 * not simulated: every buffer is allocated before step 1, so the peak is the
 * tensor table's plan, exactly (auto/predict.c reports it).
 */
#ifndef FERRY_COST_COST_MODEL_H
#define FERRY_COST_COST_MODEL_H

#include "sched/schedule.h"

struct ferry_sim_params {
	bool shared_copy_engine; /* host<->device copies of both directions share one engine */
	double both_slowdown;    /* separate engines: a copy's duration is multiplied by this while
				    the other direction copies too (1: no effect) */
	double sync_s;           /* the host's synchronisation and resubmission inside the step */
	double copy_compute_slowdown; /* the compute stream's tasks take this many times as long while a
					 host<->device copy runs (CPU backend: copies take cores and
					 memory bandwidth; 1 or 0: no effect, as on a GPU) */
	double comm_compute_slowdown; /* the same while a collective runs (CPU backend: the comm
					 thread polls on a core; 1 or 0: no effect) */
	double comm_skew_s;           /* a collective ends no earlier than this after the event it
					 waited for (the other ranks reach it later: their skew) */
	double comm_beside;           /* a collective takes this many times its duration while the
					 compute stream runs a task (0: 1) */
	double comm_idle;             /* the same while the compute stream runs none (0: 1) */
	double *times;                /* NULL, or each task's start and end into times[2g] and
					 [2g + 1] (g: its index, the programs' tasks one after the
					 other; a record or wait: when it passed) */
};

struct ferry_sim_result {
	double step_s;          /* from the first task's start to the last one's end */
	double exposed_copy_s;  /* the compute stream waiting for events recorded on copy streams */
	double busy_s[FERRY_SCHED_MAX_STREAMS];
	double copy_s;          /* host<->device copy time, all directions */
	double exposed_comm_s;  /* the compute stream waiting for events recorded after collectives */
	double comm_s;          /* collectives' time */
	int n_tasks;
};

/* Simulates the programs progs[0..n) submitted in order, the host
 * synchronising on the compute stream after program sync_after (-1: never).
 * dur holds each task's duration on its own, the programs' tasks one after
 * the other (RECORD, WAIT and GRADS_DONE take none: their entries are
 * ignored).  Errors: a schedule that can never finish (a wait on an event
 * no stream will record). */
ferry_status ferry_sim_run(const struct ferry_program *const *progs, int n, int sync_after, int compute_stream,
			   const double *dur, const struct ferry_sim_params *prm, struct ferry_sim_result *out)
	FERRY_MUST_CHECK;

#endif
