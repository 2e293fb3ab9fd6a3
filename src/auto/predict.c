/*
 * ferry_model_predict: the cost model on a model's prepared schedule.  The
 * step's programs come from a dry build (no device), each task's duration
 * from the calibration, and the simulation (cost/cost_model.h) replays
 * them as ferry_model_step_submit, _finish and ferry_model_sync submit
 * them: zeroing, forward, backward, gradient norm, the host's
 * synchronisation, the update; on several ranks (opts->comm) the
 * gradients' collectives on the comm stream, at the calibration's times
 * for that many ranks.  The peak is the memory plan's.
 */
#include "exec/model_internal.h"
#include "cost/calibration.h"
#include "cost/cost_model.h"
#include "sched/trace.h"
#include "tier/host_tiers_internal.h"
#include "core/error.h"
#include "ferry/comm.h"

#include <stdio.h>
#include <string.h>

/* Each kind of host state's tier speeds (all DRAM's without tiers);
 * offloaded activations over several tiers: each tier's, by layer. */
struct tier_speeds {
	struct ferry_tier_rate r[FERRY_HOST_KINDS];
	bool nvme[FERRY_HOST_KINDS];
	int span;                          /* tiers of the span (0: none) */
	int span_end[FERRY_TIER_SPAN_MAX]; /* layers [span_end[i - 1], span_end[i]) on tier i */
	struct ferry_tier_rate span_r[FERRY_TIER_SPAN_MAX];
	bool span_nvme[FERRY_TIER_SPAN_MAX];
};

/* The kind of host state a host<->device copy moves, by what the executor
 * names its tasks ("weights: qkvw", "master: ...", "grad: ...", "adamw m:
 * ...", "adamw v: ...", the edge region's "edge: ..." and "edge grad:
 * ..."; an activation's name otherwise). */
static enum ferry_host_kind copy_kind_of(const struct ferry_task *t)
{
	static const struct {
		const char *prefix;
		enum ferry_host_kind kind;
	} map[] = {
		{ "weights: ", FERRY_HOST_PARAMS }, { "master: ", FERRY_HOST_PARAMS }, { "grad: ", FERRY_HOST_GRADS },
		{ "adamw m: ", FERRY_HOST_OPTIMIZER }, { "adamw v: ", FERRY_HOST_OPTIMIZER },
		{ "edge: ", FERRY_HOST_PARAMS }, { "edge grad: ", FERRY_HOST_GRADS },
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strncmp(t->label, map[i].prefix, strlen(map[i].prefix)))
			return map[i].kind;
	return FERRY_HOST_ACTIVATIONS;
}

/* Where the host tiers put the plan's host state, and each kind's speed
 * there; false when they cannot hold it (then every kind at DRAM's). */
static bool tier_speeds(ferry_model_t m, const struct ferry_calibration *c,
			const struct ferry_plan *plan, struct tier_speeds *ts)
{
	ferry_host_tiers_t h = m->tt.host_tiers;
	struct ferry_tier_report rep;
	size_t kind_bytes[FERRY_HOST_KINDS];
	unsigned cpu, copied;

	memset(ts, 0, sizeof(*ts));
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		ferry_calib_tier_rate(c, NULL, NULL, &ts->r[k]);
	if (!h)
		return true;
	ferry_places_host_use(&m->tt.place, &cpu, &copied);
	ferry_host_tiers_set_use(h, cpu, copied);
	ferry_plan_host_kinds(plan, kind_bytes);
	if (ferry_host_tiers_place_layers(h, kind_bytes, plan->mem.host_act_unit, &rep) != FERRY_OK)
		return false;
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		if (rep.tier_of[k] >= 0) {
			const struct ferry_tier *t = &rep.use[rep.tier_of[k]].tier;

			ferry_calib_tier_rate(c, &h->topo, t, &ts->r[k]);
			ts->nvme[k] = t->type == FERRY_TIER_NVME;
		}
	for (int i = 0; rep.act_tiers > 1 && i < h->act_asked_n; i++) {
		ts->span_end[i] = (i ? ts->span_end[i - 1] : 0) + rep.act_layers[i];
		ferry_calib_tier_rate(c, &h->topo, &h->act_asked[i], &ts->span_r[i]);
		ts->span_nvme[i] = h->act_asked[i].type == FERRY_TIER_NVME;
		ts->span = i + 1;
	}
	return true;
}

/* The speeds of the tier a host<->device copy's bytes are on: kind k's,
 * or for a layer's offloaded activations over several tiers, its tier's. */
static const struct ferry_tier_rate *rate_of(const struct tier_speeds *ts, const struct ferry_task *t,
					     enum ferry_host_kind k, bool *nvme)
{
	for (int i = 0; k == FERRY_HOST_ACTIVATIONS && t->layer >= 0 && i < ts->span; i++)
		if (t->layer < ts->span_end[i]) {
			*nvme = ts->span_nvme[i];
			return &ts->span_r[i];
		}
	*nvme = ts->nvme[k];
	return &ts->r[k];
}

/* A task's duration with its host state on its tier: copies and file I/O
 * at their tier's speed (NVMe I/O at rates not calibrated: *est set), the
 * CPU AdamW at the speed of where its 28 bytes a parameter live (weight
 * and its update 8, gradient 4, moments 16). */
static double on_tier(const struct tier_speeds *ts, const struct ferry_task *t, double s, bool *est)
{
	const struct ferry_tier_rate *r;
	bool file = t->kind == FERRY_TASK_FILE;

	if ((t->kind == FERRY_TASK_COPY && t->copy_kind != FERRY_COPY_D2D) || file) {
		bool nvme;

		r = rate_of(ts, t, copy_kind_of(t), &nvme);
		if (nvme || file) {
			*est |= nvme && !r->measured; /* (a file task: calibration.c says) */
			return (double)t->bytes / (t->copy_kind == FERRY_COPY_D2H ? r->write_Bps : r->read_Bps);
		}
		return s / r->copy;
	}
	if (t->kind == FERRY_TASK_HOST && t->patch == FERRY_PATCH_ADAMW)
		return s * (8.0 / 28 / ts->r[FERRY_HOST_PARAMS].adamw + 4.0 / 28 / ts->r[FERRY_HOST_GRADS].adamw +
			    16.0 / 28 / ts->r[FERRY_HOST_OPTIMIZER].adamw);
	return s;
}

/* What the durations could not price from the calibration. */
struct unpriced {
	int ops;  /* ops at shapes not measured, NVMe I/O at default rates */
	int comm; /* collectives not measured over these ranks */
};

/* A task's duration on its own (attention over documents of doc tokens:
 * the pairs within them; 0: whole rows). */
static double task_seconds(const struct ferry_calibration *c, const struct tier_speeds *ts,
			   const struct ferry_task *t, int doc, struct unpriced *u)
{
	bool est = false, missing = false;
	double d;

	if (t->kind == FERRY_TASK_COMM) {
		d = ferry_calib_comm_task_seconds(c, t, &missing);
		u->comm += missing;
		return d;
	}
	d = on_tier(ts, t, ferry_calib_task_seconds_docs(c, t, doc, &est), &est);
	u->ops += est;
	return d;
}

/* The tasks of programs p[0..n). */
static int tasks(const struct ferry_program *const *p, int n)
{
	int total = 0;

	for (int i = 0; i < n; i++)
		total += p[i]->n;
	return total;
}

/* Each task's duration, the programs' tasks one after the other; a
 * compute-stream task also takes the stream's calibrated gap before it. */
static double *durations(const struct ferry_calibration *c, const struct tier_speeds *ts,
			 const struct ferry_program *const *p, int n, int compute, int doc, struct unpriced *u)
{
	int k = 0;
	double *d;

	if (!(d = ferry_calloc((size_t)tasks(p, n) + 1, sizeof(double))))
		return NULL;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < p[i]->n; j++) {
			d[k] = task_seconds(c, ts, &p[i]->t[j], doc, u);
			if (p[i]->t[j].stream == compute && ferry_trace_timed_kind(p[i]->t[j].kind))
				d[k] += c->task_gap_s;
			k++;
		}
	return d;
}

/* The simulated step as ferry train --trace writes a traced one (each
 * task's slice at its simulated times, from 0), to compare task by task;
 * times as ferry_sim_params.times holds them for n tasks. */
static ferry_status write_timeline(ferry_model_t m, const struct ferry_program *const *p, const double *times,
				   int n, const char *path)
{
	struct ferry_sched_trace tr;
	double *at = ferry_calloc((size_t)(2 * n + 2), sizeof(double));
	ferry_status st = at ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "predict: out of host memory");
	char about[200];

	memset(&tr, 0, sizeof(tr));
	for (int i = 0, g = 0; i < FERRY_STEP_PROGRAMS && !st; i++)
		for (int j = 0; j < p[i]->n && !st; j++, g++) {
			int k = tr.n;

			if (!(st = ferry_trace_add(&tr, p[i], &p[i]->t[j])) && tr.n > k)
				at[2 * k] = times[2 * g], at[2 * k + 1] = times[2 * g + 1];
		}
	snprintf(about, sizeof(about), "ferry: the cost model's step, %s %d layers, %d channels", m->cfg.arch,
		 m->cfg.layers, m->cfg.channels);
	if (!st)
		st = ferry_trace_write_at(&tr, &m->res, about, at, path);
	ferry_trace_release(&tr);
	ferry_free(at);
	return st;
}

static ferry_status simulate(ferry_model_t m, const struct ferry_calibration *c, const struct tier_speeds *ts,
			     int B, int T, int doc, const char *timeline, struct ferry_prediction *out)
{
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	const struct ferry_program *p[FERRY_STEP_PROGRAMS];
	struct ferry_sim_params prm = { .both_slowdown = ferry_calib_both_slowdown(c) };
	struct ferry_sim_result r;
	struct unpriced u = { 0, 0 };
	ferry_status st = FERRY_OK;
	double *d;

	ferry_model_step_keys(B, T, keys);
	for (int i = 0; i < FERRY_STEP_PROGRAMS && !st; i++)
		st = ferry_model_program(m, &keys[i], &p[i]);
	if (st)
		return st;
	prm.shared_copy_engine = prm.both_slowdown >= 1.9;
	prm.copy_compute_slowdown = c->copy_compute_slowdown;
	if (m->comm) {
		const struct ferry_calib_comm_step *in =
			ferry_calib_comm_step_find(c, ferry_comm_engine(m->comm), ferry_comm_size(m->comm));

		prm.comm_compute_slowdown = in ? in->compute_slowdown : 0;
		prm.comm_skew_s = in ? in->skew_s : 0;
		prm.comm_beside = in ? in->in_step : 0;
		prm.comm_idle = in && in->in_step_idle > 0 ? in->in_step_idle : prm.comm_beside;
	}
	if (!(d = durations(c, ts, p, FERRY_STEP_PROGRAMS, m->compute, doc, &u)))
		return ferry_error(FERRY_ERR_NOMEM, "predict: out of host memory");
	if (timeline && !(prm.times = ferry_calloc(2 * (size_t)tasks(p, FERRY_STEP_PROGRAMS) + 2, sizeof(double))))
		st = ferry_error(FERRY_ERR_NOMEM, "predict: out of host memory");
	if (!st)
		st = ferry_sim_run(p, FERRY_STEP_PROGRAMS, 3, m->compute, d, &prm, &r);
	if (!st && timeline)
		st = write_timeline(m, p, prm.times, r.n_tasks, timeline);
	ferry_free(prm.times);
	ferry_free(d);
	if (st)
		return st;
	out->step_s = r.step_s + c->step_host_s; /* the host's own work, outside the tasks */
	out->exposed_copy_s = r.exposed_copy_s;
	out->compute_s = r.busy_s[m->compute];
	out->copy_s = r.copy_s;
	out->host_s = ferry_table_host_update(&m->tt) ? r.busy_s[m->opt_cpu_stream] : 0;
	out->n_tasks = r.n_tasks;
	out->estimated_ops = u.ops;
	out->uncalibrated_comm = u.comm;
	out->comm_s = r.comm_s;
	out->exposed_comm_s = r.exposed_comm_s;
	return FERRY_OK;
}

ferry_status ferry_model_predict(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, ferry_calibration_t c,
				 struct ferry_prediction *out)
{
	return ferry_model_predict_timeline(cfg, B, T, opts, c, NULL, out);
}

ferry_status ferry_model_predict_timeline(const struct ferry_model_config *cfg, int B, int T,
					  const struct ferry_exec_opts *opts, ferry_calibration_t c,
					  const char *path, struct ferry_prediction *out)
{
	struct ferry_plan plan;
	struct tier_speeds ts;
	ferry_model_t m;
	ferry_status st;

	memset(out, 0, sizeof(*out));
	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "predict: no calibration");
	if ((st = ferry_model_build(NULL, cfg, B, T, opts, &m)))
		return st;
	/* the plan ferry_model_plan makes, from the same table */
	if (!(st = ferry_tensor_table_plan(&m->tt, &plan))) {
		out->device_peak_bytes = plan.mem.peak_bytes;
		for (int k = 0; k < FERRY_TK_COUNT; k++)
			out->host_bytes += plan.mem.host_kind_bytes[k];
		out->host_fits = tier_speeds(m, c, &plan, &ts);
		st = simulate(m, c, &ts, B, T, opts->packed ? opts->doc_tokens : 0, path, out);
	}
	ferry_model_free(m);
	return st;
}
