/* Internal: how the executor finds the NVMe file behind a host address. */
#ifndef FERRY_TIER_NVME_TIER_H
#define FERRY_TIER_NVME_TIER_H

#include "ferry/tier.h"
#include "tier/nvme_file.h"

/* The NVMe file holding address p (from an NVMe-tier allocation) and p's
 * offset in it; NULL when p is ordinary memory. */
struct ferry_nvme_file *ferry_host_tiers_nvme_at(ferry_host_tiers_t h, const void *p, uint64_t *offset);

struct ferry_program;
/* If host is NVMe-tier memory, emits the copy of bytes between it and the
 * device address dev (kind: D2H writes the file, H2D reads it) on stream,
 * through pinned staging buffers where the device is not host memory, and
 * returns true; false (nothing emitted) for ordinary host memory. */
bool ferry_tier_emit_copy(struct ferry_program *p, int stream, ferry_host_tiers_t h, void *host, void *dev,
			  size_t bytes, enum ferry_copy_kind kind, int layer, const char *label);
/* The executor's direct access to host buffers, for NVMe-tier memory
 * (each returns false, doing nothing, for ordinary memory; else true with
 * the status in *st): n bytes between host and buf (host memory), after
 * the streams have drained; zeroing; and an upload to the device address
 * dev on stream s (synchronised; through the staging buffer on a device
 * that is not host memory). */
bool ferry_host_tiers_file_io(ferry_host_tiers_t h, void *host, void *buf, size_t n, bool write, ferry_status *st);
bool ferry_host_tiers_file_zero(ferry_host_tiers_t h, void *host, size_t n, ferry_status *st);
bool ferry_host_tiers_upload(ferry_host_tiers_t h, ferry_stream_t s, void *dev, const void *host, size_t n,
			     ferry_status *st);

/* The first NVMe I/O error of the steps so far (after their streams are
 * synchronised), or FERRY_OK. */
ferry_status ferry_host_tiers_io_status(ferry_host_tiers_t h) FERRY_MUST_CHECK;

#endif
