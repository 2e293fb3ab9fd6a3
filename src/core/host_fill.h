/*
 * Internal: zeroing, copying and hashing large host arrays on every
 * OpenMP thread.
 * One thread page-faults and writes about 2 to 4 GB/s, so the tens of
 * gigabytes of an 8B model's host state took a minute before step 1.
 */
#ifndef FERRY_CORE_HOST_FILL_H
#define FERRY_CORE_HOST_FILL_H

#include <stddef.h>
#include <stdint.h>

/* memset(p, 0, n), the same bytes, split over the threads when n is large */
void ferry_host_zero(void *p, size_t n);
/* memcpy(dst, src, n) for arrays that do not overlap, split likewise */
void ferry_host_copy(void *dst, const void *src, size_t n);
/* A 64-bit hash of p's n bytes, continuing from h: FNV-1a over 32-bit
 * words in pieces of 4 MiB on every thread, the pieces' hashes chained in
 * order; the same for the same bytes whatever the thread count, and any
 * one word changed changes it.  (A serial FNV of an 8B model's 32 GB of
 * parameters takes seconds.) */
uint64_t ferry_host_hash(uint64_t h, const void *p, size_t n);

#endif
