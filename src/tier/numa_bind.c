/* The NUMA system calls, through libnuma where it is there (numaif.h), else
 * the raw system calls (the same kernel interface). */
#include "tier/numa_bind.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef FERRY_HAVE_NUMA
#include <numaif.h>
#else
#include <sys/syscall.h>
#define MPOL_BIND 2
#define MPOL_INTERLEAVE 3
static long mbind(void *p, unsigned long len, int mode, const unsigned long *mask, unsigned long maxnode,
		  unsigned flags)
{
	return syscall(SYS_mbind, p, len, mode, mask, maxnode, flags);
}

static long move_pages(int pid, unsigned long count, void **pages, const int *nodes, int *status, int flags)
{
	return syscall(SYS_move_pages, pid, count, pages, nodes, status, flags);
}
#endif
#ifndef MPOL_WEIGHTED_INTERLEAVE
#define MPOL_WEIGHTED_INTERLEAVE 6
#endif

#define MASK_WORDS 16 /* 1024 nodes */
#define WORD_BITS (8 * sizeof(unsigned long))

ferry_status ferry_tier_mbind(void *p, size_t bytes, enum tier_policy policy, const int *nodes, int n)
{
	unsigned long mask[MASK_WORDS] = { 0 };
	int mode = policy == TIER_POLICY_BIND ? MPOL_BIND : policy == TIER_POLICY_INTERLEAVE ? MPOL_INTERLEAVE
											       : MPOL_WEIGHTED_INTERLEAVE;

	for (int i = 0; i < n; i++) {
		if (nodes[i] < 0 || nodes[i] >= (int)(MASK_WORDS * WORD_BITS))
			return ferry_error(FERRY_ERR_INVALID, "mbind: node %d out of range", nodes[i]);
		mask[nodes[i] / WORD_BITS] |= 1ul << (nodes[i] % WORD_BITS);
	}
	if (mbind(p, bytes, mode, mask, MASK_WORDS * WORD_BITS + 1, 0) != 0) {
		int e = errno;

		return ferry_error(e == EINVAL || e == ENOSYS || e == EPERM ? FERRY_ERR_UNSUPPORTED : FERRY_ERR_NOMEM,
				   "mbind(%s, node %d%s): %s%s",
				   mode == MPOL_BIND ? "bind" : mode == MPOL_INTERLEAVE ? "interleave" : "weighted interleave",
				   nodes[0], n > 1 ? " and others" : "", strerror(e),
				   e == EPERM || e == ENOSYS ? " (a container's seccomp profile allows it with CAP_SYS_NICE; "
							       "--host-tier off uses no tiers)" : "");
	}
	return FERRY_OK;
}

unsigned ferry_tier_kernel_weight(int node)
{
	char path[128];
	unsigned w = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/mempolicy/weighted_interleave/node%d", node);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%u", &w) != 1)
		w = 0;
	fclose(f);
	return w;
}

ferry_status ferry_tier_page_nodes(const void *p, size_t n, size_t page, int *nodes)
{
	void **pages = ferry_malloc(n * sizeof(*pages));

	if (!pages)
		return ferry_error(FERRY_ERR_NOMEM, "move_pages: out of host memory");
	for (size_t i = 0; i < n; i++)
		pages[i] = (char *)p + i * page;
	if (move_pages(0, n, pages, NULL, nodes, 0) != 0) {
		ferry_free(pages);
		return ferry_error(FERRY_ERR_IO, "move_pages: %s", strerror(errno));
	}
	ferry_free(pages);
	return FERRY_OK;
}
