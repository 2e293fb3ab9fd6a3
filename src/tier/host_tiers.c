/*
 * Placement of host state on tiers: the default (arXiv 2507.03305's
 * CXL-aware allocation), explicit choices, and the capacity check that
 * refuses, before step 1, a placement a tier cannot hold.
 */
#include "tier/host_tiers_internal.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

ferry_status ferry_host_tiers_create(const struct ferry_host_tiers_opts *o, ferry_host_tiers_t *out)
{
	struct ferry_host_tiers *h = ferry_calloc(1, sizeof(*h));
	ferry_status st;
	struct stat sb;

	*out = NULL;
	if (!h)
		return ferry_error(FERRY_ERR_NOMEM, "host tiers: out of host memory");
	h->cpu_kinds = o->cpu_kinds;
	h->copied_kinds = o->copied_kinds;
	h->host_mem = o->host_mem;
	st = o->topology_file ? ferry_topology_load(o->topology_file, &h->topo)
			      : ferry_topology_discover(o->sysfs_dir, &h->topo);
	if (!st && o->nvme_dir) {
		if (snprintf(h->nvme_dir, sizeof(h->nvme_dir), "%s", o->nvme_dir) >= (int)sizeof(h->nvme_dir))
			st = ferry_error(FERRY_ERR_INVALID, "--nvme-dir: path too long");
		else if (stat(o->nvme_dir, &sb) != 0)
			st = ferry_error(FERRY_ERR_IO, "--nvme-dir %s: %s", o->nvme_dir, strerror(errno));
		else if (!S_ISDIR(sb.st_mode))
			st = ferry_error(FERRY_ERR_INVALID, "--nvme-dir %s: not a directory", o->nvme_dir);
		else if (access(o->nvme_dir, W_OK | X_OK) != 0)
			st = ferry_error(FERRY_ERR_IO, "--nvme-dir %s: cannot create files there: %s",
					 o->nvme_dir, strerror(errno));
	}
	if (!st)
		st = ferry_tier_parse_spec(h, o->spec);
	if (st) {
		ferry_free(h);
		return st;
	}
	*out = h;
	return FERRY_OK;
}

void ferry_host_tiers_free(ferry_host_tiers_t h)
{
	if (!h)
		return;
	while (h->regions)
		ferry_host_tiers_release(h, h->regions->p);
	ferry_nvme_file_close(h->nvme);
	ferry_free(h);
}

const struct ferry_topology *ferry_host_tiers_topology(ferry_host_tiers_t h)
{
	return &h->topo;
}

/* Free bytes per node as placement goes, and on the NVMe file system. */
struct budget {
	uint64_t node_free[FERRY_MAX_NODES]; /* by index in topo */
	uint64_t disk_free;
};

static int node_index(const struct ferry_topology *topo, int id)
{
	for (int i = 0; i < topo->n; i++)
		if (topo->node[i].id == id)
			return i;
	return -1;
}

/* The bytes each of t's nodes takes of `bytes`: interleaved tiers in the
 * ratio of their weights (a page more each for rounding), dram filled node
 * by node as the kernel's bind policy fills its nodes. */
static bool take(const struct ferry_topology *topo, const struct ferry_tier *t, uint64_t bytes,
		 struct budget *b, bool commit)
{
	uint64_t share[FERRY_MAX_NODES], wsum = 0, left = bytes;

	if (t->type == FERRY_TIER_NVME) {
		if (bytes > b->disk_free)
			return false;
		if (commit)
			b->disk_free -= bytes;
		return true;
	}
	for (int i = 0; i < t->n; i++)
		wsum += t->weight[i];
	for (int i = 0; i < t->n; i++) {
		uint64_t f = b->node_free[node_index(topo, t->node[i])];

		if (t->type == FERRY_TIER_DRAM) {
			share[i] = left < f ? left : f;
			left -= share[i];
		} else {
			share[i] = bytes / wsum * t->weight[i] + (bytes % wsum ? 4096 * t->weight[i] : 0);
			if (share[i] > f)
				return false;
		}
	}
	if (t->type == FERRY_TIER_DRAM && left)
		return false;
	for (int i = 0; commit && i < t->n; i++)
		b->node_free[node_index(topo, t->node[i])] -= share[i];
	return true;
}

/* What the tier could still hold (its free bytes in its weights' ratio). */
static uint64_t room(const struct ferry_topology *topo, const struct ferry_tier *t, const struct budget *b)
{
	uint64_t best = UINT64_MAX, sum = 0, wsum = 0;

	if (t->type == FERRY_TIER_NVME)
		return b->disk_free;
	for (int i = 0; i < t->n; i++)
		wsum += t->weight[i];
	for (int i = 0; i < t->n; i++) {
		uint64_t f = b->node_free[node_index(topo, t->node[i])];

		sum += f;
		if (f / t->weight[i] * wsum < best)
			best = f / t->weight[i] * wsum;
	}
	return t->type == FERRY_TIER_DRAM ? sum : t->n ? best : 0;
}

static bool cpu_computes_on(const struct ferry_host_tiers *h, int k)
{
	return k != FERRY_HOST_ACTIVATIONS && (h->cpu_kinds >> k & 1);
}

/* The default's tiers for kind k, best first. */
static int default_order(const struct ferry_host_tiers *h, int k, struct ferry_tier out[3])
{
	struct ferry_tier dram, cxl;
	int n = 0;
	bool has_cxl = ferry_tier_resolve(h, "cxl", &cxl) == FERRY_OK;

	/* (no CXL is not an error here: the default just skips it) */
	if (ferry_tier_resolve(h, "dram", &dram) != FERRY_OK)
		return 0;
	if (has_cxl && !cpu_computes_on(h, k))
		out[n++] = cxl;
	out[n++] = dram;
	if (has_cxl && cpu_computes_on(h, k))
		out[n++] = cxl;
	if (h->nvme_dir[0] && ferry_tier_nvme_holds(h, k))
		out[n++] = (struct ferry_tier){ .type = FERRY_TIER_NVME };
	return n;
}

static uint64_t disk_free(const char *dir)
{
	struct statvfs sv;

	if (!dir[0] || statvfs(dir, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* The message for kind k (bytes) that fits nowhere it may go. */
static ferry_status refuse(const struct ferry_host_tiers *h, int k, uint64_t bytes, const struct ferry_tier *asked,
			   const struct budget *b)
{
	static const char *const candidates[] = { "dram", "cxl", "nvme" };
	char need[FERRY_SIZE_CHARS], has[FERRY_SIZE_CHARS], name[160], fits[512] = "";
	size_t len = 0;
	struct ferry_tier t;

	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
		if (ferry_tier_resolve(h, candidates[i], &t) != FERRY_OK || ferry_tier_equal(&t, asked))
			continue;
		if ((t.type == FERRY_TIER_NVME && !ferry_tier_nvme_holds(h, k)) || !take(&h->topo, &t, bytes,
			(struct budget *)b, false))
			continue;
		len += (size_t)snprintf(fits + len, sizeof(fits) - len, "%s%s (%s free)", len ? ", " : "",
					candidates[i], ferry_format_size(room(&h->topo, &t, b), has));
	}
	ferry_tier_describe(asked, name, sizeof(name));
	return ferry_error(FERRY_ERR_INVALID, "host tier too small: %s need %s (%llu bytes) on %s, which has %s "
			   "free%s; would fit: %s", ferry_host_kind_name(k), ferry_format_size(bytes, need),
			   (unsigned long long)bytes, name, ferry_format_size(room(&h->topo, asked, b), has),
			   h->topo.simulated ? " (simulated topology)" : "",
			   len ? fits : "no tier (shrink the batch, or offload less)");
}

/* The activations, bytes in whole layers of unit bytes, over tiers t[0..n)
 * in order, each taking the layers it has room for; false (b untouched)
 * when they do not all fit. */
static bool place_span(struct ferry_host_tiers *h, const struct ferry_tier *t, int n, uint64_t bytes,
		       uint64_t unit, struct budget *b)
{
	struct budget trial = *b;
	uint64_t left = unit && bytes % unit == 0 ? bytes / unit : 0;

	h->act_n = 0;
	for (int i = 0; i < n && left; i++) {
		uint64_t fit = room(&h->topo, &t[i], &trial) / unit;

		fit = fit < left ? fit : left;
		while (fit && !take(&h->topo, &t[i], fit * unit, &trial, false))
			fit--;
		if (!fit)
			continue;
		(void)take(&h->topo, &t[i], fit * unit, &trial, true);
		h->act_tier[h->act_n] = t[i];
		h->act_bytes[h->act_n++] = fit * unit;
		left -= fit;
	}
	if (left || !h->act_n) {
		h->act_n = 0;
		return false;
	}
	*b = trial;
	h->placed[FERRY_HOST_ACTIVATIONS] = h->act_tier[0];
	if (h->act_n == 1)
		h->act_n = 0; /* whole on one tier after all */
	return true;
}

/* Activations asked to span tiers that cannot hold them. */
static ferry_status refuse_span(const struct ferry_host_tiers *h, uint64_t bytes, uint64_t unit, const struct budget *b)
{
	char need[FERRY_SIZE_CHARS], has[FERRY_SIZE_CHARS];
	uint64_t sum = 0;

	if (!unit || bytes % unit)
		return ferry_error(FERRY_ERR_INVALID, "host tiers: offloaded activations spread over tiers layer by "
				   "layer, and this plan's are not one tensor per layer (offload only the checkpoints, "
				   "decoder_layer_input)");
	for (int i = 0; i < h->act_asked_n; i++)
		sum += room(&h->topo, &h->act_asked[i], b);
	return ferry_error(FERRY_ERR_INVALID, "host tiers too small: activations need %s (%llu bytes) on their %d "
			   "tiers, which have %s free%s", ferry_format_size(bytes, need), (unsigned long long)bytes,
			   h->act_asked_n, ferry_format_size(sum, has), h->topo.simulated ? " (simulated topology)" : "");
}

/* Kind k on the first of its tiers that holds it; activations (whole
 * layers of unit bytes) over several, asked or when no one holds them. */
static ferry_status place_kind(struct ferry_host_tiers *h, int k, uint64_t bytes, uint64_t unit, struct budget *b)
{
	struct ferry_tier order[3];
	int n;

	if (k == FERRY_HOST_ACTIVATIONS && h->act_asked_n > 1) {
		if (!place_span(h, h->act_asked, h->act_asked_n, bytes, unit, b))
			return refuse_span(h, bytes, unit, b);
		return FERRY_OK;
	}
	if (h->asked[k].type != FERRY_TIER_AUTO) {
		h->placed[k] = h->asked[k];
		if (!take(&h->topo, &h->asked[k], bytes, b, true))
			return refuse(h, k, bytes, &h->asked[k], b);
		return FERRY_OK;
	}
	n = default_order(h, k, order);
	for (int i = 0; i < n; i++)
		if (take(&h->topo, &order[i], bytes, b, true)) {
			h->placed[k] = order[i];
			return FERRY_OK;
		}
	if (k == FERRY_HOST_ACTIVATIONS && n > 1 && place_span(h, order, n, bytes, unit, b))
		return FERRY_OK;
	h->placed[k] = order[0];
	return refuse(h, k, bytes, &order[0], b);
}

/* Tier t's entry in r, added if new; -1 when r is full. */
static int use_of(struct ferry_tier_report *r, const struct ferry_tier *t)
{
	int u;

	for (u = 0; u < r->n && !ferry_tier_equal(&r->use[u].tier, t); u++)
		;
	if (u == r->n) {
		if (r->n == FERRY_MAX_TIERS)
			return -1;
		r->use[r->n++].tier = *t;
	}
	return u;
}

static void add_bytes(struct ferry_tier_report *r, const struct ferry_tier *t, int k, uint64_t bytes)
{
	int u = use_of(r, t);

	if (u < 0)
		return;
	r->use[u].bytes[k] += bytes;
	r->use[u].total += bytes;
	if (r->tier_of[k] < 0)
		r->tier_of[k] = u;
}

static void add_use(const struct ferry_host_tiers *h, int k, uint64_t bytes, uint64_t unit, struct ferry_tier_report *r)
{
	uint64_t first = 0;

	if (k != FERRY_HOST_ACTIVATIONS || h->act_n < 2) {
		add_bytes(r, &h->placed[k], k, bytes);
		r->act_tiers += k == FERRY_HOST_ACTIVATIONS;
		return;
	}
	for (int i = 0; i < h->act_n; i++) {
		int u = use_of(r, &h->act_tier[i]);

		add_bytes(r, &h->act_tier[i], k, h->act_bytes[i]);
		if (u >= 0) {
			r->use[u].act_first = (int)(first / unit);
			r->use[u].act_count = (int)(h->act_bytes[i] / unit);
		}
		first += h->act_bytes[i];
	}
	r->act_tiers = h->act_n;
}

/* The layers on each tier the activations were asked to span, in its
 * order (a tier with no room: none). */
static void span_layers(const struct ferry_host_tiers *h, uint64_t bytes, uint64_t unit, struct ferry_tier_report *r)
{
	r->act_asked = h->act_asked_n > 1 ? h->act_asked_n : 0;
	for (int a = 0; a < h->act_asked_n && unit; a++) {
		for (int i = 0; i < h->act_n; i++)
			if (ferry_tier_equal(&h->act_tier[i], &h->act_asked[a]))
				r->act_layers[a] = (int)(h->act_bytes[i] / unit);
		if (h->act_n < 2 && ferry_tier_equal(&h->placed[FERRY_HOST_ACTIVATIONS], &h->act_asked[a])) {
			r->act_layers[a] = (int)(bytes / unit); /* all on this one */
			return;
		}
	}
}

/* Free bytes per node when ferry starts, the nodes with CPUs together
 * held to --host-mem (filled in order, as the bind policy fills them). */
static void budget_init(const struct ferry_host_tiers *h, struct budget *b)
{
	uint64_t dram_left = h->host_mem ? h->host_mem : UINT64_MAX;

	for (int i = 0; i < h->topo.n; i++) {
		b->node_free[i] = h->topo.node[i].free;
		if (h->topo.node[i].cpus) {
			b->node_free[i] = b->node_free[i] < dram_left ? b->node_free[i] : dram_left;
			dram_left -= b->node_free[i];
		}
	}
	b->disk_free = h->nvme_dir[0] && h->topo.nvme_free ? h->topo.nvme_free : disk_free(h->nvme_dir);
}

void ferry_host_tiers_set_use(ferry_host_tiers_t h, unsigned cpu_kinds, unsigned copied_kinds)
{
	h->cpu_kinds = cpu_kinds;
	h->copied_kinds = copied_kinds;
}

ferry_status ferry_host_tiers_place(ferry_host_tiers_t h, const size_t kind_bytes[FERRY_HOST_KINDS],
				    struct ferry_tier_report *report)
{
	return ferry_host_tiers_place_layers(h, kind_bytes, 0, report);
}

ferry_status ferry_host_tiers_place_layers(ferry_host_tiers_t h, const size_t kind_bytes[FERRY_HOST_KINDS],
					   size_t act_unit, struct ferry_tier_report *report)
{
	uint64_t bytes[FERRY_HOST_KINDS] = { 0 };
	struct ferry_tier_report r = { 0 };
	struct budget b;
	ferry_status st = FERRY_OK;
	/* explicit choices first, then what the CPU computes on (it gets DRAM
	 * first), then streamed state */
	int order[FERRY_HOST_KINDS], n = 0;

	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		bytes[k] = kind_bytes[k];
	for (int pass = 0; pass < 3; pass++)
		for (int k = 0; k < FERRY_HOST_KINDS; k++)
			if ((pass == 0) == (h->asked[k].type != FERRY_TIER_AUTO) &&
			    (pass == 0 || (pass == 1) == cpu_computes_on(h, k)))
				order[n++] = k;
	budget_init(h, &b);
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		r.tier_of[k] = -1;
	h->is_placed = false;
	h->act_n = 0;
	for (int i = 0; i < n && !st; i++)
		if (bytes[order[i]])
			st = place_kind(h, order[i], bytes[order[i]], act_unit, &b);
	for (int k = 0; k < FERRY_HOST_KINDS && !st; k++)
		if (bytes[k])
			add_use(h, k, bytes[k], act_unit, &r);
	if (!st)
		span_layers(h, bytes[FERRY_HOST_ACTIVATIONS], act_unit, &r);
	for (int u = 0; u < r.n; u++) {
		struct budget full;

		budget_init(h, &full);
		r.use[u].capacity = room(&h->topo, &r.use[u].tier, &full);
	}
	h->is_placed = !st;
	h->report = st ? (struct ferry_tier_report){ 0 } : r;
	if (report)
		*report = r;
	return st;
}

void ferry_host_tiers_report(ferry_host_tiers_t h, struct ferry_tier_report *report)
{
	*report = h->report;
}

void ferry_tier_count(struct ferry_host_tiers *h, const struct tier_region *r, int sign)
{
	if (!h->live.n)
		for (int k = 0; k < FERRY_HOST_KINDS; k++)
			h->live.tier_of[k] = h->peak.tier_of[k] = -1;
	for (int i = 0; i < r->n_pieces; i++) {
		int u = use_of(&h->live, &r->piece[i].tier), p = use_of(&h->peak, &r->piece[i].tier);
		uint64_t d = r->piece[i].bytes;

		if (u < 0 || p < 0)
			continue;
		h->live.use[u].bytes[r->piece[i].kind] += sign > 0 ? d : -d;
		h->live.use[u].total += sign > 0 ? d : -d;
		if (h->live.use[u].total > h->peak.use[p].total)
			h->peak.use[p] = h->live.use[u];
	}
}

void ferry_host_tiers_peaks(ferry_host_tiers_t h, struct ferry_tier_report *report)
{
	*report = h->peak;
}
