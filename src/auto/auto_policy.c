/*
 * --policy auto (ferry/cost.h): a local search over per-name placements,
 * each candidate judged by its memory plan (does it fit?) and the cost
 * model (how long is its step?).  Choices are per name and shared by the
 * layers, so a candidate costs one plan and one simulation whatever the
 * depth; a search takes a few dozen of them per pass.
 */
#include "auto/auto_internal.h"
#include "ferry/policy.h"
#include "core/clock.h"
#include "core/error.h"
#include "cost/calibration.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct eval {
	bool valid, fits;
	double step_s;
	size_t peak, host;
	struct ferry_prediction pred;
};

struct search {
	const struct ferry_model_config *cfg;
	int B, T;
	const struct ferry_exec_opts *opts;
	size_t device_mem, host_mem;
	ferry_calibration_t cal;
	struct ferry_auto_result *out;
	int *tile[2];        /* out's mlp_tile, loss_tile: the candidates' */
	bool tile_free[2];   /* not given: the search chooses */
};

static void judge(struct search *s, const char *spec, struct eval *e)
{
	struct ferry_exec_opts o = *s->opts;

	memset(e, 0, sizeof(*e));
	o.policy = spec;
	o.mlp_tile = *s->tile[0];
	o.loss_tile = *s->tile[1];
	s->out->evaluations++;
	if (ferry_model_predict(s->cfg, s->B, s->T, &o, s->cal, &e->pred) != FERRY_OK)
		return;
	e->valid = true;
	e->peak = e->pred.device_peak_bytes;
	e->host = e->pred.host_bytes;
	e->step_s = e->pred.step_s;
	e->fits = (!s->device_mem || e->peak <= s->device_mem) && (!s->host_mem || e->host <= s->host_mem) &&
		  e->pred.host_fits;
}

static size_t over(const struct search *s, const struct eval *e)
{
	size_t d = s->device_mem && e->peak > s->device_mem ? e->peak - s->device_mem : 0;

	return d + (s->host_mem && e->host > s->host_mem ? e->host - s->host_mem : 0);
}

/* a better than b: valid, then fitting, then faster (by more than a
 * rounding; as fast: less host memory, then less device memory), or when
 * neither fits, nearer to fitting. */
static bool better(const struct search *s, const struct eval *a, const struct eval *b)
{
	if (a->valid != b->valid)
		return a->valid;
	if (!a->valid)
		return false;
	if (a->fits != b->fits)
		return a->fits;
	if (!a->fits)
		return over(s, a) < over(s, b);
	if (a->step_s < b->step_s * (1 - 1e-6))
		return true;
	if (a->step_s > b->step_s * (1 + 1e-6))
		return false;
	/* as fast: nothing offloaded without a gain in time, then less device memory */
	return a->host != b->host ? a->host < b->host : a->peak < b->peak;
}

/* custom:name=device|offload,... (names not listed are recomputed). */
static void spec_of(const struct ferry_auto_result *r, const enum ferry_placement *place, char *buf, size_t n)
{
	size_t w = (size_t)snprintf(buf, n, "custom:");

	for (int i = 0; i < r->n && w < n; i++)
		if (r->c[i].needed && place[i] != FERRY_PLACE_REMAT)
			w += (size_t)snprintf(buf + w, n - w, "%s%s=%s", w > 7 ? "," : "", r->c[i].name,
					      ferry_placement_name(place[i]));
	if (w == 7)
		snprintf(buf, n, "nothing_saveable");
}

/* The layer's names (from the plan that keeps everything). */
static ferry_status names(struct search *s)
{
	struct ferry_exec_opts o = *s->opts;
	struct ferry_plan plan;
	ferry_status st;

	o.policy = "everything_saveable";
	if ((st = ferry_model_plan(s->cfg, s->B, s->T, &o, &plan)))
		return st;
	s->out->layers = plan.L;
	for (int i = 0; i < plan.n_tensors && i < FERRY_AUTO_MAX_NAMES; i++) {
		struct ferry_auto_choice *c = &s->out->c[s->out->n++];

		snprintf(c->name, sizeof(c->name), "%s", plan.tensors[i].name);
		c->needed = plan.tensors[i].needed;
		c->layer_bytes = plan.tensors[i].layer_bytes;
		c->copy_s = (ferry_calib_copy_seconds(s->cal, c->layer_bytes, FERRY_COPY_D2H, false) +
			     ferry_calib_copy_seconds(s->cal, c->layer_bytes, FERRY_COPY_H2D, false)) * plan.L;
	}
	return FERRY_OK;
}

/* Every preset; the best one's placements start the search. */
static void presets(struct search *s, enum ferry_placement *place, struct eval *best)
{
	struct ferry_auto_result *r = s->out;

	memset(best, 0, sizeof(*best));
	for (int i = 0; i < ferry_policy_preset_count() && r->n_presets < FERRY_AUTO_MAX_PRESETS; i++) {
		struct ferry_auto_preset *p = &r->presets[r->n_presets++];
		struct ferry_exec_opts o = *s->opts;
		struct ferry_plan plan;
		struct eval e;

		snprintf(p->name, sizeof(p->name), "%s", ferry_policy_preset_name(i));
		judge(s, p->name, &e);
		p->valid = e.valid, p->fits = e.fits, p->step_s = e.step_s, p->peak = e.peak, p->host = e.host;
		o.policy = p->name;
		if (!better(s, &e, best) || ferry_model_plan(s->cfg, s->B, s->T, &o, &plan) != FERRY_OK)
			continue;
		*best = e;
		snprintf(r->start, sizeof(r->start), "%s", p->name);
		for (int k = 0; k < r->n && k < plan.n_tensors; k++)
			place[k] = plan.tensors[k].placement;
	}
}

/* One pass over the names: each name's other placements are tried (and
 * recorded as its alternatives), the best taken at once if it beats cur.
 * Whether anything moved: a pass that moves nothing has recorded every
 * name's alternatives against the final choice. */
static bool pass(struct search *s, enum ferry_placement *place, struct eval *cur)
{
	struct ferry_auto_result *r = s->out;
	bool moved = false;
	char spec[1024];

	for (int i = 0; i < r->n; i++) {
		enum ferry_placement mine = place[i], bp = mine;
		struct eval best = *cur;

		if (!r->c[i].needed)
			continue;
		for (int p = 0; p < 3; p++) {
			struct eval e;

			if ((enum ferry_placement)p == mine)
				continue;
			place[i] = (enum ferry_placement)p;
			spec_of(r, place, spec, sizeof(spec));
			judge(s, spec, &e);
			r->c[i].alt_valid[p] = e.valid, r->c[i].alt_fits[p] = e.fits;
			r->c[i].alt_s[p] = e.step_s, r->c[i].alt_peak[p] = e.peak;
			if (better(s, &e, &best))
				best = e, bp = (enum ferry_placement)p;
		}
		place[i] = bp;
		if (bp != mine) {
			*cur = best;
			moved = true;
		}
	}
	return moved;
}

/* Tiles of tokens as one more choice: each that was not given tried on
 * and off under the placements chosen so far, kept when better. */
static bool tiles_pass(struct search *s, const enum ferry_placement *place, struct eval *cur)
{
	bool moved = false;
	char spec[1024];

	spec_of(s->out, place, spec, sizeof(spec));
	for (int k = 0; k < 2; k++) {
		struct eval e;

		if (!s->tile_free[k])
			continue;
		*s->tile[k] = *s->tile[k] ? 0 : FERRY_TILE_AUTO;
		judge(s, spec, &e);
		if (better(s, &e, cur)) {
			*cur = e;
			moved = true;
		} else {
			*s->tile[k] = *s->tile[k] ? 0 : FERRY_TILE_AUTO;
		}
	}
	return moved;
}

/* No activation placement fits: what the nearest needs, or that the host
 * tiers hold none. */
static ferry_status refuse(const struct eval *cur, size_t device_mem)
{
	char need[FERRY_SIZE_CHARS], have[FERRY_SIZE_CHARS];

	if (cur->peak <= device_mem || !device_mem)
		return ferry_error(FERRY_ERR_INVALID, "--policy auto: no placement fits the host memory or the host "
				   "tiers (the nearest needs %s of host memory)", ferry_format_size(cur->host, need));
	return ferry_error(FERRY_ERR_DEVICE_MEM, "--policy auto: no placement fits: the least device memory any "
			   "needs is %s (--device-mem gives %s)", ferry_format_size(cur->peak, need),
			   ferry_format_size(device_mem, have));
}

/* ferry_policy_auto without making the tier choice the tiers' own. */
static ferry_status policy_auto(const struct ferry_model_config *cfg, int B, int T,
				const struct ferry_exec_opts *opts, size_t device_mem, size_t host_mem,
				ferry_calibration_t c, struct ferry_auto_result *out)
{
	struct search s = { cfg, B, T, opts, device_mem, host_mem, c, out, { &out->mlp_tile, &out->loss_tile },
			    { !opts->mlp_tile, !opts->loss_tile } };
	enum ferry_placement place[FERRY_AUTO_MAX_NAMES] = { 0 };
	struct eval cur;
	double t0 = ferry_now_s();
	ferry_status st;

	memset(out, 0, sizeof(*out));
	out->device_mem = device_mem, out->host_mem = host_mem;
	out->optimizer = opts->optimizer, out->offload_params = opts->offload_params, out->n_states = 1;
	out->mlp_tile = opts->mlp_tile, out->loss_tile = opts->loss_tile;
	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "--policy auto needs a calibration: run `ferry calibrate`");
	if ((st = names(&s)))
		return st;
	presets(&s, place, &cur);
	if (!cur.valid)
		return ferry_error(FERRY_ERR_INVALID, "--policy auto: no preset makes a plan for this model");
	for (int k = 0; k < 64 && (pass(&s, place, &cur) | tiles_pass(&s, place, &cur)); k++)
		;
	for (int i = 0; i < out->n; i++) {
		out->c[i].place = place[i];
		out->c[i].alt_valid[place[i]] = true, out->c[i].alt_fits[place[i]] = cur.fits;
		out->c[i].alt_s[place[i]] = cur.step_s, out->c[i].alt_peak[place[i]] = cur.peak;
	}
	spec_of(out, place, out->policy, sizeof(out->policy));
	out->fits = cur.fits;
	out->pred = cur.pred;
	out->search_s = ferry_now_s() - t0;
	if (!cur.fits)
		return refuse(&cur, device_mem);
	st = ferry_auto_tiers_search(cfg, B, T, opts, c, out);
	out->evaluations += out->tiers.searched;
	out->search_s = ferry_now_s() - t0;
	return st;
}

ferry_status ferry_policy_auto(const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, size_t device_mem, size_t host_mem,
			       ferry_calibration_t c, struct ferry_auto_result *out)
{
	ferry_status st = policy_auto(cfg, B, T, opts, device_mem, host_mem, c, out);

	if (!st)
		ferry_auto_tiers_apply(opts->host_tiers, out);
	return st;
}

/* State placements predicted within this fraction of each other take
 * equal time: the model does not resolve less (bench_auto_state: the
 * host threads' AdamW predicted 0.2% faster than the device's measured 5%
 * slower on a busy 2-core machine, whose host thread had no core of its
 * own), so the one with less host memory wins. */
#define STATE_EQUAL 0.01

/* The state placements ferry_policy_auto_state weighs, the given default
 * first (offloaded weights need AdamW's state off the device too). */
static const struct {
	enum ferry_optim_place optimizer;
	bool offload_params;
} state_places[] = {
	{ FERRY_OPTIM_DEVICE, false }, { FERRY_OPTIM_STREAM, false }, { FERRY_OPTIM_CPU, false },
	{ FERRY_OPTIM_STREAM, true },  { FERRY_OPTIM_CPU, true },
};

ferry_status ferry_policy_auto_state(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, size_t device_mem, size_t host_mem,
				     ferry_calibration_t c, struct ferry_auto_result *out)
{
	const int n = (int)(sizeof(state_places) / sizeof(*state_places));
	struct ferry_auto_result *r = ferry_calloc(1, sizeof(*r));
	ferry_status first = FERRY_OK;
	char why[512] = "";
	int evaluations = 0;
	bool have = false;
	double t0 = ferry_now_s();

	if (!r)
		return ferry_error(FERRY_ERR_NOMEM, "--policy auto: out of host memory");
	for (int i = 0; i < n; i++) {
		struct ferry_exec_opts o = *opts;
		ferry_status st;

		o.optimizer = state_places[i].optimizer;
		o.offload_params = state_places[i].offload_params;
		st = policy_auto(cfg, B, T, &o, device_mem, host_mem, c, r);
		evaluations += r->evaluations;
		if (st) {
			if (!first) /* the first refusal says why (the others say the same, or less) */
				first = st, snprintf(why, sizeof(why), "%s", ferry_last_error());
			continue;
		}
		if (!have || r->pred.step_s < out->pred.step_s * (1 - STATE_EQUAL) ||
		    (r->pred.step_s <= out->pred.step_s * (1 + STATE_EQUAL) && r->pred.host_bytes < out->pred.host_bytes)) {
			*out = *r;
			have = true;
		}
	}
	ferry_free(r);
	if (!have)
		return ferry_error(first, "%s", why);
	out->evaluations = evaluations;
	out->n_states = n;
	out->search_s = ferry_now_s() - t0;
	ferry_auto_tiers_apply(opts->host_tiers, out);
	return FERRY_OK;
}
