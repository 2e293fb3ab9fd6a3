/* The training loop's pieces: one step, validation, save and resume. */
#include "ferry/train.h"
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/policy.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct ferry_trainer {
	struct ferry_train_opts opts;
	ferry_backend_t be;
	ferry_model_t model;
	ferry_loader_t train, val;
	struct ferry_plan plan;
	int32_t *inputs, *targets;     /* host [2][B*T]: this step's batch, then ... */
	int32_t *next_inputs, *next_targets; /* ... and the next, read while the device works */
	bool have_next;
	int64_t pos_shard, pos_offset; /* the loader's position after this step's batch */
	int step;                      /* optimizer steps taken */
	uint64_t rng;
	bool resumed;
	struct ferry_train_state saved; /* what the resumed state recorded */
};

void ferry_train_opts_default(struct ferry_train_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = "cpu";
	o->B = 4;
	o->T = 64;
	o->steps = 100;
	o->lr = 6e-4f;
	o->final_lr_frac = 0.1f;
	o->adamw = (struct ferry_adamw){ .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					 .weight_decay = 0.1f, .grad_clip = 1.0f };
	o->seed = 1337;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Loads parameters (and with resume, optimizer state and position) from
 * either kind of checkpoint: an llm.c FILE with FILE.state, or a Hugging
 * Face directory with DIR/ferry_state.bin. */
static ferry_status load_start(ferry_trainer_t tr, const char *path, bool resume)
{
	size_t n = ferry_model_num_params(tr->model);
	struct ferry_model_config cfg;
	struct ferry_train_state st_info;
	float *buf = NULL, *mom = NULL, *var = NULL;
	char sp[4096];
	ferry_status st;

	st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&buf);
	if (st)
		return st;
	st = ferry_checkpoint_any_read(path, &cfg, buf, n);
	if (!st)
		st = ferry_model_set_params(tr->model, buf);
	if (st || !resume)
		goto out;
	st = ferry_checkpoint_state_path(path, ferry_checkpoint_is_hf(path), sp, sizeof(sp));
	if (!st)
		st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&mom);
	if (!st)
		st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&var);
	if (!st)
		st = ferry_state_read(sp, &st_info, mom, var, n);
	if (!st && st_info.params_hash != ferry_params_hash(buf, n))
		st = ferry_error(FERRY_ERR_FORMAT, "%s and %s are from different saves (was a save "
				 "interrupted?): refusing to resume from the mix", path, sp);
	if (!st && st_info.data_shards != ferry_loader_num_shards(tr->train))
		st = ferry_error(FERRY_ERR_INVALID, "%s was saved at shard %lld of %lld, but '%s' now matches "
				 "%d shards: the data changed", sp, (long long)st_info.data_shard,
				 (long long)st_info.data_shards, tr->opts.data, ferry_loader_num_shards(tr->train));
	if (!st)
		st = ferry_model_set_opt_state(tr->model, mom, var);
	if (!st)
		st = ferry_loader_seek(tr->train, st_info.data_shard, st_info.data_offset);
	if (!st) {
		tr->step = (int)st_info.step;
		tr->rng = st_info.rng;
		tr->resumed = true;
		tr->saved = st_info;
	}
out:
	ferry_host_free(tr->be, var);
	ferry_host_free(tr->be, mom);
	ferry_host_free(tr->be, buf);
	return st;
}

/* The model of the checkpoint at path, of either kind: the checkpoint says
 * which model it is, and a model asked for (opts->model.arch) must agree. */
static ferry_status start_config(const struct ferry_train_opts *opts, const char *path,
				 struct ferry_model_config *cfg)
{
	ferry_status st = ferry_checkpoint_any_read_config(path, cfg);

	if (!st && opts->model.arch[0] && strcmp(opts->model.arch, cfg->arch) != 0)
		st = ferry_error(FERRY_ERR_INVALID, "model %s asked for, but %s holds a %s (%s)", opts->model.arch,
				 path, cfg->arch,
				 ferry_checkpoint_is_hf(path) ? "Hugging Face checkpoint" : "llm.c checkpoint");
	return st;
}

int ferry_model_fitting_presets(const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, size_t capacity, char *buf, size_t n)
{
	size_t used = 0;
	int count = 0;

	if (n)
		buf[0] = 0;
	for (int i = 0; i < ferry_policy_preset_count(); i++) {
		struct ferry_exec_opts o = *opts;
		struct ferry_plan p;

		o.policy = ferry_policy_preset_name(i);
		if (ferry_model_plan(cfg, B, T, &o, &p) != FERRY_OK || p.mem.peak_bytes > capacity)
			continue;
		count++;
		if (used + 80 < n)
			used += (size_t)snprintf(buf + used, n - used, "%s%s (%zu bytes)", used ? ", " : "",
						 o.policy, p.mem.peak_bytes);
	}
	return count;
}

/* Refuses a plan larger than the device, naming the presets that fit. */
static ferry_status check_fits(ferry_trainer_t tr, const struct ferry_model_config *cfg)
{
	size_t cap = ferry_backend_mem_capacity(tr->be), need = tr->plan.mem.peak_bytes;
	char fits[1024];

	if (need <= cap)
		return FERRY_OK;
	if (!ferry_model_fitting_presets(cfg, tr->opts.B, tr->opts.T, &tr->opts.exec, cap, fits, sizeof(fits)))
		snprintf(fits, sizeof(fits), "none: use a smaller batch or model");
	return ferry_error(FERRY_ERR_DEVICE_MEM,
			   "policy %s needs %zu bytes of device memory, the device has %zu; presets that fit: %s",
			   tr->plan.policy, need, cap, fits);
}

ferry_status ferry_trainer_create(const struct ferry_train_opts *opts, ferry_trainer_t *out)
{
	struct ferry_backend_opts bo = { .device_mem = opts->device_mem, .threads = opts->threads };
	struct ferry_model_config cfg = opts->model;
	const char *start = opts->resume ? opts->resume : opts->checkpoint;
	ferry_trainer_t tr;
	ferry_status st;
	size_t N = (size_t)opts->B * opts->T;

	*out = NULL;
	if (opts->B < 1 || opts->T < 1)
		return ferry_error(FERRY_ERR_INVALID, "batch size (%d) and sequence length (%d) must be positive",
				   opts->B, opts->T);
	if (opts->steps < 0)
		return ferry_error(FERRY_ERR_INVALID, "steps (%d) must not be negative", opts->steps);
	if (!(opts->lr > 0) || !isfinite(opts->lr))
		return ferry_error(FERRY_ERR_INVALID, "learning rate must be positive");
	if (!opts->data)
		return ferry_error(FERRY_ERR_INVALID, "no training data given");
	if (start && (st = start_config(opts, start, &cfg)))
		return st;
	st = ferry_model_config_complete(&cfg);
	if (st)
		return st;
	if (opts->T > cfg.max_seq)
		return ferry_error(FERRY_ERR_INVALID, "sequence length %d is longer than the model's maximum %d",
				   opts->T, cfg.max_seq);

	tr = ferry_calloc(1, sizeof(*tr));
	if (!tr)
		return ferry_error(FERRY_ERR_NOMEM, "trainer: out of host memory");
	tr->opts = *opts;
	tr->opts.backend = opts->backend ? opts->backend : "cpu";
	tr->opts.exec.act_dtype = ferry_backend_act_dtype(tr->opts.backend);
	tr->rng = opts->seed;
	st = ferry_model_plan(&cfg, opts->B, opts->T, &tr->opts.exec, &tr->plan);
	if (st)
		goto fail;
	st = ferry_backend_open(tr->opts.backend, &bo, &tr->be);
	if (st)
		goto fail;
	st = check_fits(tr, &cfg);
	if (st)
		goto fail;
	st = ferry_loader_open(opts->data, opts->B, opts->T, cfg.vocab, &tr->train);
	if (st)
		goto fail;
	if (opts->val_data) {
		st = ferry_loader_open(opts->val_data, opts->B, opts->T, cfg.vocab, &tr->val);
		if (st)
			goto fail;
	}
	st = ferry_model_create(tr->be, &cfg, opts->B, opts->T, &tr->opts.exec, &tr->model);
	if (st)
		goto fail;
	st = ferry_host_alloc(tr->be, 2 * N * sizeof(int32_t), (void **)&tr->inputs);
	if (!st)
		st = ferry_host_alloc(tr->be, 2 * N * sizeof(int32_t), (void **)&tr->targets);
	if (!st) {
		tr->next_inputs = tr->inputs + N;
		tr->next_targets = tr->targets + N;
	}
	if (st)
		goto fail;
	if (start)
		st = load_start(tr, start, opts->resume != NULL);
	else
		st = ferry_model_init_random(tr->model, opts->seed);
	if (st)
		goto fail;
	*out = tr;
	return FERRY_OK;
fail:
	ferry_trainer_free(tr);
	return st;
}

void ferry_trainer_free(ferry_trainer_t tr)
{
	if (!tr)
		return;
	if (tr->be) {
		ferry_host_free(tr->be, tr->inputs);
		ferry_host_free(tr->be, tr->targets);
	}
	ferry_model_free(tr->model);
	ferry_loader_free(tr->train);
	ferry_loader_free(tr->val);
	ferry_backend_close(tr->be);
	ferry_free(tr);
}

int ferry_trainer_step_count(ferry_trainer_t tr) { return tr->step; }
ferry_model_t ferry_trainer_model(ferry_trainer_t tr) { return tr->model; }
const struct ferry_plan *ferry_trainer_plan(ferry_trainer_t tr) { return &tr->plan; }
ferry_backend_t ferry_trainer_backend(ferry_trainer_t tr) { return tr->be; }

/* This step's batch: the one read ahead during the last step, if any. */
static ferry_status next_batch(ferry_trainer_t tr)
{
	size_t N = (size_t)tr->opts.B * tr->opts.T;

	if (tr->have_next) {
		memcpy(tr->inputs, tr->next_inputs, N * sizeof(int32_t));
		memcpy(tr->targets, tr->next_targets, N * sizeof(int32_t));
		tr->have_next = false;
		return FERRY_OK;
	}
	return ferry_loader_next(tr->train, tr->inputs, tr->targets);
}

ferry_status ferry_trainer_step(ferry_trainer_t tr, struct ferry_step_metrics *m)
{
	const struct ferry_train_opts *o = &tr->opts;
	struct ferry_adamw opt = o->adamw;
	double t0 = now_ms();
	ferry_status st;

	memset(m, 0, sizeof(*m));
	opt.lr = ferry_lr_schedule(tr->step, o->steps, o->warmup, o->lr, o->final_lr_frac);
	if ((st = next_batch(tr)))
		return st;
	ferry_loader_position(tr->train, &tr->pos_shard, &tr->pos_offset);
	if ((st = ferry_model_step_submit(tr->model, tr->inputs, tr->targets, o->B, o->T)))
		return st;
	/* the host reads the next batch while the device runs this one */
	if (tr->step + 1 < o->steps && ferry_loader_next(tr->train, tr->next_inputs, tr->next_targets) == FERRY_OK)
		tr->have_next = true;
	if ((st = ferry_model_step_finish(tr->model, &opt, tr->step + 1, &m->loss, &m->grad_norm)))
		return st;
	tr->step++;
	m->step = tr->step;
	m->lr = opt.lr;
	m->step_ms = now_ms() - t0;
	m->tokens_per_s = (double)o->B * o->T / (m->step_ms / 1e3);
	m->device_peak_bytes = ferry_backend_mem_peak(tr->be);
	return FERRY_OK;
}

ferry_status ferry_trainer_validate(ferry_trainer_t tr, int n_batches, float *loss)
{
	const struct ferry_train_opts *o = &tr->opts;
	double sum = 0;
	ferry_status st;

	if (!tr->val)
		return ferry_error(FERRY_ERR_INVALID, "no validation data given");
	if (n_batches < 1)
		return ferry_error(FERRY_ERR_INVALID, "validation batches (%d) must be positive", n_batches);
	ferry_loader_rewind(tr->val);
	for (int i = 0; i < n_batches; i++) {
		float l;

		st = ferry_loader_next(tr->val, tr->inputs, tr->targets);
		if (!st)
			st = ferry_model_loss(tr->model, tr->inputs, tr->targets, o->B, o->T, &l);
		if (st)
			return st;
		sum += l;
	}
	*loss = (float)(sum / n_batches);
	return FERRY_OK;
}

bool ferry_trainer_resumed_schedule(ferry_trainer_t tr, int *total_steps, int *warmup, float *lr,
				    float *final_lr_frac)
{
	if (!tr->resumed)
		return false;
	*total_steps = (int)tr->saved.total_steps;
	*warmup = tr->saved.warmup;
	*lr = tr->saved.lr;
	*final_lr_frac = tr->saved.final_lr_frac;
	return true;
}

ferry_status ferry_trainer_save(ferry_trainer_t tr, const char *path)
{
	size_t n = ferry_model_num_params(tr->model);
	const struct ferry_train_opts *o = &tr->opts;
	struct ferry_train_state info = {
		.step = tr->step, .rng = tr->rng, .data_shards = ferry_loader_num_shards(tr->train),
		.total_steps = o->steps, .warmup = o->warmup, .lr = o->lr, .final_lr_frac = o->final_lr_frac,
	};
	float *buf = NULL, *mom = NULL, *var = NULL;
	char sp[4096];
	ferry_status st;

	/* where the saved run's next batch starts, not the one read ahead */
	info.data_shard = tr->pos_shard;
	info.data_offset = tr->pos_offset;
	if (!tr->have_next)
		ferry_loader_position(tr->train, &info.data_shard, &info.data_offset);
	st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&buf);
	if (!st)
		st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&mom);
	if (!st)
		st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&var);
	if (!st)
		st = ferry_model_get_params(tr->model, buf);
	if (!st)
		st = ferry_model_get_opt_state(tr->model, mom, var);
	if (!st)
		st = ferry_checkpoint_state_path(path, !strcmp(ferry_model_config(tr->model)->arch, "llama"), sp,
						 sizeof(sp));
	if (!st) {
		info.params_hash = ferry_params_hash(buf, n);
		st = ferry_checkpoint_any_write(path, ferry_model_config(tr->model), buf);
	}
	if (!st)
		st = ferry_state_write(sp, &info, mom, var, n);
	ferry_host_free(tr->be, var);
	ferry_host_free(tr->be, mom);
	ferry_host_free(tr->be, buf);
	return st;
}

ferry_status ferry_evaluate(ferry_model_t m, const char *data_glob, int B, int T, int n_batches,
			    float *loss)
{
	ferry_loader_t loader = NULL;
	int32_t *in = NULL, *tg = NULL;
	size_t N = (size_t)B * T;
	double sum = 0;
	ferry_status st;

	if (n_batches < 1)
		return ferry_error(FERRY_ERR_INVALID, "number of batches (%d) must be positive", n_batches);
	st = ferry_loader_open(data_glob, B, T, ferry_model_config(m)->vocab, &loader);
	if (st)
		return st;
	in = ferry_malloc(N * sizeof(int32_t));
	tg = ferry_malloc(N * sizeof(int32_t));
	if (!in || !tg) {
		st = ferry_error(FERRY_ERR_NOMEM, "evaluate: out of host memory");
		goto out;
	}
	for (int i = 0; i < n_batches; i++) {
		float l;

		st = ferry_loader_next(loader, in, tg);
		if (!st)
			st = ferry_model_loss(m, in, tg, B, T, &l);
		if (st)
			goto out;
		sum += l;
	}
	*loss = (float)(sum / n_batches);
out:
	ferry_free(in);
	ferry_free(tg);
	ferry_loader_free(loader);
	return st;
}
