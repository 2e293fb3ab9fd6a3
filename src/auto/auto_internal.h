/* Internal: --policy auto's search on host tiers (auto_tiers.c), used by
 * the placement search (auto_policy.c). */
#ifndef FERRY_AUTO_AUTO_INTERNAL_H
#define FERRY_AUTO_AUTO_INTERNAL_H

#include "ferry/cost.h"
#include "ferry/model.h"

/* For r's choice (its policy, optimizer and weights' placement) with host
 * tiers opts->host_tiers (none: nothing to do): each kind's tier, into
 * r->tiers, and r->pred as predicted there.  opts->host_tiers places as
 * before when it returns.  Error: no placement on the tiers holds the host
 * state. */
ferry_status ferry_auto_tiers_search(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, ferry_calibration_t c,
				     struct ferry_auto_result *r) FERRY_MUST_CHECK;
/* Makes r's tier choice, and its optimizer's placement, what h places from
 * now (as if --host-tier had named the tiers). */
void ferry_auto_tiers_apply(ferry_host_tiers_t h, const struct ferry_auto_result *r);

#endif
