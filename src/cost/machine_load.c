/*
 * How busy other processes kept the machine while a calibration ran: the
 * CPUs' busy time from /proc/stat less this process's own (getrusage, all
 * its threads).  A calibration's op times include what others take from
 * it; the spread of its calls shows that only when the load comes and
 * goes, this also when it is steady.
 */
#include "cost/calibration.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

void ferry_cpu_sample_take(struct ferry_cpu_sample *s)
{
	unsigned long long v[8] = { 0 };
	struct rusage ru;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "r");

	s->ok = f && hz > 0 &&
		fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		       &v[6], &v[7]) == 8 &&
		getrusage(RUSAGE_SELF, &ru) == 0;
	if (f)
		fclose(f);
	if (!s->ok)
		return;
	/* user, nice, system, irq, softirq, steal are busy; idle, iowait not */
	s->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
	s->total = s->busy + (double)(v[3] + v[4]) / (double)hz;
	s->own = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
		 1e-6 * (double)ru.ru_stime.tv_usec;
}

double ferry_cpu_others_share(const struct ferry_cpu_sample *a, const struct ferry_cpu_sample *b)
{
	double others;

	/* under a second of CPU time the clock ticks say little */
	if (!a->ok || !b->ok || b->total - a->total < 1)
		return 0;
	others = (b->busy - a->busy - (b->own - a->own)) / (b->total - a->total);
	return others < 0 ? 0 : others > 1 ? 1 : others;
}
