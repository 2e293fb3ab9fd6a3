/*
 * Calibration and the cost model: how long a training step takes under a
 * placement, predicted before step 1.
 *
 * A calibration holds what one machine and backend measured: each op's
 * duration at the shapes a model's step runs it (from a traced step), the
 * host<->device copy time per transfer size in each direction, alone and
 * with the other direction copying at once, device-side copy and zeroing
 * bandwidth, and the CPU AdamW rate.  It is cached per machine, under
 * $XDG_CACHE_HOME/ferry (or ~/.cache/ferry), keyed by a fingerprint of the
 * machine (CPU, cores, memory, backend, device, threads, ferry's version);
 * a cache made elsewhere, by another version, or too long ago is refused.
 *
 * The cost model (ferry_model_predict) replays the model's prepared
 * schedule in a discrete-event simulation with those durations: streams in
 * order, waits on events, the host's synchronisation, copy engines.  Its
 * peak device memory is the memory plan's, exactly.
 */
#ifndef FERRY_COST_H
#define FERRY_COST_H
#include <stdbool.h>
#include "ferry/ferry.h"
#include "ferry/backend.h"
#include "ferry/model_config.h"
#include "ferry/plan.h"
#include "ferry/tier.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_calibration *ferry_calibration_t;

/* A calibration cache older than this is stale (machines change: drivers,
 * BIOS settings, other tenants). */
#define FERRY_CALIBRATION_MAX_AGE_DAYS 30

/* The kernels' revision: bumped whenever a kernel's speed changes, so that
 * calibrations measured on the old kernels are taken again (they are keyed
 * on it).  2: the CPU attention tiled and the GELU backward vectorised. */
#define FERRY_KERNELS_REVISION 2

/* "cpu=AMD EPYC;cores=2;mem=23.5GiB;backend=cpu;device=CPU: 2 threads;
 * ferry=0.1.0;kernels=2": what a calibration is valid for. */
ferry_status ferry_machine_fingerprint(ferry_backend_t be, char *buf, size_t n) FERRY_MUST_CHECK;
/* The cache file of a fingerprint: <cache dir>/ferry/calibration-<hash>.json. */
ferry_status ferry_calibration_cache_path(const char *fingerprint, char *buf, size_t n) FERRY_MUST_CHECK;

/* Measures on be, at cfg's shapes for batches of B x T: one warm-up step
 * and `repeats` traced steps of a model under opts (each op's median
 * duration), copies at the sizes of the model's layer activations, the CPU
 * AdamW.  With host tiers (opts->host_tiers; the model's steps run without
 * them) also each CPU-less node of the tiers' topology against local DRAM
 * (copies and the CPU AdamW on memory bound there; not on a simulated
 * topology, whose nodes do not exist) and, with an NVMe directory, the
 * NVMe tier's write and read rates through its file I/O (a file of at most
 * 256 MiB, gone from the directory as soon as it is open).  base (NULL:
 * none) is an earlier calibration of the same machine whose measurements
 * the new one keeps where it measures nothing new. */
ferry_status ferry_calibrate(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			     const struct ferry_exec_opts *opts, int repeats, ferry_calibration_t base,
			     ferry_calibration_t *out) FERRY_MUST_CHECK;
/* ferry_calibrate, calling progress(ctx, what, part, parts) (NULL: none)
 * as it starts each of its parts: what it measures, in words ("host<->device
 * copies at 4 sizes"), its number from 1, and how many there are. */
typedef void (*ferry_calib_progress_fn)(void *ctx, const char *what, int part, int parts);
ferry_status ferry_calibrate_progress(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				      const struct ferry_exec_opts *opts, int repeats, ferry_calibration_t base,
				      ferry_calib_progress_fn progress, void *ctx, ferry_calibration_t *out)
	FERRY_MUST_CHECK;
/* Reads path; refuses (FERRY_ERR_FORMAT, saying why and what to run) a
 * file that is not a calibration, one whose fingerprint is not
 * `fingerprint` (NULL: any), one by another ferry version, or one older
 * than FERRY_CALIBRATION_MAX_AGE_DAYS.  FERRY_ERR_IO when there is none. */
ferry_status ferry_calibration_load(const char *path, const char *fingerprint, ferry_calibration_t *out)
	FERRY_MUST_CHECK;
/* Writes whole or not at all, making the directory if needed. */
ferry_status ferry_calibration_save(ferry_calibration_t c, const char *path) FERRY_MUST_CHECK;
/* One calibration of a cache file at a time: an flock on "<path>.lock"
 * (made, with its directory, if needed), to hold from loading the earlier
 * calibration to saving the new one, so that a concurrent calibration
 * builds on this one's result instead of overwriting it (and neither
 * times the other's work).  *fd: the lock, for ferry_calibration_unlock;
 * -1 when wait is false and another process holds it.  FERRY_ERR_IO when
 * the lock file cannot be made or locked. */
ferry_status ferry_calibration_lock(const char *path, bool wait, int *fd) FERRY_MUST_CHECK;
void ferry_calibration_unlock(int fd);
void ferry_calibration_free(ferry_calibration_t c);
/* Rank 0's calibration (*c there) to every rank of comm, in place of
 * theirs (freed): ranks whose machines' caches differ then predict and
 * choose alike.  A collective; nothing for one rank.  FERRY_ERR_INVALID
 * on every rank when rank 0 has none. */
struct ferry_comm;
ferry_status ferry_calibration_share(struct ferry_comm *comm, ferry_calibration_t *c) FERRY_MUST_CHECK;

/* A machine planned for from another (ferry plan --target): the backend
 * whose activation type and kernels its plans assume, its device arena,
 * and what it measured (a calibration). */
struct ferry_target {
	char name[64];       /* "h100", or the file it was read from */
	char backend[16];    /* "cuda" */
	char device[96];     /* "NVIDIA H100 80GB HBM3" */
	size_t device_mem;   /* the device arena ferry opened there; 0: not known
				(a bare calibration file: give --device-mem) */
	size_t host_mem;     /* that machine's host memory; 0: not known (this one's) */
	char about[600];     /* where its figures come from, what was not measured */
};
/* name: a built-in target ("h100", "h200": ferry_target_names; their
 * figures are committed measurements, src/cost/targets/), or the path of
 * a target file of that format, or of a calibration `ferry calibrate`
 * saved on the machine (its backend from its fingerprint).  A record of
 * another machine is read whatever ferry version made it and however old.
 * *calib (ferry_calibration_free) its figures.  An unknown name that is no
 * file: FERRY_ERR_INVALID naming the built-in ones. */
ferry_status ferry_target_load(const char *name, struct ferry_target *t, ferry_calibration_t *calib)
	FERRY_MUST_CHECK;
/* The built-in targets' names, ", "-separated (static). */
const char *ferry_target_names(void);

/* A calibration in figures (ferry info, ferry calibrate). */
struct ferry_calib_summary {
	char fingerprint[400];
	char version[16];
	long long created;           /* Unix seconds */
	int n_op_shapes, n_copy_sizes;
	size_t copy_bytes;           /* the largest transfer size measured */
	double d2h_Bps, h2d_Bps;     /* at that size, each direction alone */
	double d2h_both_Bps, h2d_both_Bps; /* both directions at once */
	bool shared_copy_engine;     /* both at once take as long as one after the other */
	double matmul_flops;         /* FLOP/s over all the matrix products measured */
	double other_flops;          /* the same over the other ops (memory-bound) */
	double d2d_Bps, zero_Bps;    /* device copies and zeroing */
	double adamw_floats_per_s;   /* the CPU AdamW */
	double copy_compute_slowdown; /* compute ops beside host<->device copies take this many
					 times as long (0: not measured) */
	double op_spread;            /* how much calls of one op at one shape vary: the median over
					shapes of their interquartile range over their median (a busy
					machine: large) */
	double others_cpu;           /* the share of the CPUs' time other processes took while the
					last calibration ran (a busy machine: large; 0 also when not
					measured) */
	double task_gap_s;           /* the compute stream's idle time between two of its tasks
					(dispatch, waits for the host) */
	double step_host_s;          /* a step's wall time outside its tasks (the host's own work) */
	double in_step_factor;       /* ops inside whole untraced steps take this many times their
					fastest traced call (0: not measured) */
	/* host tiers, as the cost model takes them, each figure measured (by
	 * ferry_calibrate with host tiers) or the documented default: a
	 * CPU-less (CXL) node's speed against local DRAM for host<->device
	 * copies and the CPU AdamW (the slowest node measured; each node's in
	 * cxl_node[]), and the NVMe tier's file rates (measured in nvme_dir,
	 * its file doing I/O as nvme_mode says) */
	double cxl_copy_factor, cxl_adamw_factor;
	bool cxl_copy_measured, cxl_adamw_measured;
	int n_cxl_nodes;
	struct {
		int node;
		double copy_factor, adamw_factor;
	} cxl_node[16];
	double nvme_read_Bps, nvme_write_Bps;
	bool nvme_read_measured, nvme_write_measured;
	char nvme_dir[512], nvme_mode[160];
	char nvme_error[320];        /* why this calibration could not measure the NVMe tier
					(a full directory); "" when it did or was not asked */
	/* collectives (ferry calibrate under mpirun), per kind, engine and
	 * number of ranks: how many sizes, the smallest and largest and their
	 * times */
	int n_coll;
	struct {
		char kind[16];       /* "all_reduce", "reduce_scatter", "all_gather" */
		char engine[8];
		int ranks, sizes;
		size_t small_bytes, big_bytes;
		double small_s, big_s;
	} coll[12];
	/* inside data-parallel steps, per engine and ranks: the collectives
	 * take in_step times their time alone beside compute, in_step_idle
	 * times with the compute stream idle (0: in_step), compute ops beside them
	 * compute_slowdown times theirs, the ranks ahead wait skew_s for the
	 * last (0: not measured) */
	int n_comm_step;
	struct {
		char engine[8];
		int ranks;
		double in_step, in_step_idle, compute_slowdown, skew_s;
	} comm_step[8];
};
void ferry_calibration_summary(ferry_calibration_t c, struct ferry_calib_summary *out);

/* What the cost model predicts for one step of ferry_model_step_submit +
 * _finish + ferry_model_sync. */
struct ferry_prediction {
	double step_s;          /* wall time of the step */
	double exposed_copy_s;  /* the compute stream waiting for host<->device copies */
	double compute_s;       /* busy time of the compute stream */
	double copy_s;          /* host<->device copy time */
	double host_s;          /* host threads (the CPU AdamW) */
	size_t device_peak_bytes; /* the memory plan's peak, exact */
	size_t host_bytes;      /* host memory the plan puts there */
	int n_tasks;
	int estimated_ops;      /* tasks not measured: ops at other shapes (from their kind's FLOP
				   rate) and the NVMe tier's I/O where its rates were not
				   calibrated (at the default rates) */
	bool host_fits;         /* the host tiers (opts->host_tiers) hold the host state; with
				   tiers, each kind's copies and the CPU AdamW run at the speed
				   of the tier it is placed on (where they fit) */
	/* data parallel (opts->comm of several ranks): the collectives on the
	 * comm stream */
	double comm_s;          /* their time, one after the other */
	double exposed_comm_s;  /* the compute stream waiting for them */
	int uncalibrated_comm;  /* those the calibration has not measured over this many ranks
				   with this engine, priced 0: calibrate under mpirun with as
				   many ranks (ferry calibrate) */
};
ferry_status ferry_model_predict(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, ferry_calibration_t c,
				 struct ferry_prediction *out) FERRY_MUST_CHECK;
/* The same, also writing the simulated step to path as `ferry train
 * --trace` writes a traced one (Chrome trace JSON: a track per stream, a
 * slice per task at its simulated times), to compare task by task with a
 * traced step; path NULL: nothing written. */
ferry_status ferry_model_predict_timeline(const struct ferry_model_config *cfg, int B, int T,
					  const struct ferry_exec_opts *opts, ferry_calibration_t c,
					  const char *path, struct ferry_prediction *out) FERRY_MUST_CHECK;

/* ---- --policy auto ----------------------------------------------------------------
 * Chooses, per activation name of a layer (shared by every layer), keep on
 * the device, offload or recompute, to minimise the predicted step time
 * among placements whose plan fits device_mem (0: any) and host_mem (0:
 * any).  The search starts from the best preset that fits (or the one
 * nearest to fitting) and moves one name at a time to the placement that
 * helps most, until no move helps. */
#define FERRY_AUTO_MAX_NAMES 32
#define FERRY_AUTO_MAX_PRESETS 24

struct ferry_auto_choice {
	char name[FERRY_PLAN_NAME_CHARS]; /* the activation's (ferry_plan_tensor) */
	enum ferry_placement place;
	size_t layer_bytes;
	bool needed;            /* read by the backward pass (else nothing to place) */
	/* the final placement with this name moved to each placement instead:
	   whether it fits, its predicted step time and its peak */
	bool alt_valid[3], alt_fits[3];
	double alt_s[3];
	size_t alt_peak[3];
	double copy_s;          /* offloaded: its copies out and back, all layers, alone */
};

struct ferry_auto_preset {
	char name[40];
	bool valid, fits;
	double step_s;
	size_t peak, host;
};

/* Host tiers (opts->host_tiers): where --policy auto put each kind of
 * host state.  Kinds --host-tier names are as given; the others are moved
 * one at a time to the tier that makes the step fastest while every tier
 * holds what it gets, from the default placement (tier.h), until no move
 * helps. */
#define FERRY_AUTO_MAX_TIER_OPTIONS 8
struct ferry_auto_tier_kind {
	uint64_t bytes;          /* 0: the kind has no host state */
	bool given;              /* --host-tier named its tier: not searched */
	int chosen, dflt;        /* into opt[]: the choice, the default's (-1: none) */
	int n;
	struct {
		char name[40];   /* "dram", "cxl", "node:1", "nvme" */
		struct ferry_tier tier;
		bool judged, fits; /* the other kinds as chosen, this one here */
		double step_s;
		double copy_speed, adamw_speed; /* against DRAM, as the cost model takes them */
		double read_Bps, write_Bps;     /* nvme: its file rates */
		bool speed_measured;    /* from the calibration (else the documented defaults;
					   false for dram, which is the reference) */
	} opt[FERRY_AUTO_MAX_TIER_OPTIONS];
};
struct ferry_auto_tiers {
	bool active;             /* host tiers were given */
	int searched;            /* placements judged */
	char spec[256];          /* the searched kinds' choice as --host-tier KIND=TIER,... */
	bool default_fits;
	double default_s;        /* the default placement's prediction */
	struct ferry_auto_tier_kind kind[FERRY_HOST_KINDS];
};

struct ferry_auto_result {
	char policy[1024];      /* the choice as a custom: spec */
	bool fits;
	struct ferry_prediction pred;
	int layers;
	int n;
	struct ferry_auto_choice c[FERRY_AUTO_MAX_NAMES];
	int n_presets;
	struct ferry_auto_preset presets[FERRY_AUTO_MAX_PRESETS];
	char start[40];         /* the preset the search started from */
	int evaluations;
	double search_s;
	size_t device_mem, host_mem;
	/* where the parameters and AdamW's state live: as given, or as
	 * ferry_policy_auto_state chose among n_states placements */
	enum ferry_optim_place optimizer;
	bool offload_params;
	int n_states;
	/* tiles of tokens (ferry_exec_opts' mlp_tile, loss_tile): as given, or
	 * when not given (0) the search's choice, 0 or FERRY_TILE_AUTO, weighed
	 * like any recomputation: taken when it fits what else would not, or
	 * is faster */
	int mlp_tile, loss_tile;
	struct ferry_auto_tiers tiers;
};
/* With host tiers (opts->host_tiers) it also chooses each kind's tier (see
 * struct ferry_auto_tiers) and leaves that choice in opts->host_tiers, as
 * if --host-tier had named it.  Errors: a bad shape; no placement fits
 * (the message names the least device memory any needs, or what the host
 * tiers cannot hold). */
ferry_status ferry_policy_auto(const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, size_t device_mem, size_t host_mem,
			       ferry_calibration_t c, struct ferry_auto_result *out) FERRY_MUST_CHECK;
/* ferry_policy_auto that also chooses where the parameters and AdamW's
 * state live (opts' optimizer and offload_params ignored): on the device;
 * AdamW's state streamed through it, or updated by host threads; each of
 * those with the layers' weights on the host too.  The fastest predicted
 * placement that fits, at equal time (within 1%, below what the model
 * resolves) the one with less host memory. */
ferry_status ferry_policy_auto_state(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, size_t device_mem, size_t host_mem,
				     ferry_calibration_t c, struct ferry_auto_result *out) FERRY_MUST_CHECK;

/* ---- activations.prefetch=auto --------------------------------------------------
 * How far ahead to load each tier's offloaded activations: far enough that
 * a layer's bytes move, read back in the backward and written out in the
 * forward, within the compute of the layers between (d layers ahead leave
 * d layers' backward for the read; a ring of d + 1 slots leaves d layers'
 * forward for the write): depth = the larger of ceil(read / backward) and
 * ceil(write / forward), at least 1, a slower tier never shallower than a
 * faster one before it.  Rates: the tier's (calibrated, else the documented
 * defaults, as the cost model takes them); compute: the calibration's ops
 * of one layer (its recomputations included).  With device_mem (0: any),
 * the deepest tiers are held shallower until the plan fits, if it can. */
struct ferry_prefetch_choice {
	int n;                       /* tiers (1: the activations are on one, or no tiers) */
	int depth[FERRY_PREFETCH_TIERS];
	int layers[FERRY_PREFETCH_TIERS];
	char tier[FERRY_PREFETCH_TIERS][40]; /* "dram", "nvme", ... ("host" without tiers) */
	double read_s[FERRY_PREFETCH_TIERS], write_s[FERRY_PREFETCH_TIERS]; /* one layer's bytes */
	bool rate_measured[FERRY_PREFETCH_TIERS]; /* from the calibration (DRAM: its copies) */
	int wanted[FERRY_PREFETCH_TIERS];         /* the rates' depths, before device_mem */
	double forward_s, backward_s; /* one layer's compute */
	size_t layer_bytes;          /* one layer's offloaded activations */
	size_t peak_bytes;           /* the plan's device peak with the depths chosen */
};
ferry_status ferry_prefetch_auto(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, ferry_calibration_t c, size_t device_mem,
				 struct ferry_prefetch_choice *out) FERRY_MUST_CHECK;
/* The choice into o: its --place with activations.prefetch=D1+D2... (or D)
 * last, written into place (n bytes), which o->place then points to. */
ferry_status ferry_prefetch_apply(const struct ferry_prefetch_choice *ch, struct ferry_exec_opts *o, char *place,
				  size_t n) FERRY_MUST_CHECK;

/* ---- advice when a plan does not fit (src/auto/fit_advice.c) ---------------------- */

/* Writes "name (bytes), ..." for the presets whose plan fits in capacity
 * bytes into buf; returns how many fit. */
int ferry_model_fitting_presets(const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n);
/* The best placement ferry can make that moves something: over where the
 * weights and AdamW's state live, ZeRO's three stages (on the ranks of
 * opts->zero_ranks, else of opts->comm), tiles of tokens and every
 * preset, the plan that keeps the most on the device and still fits in
 * capacity bytes, written for --place into buf; returns its peak bytes,
 * 0 when none fits (buf ""). */
size_t ferry_model_fitting_placement(const struct ferry_model_config *cfg, int B, int T,
				     const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n);

/* Tiles of tokens that make the plan fit in capacity bytes: the loss's,
 * the MLP's, then both (those opts lacks), under opts' policy, else under
 * the first preset with which one does; written as the flags to add
 * ("--loss-tile auto (6.1 MiB)", "--policy nothing_saveable --mlp-tile
 * auto ...") into buf; returns that plan's peak bytes, 0 when none fits
 * (buf ""). */
size_t ferry_model_fitting_tiles(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
