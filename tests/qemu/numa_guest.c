/*
 * Runs as /init in a QEMU guest with two NUMA nodes, node 1 without CPUs
 * (as Linux shows a CXL memory expander): discovers the topology from
 * sysfs and checks, page by page with move_pages, that memory of each
 * host tier sits where the tier says:
 *   dram            node 0 (the node with CPUs)
 *   cxl, node:1     node 1 (the CPU-less node)
 *   interleave:0+1  alternating pages, half on each
 *   interleave:0*3+1 ranges of 16 pages, three on node 0 for one on node 1
 *                   (striped with mbind, or the kernel's weighted interleave)
 * and times copies of memory on node 1 against memory on DRAM, mapped as
 * ferry calibrate maps a CXL node's (ferry_tier_map), printing both rates
 * and their ratio (only > 0 and finite asserted: emulated memory).
 * Prints "NUMA-GUEST PASS" or "NUMA-GUEST FAIL ..." and powers the guest off.
 * Built static from the tier sources alone (tests/qemu/run.sh); the NVMe
 * tier and the backends are not linked, and the stubs below say so if
 * reached.
 */
#include "ferry/tier.h"
#include "backend/host_tier_memory.h"
#include "tier/host_tiers_internal.h"
#include "tier/numa_bind.h"
#include "sched/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define EXPECT(cond, ...)                                        \
	do {                                                     \
		if (!(cond)) {                                   \
			printf("NUMA-GUEST FAIL: " __VA_ARGS__); \
			printf("\n");                            \
			failures++;                              \
		}                                                \
	} while (0)

/* Not linked into the guest: the NVMe tier's staging and schedule. */
static void not_here(const char *what)
{
	printf("NUMA-GUEST FAIL: %s reached in the guest\n", what);
	abort();
}
ferry_status ferry_host_alloc(ferry_backend_t be, size_t size, void **out) { (void)be; (void)size; (void)out; not_here("ferry_host_alloc"); return -1; }
void ferry_host_free(ferry_backend_t be, void *p) { (void)be; (void)p; not_here("ferry_host_free"); }
ferry_status ferry_stream_synchronize(ferry_stream_t s) { (void)s; not_here("ferry_stream_synchronize"); return -1; }
ferry_status ferry_memcpy_async(ferry_stream_t s, void *dst, const void *src, size_t size, enum ferry_copy_kind kind)
{
	(void)s; (void)dst; (void)src; (void)size; (void)kind;
	not_here("ferry_memcpy_async");
	return -1;
}
void ferry_emit_copy(struct ferry_program *p, int stream, void *dst, const void *src, size_t bytes,
		     enum ferry_copy_kind kind, int layer, const char *label)
{
	(void)p; (void)stream; (void)dst; (void)src; (void)bytes; (void)kind; (void)layer; (void)label;
	not_here("ferry_emit_copy");
}
void ferry_emit_file(struct ferry_program *p, int stream, struct ferry_nvme_file *file, uint64_t offset,
		     void *dst, const void *src, size_t bytes, enum ferry_copy_kind kind, int layer,
		     const char *label)
{
	(void)p; (void)stream; (void)file; (void)offset; (void)dst; (void)src; (void)bytes; (void)kind;
	(void)layer; (void)label;
	not_here("ferry_emit_file");
}

enum { PAGES = 256 };

/* Allocates PAGES pages of kind on the tier spec names and returns each
 * page's node in nodes[]; false after a failure. */
static bool pages_of(const char *spec, int nodes[PAGES])
{
	struct ferry_host_tiers_opts o = { .spec = spec };
	size_t page = (size_t)sysconf(_SC_PAGESIZE), kinds[FERRY_HOST_KINDS] = { 0 };
	ferry_host_tiers_t h;
	void *p;
	bool ok;

	kinds[FERRY_HOST_ACTIVATIONS] = PAGES * page;
	ok = ferry_host_tiers_create(&o, &h) == FERRY_OK && ferry_host_tiers_place(h, kinds, NULL) == FERRY_OK &&
	     ferry_host_tiers_alloc(h, NULL, FERRY_HOST_ACTIVATIONS, PAGES * page, &p) == FERRY_OK &&
	     ferry_tier_page_nodes(p, PAGES, page, nodes) == FERRY_OK;
	EXPECT(ok, "%s: %s", spec, ferry_last_error());
	ferry_host_tiers_free(h);
	return ok;
}

static void expect_all_on(const char *spec, int node)
{
	int nodes[PAGES], wrong = 0;

	if (!pages_of(spec, nodes))
		return;
	for (int i = 0; i < PAGES; i++)
		wrong += nodes[i] != node;
	EXPECT(!wrong, "%s: %d of %d pages not on node %d (page 0 on %d)", spec, wrong, PAGES, node, nodes[0]);
	printf("NUMA-GUEST %s: %d pages on node %d\n", spec, PAGES - wrong, node);
}

/* Pages on node 0 and 1, and how many are off the pattern of run0 pages
 * on node 0, then run1 on node 1 (in the phase that fits best: the
 * kernel's interleave starts from the page's address). */
static void expect_pattern(const char *spec, int run0, int run1)
{
	int nodes[PAGES], count[2] = { 0, 0 }, wrong = PAGES;

	if (!pages_of(spec, nodes))
		return;
	for (int i = 0; i < PAGES; i++)
		if (nodes[i] == 0 || nodes[i] == 1)
			count[nodes[i]]++;
	for (int phase = 0; phase < run0 + run1; phase++) {
		int off = 0;

		for (int i = 0; i < PAGES; i++)
			off += nodes[i] != ((i + phase) % (run0 + run1) < run0 ? 0 : 1);
		if (off < wrong)
			wrong = off;
	}
	EXPECT(!wrong, "%s: %d pages off the %d:%d pattern (node 0: %d, node 1: %d)", spec, wrong, run0, run1,
	       count[0], count[1]);
	printf("NUMA-GUEST %s: node 0 %d pages, node 1 %d pages\n", spec, count[0], count[1]);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { COPY_BYTES = 16 << 20, COPY_ROUNDS = 3 };

/* Seconds of the fastest round of copies to and from `dev` (memory with
 * CPUs, as the CPU backend's device memory is) of memory on tier `name`
 * mapped as calibration maps it (ferry_tier_map); 0 after a failure. */
static double copy_seconds(ferry_host_tiers_t h, const char *name, char *dev)
{
	struct ferry_tier t;
	void *p = NULL;
	double best = 0;

	if (ferry_tier_resolve(h, name, &t) != FERRY_OK ||
	    ferry_tier_map(ferry_host_tiers_topology(h), &t, NULL, COPY_BYTES, &p) != FERRY_OK) {
		EXPECT(0, "%s: %s", name, ferry_last_error());
		return 0;
	}
	{ /* the memory timed sits where the tier says */
		int nodes[16], want = t.node[0];

		EXPECT(ferry_tier_page_nodes(p, 16, (size_t)sysconf(_SC_PAGESIZE), nodes) == FERRY_OK,
		       "%s: %s", name, ferry_last_error());
		for (int i = 0; i < 16; i++)
			EXPECT(nodes[i] == want, "%s: timed page %d on node %d", name, i, nodes[i]);
	}
	for (int r = 0; r < COPY_ROUNDS; r++) {
		double t0 = now_s();

		memcpy(dev, p, COPY_BYTES);
		memcpy(p, dev, COPY_BYTES);
		if (r == 0 || now_s() - t0 < best)
			best = now_s() - t0;
	}
	ferry_tier_unmap(NULL, p, COPY_BYTES);
	return best;
}

/* The copy rate on the CPU-less node against DRAM's, as ferry calibrate
 * measures a CXL node (printed; under emulation only > 0 and finite is
 * asserted). */
static void copy_rates(void)
{
	struct ferry_host_tiers_opts o = { .spec = NULL };
	ferry_host_tiers_t h = NULL;
	struct ferry_tier dram;
	void *dev = NULL;
	double d, x;

	if (ferry_host_tiers_create(&o, &h) != FERRY_OK || ferry_tier_resolve(h, "dram", &dram) != FERRY_OK ||
	    ferry_tier_map(ferry_host_tiers_topology(h), &dram, NULL, COPY_BYTES, &dev) != FERRY_OK) {
		EXPECT(0, "copy rates: %s", ferry_last_error());
		ferry_host_tiers_free(h);
		return;
	}
	d = copy_seconds(h, "dram", dev);
	x = copy_seconds(h, "node:1", dev);
	EXPECT(d > 0 && x > 0 && isfinite(d / x), "copy times dram %g s, node 1 %g s", d, x);
	if (d > 0 && x > 0)
		printf("NUMA-GUEST copies: dram %.2f GB/s, node 1 %.2f GB/s (factor %.2f)\n", 2.0 * COPY_BYTES / d / 1e9,
		       2.0 * COPY_BYTES / x / 1e9, d / x);
	ferry_tier_unmap(NULL, dev, COPY_BYTES);
	ferry_host_tiers_free(h);
}

int main(void)
{
	struct ferry_topology t;

	mount("sysfs", "/sys", "sysfs", 0, NULL);
	mount("proc", "/proc", "proc", 0, NULL);
	EXPECT(ferry_topology_discover(NULL, &t) == FERRY_OK, "discover: %s", ferry_last_error());
	EXPECT(t.n == 2 && t.node[0].cpus > 0 && t.node[1].cpus == 0 && t.node[1].capacity > 0,
	       "two nodes, node 1 CPU-less with memory (%d nodes)", t.n);
	for (int i = 0; i < t.n; i++)
		printf("NUMA-GUEST node %d: %d CPUs, %llu MiB\n", t.node[i].id, t.node[i].cpus,
		       (unsigned long long)(t.node[i].capacity >> 20));
	if (!failures) {
		expect_all_on("all=dram", 0);
		expect_all_on("all=cxl", 1);
		expect_all_on("all=node:1", 1);
		expect_all_on("all=node:0", 0);
		expect_pattern("all=interleave:0+1", 1, 1);
		/* stripes of 16 pages per unit of weight (host_memory.c) */
		expect_pattern("all=interleave:0*3+1", 48, 16);
		copy_rates();
	}
	printf(failures ? "NUMA-GUEST FAIL (%d)\n" : "NUMA-GUEST PASS\n", failures);
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
