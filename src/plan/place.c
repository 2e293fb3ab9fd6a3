/*
 * Placements written down and read back (ferry/place.h), checked, and
 * derived from the execution options' shorthand flags.
 *
 * Parsing applies items to a copy and commits it only when every item is
 * good, so a bad spec changes nothing.  Formatting writes every group, in
 * group order, then the activations, so format(parse(format(p))) is
 * format(p) and a plan printed with its placements is reproduced by
 * feeding them back.
 */
#include "ferry/place.h"
#include "ferry/comm.h"
#include "ferry/plan.h"
#include "tier/tier_spec.h"
#include "core/error.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const group_names[FERRY_GROUP_COUNT] = {
	[FERRY_GROUP_LAYER_WEIGHTS] = "layers.weights",
	[FERRY_GROUP_EDGE_WEIGHTS] = "edges.weights",
	[FERRY_GROUP_ADAM] = "adam",
};

#define MAX_DEPTH 64 /* ring depths: as --param-prefetch and --prefetch-depth allow */
#define MAX_SHARDS (1 << 20) /* ranks a group is split over */

const char *ferry_place_group_name(enum ferry_place_group g)
{
	return g >= 0 && g < FERRY_GROUP_COUNT ? group_names[g] : "?";
}

/* A placement without host tiers named. */
static struct ferry_place place_of(enum ferry_home home, enum ferry_access access, int depth, enum ferry_update update,
				   bool speculative)
{
	return (struct ferry_place){ .home = home, .access = access, .depth = depth, .update = update,
				     .speculative = speculative };
}

#define ON_DEVICE place_of(FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_NONE, false)

void ferry_places_default(struct ferry_places *p)
{
	memset(p, 0, sizeof(*p));
	p->group[FERRY_GROUP_LAYER_WEIGHTS] = ON_DEVICE;
	p->group[FERRY_GROUP_EDGE_WEIGHTS] = ON_DEVICE;
	p->group[FERRY_GROUP_ADAM] = ON_DEVICE;
	p->group[FERRY_GROUP_ADAM].update = FERRY_UPDATE_DEVICE;
}

/* ---- reading ------------------------------------------------------------------------ */

/* "NAME(D)" with NAME matched: *depth = D (1 to max); "NAME" alone:
 * *depth untouched.  Whether v is one of these. */
static bool word_with_depth(const char *v, const char *name, int max, int *depth)
{
	size_t n = strlen(name);
	char *end;
	long d;

	if (strncmp(v, name, n))
		return false;
	if (!v[n])
		return true;
	if (v[n] != '(')
		return false;
	d = strtol(v + n + 1, &end, 10);
	if (end == v + n + 1 || strcmp(end, ")") || d < 1 || d > max)
		return false;
	*depth = (int)d;
	return true;
}

static ferry_status weights_value(const char *key, const char *v, enum ferry_place_group g, struct ferry_place *out)
{
	int depth = 1;

	if (!strcmp(v, "device")) {
		*out = ON_DEVICE;
		return FERRY_OK;
	}
	if (g == FERRY_GROUP_LAYER_WEIGHTS ? word_with_depth(v, "host:stream", MAX_DEPTH, &depth) : !strcmp(v, "host:stream")) {
		*out = place_of(FERRY_HOME_HOST, FERRY_ACCESS_STREAM, g == FERRY_GROUP_LAYER_WEIGHTS ? depth : 0,
				FERRY_UPDATE_NONE, false);
		return FERRY_OK;
	}
	if (!strncmp(v, "host(", 5))
		return ferry_error(FERRY_ERR_INVALID, "--place %s=%s: the weights stream from AdamW's arrays on the "
				   "host: their tier is adam's (adam=host(TIER):...)", key, v);
	return ferry_error(FERRY_ERR_INVALID, "--place %s=%s: %s", key, v,
			   g == FERRY_GROUP_LAYER_WEIGHTS ? "device or host:stream(D), D layers loaded ahead (1 to 64)"
							  : "device or host:stream");
}

/* Whether t can name a tier (ferry/tier.h resolves it): 1 to
 * FERRY_TIER_NAME_CHARS - 1 of the characters tier names use. */
static bool tier_word(const char *t, size_t len)
{
	return len && len < FERRY_TIER_NAME_CHARS && strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789:*+") >= len;
}

/* The kinds of adam's host state that are only copied to and from the
 * device (streamed, not updated on the host): NVMe may hold them. */
static unsigned adam_copied_kinds(const struct ferry_place *adam)
{
	bool streamed = adam->home == FERRY_HOME_HOST && adam->update != FERRY_UPDATE_HOST;

	return streamed ? 1u << FERRY_HOST_PARAMS | 1u << FERRY_HOST_OPTIMIZER : 0;
}

/* adam's host tiers from the inside of host(...), given AdamW's placement
 * *out: one TIER for every kind of its host state (nvme: those it can
 * hold), or KIND=TIER items. */
static ferry_status adam_tiers(const char *v, const char *in, size_t len, struct ferry_place *out)
{
	char spec[512], what[600], names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS];
	bool single = !memchr(in, '=', len), any = false;
	ferry_status st;

	if (len >= sizeof(spec) - 4 || (single && !tier_word(in, len)))
		return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: host(TIER) or host(KIND=TIER,...): TIER "
				   "dram, node:N, cxl, interleave:N*W+M*V, nvme or auto", v);
	snprintf(spec, sizeof(spec), "%s%.*s", single ? "all=" : "", (int)len, in);
	snprintf(what, sizeof(what), "--place adam=%.*s", (int)(sizeof(what) - 16), v);
	if ((st = ferry_tier_spec_split(what, spec, adam_copied_kinds(out), names)))
		return st;
	if (names[FERRY_HOST_ACTIVATIONS][0] && !single)
		return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: the activations' tier is activations.host", v);
	for (int k = FERRY_HOST_PARAMS; k < FERRY_HOST_KINDS; k++) {
		if (names[k][0] && !tier_word(names[k], strlen(names[k])))
			return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: '%s' is no tier name", v, names[k]);
		snprintf(out->tier[k], sizeof(out->tier[k]), "%s", names[k]);
		any |= names[k][0] != '\0';
	}
	if (!any)
		return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: the NVMe tier holds no state the host "
				   "threads compute on", v);
	return FERRY_OK;
}

/* "shard(N,grads)" or "shard(N,params)": N into *ranks. */
static bool grads_shard(const char *v, int *ranks)
{
	static const char head[] = "shard(";
	char *end;
	long n;

	if (strncmp(v, head, sizeof(head) - 1))
		return false;
	n = strtol(v + sizeof(head) - 1, &end, 10);
	if (end == v + sizeof(head) - 1 || (strcmp(end, ",grads)") && strcmp(end, ",params)")) || n < 1 ||
	    n > MAX_SHARDS)
		return false;
	*ranks = (int)n;
	return true;
}

static ferry_status adam_whole(const char *v, struct ferry_place *out)
{
	const char *tiers = !strncmp(v, "host(", 5) ? v + 5 : NULL, *close = tiers ? strchr(tiers, ')') : NULL;
	const char *how = close ? close + 1 : !strncmp(v, "host", 4) ? v + 4 : "";
	struct ferry_place pl = { 0 };
	int ranks = 0;

	if ((word_with_depth(v, "device:shard", MAX_SHARDS, &ranks) ||
	     (!strncmp(v, "device:", 7) && grads_shard(v + 7, &ranks))) && ranks > 1) {
		pl = place_of(FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_DEVICE, false);
		pl.shard = ranks;
		pl.shard_params = strstr(v, ",params)") != NULL;
		pl.shard_grads = pl.shard_params || strstr(v, ",grads)") != NULL;
	} else if (!strcmp(v, "device"))
		pl = place_of(FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_DEVICE, false);
	else if (!strcmp(how, ":stream"))
		pl = place_of(FERRY_HOME_HOST, FERRY_ACCESS_STREAM, 0, FERRY_UPDATE_DEVICE, false);
	else if (!strcmp(how, ":cpu") || !strcmp(how, ":cpu(speculative)"))
		pl = place_of(FERRY_HOME_HOST, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_HOST, !strcmp(how, ":cpu(speculative)"));
	else
		return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: device, host:stream (updated on the device "
				   "through a ring), host:cpu or host:cpu(speculative) (updated by host threads), or "
				   "device:shard(N) (split over N ranks, 2 or more; shard(N,grads): the gradients too, "
				   "shard(N,params): and the parameters), host:stream:shard(N) or host:cpu:shard(N) "
				   "(host:cpu:shard(N,grads): the gradients too, host:cpu:shard(N,params): and the "
				   "parameters); "
				   "host(TIER) or host(KIND=TIER,...) names its tiers", v);
	if (tiers && close) {
		ferry_status st = adam_tiers(v, tiers, (size_t)(close - tiers), &pl);

		if (st)
			return st;
	}
	*out = pl;
	return FERRY_OK;
}

/* adam's host forms with ":shard(N)" after them (N >= 2): split over N
 * ranks as device:shard(N) is (ZeRO-1 with the state on the host;
 * ":shard(N,grads)": ZeRO-2's gradients too; ":shard(N,params)": ZeRO-3's
 * parameters too). */
static ferry_status adam_value(const char *v, struct ferry_place *out)
{
	const char *s = strstr(v, ":shard(");
	char whole[FERRY_PLACE_CHARS];
	int ranks = 0;
	ferry_status st;

	if (strncmp(v, "host", 4) || !s ||
	    !(word_with_depth(s + 1, "shard", MAX_SHARDS, &ranks) || grads_shard(s + 1, &ranks)) ||
	    ranks < 2 ||
	    (size_t)(s - v) >= sizeof(whole))
		return adam_whole(v, out);
	snprintf(whole, sizeof(whole), "%.*s", (int)(s - v), v);
	if ((st = adam_whole(whole, out)))
		return st;
	out->shard = ranks;
	out->shard_params = strstr(s, ",params)") != NULL;
	out->shard_grads = out->shard_params || strstr(s, ",grads)") != NULL;
	return FERRY_OK;
}

/* adam.grads=host | device:stream(D) | device:stream (D 1). */
static ferry_status adam_grads_value(const char *v, int *out)
{
	int depth = 1;

	if (!strcmp(v, "host")) {
		*out = 0;
		return FERRY_OK;
	}
	if (!strncmp(v, "device:", 7) && word_with_depth(v + 7, "stream", FERRY_GRADS_DEVICE_MAX_DEPTH, &depth)) {
		*out = depth;
		return FERRY_OK;
	}
	return ferry_error(FERRY_ERR_INVALID, "--place adam.grads=%s: host (a host copy of every gradient) or "
			   "device:stream(D) (they stay on the device; the host threads read them through D + 1 "
			   "host slots, D from 1 to %d)", v, FERRY_GRADS_DEVICE_MAX_DEPTH);
}

/* How a spec names the activations: not yet, by policy, or name by name
 * (a custom policy built from its items; a policy from before the spec,
 * the flags', is replaced). */
enum act_form { ACT_UNNAMED, ACT_POLICY, ACT_NAMES };

/* Appends "NAME=V" to the custom policy being built in *p. */
static ferry_status add_custom(struct ferry_places *p, const char *name, const char *v, enum act_form *form)
{
	size_t len;
	int n;

	if (*form == ACT_POLICY)
		return ferry_error(FERRY_ERR_INVALID, "--place activations.%s=%s: activations=%s already names the "
				   "policy (per-name items build a custom one: use one form)", name, v, p->policy);
	if (!*name || strchr(name, ':'))
		return ferry_error(FERRY_ERR_INVALID, "--place activations.%s: not an activation name", name);
	if (*form == ACT_UNNAMED)
		p->policy[0] = '\0';
	len = strlen(p->policy);
	n = snprintf(p->policy + len, sizeof(p->policy) - len, "%s%s=%s", len ? "," : "custom:", name, v);
	if (n < 0 || (size_t)n >= sizeof(p->policy) - len)
		return ferry_error(FERRY_ERR_INVALID, "--place: the activation names add up to more than %d characters",
				   FERRY_PLACE_POLICY_CHARS - 1);
	*form = ACT_NAMES;
	return FERRY_OK;
}

/* Tokens per tile (ferry_exec_opts' mlp_tile, loss_tile): a count, auto
 * or 0 (untiled). */
static ferry_status tile_value(const char *key, const char *v, int *out)
{
	char *end;
	long n;

	if (!strcmp(v, "auto")) {
		*out = FERRY_TILE_AUTO;
		return FERRY_OK;
	}
	n = strtol(v, &end, 10);
	if (end == v || *end || n < 0 || n > INT_MAX)
		return ferry_error(FERRY_ERR_INVALID, "--place activations.%s=%s: tokens per tile (0: untiled) "
				   "or auto", key, v);
	*out = (int)n;
	return FERRY_OK;
}

/* activations.prefetch=D, D1+D2... (a depth per tier of the span) or
 * auto, into *depth (per tier: the deepest) and tiers[]; unchanged on
 * error. */
ferry_status ferry_prefetch_parse(const char *v, int *depth, int tiers[FERRY_PREFETCH_TIERS])
{
	int d[FERRY_PREFETCH_TIERS] = { 0 }, n = 0, deepest = 0;
	const char *s = v;

	if (!strcmp(v, "auto")) {
		*depth = FERRY_PREFETCH_AUTO;
		memset(tiers, 0, FERRY_PREFETCH_TIERS * sizeof(int));
		return FERRY_OK;
	}
	for (;;) {
		char *end;
		long x = strtol(s, &end, 10);

		if (end == s || x < 1 || x > MAX_DEPTH || n == FERRY_PREFETCH_TIERS || (*end && *end != '+'))
			return ferry_error(FERRY_ERR_INVALID, "activations.prefetch=%s: layers loaded ahead, 1 to %d, "
					   "one depth or one per tier of activations.host (D1+D2..., at most %d), or auto",
					   v, MAX_DEPTH, FERRY_PREFETCH_TIERS);
		d[n++] = (int)x;
		deepest = x > deepest ? (int)x : deepest;
		if (!*end)
			break;
		s = end + 1;
	}
	*depth = deepest;
	memset(tiers, 0, FERRY_PREFETCH_TIERS * sizeof(int));
	if (n > 1)
		memcpy(tiers, d, sizeof(d));
	return FERRY_OK;
}

static ferry_status activations_item(struct ferry_places *p, const char *key, const char *v, enum act_form *form)
{
	if (!strcmp(key, "activations")) {
		if (*form == ACT_NAMES || !*v || strlen(v) >= sizeof(p->policy))
			return ferry_error(FERRY_ERR_INVALID, "--place activations=%s: %s", v,
					   *form == ACT_NAMES ? "per-name activations items already build a custom policy: "
								"use one form"
							      : "a --policy spec (of at most 1023 characters)");
		snprintf(p->policy, sizeof(p->policy), "%s", v);
		*form = ACT_POLICY;
		return FERRY_OK;
	}
	key += strlen("activations.");
	if (!strcmp(key, "mlp_tile"))
		return tile_value("mlp_tile", v, &p->mlp_tile);
	if (!strcmp(key, "loss_tile"))
		return tile_value("loss_tile", v, &p->loss_tile);
	if (!strcmp(key, "host")) {
		if (!tier_word(v, strlen(v)))
			return ferry_error(FERRY_ERR_INVALID, "--place activations.host=%s: a tier: dram, node:N, cxl, "
					   "interleave:N*W+M*V, nvme or auto", v);
		snprintf(p->act_tier, sizeof(p->act_tier), "%s", v);
		return FERRY_OK;
	}
	if (!strcmp(key, "prefetch"))
		return ferry_prefetch_parse(v, &p->act_prefetch, p->act_prefetch_tier);
	return add_custom(p, key, v, form);
}

static ferry_status apply_item(struct ferry_places *p, char *item, enum act_form *form)
{
	char *eq = strchr(item, '=');
	const char *key = item, *v;

	if (!eq)
		return ferry_error(FERRY_ERR_INVALID, "--place '%s': GROUP=PLACEMENT expected (groups: layers.weights, "
				   "edges.weights, adam, adam.grads, activations, activations.NAME, activations.host, "
				   "activations.prefetch, activations.mlp_tile, activations.loss_tile)", item);
	*eq = '\0';
	v = eq + 1;
	if (!strcmp(key, "layers.weights"))
		return weights_value(key, v, FERRY_GROUP_LAYER_WEIGHTS, &p->group[FERRY_GROUP_LAYER_WEIGHTS]);
	if (!strcmp(key, "edges.weights"))
		return weights_value(key, v, FERRY_GROUP_EDGE_WEIGHTS, &p->group[FERRY_GROUP_EDGE_WEIGHTS]);
	if (!strcmp(key, "adam"))
		return adam_value(v, &p->group[FERRY_GROUP_ADAM]);
	if (!strcmp(key, "adam.grads"))
		return adam_grads_value(v, &p->adam_grads_device);
	if (!strcmp(key, "activations") || !strncmp(key, "activations.", strlen("activations.")))
		return activations_item(p, key, v, form);
	return ferry_error(FERRY_ERR_INVALID, "--place: unknown group '%s' (groups: layers.weights, edges.weights, "
			   "adam, adam.grads, activations, activations.NAME, activations.host, activations.prefetch, "
			   "activations.mlp_tile, activations.loss_tile)", key);
}

/* The next item of s (commas inside brackets do not end it), trimmed,
 * into buf; the rest after it.  NULL at the end. */
static const char *next_item(const char *s, char *buf, size_t n, bool *too_long)
{
	int depth = 0;
	size_t len = 0;

	while (*s == ',' || isspace((unsigned char)*s))
		s++;
	if (!*s)
		return NULL;
	for (; *s && (depth > 0 || *s != ','); s++) {
		depth += (*s == '(' || *s == '[') - (*s == ')' || *s == ']');
		if (len + 1 < n)
			buf[len++] = *s;
		else
			*too_long = true;
	}
	while (len && isspace((unsigned char)buf[len - 1]))
		len--;
	buf[len] = '\0';
	return s;
}

/* Whether an item of spec before `before` names the group `item` names
 * (the same text before '='): the later would silently win. */
static bool named_before(const char *spec, const char *before, const char *item)
{
	char prev[FERRY_PLACE_POLICY_CHARS + 32];
	size_t klen = strcspn(item, "=");
	bool too_long = false;

	for (const char *s = spec; s < before && (s = next_item(s, prev, sizeof(prev), &too_long)) && s < before;)
		if (strcspn(prev, "=") == klen && !strncmp(prev, item, klen))
			return true;
	return false;
}

ferry_status ferry_places_parse(const char *spec, struct ferry_places *p)
{
	struct ferry_places q = *p;
	char item[FERRY_PLACE_POLICY_CHARS + 32];
	enum act_form form = ACT_UNNAMED;
	bool too_long = false;
	ferry_status st;

	if (!spec)
		return FERRY_OK;
	for (const char *s = spec; (s = next_item(s, item, sizeof(item), &too_long));) {
		if (too_long)
			return ferry_error(FERRY_ERR_INVALID, "--place: an item longer than %zu characters",
					   sizeof(item) - 1);
		if (named_before(spec, s, item))
			return ferry_error(FERRY_ERR_INVALID, "--place: %.*s is named twice (the second, '%s', would "
					   "silently replace the first): name each once", (int)strcspn(item, "="), item,
					   item);
		if ((st = apply_item(&q, item, &form)))
			return st;
	}
	*p = q;
	return FERRY_OK;
}

/* ---- checking ----------------------------------------------------------------------- */

static int prefetch_tiers(const struct ferry_places *p)
{
	int n = 0;

	while (n < FERRY_PREFETCH_TIERS && p->act_prefetch_tier[n])
		n++;
	return n;
}

/* The tiers of "dram+nvme". */
static int span_tiers(const char *tier)
{
	int n = 1;

	for (; *tier; tier++)
		n += *tier == '+';
	return n;
}

ferry_status ferry_places_check(const struct ferry_places *p)
{
	const struct ferry_place *lw = &p->group[FERRY_GROUP_LAYER_WEIGHTS], *ew = &p->group[FERRY_GROUP_EDGE_WEIGHTS],
				 *adam = &p->group[FERRY_GROUP_ADAM];

	if (p->adam_grads_device && (adam->update != FERRY_UPDATE_HOST || adam->home != FERRY_HOME_HOST))
		return ferry_error(FERRY_ERR_INVALID, "--device-grads (adam.grads=device:stream(D)) keeps the gradients "
				   "on the device for AdamW on host threads: it needs --offload-optimizer cpu "
				   "(adam=host:cpu)");
	if (p->adam_grads_device && lw->home == FERRY_HOME_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--device-grads (adam.grads=device:stream(D)) with "
				   "--offload-params (layers.weights=host:stream): the weight ring sends the layers' "
				   "gradients to the host: not together");
	if (adam->speculative && adam->update != FERRY_UPDATE_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--clip-order speculative (adam=host:cpu(speculative)) updates on "
				   "host threads: it needs --offload-optimizer cpu (adam=host:cpu)");
	if (ew->home == FERRY_HOME_HOST && lw->home != FERRY_HOME_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--offload-embeddings streams the embeddings and the head as "
				   "--offload-params streams the layers: it needs --offload-params (in --place, "
				   "edges.weights=host:stream needs layers.weights=host:stream)");
	if (lw->home == FERRY_HOME_HOST && adam->home != FERRY_HOME_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--offload-params (layers.weights=host:stream) keeps the master "
				   "weights on the host: AdamW's state goes there too, --offload-optimizer stream or cpu "
				   "(not device), adam=host:stream or host:cpu in --place");
	/* the weight ring copies the parameters straight from host memory:
	   an NVMe file is not that */
	if (p->act_prefetch_tier[0] && p->act_tier[0] && prefetch_tiers(p) != span_tiers(p->act_tier))
		return ferry_error(FERRY_ERR_INVALID, "activations.prefetch: %d depths for the %d tier(s) offloaded "
				   "activations span (activations.host=%s): one per tier, in its order", prefetch_tiers(p),
				   span_tiers(p->act_tier), p->act_tier);
	if (lw->home == FERRY_HOME_HOST && !strcmp(adam->tier[FERRY_HOST_PARAMS], "nvme"))
		return ferry_error(FERRY_ERR_INVALID, "--offload-params (layers.weights=host:stream) streams the "
				   "parameters from host memory: the NVMe tier cannot hold them (--host-tier params= or "
				   "all= a memory tier: dram, node:N, cxl)");
	return FERRY_OK;
}

/* ---- writing ------------------------------------------------------------------------ */

static void weights_text(const struct ferry_place *pl, char *buf, size_t n)
{
	if (pl->home == FERRY_HOME_DEVICE)
		snprintf(buf, n, "device");
	else if (pl->depth)
		snprintf(buf, n, "host:stream(%d)", pl->depth);
	else
		snprintf(buf, n, "host:stream");
}

/* adam's home: host, host(TIER) when every kind of its host state has
 * that tier, else host(KIND=TIER,...) of the kinds named. */
static void adam_home_text(const struct ferry_place *pl, char *buf, size_t n)
{
	const char *t = pl->tier[FERRY_HOST_PARAMS];
	bool same = t[0];
	size_t len;

	for (int k = FERRY_HOST_PARAMS; k < FERRY_HOST_KINDS; k++)
		same &= !strcmp(pl->tier[k], t);
	if (same) {
		snprintf(buf, n, "host(%s)", t);
		return;
	}
	len = (size_t)snprintf(buf, n, "host(");
	for (int k = FERRY_HOST_PARAMS; k < FERRY_HOST_KINDS && len < n; k++)
		if (pl->tier[k][0])
			len += (size_t)snprintf(buf + len, n - len, "%s%s=%s", len > 5 ? "," : "", ferry_host_kind_name(k),
						pl->tier[k]);
	if (len == 5)
		snprintf(buf, n, "host");
	else if (len < n)
		snprintf(buf + len, n - len, ")");
}

static void adam_text(const struct ferry_place *pl, char *buf, size_t n)
{
	char home[FERRY_HOST_KINDS * (FERRY_TIER_NAME_CHARS + 16)];

	if (pl->home == FERRY_HOME_DEVICE && pl->shard > 1) {
		snprintf(buf, n, "device:shard(%d%s)", pl->shard, pl->shard_params ? ",params" : pl->shard_grads ? ",grads" : "");
		return;
	}
	if (pl->home == FERRY_HOME_DEVICE) {
		snprintf(buf, n, "device");
		return;
	}
	adam_home_text(pl, home, sizeof(home));
	snprintf(buf, n, "%s:%s", home, pl->update == FERRY_UPDATE_DEVICE ? "stream"
					: pl->speculative ? "cpu(speculative)" : "cpu");
	if (pl->shard > 1 && strlen(buf) < n)
		snprintf(buf + strlen(buf), n - strlen(buf), ":shard(%d%s)", pl->shard,
			 pl->shard_params ? ",params" : pl->shard_grads ? ",grads" : "");
}

/* ",activations.KEY=N" (or auto) when tiled: untiled placements print as
 * they did before tiles. */
static void tile_text(const char *key, int tile, char *buf, size_t n, size_t *len)
{
	if (!tile || *len >= n)
		return;
	if (tile == FERRY_TILE_AUTO)
		*len += (size_t)snprintf(buf + *len, n - *len, ",activations.%s=auto", key);
	else
		*len += (size_t)snprintf(buf + *len, n - *len, ",activations.%s=%d", key, tile);
}

size_t ferry_prefetch_format(int depth, const int tiers[FERRY_PREFETCH_TIERS], char *buf, size_t n)
{
	size_t len = 0;

	if (!tiers[0])
		return (size_t)(depth == FERRY_PREFETCH_AUTO ? snprintf(buf, n, "auto")
				: snprintf(buf, n, "%d", depth ? depth : FERRY_DEFAULT_PREFETCH_DEPTH));
	for (int i = 0; i < FERRY_PREFETCH_TIERS && tiers[i] && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "+" : "", tiers[i]);
	return len;
}

/* The activations: the policy as one item, or a custom policy's names as
 * an item each (its commas would end the item). */
static void activations_text(const struct ferry_places *p, char *buf, size_t n)
{
	const char *policy = p->policy[0] ? p->policy : "everything_saveable";
	size_t len = 0;

	buf[0] = '\0';
	if (strncmp(policy, "custom:", 7)) {
		len = (size_t)snprintf(buf, n, "activations=%s", policy);
	} else {
		for (const char *s = policy + 7; *s && len < n;) {
			size_t k = strcspn(s, ",");

			len += (size_t)snprintf(buf + len, n - len, "%sactivations.%.*s", len ? "," : "", (int)k, s);
			s += k + (s[k] == ',');
		}
	}
	if (p->act_tier[0] && len < n)
		len += (size_t)snprintf(buf + len, n - len, ",activations.host=%s", p->act_tier);
	if (len < n)
		len += (size_t)snprintf(buf + len, n - len, ",activations.prefetch=");
	if (len < n)
		len += ferry_prefetch_format(p->act_prefetch, p->act_prefetch_tier, buf + len, n - len);
	tile_text("mlp_tile", p->mlp_tile, buf, n, &len);
	tile_text("loss_tile", p->loss_tile, buf, n, &len);
}

ferry_status ferry_places_format(const struct ferry_places *p, char *buf, size_t n)
{
	char lw[32], ew[32], adam[FERRY_HOST_KINDS * (FERRY_TIER_NAME_CHARS + 16) + 32], act[FERRY_PLACE_CHARS];
	char grads[48] = "";
	int r;

	weights_text(&p->group[FERRY_GROUP_LAYER_WEIGHTS], lw, sizeof(lw));
	weights_text(&p->group[FERRY_GROUP_EDGE_WEIGHTS], ew, sizeof(ew));
	adam_text(&p->group[FERRY_GROUP_ADAM], adam, sizeof(adam));
	activations_text(p, act, sizeof(act));
	if (p->adam_grads_device) /* the default (host) prints as before the key */
		snprintf(grads, sizeof(grads), "adam.grads=device:stream(%d),", p->adam_grads_device);
	r = snprintf(buf, n, "layers.weights=%s,edges.weights=%s,adam=%s,%s%s", lw, ew, adam, grads, act);
	if (r < 0 || (size_t)r >= n)
		return ferry_error(FERRY_ERR_INVALID, "placements: more than %zu characters", n - 1);
	return FERRY_OK;
}

/* The tier named for kind k ("" when none): the activations', or
 * adam's host state's. */
static const char *tier_of(const struct ferry_places *p, int k)
{
	const struct ferry_place *adam = &p->group[FERRY_GROUP_ADAM];

	if (k == FERRY_HOST_ACTIVATIONS)
		return p->act_tier;
	return adam->home == FERRY_HOME_HOST ? adam->tier[k] : "";
}

ferry_status ferry_places_tier_spec(const struct ferry_places *p, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int k = 0; k < FERRY_HOST_KINDS && len < n; k++)
		if (tier_of(p, k)[0])
			len += (size_t)snprintf(buf + len, n - len, "%s%s=%s", len ? "," : "", ferry_host_kind_name(k),
						tier_of(p, k));
	if (len >= n)
		return ferry_error(FERRY_ERR_INVALID, "host tiers: more than %zu characters", n - 1);
	return FERRY_OK;
}

/* ---- from the execution options ----------------------------------------------------- */

ferry_status ferry_places_set_tiers(struct ferry_places *p, const char *spec)
{
	char names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS];
	struct ferry_place *adam = &p->group[FERRY_GROUP_ADAM];
	ferry_status st = ferry_tier_spec_split("--host-tier", spec, adam_copied_kinds(adam), names);

	for (int k = 0; k < FERRY_HOST_KINDS && !st; k++)
		if (names[k][0] && !tier_word(names[k], strlen(names[k])))
			st = ferry_error(FERRY_ERR_INVALID, "--host-tier %s=%s: not a tier name", ferry_host_kind_name(k),
					 names[k]);
	if (st)
		return st;
	if (names[FERRY_HOST_ACTIVATIONS][0])
		snprintf(p->act_tier, sizeof(p->act_tier), "%s", names[FERRY_HOST_ACTIVATIONS]);
	for (int k = FERRY_HOST_PARAMS; k < FERRY_HOST_KINDS && adam->home == FERRY_HOME_HOST; k++)
		if (names[k][0])
			snprintf(adam->tier[k], sizeof(adam->tier[k]), "%s", names[k]);
	return FERRY_OK;
}

/* The shorthand flags' placements (their own range checks first), then
 * opts->place on top. */
ferry_status ferry_exec_opts_places(const struct ferry_exec_opts *o, struct ferry_places *p)
{
	ferry_status st;

	ferry_places_default(p);
	if (!o)
		return FERRY_OK;
	if (o->optimizer < FERRY_OPTIM_DEVICE || o->optimizer > FERRY_OPTIM_CPU)
		return ferry_error(FERRY_ERR_INVALID, "optimizer placement %d: device, stream or cpu", (int)o->optimizer);
	if (o->clip_order != FERRY_CLIP_EXACT && o->clip_order != FERRY_CLIP_SPECULATIVE)
		return ferry_error(FERRY_ERR_INVALID, "clipping order %d: exact or speculative", (int)o->clip_order);
	if (!o->offload_params && o->param_prefetch)
		return ferry_error(FERRY_ERR_INVALID, "--param-prefetch needs --offload-params");
	if (o->param_prefetch < 0 || o->param_prefetch > MAX_DEPTH)
		return ferry_error(FERRY_ERR_INVALID, "--param-prefetch %d: from 1 to %d layers", o->param_prefetch,
				   MAX_DEPTH);
	if (o->optimizer != FERRY_OPTIM_DEVICE)
		(void)adam_value(o->optimizer == FERRY_OPTIM_STREAM ? "host:stream" : "host:cpu", &p->group[FERRY_GROUP_ADAM]);
	p->group[FERRY_GROUP_ADAM].speculative = o->clip_order == FERRY_CLIP_SPECULATIVE;
	if (o->device_grads < 0 || o->device_grads > FERRY_GRADS_DEVICE_MAX_DEPTH)
		return ferry_error(FERRY_ERR_INVALID, "device_grads %d: 0 (a host copy of the gradients) or a ring "
				   "depth from 1 to %d", o->device_grads, FERRY_GRADS_DEVICE_MAX_DEPTH);
	p->adam_grads_device = o->device_grads;
	if (o->zero < 0 || o->zero > 3)
		return ferry_error(FERRY_ERR_INVALID, "--zero %d: 0, 1, 2 or 3", o->zero);
	if (o->zero >= 1) /* over the ranks asked for, else the run's */
		p->group[FERRY_GROUP_ADAM].shard = o->zero_ranks > 1 ? o->zero_ranks
						   : o->comm && ferry_comm_size(o->comm) > 1 ? ferry_comm_size(o->comm) : 0;
	p->group[FERRY_GROUP_ADAM].shard_grads = o->zero >= 2 && p->group[FERRY_GROUP_ADAM].shard > 1;
	p->group[FERRY_GROUP_ADAM].shard_params = o->zero == 3 && p->group[FERRY_GROUP_ADAM].shard > 1;
	if (o->offload_params)
		p->group[FERRY_GROUP_LAYER_WEIGHTS] = place_of(FERRY_HOME_HOST, FERRY_ACCESS_STREAM,
							       o->param_prefetch ? o->param_prefetch : 1, FERRY_UPDATE_NONE, false);
	if (o->offload_embeddings)
		p->group[FERRY_GROUP_EDGE_WEIGHTS] = place_of(FERRY_HOME_HOST, FERRY_ACCESS_STREAM, 0, FERRY_UPDATE_NONE,
							      false);
	if (o->policy && strlen(o->policy) >= sizeof(p->policy))
		return ferry_error(FERRY_ERR_INVALID, "policy: longer than %d characters", FERRY_PLACE_POLICY_CHARS - 1);
	snprintf(p->policy, sizeof(p->policy), "%s", o->policy ? o->policy : "");
	p->act_prefetch = o->prefetch_depth;
	memcpy(p->act_prefetch_tier, o->prefetch_tiers, sizeof(p->act_prefetch_tier));
	for (int i = 0; i < FERRY_PREFETCH_TIERS && p->act_prefetch_tier[i]; i++)
		p->act_prefetch = p->act_prefetch_tier[i] > p->act_prefetch ? p->act_prefetch_tier[i] : p->act_prefetch;
	if (o->mlp_tile < FERRY_TILE_AUTO || o->loss_tile < FERRY_TILE_AUTO)
		return ferry_error(FERRY_ERR_INVALID, "tiles of %d (MLP) and %d (loss) tokens: a count, 0 (untiled) "
				   "or auto", o->mlp_tile, o->loss_tile);
	p->mlp_tile = o->mlp_tile;
	p->loss_tile = o->loss_tile;
	if ((st = ferry_places_set_tiers(p, o->host_tier)) || (st = ferry_places_parse(o->place, p)))
		return st;
	return ferry_places_check(p);
}

enum ferry_optim_place ferry_places_optimizer(const struct ferry_places *p)
{
	const struct ferry_place *adam = &p->group[FERRY_GROUP_ADAM];

	if (adam->home == FERRY_HOME_DEVICE)
		return FERRY_OPTIM_DEVICE;
	return adam->update == FERRY_UPDATE_HOST ? FERRY_OPTIM_CPU : FERRY_OPTIM_STREAM;
}

void ferry_places_host_use(const struct ferry_places *p, unsigned *cpu_kinds, unsigned *copied_kinds)
{
	const struct ferry_place *adam = &p->group[FERRY_GROUP_ADAM];
	bool cpu = adam->home == FERRY_HOME_HOST && adam->update == FERRY_UPDATE_HOST;

	*cpu_kinds = cpu ? 1u << FERRY_HOST_PARAMS | 1u << FERRY_HOST_GRADS | 1u << FERRY_HOST_OPTIMIZER : 0;
	*copied_kinds = adam_copied_kinds(adam);
}

void ferry_optim_host_use(enum ferry_optim_place o, unsigned *cpu_kinds, unsigned *copied_kinds)
{
	struct ferry_places p;

	ferry_places_default(&p);
	if (o != FERRY_OPTIM_DEVICE)
		(void)adam_value(o == FERRY_OPTIM_STREAM ? "host:stream" : "host:cpu", &p.group[FERRY_GROUP_ADAM]);
	ferry_places_host_use(&p, cpu_kinds, copied_kinds);
}

enum ferry_host_kind ferry_host_kind_of(enum ferry_tensor_kind k)
{
	switch (k) {
	case FERRY_TK_WEIGHT:
	case FERRY_TK_WEIGHT_COPY: return FERRY_HOST_PARAMS;
	case FERRY_TK_GRAD: return FERRY_HOST_GRADS;
	case FERRY_TK_OPT_STATE: return FERRY_HOST_OPTIMIZER;
	default: return FERRY_HOST_ACTIVATIONS;
	}
}

void ferry_plan_host_kinds(const struct ferry_plan *plan, size_t out[FERRY_HOST_KINDS])
{
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		out[k] = 0;
	for (int t = 0; t < FERRY_TK_COUNT; t++)
		out[ferry_host_kind_of((enum ferry_tensor_kind)t)] += plan->mem.host_kind_bytes[t];
}

void ferry_exec_opts_set_places(struct ferry_exec_opts *o, const struct ferry_places *p)
{
	const struct ferry_place *lw = &p->group[FERRY_GROUP_LAYER_WEIGHTS];

	o->optimizer = ferry_places_optimizer(p);
	o->clip_order = p->group[FERRY_GROUP_ADAM].speculative ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT;
	o->zero = p->group[FERRY_GROUP_ADAM].shard > 1 ? 1 + p->group[FERRY_GROUP_ADAM].shard_grads +
							     p->group[FERRY_GROUP_ADAM].shard_params : 0;
	o->zero_ranks = o->zero ? p->group[FERRY_GROUP_ADAM].shard : 0;
	o->offload_params = lw->access == FERRY_ACCESS_STREAM;
	o->param_prefetch = o->offload_params && lw->depth != 1 ? lw->depth : 0;
	o->offload_embeddings = p->group[FERRY_GROUP_EDGE_WEIGHTS].access == FERRY_ACCESS_STREAM;
	o->device_grads = p->adam_grads_device;
	o->policy = p->policy[0] ? p->policy : NULL;
	o->prefetch_depth = p->act_prefetch;
	memcpy(o->prefetch_tiers, p->act_prefetch_tier, sizeof(o->prefetch_tiers));
	o->mlp_tile = p->mlp_tile;
	o->loss_tile = p->loss_tile;
	o->place = NULL;
}
