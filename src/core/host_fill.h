/*
 * Internal: zeroing and copying large host arrays on every OpenMP thread.
 * One thread page-faults and writes about 2 to 4 GB/s, so the tens of
 * gigabytes of an 8B model's host state took a minute before step 1.
 */
#ifndef FERRY_CORE_HOST_FILL_H
#define FERRY_CORE_HOST_FILL_H

#include <stddef.h>

/* memset(p, 0, n), the same bytes, split over the threads when n is large */
void ferry_host_zero(void *p, size_t n);
/* memcpy(dst, src, n) for arrays that do not overlap, split likewise */
void ferry_host_copy(void *dst, const void *src, size_t n);

#endif
