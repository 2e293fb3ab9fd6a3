/*
 * Tier names and the --host-tier spec, resolved against a topology:
 * which nodes a tier means and with which weights.
 */
#include "tier/host_tiers_internal.h"
#include "tier/tier_spec.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[FERRY_HOST_KINDS] = { "activations", "params", "grads", "optimizer" };

const char *ferry_host_kind_name(enum ferry_host_kind k)
{
	return k >= 0 && k < FERRY_HOST_KINDS ? kind_names[k] : "?";
}

bool ferry_tier_kind_on_nvme(int k, unsigned copied_kinds)
{
	/* streamed state only: nothing computes on it in host memory */
	return k == FERRY_HOST_ACTIVATIONS || (copied_kinds >> k & 1);
}

bool ferry_tier_nvme_holds(const struct ferry_host_tiers *h, int kind)
{
	return ferry_tier_kind_on_nvme(kind, h->copied_kinds);
}

bool ferry_tier_equal(const struct ferry_tier *a, const struct ferry_tier *b)
{
	if (a->type != b->type || a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (a->node[i] != b->node[i] || a->weight[i] != b->weight[i])
			return false;
	return true;
}

static void node_list(const struct ferry_topology *topo, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int i = 0; i < topo->n && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, "%s%d (%s)", i ? ", " : "", topo->node[i].id,
					topo->node[i].cpus ? "CPUs" : "no CPUs");
}

/* The nodes with CPUs (cpus != 0) or without them, that have memory. */
static void nodes_where(const struct ferry_topology *topo, bool cpus, struct ferry_tier *out)
{
	out->n = 0;
	for (int i = 0; i < topo->n; i++)
		if ((topo->node[i].cpus > 0) == cpus && topo->node[i].capacity > 0) {
			out->node[out->n] = topo->node[i].id;
			out->weight[out->n++] = 1;
		}
}

static ferry_status check_node(const struct ferry_host_tiers *h, const char *name, long id)
{
	const struct ferry_numa_node *nd = id >= 0 && id < 1 << 20 ? ferry_topology_node(&h->topo, (int)id) : NULL;
	char list[512];

	if (!nd) {
		node_list(&h->topo, list, sizeof(list));
		return ferry_error(FERRY_ERR_INVALID, "host tier '%s': no NUMA node %ld (%s has: %s)", name, id,
				   h->topo.source, list);
	}
	if (!nd->capacity)
		return ferry_error(FERRY_ERR_INVALID, "host tier '%s': node %ld has no memory", name, id);
	return FERRY_OK;
}

/* "1*3+2*1+3": nodes with weights (1 to 255, the kernel's range). */
static ferry_status parse_interleave(const struct ferry_host_tiers *h, const char *name, const char *s,
				     struct ferry_tier *out)
{
	ferry_status st;

	out->type = FERRY_TIER_INTERLEAVE;
	out->n = 0;
	do {
		char *end;
		long id = strtol(s, &end, 10), w = 1;

		if (end == s)
			return ferry_error(FERRY_ERR_INVALID, "host tier '%s': expected interleave:N*W+M*V+...", name);
		if ((st = check_node(h, name, id)))
			return st;
		s = end;
		if (*s == '*') {
			w = strtol(s + 1, &end, 10);
			if (end == s + 1 || w < 1 || w > 255)
				return ferry_error(FERRY_ERR_INVALID, "host tier '%s': weights are 1 to 255", name);
			s = end;
		}
		for (int i = 0; i < out->n; i++)
			if (out->node[i] == id)
				return ferry_error(FERRY_ERR_INVALID, "host tier '%s': node %ld twice", name, id);
		if (out->n == FERRY_MAX_NODES)
			return ferry_error(FERRY_ERR_INVALID, "host tier '%s': too many nodes", name);
		out->node[out->n] = (int)id;
		out->weight[out->n++] = (unsigned)w;
	} while (*s == '+' && *++s);
	if (*s)
		return ferry_error(FERRY_ERR_INVALID, "host tier '%s': unexpected '%s'", name, s);
	return FERRY_OK;
}

ferry_status ferry_tier_resolve(const struct ferry_host_tiers *h, const char *name, struct ferry_tier *out)
{
	char list[512];

	memset(out, 0, sizeof(*out));
	if (!strcmp(name, "auto")) {
		out->type = FERRY_TIER_AUTO;
	} else if (!strcmp(name, "dram")) {
		out->type = FERRY_TIER_DRAM;
		nodes_where(&h->topo, true, out);
	} else if (!strcmp(name, "cxl")) {
		out->type = FERRY_TIER_CXL;
		nodes_where(&h->topo, false, out);
		if (out->n == 0) {
			node_list(&h->topo, list, sizeof(list));
			return ferry_error(FERRY_ERR_INVALID, "host tier 'cxl': no CPU-less NUMA node with memory "
					   "in %s (nodes: %s); --topology FILE declares simulated ones",
					   h->topo.source, list);
		}
	} else if (!strncmp(name, "node:", 5)) {
		char *end;
		long id = strtol(name + 5, &end, 10);
		ferry_status st;

		if (end == name + 5 || *end)
			return ferry_error(FERRY_ERR_INVALID, "host tier '%s': expected node:N", name);
		if ((st = check_node(h, name, id)))
			return st;
		*out = (struct ferry_tier){ .type = FERRY_TIER_NODE, .n = 1, .node = { (int)id }, .weight = { 1 } };
	} else if (!strncmp(name, "interleave:", 11)) {
		return parse_interleave(h, name, name + 11, out);
	} else if (!strcmp(name, "nvme")) {
		if (!h->nvme_dir[0])
			return ferry_error(FERRY_ERR_INVALID, "host tier 'nvme' needs --nvme-dir DIR (where its file goes)");
		out->type = FERRY_TIER_NVME;
	} else {
		return ferry_error(FERRY_ERR_INVALID, "unknown host tier '%s' (dram, node:N, cxl, "
				   "interleave:N*W+M*V, nvme, auto)", name);
	}
	return FERRY_OK;
}

/* KIND=TIER into names; kinds not named yet have names[k] "". */
static ferry_status split_item(const char *what, char *item, unsigned copied_kinds,
			       char names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS])
{
	char *eq = strchr(item, '=');
	const char *tier;
	int k;

	if (!eq)
		return ferry_error(FERRY_ERR_INVALID, "%s '%s': expected KIND=TIER (kinds: activations, "
				   "params, grads, optimizer, all)", what, item);
	*eq = '\0';
	tier = eq + 1;
	for (k = 0; k < FERRY_HOST_KINDS && strcmp(item, kind_names[k]); k++)
		;
	if (k == FERRY_HOST_KINDS && strcmp(item, "all"))
		return ferry_error(FERRY_ERR_INVALID, "%s: unknown kind '%s' (activations, params, "
				   "grads, optimizer, all)", what, item);
	if (!*tier || strlen(tier) >= FERRY_TIER_NAME_CHARS)
		return ferry_error(FERRY_ERR_INVALID, "%s %s=%s: a tier name of 1 to %d characters", what, item,
				   tier, FERRY_TIER_NAME_CHARS - 1);
	for (int i = 0; i < FERRY_HOST_KINDS; i++) {
		bool nvme_here = strcmp(tier, "nvme") || ferry_tier_kind_on_nvme(i, copied_kinds);

		if (k != FERRY_HOST_KINDS && i != k)
			continue;
		if (names[i][0])
			return ferry_error(FERRY_ERR_INVALID, "%s: %s given twice", what, kind_names[i]);
		if (!nvme_here && k != FERRY_HOST_KINDS)
			return ferry_error(FERRY_ERR_INVALID, "%s %s=nvme: the NVMe tier holds offloaded "
					   "activations, and with --offload-optimizer stream params and optimizer "
					   "state", what, kind_names[i]);
		if (!nvme_here)
			continue; /* all=nvme: the kinds NVMe can hold */
		snprintf(names[i], FERRY_TIER_NAME_CHARS, "%s", tier);
	}
	return FERRY_OK;
}

ferry_status ferry_tier_spec_split(const char *what, const char *spec, unsigned copied_kinds,
				   char names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS])
{
	char buf[1024], *save = NULL, *item;
	ferry_status st = FERRY_OK;

	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		names[k][0] = '\0';
	if (!spec || !*spec)
		return FERRY_OK;
	if (snprintf(buf, sizeof(buf), "%s", spec) >= (int)sizeof(buf))
		return ferry_error(FERRY_ERR_INVALID, "%s: longer than %zu characters", what, sizeof(buf) - 1);
	for (item = strtok_r(buf, ",", &save); item && !st; item = strtok_r(NULL, ",", &save))
		st = split_item(what, item, copied_kinds, names);
	return st;
}

/* The end of the tier name at s in a span "A+B+...": the next '+' that a
 * tier name follows (interleave:N+M's '+' is followed by a node number). */
static size_t span_part(const char *s)
{
	size_t n = 0;

	while (s[n] && !(s[n] == '+' && s[n + 1] >= 'a' && s[n + 1] <= 'z'))
		n++;
	return n;
}

/* The activations' tiers: one, or a span "A+B+..." into h->act_asked. */
static ferry_status parse_activations(struct ferry_host_tiers *h, const char *names)
{
	char part[FERRY_TIER_NAME_CHARS];
	ferry_status st = FERRY_OK;
	int n = 0;

	for (const char *s = names; !st; s++) {
		size_t len = span_part(s);

		if (n == FERRY_TIER_SPAN_MAX)
			return ferry_error(FERRY_ERR_INVALID, "activations=%s: at most %d tiers", names,
					   FERRY_TIER_SPAN_MAX);
		snprintf(part, sizeof(part), "%.*s", (int)len, s);
		if (n && h->act_asked[n - 1].type == FERRY_TIER_NVME)
			return ferry_error(FERRY_ERR_INVALID, "activations=%s: the NVMe tier comes last", names);
		if ((st = ferry_tier_resolve(h, part, &h->act_asked[n])) == FERRY_OK &&
		    h->act_asked[n].type == FERRY_TIER_AUTO && (n || s[len]))
			st = ferry_error(FERRY_ERR_INVALID, "activations=%s: auto spreads over tiers by itself", names);
		n++;
		s += len;
		if (!*s)
			break;
	}
	h->asked[FERRY_HOST_ACTIVATIONS] = h->act_asked[0];
	h->act_asked_n = n > 1 ? n : 0;
	return st;
}

ferry_status ferry_tier_parse_spec(struct ferry_host_tiers *h, const char *spec)
{
	char names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS];
	ferry_status st = ferry_tier_spec_split("--host-tier", spec, h->copied_kinds, names);

	for (int k = 0; k < FERRY_HOST_KINDS && !st; k++) {
		h->asked[k].type = FERRY_TIER_AUTO;
		if (k == FERRY_HOST_ACTIVATIONS && names[k][0])
			st = parse_activations(h, names[k]);
		else if (names[k][0] && span_part(names[k]) < strlen(names[k]))
			st = ferry_error(FERRY_ERR_INVALID, "%s=%s: only offloaded activations span tiers (they are "
					 "kept layer by layer)", kind_names[k], names[k]);
		else if (names[k][0])
			st = ferry_tier_resolve(h, names[k], &h->asked[k]);
	}
	return st;
}

const char *ferry_tier_describe(const struct ferry_tier *t, char *buf, size_t n)
{
	static const char *const names[] = { "auto", "dram", "node", "cxl", "interleave", "nvme" };
	size_t len = (size_t)snprintf(buf, n, "%s", names[t->type]);
	bool weighted = false;

	if (t->type == FERRY_TIER_NVME || t->type == FERRY_TIER_AUTO)
		return buf;
	for (int i = 0; i < t->n; i++)
		weighted |= t->weight[i] != 1;
	if (t->type == FERRY_TIER_NODE && t->n == 1) {
		snprintf(buf + len, n - len, ":%d", t->node[0]);
		return buf;
	}
	len += (size_t)snprintf(buf + len, n - len, " (node%s ", t->n > 1 ? "s" : "");
	for (int i = 0; i < t->n && len < n; i++) {
		len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "," : "", t->node[i]);
		if (weighted && len < n)
			len += (size_t)snprintf(buf + len, n - len, "*%u", t->weight[i]);
	}
	if (len < n)
		snprintf(buf + len, n - len, "%s)", t->n > 1 && t->type != FERRY_TIER_DRAM ? " interleaved" : "");
	return buf;
}
