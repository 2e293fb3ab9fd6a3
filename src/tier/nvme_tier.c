/*
 * The NVMe tier's memory: state placed there has no host memory, only file
 * bytes.  An allocation reserves them in the run's file and hands out an
 * inaccessible address range of the same size that stands for them, so the
 * offload engine can carve it by offset like any host buffer and turn each
 * copy to or from it into a file write or read (ferry_host_tiers_nvme_at).
 * The copies themselves are schedule tasks (sched/tier_copy.c); the pinned
 * staging buffers they go through come from the backend
 * (backend/host_tier_memory.c).
 */
#include "tier/host_tiers_internal.h"
#include "tier/nvme_tier.h"
#include "core/error.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

void ferry_tier_nvme_released(struct ferry_host_tiers *h)
{
	for (struct tier_region *r = h->regions; r; r = r->next)
		if (r->nvme)
			return;
	for (int i = 0; i < 2; i++)
		if (h->stage[i])
			h->stage_free(h->stage_be, h->stage[i]);
	h->stage[0] = h->stage[1] = NULL;
	ferry_nvme_file_close(h->nvme);
	h->nvme = NULL;
	h->nvme_used = 0;
}

ferry_status ferry_tier_nvme_reserve_file(struct ferry_host_tiers *h, size_t bytes, uint64_t *offset,
					  size_t *reserved)
{
	size_t n = (bytes + FERRY_NVME_ALIGN - 1) / FERRY_NVME_ALIGN * FERRY_NVME_ALIGN;
	ferry_status st;

	if (!h->nvme && (st = ferry_nvme_file_create(h->nvme_dir, &h->nvme)))
		return st;
	if (!n)
		n = FERRY_NVME_ALIGN;
	if ((st = ferry_nvme_file_reserve(h->nvme, h->nvme_used + n)))
		return st;
	*offset = h->nvme_used;
	*reserved = n;
	h->nvme_used += n;
	return FERRY_OK;
}

ferry_status ferry_tier_nvme_reserve(struct ferry_host_tiers *h, struct tier_region *r)
{
	size_t mapped;
	uint64_t off;
	ferry_status st;
	void *p;

	if ((st = ferry_tier_nvme_reserve_file(h, r->bytes, &off, &mapped)))
		return st;
	/* PROT_NONE, no memory behind it: a stray access faults at once */
	p = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return ferry_error(FERRY_ERR_NOMEM, "NVMe tier: cannot reserve addresses: %s", strerror(errno));
	r->p = p;
	r->mapped = mapped;
	r->nvme = true;
	r->file_offset = off;
	return FERRY_OK;
}

struct ferry_nvme_file *ferry_host_tiers_nvme_at(ferry_host_tiers_t h, const void *p, uint64_t *offset)
{
	for (struct tier_region *r = h ? h->regions : NULL; r; r = r->next) {
		const char *base = r->p;

		if (r->nvme && (const char *)p >= base && (const char *)p < base + r->mapped) {
			*offset = r->file_offset + (uint64_t)((const char *)p - base);
			return h->nvme;
		}
	}
	return NULL;
}

const char *ferry_host_tiers_nvme_mode(ferry_host_tiers_t h)
{
	return h && h->nvme ? ferry_nvme_file_mode(h->nvme) : NULL;
}

ferry_status ferry_host_tiers_io_status(ferry_host_tiers_t h)
{
	return h && h->nvme ? ferry_nvme_file_status(h->nvme) : FERRY_OK;
}

bool ferry_host_tiers_file_io(ferry_host_tiers_t h, void *host, void *buf, size_t n, bool write, ferry_status *st)
{
	uint64_t off;
	struct ferry_nvme_file *f = h ? ferry_host_tiers_nvme_at(h, host, &off) : NULL;

	if (!f)
		return false;
	*st = write ? ferry_nvme_write(f, off, buf, n) : ferry_nvme_read(f, off, buf, n);
	return true;
}

bool ferry_host_tiers_file_zero(ferry_host_tiers_t h, void *host, size_t n, ferry_status *st)
{
	static const char zeros[1 << 16];
	uint64_t off;
	struct ferry_nvme_file *f = h ? ferry_host_tiers_nvme_at(h, host, &off) : NULL;

	if (!f)
		return false;
	*st = FERRY_OK;
	for (size_t pos = 0; pos < n && !*st; pos += sizeof(zeros))
		*st = ferry_nvme_write(f, off + pos, zeros, n - pos < sizeof(zeros) ? n - pos : sizeof(zeros));
	return true;
}
