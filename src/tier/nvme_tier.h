/* Internal: how the executor finds the NVMe file behind a host address,
 * and reads, writes or zeroes the bytes there. */
#ifndef FERRY_TIER_NVME_TIER_H
#define FERRY_TIER_NVME_TIER_H

#include "ferry/tier.h"
#include "tier/nvme_file.h"

/* The NVMe file holding address p (from an NVMe-tier allocation) and p's
 * offset in it; NULL when p is ordinary memory. */
struct ferry_nvme_file *ferry_host_tiers_nvme_at(ferry_host_tiers_t h, const void *p, uint64_t *offset);

/* The executor's direct access to host buffers, for NVMe-tier memory
 * (each returns false, doing nothing, for ordinary memory; else true with
 * the status in *st): n bytes between host and buf (host memory), after
 * the streams have drained; and zeroing.  (An upload to the device is
 * sched/tier_copy.h's.) */
bool ferry_host_tiers_file_io(ferry_host_tiers_t h, void *host, void *buf, size_t n, bool write, ferry_status *st);
bool ferry_host_tiers_file_zero(ferry_host_tiers_t h, void *host, size_t n, ferry_status *st);

/* The first NVMe I/O error of the steps so far (after their streams are
 * synchronised), or FERRY_OK. */
ferry_status ferry_host_tiers_io_status(ferry_host_tiers_t h) FERRY_MUST_CHECK;

#endif
