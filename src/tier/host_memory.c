/*
 * Host memory on a tier: an anonymous mapping bound to the tier's nodes
 * with mbind (libnuma's numaif.h) before its pages are first touched, so
 * every page is allocated where the tier says; then touched (committed
 * before step 1).  Registering it for DMA (CUDA) is the backend's
 * (backend/host_tier_memory.c).
 */
#include "tier/host_tiers_internal.h"
#include "tier/numa_bind.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Page-range striping: each round gives node i STRIPE_PAGES * weight[i]
 * pages, so the bytes split in the weights' ratio. */
#define STRIPE_PAGES 16

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

/* Whether the kernel's weighted-interleave weights (sysfs, global) are in
 * the ratio of t's weights, so MPOL_WEIGHTED_INTERLEAVE gives t. */
static bool kernel_weights_match(const struct ferry_tier *t)
{
	unsigned k0 = 0;

	for (int i = 0; i < t->n; i++) {
		unsigned k = ferry_tier_kernel_weight(t->node[i]);

		if (!k)
			return false;
		if (i == 0)
			k0 = k;
		else if ((unsigned long)k * t->weight[0] != (unsigned long)k0 * t->weight[i])
			return false;
	}
	return true;
}

static ferry_status stripe(const struct ferry_tier *t, char *p, size_t bytes)
{
	size_t page = page_size(), off = 0;
	ferry_status st = FERRY_OK;

	while (off < bytes && !st)
		for (int i = 0; i < t->n && off < bytes && !st; i++) {
			size_t len = STRIPE_PAGES * t->weight[i] * page;

			if (len > bytes - off)
				len = bytes - off;
			st = ferry_tier_mbind(p + off, len, TIER_POLICY_BIND, &t->node[i], 1);
			off += len;
		}
	return st;
}

ferry_status ferry_tier_bind(const struct ferry_topology *topo, const struct ferry_tier *t, void *p, size_t bytes)
{
	bool weighted = false;

	if (topo->simulated || t->n == 0)
		return FERRY_OK;
	for (int i = 0; i < t->n; i++)
		weighted |= t->weight[i] != t->weight[0];
	switch (t->type) {
	case FERRY_TIER_DRAM:
	case FERRY_TIER_NODE:
		return ferry_tier_mbind(p, bytes, TIER_POLICY_BIND, t->node, t->n);
	case FERRY_TIER_CXL:
	case FERRY_TIER_INTERLEAVE:
		if (t->n == 1)
			return ferry_tier_mbind(p, bytes, TIER_POLICY_BIND, t->node, 1);
		if (!weighted)
			return ferry_tier_mbind(p, bytes, TIER_POLICY_INTERLEAVE, t->node, t->n);
		if (topo->weighted_interleave && kernel_weights_match(t))
			return ferry_tier_mbind(p, bytes, TIER_POLICY_WEIGHTED_INTERLEAVE, t->node, t->n);
		return stripe(t, p, bytes);
	default:
		return FERRY_OK;
	}
}

static struct tier_region *find(const struct ferry_host_tiers *h, const void *p)
{
	struct tier_region *r = h->regions;

	while (r && r->p != p)
		r = r->next;
	return r;
}

bool ferry_host_tiers_owns(ferry_host_tiers_t h, const void *p)
{
	return h && p && find(h, p);
}

ferry_status ferry_tier_map_bound(const struct ferry_topology *topo, const struct ferry_tier *t, size_t bytes,
				  void **p, size_t *mapped)
{
	size_t page = page_size();
	ferry_status st;
	void *q;

	*mapped = bytes ? (bytes + page - 1) / page * page : page;
	q = mmap(NULL, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED)
		return ferry_error(FERRY_ERR_NOMEM, "host tier: cannot map %zu bytes: %s", bytes, strerror(errno));
	if ((st = ferry_tier_bind(topo, t, q, *mapped))) {
		munmap(q, *mapped);
		return st;
	}
	/* first touch, now: the pages are allocated on the tier's nodes before
	 * step 1, and a shortage shows here rather than mid-step */
	for (size_t off = 0; off < *mapped; off += page)
		((volatile char *)q)[off] = 0;
	*p = q;
	return FERRY_OK;
}

static ferry_status map_on_tier(struct ferry_host_tiers *h, const struct ferry_tier *t, struct tier_region *r)
{
	return ferry_tier_map_bound(&h->topo, t, r->bytes, &r->p, &r->mapped);
}

void ferry_tier_unmap_bound(void *p, size_t bytes)
{
	size_t page = page_size();

	munmap(p, bytes ? (bytes + page - 1) / page * page : page);
}

ferry_status ferry_tier_region_new(struct ferry_host_tiers *h, enum ferry_host_kind k, size_t bytes,
				   struct tier_region **out)
{
	const struct ferry_tier *t = &h->placed[k];
	struct tier_region *r;
	ferry_status st;

	*out = NULL;
	if (!h->is_placed || t->type == FERRY_TIER_AUTO)
		return ferry_error(FERRY_ERR_INVALID, "host tiers: %s allocated before being placed",
				   ferry_host_kind_name(k));
	r = ferry_calloc(1, sizeof(*r));
	if (!r)
		return ferry_error(FERRY_ERR_NOMEM, "host tiers: out of host memory");
	r->bytes = bytes;
	if (k == FERRY_HOST_ACTIVATIONS && h->act_n > 1) {
		st = ferry_tier_span_new(h, r); /* its pieces: there */
	} else {
		st = t->type == FERRY_TIER_NVME ? ferry_tier_nvme_reserve(h, r) : map_on_tier(h, t, r);
		r->resident = t->type == FERRY_TIER_NVME ? 0 : r->mapped;
		r->n_pieces = 1;
		r->piece[0] = (struct tier_piece){ *t, k, bytes };
	}
	if (st) {
		ferry_free(r);
		return st;
	}
	r->next = h->regions;
	h->regions = r;
	ferry_tier_count(h, r, +1);
	*out = r;
	return FERRY_OK;
}

/* Unlinks and frees region r (not its memory). */
static void drop(struct ferry_host_tiers *h, struct tier_region *r)
{
	struct tier_region **pp = &h->regions;

	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	ferry_tier_count(h, r, -1);
	ferry_free(r);
}

void ferry_host_tiers_release(ferry_host_tiers_t h, void *p)
{
	struct tier_region *r = find(h, p);
	bool nvme;

	if (!r)
		return;
	for (struct tier_region *s = h->regions, *next; s; s = next) {
		next = s->next;
		if (s->owner == r)
			drop(h, s); /* a span's NVMe part: the span's addresses */
	}
	nvme = r->nvme || r->span_nvme;
	if (r->unregister)
		r->unregister(r->registered, r->p);
	if (!r->owner)
		munmap(r->p, r->mapped);
	drop(h, r);
	if (nvme)
		ferry_tier_nvme_released(h);
}
