/*
 * Internal: the library's one clock, CLOCK_MONOTONIC (never set back), for
 * the durations it measures, traces and watches.
 */
#ifndef FERRY_CORE_CLOCK_H
#define FERRY_CORE_CLOCK_H

#include <time.h>

static inline long long ferry_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline double ferry_now_s(void)
{
	return 1e-9 * (double)ferry_now_ns();
}

#endif
