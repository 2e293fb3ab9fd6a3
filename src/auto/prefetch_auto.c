/*
 * activations.prefetch=auto (ferry/cost.h): a depth per tier of the
 * offloaded activations from each tier's rate against one layer's compute,
 * both as the cost model takes them, held shallower where device memory
 * asks.
 */
#include "exec/model_internal.h"
#include "cost/calibration.h"
#include "sched/trace.h"
#include "tier/host_tiers_internal.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_AHEAD 64 /* as activations.prefetch allows */

/* One layer's compute in program p (a layer in the middle: every layer
 * runs the same ops), as the cost model times it (attention over documents
 * of doc tokens; 0: whole rows). */
static double layer_seconds(const struct ferry_calibration *c, const struct ferry_program *p, int compute, int l,
			    int doc)
{
	double s = 0;

	for (int i = 0; i < p->n; i++) {
		const struct ferry_task *t = &p->t[i];
		bool est = false;

		if (t->stream == compute && t->layer == l && ferry_trace_timed_kind(t->kind))
			s += ferry_calib_task_seconds_docs(c, t, doc, &est) + c->task_gap_s;
	}
	return s;
}

/* Tier i's name, and one layer's bytes each way there. */
static void tier_times(const struct ferry_calibration *c, ferry_host_tiers_t h, const struct ferry_tier *t,
		       struct ferry_prefetch_choice *ch, int i)
{
	struct ferry_tier_rate r;
	size_t b = ch->layer_bytes;

	ferry_calib_tier_rate(c, h ? &h->topo : NULL, t, &r);
	if (t)
		ferry_tier_describe(t, ch->tier[i], sizeof(ch->tier[i]));
	else
		snprintf(ch->tier[i], sizeof(ch->tier[i]), "host");
	if (t && t->type == FERRY_TIER_NVME) {
		ch->read_s[i] = (double)b / r.read_Bps;
		ch->write_s[i] = (double)b / r.write_Bps;
		ch->rate_measured[i] = r.measured;
		return;
	}
	ch->read_s[i] = ferry_calib_copy_seconds(c, b, FERRY_COPY_H2D, false) / r.copy;
	ch->write_s[i] = ferry_calib_copy_seconds(c, b, FERRY_COPY_D2H, false) / r.copy;
	ch->rate_measured[i] = !t || t->type == FERRY_TIER_DRAM || r.measured;
}

/* The rates' depth of each tier, at least the one before it's. */
static void wanted_depths(struct ferry_prefetch_choice *ch)
{
	for (int i = 0; i < ch->n; i++) {
		double rd = ch->backward_s > 0 ? ceil(ch->read_s[i] / ch->backward_s) : 1;
		double wr = ch->forward_s > 0 ? ceil(ch->write_s[i] / ch->forward_s) : 1;
		double d = fmax(1, fmax(rd, wr));

		ch->wanted[i] = d > MAX_AHEAD ? MAX_AHEAD : (int)d;
		if (i && ch->wanted[i] < ch->wanted[i - 1])
			ch->wanted[i] = ch->wanted[i - 1];
		ch->depth[i] = ch->wanted[i];
	}
}

/* The tiers, their layers and times, and a layer's compute, from a build
 * at depth 1 (m, whose host tiers have placed the activations). */
static ferry_status measure(ferry_model_t m, const struct ferry_calibration *c, int doc,
			    struct ferry_prefetch_choice *ch)
{
	ferry_host_tiers_t h = m->tt.host_tiers;
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	const struct ferry_program *fwd, *bwd;
	struct ferry_tier_report rep = { 0 };
	struct ferry_plan plan;
	size_t kind_bytes[FERRY_HOST_KINDS];
	ferry_status st;

	if ((st = ferry_tensor_table_plan(&m->tt, &plan)))
		return st;
	ferry_plan_host_kinds(&plan, kind_bytes);
	ch->layer_bytes = plan.mem.host_kind_bytes[FERRY_TK_ACTIVATION] / (size_t)(plan.L ? plan.L : 1);
	if (h && (st = ferry_host_tiers_place_layers(h, kind_bytes, plan.mem.host_act_unit, &rep)))
		return st;
	ferry_model_step_keys(m->B, m->T, keys);
	if ((st = ferry_model_program(m, &keys[1], &fwd)) || (st = ferry_model_program(m, &keys[2], &bwd)))
		return st;
	ch->forward_s = layer_seconds(c, fwd, m->compute, plan.L / 2, doc);
	ch->backward_s = layer_seconds(c, bwd, m->compute, plan.L / 2, doc);
	ch->n = h && h->act_asked_n > 1 ? h->act_asked_n : 1;
	for (int i = 0; i < ch->n; i++) {
		const struct ferry_tier *t = !h ? NULL : h->act_asked_n > 1 ? &h->act_asked[i]
						   : rep.tier_of[FERRY_HOST_ACTIVATIONS] >= 0
							   ? &rep.use[rep.tier_of[FERRY_HOST_ACTIVATIONS]].tier : NULL;

		ch->layers[i] = h && h->act_asked_n > 1 ? rep.act_layers[i] : plan.L;
		tier_times(c, h, t, ch, i);
	}
	wanted_depths(ch);
	return FERRY_OK;
}

/* The plan's peak with the depths of ch. */
static ferry_status peak_with(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			      const struct ferry_prefetch_choice *ch, size_t *peak)
{
	struct ferry_exec_opts e = *opts;
	char place[FERRY_PLACE_CHARS + 64];
	struct ferry_plan plan;
	ferry_status st;

	if ((st = ferry_prefetch_apply(ch, &e, place, sizeof(place))) || (st = ferry_model_plan(cfg, B, T, &e, &plan)))
		return st;
	*peak = plan.mem.peak_bytes;
	return FERRY_OK;
}

/* device_mem: the deepest tiers one layer shallower at a time, while the
 * plan does not fit and a tier is deeper than 1. */
static ferry_status fit_memory(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			       size_t device_mem, struct ferry_prefetch_choice *ch)
{
	ferry_status st;

	for (;;) {
		int deepest = 1;

		if ((st = peak_with(cfg, B, T, opts, ch, &ch->peak_bytes)))
			return st;
		for (int i = 0; i < ch->n; i++)
			deepest = ch->depth[i] > deepest ? ch->depth[i] : deepest;
		if (!device_mem || ch->peak_bytes <= device_mem || deepest == 1)
			return FERRY_OK;
		for (int i = 0; i < ch->n; i++)
			ch->depth[i] = ch->depth[i] < deepest ? ch->depth[i] : deepest - 1;
	}
}

ferry_status ferry_prefetch_auto(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, ferry_calibration_t c, size_t device_mem,
				 struct ferry_prefetch_choice *out)
{
	struct ferry_prefetch_choice one = { .n = 1, .depth = { 1 } };
	char place[FERRY_PLACE_CHARS + 64];
	struct ferry_exec_opts e;
	ferry_model_t m;
	ferry_status st;

	memset(out, 0, sizeof(*out));
	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "activations.prefetch=auto: no calibration");
	e = *opts;
	if ((st = ferry_prefetch_apply(&one, &e, place, sizeof(place))) || (st = ferry_model_build(NULL, cfg, B, T, &e, &m)))
		return st;
	st = m->tt.sp.offloaded ? measure(m, c, opts->packed ? opts->doc_tokens : 0, out) : FERRY_OK;
	ferry_model_free(m);
	if (!st && !out->n) { /* nothing offloaded: the default, which moves nothing */
		out->n = 1;
		out->depth[0] = out->wanted[0] = FERRY_DEFAULT_PREFETCH_DEPTH;
		snprintf(out->tier[0], sizeof(out->tier[0]), "none");
	}
	return st ? st : fit_memory(cfg, B, T, opts, device_mem, out);
}

ferry_status ferry_prefetch_apply(const struct ferry_prefetch_choice *ch, struct ferry_exec_opts *o, char *place,
				  size_t n)
{
	int tiers[FERRY_PREFETCH_TIERS] = { 0 }, deepest = 0, len;
	char depths[64];

	for (int i = 0; i < ch->n; i++) {
		deepest = ch->depth[i] > deepest ? ch->depth[i] : deepest;
		tiers[i] = ch->n > 1 ? ch->depth[i] : 0;
	}
	ferry_prefetch_format(deepest, tiers, depths, sizeof(depths));
	len = snprintf(place, n, "%s%sactivations.prefetch=%s", o->place ? o->place : "", o->place ? "," : "", depths);
	if (len < 0 || (size_t)len >= n)
		return ferry_error(FERRY_ERR_INVALID, "placements: more than %zu characters", n - 1);
	o->prefetch_depth = 0; /* the placement's last item says */
	memset(o->prefetch_tiers, 0, sizeof(o->prefetch_tiers));
	o->place = place;
	return FERRY_OK;
}
