/* A calibration run into this machine's cache, as ferry calibrate makes
 * one and --policy auto makes one where the cache lacks it. */
#include "calib_cache.h"
#include "cli_args.h"

#include <stdio.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct progress {
	const struct calib_log *log;
	double t0;
};

/* Each part as it starts, with the time so far: a model of billions of
 * parameters takes minutes. */
static void progress(void *ctx, const char *what, int part, int parts)
{
	const struct progress *p = ctx;

	fprintf(p->log->f, "%smeasuring %d/%d (%.1f s): %s\n", p->log->prefix, part, parts, now_s() - p->t0, what);
	fflush(p->log->f);
}

/* The cache's lock, held from reading it to writing it: a calibration
 * running beside this one finishes first, and this one keeps its shapes. */
static int lock_cache(const char *cmd, ferry_backend_t be, const struct calib_log *log, char *path, size_t n,
		      int *fd)
{
	char fp[512];

	if (ferry_machine_fingerprint(be, fp, sizeof(fp)) != FERRY_OK ||
	    ferry_calibration_cache_path(fp, path, n) != FERRY_OK || ferry_calibration_lock(path, false, fd) != FERRY_OK)
		return ferry_cli_fail(cmd);
	if (*fd < 0) {
		fprintf(log->f, "%swaiting for another ferry calibrate of this machine to finish (%s.lock)\n",
			log->prefix, path);
		fflush(log->f);
		if (ferry_calibration_lock(path, true, fd) != FERRY_OK)
			return ferry_cli_fail(cmd);
	}
	return 0;
}

int calib_cache_calibrate(const char *cmd, ferry_backend_t be, const struct ferry_model_config *cfg,
			  const struct ferry_train_opts *o, int repeats, const struct calib_log *log,
			  char *path, size_t path_n, ferry_calibration_t *out)
{
	ferry_calibration_t old = NULL;
	struct progress p = { log, now_s() };
	int lock = -1, rc;

	*out = NULL;
	if (lock_cache(cmd, be, log, path, path_n, &lock))
		return 1;
	/* a cache that is there but refused is replaced: say why */
	if (calib_cache_load(be, &old, path, path_n) == FERRY_ERR_FORMAT)
		fprintf(log->f, "%sstarting a new calibration: %s\n", log->prefix, ferry_last_error());
	rc = ferry_calibrate_progress(be, cfg, o->B, o->T, &o->exec, repeats, old, progress, &p, out) != FERRY_OK ||
	     ferry_calibration_save(*out, path) != FERRY_OK;
	if (rc) {
		ferry_cli_fail(cmd);
		ferry_calibration_free(*out);
		*out = NULL;
	}
	ferry_calibration_unlock(lock);
	ferry_calibration_free(old);
	return rc;
}
