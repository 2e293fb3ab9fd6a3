/* --policy auto's calibration: the cache's when it has the model's op
 * shapes, else measured now as `ferry calibrate --quick` would (a new
 * machine needs no step by hand first); a warning when it was taken on a
 * busy machine, whose predictions are too slow (one predicted 1,046 s a
 * step that took 101 s once recalibrated). */
#include "auto_policy.h"
#include "calib_cache.h"

#include <string.h>

/* The model's ops that c has no measurement of at their shapes, as the
 * calibration's traced steps would run them (on the backend's own memory). */
static int missing_ops(const struct ferry_train_opts *o, const struct ferry_model_config *cfg,
		       ferry_calibration_t c, const char *policy)
{
	struct ferry_exec_opts e = o->exec;
	struct ferry_prediction p;

	e.policy = policy;
	e.host_tiers = NULL; /* (the NVMe tier's default rates count as estimated too) */
	if (ferry_model_predict(cfg, o->B, o->T, &e, c, &p) != FERRY_OK)
		return 0; /* the search says why */
	return p.estimated_ops;
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
	int missing = 0, rc;

	if (st == FERRY_ERR_IO && path[0])
		snprintf(why, sizeof(why), "no calibration of this machine yet (%s)", path);
	else if (st) /* calib_cache_calibrate says why */
		snprintf(why, sizeof(why), "this machine's calibration cannot be used");
	else if ((missing = missing_ops(o, cfg, *c, POLICY)) > 0)
		snprintf(why, sizeof(why), "this machine's calibration (%s) has not measured %d of a step's ops at "
			 "their shapes", path, missing);
	else {
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
