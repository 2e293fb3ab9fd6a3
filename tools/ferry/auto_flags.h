/* --policy auto on the command line (ferry plan, train, bench): the
 * search on this machine's calibration, and its choice in words and JSON. */
#ifndef FERRY_TOOLS_AUTO_FLAGS_H
#define FERRY_TOOLS_AUTO_FLAGS_H
#include <stdbool.h>
#include <stdio.h>
#include "ferry/cost.h"
#include "ferry/train.h"

bool is_auto_policy(const char *policy);
/* Prices with auto_pricing's calibration (target's, or this machine's),
 * runs the search under o->device_mem and the host's memory limit (also
 * choosing where the parameters and AdamW's state live unless
 * --offload-optimizer or --offload-params was given), prints the choice to
 * `log` (NULL: nothing), and points o->exec.policy at the chosen spec (kept
 * in *r) and sets o->exec's optimizer and offload_params.  0, or 1 after
 * printing the error. */
int auto_policy_resolve(const char *cmd, const char *target, struct ferry_train_opts *o,
			const struct ferry_model_config *cfg, struct ferry_auto_result *r, FILE *log);
/* What --policy auto and --prefetch-depth auto price with, into *c: the
 * planning target's calibration (target: ferry plan --target, a name or a
 * file; ferry_target_load), or this machine's (auto_calibration, on o's
 * backend opened without --device-mem's cap: that caps the run planned,
 * not the calibration's steps).  *capacity: the device memory to fit,
 * --device-mem or else the target's or the backend's; *host_mem: the
 * target's host memory (0: this machine's limit).  0, or 1 after
 * printing the error. */
int auto_pricing(const char *cmd, const char *target, const struct ferry_train_opts *o,
		 const struct ferry_model_config *cfg, ferry_calibration_t *c, size_t *capacity, size_t *host_mem);
/* The search with a calibration, a device capacity and the host's memory
 * (0: this machine's limit) at hand (ferry bench:
 * with_state false, every row keeps the flags' parameter and optimizer
 * placement); with_state also chooses those (ferry_policy_auto_state). */
ferry_status auto_policy_search(const struct ferry_train_opts *o, const struct ferry_model_config *cfg,
				ferry_calibration_t c, size_t device_mem, size_t host_mem, bool with_state,
				struct ferry_auto_result *r);
/* This machine's calibration into *c (be's), with the model's op shapes
 * (o's batch and flags): the cache's, or, where the cache has none, one it
 * refuses or one without those shapes, measured now as `ferry calibrate
 * --quick` would and saved there, saying so on stderr with each part's
 * progress; a warning on stderr when the calibration was taken on a busy
 * machine (calib_busy).  0, or 1 after printing the error. */
int auto_calibration(const char *cmd, ferry_backend_t be, const struct ferry_train_opts *o,
		     const struct ferry_model_config *cfg, ferry_calibration_t *c);
/* --prefetch-depth auto (o->exec.prefetch_depth FERRY_PREFETCH_AUTO; else
 * nothing): the depth of each tier of the offloaded activations from this
 * machine's calibration (as auto_calibration finds it) and --device-mem,
 * into o->exec (its place), said on log (NULL: nothing).  0, or 1 after
 * printing the error. */
int prefetch_auto_resolve(const char *cmd, const char *target, struct ferry_train_opts *o,
			  const struct ferry_model_config *cfg, FILE *log);
void auto_policy_print(FILE *f, const struct ferry_auto_result *r);
void auto_policy_json(FILE *f, const struct ferry_auto_result *r);
/* The host tiers' choice (nothing / null without host tiers). */
void auto_tiers_print(FILE *f, const struct ferry_auto_result *r);
void auto_tiers_json(FILE *f, const struct ferry_auto_result *r);
#endif
