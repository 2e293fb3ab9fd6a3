/* The CLI's clock: seconds on CLOCK_MONOTONIC, for the durations it
 * prints and the gaps it watches (the library's is src/core/clock.h, not
 * public). */
#ifndef FERRY_CLI_CLOCK_H
#define FERRY_CLI_CLOCK_H

#include <time.h>

static inline double cli_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
