/*
 * Advice when a plan does not fit the device: tiles of tokens (--loss-tile,
 * --mlp-tile, ferry/plan.h) that would make it fit, each tried by planning
 * it, under the run's own policy first, then under each preset.
 */
#include "ferry/train.h"

#include <stdio.h>
#include <string.h>

/* The tiles to add, fewest first: the loss (it costs the head's product
 * once more), the MLP, both. */
static const struct {
	bool loss, mlp;
} tries[] = { { true, false }, { false, true }, { true, true } };

/* Tries each set of tiles that adds one under policy; true (its flags and
 * peak in buf) at the first that fits. */
static bool try_tiles(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
		      const char *policy, size_t capacity, char *buf, size_t n, size_t *peak)
{
	char size[FERRY_SIZE_CHARS];

	for (size_t k = 0; k < sizeof(tries) / sizeof(*tries); k++) {
		struct ferry_exec_opts o = *opts;
		struct ferry_plan p;

		if ((!tries[k].loss || opts->loss_tile) && (!tries[k].mlp || opts->mlp_tile))
			continue; /* adds nothing */
		o.policy = policy;
		o.loss_tile = tries[k].loss && !o.loss_tile ? FERRY_TILE_AUTO : o.loss_tile;
		o.mlp_tile = tries[k].mlp && !o.mlp_tile ? FERRY_TILE_AUTO : o.mlp_tile;
		if (ferry_model_plan(cfg, B, T, &o, &p) != FERRY_OK || p.mem.peak_bytes > capacity)
			continue;
		snprintf(buf, n, "%s%s%s%s%s (%s)", policy != opts->policy ? "--policy " : "",
			 policy != opts->policy ? policy : "", policy != opts->policy ? " " : "",
			 o.mlp_tile != opts->mlp_tile ? "--mlp-tile auto" : "",
			 o.loss_tile != opts->loss_tile ? (o.mlp_tile != opts->mlp_tile ? " --loss-tile auto" : "--loss-tile auto")
							: "",
			 ferry_format_size(p.mem.peak_bytes, size));
		*peak = p.mem.peak_bytes;
		return true;
	}
	return false;
}

size_t ferry_model_fitting_tiles(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n)
{
	size_t peak = 0;

	if (n)
		buf[0] = 0;
	if (try_tiles(cfg, B, T, opts, opts->policy, capacity, buf, n, &peak))
		return peak;
	for (int i = 0; i < ferry_policy_preset_count(); i++)
		if (try_tiles(cfg, B, T, opts, ferry_policy_preset_name(i), capacity, buf, n, &peak))
			return peak;
	return 0;
}
