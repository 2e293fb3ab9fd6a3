/*
 * Internal: copies between the device and NVMe-tier memory, which has no
 * host bytes (tier/nvme_tier.c): as schedule tasks, or at once.
 */
#ifndef FERRY_SCHED_TIER_COPY_H
#define FERRY_SCHED_TIER_COPY_H

#include "ferry/tier.h"
#include "sched/schedule.h"

/* If host is NVMe-tier memory, emits the copy of bytes between it and the
 * device address dev (kind: D2H writes the file, H2D reads it) on stream,
 * through pinned staging buffers where the device is not host memory, and
 * returns true; false (nothing emitted) for ordinary host memory. */
bool ferry_tier_emit_copy(struct ferry_program *p, int stream, ferry_host_tiers_t h, void *host, void *dev,
			  size_t bytes, enum ferry_copy_kind kind, int layer, const char *label);
/* If host is NVMe-tier memory, uploads n bytes of it to the device address
 * dev on stream s (synchronised; through the staging buffer on a device
 * that is not host memory) and returns true with the status in *st; false,
 * doing nothing, for ordinary memory. */
bool ferry_host_tiers_upload(ferry_host_tiers_t h, ferry_stream_t s, void *dev, const void *host, size_t n,
			     ferry_status *st);

#endif
