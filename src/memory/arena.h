/*
 * An offset allocator over a range [0, capacity): the bookkeeping of a device
 * arena, independent of what memory backs it (an mmap'd region on the CPU
 * backend, one cudaMalloc on CUDA).  First fit over a sorted free list, with
 * neighbours coalesced on free; counts live bytes and their high-water mark.
 *
 * All bookkeeping memory is taken at init, so allocating and freeing never
 * allocate host memory (and cannot fail for that reason).
 */
#ifndef FERRY_MEMORY_ARENA_H
#define FERRY_MEMORY_ARENA_H

#include <stddef.h>
#include "ferry/ferry.h"

struct ferry_range {
	size_t offset, size;
};

struct ferry_arena {
	size_t capacity, alignment;
	size_t live, peak;
	struct ferry_range *free_list; /* sorted by offset, disjoint */
	int n_free, max_free;
};

ferry_status ferry_arena_init(struct ferry_arena *a, size_t capacity,
			      size_t alignment, int max_fragments)
	FERRY_MUST_CHECK;
void ferry_arena_release(struct ferry_arena *a);

/* On success *offset is aligned; the size accounted is size rounded up to the
 * alignment.  FERRY_ERR_DEVICE_MEM if no free range is large enough. */
ferry_status ferry_arena_alloc(struct ferry_arena *a, size_t size,
			       size_t *offset) FERRY_MUST_CHECK;
/* Returns the range to the free list, coalescing it with its neighbours.
 * A range with live neighbours on both sides needs a free-list entry of its
 * own: when all max_fragments are taken, FERRY_ERR_DEVICE_MEM, and the range
 * stays counted as live (lost until ferry_arena_release; the arena stays
 * consistent and never hands it out).  Not FERRY_MUST_CHECK: a caller that
 * frees in a void function (ferry_buffer_free) has nobody to pass it to. */
ferry_status ferry_arena_free(struct ferry_arena *a, size_t offset, size_t size);

size_t ferry_arena_largest_free(const struct ferry_arena *a);

#endif
