/* What `ferry train` reports while it runs: a line per step (loss, speed,
 * model FLOP utilisation, elapsed time and ETA, the device peak when it
 * changes), the --json records, and the summary at the end. */
#ifndef FERRY_TOOLS_TRAIN_REPORT_H
#define FERRY_TOOLS_TRAIN_REPORT_H

#include <stdbool.h>
#include <stdio.h>
#include "ferry/train.h"

struct train_report {
	int steps, B, T;           /* the run: total steps, batch */
	int log_every;             /* a line every N steps (0, 1: every step) */
	double step_flops;         /* the model's FLOPs per step */
	double peak_flops;         /* FLOP/s that MFU is against; 0: unknown, not shown */
	const char *peak_what;     /* which peak that is ("--peak-flops", ...) */
	bool warned_over;          /* said that MFU went above 100% */
	bool raise_peak;           /* on the CPU: a step faster than the peak raises it */
	FILE *json;                /* --json, or NULL */
	const char *json_path;
	int json_errno;            /* the first write error of the JSON log */
	int stdout_errno;          /* ... of the step lines on stdout (a closed pipe) */
	double t0;                 /* seconds, monotonic: when the first step began */
	int first_step, n;         /* the step the run started at; steps taken */
	double total_ms, *step_ms; /* step_ms[n]: for the median */
	float loss[10], val_loss;  /* the last ten losses; the last validation */
	int val_step, last_step;     /* the steps of the last validation and the last step */
	size_t shown_peak;         /* device peak on the last line that showed it */
	bool packed;               /* version-3 data: each step's counted targets shown */
	long long targets;         /* the counted targets of the steps taken */
	double flops;              /* version-3 data: the FLOPs of the steps taken
				      (step_flops is then the last step's) */
};

/* Sets up r for a run of steps from first_step (JSON log json, may be
 * NULL).  Returns 0, or -1 when out of memory (the median is then left
 * out). */
int report_begin(struct train_report *r, int first_step, int steps);
/* One step: its line on stdout (every log_every'th step, the first, the
 * last and one with a validation) and its JSON record (every step).  Returns 0, or -1 when
 * the line or the record could not be written (r->stdout_errno or
 * r->json_errno says why; the caller stops the run). */
int report_step(struct train_report *r, const struct ferry_step_metrics *m, float val_loss);
/* Closes the JSON log: -1 when it (or any record before) failed to reach
 * the file. */
int report_close_json(struct train_report *r);
/* The summary line; at_step and of_steps say where a run without steps
 * stands. */
void report_summary(const struct train_report *r, size_t device_peak, int at_step);
/* On several ranks, after the summary: each rank's measured device peak
 * and host bytes (bytes[2k], bytes[2k + 1]), a line and a JSON record
 * {"rank_memory": [...]} (ferry plan --ranks plans the same figures).
 * Returns 0, or -1 when the record could not be written. */
int report_rank_memory(struct train_report *r, int ranks, const size_t *bytes);
void report_end(struct train_report *r);
/* "42s", "3m07s", "2h05m". */
const char *report_duration(double seconds, char *buf, size_t n);

#endif
