/* --host-tier, --topology, --nvme-dir, --host-mem (ferry train, plan, bench): where
 * host state lives (ferry/tier.h). */
#ifndef FERRY_TOOLS_TIER_FLAGS_H
#define FERRY_TOOLS_TIER_FLAGS_H

#include <stdio.h>
#include "cli_args.h"
#include "ferry/tier.h"
#include "ferry/train.h"

/* Their table; the group that parses them (into this file's own record of
 * what was given, which ferry_cli_tier_flags_setup reads). */
extern const struct cli_flag ferry_cli_tier_flags[];
struct cli_group ferry_cli_tier_flags_group(void);

/* --host-tier's spec, a shorthand of the placements' host tiers (NULL:
 * not given, or off: no tiers). */
const char *ferry_cli_tier_flags_spec(void);
/* Whether --host-tier was given (off included): a placement flag. */
bool ferry_cli_tier_flags_given(void);

/* Creates the host tiers when a flag or the placements (o->exec.host_tier,
 * ferry_cli_model_flags_places) asked for them, or when the machine has CPU-less
 * (CXL) nodes, into o->exec.host_tiers (else leaves it NULL: the
 * backend's host memory, as before tiers).  After ferry_cli_model_flags_places.
 * -1 after a message. */
int ferry_cli_tier_flags_setup(const char *cmd, struct ferry_train_opts *o);

/* Places the plan's host bytes and prints them by tier and kind (nothing
 * without tiers).  1 after printing why they do not fit. */
int ferry_cli_tier_flags_print_plan(FILE *out, const char *cmd, struct ferry_train_opts *o, const struct ferry_plan *plan);
/* Places the plan's host bytes without printing them: 1 after printing
 * (stderr) why they do not fit, else 0 (also without tiers). */
int ferry_cli_tier_flags_check(const char *cmd, struct ferry_train_opts *o, const struct ferry_plan *plan);
/* The placement the model was allocated with, one line (nothing without). */
void ferry_cli_tier_flags_print_placement(FILE *out, const struct ferry_train_opts *o);

/* With offloaded activations over several tiers: each tier's most bytes
 * allocated against the plan's, one line (nothing otherwise). */
void ferry_cli_tier_flags_print_peaks(FILE *out, const struct ferry_train_opts *o);

void ferry_cli_tier_flags_release(struct ferry_train_opts *o);

#endif
