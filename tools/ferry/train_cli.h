/* ferry train's options as the command line gave them, which its files
 * share (cmd_train.c: the run; train_banner.c: what it says before step 1). */
#ifndef FERRY_TOOLS_TRAIN_CLI_H
#define FERRY_TOOLS_TRAIN_CLI_H

#include "train_ranks.h"
#include "train_report.h"
#include "ferry/train.h"

#include <stdbool.h>
#include <stddef.h>

struct train_cli {
	struct ferry_train_opts o;
	const char *save, *json, *tokenizer, *trace;
	int save_every, val_every, val_batches, sample; /* val_every -1: not given */
	int log_every;                                  /* --log-every */
	float sample_temperature;
	double peak_flops;                              /* --peak-flops, 0: not given */
	float comm_timeout;                             /* --comm-timeout (s) */
	bool shape_given;
	struct ranks ranks;                             /* mpirun -np N: this rank */
	int argc;                                       /* as given, for the ranks' */
	char **argv;                                    /* agreement (ranks_agree_run) */
};

/* The options in effect: after a resume, those not given come from the
 * saved run. */
static inline const struct ferry_train_opts *run_opts(ferry_trainer_t tr)
{
	return ferry_trainer_opts(tr);
}

/* Device bytes of the layer stack's activation storage. */
static inline size_t stack_bytes(const struct ferry_plan *p)
{
	size_t n = 0;

	for (int i = 0; i < p->n_tensors; i++)
		n += p->tensors[i].device_bytes;
	return n;
}

/* --lr-schedule's names, in enum ferry_lr_schedule's order. */
extern const char *const train_lr_kinds[];

/* The banner before step 1, the peak MFU is measured against, and the
 * warning when pinned host memory ran short (train_banner.c). */
void train_banner_print(ferry_trainer_t tr, const struct train_cli *c);
void train_banner_set_peak(ferry_trainer_t tr, const struct train_cli *c, struct train_report *r);
void train_banner_warn_pageable(ferry_trainer_t tr);

#endif
