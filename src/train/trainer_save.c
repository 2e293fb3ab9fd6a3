/*
 * Saving a run: the checks on the path (never over the run's own inputs),
 * the state it records, the parameters every rank must agree on, and the
 * atomic commit of model and state.
 */
#include "train/trainer_internal.h"
#include "ferry/comm.h"
#include "ferry/hf_checkpoint.h"
#include "core/error.h"
#include "ckpt/commit.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether a and b name one file or directory (both there, same inode). */
static bool same_path(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* The checkpoint the run starts from may be saved over as a whole (--resume
 * m.bin --save m.bin), but no file of another save path may replace one of
 * its files (--checkpoint ck.bin --save ck.bin.state would write a model
 * over its state). */
static ferry_status check_start(const char *path, bool hf, const char *start)
{
	static const char *const hf_files[] = { FERRY_HF_CONFIG_NAME, FERRY_HF_WEIGHTS_NAME, FERRY_HF_INDEX_NAME };
	bool start_hf = ferry_checkpoint_is_hf(start);
	char file[4200];
	ferry_status st;

	if (same_path(path, start))
		return FERRY_OK;
	st = ferry_ckpt_check_not_input(path, hf, start, "checkpoint this run starts from");
	if (!st && ferry_checkpoint_state_path(start, start_hf, file, sizeof(file)) == FERRY_OK)
		st = ferry_ckpt_check_not_input(path, hf, file, "training state of the checkpoint this run starts from");
	for (int i = 0; !st && start_hf && i < 3; i++) {
		snprintf(file, sizeof(file), "%s/%s", start, hf_files[i]);
		st = ferry_ckpt_check_not_input(path, hf, file, "file of the checkpoint this run starts from");
	}
	return st;
}

/* No file the save would replace is a training or validation shard, or a
 * file of the checkpoint the run starts from in another role. */
static ferry_status check_inputs(ferry_trainer_t tr, const char *path)
{
	const char *start = tr->opts.resume ? tr->opts.resume : tr->opts.checkpoint;
	const char *globs[2] = { tr->opts.data, tr->opts.val_data };
	const char *what[2] = { "training shard", "validation shard" };
	bool hf = ferry_checkpoint_model_is_hf(ferry_model_config(tr->model));
	ferry_status st = FERRY_OK;

	for (int k = 0; k < 2 && !st; k++) {
		const char **files;
		glob_t g;

		if (!globs[k])
			continue;
		st = ferry_trainer_glob_files(globs[k], &g, &files);
		if (st == FERRY_ERR_IO)
			st = FERRY_OK; /* nothing there, nothing to replace */
		for (size_t i = 0; !st && files && i < g.gl_pathc; i++)
			st = ferry_ckpt_check_not_input(path, hf, files[i], what[k]);
		ferry_free(files);
		globfree(&g);
	}
	return st || !start ? st : check_start(path, hf, start);
}

ferry_status ferry_trainer_check_save_path(ferry_trainer_t tr, const char *path)
{
	const struct ferry_model_config *cfg = ferry_model_config(tr->model);
	ferry_status st = ferry_checkpoint_check_save_path(path, cfg);

	if (!st && tr->opts.save_dtype == FERRY_SAVE_BF16 && !ferry_checkpoint_model_is_hf(cfg))
		return ferry_error(FERRY_ERR_INVALID, "%s: an llm.c model file holds fp32 weights only (bf16 is for "
				   "Hugging Face directories)", path);
	return st ? st : check_inputs(tr, path);
}

/* The training state a save records. */
static void state_of(ferry_trainer_t tr, struct ferry_train_state *s)
{
	const struct ferry_train_opts *o = &tr->opts;

	memset(s, 0, sizeof(*s));
	s->step = tr->step;
	s->rng = tr->rng;
	s->data_shards = ferry_loader_num_shards(tr->train);
	s->total_steps = o->steps;
	s->warmup = o->warmup;
	s->lr = o->lr;
	s->final_lr_frac = o->final_lr_frac;
	s->lr_schedule = o->lr_schedule;
	s->min_lr = o->min_lr;
	s->decay_frac = o->decay_frac;
	s->grad_accum = o->grad_accum;
	s->B = o->B * tr->ranks; /* the global batch: a run on other ranks splits it */
	s->T = o->T;
	s->seed = o->seed;
	s->adamw = o->adamw;
	s->adamw.lr = 0;
	ferry_train_place_of(&o->exec, s->place, sizeof(s->place));
	s->data_hash = tr->data_hash;
	if (strlen(o->data) <= FERRY_STATE_GLOB_MAX)
		snprintf(s->data, sizeof(s->data), "%s", o->data);
	if (o->val_data && strlen(o->val_data) <= FERRY_STATE_GLOB_MAX)
		snprintf(s->val_data, sizeof(s->val_data), "%s", o->val_data);
	/* where the saved run's next batch starts, not the one read ahead */
	s->shuffle = ferry_loader_shuffled(tr->train);
	s->data_shard = tr->pos_shard;
	s->data_offset = tr->pos_offset;
	s->data_epoch = tr->pos_epoch;
	if (!tr->have_next) {
		ferry_loader_position(tr->train, &s->data_shard, &s->data_offset);
		s->data_epoch = ferry_loader_epoch(tr->train);
	}
}

/* Several ranks: whether every rank's parameters are rank 0's (they are
 * meant to stay equal bit for bit), the same answer on every rank. */
static ferry_status same_params(ferry_trainer_t tr, uint64_t hash)
{
	uint64_t *all = ferry_calloc((size_t)tr->ranks, sizeof(*all));
	ferry_status st = all ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "save: out of host memory");

	if (!st)
		st = ferry_comm_all_gather(tr->comm, &hash, all, sizeof(hash), FERRY_COMM_BYTE, NULL);
	for (int r = 1; !st && r < tr->ranks; r++)
		if (all[r] != all[0])
			st = ferry_error(FERRY_ERR_INVALID, "rank %d's parameters differ from rank 0's (hash %016llx, "
					 "%016llx): not saved", r, (unsigned long long)all[r], (unsigned long long)all[0]);
	ferry_free(all);
	return st;
}

/* What a save writes, read from the model: parameters (and their hash),
 * moments.  With the moments split over the ranks (--zero 1) every rank
 * reads them (a collective), and the parameters too when the master
 * weights are split (--zero 1 with --offload-optimizer cpu or stream):
 * after the ranks agree to save. */
struct save_state {
	const float *params;  /* the model's own, in place, or the copies below */
	float *mom, *var;
	float *own_params, *own_mom, *own_var;
	uint64_t hash;
};

/* Where a save reads from: the model's host buffers in place where it can
 * (no copy of tens of GB), else copies allocated here. */
static ferry_status save_alloc(ferry_trainer_t tr, struct save_state *s)
{
	size_t bytes = ferry_model_num_params(tr->model) * sizeof(float);
	ferry_status st = FERRY_OK;

	if (!(s->params = ferry_model_params_in_place(tr->model)) &&
	    !(st = ferry_host_alloc(tr->be, bytes, (void **)&s->own_params)))
		s->params = s->own_params;
	if (!st && !ferry_model_opt_state_in_place(tr->model, &s->mom, &s->var) &&
	    !(st = ferry_host_alloc(tr->be, bytes, (void **)&s->own_mom)) &&
	    !(st = ferry_host_alloc(tr->be, bytes, (void **)&s->own_var))) {
		s->mom = s->own_mom;
		s->var = s->own_var;
	}
	return st;
}

static ferry_status save_params(ferry_trainer_t tr, struct save_state *s)
{
	ferry_status st = s->own_params ? ferry_model_get_params(tr->model, s->own_params) : FERRY_OK;

	if (!st)
		s->hash = ferry_params_hash(s->params, ferry_model_num_params(tr->model));
	return st;
}

/* The moments, copied unless read in place. */
static ferry_status save_moments(ferry_trainer_t tr, struct save_state *s)
{
	return s->own_mom ? ferry_model_get_opt_state(tr->model, s->own_mom, s->own_var) : FERRY_OK;
}

static ferry_status save_write(ferry_trainer_t tr, const char *path, const struct save_state *s)
{
	struct ferry_train_state info;

	state_of(tr, &info);
	info.params_hash = s->hash;
	return ferry_checkpoint_save_as(path, ferry_model_config(tr->model), s->params, &info, s->mom, s->var,
					ferry_model_num_params(tr->model),
					&(struct ferry_save_opts){ tr->opts.resume ? tr->opts.resume : tr->opts.checkpoint,
								   tr->opts.save_dtype, tr->opts.tokenizer });
}

/* Several ranks: every rank's parameters checked against rank 0's, the
 * moments gathered, rank 0 writes; the same status on every rank. */
static ferry_status save_ranks(ferry_trainer_t tr, const char *path, struct save_state *s)
{
	ferry_status st = ferry_comm_agree(tr->comm, save_params(tr, s));

	if (!st)
		st = same_params(tr, s->hash);
	if (!st)
		st = save_moments(tr, s);
	if (!st && tr->rank == 0)
		st = save_write(tr, path, s);
	return ferry_comm_agree(tr->comm, st);
}

ferry_status ferry_trainer_save(ferry_trainer_t tr, const char *path)
{
	size_t n = ferry_model_num_params(tr->model);
	struct save_state s = { 0 };
	char sb[FERRY_CKPT_SHORT];
	ferry_status st;

	if (!path)
		return ferry_error(FERRY_ERR_INVALID, "save: NULL path");
	if (tr->diverged_at)
		return ferry_error(FERRY_ERR_INVALID, "%s: not saved: training diverged at step %d (its loss was "
				   "not finite); the last checkpoint is kept", ferry_trainer_short_path(path, sb), tr->diverged_at);
	if (n > SIZE_MAX / sizeof(float))
		return ferry_error(FERRY_ERR_INVALID, "%zu parameters do not fit host memory", n);
	st = tr->rank == 0 ? check_inputs(tr, path) : FERRY_OK; /* rank 0 writes */
	if (!st)
		st = save_alloc(tr, &s);
	if (tr->ranks > 1 && !(st = ferry_comm_agree(tr->comm, st)))
		st = save_ranks(tr, path, &s);
	else if (tr->ranks == 1 && !st && !(st = save_params(tr, &s)) && !(st = save_moments(tr, &s)))
		st = save_write(tr, path, &s);
	ferry_host_free(tr->be, s.own_var);
	ferry_host_free(tr->be, s.own_mom);
	ferry_host_free(tr->be, s.own_params);
	return st;
}
