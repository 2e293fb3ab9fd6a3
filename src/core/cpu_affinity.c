/*
 * Which CPUs this process's threads may run on: read from the calling
 * thread's mask, and set for every thread of the process (each task in
 * /proc/self/task: the BLAS and OpenMP pools started before the call keep
 * their own masks otherwise; threads started later inherit their
 * creator's).
 */
#include "ferry/platform.h"
#include "core/cpu_mask.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static void to_set(const uint64_t *mask, cpu_set_t *set)
{
	CPU_ZERO(set);
	for (int c = 0; c < FERRY_MAX_CPUS && c < CPU_SETSIZE; c++)
		if (ferry_cpu_mask_has(mask, c))
			CPU_SET(c, set);
}

int ferry_cpu_mask(uint64_t mask[FERRY_CPU_WORDS])
{
	cpu_set_t set;
	int n = 0;

	memset(mask, 0, FERRY_CPU_WORDS * sizeof(uint64_t));
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 0;
	for (int c = 0; c < FERRY_MAX_CPUS && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set)) {
			ferry_cpu_mask_add(mask, c);
			n++;
		}
	return n;
}

static int cpus_given; /* before the first bind: 0 until then */

int ferry_cpu_count_given(void)
{
	return cpus_given;
}

ferry_status ferry_cpu_bind_process(const uint64_t mask[FERRY_CPU_WORDS])
{
	DIR *dp;
	struct dirent *d;
	cpu_set_t set;
	ferry_status st = FERRY_OK;

	if (!cpus_given) {
		uint64_t before[FERRY_CPU_WORDS];

		cpus_given = ferry_cpu_mask(before);
	}
	to_set(mask, &set);
	if (!CPU_COUNT(&set))
		return ferry_error(FERRY_ERR_INVALID, "binding to no CPU");
	if (sched_setaffinity(0, sizeof(set), &set) != 0) /* this thread first: those it starts inherit it */
		return ferry_error(FERRY_ERR_IO, "sched_setaffinity: %s", strerror(errno));
	dp = opendir("/proc/self/task");
	if (!dp)
		return ferry_error(FERRY_ERR_IO, "/proc/self/task: %s", strerror(errno));
	while (!st && (d = readdir(dp))) {
		long tid = strtol(d->d_name, NULL, 10);

		/* a thread that ended since the listing is not an error */
		if (tid > 0 && sched_setaffinity((pid_t)tid, sizeof(set), &set) != 0 && errno != ESRCH)
			st = ferry_error(FERRY_ERR_IO, "sched_setaffinity of thread %ld: %s", tid, strerror(errno));
	}
	closedir(dp);
	return st;
}
