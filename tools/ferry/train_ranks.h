/*
 * ferry train on many ranks (mpirun -np N ferry train ...): which rank
 * prints, how the ranks stop together, and how a failure one rank meets
 * alone ends the job.
 *
 * Rank 0 prints and writes --json; the other ranks' standard output
 * goes to /dev/null and their standard error to memory (the last line
 * is what rank 0 prints of a failure of theirs the ranks agree on),
 * except the message of a failure they meet alone.  Failures every rank shares (agreed by the trainer, or the same
 * everywhere) are printed once, by rank 0; one rank's alone is printed by
 * that rank, "ferry train: rank K: ...", and ends every rank
 * (ferry_comm_abort), since the others may be waiting in a collective.
 */
#ifndef FERRY_TOOLS_TRAIN_RANKS_H
#define FERRY_TOOLS_TRAIN_RANKS_H

#include "ferry/comm.h"
#include "ferry/train.h"

#include <stddef.h>

struct ranks {
	ferry_comm_t comm; /* the job's ranks (one process: a single one) */
	int rank, size, local_size;
	int err_fd;        /* this rank's own standard error */
	int msg_fd;        /* where its standard error goes (not rank 0;
			      -1: nowhere kept) */
	const char *cmd;   /* "train": for messages */
	double timeout;    /* the collective timeout (s; 0: none) */
	struct ferry_rank_cores cores; /* its CPUs (several ranks) */
};

/* The ranks this process is one of (ferry_comm_open); silences the
 * output of all but rank 0; binds each to its cores (ferry_rank_cores_bind:
 * a rank that cannot says so and runs unbound).  0, or 1 after a message. */
int ranks_open(const char *cmd, struct ranks *r);
void ranks_close(struct ranks *r);
/* The threads a rank runs on: `threads` when given (not 0), else its
 * cores' (ferry_rank_cores). */
int ranks_threads(const struct ranks *r, int threads);
/* One line on how the ranks' cores were bound, rank 0's among them. */
void ranks_print_cores(const struct ranks *r);
/* The collective timeout (ferry_comm_set_timeout): a collective that
 * waits `seconds` prints which ranks did not arrive and ends the job.
 * Every rank calls it; 0, or 1 after a message. */
int ranks_watch(struct ranks *r, double seconds);
/* A failure (ferry_last_error): printed once; one this rank met alone
 * ends the job.  Returns 1 (when the job goes on: one rank). */
int ranks_fail(const char *cmd, const struct ranks *r);
/* After a phase every rank runs with the same outcome expected: the
 * worst rc of all ranks on every rank; when rank 0's own was 0, it prints
 * the failing rank's message. */
int ranks_agree_rc(const char *cmd, const struct ranks *r, int rc);
/* The first reason to stop (a negative code; 0 none) any rank has, on
 * every rank, so all stop after the same step. */
int ranks_agree_stop(const struct ranks *r, int why);
/* Every rank's n numbers: all[k * n + i] is rank k's mine[i], on every
 * rank.  0, or 1 after a message (ranks_fail). */
int ranks_gather(const char *cmd, const struct ranks *r, const size_t *mine, size_t n, size_t *all);
/* path for this rank: "step.json" is "step.rank1.json" on rank 1 of
 * several (before the last extension, else at the end); path itself for
 * one rank. */
const char *ranks_path(const struct ranks *r, const char *path, char *buf, size_t n);

#endif
