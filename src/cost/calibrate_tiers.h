/* Internal: the parts of ferry_calibrate (auto/calibrate.c) that measure the
 * host tiers (calibrate_tiers.c). */
#ifndef FERRY_COST_CALIBRATE_TIERS_H
#define FERRY_COST_CALIBRATE_TIERS_H

#include "ferry/cost.h"
#include "cost/calibration.h"

/* Transfer sizes a calibration measures at most. */
#define FERRY_CALIB_MAX_SIZES 16

/* Adds size b to the n distinct sizes in sizes (room for max) unless it is
 * 0, already there, or there is no room; returns the new count. */
static inline int ferry_calib_add_size(size_t *sizes, int n, int max, size_t b)
{
	bool seen = b == 0;

	for (int k = 0; k < n; k++)
		seen |= sizes[k] == b;
	if (!seen && n < max)
		sizes[n++] = b;
	return n;
}

/* Floats the CPU AdamW is timed over for cfg: as many as its parameters,
 * 1 to 16 million (its state as large as a step's, out of the caches). */
long ferry_calib_adamw_floats(const struct ferry_model_config *cfg);
/* The fastest of `repeats` CPU AdamW steps, after a warm-up one, over n
 * parameters whose weights, moments and gradients are buf's 4 n floats. */
ferry_status ferry_calib_time_adamw(float *buf, long n, int repeats, double *best) FERRY_MUST_CHECK;

/* The tiers of h: each CPU-less node of its topology (not of a simulated
 * one: nothing is bound there), and the NVMe tier when h has --nvme-dir;
 * copies at the transfer sizes, the CPU AdamW over adamw_n floats.  An
 * NVMe measurement that fails on I/O (a full directory) leaves c's NVMe
 * figures as they were and says why in c->nvme_error. */
ferry_status ferry_calib_measure_tiers(ferry_backend_t be, ferry_host_tiers_t h, const size_t *sizes, int n,
				       long adamw_n, int repeats, struct ferry_calibration *c) FERRY_MUST_CHECK;
/* Each CPU-less node of h's topology with room for the measurement,
 * against DRAM (the nodes with CPUs), into c->cxl[] and the tier-wide
 * factors (the slowest node's); a simulated topology is measured too, on
 * unbound memory (tests). */
ferry_status ferry_calib_measure_cxl(ferry_backend_t be, ferry_host_tiers_t h, const size_t *sizes, int n,
				     long adamw_n, int repeats, struct ferry_calibration *c) FERRY_MUST_CHECK;
/* The NVMe tier's write and read rates in dir, through its file I/O, into
 * c (and the directory and I/O mode measured). */
ferry_status ferry_calib_measure_nvme(const char *dir, const size_t *sizes, int n, int repeats,
				      struct ferry_calibration *c) FERRY_MUST_CHECK;

#endif
