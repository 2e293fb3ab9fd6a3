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
#include "ferry/platform.h"

#include <stdlib.h>
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

/* Whether the calibration's traced steps (q) fit be: a model this
 * machine cannot hold (an 8B plan on a laptop) is refused here, not inside
 * the calibration.  0, or 1 after printing the error. */
static int calibration_fits(const char *cmd, ferry_backend_t be, const struct ferry_train_opts *q,
			    const struct ferry_model_config *cfg)
{
	struct ferry_plan *plan = calloc(1, sizeof(*plan));
	struct ferry_memory_limit ml;
	size_t cap = ferry_backend_mem_capacity(be), host;
	char need[FERRY_SIZE_CHARS], have[FERRY_SIZE_CHARS];
	int rc = 0;

	if (!plan || ferry_model_plan(cfg, q->B, q->T, &q->exec, plan) != FERRY_OK) {
		free(plan);
		return ferry_cli_fail(cmd);
	}
	ferry_memory_limit(&ml);
	host = plan->mem.host_alloc_bytes;
	if (plan->mem.peak_bytes > cap || (ml.bytes && host > ml.bytes)) {
		bool dev = plan->mem.peak_bytes > cap;

		fprintf(stderr, "ferry %s: --policy auto prices placements with this machine's calibration, whose "
				"traced steps of this model under %s need %s of %s memory, and it has %s: plan for the "
				"machine you will run on with --target (%s, or a calibration file made there)\n",
			cmd, q->exec.policy, ferry_format_size(dev ? plan->mem.peak_bytes : host, need),
			dev ? "the backend's device" : "host", ferry_format_size(dev ? cap : (size_t)ml.bytes, have),
			ferry_target_names());
		rc = 1;
	}
	free(plan);
	return rc;
}

int auto_pricing(const char *cmd, const char *target, const struct ferry_train_opts *o,
		 const struct ferry_model_config *cfg, ferry_calibration_t *c, size_t *capacity, size_t *host_mem)
{
	ferry_backend_t be;
	int rc;

	*c = NULL;
	*host_mem = 0;
	if (target) {
		struct ferry_target t;

		if (ferry_target_load(target, &t, c) != FERRY_OK)
			return ferry_cli_fail(cmd);
		*capacity = o->device_mem ? o->device_mem : t.device_mem;
		*host_mem = t.host_mem;
		return 0;
	}
	/* the arena as the backend makes it: --device-mem caps the run planned,
	   not the calibration's steps */
	if (ferry_backend_open(o->backend, &(struct ferry_backend_opts){ .threads = o->threads }, &be) != FERRY_OK)
		return ferry_cli_fail(cmd);
	*capacity = o->device_mem ? o->device_mem : ferry_backend_mem_capacity(be);
	rc = auto_calibration(cmd, be, o, cfg, c);
	ferry_backend_close(be);
	return rc;
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
	if (calibration_fits(cmd, be, &q, cfg))
		return 1;
	rc = calib_cache_calibrate(cmd, be, cfg, &q, 1, &(struct calib_log){ stderr, prefix }, path, sizeof(path), c);
	if (!rc) {
		fprintf(stderr, "%scalibrated; saved to %s\n", prefix, path);
		warn_busy(cmd, *c, path);
	}
	return rc;
}
