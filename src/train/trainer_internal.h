/*
 * Internal: the trainer's state, which its files share (trainer.c: set-up,
 * steps, validation; resume_report.c: what a resume took and what the
 * flags changed; trainer_save.c: saving).
 */
#ifndef FERRY_TRAIN_TRAINER_INTERNAL_H
#define FERRY_TRAIN_TRAINER_INTERNAL_H

#include "ferry/train.h"
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/place.h"
#include "ckpt/commit.h"

#include <glob.h>
#include <stdbool.h>
#include <stdint.h>

struct ferry_trainer {
	struct ferry_train_opts opts;  /* in effect: after a resume, not-given ones from the state */
	ferry_backend_t be;
	ferry_model_t model;
	ferry_loader_t train, val;
	struct ferry_plan plan;
	int32_t *inputs, *targets;     /* host [2][B*T]: this step's batch, then ... */
	int32_t *next_inputs, *next_targets; /* ... and the next, read while the device works */
	int32_t *positions, *next_positions; /* version-3 data: the batches' positions */
	bool have_next;
	bool packed;                   /* the training data is version 3 */
	int64_t count;                 /* this step's counted targets, all ranks */
	double flops;                  /* packed: this step's FLOPs, all ranks */
	double loss_sum;               /* packed: this rank's loss sum of the step */
	int64_t pos_shard, pos_offset, pos_epoch; /* the loader's position after this step's batch */
	int step;                      /* optimizer steps taken */
	int diverged_at;               /* the step whose loss was not finite (0: none) */
	uint64_t rng;
	uint64_t data_hash;            /* the training shards' paths and sizes */
	bool resumed;
	bool data_override;            /* resumed on other data than the saved run's */
	bool order_override;           /* ... or in another order */
	struct ferry_train_state saved; /* what the resumed state recorded */
	char saved_place[FERRY_PLACE_CHARS]; /* its placement for this run's ranks */
	struct ferry_places saved_places; /* ... parsed: exec.policy points here */
	char state_path[4096];
	/* data parallel: the ranks (opts.comm, this thread's), their number
	 * and this one's, and the communicator of the model's comm stream */
	ferry_comm_t comm, step_comm, host_comm;
	int ranks, rank;
	char engine_why[160];          /* the comm stream's engine, and why */
};

/* path shortened for messages into buf. */
const char *ferry_trainer_short_path(const char *path, char buf[FERRY_CKPT_SHORT]);
/* The files pattern matches, sorted (*files points into g; globfree(g)). */
ferry_status ferry_trainer_glob_files(const char *pattern, glob_t *g, const char ***files) FERRY_MUST_CHECK;

#endif
