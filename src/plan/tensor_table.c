/*
 * The tensor table: every training tensor of a model, with its size and
 * place, built once from the declaration.  See tensor_table.h; the
 * parameters' rules are table_params.c, the allocation table_alloc.c.
 *
 * Every device tensor but the parameter arrays is a buffer of its own;
 * offloaded layer activations share one host buffer.
 */
#include "plan/table_build.h"
#include "backend/run_op.h"
#include "optim/cpu_adamw.h"
#include "core/error.h"
#include "ferry/tier.h"
#include "ferry/platform.h"

#include <stdio.h>
#include <string.h>

static bool is_stat(const struct ferry_layer_decl *d, int t)
{
	return ferry_layer_tensor_is_stat(d, t);
}

/* Elements of stage tensor t: a tiled loss's logits have one tile's rows. */
static size_t stage_numel(const struct ferry_tensor_table *tt, const struct ferry_layer_decl *d, int t)
{
	if (tt->place.loss_tile && d == tt->md->epilogue && ferry_row_tiles_inner(&tt->loss, t))
		return (size_t)tt->place.loss_tile * (size_t)ferry_shape_row_width(&d->tensors[t].shape, &tt->dims);
	return ferry_layer_tensor_numel(d, t, &tt->dims);
}

/* Prologue or epilogue tensors and their gradients. */
static int add_stage(struct ferry_tensor_table *tt, const struct ferry_layer_decl *d,
		     const struct ferry_stage_tensor *roles, int *index, int *grad_index)
{
	unsigned has_grad = ferry_layer_differentiable(d);
	size_t asz = ferry_dtype_size(tt->act_dtype);
	char name[64];

	for (int t = 0; t < d->n_tensors; t++) {
		size_t n = stage_numel(tt, d, t);
		const char *nm = d->tensors[t].name;

		index[t] = grad_index[t] = -1;
		switch (roles[t].role) {
		case FERRY_ROLE_TOKENS:
		case FERRY_ROLE_TARGETS:
			index[t] = ferry_table_add_single(tt, nm, FERRY_SITE_DEVICE, FERRY_BUF_ARGUMENT, FERRY_TK_BATCH,
					      FERRY_F32, n * sizeof(int32_t), FERRY_PLACE_DEVICE);
			break;
		case FERRY_ROLE_LOSSES:
			index[t] = ferry_table_add_single(tt, nm, FERRY_SITE_DEVICE, FERRY_BUF_OUTPUT, FERRY_TK_LOSS,
					      FERRY_F32, n * sizeof(float), FERRY_PLACE_DEVICE);
			break;
		case FERRY_ROLE_ACT:
			index[t] = ferry_table_add_single(tt, nm, FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_ACTIVATION,
					      is_stat(d, t) ? FERRY_F32 : tt->act_dtype,
					      n * (is_stat(d, t) ? sizeof(float) : asz), FERRY_PLACE_DEVICE);
			break;
		case FERRY_ROLE_STACK_INPUT:  /* the layer stack's own storage */
		case FERRY_ROLE_STACK_OUTPUT:
		case FERRY_ROLE_ALIAS:        /* resolved by the executor */
			continue;
		}
		if (index[t] < 0)
			return index[t];
	}
	for (int t = 0; t < d->n_tensors; t++) {
		if (!(has_grad & (1u << t)) || roles[t].role != FERRY_ROLE_ACT || roles[t].grad_in_place)
			continue;
		snprintf(name, sizeof(name), "grad:%s", d->tensors[t].name);
		grad_index[t] = ferry_table_add_single(tt, name, FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_ACT_GRAD,
					   tt->act_dtype, stage_numel(tt, d, t) * asz, FERRY_PLACE_DEVICE);
		if (grad_index[t] < 0)
			return grad_index[t];
	}
	return 0;
}

/* The layer stack's device slots, gradient workspace and host copies. */
static int add_stack(struct ferry_tensor_table *tt)
{
	const struct ferry_layer_decl *d = tt->md->layer;
	const struct ferry_stack_plan *sp = &tt->sp;
	int host_buf = -1;
	char name[64];

	for (int t = 0; t < d->n_tensors; t++) {
		tt->ix.stack_act[t] = tt->ix.stack_host[t] = -1;
		if (sp->kind[t] == FERRY_SLOT_NONE)
			continue;
		snprintf(name, sizeof(name), "act:%s", d->tensors[t].name);
		tt->ix.stack_act[t] = ferry_table_add_single(tt, name, FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_ACTIVATION,
						 sp->elem[t] == sizeof(float) ? FERRY_F32 : tt->act_dtype,
						 (size_t)sp->slots[t] * sp->slot_bytes[t], sp->place[t]);
		if (tt->ix.stack_act[t] < 0)
			return tt->ix.stack_act[t];
	}
	tt->ix.stack_grad = ferry_table_add_single(tt, "activation gradients", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
				       FERRY_TK_ACT_GRAD, tt->act_dtype, sp->grad_bytes, FERRY_PLACE_DEVICE);
	if (tt->ix.stack_grad < 0)
		return tt->ix.stack_grad;
	for (int t = 0; t < d->n_tensors && sp->offloaded; t++) {
		if (!(sp->offloaded & (1u << t)))
			continue;
		if (host_buf < 0)
			host_buf = ferry_table_add_buffer(tt, "host: offloaded activations", FERRY_SITE_HOST, FERRY_BUF_TEMP,
					      FERRY_TK_ACTIVATION);
		snprintf(name, sizeof(name), "host:%s", d->tensors[t].name);
		tt->ix.stack_host[t] = ferry_table_add_entry(tt, host_buf, name, FERRY_TK_ACTIVATION, -1,
						 sp->elem[t] == sizeof(float) ? FERRY_F32 : tt->act_dtype,
						 (size_t)sp->L * sp->host_bytes[t], FERRY_PLACE_OFFLOAD);
		if (tt->ix.stack_host[t] < 0)
			return tt->ix.stack_host[t];
	}
	return 0;
}

/* The most scratch any op of a declared program needs on the backend, at
 * the largest batch, forward or backward. */
static size_t program_scratch(const struct ferry_tensor_table *tt, const struct ferry_layer_decl *d,
			      const char *backend)
{
	float scalars[FERRY_OP_SCALAR_COUNT];
	struct ferry_op_call c;
	size_t most = 0;

	ferry_model_scalars(&tt->cfg, scalars);
	for (int o = 0; o < d->n_ops; o++)
		for (int bwd = 0; bwd < 2; bwd++) {
			size_t need;

			ferry_op_call_shape(d, o, &tt->dims, scalars, -1, &c);
			c.backward = bwd;
			need = ferry_backend_op_scratch(backend, &c);
			most = need > most ? need : most;
		}
	return most;
}

/* Appends why to list (", " between) unless it is there already. */
static void add_reason(char *list, size_t n, const char *why)
{
	size_t used = strlen(list);

	if (!strstr(list, why) && used < n)
		snprintf(list + used, n - used, "%s%s", used ? ", " : "", why);
}

/* A model the backend's kernels cannot run (ops, or model constants of
 * ops, they lack) is refused when it is planned, naming what is missing,
 * rather than failing at its first launch.  The layer is asked at its
 * first windowed layer, if any: the others' calls are the same less the
 * window. */
static ferry_status check_kernels(const struct ferry_tensor_table *tt, const char *backend)
{
	const struct ferry_layer_decl *prog[3] = { tt->md->prologue, tt->md->layer, tt->md->epilogue };
	float scalars[FERRY_OP_SCALAR_COUNT];
	struct ferry_op_call c;
	const char *why;
	char missing[256] = "";
	int lw = 0;
	ferry_status st;

	/* a backend this build lacks: its kernels' workspace and gaps are unknown */
	if (backend && (st = ferry_backend_compiled_in(backend)))
		return st;
	ferry_model_scalars(&tt->cfg, scalars);
	while (lw < tt->cfg.layers - 1 && !ferry_window_at_layer(scalars, lw))
		lw++;
	for (int s = 0; s < 3; s++)
		for (int o = 0; o < prog[s]->n_ops; o++) {
			ferry_op_call_shape(prog[s], o, &tt->dims, scalars, s == 1 ? lw : -1, &c);
			if ((why = ferry_backend_op_unsupported(backend, &c)))
				add_reason(missing, sizeof(missing), why);
		}
	if (missing[0])
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s on the %s backend: no kernel there computes %s yet "
				   "(the cpu backend does)", tt->md->title, backend, missing);
	return FERRY_OK;
}

/* Kernel scratch, when the backend's kernels need any: one workspace for
 * every op (they run on one stream), including the gradient norm's
 * reduction over all parameters. */
static int add_workspace(struct ferry_tensor_table *tt, const char *backend)
{
	struct ferry_op_call norm = { .kind = FERRY_OP_SUM_SQUARES, .n = (long)tt->n_params };
	size_t most = ferry_backend_op_scratch(backend, &norm), n;

	tt->ix.workspace = -1;
	if ((n = program_scratch(tt, tt->md->prologue, backend)) > most)
		most = n;
	if ((n = program_scratch(tt, tt->md->layer, backend)) > most)
		most = n;
	if ((n = program_scratch(tt, tt->md->epilogue, backend)) > most)
		most = n;
	if (!most)
		return 0;
	tt->ix.workspace = ferry_table_add_single(tt, "kernel workspace", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
			FERRY_TK_WORKSPACE,
				      FERRY_F32, most, FERRY_PLACE_DEVICE);
	return tt->ix.workspace;
}

static ferry_status check_batch(const struct ferry_model_config *cfg, int B, int T)
{
	if (B < 1 || T < 1)
		return ferry_error(FERRY_ERR_INVALID, "batch size %d and sequence length %d must be positive", B, T);
	/* kernels index rows with int, and N * Vp logits must fit in memory sizes */
	if ((int64_t)B * T > INT32_MAX / 4 ||
	    (double)B * T * cfg->padded_vocab * sizeof(float) > (double)SIZE_MAX / 4)
		return ferry_error(FERRY_ERR_INVALID, "batch %d x %d is too large", B, T);
	if (T > cfg->max_seq)
		return ferry_error(FERRY_ERR_INVALID,
				   "sequence length %d is longer than the model's maximum %d", T, cfg->max_seq);
	return FERRY_OK;
}

/* The sum of every entry's bytes, device and host, within
 * FERRY_PLAN_MAX_BYTES: then no buffer's or plan's total wraps. */
static ferry_status check_total(const struct ferry_tensor_table *tt, int B, int T)
{
	uint64_t total = 0;

	for (int i = 0; i < tt->n; i++)
		if (__builtin_add_overflow(total, (uint64_t)tt->e[i].bytes, &total) ||
		    total > FERRY_PLAN_MAX_BYTES)
			return ferry_error(FERRY_ERR_INVALID,
					   "%s, %d layers of %d channels, batch %d x %d: its tensors add up to more than "
					   "4 EiB (2^62 bytes), more than any machine has: use fewer layers, a smaller "
					   "batch or shorter sequences", tt->cfg.arch, tt->cfg.layers, tt->cfg.channels,
					   B, T);
	return FERRY_OK;
}

/* Whether copies read or write host buffer b (AdamW's moments updated on
 * host threads, its master weights when a bf16 copy is what goes up, and
 * the copies for rollback never leave the host). */
static bool host_buffer_copied(const struct ferry_tensor_table *tt, int b)
{
	const struct ferry_table_index *ix = &tt->ix;

	if (ferry_table_host_update(tt) && (b == ix->mom_buffer || b == ix->var_buffer))
		return false;
	if (ferry_table_host_update(tt) && ix->host_copy_buffer >= 0 && b == ix->params_buffer)
		return false;
	for (int i = 0; i < tt->n; i++)
		if (tt->e[i].rollback >= 0 && tt->e[tt->e[i].rollback].buffer == b)
			return false;
	return true;
}

size_t ferry_table_host_aligned(size_t n)
{
	return (n + FERRY_TABLE_HOST_ALIGN - 1) / FERRY_TABLE_HOST_ALIGN * FERRY_TABLE_HOST_ALIGN;
}

/* Which host buffers the pinned pool holds: the copied ones, offloaded
 * activations first (copied both ways every step), then in table order,
 * until one does not fit the limit; the rest are pageable. */
static void assign_pinning(struct ferry_tensor_table *tt, size_t limit)
{
	bool full = false;

	if (!limit) {
		struct ferry_memory_limit ml;

		ferry_memory_limit(&ml);
		limit = (size_t)(ml.bytes / 2);
	}
	tt->pinned_limit = limit;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < tt->n_buffers; i++) {
			struct ferry_table_buffer *b = &tt->buffers[i];
			bool first = b->kind == FERRY_TK_ACTIVATION;

			if (b->site != FERRY_SITE_HOST || first != (pass == 0))
				continue;
			b->pinned = !full && host_buffer_copied(tt, i) && tt->pinned_bytes + ferry_table_host_aligned(b->bytes) <= limit;
			if (b->pinned)
				tt->pinned_bytes += ferry_table_host_aligned(b->bytes);
			else
				tt->pageable_bytes += b->bytes;
			if (tt->host_tiers) /* as ferry_tensor_table_alloc asks for them */
				tt->host_alloc_bytes += b->bytes;
			else if (!b->pinned)
				tt->host_alloc_bytes += ferry_table_host_aligned(b->bytes ? b->bytes : 1);
			if (!b->pinned && host_buffer_copied(tt, i))
				full = tt->over_pinned_limit = true;
		}
	if (!tt->host_tiers) /* the pool, in one piece */
		tt->host_alloc_bytes += tt->pinned_bytes;
}

/* --loss-tile: the epilogue's head and loss, and the tile's rows. */
static ferry_status plan_loss_tiles(struct ferry_tensor_table *tt)
{
	int64_t n = tt->dims.v[FERRY_DIM_B] * tt->dims.v[FERRY_DIM_T];
	ferry_status st;

	if (!tt->place.loss_tile)
		return FERRY_OK;
	if ((st = ferry_layer_loss_tiles(tt->md->epilogue, &tt->dims, &tt->loss)))
		return st;
	tt->place.loss_tile = ferry_row_tiles_rows(&tt->loss, tt->place.loss_tile, n);
	if (tt->place.loss_tile < 1)
		return ferry_error(FERRY_ERR_INVALID, "--loss-tile: tokens per tile must be positive");
	return FERRY_OK;
}

/* With host tiers and more than one offloaded tensor a layer: their host
 * copies layer by layer, a layer's tensors together, so that whole layers
 * may sit on different tiers (the table's entries keep their sizes, the
 * engine their addresses by stride).  Without tiers, tensor by tensor, as
 * the pinned pool pins them. */
static void host_by_layer(struct ferry_tensor_table *tt)
{
	struct ferry_stack_plan *sp = &tt->sp;
	size_t off = 0;

	if (!tt->host_tiers || __builtin_popcount(sp->offloaded) < 2)
		return;
	for (int t = 0; t < sp->n_tensors; t++)
		if (sp->offloaded & (1u << t)) {
			sp->host_off[t] = off;
			off += sp->host_bytes[t];
		}
	sp->host_stride = off;
}

/* The host bytes by tensor kind of the table's host buffers. */
void ferry_table_host_bytes_by_kind(const struct ferry_tensor_table *tt, size_t out[FERRY_HOST_KINDS])
{
	memset(out, 0, FERRY_HOST_KINDS * sizeof(size_t));
	for (int i = 0; i < tt->n_buffers; i++)
		if (tt->buffers[i].site == FERRY_SITE_HOST)
			out[ferry_host_kind_of(tt->buffers[i].kind)] += tt->buffers[i].bytes;
}

/* activations.prefetch=D1+D2...: which layers each tier of the span
 * holds, as the host tiers will place them, and each tier's depth (at
 * most the stack's). */
static ferry_status tier_depths(struct ferry_tensor_table *tt)
{
	struct ferry_stack_plan *sp = &tt->sp;
	size_t bytes[FERRY_HOST_KINDS];
	struct ferry_tier_report rep;
	ferry_status st;
	int end = 0, n = 0;

	if (!tt->place.act_prefetch_tier[0] || !sp->offloaded)
		return FERRY_OK;
	if (!tt->host_tiers)
		return ferry_error(FERRY_ERR_INVALID, "activations.prefetch: a depth per tier of activations.host, "
				   "and no host tiers were given");
	ferry_table_host_bytes_by_kind(tt, bytes);
	if ((st = ferry_host_tiers_place_layers(tt->host_tiers, bytes, ferry_tensor_table_act_unit(tt), &rep)))
		return st;
	while (n < FERRY_PREFETCH_TIERS && tt->place.act_prefetch_tier[n])
		n++;
	if (n != rep.act_asked)
		return ferry_error(FERRY_ERR_INVALID, "activations.prefetch: %d depths for the %d tier(s) offloaded "
				   "activations span (--host-tier activations=TIER+TIER...): one per tier, in its order",
				   n, rep.act_asked ? rep.act_asked : 1);
	for (int i = 0; i < n; i++) {
		end += rep.act_layers[i];
		sp->tier_end[i] = end;
		sp->tier_depth[i] = tt->place.act_prefetch_tier[i] < sp->depth ? tt->place.act_prefetch_tier[i] : sp->depth;
		sp->n_tier_depths = i + 1;
	}
	return FERRY_OK;
}

ferry_status ferry_tensor_table_build(const struct ferry_model_config *cfg_in, int B, int T,
				      const struct ferry_exec_opts *opts, struct ferry_tensor_table *tt)
{
	struct ferry_model_config cfg = *cfg_in;
	struct ferry_exec_opts act_opts = opts ? *opts : (struct ferry_exec_opts){ 0 };
	ferry_status st;
	int r;

	memset(tt, 0, sizeof(*tt));
	if ((st = ferry_model_config_complete(&cfg)) || (st = check_batch(&cfg, B, T)))
		return st;
	tt->md = ferry_model_decl_find(cfg.arch);
	if ((st = ferry_layer_decl_check(tt->md->prologue)) || (st = ferry_layer_decl_check(tt->md->epilogue)))
		return st;
	tt->cfg = cfg;
	tt->dims = ferry_model_dims(&cfg, B, T);
	tt->act_dtype = opts ? opts->act_dtype : FERRY_F32;
	tt->host_tiers = opts ? opts->host_tiers : NULL;
	tt->n_params = ferry_model_config_num_params(&cfg);
	if ((st = ferry_exec_opts_places(opts, &tt->place)))
		return st;
	snprintf(tt->policy, sizeof(tt->policy), "%.*s", (int)sizeof(tt->policy) - 1,
		 tt->place.policy[0] ? tt->place.policy : "everything_saveable");
	/* the activations as placed (--place may name them) */
	act_opts.policy = tt->place.policy[0] ? tt->place.policy : NULL;
	if (tt->place.act_prefetch == FERRY_PREFETCH_AUTO)
		return ferry_error(FERRY_ERR_INVALID, "activations.prefetch=auto: the depths per tier come from the "
				   "tiers' rates and a calibration; ferry_prefetch_auto chooses them (ferry plan and "
				   "ferry train do)");
	act_opts.prefetch_depth = tt->place.act_prefetch;
	act_opts.mlp_tile = tt->place.mlp_tile;
	if ((st = ferry_stack_plan_make(tt->md->layer, &tt->dims, &act_opts, &tt->sp)) || (st = plan_loss_tiles(tt)) ||
	    (st = check_kernels(tt, opts ? opts->backend : NULL)))
		return st;
	tt->place.mlp_tile = tt->sp.tile_rows; /* as chosen: the placement printed reproduces it */
	host_by_layer(tt);
	if (ferry_table_host_update(tt) && !ferry_cpu_adamw_isa())
		return ferry_error(FERRY_ERR_UNSUPPORTED, "--offload-optimizer cpu: FERRY_CPU_ADAMW_ISA names a path "
				   "this CPU does not run");
	r = ferry_table_add_params(tt);
	if (r >= 0)
		r = add_stage(tt, tt->md->prologue, tt->md->prologue_roles, tt->ix.prologue, tt->ix.prologue_grad);
	tt->ix.positions = -1;
	if (r >= 0 && opts && opts->packed) /* beside the tokens, and only then: token streams plan as before */
		r = tt->ix.positions = ferry_table_add_single(tt, "positions", FERRY_SITE_DEVICE, FERRY_BUF_ARGUMENT,
							      FERRY_TK_BATCH, FERRY_F32,
							      (size_t)B * T * sizeof(int32_t), FERRY_PLACE_DEVICE);
	if (r >= 0)
		r = add_stage(tt, tt->md->epilogue, tt->md->epilogue_roles, tt->ix.epilogue, tt->ix.epilogue_grad);
	if (r >= 0)
		r = tt->ix.grad_norm = ferry_table_add_single(tt, "grad norm", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
						  FERRY_TK_WORKSPACE, FERRY_F32, sizeof(double), FERRY_PLACE_DEVICE);
	if (r >= 0)
		r = add_workspace(tt, opts ? opts->backend : NULL);
	if (r >= 0)
		r = add_stack(tt);
	if (r == -2) {
		ferry_tensor_table_release(tt);
		return ferry_error(FERRY_ERR_NOMEM, "tensor table: out of host memory");
	}
	if (r < 0) {
		ferry_tensor_table_release(tt);
		return ferry_error(FERRY_ERR_INVALID, "%s: more than %d buffers in the tensor table",
				   cfg.arch, FERRY_TABLE_MAX_BUFFERS);
	}
	if ((st = tier_depths(tt)) || (st = check_total(tt, B, T)))
		ferry_tensor_table_release(tt);
	else
		assign_pinning(tt, opts ? opts->pinned_limit : 0);
	return st;
}

void ferry_tensor_table_release(struct ferry_tensor_table *tt)
{
	ferry_free(tt->e);
	tt->e = NULL;
	tt->n = tt->cap = 0;
}

/* edges.weights=host:stream: the edge region, and what the device would hold
 * without it (the unstacked parameters' compute copy and gradients, two
 * buffers) less its size. */
static void edge_figures(const struct ferry_tensor_table *tt, struct ferry_plan *plan)
{
	size_t numel = 0;

	if (tt->ix.ring[FERRY_GROUP_EDGE_WEIGHTS].buffer < 0)
		return;
	for (int q = 0; q < tt->md->n_params; q++) {
		struct ferry_param_info pi;

		if (!ferry_model_param_info(&tt->cfg, q, &pi) && pi.present && !pi.layers)
			numel += pi.numel;
	}
	plan->edge_bytes = ferry_table_arena_aligned(tt->buffers[tt->ix.ring[FERRY_GROUP_EDGE_WEIGHTS].buffer].bytes);
	plan->edge_saved_bytes = (int64_t)(ferry_table_arena_aligned(numel * ferry_dtype_size(tt->act_dtype)) +
					   ferry_table_arena_aligned(numel * sizeof(float))) - (int64_t)plan->edge_bytes;
}

ferry_status ferry_tensor_table_plan(const struct ferry_tensor_table *tt, struct ferry_plan *plan)
{
	struct ferry_memory_analysis *m = &plan->mem;
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	snprintf(plan->model, sizeof(plan->model), "%s", tt->cfg.arch);
	snprintf(plan->policy, sizeof(plan->policy), "%s", tt->policy);
	plan->B = (int)tt->dims.v[FERRY_DIM_B];
	plan->T = (int)tt->dims.v[FERRY_DIM_T];
	plan->n_table_entries = tt->n;
	ferry_stack_plan_describe(&tt->sp, tt->md->layer, &tt->dims, plan);
	plan->param_ring_slots = tt->ix.ring[FERRY_GROUP_LAYER_WEIGHTS].slots;
	plan->loss_tile = tt->place.loss_tile;
	if ((st = ferry_places_format(&tt->place, plan->place, sizeof(plan->place))))
		return st;
	edge_figures(tt, plan);
	for (int i = 0; i < tt->n_buffers; i++) {
		const struct ferry_table_buffer *b = &tt->buffers[i];

		if (b->site == FERRY_SITE_DEVICE)
			ferry_plan_add_buffer(plan, b->name, b->mem, b->kind, b->bytes);
	}
	for (int i = 0; i < tt->n; i++)
		if (tt->e[i].site == FERRY_SITE_HOST)
			m->host_kind_bytes[tt->e[i].kind] += tt->e[i].bytes;
	m->host_activation_bytes = m->host_kind_bytes[FERRY_TK_ACTIVATION];
	m->host_act_unit = ferry_tensor_table_act_unit(tt);
	m->host_pinned_bytes = tt->pinned_bytes;
	m->host_pageable_bytes = tt->pageable_bytes;
	m->host_alloc_bytes = tt->host_alloc_bytes;
	m->pinned_limit = tt->pinned_limit;
	return ferry_plan_finish(plan);
}

size_t ferry_tensor_table_act_unit(const struct ferry_tensor_table *tt)
{
	const struct ferry_stack_plan *sp = &tt->sp;
	unsigned off = sp->offloaded;
	int t = ferry_stack_first_offloaded(sp);

	if (sp->host_stride)
		return sp->host_stride;
	if (!off || (off & (off - 1)))
		return 0;
	return tt->e[tt->ix.stack_host[t]].offset == 0 ? sp->host_bytes[t] : 0;
}

const char *ferry_tensor_kind_name(enum ferry_tensor_kind kind)
{
	static const char *const names[FERRY_TK_COUNT] = {
		[FERRY_TK_WEIGHT] = "weights", [FERRY_TK_WEIGHT_COPY] = "weight copies",
		[FERRY_TK_GRAD] = "gradients", [FERRY_TK_OPT_STATE] = "optimizer state",
		[FERRY_TK_ACTIVATION] = "activations", [FERRY_TK_ACT_GRAD] = "activation gradients",
		[FERRY_TK_BATCH] = "batch", [FERRY_TK_LOSS] = "losses", [FERRY_TK_WORKSPACE] = "workspace",
	};

	return kind >= 0 && kind < FERRY_TK_COUNT ? names[kind] : "?";
}
