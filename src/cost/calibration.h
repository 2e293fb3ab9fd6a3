/*
 * Internal: a calibration's tables (ferry/cost.h), how a task's duration is
 * looked up in them, and how they are stored (calibration.c).
 */
#ifndef FERRY_COST_CALIBRATION_H
#define FERRY_COST_CALIBRATION_H

#include "ferry/cost.h"
#include "sched/schedule.h"

/* An op at one shape: its median duration. */
struct ferry_calib_op {
	enum ferry_op_kind kind;
	bool backward;
	int B, T, C, NH, OC, V, Vp, NKV;
	long n;
	double seconds, flops;
};

/* Host<->device copies of one size: seconds per copy. */
struct ferry_calib_copy {
	size_t bytes;
	double d2h_s, h2d_s;           /* each direction alone */
	double d2h_both_s, h2d_both_s; /* both directions at once */
};

#define FERRY_CALIB_MAX_COPY 48

/* A CPU-less (CXL) node's speed against local DRAM, measured. */
struct ferry_calib_cxl {
	int node;
	double copy, adamw;
};
#define FERRY_CALIB_MAX_CXL 16

/* A collective over `ranks` ranks of one engine at one size: every rank in
 * it at once, the slowest rank's fastest call.  bytes: all-reduce's and
 * reduce-scatter's whole array, all-gather's slice of one rank. */
enum ferry_calib_coll_kind {
	FERRY_COLL_ALL_REDUCE,
	FERRY_COLL_REDUCE_SCATTER,
	FERRY_COLL_ALL_GATHER,
	FERRY_COLL_KINDS
};
struct ferry_calib_coll {
	enum ferry_calib_coll_kind kind;
	char engine[8];  /* "mpi", "nccl" (ferry_comm_engine) */
	int ranks;
	size_t bytes;
	double seconds;
};
#define FERRY_CALIB_MAX_COLL 256

/* The collectives inside data-parallel steps over `ranks` ranks of one
 * engine, from traced steps: they take in_step times their time alone
 * while the compute stream runs beside them, in_step_idle times while it
 * is idle (the last rank to arrive at each: sharing the cores with the
 * compute threads, then having them; in_step_idle 0: not measured apart,
 * in_step), the ranks ahead
 * wait skew_s for it (the ranks' skew), and the compute ops beside them
 * take compute_slowdown times as long (on the CPU backend the comm thread
 * polls while a collective is under way); 0: not measured (1, none). */
struct ferry_calib_comm_step {
	char engine[8];
	int ranks;
	double in_step, in_step_idle, compute_slowdown, skew_s;
};
#define FERRY_CALIB_MAX_COMM_STEP 8

struct ferry_calibration {
	char fingerprint[400];
	char version[16];
	long long created;
	int n_ops, cap_ops;
	struct ferry_calib_op *ops;
	int n_copy;
	struct ferry_calib_copy copy[FERRY_CALIB_MAX_COPY];
	double d2d_Bps, zero_Bps;      /* 0: not measured */
	double adamw_floats_per_s;
	double op_spread;              /* median over shapes of (q3 - q1) / median of the calls */
	double others_cpu;             /* the share of the CPUs' time other processes took while the
					  last calibration ran (0: none, or not measured) */
	double copy_compute_slowdown;  /* compute ops beside host<->device copies take this many times
					  as long (0: not measured) */
	double task_gap_s;             /* the compute stream's idle time between two of its tasks */
	double step_host_s;            /* a step's wall time outside its tasks (the host's own work) */
	double in_step_factor;         /* a step's ops, zeroing and device copies take this many times
					  their fastest traced call (0: not measured, 1) */
	/* host tiers (cost/tier_rates.c; 0: the documented default): a CPU-less
	 * node's speed against local DRAM for host<->device copies and for the
	 * CPU AdamW (the slowest node measured; each node's own in cxl[]), and
	 * the NVMe tier's file I/O (measured in nvme_dir, the file doing I/O
	 * as nvme_mode says) */
	double cxl_copy_factor, cxl_adamw_factor;
	int n_cxl;
	struct ferry_calib_cxl cxl[FERRY_CALIB_MAX_CXL];
	double nvme_read_Bps, nvme_write_Bps;
	char nvme_dir[512], nvme_mode[160];
	char nvme_error[320];          /* this run's NVMe measurement failed: why (not stored) */
	/* collectives, per engine and number of ranks (calibrate_collectives.c) */
	int n_coll;
	struct ferry_calib_coll coll[FERRY_CALIB_MAX_COLL];
	int n_comm_step;
	struct ferry_calib_comm_step comm_step[FERRY_CALIB_MAX_COMM_STEP];
};

/* Adds (or replaces) the entry of op's shape. */
ferry_status ferry_calib_add_op(struct ferry_calibration *c, const struct ferry_calib_op *op) FERRY_MUST_CHECK;
/* Adds (or replaces) a copy size. */
void ferry_calib_add_copy(struct ferry_calibration *c, const struct ferry_calib_copy *cp);
/* The entry of a call's shape (NULL: none). */
const struct ferry_calib_op *ferry_calib_find(const struct ferry_calibration *c, const struct ferry_op_call *call);
/* How long a task takes on its own; *estimated is set when an op was not
 * measured at its shape (then from its kind's FLOP rate). */
double ferry_calib_task_seconds(const struct ferry_calibration *c, const struct ferry_task *t, bool *estimated);
/* The same for a step on packed documents of doc_tokens tokens each (0:
 * as above): attention scores only the pairs within a document, so its
 * calibrated time (a row's whole triangle) is scaled by the pairs scored. */
double ferry_calib_task_seconds_docs(const struct ferry_calibration *c, const struct ferry_task *t, int doc_tokens,
				     bool *estimated);
/* A copy's duration in one direction, alone or with the other direction
 * copying at once, scaled from the nearest size measured. */
double ferry_calib_copy_seconds(const struct ferry_calibration *c, size_t bytes, enum ferry_copy_kind k, bool both);
/* The median of both-at-once over alone, over the sizes measured (1: none). */
double ferry_calib_both_slowdown(const struct ferry_calibration *c);
struct ferry_calibration *ferry_calib_new(void);
/* The calibration as the cache file's text (free()), and back (what names
 * it in errors; any machine's). */
char *ferry_calib_to_text(const struct ferry_calibration *c);
ferry_status ferry_calib_from_text(const char *text, const char *what, ferry_calibration_t *out) FERRY_MUST_CHECK;
/* A record of another machine's calibration (a planning target's,
 * cost/targets.c): its JSON (root, consumed), whatever ferry version made
 * it and however old, since it says what that machine measured then. */
struct json_t;
ferry_status ferry_calib_from_record(struct json_t *root, const char *what, ferry_calibration_t *out)
	FERRY_MUST_CHECK;

/* ---- collectives (calibrate_collectives.c) ---- */
const char *ferry_calib_coll_name(enum ferry_calib_coll_kind k);
/* Adds (or replaces) the entry of e's kind, engine, ranks and size. */
void ferry_calib_add_coll(struct ferry_calibration *c, const struct ferry_calib_coll *e);
/* A collective's duration at `bytes` from the sizes measured at its kind,
 * engine and ranks: between two, on the line through them; above the
 * largest, on the line through the two largest (its bandwidth); below the
 * smallest, the smallest's (its latency).  *missing is set, and 0
 * returned, when none was measured there: a calibration over other ranks
 * says nothing of these. */
double ferry_calib_coll_seconds(const struct ferry_calibration *c, enum ferry_calib_coll_kind k, const char *engine,
				int ranks, size_t bytes, bool *missing);
/* Adds (or replaces) the entry of e's engine and ranks. */
void ferry_calib_add_comm_step(struct ferry_calibration *c, const struct ferry_calib_comm_step *e);
/* The entry of an engine and ranks (NULL: none). */
const struct ferry_calib_comm_step *ferry_calib_comm_step_find(const struct ferry_calibration *c,
							      const char *engine, int ranks);
/* The calibrated collective a COMM task runs over `ranks`, and its size
 * in the calibration's terms (*bytes: an all-gather's per rank, the
 * others' whole buffer). */
enum ferry_calib_coll_kind ferry_calib_coll_of_task(const struct ferry_task *t, int ranks, size_t *bytes);
/* The in-step ratios from n / 3 collectives of traced steps, r[3i..3i+2]
 * each: its slice in the step, its time alone, and the fraction of its
 * slice the compute stream ran tasks beside it.  The slices summed over
 * the times alone summed, of those the compute stream ran beside for at
 * least half their time (*beside) and of the others (*idle): a short
 * one's slice is mostly the wait for the other ranks, so one's own ratio
 * says little (thousands); the sum weighs them by time.  Apart because
 * they differ: on the CPU backend the comm threads share the cores with
 * the compute threads during the backward (the layers' averages took 16x
 * their time alone, summed) and have them after it (the embeddings'
 * 1.0x to 1.6x).  A kind with no collective takes the other's; 0 both
 * where none was measured. */
void ferry_calib_in_step_ratios(const double *r, int n, double *beside, double *idle);
/* A COMM task's duration alone (its communicator's engine and ranks);
 * inside a step the cost model stretches it by the comm step's factors. */
double ferry_calib_comm_task_seconds(const struct ferry_calibration *c, const struct ferry_task *t, bool *missing);
/* Measures want[0..n) (kind and bytes; engine, ranks and seconds are
 * filled in) over comm's ranks on host buffers, every rank at once: a
 * barrier before each call, the fastest of at least `repeats` after a
 * warm-up (30 below 1 MiB, 10 below 16 MiB), the slowest rank's; into c.  Every rank of comm calls it with the same
 * want.  FERRY_ERR_UNSUPPORTED for an engine on device buffers. */
ferry_status ferry_calib_measure_collectives(struct ferry_comm *comm, struct ferry_calib_coll *want, int n,
					     int repeats, struct ferry_calibration *c) FERRY_MUST_CHECK;

/* ---- the machine's load (machine_load.c) ---- */
struct ferry_cpu_sample {
	bool ok;                 /* /proc/stat and getrusage read */
	double busy, total, own; /* CPU seconds: all CPUs busy, all CPUs, this process */
};
void ferry_cpu_sample_take(struct ferry_cpu_sample *s);
/* Of the CPUs' time from a to b, the share other processes took (0..1;
 * 0 when a sample failed or too little time passed to tell). */
double ferry_cpu_others_share(const struct ferry_cpu_sample *a, const struct ferry_cpu_sample *b);

/* ---- host tiers (tier_rates.c) ---- */
struct ferry_topology;
struct ferry_tier;
/* A tier's speed against local DRAM: host<->device copies and the CPU
 * AdamW on memory there take 1/copy and 1/adamw times as long; the NVMe
 * tier's reads and writes run at read_Bps and write_Bps. */
struct ferry_tier_rate {
	double copy, adamw;
	double read_Bps, write_Bps;
	bool measured; /* from the calibration, not the defaults */
};
/* Defaults (docs/cost_model.md): a CPU-less (CXL) node copies at 0.5 and
 * runs AdamW at 0.25 of DRAM's speed (arXiv 2507.03305: about 4x slower
 * for the optimizer on CXL); a tier over several nodes serves each node's
 * share at once (striping), at most as fast as DRAM; NVMe reads 2 GB/s and
 * writes 1 GB/s (bench_nvme_tier on the development machine). */
#define FERRY_TIER_CXL_COPY 0.5
#define FERRY_TIER_CXL_ADAMW 0.25
#define FERRY_TIER_NVME_READ_BPS 2e9
#define FERRY_TIER_NVME_WRITE_BPS 1e9
void ferry_calib_tier_rate(const struct ferry_calibration *c, const struct ferry_topology *topo,
			   const struct ferry_tier *t, struct ferry_tier_rate *out);
/* Measures host<->device copies of each size on be (calibrate_copies.c). */
ferry_status ferry_calib_measure_copies(ferry_backend_t be, const size_t *sizes, int n, int repeats,
					struct ferry_calibration *c) FERRY_MUST_CHECK;
/* The same on host memory the caller gives (on a host tier, say): the
 * bytes it needs for sizes (0: none), and the times of each size into
 * out[i]; host is touched beforehand so no copy pays a first touch. */
size_t ferry_calib_copy_host_bytes(const size_t *sizes, int n);
ferry_status ferry_calib_time_copies(ferry_backend_t be, char *host, const size_t *sizes, int n, int repeats,
				     struct ferry_calib_copy *out) FERRY_MUST_CHECK;

#endif
