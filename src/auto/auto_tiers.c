/*
 * --policy auto on host tiers (ferry/cost.h, struct ferry_auto_tiers): for
 * a chosen placement of the activations, parameters and AdamW's state,
 * which tier each kind of host state goes to.  Each candidate is the host
 * tiers' own placement with every searched kind named explicitly, judged
 * by the tiers' capacity check and the cost model (which runs each kind's
 * copies and the CPU AdamW at the speed of its tier).  A local search from
 * the default placement: one kind moved at a time, to the tier that makes
 * the step fastest, until no move helps; at equal time nothing moves.
 */
#include "auto/auto_internal.h"
#include "cost/calibration.h"
#include "tier/host_tiers_internal.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct tsearch {
	const struct ferry_model_config *cfg;
	int B, T;
	struct ferry_exec_opts o;
	ferry_calibration_t c;
	struct ferry_host_tiers *h;
	struct ferry_auto_tiers *t;
	size_t host_kind_bytes[FERRY_HOST_KINDS]; /* the plan's, by host kind */
};

static bool same_nodes(const struct ferry_tier *a, const struct ferry_tier *b)
{
	if (a->type == FERRY_TIER_NVME || b->type == FERRY_TIER_NVME)
		return a->type == b->type;
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (a->node[i] != b->node[i] || a->weight[i] != b->weight[i])
			return false;
	return true;
}

static void add_option(struct tsearch *s, struct ferry_auto_tier_kind *k, const char *name)
{
	struct ferry_tier t;
	struct ferry_tier_rate rate;

	if (k->n == FERRY_AUTO_MAX_TIER_OPTIONS || ferry_tier_resolve(s->h, name, &t) != FERRY_OK)
		return;
	for (int i = 0; i < k->n; i++)
		if (same_nodes(&k->opt[i].tier, &t))
			return; /* node:0 where dram is node 0 */
	ferry_calib_tier_rate(s->c, &s->h->topo, &t, &rate);
	snprintf(k->opt[k->n].name, sizeof(k->opt[k->n].name), "%s", name);
	k->opt[k->n].tier = t;
	k->opt[k->n].copy_speed = t.type == FERRY_TIER_NVME ? 0 : rate.copy;
	k->opt[k->n].adamw_speed = t.type == FERRY_TIER_NVME ? 0 : rate.adamw;
	k->opt[k->n].read_Bps = t.type == FERRY_TIER_NVME ? rate.read_Bps : 0;
	k->opt[k->n].write_Bps = t.type == FERRY_TIER_NVME ? rate.write_Bps : 0;
	k->opt[k->n].speed_measured = rate.measured;
	k->n++;
}

/* The tiers kind k may go to: DRAM, the CPU-less nodes striped, each node
 * on its own (more than one node), the NVMe file (streamed state). */
static void options(struct tsearch *s, int k)
{
	struct ferry_auto_tier_kind *kd = &s->t->kind[k];
	const struct ferry_topology *topo = &s->h->topo;
	char name[32];

	add_option(s, kd, "dram");
	add_option(s, kd, "cxl");
	for (int i = 0; i < topo->n && topo->n > 1; i++) {
		snprintf(name, sizeof(name), "node:%d", topo->node[i].id);
		add_option(s, kd, name);
	}
	if (s->h->nvme_dir[0] && ferry_tier_nvme_holds(s->h, k))
		add_option(s, kd, "nvme");
}

/* The placement pick[] (an option per searched kind; the others as
 * given), predicted. */
static bool judge(struct tsearch *s, const int *pick, struct ferry_prediction *p)
{
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		if (!s->t->kind[k].given && s->t->kind[k].bytes)
			s->h->asked[k] = s->t->kind[k].opt[pick[k]].tier;
	s->t->searched++;
	return ferry_model_predict(s->cfg, s->B, s->T, &s->o, s->c, p) == FERRY_OK && p->host_fits;
}

/* One pass: each searched kind tried on its other tiers (recorded as its
 * alternatives), the best taken at once if faster.  Whether one moved. */
static bool pass(struct tsearch *s, int *pick, struct ferry_prediction *best, bool *fits)
{
	bool moved = false;

	for (int k = 0; k < FERRY_HOST_KINDS; k++) {
		struct ferry_auto_tier_kind *kd = &s->t->kind[k];
		int mine = pick[k], bj = mine;

		if (kd->given || !kd->bytes)
			continue;
		for (int j = 0; j < kd->n; j++) {
			struct ferry_prediction p;
			bool f;

			if (j == mine)
				continue;
			pick[k] = j;
			f = judge(s, pick, &p);
			kd->opt[j].judged = true, kd->opt[j].fits = f, kd->opt[j].step_s = p.step_s;
			if (f && (!*fits || p.step_s < best->step_s * (1 - 1e-6)))
				*best = p, *fits = true, bj = j;
		}
		pick[k] = bj;
		moved |= bj != mine;
	}
	return moved;
}

/* The host tiers take how AdamW placed as o uses each kind of host state. */
static void tiers_follow(struct ferry_host_tiers *h, enum ferry_optim_place o)
{
	unsigned cpu, copied;

	ferry_optim_host_use(o, &cpu, &copied);
	ferry_host_tiers_set_use(h, cpu, copied);
}

/* Where the default placement puts each kind (the option of its tier),
 * and the kinds' bytes and options. */
static ferry_status setup(struct tsearch *s, int *pick)
{
	struct ferry_plan plan;
	ferry_status st;

	if ((st = ferry_model_plan(s->cfg, s->B, s->T, &s->o, &plan)))
		return st;
	tiers_follow(s->h, s->o.optimizer);
	ferry_plan_host_kinds(&plan, s->host_kind_bytes);
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		s->t->kind[k].bytes += s->host_kind_bytes[k];
	for (int k = 0; k < FERRY_HOST_KINDS; k++) {
		s->t->kind[k].given = s->h->asked[k].type != FERRY_TIER_AUTO;
		s->t->kind[k].chosen = s->t->kind[k].dflt = -1;
		pick[k] = 0;
		if (s->t->kind[k].bytes && !s->t->kind[k].given)
			options(s, k);
	}
	return FERRY_OK;
}

static void default_picks(struct tsearch *s, int *pick)
{
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		for (int j = 0; j < s->t->kind[k].n; j++)
			if (s->h->is_placed && same_nodes(&s->t->kind[k].opt[j].tier, &s->h->placed[k]))
				pick[k] = s->t->kind[k].dflt = j;
}

static void spec_of(struct ferry_auto_tiers *t)
{
	size_t w = 0;

	t->spec[0] = '\0';
	for (int k = 0; k < FERRY_HOST_KINDS && w < sizeof(t->spec); k++)
		if (t->kind[k].bytes && !t->kind[k].given && t->kind[k].chosen >= 0)
			w += (size_t)snprintf(t->spec + w, sizeof(t->spec) - w, "%s%s=%s", w ? "," : "",
					      ferry_host_kind_name(k), t->kind[k].opt[t->kind[k].chosen].name);
}

/* Nothing fits: says so, with why the default placement does not. */
static ferry_status refuse(struct tsearch *s)
{
	char why[600] = "";

	if (ferry_host_tiers_place(s->h, s->host_kind_bytes, NULL) != FERRY_OK)
		snprintf(why, sizeof(why), "; the default placement: %s", ferry_last_error());
	return ferry_error(FERRY_ERR_INVALID, "--policy auto: no placement on the host tiers holds the host state "
			   "(%d tried)%s", s->t->searched, why);
}

ferry_status ferry_auto_tiers_search(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, ferry_calibration_t c,
				     struct ferry_auto_result *r)
{
	struct tsearch s = { cfg, B, T, *opts, c, opts->host_tiers, &r->tiers, { 0 } };
	struct ferry_tier asked[FERRY_HOST_KINDS];
	struct ferry_prediction best;
	int pick[FERRY_HOST_KINDS];
	bool fits;
	ferry_status st;

	memset(&r->tiers, 0, sizeof(r->tiers));
	if (!s.h)
		return FERRY_OK;
	r->tiers.active = true;
	s.o.policy = r->policy, s.o.optimizer = r->optimizer, s.o.offload_params = r->offload_params;
	s.o.mlp_tile = r->mlp_tile, s.o.loss_tile = r->loss_tile;
	memcpy(asked, s.h->asked, sizeof(asked));
	if ((st = setup(&s, pick)))
		return st;
	/* the default: the tiers' own placement, as given */
	r->tiers.searched++;
	st = ferry_model_predict(cfg, B, T, &s.o, c, &best);
	fits = r->tiers.default_fits = !st && best.host_fits;
	r->tiers.default_s = fits ? best.step_s : 0;
	default_picks(&s, pick);
	for (int k = 0; k < 8 && pass(&s, pick, &best, &fits); k++)
		;
	memcpy(s.h->asked, asked, sizeof(asked));
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		if (r->tiers.kind[k].n) {
			struct ferry_auto_tier_kind *kd = &r->tiers.kind[k];

			kd->chosen = pick[k];
			kd->opt[pick[k]].judged = true, kd->opt[pick[k]].fits = fits, kd->opt[pick[k]].step_s = best.step_s;
		}
	spec_of(&r->tiers);
	if (!fits)
		return refuse(&s);
	r->pred = best;
	return FERRY_OK;
}

void ferry_auto_tiers_apply(ferry_host_tiers_t h, const struct ferry_auto_result *r)
{
	if (!h || !r->tiers.active)
		return;
	tiers_follow(h, r->optimizer);
	for (int k = 0; k < FERRY_HOST_KINDS; k++) {
		const struct ferry_auto_tier_kind *kd = &r->tiers.kind[k];

		if (!kd->given && kd->chosen >= 0)
			h->asked[k] = kd->opt[kd->chosen].tier;
	}
}
