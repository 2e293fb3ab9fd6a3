/*
 * Each rank's own cores (docs/distributed.md, "Cores and NUMA nodes"): the
 * CPU AdamW, the CPU backend's kernels and BLAS of a rank run on its cores,
 * and the host memory they touch first lands on their node (the kernel's
 * default, local, policy).
 *
 * A launcher that binds ranks apart (mpirun's default at up to two ranks,
 * or --map-by ...:PE=n, srun --cpu-bind) gives each rank a mask of its
 * own: ferry keeps it and runs as many threads.  Ranks of one machine that
 * share one mask (mpirun --bind-to none, or oversubscribed: mpirun binds
 * nothing then) would each run threads on all of it, fighting over every
 * core and each touching memory on every node; ferry splits such a mask:
 * its CPUs in node order, k ranks sharing it take k contiguous parts in
 * rank order, so a part lies within one node where the counts allow.
 * Masks that overlap without being equal (the launcher's own scheme), or
 * fewer CPUs than ranks, are left as they are, each rank running its
 * share of threads.
 */
#include "ferry/train.h"
#include "ferry/comm.h"
#include "ferry/platform.h"
#include "ferry/tier.h"
#include "core/cpu_mask.h"
#include "core/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rank_mask {
	int32_t machine, unused;
	uint64_t bits[FERRY_CPU_WORDS];
};

static int count(const uint64_t *m)
{
	int n = 0;

	for (int w = 0; w < FERRY_CPU_WORDS; w++)
		n += __builtin_popcountll(m[w]);
	return n;
}

static bool overlap(const uint64_t *a, const uint64_t *b)
{
	for (int w = 0; w < FERRY_CPU_WORDS; w++)
		if (a[w] & b[w])
			return true;
	return false;
}

/* CPUs of no known node sort after every node's. */
static long node_key(const int *node_of_cpu, int c)
{
	return node_of_cpu[c] < 0 ? INT_MAX : node_of_cpu[c];
}

int ferry_rank_cores_part(const uint64_t mask[FERRY_CPU_WORDS], const int *node_of_cpu, int k, int j,
			  uint64_t part[FERRY_CPU_WORDS])
{
	int order[FERRY_MAX_CPUS], n = 0, lo, hi;

	memset(part, 0, FERRY_CPU_WORDS * sizeof(uint64_t));
	for (int c = 0; c < FERRY_MAX_CPUS; c++) { /* insertion by (node, number), stable */
		int i = n;

		if (!ferry_cpu_mask_has(mask, c))
			continue;
		for (; i > 0 && node_key(node_of_cpu, order[i - 1]) > node_key(node_of_cpu, c); i--)
			order[i] = order[i - 1];
		order[i] = c;
		n++;
	}
	if (k < 1 || j < 0 || j >= k || n < k)
		return 0;
	lo = (int)((long)j * n / k);
	hi = (int)((long)(j + 1) * n / k);
	for (int i = lo; i < hi; i++)
		ferry_cpu_mask_add(part, order[i]);
	return hi - lo;
}

void ferry_cpulist_format(const uint64_t mask[FERRY_CPU_WORDS], char *buf, size_t n)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int c = 0; c < FERRY_MAX_CPUS && at < n; c++) {
		int e = c;

		if (!ferry_cpu_mask_has(mask, c))
			continue;
		while (e + 1 < FERRY_MAX_CPUS && ferry_cpu_mask_has(mask, e + 1))
			e++;
		at += (size_t)snprintf(buf + at, n - at, e > c ? "%s%d-%d" : "%s%d", at ? "," : "", c, e);
		c = e;
	}
}

/* The node every CPU of mask is on; -1 when they span several or one's is unknown. */
static int one_node(const uint64_t *mask, const int *node_of_cpu)
{
	int node = -2;

	for (int c = 0; c < FERRY_MAX_CPUS; c++)
		if (ferry_cpu_mask_has(mask, c)) {
			if (node_of_cpu[c] < 0 || (node != -2 && node != node_of_cpu[c]))
				return -1;
			node = node_of_cpu[c];
		}
	return node < 0 ? -1 : node;
}

static ferry_status node_map(int *node_of_cpu)
{
	struct ferry_topology t;
	ferry_status st = ferry_topology_discover(NULL, &t);

	return st ? st : ferry_topology_cpu_nodes(&t, node_of_cpu, FERRY_MAX_CPUS);
}

/* The ranks of this one's machine: those with its mask (and its index
 * among them), and those whose masks overlap it (itself included). */
static void peers(const struct rank_mask *all, int size, int me, int *sharing, int *index, int *overlapping)
{
	*sharing = *index = *overlapping = 0;
	for (int r = 0; r < size; r++) {
		if (all[r].machine != all[me].machine || !overlap(all[r].bits, all[me].bits))
			continue;
		++*overlapping;
		if (!memcmp(all[r].bits, all[me].bits, sizeof(all[me].bits))) {
			*index += r < me;
			++*sharing;
		}
	}
}

static ferry_status decide(const struct rank_mask *all, int size, int me, struct ferry_rank_cores *out)
{
	uint64_t part[FERRY_CPU_WORDS];
	int node_of_cpu[FERRY_MAX_CPUS], index, overlapping, cpus = count(all[me].bits);
	ferry_status st = node_map(node_of_cpu);

	peers(all, size, me, &out->sharing, &index, &overlapping);
	out->cpus = cpus;
	out->threads = cpus / overlapping > 1 ? cpus / overlapping : 1;
	memcpy(part, all[me].bits, sizeof(part));
	if (!st && out->sharing > 1 && overlapping == out->sharing && cpus >= out->sharing) {
		out->cpus = out->threads = ferry_rank_cores_part(all[me].bits, node_of_cpu, out->sharing, index, part);
		out->bound = true;
		st = ferry_cpu_bind_process(part);
	}
	out->node = st ? -1 : one_node(part, node_of_cpu);
	ferry_cpulist_format(part, out->list, sizeof(out->list));
	return st;
}

ferry_status ferry_rank_cores_bind(ferry_comm_t comm, struct ferry_rank_cores *out)
{
	int size = ferry_comm_size(comm), me = ferry_comm_rank(comm);
	struct rank_mask mine = { .machine = ferry_comm_machine(comm) }, *all = ferry_calloc((size_t)size, sizeof(*all));
	ferry_status st = all ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "rank cores: out of host memory");

	memset(out, 0, sizeof(*out));
	ferry_cpu_mask(mine.bits);
	/* the ranks agree first, so none waits in a gather another skipped */
	if (!(st = ferry_comm_agree(ferry_comm_host(comm), st)))
		st = ferry_comm_all_gather(ferry_comm_host(comm), &mine, all, sizeof(mine), FERRY_COMM_BYTE, NULL);
	if (!st)
		st = decide(all, size, me, out);
	ferry_free(all);
	return st;
}
