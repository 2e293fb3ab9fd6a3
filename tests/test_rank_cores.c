/* Each rank's own cores (src/train/rank_cores.c): how a shared CPU mask is
 * split in node order, the cpulists printed, the node of each CPU read
 * from a sysfs-like folder, and binding every thread of the process (one
 * started before the bind too).  The expected parts are written out by
 * hand from the node layouts below, and a mask's bits (core/cpu_mask.h)
 * from its documented layout.  The same across real ranks:
 * tests/cli/rank_cores.sh. */
#include "core/cpu_mask.h"
#include "ferry/comm.h"
#include "ferry/platform.h"
#include "ferry/tier.h"
#include "ferry/train.h"
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void mask_of(const int *cpus, int n, uint64_t *mask)
{
	memset(mask, 0, FERRY_CPU_WORDS * sizeof(uint64_t));
	for (int i = 0; i < n; i++)
		mask[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
}

static const char *part_list(const uint64_t *mask, const int *nodes, int k, int j, int *n)
{
	static char buf[96];
	uint64_t part[FERRY_CPU_WORDS];

	*n = ferry_rank_cores_part(mask, nodes, k, j, part);
	ferry_cpulist_format(part, buf, sizeof(buf));
	return buf;
}

/* 16 CPUs, even ones on node 0 and odd ones on node 1 (as some
 * two-socket machines number them): 4 ranks take node 0's halves, then
 * node 1's. */
static void test_interleaved_nodes(void)
{
	static int nodes[FERRY_MAX_CPUS];
	const char *want[4] = { "0,2,4,6", "8,10,12,14", "1,3,5,7", "9,11,13,15" };
	int all[16], n;
	uint64_t mask[FERRY_CPU_WORDS];

	for (int c = 0; c < 16; c++) {
		all[c] = c;
		nodes[c] = c % 2;
	}
	mask_of(all, 16, mask);
	for (int j = 0; j < 4; j++) {
		const char *got = part_list(mask, nodes, 4, j, &n);

		CHECK(n == 4 && !strcmp(got, want[j]), "part %d of 4: %s (%d CPUs), want %s", j, got, n, want[j]);
	}
	/* 2 ranks: a node each */
	CHECK(!strcmp(part_list(mask, nodes, 2, 1, &n), "1,3,5,7,9,11,13,15") && n == 8, "part 1 of 2: %s",
	      part_list(mask, nodes, 2, 1, &n));
}

/* Uneven: 8 CPUs of one node in 3 parts of 2, 3, 3; CPUs of no known
 * node go last; fewer CPUs than ranks, or j out of range, give nothing. */
static void test_uneven_and_unknown(void)
{
	static int nodes[FERRY_MAX_CPUS];
	const char *want[3] = { "0-1", "2-4", "5-7" };
	int eight[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, four[4] = { 0, 1, 2, 3 }, n;
	uint64_t mask[FERRY_CPU_WORDS];

	mask_of(eight, 8, mask);
	for (int j = 0; j < 3; j++)
		CHECK(!strcmp(part_list(mask, nodes, 3, j, &n), want[j]), "part %d of 3: %s, want %s", j,
		      part_list(mask, nodes, 3, j, &n), want[j]);
	/* CPU 0 of no node, 1 and 3 on node 1, 2 on node 0: order 2, 1, 3, 0 */
	nodes[0] = -1;
	nodes[1] = nodes[3] = 1;
	nodes[2] = 0;
	mask_of(four, 4, mask);
	CHECK(!strcmp(part_list(mask, nodes, 2, 0, &n), "1-2"), "part 0 of 2: %s, want 1-2",
	      part_list(mask, nodes, 2, 0, &n));
	CHECK(!strcmp(part_list(mask, nodes, 2, 1, &n), "0,3"), "part 1 of 2: %s, want 0,3",
	      part_list(mask, nodes, 2, 1, &n));
	part_list(mask, nodes, 5, 0, &n);
	CHECK(n == 0, "5 parts of 4 CPUs: %d CPUs in part 0, want 0", n);
	part_list(mask, nodes, 2, 2, &n);
	CHECK(n == 0, "part 2 of 2: %d CPUs, want 0", n);
}

static void test_format(void)
{
	int cpus[] = { 0, 1, 2, 3, 8, 10, 11, 70 };
	uint64_t mask[FERRY_CPU_WORDS];
	char buf[96];

	mask_of(cpus, 8, mask);
	ferry_cpulist_format(mask, buf, sizeof(buf));
	CHECK(!strcmp(buf, "0-3,8,10-11,70"), "cpulist %s", buf);
	mask_of(cpus, 0, mask);
	ferry_cpulist_format(mask, buf, sizeof(buf));
	CHECK(!strcmp(buf, ""), "empty cpulist '%s'", buf);
}

/* bit c of word c / 64 is CPU c (ferry/platform.h), the words by hand */
static void test_mask_bits(void)
{
	const int cpus[] = { 0, 63, 64, 70, 1023 }, absent[] = { 1, 62, 65, 128, 1022 };
	uint64_t mask[FERRY_CPU_WORDS] = { 0 };

	for (int i = 0; i < 5; i++)
		ferry_cpu_mask_add(mask, cpus[i]);
	CHECK(mask[0] == (1ull | 1ull << 63) && mask[1] == (1ull | 1ull << 6) && mask[15] == 1ull << 63,
	      "words %#llx %#llx %#llx", (unsigned long long)mask[0], (unsigned long long)mask[1],
	      (unsigned long long)mask[15]);
	for (int w = 2; w < 15; w++)
		CHECK(mask[w] == 0, "word %d: %#llx", w, (unsigned long long)mask[w]);
	for (int i = 0; i < 5; i++)
		CHECK(ferry_cpu_mask_has(mask, cpus[i]) && !ferry_cpu_mask_has(mask, absent[i]), "CPU %d in, %d not",
		      cpus[i], absent[i]);
}

static void put(const char *dir, const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	f = fopen(path, "w");
	CHECK(f && fputs(text, f) >= 0, "write %s", path);
	if (f)
		fclose(f);
}

/* A sysfs-like folder: node0 with CPUs 0-1,4; node1 with 2-3,5-7. */
static void test_cpu_nodes(void)
{
	char dir[] = "/tmp/ferry-rank-cores-XXXXXX", sub[600];
	const int want[9] = { 0, 0, 1, 1, 0, 1, 1, 1, -1 };
	int got[9];
	struct ferry_topology t;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	for (int i = 0; i < 2; i++) {
		snprintf(sub, sizeof(sub), "%s/node%d", dir, i);
		mkdir(sub, 0755);
		put(dir, i ? "node1/cpulist" : "node0/cpulist", i ? "2-3,5-7\n" : "0-1,4\n");
		put(dir, i ? "node1/meminfo" : "node0/meminfo",
		    "Node 0 MemTotal: 1048576 kB\nNode 0 MemFree: 524288 kB\n");
	}
	CHECK(ferry_topology_discover(dir, &t) == FERRY_OK && t.n == 2, "discover: %s", ferry_last_error());
	CHECK(ferry_topology_cpu_nodes(&t, got, 9) == FERRY_OK, "cpu nodes: %s", ferry_last_error());
	for (int c = 0; c < 9; c++)
		CHECK(got[c] == want[c], "CPU %d on node %d, want %d", c, got[c], want[c]);
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	CHECK(system(sub) == 0, "rm");
}

static pthread_barrier_t started, bound;

/* A thread that exists before the bind: its mask after it. */
static void *early_thread(void *arg)
{
	uint64_t *seen = arg;

	pthread_barrier_wait(&started);
	pthread_barrier_wait(&bound);
	ferry_cpu_mask(seen);
	return NULL;
}

static void *late_thread(void *arg)
{
	ferry_cpu_mask(arg);
	return NULL;
}

/* Binding to the last CPU of this process's mask reaches a thread started
 * before and one started after; then the mask is restored. */
static void test_bind_process(void)
{
	uint64_t before[FERRY_CPU_WORDS], one[FERRY_CPU_WORDS], early[FERRY_CPU_WORDS], late[FERRY_CPU_WORDS];
	int n = ferry_cpu_mask(before), last = -1;
	pthread_t a, b;

	for (int c = 0; c < FERRY_MAX_CPUS; c++)
		if (before[c / 64] >> (c % 64) & 1)
			last = c;
	CHECK(n >= 1 && last >= 0, "this process's mask: %d CPUs", n);
	mask_of(&last, 1, one);
	pthread_barrier_init(&started, NULL, 2);
	pthread_barrier_init(&bound, NULL, 2);
	pthread_create(&a, NULL, early_thread, early);
	pthread_barrier_wait(&started);
	CHECK(ferry_cpu_bind_process(one) == FERRY_OK, "bind: %s", ferry_last_error());
	pthread_barrier_wait(&bound);
	pthread_join(a, NULL);
	pthread_create(&b, NULL, late_thread, late);
	pthread_join(b, NULL);
	CHECK(!memcmp(early, one, sizeof(one)), "a thread started before the bind is not on CPU %d", last);
	CHECK(!memcmp(late, one, sizeof(one)), "a thread started after the bind is not on CPU %d", last);
	mask_of(&last, 0, one);
	CHECK(ferry_cpu_bind_process(one) == FERRY_ERR_INVALID, "binding to no CPU is refused");
	CHECK(ferry_cpu_bind_process(before) == FERRY_OK, "restore: %s", ferry_last_error());
}

/* One process: its own mask, nothing bound. */
static void test_single_rank(void)
{
	uint64_t mask[FERRY_CPU_WORDS];
	struct ferry_rank_cores k;
	ferry_comm_t c = NULL;
	int n = ferry_cpu_mask(mask);

	CHECK(ferry_comm_open_single(&c) == FERRY_OK, "single comm: %s", ferry_last_error());
	if (!c)
		return;
	CHECK(ferry_rank_cores_bind(c, &k) == FERRY_OK, "bind: %s", ferry_last_error());
	CHECK(k.sharing == 1 && !k.bound && k.cpus == n && k.threads == n, "one rank: sharing %d, bound %d, %d CPUs, "
	      "%d threads (mask %d)", k.sharing, k.bound, k.cpus, k.threads, n);
	ferry_comm_free(c);
}

int main(void)
{
	test_interleaved_nodes();
	test_uneven_and_unknown();
	test_format();
	test_mask_bits();
	test_cpu_nodes();
	test_bind_process();
	test_single_rank();
	return test_exit_code();
}
