/* ferry plan --ranks N: each rank's device and host bytes, and each
 * machine's host bytes for --ranks-per-node. */
#ifndef FERRY_TOOLS_PLAN_RANKS_H
#define FERRY_TOOLS_PLAN_RANKS_H

#include <stdio.h>
#include "ferry/model.h"
#include "ferry/plan.h"

struct plan_ranks {
	int ranks, per_node;    /* N, and R ranks on a machine (the last may hold fewer) */
	int zero;               /* --zero */
	bool cpu;               /* the CPU backend: its device arena is host memory too */
	size_t *device, *host;  /* rank r's plan: peak device bytes, host_alloc_bytes */
	size_t max_device;      /* the largest rank's device bytes (what must fit) */
};

/* Every rank's plan (ferry_model_rank_plan); 0, or 1 after a message. */
int plan_ranks_make(const char *cmd, const struct ferry_model_config *cfg, int B, int T,
		    const struct ferry_exec_opts *o, struct plan_ranks *r);
void plan_ranks_free(struct plan_ranks *r);
void plan_ranks_print_text(FILE *f, const struct plan_ranks *r);
/* "ranks": [...], "machines": [...] (members of the caller's object). */
void plan_ranks_print_json(FILE *f, const struct plan_ranks *r);

#endif
