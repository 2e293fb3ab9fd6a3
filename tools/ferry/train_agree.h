/*
 * ferry train on many ranks, before step 1: every rank runs the same
 * run.  Ranks launched with different flags (mpirun's MPMD form, a
 * script that differs per host) otherwise deadlock, abort inside MPI,
 * train on other data or lose the run at its save.
 */
#ifndef FERRY_TOOLS_TRAIN_AGREE_H
#define FERRY_TOOLS_TRAIN_AGREE_H

#include "cli_args.h"
#include "train_ranks.h"

/* The run as the flags of `groups` (argv's, parsed) set it: every flag's
 * value as "--flag=value" lines, those of a rank's own (its files:
 * --trace, --json; its machine: --threads, --device-mem, the host tiers;
 * what rank 0 alone does: --sample) left out; the inputs (--data,
 * --val-data, --checkpoint, --resume) by their files' sizes and hashes,
 * not their paths, which may differ per host.  `resume`: flags not given
 * (given's bits) take the saved run's values.  One exchange
 * (ferry_comm_same_lines): 0 on every rank, or 1 on every rank with one
 * message, printed by rank 0: "rank 1: --steps is 5, rank 0 has 10". */
int ranks_agree_run(const struct ranks *r, const struct cli_group *groups, int argc, char **argv, bool resume,
		    unsigned given);

#endif
