/* A calibration run into this machine's cache, as ferry calibrate makes
 * one and --policy auto makes one where the cache lacks it. */
#include "calib_cache.h"
#include "cli_args.h"
#include "cli_clock.h"

#include "ferry/comm.h"

#include <stdio.h>

struct progress {
	const struct calib_log *log;
	double t0;
};

/* Each part as it starts, with the time so far: a model of billions of
 * parameters takes minutes. */
static void progress(void *ctx, const char *what, int part, int parts)
{
	const struct progress *p = ctx;

	fprintf(p->log->f, "%smeasuring %d/%d (%.1f s): %s\n", p->log->prefix, part, parts, cli_now_s() - p->t0, what);
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

/* On several ranks (o->comm): whether this rank leads (rank 0: the
 * cache's lock, its loading and saving, the progress); every rank
 * measures, the others' figures go unsaved. */
static bool leads(const struct ferry_train_opts *o)
{
	return !o->comm || ferry_comm_rank(o->comm) == 0;
}

/* rc on every rank: the worst of the ranks' (one rank: its own). */
static int agree(const struct ferry_train_opts *o, int rc)
{
	if (!o->comm || ferry_comm_size(o->comm) < 2)
		return rc;
	return ferry_comm_agree(o->comm, rc ? FERRY_ERR_INVALID : FERRY_OK) != FERRY_OK;
}

/* Every rank measures (the collectives over o->comm's ranks as well);
 * rank 0's is saved, then shared, so that every rank holds the same. */
static int measure_all(const char *cmd, ferry_backend_t be, const struct ferry_model_config *cfg,
		       const struct ferry_train_opts *o, int repeats, ferry_calibration_t old, struct progress *p,
		       const char *path, ferry_calibration_t *out)
{
	struct ferry_exec_opts e = o->exec;
	int rc;

	e.comm = o->comm;
	rc = ferry_calibrate_progress(be, cfg, o->B, o->T, &e, repeats, old, leads(o) ? progress : NULL, p, out) !=
		     FERRY_OK ||
	     (leads(o) && ferry_calibration_save(*out, path) != FERRY_OK);
	if (rc)
		ferry_cli_fail(cmd);
	if ((rc = agree(o, rc)) == 0 && o->comm && ferry_calibration_share(o->comm, out) != FERRY_OK)
		rc = ferry_cli_fail(cmd);
	return rc;
}

int calib_cache_calibrate(const char *cmd, ferry_backend_t be, const struct ferry_model_config *cfg,
			  const struct ferry_train_opts *o, int repeats, const struct calib_log *log,
			  char *path, size_t path_n, ferry_calibration_t *out)
{
	ferry_calibration_t old = NULL;
	struct progress p = { log, cli_now_s() };
	int lock = -1, rc;

	*out = NULL;
	if (agree(o, leads(o) && lock_cache(cmd, be, log, path, path_n, &lock)))
		return 1;
	/* a cache that is there but refused is replaced: say why */
	if (leads(o) && calib_cache_load(be, &old, path, path_n) == FERRY_ERR_FORMAT)
		fprintf(log->f, "%sstarting a new calibration: %s\n", log->prefix, ferry_last_error());
	rc = measure_all(cmd, be, cfg, o, repeats, old, &p, path, out);
	if (rc) {
		ferry_calibration_free(*out);
		*out = NULL;
	}
	ferry_calibration_unlock(lock);
	ferry_calibration_free(old);
	return rc;
}
