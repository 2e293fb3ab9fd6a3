/* The CLI's side of calibration: the cache of the machine a backend runs
 * on, and its figures in words (ferry calibrate, ferry info, ferry bench). */
#ifndef FERRY_TOOLS_CALIB_CACHE_H
#define FERRY_TOOLS_CALIB_CACHE_H
#include <stdio.h>
#include "ferry/cost.h"

/* Loads the cache of be's machine into *out; on failure returns the status
 * and leaves ferry_last_error() saying why (none, stale, foreign). */
ferry_status calib_cache_load(ferry_backend_t be, ferry_calibration_t *out, char *path, size_t path_n);
/* Every calibration in the cache directory (other thread counts, other
 * backends), or why one cannot be used. */
void calib_print_all(FILE *f);
/* Above this op spread, a calibration was made on a busy machine. */
#define CALIB_BUSY_SPREAD 0.25
/* The figures, one per line, indented by `indent`. */
void calib_print(FILE *f, ferry_calibration_t c, const char *indent);
#endif
