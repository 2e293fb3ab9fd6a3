/* Internal: how the executor finds the NVMe file behind a host address. */
#ifndef FERRY_TIER_NVME_TIER_H
#define FERRY_TIER_NVME_TIER_H

#include "ferry/tier.h"
#include "tier/nvme_file.h"

/* The NVMe file holding address p (from an NVMe-tier allocation) and p's
 * offset in it; NULL when p is ordinary memory. */
struct ferry_nvme_file *ferry_host_tiers_nvme_at(ferry_host_tiers_t h, const void *p, uint64_t *offset);

#endif
