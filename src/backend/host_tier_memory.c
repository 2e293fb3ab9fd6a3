/*
 * Host-tier memory made usable by a backend.  A tier hands out memory
 * (tier/host_memory.c, tier/nvme_tier.c) and calls no backend; here the
 * backend registers what it hands out for DMA (pinned, on CUDA), and gives
 * the NVMe tier the pinned staging buffers its copies go through on a
 * device that is not host memory.  The tier undoes both when it frees the
 * memory, through the function pointers left in it here.
 */
#include "backend/host_tier_memory.h"
#include "backend/backend_impl.h"
#include "tier/host_tiers_internal.h"

static void unregister_host(ferry_backend_t be, void *p)
{
	if (be->iface->host_unregister)
		be->iface->host_unregister(be, p);
}

/* Staging buffers for a backend whose device memory is not host memory. */
static ferry_status make_staging(struct ferry_host_tiers *h, ferry_backend_t be)
{
	ferry_status st;

	if (!be || be->caps.unified || h->stage[0])
		return FERRY_OK;
	h->stage_be = be;
	h->stage_free = ferry_host_free;
	for (int i = 0; i < 2; i++)
		if ((st = ferry_host_alloc(be, FERRY_TIER_STAGE_BYTES, &h->stage[i])))
			return st;
	return FERRY_OK;
}

ferry_status ferry_host_tiers_alloc(ferry_host_tiers_t h, ferry_backend_t be, enum ferry_host_kind kind,
				    size_t bytes, void **out)
{
	struct tier_region *r;
	ferry_status st;

	*out = NULL;
	if ((st = ferry_tier_region_new(h, kind, bytes, &r)))
		return st;
	if (r->nvme || r->span_nvme)
		st = make_staging(h, be);
	if (!st && r->resident && be && be->iface->host_register)
		st = be->iface->host_register(be, r->p, r->resident);
	if (st) {
		ferry_host_tiers_release(h, r->p);
		return st;
	}
	if (be && r->resident) {
		r->registered = be;
		r->unregister = unregister_host;
	}
	*out = r->p;
	return FERRY_OK;
}

ferry_status ferry_tier_map(const struct ferry_topology *topo, const struct ferry_tier *t, ferry_backend_t be,
			    size_t bytes, void **out)
{
	size_t mapped;
	ferry_status st = ferry_tier_map_bound(topo, t, bytes, out, &mapped);

	if (!st && be && be->iface->host_register && (st = be->iface->host_register(be, *out, mapped))) {
		ferry_tier_unmap_bound(*out, bytes);
		*out = NULL;
	}
	return st;
}

void ferry_tier_unmap(ferry_backend_t be, void *p, size_t bytes)
{
	if (!p)
		return;
	if (be)
		unregister_host(be, p);
	ferry_tier_unmap_bound(p, bytes);
}
