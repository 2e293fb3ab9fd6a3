/* The training loop's pieces: one step, validation, save and resume. */
#include "train/trainer_internal.h"
#include "ferry/checkpoint.h"
#include "ferry/cost.h"
#include "ferry/comm.h"
#include "comm/comm_pick.h"
#include "sched/comm_stage.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/place.h"
#include "ferry/policy.h"
#include "core/clock.h"
#include "core/error.h"
#include "ckpt/commit.h"
#include "train/vocab_check.h"

#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


void ferry_train_opts_default(struct ferry_train_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = "cpu";
	o->B = 4;
	o->T = 64;
	o->steps = 100;
	o->lr = 6e-4f;
	o->final_lr_frac = 0.1f;
	o->decay_frac = 0.2f;
	o->grad_accum = 1;
	o->adamw = (struct ferry_adamw){ .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					 .weight_decay = 0.1f, .grad_clip = 1.0f };
	o->seed = 1337;
	o->shuffle = true;
}

const char *ferry_trainer_short_path(const char *path, char buf[FERRY_CKPT_SHORT])
{
	return ferry_ckpt_short(path, buf);
}

/* ---- the training data's identity ----------------------------------------------------- */

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The files of a glob in the loader's order (strcmp); *files points into g.
 * The caller frees *files and globfrees g, success or not. */
ferry_status ferry_trainer_glob_files(const char *pattern, glob_t *g, const char ***files)
{
	memset(g, 0, sizeof(*g));
	*files = NULL;
	if (glob(pattern, 0, NULL, g) != 0 || g->gl_pathc == 0)
		return ferry_error(FERRY_ERR_IO, "no files match '%s'", pattern);
	if (g->gl_pathc > SIZE_MAX / sizeof(**files) || !(*files = ferry_malloc(g->gl_pathc * sizeof(**files))))
		return ferry_error(FERRY_ERR_NOMEM, "out of memory matching '%s'", pattern);
	memcpy(*files, g->gl_pathv, g->gl_pathc * sizeof(**files));
	qsort(*files, g->gl_pathc, sizeof(**files), cmp_str);
	return FERRY_OK;
}

/* What identifies the training data: each shard's real path and size, in
 * the loader's order. */
static ferry_status data_hash(const char *pattern, uint64_t *out)
{
	const char **files;
	uint64_t h = FERRY_FNV_INIT;
	glob_t g;
	ferry_status st = ferry_trainer_glob_files(pattern, &g, &files);

	for (size_t i = 0; !st && i < g.gl_pathc; i++) {
		char *real = realpath(files[i], NULL);
		const char *name = real ? real : files[i];
		struct stat sb;
		int64_t size = stat(files[i], &sb) == 0 ? (int64_t)sb.st_size : -1;

		h = fnv_bytes(h, name, strlen(name) + 1);
		h = fnv_bytes(h, &size, sizeof(size));
		free(real);
	}
	ferry_free(files);
	globfree(&g);
	if (!st)
		*out = h;
	return st;
}

/* ---- resuming: the saved run's options ------------------------------------------------- */

/* The options a version-5 state adds: the schedule's curve, floor and
 * decay share, and the micro-batches a step. */
static void take_saved_v5(struct ferry_train_opts *o, const struct ferry_train_state *s)
{
	unsigned g = o->given;

	if (!(g & FERRY_GIVEN_LR_SCHEDULE))
		o->lr_schedule = s->lr_schedule;
	if (!(g & FERRY_GIVEN_MIN_LR)) /* a final fraction given sets the floor instead */
		o->min_lr = (g & FERRY_GIVEN_FINAL_LR) ? 0 : s->min_lr;
	if (!(g & FERRY_GIVEN_DECAY_FRAC) && s->decay_frac > 0)
		o->decay_frac = s->decay_frac;
	if (!(g & FERRY_GIVEN_GRAD_ACCUM) && s->grad_accum > 0)
		o->grad_accum = s->grad_accum;
}

/* Every option not given is the saved run's, where the state recorded it
 * (a version-1 state: the schedule only). */
static void take_saved(struct ferry_train_opts *o, const struct ferry_train_state *s)
{
	unsigned g = o->given;
	bool sched = s->total_steps > 0; /* recorded */

	if (!(g & FERRY_GIVEN_STEPS) && sched)
		o->steps = (int)s->total_steps;
	if (!(g & FERRY_GIVEN_WARMUP) && sched)
		o->warmup = s->warmup;
	if (!(g & FERRY_GIVEN_LR) && s->lr > 0 && isfinite(s->lr))
		o->lr = s->lr;
	if (!(g & FERRY_GIVEN_SHUFFLE))
		o->shuffle = s->shuffle; /* before version 3: in order */
	if (!(g & FERRY_GIVEN_FINAL_LR) && sched)
		o->final_lr_frac = s->final_lr_frac;
	if (s->version >= 5)
		take_saved_v5(o, s);
	if (s->version < 2)
		return;
	if (!(g & FERRY_GIVEN_BATCH) && s->B > 0)
		o->B = s->B;
	if (!(g & FERRY_GIVEN_SEQ) && s->T > 0)
		o->T = s->T;
	if (!(g & FERRY_GIVEN_SEED))
		o->seed = s->seed;
	if (!(g & FERRY_GIVEN_WEIGHT_DECAY))
		o->adamw.weight_decay = s->adamw.weight_decay;
	if (!(g & FERRY_GIVEN_GRAD_CLIP))
		o->adamw.grad_clip = s->adamw.grad_clip;
	if (!(g & FERRY_GIVEN_ADAMW)) {
		o->adamw.beta1 = s->adamw.beta1;
		o->adamw.beta2 = s->adamw.beta2;
		o->adamw.eps = s->adamw.eps;
	}
	if (!(g & FERRY_GIVEN_DATA) && s->data[0])
		o->data = s->data;
	if (!o->val_data && s->val_data[0]) /* version 4 */
		o->val_data = s->val_data;
}

/* The saved run's state header, before anything is built from it. */
static ferry_status read_saved(ferry_trainer_t tr)
{
	const char *path = tr->opts.resume;
	const struct ferry_train_state *s = &tr->saved;
	char sb[FERRY_CKPT_SHORT];
	ferry_status st;

	st = ferry_checkpoint_state_path(path, ferry_checkpoint_is_hf(path), tr->state_path,
					 sizeof(tr->state_path));
	if (!st)
		st = ferry_state_read_info(tr->state_path, &tr->saved);
	if (st)
		return st;
	if (s->step > INT_MAX || s->total_steps > INT_MAX || s->data_shards > INT_MAX)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: step %lld of a %lld-step schedule (%lld data shards) does not fit ferry's "
				   "counters (at most %d): refusing to resume at a wrong step",
				   ferry_trainer_short_path(tr->state_path, sb), (long long)s->step, (long long)s->total_steps,
				   (long long)s->data_shards, INT_MAX);
	take_saved(&tr->opts, s);
	st = ferry_train_state_place(s, tr->ranks, tr->saved_place, sizeof(tr->saved_place));
	if (st)
		return st;
	if (tr->saved_place[0] && !(tr->opts.given & FERRY_GIVEN_PLACE) &&
	    (st = ferry_train_take_place(&tr->opts.exec, tr->saved_place, &tr->saved_places)))
		return st;
	/* the state records the global batch: each rank takes its share */
	if (!(tr->opts.given & FERRY_GIVEN_BATCH) && s->version >= 2 && s->B > 0) {
		if (s->B % tr->ranks)
			return ferry_error(FERRY_ERR_INVALID, "%s: the saved run's batch of %d rows does not split over "
					   "%d ranks: give --batch (rows per rank)", ferry_trainer_short_path(tr->state_path, sb),
					   (int)s->B, tr->ranks);
		tr->opts.B = (int)(s->B / tr->ranks);
	}
	return FERRY_OK;
}

static ferry_status check_opts(const struct ferry_train_opts *o)
{
	if (o->B < 1 || o->T < 1)
		return ferry_error(FERRY_ERR_INVALID, "batch size (%d) and sequence length (%d) must be positive",
				   o->B, o->T);
	if (o->steps < 0 || o->warmup < 0)
		return ferry_error(FERRY_ERR_INVALID, "steps (%d) and warmup (%d) must not be negative", o->steps,
				   o->warmup);
	if (!(o->lr > 0) || !isfinite(o->lr))
		return ferry_error(FERRY_ERR_INVALID, "learning rate must be positive");
	if (!isfinite(o->final_lr_frac))
		return ferry_error(FERRY_ERR_INVALID, "final learning-rate fraction must be finite");
	if (!(o->min_lr >= 0) || !isfinite(o->min_lr) || o->lr_schedule < FERRY_LR_COSINE ||
	    o->lr_schedule > FERRY_LR_WSD || !(o->decay_frac > 0 && o->decay_frac <= 1))
		return ferry_error(FERRY_ERR_INVALID, "learning-rate schedule %d, floor %g or decay fraction %g "
				   "out of range", o->lr_schedule, (double)o->min_lr, (double)o->decay_frac);
	if (o->grad_accum < 1 || o->grad_accum > INT_MAX / o->B)
		return ferry_error(FERRY_ERR_INVALID, "gradient accumulation %d must be at least 1 (and %d x %d "
				   "rows fit an int)", o->grad_accum, o->grad_accum, o->B);
	if (!o->data)
		return ferry_error(FERRY_ERR_INVALID, "no training data given");
	return FERRY_OK;
}

/* Where a resumed run reads on: the saved position in the same data and
 * order; the start of other data given explicitly, or of the same data in
 * another order; other data not given is refused.  pos: shard, offset,
 * epoch. */
static ferry_status resume_position(ferry_trainer_t tr, const struct ferry_train_state *s, int64_t pos[3])
{
	bool given = tr->opts.given & FERRY_GIVEN_DATA, hashed = s->version >= 2 && s->data[0];
	int now = ferry_loader_num_shards(tr->train);
	char sb[FERRY_CKPT_SHORT];

	pos[0] = pos[1] = pos[2] = 0;
	if (hashed ? s->data_hash == tr->data_hash : s->data_shards == now) {
		if ((s->shuffle != 0) != tr->opts.shuffle) {
			tr->order_override = true;
			return FERRY_OK;
		}
		pos[0] = s->data_shard;
		pos[1] = s->data_offset;
		pos[2] = s->data_epoch;
		return FERRY_OK;
	}
	if (given) {
		tr->data_override = true;
		return FERRY_OK;
	}
	if (hashed)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s was saved at shard %lld of %lld of '%s', whose files changed since (%d shards "
				   "now, or other paths or sizes): the data changed; give the data explicitly to "
				   "train on it from its start", ferry_trainer_short_path(tr->state_path, sb), (long long)s->data_shard,
				   (long long)s->data_shards, s->data, now);
	return ferry_error(FERRY_ERR_INVALID, "%s was saved at shard %lld of %lld, but '%s' now matches "
			   "%d shards: the data changed", ferry_trainer_short_path(tr->state_path, sb), (long long)s->data_shard,
			   (long long)s->data_shards, tr->opts.data, now);
}

/* The optimizer state and data position of a resume (params are set). */
static ferry_status load_state(ferry_trainer_t tr, const char *path, const float *params, size_t n)
{
	struct ferry_train_state s;
	float *mom = NULL, *var = NULL, *own_mom = NULL, *own_var = NULL;
	int64_t pos[3];
	char sb[2][FERRY_CKPT_SHORT];
	ferry_status st = FERRY_OK;

	/* straight into the model's host buffers where it has them whole */
	if (!ferry_model_opt_state_in_place(tr->model, &mom, &var) &&
	    !(st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&own_mom)) &&
	    !(st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&own_var))) {
		mom = own_mom;
		var = own_var;
	}
	if (!st)
		st = ferry_state_read(tr->state_path, &s, mom, var, n);
	if (!st && s.params_hash != ferry_params_hash(params, n))
		st = ferry_error(FERRY_ERR_FORMAT, "%s and %s are from different saves (was a save "
				 "interrupted?): refusing to resume from the mix", ferry_trainer_short_path(path, sb[0]),
				 ferry_trainer_short_path(tr->state_path, sb[1]));
	if (!st)
		st = resume_position(tr, &s, pos);
	if (!st && own_mom)
		st = ferry_model_set_opt_state(tr->model, mom, var);
	/* (other data or order: the loader is at its start) */
	if (!st && !tr->data_override && !tr->order_override)
		st = ferry_loader_seek_epoch(tr->train, pos[2], pos[0], pos[1]);
	if (!st) {
		tr->step = (int)s.step;
		tr->rng = s.rng;
		if ((tr->opts.given & FERRY_GIVEN_SEED) && s.version >= 2 && tr->opts.seed != s.seed)
			tr->rng = tr->opts.seed;
		tr->resumed = true;
		tr->saved = s;
	}
	ferry_host_free(tr->be, own_var);
	ferry_host_free(tr->be, own_mom);
	return st;
}

/* Loads parameters (and with resume, optimizer state and position) from
 * either kind of checkpoint: an llm.c FILE with FILE.state, or a Hugging
 * Face directory with DIR/ferry_state.bin. */
static ferry_status load_start(ferry_trainer_t tr, const char *path, bool resume)
{
	size_t n = ferry_model_num_params(tr->model);
	struct ferry_model_config cfg;
	float *buf = NULL;
	ferry_status st;

	if (n > SIZE_MAX / sizeof(float))
		return ferry_error(FERRY_ERR_INVALID, "%zu parameters do not fit host memory", n);
	st = ferry_host_alloc(tr->be, n * sizeof(float), (void **)&buf);
	if (!st)
		st = ferry_checkpoint_any_read(path, &cfg, buf, n);
	if (!st)
		st = ferry_model_set_params(tr->model, buf);
	if (!st && resume)
		st = load_state(tr, path, buf, n);
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

/* What fits when no activation preset does: the placement with offloading
 * that keeps the most on the device, or "none" (tiled: tiles of tokens
 * would fit, said after). */
static void offloaded_advice(ferry_trainer_t tr, const struct ferry_model_config *cfg, size_t cap, bool tiled,
			     char *buf, size_t n)
{
	char place[FERRY_PLACE_CHARS], size[FERRY_SIZE_CHARS];
	size_t peak = ferry_model_fitting_placement(cfg, tr->opts.B, tr->opts.T, &tr->opts.exec, cap, place,
						    sizeof(place));

	if (peak)
		snprintf(buf, n, "none; moving state, the largest plan that fits (%s): --place '%s'",
			 ferry_format_size(peak, size), place);
	else
		snprintf(buf, n, tiled ? "none" : "none: use a smaller batch or model");
}

/* Refuses a plan larger than the device, naming the presets that fit. */
static ferry_status check_fits(ferry_trainer_t tr, const struct ferry_model_config *cfg)
{
	size_t cap = ferry_backend_mem_capacity(tr->be), need = tr->plan.mem.peak_bytes;
	const char *note = ferry_backend_mem_note(tr->be);
	char fits[FERRY_PLACE_CHARS + 128], sizes[2][FERRY_SIZE_CHARS];

	char tiles[256];
	bool tiled;
	int n;

	if (need <= cap)
		return FERRY_OK;
	n = ferry_model_fitting_presets(cfg, tr->opts.B, tr->opts.T, &tr->opts.exec, cap, fits, sizeof(fits));
	tiled = ferry_model_fitting_tiles(cfg, tr->opts.B, tr->opts.T, &tr->opts.exec, cap, tiles, sizeof(tiles));
	if (!n)
		offloaded_advice(tr, cfg, cap, tiled, fits, sizeof(fits));
	if (tiled)
		snprintf(fits + strlen(fits), sizeof(fits) - strlen(fits), "; tiles of tokens that fit: %s", tiles);
	return ferry_error(FERRY_ERR_DEVICE_MEM,
			   "policy %s needs %s of device memory (%zu bytes), the device has %s%s%s%s; presets that "
			   "fit: %s", tr->plan.policy, ferry_format_size(need, sizes[0]), need,
			   ferry_format_size(cap, sizes[1]), note[0] ? " (" : "", note,
			   note[0] ? "; --device-mem sets it)" : "", fits);
}

/* On a resume: recovers the checkpoint and takes the options not given
 * from its state; checks the options and works out the model's config. */
static ferry_status settle_options(ferry_trainer_t tr, struct ferry_model_config *cfg)
{
	const struct ferry_train_opts *o = &tr->opts;
	const char *start = o->resume ? o->resume : o->checkpoint;
	ferry_status st = FERRY_OK;

	*cfg = o->model;
	if (start)
		st = ferry_checkpoint_recover(start);
	if (!st && o->resume)
		st = read_saved(tr);
	if (!st)
		st = check_opts(o);
	if (!st && start)
		st = start_config(o, start, cfg);
	if (!st)
		st = ferry_model_config_complete(cfg);
	if (!st && o->T > cfg->max_seq)
		st = ferry_error(FERRY_ERR_INVALID, "sequence length %d is longer than the model's maximum %d",
				 o->T, cfg->max_seq);
	return st;
}

/* A loader of the global batch (rows of B per rank, times ranks) that
 * reads this rank's part of it. */
static ferry_status open_part(ferry_trainer_t tr, const char *glob, int micro, int vocab, ferry_loader_t *out)
{
	const struct ferry_train_opts *o = &tr->opts;
	const struct ferry_loader_opts lo = { .truncate = o->truncate };
	ferry_status st = ferry_loader_open_opts(glob, o->B * tr->ranks * micro, o->T, vocab, &lo, out);

	if (!st && tr->ranks > 1)
		st = ferry_loader_set_part(*out, o->B * tr->ranks, o->B * tr->rank, o->B);
	return st;
}

/* Backend, model, loaders and batch buffers, after the plan fits. */
static ferry_status build(ferry_trainer_t tr, const struct ferry_model_config *cfg)
{
	struct ferry_train_opts *o = &tr->opts;
	struct ferry_backend_opts bo = { .device_mem = o->device_mem, .threads = o->threads,
					 .device_index = tr->comm ? ferry_comm_local_rank(tr->comm) : 0 };
	size_t N, bytes;
	ferry_status st;

	/* the loader reads a step's grad_accum micro-batches as one batch of
	 * grad_accum * B rows: micro-batch k is rows k*B .. k*B + B-1 (of
	 * ranks * B rows each, of which this rank reads its B) */
	if (o->B > INT_MAX / tr->ranks / o->grad_accum ||
	    __builtin_mul_overflow((size_t)o->B * o->grad_accum, (size_t)o->T, &N) ||
	    __builtin_mul_overflow(N, 2 * sizeof(int32_t), &bytes))
		return ferry_error(FERRY_ERR_INVALID, "batch %d x %d is too large", o->B, o->T);
	/* packed documents: the model takes their positions (token streams: no such tensor) */
	tr->packed = ferry_data_is_packed(o->data);
	o->exec.packed = tr->packed || (o->val_data && ferry_data_is_packed(o->val_data));
	st = ferry_model_plan(cfg, o->B, o->T, &o->exec, &tr->plan);
	if (!st)
		st = ferry_backend_open(o->backend, &bo, &tr->be);
	if (!st)
		st = check_fits(tr, cfg);
	if (!st)
		st = open_part(tr, o->data, o->grad_accum, cfg->vocab, &tr->train);
	if (!st && o->shuffle)
		st = ferry_loader_shuffle(tr->train, o->seed);
	if (!st && o->val_data)
		st = open_part(tr, o->val_data, 1, cfg->vocab, &tr->val);
	if (!st) /* data of another tokenizer: refused now, not at its first bad batch */
		st = ferry_vocab_check(o->data, o->val_data, cfg->vocab, !o->checkpoint && !o->resume);
	if (!st)
		st = ferry_model_create(tr->be, cfg, o->B, o->T, &o->exec, &tr->model);
	if (!st)
		st = ferry_host_alloc(tr->be, bytes, (void **)&tr->inputs);
	if (!st)
		st = ferry_host_alloc(tr->be, bytes, (void **)&tr->targets);
	if (!st && o->exec.packed && !(tr->positions = ferry_malloc(bytes)))
		st = ferry_error(FERRY_ERR_NOMEM, "out of memory for the batches' positions");
	if (!st) {
		tr->next_positions = tr->positions ? tr->positions + N : NULL;
		tr->next_inputs = tr->inputs + N;
		tr->next_targets = tr->targets + N;
		st = data_hash(o->data, &tr->data_hash);
	}
	return st;
}

/* A device backend's engine (comm/comm_pick.h), the same on every rank
 * (a collective). */
static ferry_status pick_engine(ferry_trainer_t tr, bool *nccl)
{
	ferry_status st = ferry_comm_pick(tr->comm, nccl, tr->engine_why, sizeof(tr->engine_why));
	int32_t v[2] = { *nccl, !*nccl }; /* some ranks NCCL, some MPI: both 1 */

	if ((st = ferry_comm_agree(tr->comm, st)) ||
	    (st = ferry_comm_all_reduce(tr->comm, v, 2, FERRY_COMM_I32, FERRY_COMM_MAX, NULL)))
		return st;
	if (v[0] && v[1])
		return ferry_error(FERRY_ERR_INVALID, "the ranks pick different collectives engines (set "
				   "FERRY_COMM_ENGINE alike on every rank: mpirun -x FERRY_COMM_ENGINE=...)");
	return FERRY_OK;
}

/* FERRY_COMM_ENGINE as the backend can take it: NCCL averages device
 * buffers, which the CPU backend has none of. */
static ferry_status step_engine_check(ferry_trainer_t tr)
{
	const char *v = getenv("FERRY_COMM_ENGINE");

	if (v && !strcmp(v, "nccl") && !strcmp(tr->opts.backend, "cpu")) /* (whether NCCL is built in or not) */
		return ferry_error(FERRY_ERR_UNSUPPORTED, "FERRY_COMM_ENGINE=nccl: NCCL runs on GPU buffers; the cpu "
				   "backend's collectives run on MPI (FERRY_COMM_ENGINE=mpi or auto)");
	return ferry_comm_engine_check();
}

/* Several ranks: the model's comm stream gets a communicator of its own,
 * NCCL's on a GPU when it is picked, else a duplicate of the ranks'
 * (collectives: every rank makes it, before anything that may fail on
 * one rank only); with NCCL (or staging forced, to test that on the
 * CPU) also a duplicate for what stays in host memory (host_comm). */
static ferry_status open_step_comm(ferry_trainer_t tr)
{
	ferry_comm_t c = tr->comm;
	bool nccl = false, forced = false;
	size_t stage;
	ferry_status st;

	if (!ferry_comm_in_use(c))
		return FERRY_OK;
	/* malformed on one rank: every rank stops */
	if ((st = step_engine_check(tr)) == FERRY_OK && (st = ferry_comm_stage_forced(&forced)) == FERRY_OK)
		st = ferry_comm_stage_bytes(&stage);
	if ((st = ferry_comm_agree(c, st)))
		return st;
	if (!strcmp(tr->opts.backend, "cuda") && (st = pick_engine(tr, &nccl)))
		return st;
	if (!nccl && !strcmp(ferry_comm_engine(c), "single")) /* MPI named, but no launcher: no MPI */
		snprintf(tr->engine_why, sizeof(tr->engine_why), "this process alone (no MPI launcher started it): "
			 "each collective over one rank%s", strcmp(tr->opts.backend, "cuda") ? "" :
			 ", through pinned host staging");
	else if (strcmp(tr->opts.backend, "cuda"))
		snprintf(tr->engine_why, sizeof(tr->engine_why), "MPI%s: the %s backend's memory is host memory",
			 forced ? " through host staging (FERRY_COMM_STAGE=1)" : "", tr->opts.backend);
	if ((nccl || forced) && (st = ferry_comm_dup(c, &tr->host_comm)))
		return st;
	if (nccl)
		return ferry_comm_open_nccl(c, ferry_comm_local_rank(c), &tr->step_comm);
	return ferry_comm_dup(c, &tr->step_comm);
}

const char *ferry_trainer_comm_engine(ferry_trainer_t tr)
{
	return tr->engine_why;
}

/* Everything ferry_trainer_create does before the ranks agree. */
static ferry_status create(ferry_trainer_t tr, const struct ferry_train_opts *opts)
{
	struct ferry_model_config cfg;
	ferry_status st;

	tr->opts.backend = opts->backend ? opts->backend : "cpu";
	tr->opts.exec.act_dtype = ferry_backend_act_dtype(tr->opts.backend);
	tr->opts.exec.backend = tr->opts.backend;
	if ((st = open_step_comm(tr)))
		return st;
	tr->opts.exec.comm = tr->step_comm;
	tr->opts.exec.host_comm = tr->host_comm;
	st = settle_options(tr, &cfg);
	if (!st) {
		tr->rng = tr->opts.seed;
		st = build(tr, &cfg);
	}
	if (!st && (opts->resume || opts->checkpoint))
		st = load_start(tr, opts->resume ? opts->resume : opts->checkpoint, opts->resume != NULL);
	else if (!st)
		st = ferry_model_init_random(tr->model, tr->opts.seed);
	return st;
}

/* Several ranks, before step 1: every rank holds the same parameters, or
 * each would train its own model until a save refuses the mix.  The
 * inputs were agreed already (the files' hashes, the seed); this catches
 * what those miss: a file differing where its hash does not sample, a
 * load or an initialisation that went another way on one rank.  Split
 * parameters (--zero 3; --zero 1's master on the host) compare the whole
 * array each rank loaded or drew before keeping its slice. */
static ferry_status same_start(ferry_trainer_t tr)
{
	uint64_t mine[2] = { 0, 0 }, *all = ferry_calloc((size_t)tr->ranks, sizeof(mine));
	bool whole = false;
	char how[64];
	ferry_status st = all ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "trainer: out of host memory");

	if (!st && !(st = ferry_model_params_hash(tr->model, &mine[0], &whole)))
		mine[1] = whole;
	if ((st = ferry_comm_agree(tr->comm, st)) ||
	    (st = ferry_comm_all_gather(tr->comm, mine, all, sizeof(mine), FERRY_COMM_BYTE, NULL)))
		goto out;
	if (tr->opts.resume || tr->opts.checkpoint) /* (its path may differ per rank) */
		snprintf(how, sizeof(how), "loaded from its %s", tr->opts.resume ? "--resume" : "--checkpoint");
	else
		snprintf(how, sizeof(how), "initialised from seed %llu", (unsigned long long)tr->opts.seed);
	for (int r = 1; r < tr->ranks && !st; r++)
		if (all[2 * r + 1] && all[1] && all[2 * r] != all[0])
			st = ferry_error(FERRY_ERR_INVALID, "rank %d: its parameters differ from rank 0's before step 1 "
					 "(%s; hash %016llx, rank 0's %016llx): every rank must start from the same "
					 "parameters", r, how, (unsigned long long)all[2 * r], (unsigned long long)all[0]);
out:
	ferry_free(all);
	return st;
}

ferry_status ferry_trainer_create(const struct ferry_train_opts *opts, ferry_trainer_t *out)
{
	ferry_trainer_t tr;
	ferry_status st;

	*out = NULL;
	if (!opts)
		return ferry_error(FERRY_ERR_INVALID, "trainer: NULL options");
	tr = ferry_calloc(1, sizeof(*tr));
	if (!tr)
		return ferry_error(FERRY_ERR_NOMEM, "trainer: out of host memory");
	tr->opts = *opts;
	tr->comm = opts->comm;
	tr->ranks = opts->comm ? ferry_comm_size(opts->comm) : 1;
	tr->rank = opts->comm ? ferry_comm_rank(opts->comm) : 0;
	st = create(tr, opts);
	if (tr->ranks > 1) /* a bad input one rank saw stops every rank, with its message */
		st = ferry_comm_agree(tr->comm, st);
	if (!st && tr->ranks > 1) /* every rank the same error: printed once */
		st = ferry_comm_agree(tr->comm, same_start(tr));
	if (st) {
		ferry_trainer_free(tr);
		return st;
	}
	*out = tr;
	return FERRY_OK;
}

void ferry_trainer_free(ferry_trainer_t tr)
{
	if (!tr)
		return;
	if (tr->be) {
		ferry_host_free(tr->be, tr->inputs);
		ferry_host_free(tr->be, tr->targets);
	}
	ferry_free(tr->positions);
	ferry_model_free(tr->model); /* its streams drained: the comm stream's communicator is free */
	ferry_comm_free(tr->step_comm);
	ferry_comm_free(tr->host_comm);
	ferry_loader_free(tr->train);
	ferry_loader_free(tr->val);
	ferry_backend_close(tr->be);
	ferry_free(tr);
}

int ferry_trainer_step_count(ferry_trainer_t tr) { return tr->step; }
ferry_model_t ferry_trainer_model(ferry_trainer_t tr) { return tr->model; }
const struct ferry_plan *ferry_trainer_plan(ferry_trainer_t tr) { return &tr->plan; }
ferry_backend_t ferry_trainer_backend(ferry_trainer_t tr) { return tr->be; }
const struct ferry_train_opts *ferry_trainer_opts(ferry_trainer_t tr) { return &tr->opts; }
const char *ferry_trainer_saved_place(ferry_trainer_t tr) { return tr->saved_place; }

/* This step's batch: the one read ahead during the last step, if any. */
static ferry_status next_batch(ferry_trainer_t tr)
{
	size_t N = (size_t)tr->opts.B * tr->opts.grad_accum * tr->opts.T; /* checked by build() */

	if (tr->have_next) {
		memcpy(tr->inputs, tr->next_inputs, N * sizeof(int32_t));
		memcpy(tr->targets, tr->next_targets, N * sizeof(int32_t));
		if (tr->positions)
			memcpy(tr->positions, tr->next_positions, N * sizeof(int32_t));
		tr->have_next = false;
		return FERRY_OK;
	}
	return ferry_loader_next_packed(tr->train, tr->inputs, tr->targets, tr->positions);
}

static void read_ahead(ferry_trainer_t tr)
{
	if (tr->step + 1 < tr->opts.steps &&
	    ferry_loader_next_packed(tr->train, tr->next_inputs, tr->next_targets, tr->next_positions) == FERRY_OK)
		tr->have_next = true;
}

/* This step's counted targets, over every rank (a collective when there
 * are several): token streams count every one, B*T per micro-batch. */
static ferry_status count_targets(ferry_trainer_t tr)
{
	const struct ferry_train_opts *o = &tr->opts;
	const size_t N = (size_t)o->B * o->grad_accum * o->T;
	double n[2] = { 0, 0 }; /* the counted targets, the FLOPs */

	if (!tr->packed) {
		tr->count = (int64_t)N * tr->ranks;
		return FERRY_OK;
	}
	for (size_t i = 0; i < N; i++)
		n[0] += tr->targets[i] >= 0;
	for (int k = 0; k < o->grad_accum; k++)
		n[1] += ferry_model_step_flops_at(tr->model, o->B, o->T, tr->positions + (size_t)k * o->B * o->T);
	if (tr->ranks > 1) {
		ferry_status st = ferry_comm_all_reduce(tr->comm, n, 2, FERRY_COMM_F64, FERRY_COMM_SUM, NULL);

		if (st)
			return st;
	}
	tr->count = (int64_t)n[0];
	tr->flops = n[1];
	return FERRY_OK;
}

/* Packed documents: the update's gradient scale.  Each backward leaves
 * the gradient of its rows' loss sum over B*T, the ranks average theirs:
 * B*T*ranks / count makes the sum the gradient of the mean over the
 * counted targets (no target counted: the zero gradient as it is). */
static float count_scale(const ferry_trainer_t tr)
{
	const double rows = (double)tr->opts.B * tr->opts.T * tr->ranks;

	return tr->count > 0 ? (float)(rows / (double)tr->count) : 1.0f;
}

/* Micro-batch k's positions to the model (packed documents only). */
static ferry_status give_positions(ferry_trainer_t tr, const int32_t *positions, size_t k)
{
	if (!positions)
		return FERRY_OK;
	return ferry_model_set_positions(tr->model, positions + k * (size_t)tr->opts.B * tr->opts.T);
}

/* grad_accum micro-batches of B rows, the rows of this step's batch in
 * order: each one's backward adds the gradient of its mean loss into the
 * gradient buffer, and the update scales the sum by 1/grad_accum, the
 * gradient of the mean over all the step's tokens (the norm and clipping
 * of the scaled sum).  The loss is the micro-batches' mean.  *early: it
 * failed before the update, on this rank alone. */
static ferry_status accumulated_step(ferry_trainer_t tr, const struct ferry_adamw *opt, struct ferry_step_metrics *m,
				     bool *early)
{
	const struct ferry_train_opts *o = &tr->opts;
	size_t rows = (size_t)o->B * o->T;
	double sum = 0;
	ferry_status st = ferry_model_zero_grad(tr->model);

	for (int k = 0; !st && k < o->grad_accum; k++) {
		float l = 0;

		st = give_positions(tr, tr->positions, (size_t)k);
		if (!st)
			st = ferry_model_forward(tr->model, tr->inputs + k * rows, tr->targets + k * rows, o->B, o->T,
						 &l);
		if (!st)
			st = ferry_model_backward(tr->model);
		/* packed: this rank's loss sum, the mean taken over the step's count */
		sum += tr->packed ? ferry_model_loss_sum(tr->model) : l;
	}
	if ((*early = st != FERRY_OK))
		return st;
	read_ahead(tr);
	tr->loss_sum = sum;
	m->loss = (float)(tr->packed ? sum : sum / o->grad_accum);
	return ferry_model_update_scaled(tr->model, opt, tr->step + 1,
					 tr->packed ? count_scale(tr) : 1.0f / (float)o->grad_accum, &m->grad_norm);
}

/* The step on the device: its loss and norm, the update queued.  *early:
 * it failed before the step's collectives were done, on this rank alone
 * (the other ranks may wait in them: the caller ends the job). */
static ferry_status device_step(ferry_trainer_t tr, const struct ferry_adamw *opt, struct ferry_step_metrics *m,
				bool *early)
{
	const struct ferry_train_opts *o = &tr->opts;
	ferry_status st;

	*early = true;
	/* the speculative clipping order updates each layer during the
	 * backward (not packed: those updates would lack the count's scale) */
	if (o->grad_accum == 1 && ferry_model_speculative(tr->model) && !tr->packed &&
	    (st = ferry_model_step_speculate(tr->model, opt, tr->step + 1)))
		return st;
	if (o->grad_accum > 1)
		return accumulated_step(tr, opt, m, early);
	if ((st = give_positions(tr, tr->positions, 0)) ||
	    (st = ferry_model_step_submit(tr->model, tr->inputs, tr->targets, o->B, o->T)))
		return st;
	*early = false;
	/* the host reads the next batch while the device runs this one */
	read_ahead(tr);
	if (!tr->packed)
		return ferry_model_step_finish(tr->model, opt, tr->step + 1, &m->loss, &m->grad_norm);
	st = ferry_model_step_finish_scaled(tr->model, opt, tr->step + 1, count_scale(tr), &m->loss, &m->grad_norm);
	tr->loss_sum = ferry_model_loss_sum(tr->model); /* the mean over the count: across_ranks */
	return st;
}

/* A loss or norm that is not finite ends training: this trainer takes no
 * further step or save, its parameters no longer worth saving. */
static ferry_status check_diverged(ferry_trainer_t tr, const struct ferry_step_metrics *m, float lr,
				   ferry_status st)
{
	if ((st && st != FERRY_ERR_INVALID) || (isfinite(m->loss) && isfinite(m->grad_norm)))
		return st;
	tr->diverged_at = tr->step + 1;
	return ferry_error(FERRY_ERR_INVALID,
			   "step %d: the loss is %g (gradient norm %g): training diverged (learning rate "
			   "%g); stopped, and nothing is saved over the last checkpoint", tr->diverged_at,
			   (double)m->loss, (double)m->grad_norm, (double)lr);
}

/* Several ranks: the loss is the mean over the ranks' (each its own
 * rows'); the norm is already the global gradient's.  Every rank then
 * returns the same status. */
static ferry_status across_ranks(ferry_trainer_t tr, struct ferry_step_metrics *m, float lr, ferry_status st)
{
	double loss = tr->packed ? tr->loss_sum : m->loss;
	ferry_status e;

	if (tr->ranks > 1) { /* packed: the ranks' loss sums */
		if ((e = ferry_comm_all_reduce(tr->comm, &loss, 1, FERRY_COMM_F64,
					       tr->packed ? FERRY_COMM_SUM : FERRY_COMM_AVG, NULL)))
			return e;
		m->loss = (float)loss;
	}
	if (tr->packed)
		m->loss = tr->count > 0 ? (float)(loss / (double)tr->count) : 0.0f;
	m->targets = tr->count;
	m->flops = tr->packed ? tr->flops : 0;
	st = check_diverged(tr, m, lr, st);
	return tr->ranks > 1 ? ferry_comm_agree(tr->comm, st) : st;
}

ferry_status ferry_trainer_step(ferry_trainer_t tr, struct ferry_step_metrics *m)
{
	const struct ferry_train_opts *o = &tr->opts;
	struct ferry_adamw opt = o->adamw;
	double t0 = ferry_now_s();
	bool early;
	ferry_status st;

	memset(m, 0, sizeof(*m));
	if (tr->diverged_at)
		return ferry_error(FERRY_ERR_INVALID, "training diverged at step %d: no further steps",
				   tr->diverged_at);
	opt.lr = ferry_train_lr(o, tr->step);
	st = next_batch(tr);
	if (tr->ranks > 1) /* a bad batch one rank read stops every rank here */
		st = ferry_comm_agree(tr->comm, st);
	if (!st)
		st = count_targets(tr);
	if (st)
		return st;
	ferry_loader_position(tr->train, &tr->pos_shard, &tr->pos_offset);
	tr->pos_epoch = ferry_loader_epoch(tr->train);
	st = device_step(tr, &opt, m, &early);
	if (early)
		return st;
	if ((st = across_ranks(tr, m, opt.lr, st)))
		return st;
	tr->step++;
	m->step = tr->step;
	m->lr = opt.lr;
	m->step_ms = 1e3 * (ferry_now_s() - t0);
	m->tokens_per_s = (double)o->B * tr->ranks * o->grad_accum * o->T / (m->step_ms / 1e3);
	m->device_peak_bytes = ferry_backend_mem_peak(tr->be);
	return FERRY_OK;
}

/* The sum of the first n validation batches' losses (this rank's rows;
 * version-3 data: sum[0] the loss sum, sum[1] the counted targets). */
static ferry_status validate_part(ferry_trainer_t tr, int n_batches, double sum[2])
{
	const struct ferry_train_opts *o = &tr->opts;
	const bool packed = ferry_loader_packed(tr->val);
	const size_t N = (size_t)o->B * o->T;
	ferry_status st = FERRY_OK;

	sum[0] = sum[1] = 0;
	ferry_loader_rewind(tr->val);
	for (int i = 0; i < n_batches && !st; i++) {
		float l;

		st = ferry_loader_next_packed(tr->val, tr->inputs, tr->targets, tr->positions);
		if (!st)
			st = give_positions(tr, tr->positions, 0);
		if (!st)
			st = ferry_model_loss(tr->model, tr->inputs, tr->targets, o->B, o->T, &l);
		if (!st && packed) {
			sum[0] += ferry_model_loss_sum(tr->model);
			for (size_t j = 0; j < N; j++)
				sum[1] += tr->targets[j] >= 0;
		} else if (!st) {
			sum[0] += l;
		}
	}
	return st;
}

ferry_status ferry_trainer_validate(ferry_trainer_t tr, int n_batches, float *loss)
{
	const bool packed = tr->val && ferry_loader_packed(tr->val);
	double sum[2];
	ferry_status st;

	if (!tr->val)
		return ferry_error(FERRY_ERR_INVALID, "no validation data given");
	if (n_batches < 1)
		return ferry_error(FERRY_ERR_INVALID, "validation batches (%d) must be positive", n_batches);
	st = validate_part(tr, n_batches, sum);
	/* several ranks: each read its rows of every batch; the mean of theirs
	 * (packed: the sums of the losses and the counts) */
	if (tr->ranks > 1 && !(st = ferry_comm_agree(tr->comm, st)))
		st = ferry_comm_all_reduce(tr->comm, sum, packed ? 2 : 1, FERRY_COMM_F64,
					   packed ? FERRY_COMM_SUM : FERRY_COMM_AVG, NULL);
	if (!st)
		*loss = packed ? (sum[1] > 0 ? (float)(sum[0] / sum[1]) : 0.0f) : (float)(sum[0] / n_batches);
	return st;
}

ferry_status ferry_evaluate(ferry_model_t m, const char *data_glob, int B, int T, int n_batches,
			    float *loss)
{
	ferry_loader_t loader = NULL;
	int32_t *in = NULL, *tg = NULL;
	size_t N = 0;
	double sum = 0;
	int64_t shard0 = 0, off0 = 0;
	ferry_status st;

	if (n_batches < 1)
		return ferry_error(FERRY_ERR_INVALID, "number of batches (%d) must be positive", n_batches);
	if (B < 1 || T < 1 || __builtin_mul_overflow((size_t)B, (size_t)T, &N) || N > SIZE_MAX / sizeof(int32_t))
		return ferry_error(FERRY_ERR_INVALID, "batch %d x %d: sizes must be positive and fit memory", B, T);
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
		int64_t shard, off;
		float l;

		st = ferry_loader_next(loader, in, tg);
		if (st)
			goto out;
		/* where the second batch starts, again: the loader wrapped around
		 * and read the first batch once more, so the data holds only i */
		ferry_loader_position(loader, &shard, &off);
		if (i == 0) {
			shard0 = shard, off0 = off;
		} else if (shard == shard0 && off == off0) {
			st = ferry_error(FERRY_ERR_INVALID, "evaluate: %s holds %d batch%s of %d x %d tokens, fewer than "
					 "the %d asked for", data_glob, i, i == 1 ? "" : "es", B, T, n_batches);
			goto out;
		}
		st = ferry_model_loss(m, in, tg, B, T, &l);
		if (st)
			goto out;
		if (!isfinite(l)) {
			st = ferry_error(FERRY_ERR_INVALID, "evaluate: the loss of batch %d is %s: the model's values "
					 "overflow (training would stop such a run as diverged)", i + 1,
					 isnan(l) ? "not a number" : "infinite");
			goto out;
		}
		sum += l;
	}
	*loss = (float)(sum / n_batches);
out:
	ferry_free(in);
	ferry_free(tg);
	ferry_loader_free(loader);
	return st;
}
