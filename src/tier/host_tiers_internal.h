/* Internal: the host tiers object, shared by its spec, placement, memory
 * and NVMe parts. */
#ifndef FERRY_TIER_HOST_TIERS_INTERNAL_H
#define FERRY_TIER_HOST_TIERS_INTERNAL_H

#include "ferry/tier.h"
#include "tier/nvme_file.h"

/* Bytes of one kind on one tier. */
struct tier_piece {
	struct ferry_tier tier;
	int kind;
	uint64_t bytes;
};

/* One allocation handed out by ferry_host_tiers_alloc. */
struct tier_region {
	struct tier_region *next;
	void *p;
	size_t bytes, mapped;
	/* the backend it is registered with, or NULL, and what undoes that
	 * (set by backend/host_tier_memory.c: a tier calls no backend itself) */
	struct ferry_backend *registered;
	void (*unregister)(struct ferry_backend *be, void *p);
	bool nvme;                  /* an address range standing for file bytes */
	uint64_t file_offset;       /* nvme: where its bytes start in the file */
	size_t resident;            /* bytes from p on that are memory (registered on CUDA) */
	struct tier_region *owner;  /* a span's NVMe part: the span, which unmaps it */
	bool span_nvme;             /* a span whose last part is on the NVMe tier */
	/* the tiers its bytes are on (a span: one piece per tier), for the peaks */
	int n_pieces;
	struct tier_piece piece[FERRY_TIER_SPAN_MAX];
};

struct ferry_host_tiers {
	struct ferry_topology topo;
	unsigned cpu_kinds, copied_kinds; /* as ferry_host_tiers_opts */
	struct ferry_tier asked[FERRY_HOST_KINDS]; /* FERRY_TIER_AUTO: the default */
	struct ferry_tier placed[FERRY_HOST_KINDS];
	bool is_placed;
	struct ferry_tier_report report; /* the last placement's */
	char nvme_dir[512];
	struct ferry_nvme_file *nvme; /* created at the first NVMe allocation */
	uint64_t nvme_used;
	/* a device that is not host memory moves NVMe bytes through these
	 * (pinned by the backend, backend/host_tier_memory.c; freed with stage_free
	 * when the last NVMe region goes): [0] device to file, [1] file to
	 * device */
	struct ferry_backend *stage_be;
	void (*stage_free)(struct ferry_backend *be, void *p);
	void *stage[2];
	struct tier_region *regions;
	uint64_t host_mem; /* --host-mem: the most DRAM host state takes (0: its free memory) */
	/* offloaded activations over several tiers, filled in order, layer by
	 * layer: the tiers asked (act_asked_n > 1 only), and the last placement's
	 * pieces (act_n > 1 only; else the kind is whole on placed[]) */
	int act_asked_n, act_n;
	struct ferry_tier act_asked[FERRY_TIER_SPAN_MAX], act_tier[FERRY_TIER_SPAN_MAX];
	uint64_t act_bytes[FERRY_TIER_SPAN_MAX];
	/* bytes allocated per tier and kind now, and each tier's most so far */
	struct ferry_tier_report live, peak;
};

/* Parses a --host-tier spec into asked[] (resolved against the topology). */
ferry_status ferry_tier_parse_spec(struct ferry_host_tiers *h, const char *spec) FERRY_MUST_CHECK;
/* Resolves one tier name ("dram", "node:1", ...) against the topology. */
ferry_status ferry_tier_resolve(const struct ferry_host_tiers *h, const char *name, struct ferry_tier *out)
	FERRY_MUST_CHECK;
bool ferry_tier_equal(const struct ferry_tier *a, const struct ferry_tier *b);
/* Whether the NVMe tier can hold kind: what only travels to and from the
 * device (offloaded activations; streamed optimizer state and weights). */
bool ferry_tier_nvme_holds(const struct ferry_host_tiers *h, int kind);

/* Binds [p, p + bytes) to the tier's nodes (mbind); nothing on a simulated
 * topology. */
ferry_status ferry_tier_bind(const struct ferry_topology *topo, const struct ferry_tier *t, void *p, size_t bytes)
	FERRY_MUST_CHECK;

/* *mapped bytes (bytes rounded up to pages, at least one) at *p, bound to
 * t's nodes (not on a simulated topology) and touched; unmapped by
 * ferry_tier_unmap_bound with the same bytes.  backend/host_tier_memory.c
 * registers it with a backend (ferry_tier_map). */
ferry_status ferry_tier_map_bound(const struct ferry_topology *topo, const struct ferry_tier *t, size_t bytes,
				  void **p, size_t *mapped) FERRY_MUST_CHECK;
void ferry_tier_unmap_bound(void *p, size_t bytes);
/* A placement's allocation of bytes for tensors of kind, on the tier kind
 * is placed on, linked into h->regions (ferry_host_tiers_release frees it);
 * not registered with any backend yet. */
ferry_status ferry_tier_region_new(struct ferry_host_tiers *h, enum ferry_host_kind k, size_t bytes,
				   struct tier_region **out) FERRY_MUST_CHECK;

/* Offloaded activations on the tiers of the last placement's pieces,
 * memory first, the NVMe part (if any) a region of its own owned by r. */
ferry_status ferry_tier_span_new(struct ferry_host_tiers *h, struct tier_region *r) FERRY_MUST_CHECK;
/* Counts r's pieces in h->live and h->peak (sign +1 at allocation, -1 at release). */
void ferry_tier_count(struct ferry_host_tiers *h, const struct tier_region *r, int sign);

/* File bytes for an NVMe region's r->bytes: *offset in the file. */
ferry_status ferry_tier_nvme_reserve_file(struct ferry_host_tiers *h, size_t bytes, uint64_t *offset,
					  size_t *reserved) FERRY_MUST_CHECK;
/* An NVMe region: file bytes reserved for r->bytes, and an address range
 * (never readable) that stands for them. */
ferry_status ferry_tier_nvme_reserve(struct ferry_host_tiers *h, struct tier_region *r)
	FERRY_MUST_CHECK;
/* After an NVMe region's release: the last one closes (removes) the file. */
void ferry_tier_nvme_released(struct ferry_host_tiers *h);

/* Bytes of each staging buffer. */
#define FERRY_TIER_STAGE_BYTES (4u << 20)

#endif
