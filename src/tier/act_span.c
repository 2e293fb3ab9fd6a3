/*
 * Offloaded activations over several tiers (ferry/tier.h, the span): one
 * address range, whole layers in order, each tier's layers where its piece
 * is.  The memory tiers come first, each piece bound to its tier's nodes
 * (a page that two pieces share goes with the first); an NVMe part last,
 * file bytes standing behind the rest of the range (never readable), a
 * region of its own so copies to and from it become file I/O
 * (ferry_host_tiers_nvme_at) while the engine carves the range by offset
 * as it carves one tier's memory.
 */
#include "tier/host_tiers_internal.h"
#include "core/error.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t round_page(size_t n)
{
	long p = sysconf(_SC_PAGESIZE);
	size_t page = p > 0 ? (size_t)p : 4096;

	return (n + page - 1) / page * page;
}

/* The memory pieces of [p, p + resident): bound tier by tier, touched. */
static ferry_status map_pieces(struct ferry_host_tiers *h, struct tier_region *r, int n_mem)
{
	size_t start = 0, off = 0;
	ferry_status st = FERRY_OK;

	if (mprotect(r->p, r->resident, PROT_READ | PROT_WRITE) != 0)
		return ferry_error(FERRY_ERR_NOMEM, "host tiers: cannot map %zu bytes: %s", r->resident,
				   strerror(errno));
	for (int i = 0; i < n_mem && !st; i++) {
		size_t end = round_page(off + h->act_bytes[i]);

		end = end < r->resident ? end : r->resident;
		if (end > start)
			st = ferry_tier_bind(&h->topo, &h->act_tier[i], (char *)r->p + start, end - start);
		start = end > start ? end : start;
		off += h->act_bytes[i];
		r->piece[r->n_pieces++] = (struct tier_piece){ h->act_tier[i], FERRY_HOST_ACTIVATIONS, h->act_bytes[i] };
	}
	/* first touch, now, as one tier's memory is touched */
	for (size_t o = 0; o < r->resident && !st; o += 4096)
		((volatile char *)r->p)[o] = 0;
	return st;
}

/* The NVMe part: file bytes behind [p + at, p + at + bytes). */
static ferry_status nvme_part(struct ferry_host_tiers *h, struct tier_region *r, size_t at, size_t bytes)
{
	struct tier_region *s = ferry_calloc(1, sizeof(*s));
	size_t reserved;
	ferry_status st;

	if (!s)
		return ferry_error(FERRY_ERR_NOMEM, "host tiers: out of host memory");
	if ((st = ferry_tier_nvme_reserve_file(h, bytes, &s->file_offset, &reserved))) {
		ferry_free(s);
		return st;
	}
	s->p = (char *)r->p + at;
	s->bytes = s->mapped = bytes;
	s->nvme = true;
	s->owner = r;
	s->n_pieces = 1;
	s->piece[0] = (struct tier_piece){ h->act_tier[h->act_n - 1], FERRY_HOST_ACTIVATIONS, bytes };
	s->next = h->regions;
	h->regions = s;
	ferry_tier_count(h, s, +1);
	r->span_nvme = true;
	return FERRY_OK;
}

ferry_status ferry_tier_span_new(struct ferry_host_tiers *h, struct tier_region *r)
{
	bool nvme = h->act_tier[h->act_n - 1].type == FERRY_TIER_NVME;
	int n_mem = h->act_n - nvme;
	size_t mem = 0, sum = 0;
	ferry_status st;
	void *p;

	for (int i = 0; i < h->act_n; i++)
		sum += h->act_bytes[i];
	for (int i = 0; i < n_mem; i++)
		mem += h->act_bytes[i];
	if (sum != r->bytes)
		return ferry_error(FERRY_ERR_INVALID, "host tiers: %zu bytes of activations allocated, %zu placed",
				   r->bytes, sum);
	r->mapped = round_page(r->bytes ? r->bytes : 1);
	p = mmap(NULL, r->mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return ferry_error(FERRY_ERR_NOMEM, "host tiers: cannot map %zu bytes: %s", r->bytes, strerror(errno));
	r->p = p;
	r->resident = round_page(mem) < r->mapped ? round_page(mem) : r->mapped;
	st = map_pieces(h, r, n_mem);
	if (!st && nvme)
		st = nvme_part(h, r, mem, h->act_bytes[n_mem]);
	if (st)
		munmap(p, r->mapped);
	return st;
}
