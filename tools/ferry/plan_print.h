/* Printing memory plans: a table for people, one JSON object for scripts. */
#ifndef FERRY_TOOLS_PLAN_PRINT_H
#define FERRY_TOOLS_PLAN_PRINT_H

#include <stdio.h>
#include "ferry/plan.h"

/* Where a tensor lives, in words ("device, 1 per layer", "host, ring of 3",
 * "recomputed", "not needed", "next layer's input"). */
const char *plan_tensor_lives(const struct ferry_plan *p, int i, char *buf, size_t n);

void plan_print_text(FILE *f, const struct ferry_plan *p);
/* device_mem 0: no "fits" field. */
void plan_print_json(FILE *f, const struct ferry_plan *p, size_t device_mem);

/* Every task of a training step's schedule, in submission order. */
void plan_print_schedule(FILE *f, const struct ferry_schedule_info *s);

#endif
