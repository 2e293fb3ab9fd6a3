/*
 * Internal: host-tier memory registered with a backend.  A tier hands out
 * memory (tier/host_memory.c) and knows no device; the backend registers
 * it for DMA (pinned, on CUDA).  ferry_host_tiers_alloc (ferry/backend.h) is
 * the same for a placement's allocations.
 */
#ifndef FERRY_BACKEND_HOST_TIER_MEMORY_H
#define FERRY_BACKEND_HOST_TIER_MEMORY_H

#include "ferry/backend.h"

/* Host memory of bytes bound to tier t's nodes (not bound on a simulated
 * topology), touched, and registered for DMA with be (NULL: not), as
 * ferry_host_tiers_alloc makes it but outside any placement (calibration
 * measures each tier on such memory); freed by ferry_tier_unmap with the
 * same be and bytes. */
ferry_status ferry_tier_map(const struct ferry_topology *topo, const struct ferry_tier *t, ferry_backend_t be,
			    size_t bytes, void **out) FERRY_MUST_CHECK;
void ferry_tier_unmap(ferry_backend_t be, void *p, size_t bytes);

#endif
