/* The CLI's side of calibration: the cache of the machine a backend runs
 * on, and its figures in words (ferry calibrate, ferry info, ferry bench). */
#ifndef FERRY_TOOLS_CALIB_CACHE_H
#define FERRY_TOOLS_CALIB_CACHE_H
#include <stdbool.h>
#include <stdio.h>
#include "ferry/cost.h"
#include "ferry/train.h"

/* Loads the cache of be's machine into *out; on failure returns the status
 * and leaves ferry_last_error() saying why (none, stale, foreign). */
ferry_status calib_cache_load(ferry_backend_t be, ferry_calibration_t *out, char *path, size_t path_n);
/* Every calibration in the cache directory (other thread counts, other
 * backends), or why one cannot be used. */
void calib_print_all(FILE *f);
/* Above this op spread, or this share of the CPUs' time taken by other
 * processes, a calibration was made on a busy machine. */
#define CALIB_BUSY_SPREAD 0.25
#define CALIB_BUSY_OTHERS 0.25
/* Whether c was made on a busy machine; why, in words, into why[n]
 * ("calls of one op varied by 40%, other processes took 62% of the CPUs"). */
bool calib_busy(ferry_calibration_t c, char *why, size_t n);
/* The figures, one per line, indented by `indent`. */
void calib_print(FILE *f, ferry_calibration_t c, const char *indent);

/* Where a calibration run says what it does: each line to f, after
 * prefix ("" for ferry calibrate, "ferry train: " where the line joins a
 * command's other messages on stderr). */
struct calib_log {
	FILE *f;
	const char *prefix;
};
/* Calibrates be's machine as ferry calibrate does, at cfg and o's batch
 * under o->exec (its policy: the traced steps'), `repeats` traced steps:
 * holding the cache's lock from reading the cache to writing it (waiting,
 * and saying so, while another calibration holds it), building on what
 * the cache holds (else saying why it starts anew), each part's progress
 * as it starts; saved to the cache, whose path goes to path[path_n].
 * On several ranks (o->comm; every rank calls it) each rank measures, the
 * collectives too, rank 0 alone holds the lock, reports and saves, and
 * every rank gets rank 0's calibration.
 * *out: the new calibration.  0, or 1 after printing the error. */
int calib_cache_calibrate(const char *cmd, ferry_backend_t be, const struct ferry_model_config *cfg,
			  const struct ferry_train_opts *o, int repeats, const struct calib_log *log,
			  char *path, size_t path_n, ferry_calibration_t *out);
#endif
