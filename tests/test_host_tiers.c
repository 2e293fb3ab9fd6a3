/*
 * Host memory tiers without training:
 *  - topology: a fake sysfs tree (nodes with and without CPUs, a gap in the
 *    ids) is read back as written; description files load, and bad ones are
 *    refused with the line; this machine's own topology has a node with CPUs;
 *  - tier specs resolve to the nodes they name; bad ones (a node that does
 *    not exist, cxl without CPU-less nodes, nvme without a directory or for
 *    state other than activations, bad weights, a kind twice) are refused;
 *  - placement on simulated nodes: the paper's default (CPU-computed state
 *    in DRAM, streamed state striped over CXL), overflow to DRAM then NVMe,
 *    capacities in the weights' ratio, and a tier too small refused with the
 *    tiers that would hold the state;
 *  - on this machine, memory bound to a tier sits on the tier's node
 *    (move_pages) and reads and writes like any memory.
 */
#include "test_util.h"
#include "ferry/backend.h"
#include "ferry/place.h"
#include "ferry/tier.h"
#include "tier/numa_bind.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL, "cannot write %s", path);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void fake_node(const char *root, int id, const char *cpulist, unsigned long total_kb, unsigned long free_kb)
{
	char path[700], text[256];

	snprintf(path, sizeof(path), "%s/node%d", root, id);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/node%d/cpulist", root, id);
	write_file(path, cpulist);
	snprintf(path, sizeof(path), "%s/node%d/meminfo", root, id);
	snprintf(text, sizeof(text), "Node %d MemTotal:  %lu kB\nNode %d MemFree:   %lu kB\nNode %d MemUsed: 0 kB\n",
		 id, total_kb, id, free_kb, id);
	write_file(path, text);
}

static void check_discovery(void)
{
	char root[600];
	struct ferry_topology t;

	snprintf(root, sizeof(root), "%s/sysfs", dir);
	mkdir(root, 0700);
	fake_node(root, 0, "0-3,8\n", 16u << 20, 12u << 20);
	fake_node(root, 2, "\n", 64u << 20, 60u << 20); /* CPU-less: CXL */
	fake_node(root, 3, "\n", 32u << 20, 32u << 20);
	write_file(strcat(strcpy((char[700]){ 0 }, root), "/possible"), "0-3\n"); /* not a node: skipped */
	CHECK(ferry_topology_discover(root, &t) == FERRY_OK, "discover: %s", ferry_last_error());
	CHECK(t.n == 3 && t.node[0].id == 0 && t.node[1].id == 2 && t.node[2].id == 3, "nodes 0, 2, 3 (%d)", t.n);
	CHECK(t.node[0].cpus == 5 && t.node[1].cpus == 0 && t.node[2].cpus == 0, "CPUs 5, 0, 0 (%d %d %d)",
	      t.node[0].cpus, t.node[1].cpus, t.node[2].cpus);
	CHECK(t.node[1].capacity == 64ull << 30 && t.node[1].free == 60ull << 30, "node 2: 64 GiB, 60 free");
	CHECK(!t.simulated, "discovered, not simulated");
	CHECK(ferry_topology_discover("/nonexistent-sysfs", &t) == FERRY_ERR_IO, "a missing folder");

	CHECK(ferry_topology_discover(NULL, &t) == FERRY_OK, "this machine: %s", ferry_last_error());
	CHECK(t.n >= 1 && t.node[0].capacity > 0, "this machine has a node with memory");
	{
		bool cpus = false;

		for (int i = 0; i < t.n; i++)
			cpus |= t.node[i].cpus > 0;
		CHECK(cpus, "this machine has a node with CPUs");
	}
}

static void expect_load_error(const char *text, const char *needle)
{
	char path[600];
	struct ferry_topology t;

	snprintf(path, sizeof(path), "%s/bad_topology.txt", dir);
	write_file(path, text);
	CHECK(ferry_topology_load(path, &t) != FERRY_OK, "'%s' is refused", text);
	CHECK(strstr(ferry_last_error(), needle) != NULL, "'%s': message has '%s': %s", text, needle,
	      ferry_last_error());
}

static void check_load(const char *topo)
{
	struct ferry_topology t;

	CHECK(ferry_topology_load(topo, &t) == FERRY_OK, "load: %s", ferry_last_error());
	CHECK(t.simulated && t.n == 3 && t.node[1].cpus == 0 && t.node[1].capacity == 1ull << 30 &&
		      t.node[0].free == 3ull << 30 && t.nvme_free == 64ull << 30, "three simulated nodes and NVMe as written");
	expect_load_error("node 0 cpus 2\n", ":1: a node needs");
	expect_load_error("# two lines\nnode 0 cpus 2 mem 1G\nnode 0 cpus 0 mem 1G\n", ":3: node 0 declared twice");
	expect_load_error("node 0 cpus 2 mem 1Q\n", "a size like 64G");
	expect_load_error("node 0 cpus 2 mem 1G colour blue\n", "unknown key 'colour'");
	expect_load_error("node 1 cpus 0 mem 1G\n", "no node has CPUs");
	expect_load_error("\n# nothing\n", "no nodes");
	expect_load_error("node 0 cpus 2 mem 1G\nnvme 2T\n", ":2: the NVMe line is 'nvme free SIZE'");
	expect_load_error("node 0 cpus 2 mem 1G\nnvme free 2Q\n", "a size like 2T");
	expect_load_error("node 0 cpus 2 mem 1G\nnvme free 2T cheap\n", "the NVMe line");
	CHECK(ferry_topology_load("/nonexistent/topology", &t) == FERRY_ERR_IO, "a missing file");
}

#define STREAM "adam=host:stream"
#define HOST_CPU "adam=host:cpu"

/* How AdamW placed as `adam` (a --place value) uses host state, into o. */
static void use_of(const char *adam, struct ferry_host_tiers_opts *o)
{
	struct ferry_places p;

	ferry_places_default(&p);
	CHECK(ferry_places_parse(adam, &p) == FERRY_OK, "%s: %s", adam, ferry_last_error());
	ferry_places_host_use(&p, &o->cpu_kinds, &o->copied_kinds);
}

static ferry_host_tiers_t make(const char *spec, const char *topo, const char *nvme, const char *adam)
{
	struct ferry_host_tiers_opts o = { .spec = spec, .topology_file = topo, .nvme_dir = nvme };
	ferry_host_tiers_t h = NULL;

	use_of(adam, &o);

	CHECK(ferry_host_tiers_create(&o, &h) == FERRY_OK, "tiers '%s': %s", spec ? spec : "", ferry_last_error());
	return h;
}

static void expect_spec_error(const char *spec, const char *topo, const char *nvme, const char *needle)
{
	struct ferry_host_tiers_opts o = { .spec = spec, .topology_file = topo, .nvme_dir = nvme };
	ferry_host_tiers_t h = NULL;

	use_of(STREAM, &o);

	CHECK(ferry_host_tiers_create(&o, &h) == FERRY_ERR_INVALID || (h == NULL && needle[0] == '/'),
	      "'%s' is refused", spec);
	CHECK(h == NULL, "'%s': no object", spec);
	CHECK(strstr(ferry_last_error(), needle) != NULL, "'%s': message has '%s': %s", spec, needle,
	      ferry_last_error());
	ferry_host_tiers_free(h);
}

static void check_specs(const char *topo)
{
	expect_spec_error("activations=node:7", topo, NULL, "no NUMA node 7");
	expect_spec_error("activations=node:x", topo, NULL, "expected node:N");
	expect_spec_error("activations=tape", topo, NULL, "unknown host tier 'tape'");
	expect_spec_error("weights=dram", topo, NULL, "unknown kind 'weights'");
	expect_spec_error("activations=dram,activations=cxl", topo, NULL, "activations given twice");
	expect_spec_error("activations", topo, NULL, "expected KIND=TIER");
	expect_spec_error("activations=nvme", topo, NULL, "needs --nvme-dir");
	expect_spec_error("grads=nvme", topo, dir, "the NVMe tier holds offloaded activations, and");
	expect_spec_error("activations=interleave:1*0+2", topo, NULL, "weights are 1 to 255");
	expect_spec_error("activations=interleave:1+1", topo, NULL, "node 1 twice");
	expect_spec_error("activations=dram", topo, "/nonexistent/nvme", "/nonexistent/nvme");
	{
		/* this machine: cxl only where it has CPU-less nodes */
		struct ferry_topology t;
		bool cxl = false;

		CHECK(ferry_topology_discover(NULL, &t) == FERRY_OK, "discover");
		for (int i = 0; i < t.n; i++)
			cxl |= t.node[i].cpus == 0 && t.node[i].capacity > 0;
		if (!cxl)
			expect_spec_error("activations=cxl", NULL, NULL, "no CPU-less NUMA node");
	}
}

/* Host bytes by tensor kind: activations, master weights, moments, grads. */
static void kinds(size_t out[FERRY_HOST_KINDS], size_t act, size_t weights, size_t opt, size_t grads)
{
	memset(out, 0, sizeof(size_t) * FERRY_HOST_KINDS);
	out[FERRY_HOST_ACTIVATIONS] = act;
	out[FERRY_HOST_PARAMS] = weights;
	out[FERRY_HOST_OPTIMIZER] = opt;
	out[FERRY_HOST_GRADS] = grads;
}

static enum ferry_tier_type placed(const struct ferry_tier_report *r, enum ferry_host_kind k)
{
	return r->tier_of[k] < 0 ? FERRY_TIER_AUTO : r->use[r->tier_of[k]].tier.type;
}

static void check_default(const char *topo)
{
	size_t b[FERRY_HOST_KINDS];
	struct ferry_tier_report r;
	ferry_host_tiers_t h;
	const uint64_t M = 1 << 20;
	char small[600];

	snprintf(small, sizeof(small), "%s/small_nvme.txt", dir);
	/* streamed optimizer: everything streamed goes to CXL, both cards */
	h = make(NULL, topo, NULL, STREAM);
	kinds(b, 300 * M, 100 * M, 200 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK, "place: %s", ferry_last_error());
	CHECK(r.n == 1 && placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_CXL && r.use[0].tier.n == 2 &&
		      r.use[0].total == 600 * M && r.tier_of[FERRY_HOST_GRADS] == -1,
	      "stream: all on cxl over nodes 1 and 2");
	CHECK(r.use[0].capacity == 2ull << 30, "cxl holds 2 x 1 GiB (%llu)", (unsigned long long)r.use[0].capacity);
	ferry_host_tiers_free(h);

	/* CPU optimizer: what it computes on stays in DRAM */
	h = make(NULL, topo, NULL, HOST_CPU);
	kinds(b, 300 * M, 100 * M, 200 * M, 100 * M);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK, "place: %s", ferry_last_error());
	CHECK(placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_CXL && placed(&r, FERRY_HOST_PARAMS) == FERRY_TIER_DRAM &&
		      placed(&r, FERRY_HOST_OPTIMIZER) == FERRY_TIER_DRAM && placed(&r, FERRY_HOST_GRADS) == FERRY_TIER_DRAM,
	      "cpu: activations on cxl, params/grads/optimizer on dram");
	ferry_host_tiers_free(h);

	/* CXL too small for the activations: DRAM takes them; DRAM full too: NVMe */
	h = make(NULL, topo, dir, HOST_CPU);
	kinds(b, 2500 * M, 0, 0, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK && placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_DRAM,
	      "2.5 GiB of activations overflow CXL into DRAM: %s", ferry_last_error());
	kinds(b, 2500 * M, 1000 * M, 2000 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK && placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_NVME &&
		      placed(&r, FERRY_HOST_OPTIMIZER) == FERRY_TIER_DRAM,
	      "DRAM taken by the optimizer: activations to NVMe: %s", ferry_last_error());
	ferry_host_tiers_free(h);

	/* streamed AdamW state may overflow to NVMe too; with the CPU AdamW it may not */
	h = make(NULL, topo, dir, STREAM);
	kinds(b, 1500 * M, 400 * M, 4000 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK && placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_CXL &&
		      placed(&r, FERRY_HOST_PARAMS) == FERRY_TIER_CXL && placed(&r, FERRY_HOST_OPTIMIZER) == FERRY_TIER_NVME,
	      "stream: 1.9 GiB on CXL, 4 GiB of moments past DRAM's 3 to NVMe: %s", ferry_last_error());
	ferry_host_tiers_free(h);
	write_file(small, "node 0 cpus 4 mem 4G free 3G\nnode 1 cpus 0 mem 1G\nnode 2 cpus 0 mem 1G\nnvme free 3G\n");
	h = make(NULL, small, dir, STREAM);
	kinds(b, 1500 * M, 400 * M, 4000 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "optimizer need 3.91 GiB") != NULL,
	      "with 'nvme free 3G' the 4 GiB of moments fit nowhere: %s", ferry_last_error());
	ferry_host_tiers_free(h);
	h = make(NULL, topo, dir, HOST_CPU);
	kinds(b, 0, 1000 * M, 5000 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_ERR_INVALID, "cpu: the optimizer never goes to NVMe");
	ferry_host_tiers_free(h);

	h = make(NULL, topo, NULL, HOST_CPU);
	kinds(b, 2500 * M, 1000 * M, 2000 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_ERR_INVALID, "nothing holds it without NVMe");
	CHECK(strstr(ferry_last_error(), "activations need 2.44 GiB") != NULL, "says what: %s", ferry_last_error());
	ferry_host_tiers_free(h);
}

static void check_explicit(const char *topo)
{
	size_t b[FERRY_HOST_KINDS];
	struct ferry_tier_report r;
	ferry_host_tiers_t h;
	const uint64_t M = 1 << 20;

	/* 3:1 over two 1 GiB nodes: node 1 takes 3/4, so the tier holds 4/3 GiB */
	h = make("activations=interleave:1*3+2,optimizer=node:2", topo, NULL, STREAM);
	kinds(b, 1200 * M, 0, 100 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_OK, "place: %s", ferry_last_error());
	CHECK(r.n == 2 && placed(&r, FERRY_HOST_ACTIVATIONS) == FERRY_TIER_INTERLEAVE &&
		      r.use[r.tier_of[0]].capacity == (1ull << 30) / 3 * 4,
	      "interleave 3:1 capacity 4/3 GiB (%llu)", (unsigned long long)r.use[r.tier_of[0]].capacity);
	kinds(b, 1400 * M, 0, 100 * M, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_ERR_INVALID, "1.4 GiB does not fit 3:1 on 1 GiB nodes");
	CHECK(strstr(ferry_last_error(), "would fit: dram") != NULL && strstr(ferry_last_error(), "cxl") != NULL,
	      "names the tiers that would: %s", ferry_last_error());
	ferry_host_tiers_free(h);

	/* two kinds sharing a node share its capacity */
	h = make("activations=node:1,params=node:1", topo, NULL, STREAM);
	kinds(b, 600 * M, 600 * M, 0, 0);
	CHECK(h && ferry_host_tiers_place(h, b, &r) == FERRY_ERR_INVALID, "2 x 600 MiB on a 1 GiB node");
	CHECK(strstr(ferry_last_error(), "too small") != NULL, "%s", ferry_last_error());
	ferry_host_tiers_free(h);
}

/* Allocations on this machine's node 0: the pages are there. */
static void check_binding(void)
{
	static const char *const specs[] = { "all=dram", "all=node:0", "all=interleave:0*2" };
	size_t b[FERRY_HOST_KINDS], page = (size_t)sysconf(_SC_PAGESIZE);

	for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
		ferry_host_tiers_t h = make(specs[s], NULL, NULL, STREAM);
		int nodes[64];
		char *p = NULL;

		kinds(b, 64 * page, 0, 0, 0);
		if (!h || ferry_host_tiers_place(h, b, NULL) != FERRY_OK)
			continue;
		CHECK(ferry_host_tiers_alloc(h, NULL, FERRY_HOST_ACTIVATIONS, 64 * page - 5, (void **)&p) == FERRY_OK,
		      "%s alloc: %s", specs[s], ferry_last_error());
		if (!p)
			continue;
		CHECK(ferry_host_tiers_owns(h, p) && ((uintptr_t)p % page) == 0, "owned, page-aligned");
		{
			size_t nonzero = 0;

			for (size_t i = 0; i < 64 * page - 5; i++)
				nonzero += p[i] != 0;
			CHECK(nonzero == 0, "%s: zeroed (%zu bytes not)", specs[s], nonzero);
		}
		memset(p, 0x5a, 64 * page - 5);
		CHECK(ferry_tier_page_nodes(p, 64, page, nodes) == FERRY_OK, "move_pages: %s", ferry_last_error());
		for (int i = 0; i < 64; i++)
			CHECK(nodes[i] == 0, "%s: page %d on node %d, not 0", specs[s], i, nodes[i]);
		ferry_host_tiers_release(h, p);
		CHECK(!ferry_host_tiers_owns(h, p), "released");
		ferry_host_tiers_free(h);
	}
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	char topo[600];

	snprintf(dir, sizeof(dir), "%s/host_tiers_test", tmp ? tmp : "/tmp");
	mkdir(dir, 0700);
	snprintf(topo, sizeof(topo), "%s/topology.txt", dir);
	write_file(topo, "# DRAM and two CXL cards\nnode 0 cpus 4 mem 4G free 3G\nnode 1 cpus 0 mem 1G\n"
			 "node 2 cpus 0 mem 1G  # a second card\nnvme free 64G  # not this disk's room: the same on any\n");
	check_discovery();
	check_load(topo);
	check_specs(topo);
	check_default(topo);
	check_explicit(topo);
	check_binding();
	return test_exit_code();
}
