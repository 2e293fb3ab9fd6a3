/*
 * Training: a trainer owns a backend, a model (any declared one), the data loaders and
 * the optimizer state, and takes one optimizer step at a time, so a caller
 * (the CLI, a test) decides what to print, when to evaluate and save.
 */
#ifndef FERRY_TRAIN_H
#define FERRY_TRAIN_H

#include "ferry/comm.h"
#include "ferry/model.h"
#include "ferry/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bits of ferry_train_opts.given: the options a caller set explicitly.  On
 * a resume every option whose bit is clear is taken from the saved run's
 * state (when the state recorded it; a version-1 state records the
 * schedule only), and the ones given that differ from the saved run are
 * overrides (ferry_trainer_resume_overrides).  Without a resume the bits
 * do not matter. */
enum {
	FERRY_GIVEN_BATCH = 1u << 0,        /* B */
	FERRY_GIVEN_SEQ = 1u << 1,          /* T */
	FERRY_GIVEN_STEPS = 1u << 2,
	FERRY_GIVEN_LR = 1u << 3,
	FERRY_GIVEN_WARMUP = 1u << 4,
	FERRY_GIVEN_FINAL_LR = 1u << 5,     /* final_lr_frac */
	FERRY_GIVEN_DATA = 1u << 6,         /* the training glob */
	FERRY_GIVEN_SEED = 1u << 7,
	FERRY_GIVEN_WEIGHT_DECAY = 1u << 8, /* adamw.weight_decay */
	FERRY_GIVEN_GRAD_CLIP = 1u << 9,    /* adamw.grad_clip */
	FERRY_GIVEN_ADAMW = 1u << 10,       /* adamw.beta1, beta2, eps */
	FERRY_GIVEN_SHUFFLE = 1u << 11,
	FERRY_GIVEN_LR_SCHEDULE = 1u << 12, /* lr_schedule */
	FERRY_GIVEN_MIN_LR = 1u << 13,      /* min_lr */
	FERRY_GIVEN_DECAY_FRAC = 1u << 14,  /* decay_frac */
	FERRY_GIVEN_GRAD_ACCUM = 1u << 15,  /* grad_accum */
	FERRY_GIVEN_PLACE = 1u << 16,       /* exec's placement: the weights', the
					       optimizer's, the activations' (a
					       resume otherwise takes the saved
					       run's whole, ferry_train_take_place) */
};

/* The learning rate after the linear warmup (ferry_train_lr). */
enum ferry_lr_kind {
	FERRY_LR_COSINE = 0, /* cosine from lr down to the floor at the last step */
	FERRY_LR_LINEAR,     /* a straight line from lr down to the floor */
	FERRY_LR_CONSTANT,   /* lr throughout */
	FERRY_LR_WSD,        /* warmup-stable-decay: lr, then over the last
				decay_frac of the steps a straight line down
				to the floor */
};

struct ferry_train_opts {
	const char *backend;      /* "cpu" (default) or "cuda" */
	size_t device_mem;        /* device arena bytes; 0 = all */
	int threads;              /* CPU threads; 0 = all cores */
	struct ferry_model_config model; /* shape for a fresh model; with a
				     checkpoint, only model.arch counts: when
				     set, it must be the checkpoint's model */
	const char *checkpoint;   /* start from this checkpoint (or NULL): an llm.c
				     file (GPT-2) or a Hugging Face directory
				     (Llama), see ferry/hf_checkpoint.h */
	const char *resume;       /* resume from this checkpoint + its training
				     state (FILE.state, DIR/ferry_state.bin) */
	const char *data;         /* training shards (glob) */
	const char *val_data;     /* validation shards (glob) or NULL; read
				     in order from its start each time */
	bool shuffle;             /* training batches in the shuffled order
				     drawn from seed (ferry/data.h), else in
				     order */
	bool truncate;            /* version-3 data: a document longer than T
				     is cut to T tokens (else refused) */
	int B, T;
	int steps;                /* optimizer steps to reach (total) */
	float lr, final_lr_frac;  /* decay from lr to lr * final_lr_frac ... */
	float min_lr;             /* ... or, when > 0, to min_lr (the floor) */
	int lr_schedule;          /* enum ferry_lr_kind */
	float decay_frac;         /* FERRY_LR_WSD: the share of steps that decay,
				     (0, 1] */
	int warmup;               /* linear warmup steps */
	int grad_accum;           /* micro-batches of B x T per optimizer step
				     (>= 1): their gradients are summed and the
				     step uses the mean over all
				     grad_accum * B * T tokens, the same
				     gradient as one batch of grad_accum * B
				     rows (within rounding: see docs/design.md) */
	struct ferry_adamw adamw; /* lr is taken from the schedule */
	uint64_t seed;
	struct ferry_exec_opts exec; /* activation policy, prefetch depth */
	int save_dtype;           /* enum ferry_save_dtype (ferry/checkpoint.h): how
				     a Hugging Face save holds the weights
				     (default: as the checkpoint the run
				     started from, else fp32) */
	const char *tokenizer;    /* the tokenizer of the data (NULL: none): every
				     save carries it with the model
				     (ferry_save_opts.tokenizer) */
	unsigned given;           /* FERRY_GIVEN_* of the options set explicitly */
	struct ferry_comm *comm;  /* data parallel over these ranks (ferry/comm.h;
				     NULL or one rank: this process alone); see
				     "Many ranks" below */
};

/* Many ranks (opts->comm of several): every rank makes a trainer with the
 * same options and calls step, validate and save in the same order (each
 * is a collective).  B is a rank's rows: the global batch is ranks * B
 * rows, the batch one process reads with B' = ranks * B, of which rank r
 * reads rows r*B .. r*B + B-1 (of every micro-batch, with grad_accum), so
 * the loader's position, saved with the run, is the global batch's and a
 * run resumes on any number of ranks (the state records ranks * B: B not
 * given, each rank takes its share, which must divide it).  Gradients are
 * averaged over the ranks before the norm, the clipping and the update
 * (exec opts' comm: the trainer makes the model's communicator), so every
 * rank's parameters stay equal; step's loss and validate's are the means
 * over all rows.  Rank 0 alone writes a save, after checking that every
 * rank's parameters are its own.  The GPU of a rank is its rank on the
 * machine modulo the GPUs it sees.  Errors: a bad input one rank meets
 * (a missing shard, a bad token, a checkpoint it cannot read) is agreed
 * on (ferry_comm_agree): every rank returns the same status and message
 * (ferry_comm_error_shared), at trainer_create and at each step's batch;
 * an error this rank meets alone mid-step is not (other ranks may wait in
 * a collective: the caller ends the job, ferry_comm_abort). */

/* Defaults: cpu, B 4, T 64, lr 6e-4, cosine to final 0.1 (min_lr 0, decay
 * fraction 0.2 for WSD), warmup 0, one micro-batch a step, AdamW (0.9,
 * 0.95, 1e-8, weight decay 0.1, clip 1.0), seed 1337, shuffled batches. */
void ferry_train_opts_default(struct ferry_train_opts *o);

struct ferry_step_metrics {
	int step;            /* 1-based optimizer step just taken */
	float loss, lr, grad_norm; /* loss: the mean over the counted targets */
	int64_t targets;     /* targets counted in the step's whole batch (all
				ranks, all micro-batches): B * T * grad_accum *
				ranks for token streams, those flagged in
				version-3 data */
	double flops;        /* version-3 data: the step's FLOPs, all ranks,
				attention counted within documents
				(ferry_model_step_flops_at); 0 otherwise */
	double step_ms, tokens_per_s;
	size_t device_peak_bytes;
};

typedef struct ferry_trainer *ferry_trainer_t;
struct ferry_train_state; /* ferry/checkpoint.h */
struct ferry_places;      /* ferry/place.h */

/* Plans memory first: a configuration whose plan exceeds the device arena is
 * refused (FERRY_ERR_DEVICE_MEM) before anything is allocated, with the
 * bytes it needs and the presets that would fit.
 *
 * With opts->resume: the checkpoint is recovered first
 * (ferry_checkpoint_recover), then each option not in opts->given is taken
 * from its state.  The data: without FERRY_GIVEN_DATA the saved run's glob
 * is used (opts->data may be NULL) and must match the same shards (paths
 * and sizes) as at the save, else FERRY_ERR_INVALID ("the data changed");
 * with it, data that differs from the saved run's is an override and is
 * read from its start.  (A version-1 state recorded only the shard count:
 * a different count is refused without FERRY_GIVEN_DATA, an override with
 * it.)  The order: the saved run's (states before version 3: in order)
 * unless FERRY_GIVEN_SHUFFLE; another order than the saved run's is an
 * override, read from the data's start.  The placement: the saved run's
 * (states from version 6; ferry_trainer_saved_place) unless
 * FERRY_GIVEN_PLACE; a different one given is an override.  The same data in the same order
 * continues at the saved position, so a resumed run reads the batches an
 * unbroken run would.  Validation: without opts->val_data the saved run's
 * glob (states from version 4).  A state whose step does not fit an int
 * is refused. */
ferry_status ferry_trainer_create(const struct ferry_train_opts *opts, ferry_trainer_t *out)
	FERRY_MUST_CHECK;
/* The placement a resume on `ranks` ranks takes from a saved state, into
 * buf (n bytes): the state's (version 6), its ZeRO split over `ranks`
 * (none on one); "" when the state records none.  FERRY_ERR_FORMAT for a
 * recorded one that does not parse; errors of ferry_places_format. */
ferry_status ferry_train_state_place(const struct ferry_train_state *s, int ranks, char *buf, size_t n)
	FERRY_MUST_CHECK;
/* e's placement as --place writes it, into buf ("" when it does not fit
 * or does not go together): what a save records. */
void ferry_train_place_of(const struct ferry_exec_opts *e, char *buf, size_t n);
/* Makes place e's whole placement: parsed over the defaults into *keep,
 * the shorthand fields set from it (e->policy points into *keep) and
 * e->place = place (for its host tiers; kept, not copied); e->host_tier
 * is left.  FERRY_ERR_FORMAT when it does not parse or go together. */
ferry_status ferry_train_take_place(struct ferry_exec_opts *e, const char *place, struct ferry_places *keep)
	FERRY_MUST_CHECK;
/* After a resume: the saved run's placement for this run's ranks
 * (ferry_train_state_place; "" when the state records none, or not
 * resumed).  In effect unless opts->given has FERRY_GIVEN_PLACE. */
const char *ferry_trainer_saved_place(ferry_trainer_t tr);
/* The plan the trainer works to. */
const struct ferry_plan *ferry_trainer_plan(ferry_trainer_t tr);
/* The options in effect: opts of ferry_trainer_create with, after a resume,
 * those not given taken from the saved run (steps, B, T, data, ...).
 * Valid until ferry_trainer_free. */
const struct ferry_train_opts *ferry_trainer_opts(ferry_trainer_t tr);
/* After a resume: the learning-rate schedule the saved run followed (a
 * resume with other --steps/--warmup/--lr values follows the new schedule
 * from the saved step on, which callers may want to point out). */
bool ferry_trainer_resumed_schedule(ferry_trainer_t tr, int *total_steps, int *warmup, float *lr,
				    float *final_lr_frac);
/* After a resume: the given options that differ from the saved run, as
 * "batch 16 (saved 8), lr 0.001 (saved 0.002), data 'b_*.bin' (saved
 * 'a_*.bin'; read from its start)" into buf (n bytes, always terminated;
 * "" when none).  Returns how many differ (0 without a resume). */
int ferry_trainer_resume_overrides(ferry_trainer_t tr, char *buf, size_t n);
void ferry_trainer_free(ferry_trainer_t tr);

/* Steps already taken (non-zero after a resume). */
int ferry_trainer_step_count(ferry_trainer_t tr);
ferry_model_t ferry_trainer_model(ferry_trainer_t tr);
ferry_backend_t ferry_trainer_backend(ferry_trainer_t tr);
/* On several ranks: the engine of the gradients' collectives and why, in
 * words ("MPI through pinned host staging: 2 ranks on this machine share
 * 1 GPU, which NCCL refuses"); "" on one rank.  FERRY_COMM_ENGINE=nccl,
 * mpi or auto (the default) chooses it on the CUDA backend. */
const char *ferry_trainer_comm_engine(ferry_trainer_t tr);

/* One optimizer step on the next training batch.  A loss or gradient norm
 * that is not finite stops training: FERRY_ERR_INVALID, "step 12: the loss
 * is nan (gradient norm nan): training diverged (learning rate ...);
 * stopped, ...", and from then on every step and save of this trainer is
 * refused, so nothing is saved over the last good checkpoint. */
ferry_status ferry_trainer_step(ferry_trainer_t tr, struct ferry_step_metrics *out)
	FERRY_MUST_CHECK;
/* Mean loss over the first n batches of the validation data (from its
 * start, forward only). */
ferry_status ferry_trainer_validate(ferry_trainer_t tr, int n_batches, float *loss)
	FERRY_MUST_CHECK;
/* Saves the model in its own kind of checkpoint and its training state as
 * one commit (ferry_checkpoint_save_as, see ferry/checkpoint.h): GPT-2 as
 * an llm.c file at path plus path.state, a Llama as a Hugging Face
 * directory at path (config.json, model.safetensors in opts.save_dtype,
 * ferry_state.bin, and the tokenizer files and special token ids of the
 * checkpoint the run started or resumed from).  The state
 * records a hash of the parameters, so a resume refuses a model and state
 * from different saves.  A path whose files are training or validation
 * shards is refused (ferry_trainer_check_save_path). */
ferry_status ferry_trainer_save(ferry_trainer_t tr, const char *path) FERRY_MUST_CHECK;
/* Everything ferry_trainer_save checks before writing, for a caller to
 * refuse a save path before step 1: ferry_checkpoint_check_save_path for
 * this model, a BF16 save_dtype for an llm.c file, and that no file the save would replace (the model, its
 * state; a directory's checkpoint files) is one of the training or
 * validation shards, or a file of the checkpoint the run started from
 * (its model, its state) unless the save is to that checkpoint's own path
 * (same device and inode, or for a file not yet there the same real path):
 * FERRY_ERR_INVALID naming both. */
ferry_status ferry_trainer_check_save_path(ferry_trainer_t tr, const char *path) FERRY_MUST_CHECK;

/* Learning rate at 0-based step s: linear warmup over `warmup` steps, then
 * cosine decay to lr * final_frac at `total`. */
float ferry_lr_schedule(int s, int total, int warmup, float lr, float final_frac);
/* Learning rate of a run with options o at 0-based step s: lr * (s + 1) /
 * warmup during the warmup, then o->lr_schedule's curve from lr at step
 * warmup to the floor (min_lr when > 0, else lr * final_lr_frac) at the
 * last step, steps - 1.  Writing p for the progress through the decay
 * (0 at its first step, 1 at the last) and F for the floor: cosine
 * F + (lr - F)(1 + cos(pi p))/2 with p = (s - warmup) / (steps - warmup - 1);
 * linear lr - (lr - F) p, p the same; constant lr; WSD lr until the last
 * D = round(decay_frac * steps) steps (never into the warmup), then
 * lr - (lr - F) p with p = (s - start + 1) / (steps - start), start the
 * first decaying step, so the first decaying step is already below lr and
 * the last is F. */
float ferry_train_lr(const struct ferry_train_opts *o, int s);

/* Mean loss of a model over the first n batches of a data glob, read in
 * order.  FERRY_ERR_INVALID when the data holds fewer than n batches
 * (rather than reading the first ones again) or a batch's loss is not
 * finite (values that overflow). */
ferry_status ferry_evaluate(ferry_model_t m, const char *data_glob, int B, int T, int n_batches,
			    float *loss) FERRY_MUST_CHECK;
/* Version-3 data (packed documents; m made with ferry_exec_opts.packed):
 * every document read exactly once, packed into rows of T (B rows a
 * forward, the last filled up with padding), cut to T tokens with
 * truncate (else a longer one is refused); *loss the mean cross-entropy
 * over the counted targets, *count how many. */
ferry_status ferry_evaluate_docs(ferry_model_t m, const char *data_glob, int B, int T, bool truncate,
				 float *loss, int64_t *count) FERRY_MUST_CHECK;

/* A rank's cores (docs/distributed.md, "Cores and NUMA nodes"). */
struct ferry_rank_cores {
	int threads; /* the threads it should run: its CPUs, or its share of
			CPUs other ranks of its machine run on too */
	int cpus;    /* the CPUs it runs on */
	int sharing; /* ranks of its machine that had its CPU mask (1: the
			launcher bound it apart) */
	bool bound;  /* ferry bound it to its part of that mask */
	int node;    /* the NUMA node of all its CPUs; -1: several, unknown */
	char list[96]; /* its CPUs as a cpulist ("0-3,8"), cut short if long */
};
/* Every rank of comm (a collective): ranks of one machine that share one
 * CPU mask split it, each binding all its threads to its part (in node
 * order, so a part keeps to one node where the counts allow); a mask the
 * launcher gave one rank alone is kept.  *out is filled also on an error
 * (a bind that failed: the rank runs unbound). */
ferry_status ferry_rank_cores_bind(ferry_comm_t comm, struct ferry_rank_cores *out) FERRY_MUST_CHECK;
/* Part j of k of mask's CPUs taken in order of node_of_cpu (then number;
 * CPUs of node -1 last), contiguous, into part; its CPU count (0 when mask
 * has fewer than k CPUs or j is not below k). */
int ferry_rank_cores_part(const uint64_t mask[FERRY_CPU_WORDS], const int *node_of_cpu, int k, int j,
			  uint64_t part[FERRY_CPU_WORDS]);
/* mask as a cpulist, "0-3,8" ("" when empty; cut short to fit n). */
void ferry_cpulist_format(const uint64_t mask[FERRY_CPU_WORDS], char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
