/*
 * Internal: what the tensor table's build (tensor_table.c), its rules for
 * parameters and optimizer state (table_params.c) and its allocation
 * (table_alloc.c) share.
 */
#ifndef FERRY_PLAN_TABLE_BUILD_H
#define FERRY_PLAN_TABLE_BUILD_H

#include "plan/tensor_table.h"

#define FERRY_TABLE_HOST_ALIGN 4096 /* pinned buffers are carved at page boundaries */
#define FERRY_TABLE_ARENA_ALIGN 256 /* the arena's: each edge entry starts where a buffer would */

/* A buffer, an entry carved from buffer buf at its end, and an entry in a
 * buffer of its own; each returns its index, or -1 (a table full or out
 * of memory). */
int ferry_table_add_buffer(struct ferry_tensor_table *tt, const char *name, enum ferry_site site,
			   enum ferry_buffer_kind mem, enum ferry_tensor_kind kind);
int ferry_table_add_entry(struct ferry_tensor_table *tt, int buf, const char *name, enum ferry_tensor_kind kind,
			  int layer, enum ferry_dtype dtype, size_t bytes, enum ferry_placement act);
int ferry_table_add_single(struct ferry_tensor_table *tt, const char *name, enum ferry_site site,
			   enum ferry_buffer_kind mem, enum ferry_tensor_kind kind, enum ferry_dtype dtype,
			   size_t bytes, enum ferry_placement act);
/* Every parameter, gradient, compute copy and optimizer entry, with the
 * rings, shards and copies for rollback that the placements imply; -1 on
 * failure. */
int ferry_table_add_params(struct ferry_tensor_table *tt);

/* n rounded up to FERRY_TABLE_ARENA_ALIGN (where the arena would start a
 * buffer). */
size_t ferry_table_arena_aligned(size_t n);
/* n rounded up to FERRY_TABLE_HOST_ALIGN; the host buffers' bytes by the
 * kind of host state they count as. */
size_t ferry_table_host_aligned(size_t n);
void ferry_table_host_bytes_by_kind(const struct ferry_tensor_table *tt, size_t out[FERRY_HOST_KINDS]);

#endif
