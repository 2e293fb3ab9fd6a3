/*
 * Internal: a CPU mask's bits (ferry/platform.h: bit c of word c / 64 is
 * CPU c, for CPUs below FERRY_MAX_CPUS).
 */
#ifndef FERRY_CORE_CPU_MASK_H
#define FERRY_CORE_CPU_MASK_H

#include <stdbool.h>
#include <stdint.h>

static inline bool ferry_cpu_mask_has(const uint64_t *mask, int c)
{
	return mask[c / 64] >> (c % 64) & 1;
}

static inline void ferry_cpu_mask_add(uint64_t *mask, int c)
{
	mask[c / 64] |= 1ull << (c % 64);
}

#endif
