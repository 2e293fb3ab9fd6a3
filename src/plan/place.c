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
#include "core/error.h"

#include <ctype.h>
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

static const struct ferry_place on_device = { FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_NONE, false, 0 };

void ferry_places_default(struct ferry_places *p)
{
	memset(p, 0, sizeof(*p));
	p->group[FERRY_GROUP_LAYER_WEIGHTS] = on_device;
	p->group[FERRY_GROUP_EDGE_WEIGHTS] = on_device;
	p->group[FERRY_GROUP_ADAM] = on_device;
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
		*out = on_device;
		return FERRY_OK;
	}
	if (g == FERRY_GROUP_LAYER_WEIGHTS ? word_with_depth(v, "host:stream", MAX_DEPTH, &depth) : !strcmp(v, "host:stream")) {
		*out = (struct ferry_place){ FERRY_HOME_HOST, FERRY_ACCESS_STREAM,
					     g == FERRY_GROUP_LAYER_WEIGHTS ? depth : 0, FERRY_UPDATE_NONE, false, 0 };
		return FERRY_OK;
	}
	return ferry_error(FERRY_ERR_INVALID, "--place %s=%s: %s", key, v,
			   g == FERRY_GROUP_LAYER_WEIGHTS ? "device or host:stream(D), D layers loaded ahead (1 to 64)"
							  : "device or host:stream");
}

static ferry_status adam_value(const char *v, struct ferry_place *out)
{
	int ranks = 0;

	if (word_with_depth(v, "device:shard", MAX_SHARDS, &ranks) && ranks > 1)
		*out = (struct ferry_place){ FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_DEVICE, false, ranks };
	else if (!strcmp(v, "device"))
		*out = (struct ferry_place){ FERRY_HOME_DEVICE, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_DEVICE, false, 0 };
	else if (!strcmp(v, "host:stream"))
		*out = (struct ferry_place){ FERRY_HOME_HOST, FERRY_ACCESS_STREAM, 0, FERRY_UPDATE_DEVICE, false, 0 };
	else if (!strcmp(v, "host:cpu") || !strcmp(v, "host:cpu(speculative)"))
		*out = (struct ferry_place){ FERRY_HOME_HOST, FERRY_ACCESS_RESIDENT, 0, FERRY_UPDATE_HOST,
					     !strcmp(v, "host:cpu(speculative)"), 0 };
	else
		return ferry_error(FERRY_ERR_INVALID, "--place adam=%s: device, host:stream (updated on the device "
				   "through a ring), host:cpu or host:cpu(speculative) (updated by host threads), or "
				   "device:shard(N) (split over N ranks, 2 or more)", v);
	return FERRY_OK;
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
	if (!strcmp(key, "prefetch")) {
		char *end;
		long d = strtol(v, &end, 10);

		if (end == v || *end || d < 1 || d > MAX_DEPTH)
			return ferry_error(FERRY_ERR_INVALID, "--place activations.prefetch=%s: layers loaded ahead, "
					   "1 to %d", v, MAX_DEPTH);
		p->act_prefetch = (int)d;
		return FERRY_OK;
	}
	return add_custom(p, key, v, form);
}

static ferry_status apply_item(struct ferry_places *p, char *item, enum act_form *form)
{
	char *eq = strchr(item, '=');
	const char *key = item, *v;

	if (!eq)
		return ferry_error(FERRY_ERR_INVALID, "--place '%s': GROUP=PLACEMENT expected (groups: layers.weights, "
				   "edges.weights, adam, activations, activations.NAME, activations.prefetch)", item);
	*eq = '\0';
	v = eq + 1;
	if (!strcmp(key, "layers.weights"))
		return weights_value(key, v, FERRY_GROUP_LAYER_WEIGHTS, &p->group[FERRY_GROUP_LAYER_WEIGHTS]);
	if (!strcmp(key, "edges.weights"))
		return weights_value(key, v, FERRY_GROUP_EDGE_WEIGHTS, &p->group[FERRY_GROUP_EDGE_WEIGHTS]);
	if (!strcmp(key, "adam"))
		return adam_value(v, &p->group[FERRY_GROUP_ADAM]);
	if (!strcmp(key, "activations") || !strncmp(key, "activations.", strlen("activations.")))
		return activations_item(p, key, v, form);
	return ferry_error(FERRY_ERR_INVALID, "--place: unknown group '%s' (groups: layers.weights, edges.weights, "
			   "adam, activations, activations.NAME, activations.prefetch)", key);
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
		if ((st = apply_item(&q, item, &form)))
			return st;
	}
	*p = q;
	return FERRY_OK;
}

/* ---- checking ----------------------------------------------------------------------- */

ferry_status ferry_places_check(const struct ferry_places *p)
{
	const struct ferry_place *lw = &p->group[FERRY_GROUP_LAYER_WEIGHTS], *ew = &p->group[FERRY_GROUP_EDGE_WEIGHTS],
				 *adam = &p->group[FERRY_GROUP_ADAM];

	if (adam->speculative && adam->update != FERRY_UPDATE_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--clip-order speculative (adam=host:cpu(speculative)) updates on "
				   "host threads: it needs --offload-optimizer cpu (adam=host:cpu)");
	if (ew->home == FERRY_HOME_HOST && lw->home != FERRY_HOME_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--offload-embeddings streams the embeddings and the head as "
				   "--offload-params streams the layers: it needs --offload-params (in --place, "
				   "edges.weights=host:stream needs layers.weights=host:stream)");
	if (adam->shard > 1 && adam->home != FERRY_HOME_DEVICE)
		return ferry_error(FERRY_ERR_INVALID, "--zero 1 (adam=device:shard(N)) splits AdamW's state on the "
				   "device: with --offload-optimizer or --offload-params (adam on the host), not yet");
	if (lw->home == FERRY_HOME_HOST && adam->home != FERRY_HOME_HOST)
		return ferry_error(FERRY_ERR_INVALID, "--offload-params (layers.weights=host:stream) keeps the master "
				   "weights on the host: AdamW's state goes there too, --offload-optimizer stream or cpu "
				   "(not device), adam=host:stream or host:cpu in --place");
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

static const char *adam_text(const struct ferry_place *pl, char buf[32])
{
	if (pl->home == FERRY_HOME_DEVICE && pl->shard > 1) {
		snprintf(buf, 32, "device:shard(%d)", pl->shard);
		return buf;
	}
	if (pl->home == FERRY_HOME_DEVICE)
		return "device";
	if (pl->update == FERRY_UPDATE_DEVICE)
		return "host:stream";
	return pl->speculative ? "host:cpu(speculative)" : "host:cpu";
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
	if (len < n)
		snprintf(buf + len, n - len, ",activations.prefetch=%d", p->act_prefetch ? p->act_prefetch : FERRY_DEFAULT_PREFETCH_DEPTH);
}

ferry_status ferry_places_format(const struct ferry_places *p, char *buf, size_t n)
{
	char lw[32], ew[32], adam[32], act[FERRY_PLACE_CHARS];
	int r;

	weights_text(&p->group[FERRY_GROUP_LAYER_WEIGHTS], lw, sizeof(lw));
	weights_text(&p->group[FERRY_GROUP_EDGE_WEIGHTS], ew, sizeof(ew));
	activations_text(p, act, sizeof(act));
	r = snprintf(buf, n, "layers.weights=%s,edges.weights=%s,adam=%s,%s", lw, ew, adam_text(&p->group[FERRY_GROUP_ADAM], adam),
		     act);
	if (r < 0 || (size_t)r >= n)
		return ferry_error(FERRY_ERR_INVALID, "placements: more than %zu characters", n - 1);
	return FERRY_OK;
}

/* ---- from the execution options ----------------------------------------------------- */

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
	if (o->zero < 0 || o->zero > 1)
		return ferry_error(FERRY_ERR_INVALID, "--zero %d: 0 or 1 (stages 2 and 3: not yet)", o->zero);
	if (o->zero == 1) /* over the ranks asked for, else the run's */
		p->group[FERRY_GROUP_ADAM].shard = o->zero_ranks > 1 ? o->zero_ranks
						   : o->comm && ferry_comm_size(o->comm) > 1 ? ferry_comm_size(o->comm) : 0;
	if (o->offload_params)
		p->group[FERRY_GROUP_LAYER_WEIGHTS] = (struct ferry_place){
			FERRY_HOME_HOST, FERRY_ACCESS_STREAM, o->param_prefetch ? o->param_prefetch : 1, FERRY_UPDATE_NONE, false, 0 };
	if (o->offload_embeddings)
		p->group[FERRY_GROUP_EDGE_WEIGHTS] = (struct ferry_place){
			FERRY_HOME_HOST, FERRY_ACCESS_STREAM, 0, FERRY_UPDATE_NONE, false, 0 };
	if (o->policy && strlen(o->policy) >= sizeof(p->policy))
		return ferry_error(FERRY_ERR_INVALID, "policy: longer than %d characters", FERRY_PLACE_POLICY_CHARS - 1);
	snprintf(p->policy, sizeof(p->policy), "%s", o->policy ? o->policy : "");
	p->act_prefetch = o->prefetch_depth;
	if ((st = ferry_places_parse(o->place, p)))
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

void ferry_exec_opts_set_places(struct ferry_exec_opts *o, const struct ferry_places *p)
{
	const struct ferry_place *lw = &p->group[FERRY_GROUP_LAYER_WEIGHTS];

	o->optimizer = ferry_places_optimizer(p);
	o->clip_order = p->group[FERRY_GROUP_ADAM].speculative ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT;
	o->zero = p->group[FERRY_GROUP_ADAM].shard > 1;
	o->zero_ranks = o->zero ? p->group[FERRY_GROUP_ADAM].shard : 0;
	o->offload_params = lw->access == FERRY_ACCESS_STREAM;
	o->param_prefetch = o->offload_params && lw->depth != 1 ? lw->depth : 0;
	o->offload_embeddings = p->group[FERRY_GROUP_EDGE_WEIGHTS].access == FERRY_ACCESS_STREAM;
	o->policy = p->policy[0] ? p->policy : NULL;
	o->prefetch_depth = p->act_prefetch;
	o->place = NULL;
}
