/*
 * Host memory tiers: where the host copies of training state live.
 *
 * A machine's host memory is a set of NUMA nodes: nodes with CPUs (local
 * DRAM) and CPU-less nodes (how Linux shows CXL memory expanders).  A tier
 * names some of them, or a file on an NVMe drive:
 *
 *   dram            the nodes with CPUs (bound there)
 *   node:N          NUMA node N
 *   cxl             every CPU-less node, interleaved page by page ("striped
 *                   across cards")
 *   interleave:N*W+M*V...
 *                   nodes N, M, ... with weights W, V (default 1): the
 *                   kernel's weighted interleave where it has it and its
 *                   weights give these ratios, else ranges of pages bound
 *                   node by node (mbind) in those ratios
 *   nvme            one file in --nvme-dir, created, sized and removed by
 *                   ferry (streamed state only: offloaded activations, and
 *                   with --offload-optimizer stream params and optimizer)
 *   auto            the default for the kind, below
 *
 * Kinds of host state: activations (offloaded), params (master weights and
 * their host copies), grads (host gradients), optimizer (AdamW moments).
 * The default follows arXiv 2507.03305: state the CPU computes on (all of
 * it with --offload-optimizer cpu) stays in local DRAM; streamed state goes
 * to CXL memory, striped across its nodes, when the machine has any; what
 * does not fit there goes to DRAM, and then, with --nvme-dir, to NVMe
 * (what it can hold).  An explicitly named tier that is too small is an
 * error that says which tiers would hold the state.
 *
 * A topology description file declares simulated nodes (capacity, CPUs or
 * not) so placement and capacity logic can be exercised on any machine:
 *
 *   # node ID cpus N mem SIZE [free SIZE]
 *   node 0 cpus 2 mem 16G
 *   node 1 cpus 0 mem 64G
 *   nvme free 2T              # optional: --nvme-dir's room (default: its disk's)
 *
 * Memory of a simulated topology is not bound (the nodes do not exist).
 */
#ifndef FERRY_TIER_H
#define FERRY_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_MAX_NODES 64

struct ferry_numa_node {
	int id;
	int cpus;         /* 0: CPU-less (CXL-like) */
	uint64_t capacity; /* bytes */
	uint64_t free;     /* bytes free when discovered */
};

struct ferry_topology {
	int n;
	struct ferry_numa_node node[FERRY_MAX_NODES]; /* by increasing id */
	bool simulated;            /* from a description file: nothing is bound */
	uint64_t nvme_free;        /* a file's "nvme free SIZE"; 0: --nvme-dir's disk says */
	bool weighted_interleave;  /* the kernel has MPOL_WEIGHTED_INTERLEAVE */
	char source[256];          /* the sysfs folder or the file it came from */
};

/* The machine's nodes from sysfs_dir (NULL: /sys/devices/system/node):
 * each nodeN/ with its cpulist and meminfo.  Without that folder (no NUMA
 * support), one node 0 with all CPUs and memory. */
ferry_status ferry_topology_discover(const char *sysfs_dir, struct ferry_topology *t) FERRY_MUST_CHECK;
/* A description file, as above.  Errors name the line. */
ferry_status ferry_topology_load(const char *path, struct ferry_topology *t) FERRY_MUST_CHECK;
/* The node of each CPU below n_cpus (-1: none, or offline), from the
 * cpulists of the folder t was discovered from; a machine of one node
 * gives that node to all, a simulated topology (nothing is bound) -1. */
ferry_status ferry_topology_cpu_nodes(const struct ferry_topology *t, int *node_of_cpu, int n_cpus) FERRY_MUST_CHECK;
/* Node id's entry, NULL when there is none. */
const struct ferry_numa_node *ferry_topology_node(const struct ferry_topology *t, int id);

/* The kinds of host state, each placed on a host tier. */
enum ferry_host_kind {
	FERRY_HOST_ACTIVATIONS,
	FERRY_HOST_PARAMS,
	FERRY_HOST_GRADS,
	FERRY_HOST_OPTIMIZER,
	FERRY_HOST_KINDS
};
#define FERRY_TIER_NAME_CHARS 128
/* Tiers offloaded activations may span, layer by layer. */
#define FERRY_TIER_SPAN_MAX 4

const char *ferry_host_kind_name(enum ferry_host_kind k);

enum ferry_tier_type {
	FERRY_TIER_AUTO,
	FERRY_TIER_DRAM,
	FERRY_TIER_NODE,
	FERRY_TIER_CXL,
	FERRY_TIER_INTERLEAVE,
	FERRY_TIER_NVME,
};

/* A tier resolved against a topology: its nodes and their weights. */
struct ferry_tier {
	enum ferry_tier_type type;
	int n;
	int node[FERRY_MAX_NODES];
	unsigned weight[FERRY_MAX_NODES];
};

/* "cxl (nodes 1,2 interleaved)" and the like, into buf. */
const char *ferry_tier_describe(const struct ferry_tier *t, char *buf, size_t n);

typedef struct ferry_host_tiers *ferry_host_tiers_t;

struct ferry_host_tiers_opts {
	const char *spec;          /* --host-tier KIND=TIER,... (NULL: all auto) */
	const char *topology_file; /* --topology (NULL: discover) */
	const char *sysfs_dir;     /* discovery's folder (NULL: the real one; tests) */
	const char *nvme_dir;      /* --nvme-dir (NULL: no NVMe tier) */
	unsigned cpu_kinds;        /* bit 1 << k: host threads compute on kind k
				      (AdamW on the host): memory with CPUs, never NVMe */
	unsigned copied_kinds;     /* bit 1 << k: kind k is only copied to and from
				      the device (streamed), so NVMe may hold it;
				      activations always may */
	size_t host_mem;           /* --host-mem: the most DRAM (nodes with CPUs) host
				      state may take (0: their free memory) */
};

/* Discovers or loads the topology and resolves the spec against it.
 * Errors: a bad spec, a node that does not exist, cxl on a machine
 * without CPU-less nodes, nvme without --nvme-dir or for state the CPU
 * computes on, an --nvme-dir that cannot hold a file. */
ferry_status ferry_host_tiers_create(const struct ferry_host_tiers_opts *o, ferry_host_tiers_t *out)
	FERRY_MUST_CHECK;
void ferry_host_tiers_free(ferry_host_tiers_t h);
/* How the run at hand uses each kind (as ferry_host_tiers_opts): what a
 * placement decides, for the next ferry_host_tiers_place. */
void ferry_host_tiers_set_use(ferry_host_tiers_t h, unsigned cpu_kinds, unsigned copied_kinds);
const struct ferry_topology *ferry_host_tiers_topology(ferry_host_tiers_t h);

/* Where each kind goes and how many bytes each tier gets. */
#define FERRY_MAX_TIERS 8
struct ferry_tier_use {
	struct ferry_tier tier;
	uint64_t bytes[FERRY_HOST_KINDS];
	uint64_t total, capacity; /* capacity: free bytes of its nodes, or of the disk */
	int act_first, act_count; /* activations spread over tiers: the layers here */
};
struct ferry_tier_report {
	int n;
	struct ferry_tier_use use[FERRY_MAX_TIERS];
	int tier_of[FERRY_HOST_KINDS]; /* index into use[], -1: the kind has no bytes;
					  activations spread over tiers: the first */
	int act_tiers;                 /* tiers the activations are on (more than 1: spread) */
	int act_asked;                 /* tiers the activations were asked to span (0: one) */
	int act_layers[FERRY_TIER_SPAN_MAX]; /* ... the layers on each, in its order */
};

/* Offloaded activations may span tiers: "dram+nvme" (activations.host, or
 * --host-tier activations=...) fills them in order, layer by layer, each
 * tier up to its capacity; an NVMe tier comes last.  The automatic
 * placement does the same over its order when no one tier holds them.
 * A span is per layer: act_unit, the host bytes of one layer's offloaded
 * activations, when their bytes are whole layers of one tensor (the plan's
 * host_act_unit); 0: they cannot span. */
ferry_status ferry_host_tiers_place_layers(ferry_host_tiers_t h, const size_t kind_bytes[FERRY_HOST_KINDS],
					   size_t act_unit, struct ferry_tier_report *report) FERRY_MUST_CHECK;
/* Bytes allocated on each tier by kind, at their most so far (what
 * ferry_host_tiers_alloc handed out, unrounded): a report with the
 * tiers in first-use order, capacity and layers unset. */
void ferry_host_tiers_peaks(ferry_host_tiers_t h, struct ferry_tier_report *report);

/* Places host bytes by kind (ferry_plan_host_kinds sums a plan's) on tiers and
 * checks every tier's capacity; on success the placement is what later
 * allocations use.  FERRY_ERR_INVALID when a tier is too small, the message
 * naming the kind, its bytes, the tier's capacity and the tiers that would
 * hold it.  report may be NULL. */
ferry_status ferry_host_tiers_place(ferry_host_tiers_t h, const size_t kind_bytes[FERRY_HOST_KINDS],
				    struct ferry_tier_report *report) FERRY_MUST_CHECK;

/* The placement ferry_host_tiers_place made last (n = 0 before). */
void ferry_host_tiers_report(ferry_host_tiers_t h, struct ferry_tier_report *report);
/* How the NVMe tier's file does I/O, once it exists ("io_uring ...",
 * "pread/pwrite ..."); NULL before. */
const char *ferry_host_tiers_nvme_mode(ferry_host_tiers_t h);

/* Whether p came from ferry_host_tiers_alloc (and was not freed). */
bool ferry_host_tiers_owns(ferry_host_tiers_t h, const void *p);
void ferry_host_tiers_release(ferry_host_tiers_t h, void *p);

#ifdef __cplusplus
}
#endif
#endif
