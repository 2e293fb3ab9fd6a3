/*
 * Training: a trainer owns a backend, a model (any declared one), the data loaders and
 * the optimizer state, and takes one optimizer step at a time, so a caller
 * (the CLI, a test) decides what to print, when to evaluate and save.
 */
#ifndef FERRY_TRAIN_H
#define FERRY_TRAIN_H

#include "ferry/model.h"

#ifdef __cplusplus
extern "C" {
#endif

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
	const char *val_data;     /* validation shards (glob) or NULL */
	int B, T;
	int steps;                /* optimizer steps to reach (total) */
	float lr, final_lr_frac;  /* cosine decay from lr to lr * final_lr_frac */
	int warmup;               /* linear warmup steps */
	struct ferry_adamw adamw; /* lr is taken from the schedule */
	uint64_t seed;
	struct ferry_exec_opts exec; /* activation policy, prefetch depth */
};

/* Defaults: cpu, B 4, T 64, lr 6e-4, final 0.1, warmup 0, AdamW (0.9, 0.95,
 * 1e-8, weight decay 0.1, clip 1.0), seed 1337. */
void ferry_train_opts_default(struct ferry_train_opts *o);

struct ferry_step_metrics {
	int step;            /* 1-based optimizer step just taken */
	float loss, lr, grad_norm;
	double step_ms, tokens_per_s;
	size_t device_peak_bytes;
};

typedef struct ferry_trainer *ferry_trainer_t;

/* Plans memory first: a configuration whose plan exceeds the device arena is
 * refused (FERRY_ERR_DEVICE_MEM) before anything is allocated, with the
 * bytes it needs and the presets that would fit. */
ferry_status ferry_trainer_create(const struct ferry_train_opts *opts, ferry_trainer_t *out)
	FERRY_MUST_CHECK;
/* The plan the trainer works to. */
const struct ferry_plan *ferry_trainer_plan(ferry_trainer_t tr);
/* After a resume: the learning-rate schedule the saved run followed (a
 * resume with other --steps/--warmup/--lr values follows the new schedule
 * from the saved step on, which callers may want to point out). */
bool ferry_trainer_resumed_schedule(ferry_trainer_t tr, int *total_steps, int *warmup, float *lr,
				    float *final_lr_frac);
void ferry_trainer_free(ferry_trainer_t tr);

/* Steps already taken (non-zero after a resume). */
int ferry_trainer_step_count(ferry_trainer_t tr);
ferry_model_t ferry_trainer_model(ferry_trainer_t tr);
ferry_backend_t ferry_trainer_backend(ferry_trainer_t tr);

/* One optimizer step on the next training batch. */
ferry_status ferry_trainer_step(ferry_trainer_t tr, struct ferry_step_metrics *out)
	FERRY_MUST_CHECK;
/* Mean loss over the first n batches of the validation data (from its
 * start, forward only). */
ferry_status ferry_trainer_validate(ferry_trainer_t tr, int n_batches, float *loss)
	FERRY_MUST_CHECK;
/* Writes the model in its own kind of checkpoint and its training state,
 * each file atomically: GPT-2 as an llm.c file at path plus path.state, a
 * Llama as a Hugging Face directory at path (config.json, model.safetensors)
 * plus path/ferry_state.bin.  The state records a hash of the parameters, so
 * a resume refuses a model and state from different saves. */
ferry_status ferry_trainer_save(ferry_trainer_t tr, const char *path) FERRY_MUST_CHECK;

/* Writes "name (bytes), ..." for the presets whose plan fits in capacity
 * bytes into buf; returns how many fit. */
int ferry_model_fitting_presets(const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n);

/* Learning rate at 0-based step s: linear warmup over `warmup` steps, then
 * cosine decay to lr * final_frac at `total`. */
float ferry_lr_schedule(int s, int total, int warmup, float lr, float final_frac);

/* Mean loss of a model over the first n batches of a data glob. */
ferry_status ferry_evaluate(ferry_model_t m, const char *data_glob, int B, int T, int n_batches,
			    float *loss) FERRY_MUST_CHECK;

/* Appends n sampled tokens to a sequence of *len tokens (buffer of cap),
 * sliding the context window to the model's T; temperature 1, top-k 0 = all.
 * rng is advanced. */
ferry_status ferry_model_sample(ferry_model_t m, int32_t *tokens, int *len, int cap, int n,
			       uint64_t *rng) FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
