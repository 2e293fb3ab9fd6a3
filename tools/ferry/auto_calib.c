/* --policy auto's calibration: the cache's when it has the model's op
 * shapes, else measured now as `ferry calibrate --quick` would (a new
 * machine needs no step by hand first; under mpirun, also when it has not
 * measured the collectives over as many ranks); a warning when it was taken on a
 * busy machine, whose predictions are too slow (one predicted 1,046 s a
 * step that took 101 s once recalibrated). */
#include "auto_flags.h"
#include "calib_cache.h"
#include "cli_args.h"
#include "ferry/comm.h"

#include <string.h>

/* What c has not measured of the model's step, as the calibration's
 * traced steps would run it (on the backend's own memory): ops at their
 * shapes, and on several ranks the collectives over that many. */
static void missing(const struct ferry_train_opts *o, const struct ferry_model_config *cfg, ferry_calibration_t c,
		    const char *policy, struct ferry_prediction *p)
{
	struct ferry_exec_opts e = o->exec;

	e.policy = policy;
	e.host_tiers = NULL; /* (the NVMe tier's default rates count as estimated too) */
	e.comm = o->comm;
	if (ferry_model_predict(cfg, o->B, o->T, &e, c, p) != FERRY_OK)
		memset(p, 0, sizeof(*p)); /* the search says why */
}

/* Why the cache cannot serve (into why; "" when it can), decided alike on
 * every rank (rank 0's reason; any rank's need to calibrate). */
static void why_calibrate(const struct ferry_train_opts *o, const struct ferry_model_config *cfg, ferry_status st,
			  ferry_calibration_t c, const char *path, char *why, size_t n)
{
	static const char *const POLICY = "nothing_saveable";
	struct ferry_prediction p = { 0 };
	int need;

	why[0] = 0;
	if (!st)
		missing(o, cfg, c, POLICY, &p);
	if (st == FERRY_ERR_IO && path[0])
		snprintf(why, n, "no calibration of this machine yet (%s)", path);
	else if (st) /* calib_cache_calibrate says why */
		snprintf(why, n, "this machine's calibration cannot be used");
	else if (p.estimated_ops > 0)
		snprintf(why, n, "this machine's calibration (%s) has not measured %d of a step's ops at their shapes",
			 path, p.estimated_ops);
	else if (p.uncalibrated_comm > 0)
		snprintf(why, n, "this machine's calibration (%s) has not measured the collectives over %d ranks",
			 path, ferry_comm_size(o->comm));
	need = why[0] != 0;
	if (o->comm && ferry_comm_size(o->comm) > 1 &&
	    ferry_comm_all_reduce(o->comm, &need, 1, FERRY_COMM_I32, FERRY_COMM_MAX, NULL) == FERRY_OK && need &&
	    !why[0])
		snprintf(why, n, "another rank's calibration cannot be used");
}

static void warn_busy(const char *cmd, ferry_calibration_t c, const char *path)
{
	char busy[160];

	if (calib_busy(c, busy, sizeof(busy)))
		fprintf(stderr, "ferry %s: warning: this machine's calibration (%s) was taken while it was busy (%s): "
				"its predictions may be too slow; run `ferry calibrate` when the machine is quiet\n",
			cmd, path, busy);
}

int auto_calibration(const char *cmd, ferry_backend_t be, const struct ferry_train_opts *o,
		     const struct ferry_model_config *cfg, ferry_calibration_t *c)
{
	/* what ferry calibrate's traced steps run, unless --policy is given */
	static const char *const POLICY = "nothing_saveable";
	char path[4200] = "", why[600], prefix[64];
	struct ferry_train_opts q = *o;
	ferry_status st = calib_cache_load(be, c, path, sizeof(path));
	int rc;

	why_calibrate(o, cfg, st, *c, path, why, sizeof(why));
	if (!why[0]) {
		/* every rank rank 0's: they choose alike */
		if (o->comm && ferry_calibration_share(o->comm, c) != FERRY_OK)
			return ferry_cli_fail(cmd);
		warn_busy(cmd, *c, path);
		return 0;
	}
	ferry_calibration_free(*c);
	*c = NULL;
	snprintf(prefix, sizeof(prefix), "ferry %s: ", cmd);
	fprintf(stderr, "%s%s: %s; calibrating now, as `ferry calibrate --quick` with this model and "
			"batch would\n", prefix, is_auto_policy(o->exec.policy) ? "--policy auto" : "--prefetch-depth auto",
		why);
	q.exec.policy = POLICY;
	rc = calib_cache_calibrate(cmd, be, cfg, &q, 1, &(struct calib_log){ stderr, prefix }, path, sizeof(path), c);
	if (!rc) {
		fprintf(stderr, "%scalibrated; saved to %s\n", prefix, path);
		warn_busy(cmd, *c, path);
	}
	return rc;
}
