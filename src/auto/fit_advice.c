/*
 * Advice when a plan does not fit the device: the activation presets that
 * fit as they are; tiles of tokens that would make it fit; and the best
 * placement ferry can make, searched over where the weights and AdamW's
 * state live, ZeRO's stages on several ranks, tiles and presets together.
 * Each candidate is planned, so the advice is what ferry would run.
 */
#include "ferry/cost.h"
#include "ferry/comm.h"
#include "ferry/model.h"
#include "ferry/policy.h"

#include <stdio.h>
#include <string.h>

int ferry_model_fitting_presets(const struct ferry_model_config *cfg, int B, int T,
				const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n)
{
	char size[FERRY_SIZE_CHARS];
	size_t used = 0;
	int count = 0;

	if (n)
		buf[0] = 0;
	for (int i = 0; i < ferry_policy_preset_count(); i++) {
		struct ferry_exec_opts o = *opts;
		struct ferry_plan p;

		o.policy = ferry_policy_preset_name(i);
		if (ferry_model_plan(cfg, B, T, &o, &p) != FERRY_OK || p.mem.peak_bytes > capacity)
			continue;
		count++;
		if (used + 80 < n)
			used += (size_t)snprintf(buf + used, n - used, "%s%s (%s)", used ? ", " : "", o.policy,
						 ferry_format_size(p.mem.peak_bytes, size));
	}
	return count;
}

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

/* The placement search's axes, least moved first.  Where the weights live
 * (the layers', then the embeddings' and head's too), where AdamW's state
 * lives and is updated, how it is split over the ranks, and the tiles of
 * tokens. */
static const char *const weights_places[] = {
	"",
	"layers.weights=host:stream(1),",
	"layers.weights=host:stream(1),edges.weights=host:stream,",
};
static const char *const adam_places[] = { "device", "host:cpu", "host:stream" };
static const char *const shard_forms[] = { "", ":shard(%d)", ":shard(%d,grads)", ":shard(%d,params)" };
static const char *const tile_places[] = {
	"", ",activations.loss_tile=auto", ",activations.mlp_tile=auto",
	",activations.loss_tile=auto,activations.mlp_tile=auto",
};

/* The ranks ZeRO may split over: those asked for, else the run's. */
static int search_ranks(const struct ferry_exec_opts *opts)
{
	if (opts->zero_ranks > 1)
		return opts->zero_ranks;
	return opts->comm ? ferry_comm_size(opts->comm) : 1;
}

/* Candidate (w, a, s, t) written for --place, "" when it moves nothing
 * (the presets' and the tiles' advice cover that) or the ranks cannot
 * split it. */
static void candidate(int w, int a, int s, int t, int ranks, char *buf, size_t n)
{
	char shard[32];

	buf[0] = 0;
	if ((w == 0 && a == 0 && s == 0) || (s > 0 && ranks < 2))
		return;
	snprintf(shard, sizeof(shard), shard_forms[s], ranks);
	snprintf(buf, n, "%sadam=%s%s%s", weights_places[w], adam_places[a], shard, tile_places[t]);
}

/* Plans candidate place under every preset; the largest peak that fits in
 * capacity and beats *best, with its placement written into buf. */
static void try_placement(const struct ferry_model_config *cfg, int B, int T, const struct ferry_exec_opts *opts,
			  const char *place, size_t capacity, size_t *best, char *buf, size_t n)
{
	char text[FERRY_PLACE_CHARS];

	for (int i = 0; i < ferry_policy_preset_count(); i++) {
		struct ferry_exec_opts o = *opts;
		struct ferry_places places;
		struct ferry_plan p;

		o.policy = ferry_policy_preset_name(i);
		o.place = place;
		if (ferry_model_plan(cfg, B, T, &o, &p) != FERRY_OK || p.mem.peak_bytes > capacity ||
		    p.mem.peak_bytes <= *best || ferry_exec_opts_places(&o, &places) != FERRY_OK ||
		    ferry_places_format(&places, text, sizeof(text)) != FERRY_OK)
			continue;
		*best = p.mem.peak_bytes;
		snprintf(buf, n, "%s", text);
	}
}

size_t ferry_model_fitting_placement(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n)
{
	int ranks = search_ranks(opts);
	size_t best = 0;
	char place[FERRY_PLACE_CHARS], found[FERRY_PLACE_CHARS] = "";

	for (int w = 0; w < 3; w++)
		for (int a = 0; a < 3; a++)
			for (int s = 0; s < 4; s++)
				for (int t = 0; t < 4; t++) {
					candidate(w, a, s, t, ranks, place, sizeof(place));
					if (place[0])
						try_placement(cfg, B, T, opts, place, capacity, &best, found,
							      sizeof(found));
				}
	if (n)
		snprintf(buf, n, "%s", best ? found : "");
	return best;
}
