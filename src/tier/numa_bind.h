/* Internal: the NUMA system calls tiers use (mbind, get_mempolicy,
 * move_pages), through libnuma's numaif.h where it is installed. */
#ifndef FERRY_TIER_NUMA_BIND_H
#define FERRY_TIER_NUMA_BIND_H

#include <stddef.h>
#include "ferry/ferry.h"

enum tier_policy {
	TIER_POLICY_BIND,
	TIER_POLICY_INTERLEAVE,
	TIER_POLICY_WEIGHTED_INTERLEAVE, /* Linux 6.9 on */
};

/* Binds the pages of [p, p + bytes) (page-aligned) to nodes under policy. */
ferry_status ferry_tier_mbind(void *p, size_t bytes, enum tier_policy policy, const int *nodes, int n)
	FERRY_MUST_CHECK;
/* The kernel's weighted-interleave weight of node (sysfs); 0 if none. */
unsigned ferry_tier_kernel_weight(int node);
/* The node each of the n pages from p sits on (move_pages in query mode;
 * negative: an errno, e.g. -EFAULT for a page not present). */
ferry_status ferry_tier_page_nodes(const void *p, size_t n, size_t page, int *nodes) FERRY_MUST_CHECK;

#endif
