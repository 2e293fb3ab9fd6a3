/*
 * Copies between the device and the NVMe tier (see tier_copy.h): file
 * tasks, with a device copy through a staging buffer on either side where
 * the device is not host memory (the backend's pinned buffers, made at
 * the tier's first NVMe allocation); stream order keeps each buffer's
 * next use after its file I/O.
 */
#include "sched/tier_copy.h"
#include "tier/host_tiers_internal.h"
#include "tier/nvme_tier.h"
#include "core/error.h"

bool ferry_tier_emit_copy(struct ferry_program *p, int stream, ferry_host_tiers_t h, void *host, void *dev,
			  size_t bytes, enum ferry_copy_kind kind, int layer, const char *label)
{
	uint64_t off;
	struct ferry_nvme_file *f = host ? ferry_host_tiers_nvme_at(h, host, &off) : NULL;

	if (!f)
		return false;
	if (!h->stage[0]) { /* the device's memory is host memory: straight to the file */
		ferry_emit_file(p, stream, f, off, dev, dev, bytes, kind, layer, label);
		return true;
	}
	for (size_t pos = 0; pos < bytes; pos += FERRY_TIER_STAGE_BYTES) {
		size_t len = bytes - pos < FERRY_TIER_STAGE_BYTES ? bytes - pos : FERRY_TIER_STAGE_BYTES;
		char *d = (char *)dev + pos;

		/* stream order keeps a staging buffer's next use after its file I/O */
		if (kind == FERRY_COPY_D2H) {
			ferry_emit_copy(p, stream, h->stage[0], d, len, FERRY_COPY_D2H, layer, label);
			ferry_emit_file(p, stream, f, off + pos, NULL, h->stage[0], len, kind, layer, label);
		} else {
			ferry_emit_file(p, stream, f, off + pos, h->stage[1], NULL, len, kind, layer, label);
			ferry_emit_copy(p, stream, d, h->stage[1], len, FERRY_COPY_H2D, layer, label);
		}
	}
	return true;
}

bool ferry_host_tiers_upload(ferry_host_tiers_t h, ferry_stream_t s, void *dev, const void *host, size_t n,
			     ferry_status *st)
{
	uint64_t off;
	struct ferry_nvme_file *f = h ? ferry_host_tiers_nvme_at(h, host, &off) : NULL;

	if (!f)
		return false;
	/* dev may still be read by work queued before */
	if ((*st = ferry_stream_synchronize(s)))
		return true;
	if (!h->stage[1]) { /* the device's memory is host memory */
		*st = ferry_nvme_read(f, off, dev, n);
		return true;
	}
	for (size_t pos = 0; pos < n && !*st; pos += FERRY_TIER_STAGE_BYTES) {
		size_t len = n - pos < FERRY_TIER_STAGE_BYTES ? n - pos : FERRY_TIER_STAGE_BYTES;

		if (!(*st = ferry_nvme_read(f, off + pos, h->stage[1], len)) &&
		    !(*st = ferry_memcpy_async(s, (char *)dev + pos, h->stage[1], len, FERRY_COPY_H2D)))
			*st = ferry_stream_synchronize(s);
	}
	return true;
}
