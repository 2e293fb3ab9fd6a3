#include "plan/stack_plan.h"
#include "backend/run_op.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static size_t align_bytes(size_t n)
{
	return (n + FERRY_BUFFER_ALIGN - 1) / FERRY_BUFFER_ALIGN * FERRY_BUFFER_ALIGN;
}

/* What the policy may know of each tensor: its name, whether it is the
 * layer input, and whether a (batched) matrix product made it.  The layer
 * output is not shown: it is the next layer's input and lives where that
 * does, so a policy naming it is told the name is not placeable. */
static int policy_view(const struct ferry_layer_decl *decl, struct ferry_policy_tensor *pt, int *index)
{
	int n = 0;

	for (int t = 0; t < decl->n_tensors; t++) {
		int o = ferry_layer_producer(decl, t);

		if (t == decl->output)
			continue;
		pt[n] = (struct ferry_policy_tensor){ .name = decl->tensors[t].name };
		pt[n].is_layer_input = t == decl->input;
		if (o >= 0) {
			pt[n].dot = ferry_op_info(decl->ops[o].kind)->is_dot;
			pt[n].batched_dot = decl->ops[o].kind == FERRY_OP_ATTENTION;
		}
		index[n++] = t;
	}
	return n;
}

/* The closure: what backward reads, and what re-running producers reads,
 * until everything needed is kept or recomputed from kept tensors. */
static void derive_needed(const struct ferry_layer_decl *decl, struct ferry_stack_plan *sp)
{
	unsigned needed = sp->residuals, done = 0;

	while (needed & ~done) {
		int t = __builtin_ctz(needed & ~done);

		done |= 1u << t;
		if (t == decl->input || sp->place[t] != FERRY_PLACE_REMAT)
			continue;
		int o = ferry_layer_producer(decl, t);
		const struct ferry_op_info *info = ferry_op_info(decl->ops[o].kind);

		sp->recompute_ops |= 1u << o;
		for (int i = 0; i < info->n_in; i++)
			needed |= 1u << decl->ops[o].in[i];
	}
	sp->needed = needed;
	sp->stored = 0;
	for (int t = 0; t < decl->n_tensors; t++)
		if ((needed & (1u << t)) && (t == decl->input || sp->place[t] != FERRY_PLACE_REMAT))
			sp->stored |= 1u << t;
	sp->stored |= 1u << decl->input; /* the scan carry is always kept */
}

/* A valid declaration, a prefetch depth and a layer count in range, and
 * every activation's bytes for L + 1 layers within int64. */
static ferry_status check_plan_args(const struct ferry_layer_decl *decl, const struct ferry_dims *dims,
				    int depth, int64_t L)
{
	ferry_status st = ferry_layer_decl_check(decl);

	if (st)
		return st;
	if (depth < 1 || depth > 64)
		return ferry_error(FERRY_ERR_INVALID, "prefetch depth %d must be between 1 and 64", depth);
	if (L < 1 || L > FERRY_MAX_LAYERS)
		return ferry_error(FERRY_ERR_INVALID, "%lld layers: must be between 1 and %d", (long long)L,
				   FERRY_MAX_LAYERS);
	for (int t = 0; t < decl->n_tensors; t++) {
		int64_t n, bytes;

		if (!ferry_shape_numel(&decl->tensors[t].shape, dims, &n) ||
		    __builtin_mul_overflow(n, (int64_t)sizeof(float), &bytes) ||
		    __builtin_mul_overflow(bytes, L + 1, &bytes))
			return ferry_error(FERRY_ERR_INVALID, "%s: activation '%s' is too large for memory sizes",
					   decl->model, decl->tensors[t].name);
	}
	return FERRY_OK;
}

/* sp->place[] of the tensors the policy sees (NULL: everything_saveable). */
static ferry_status apply_policy(const struct ferry_layer_decl *decl, const char *policy,
				 struct ferry_stack_plan *sp)
{
	struct ferry_policy_tensor pt[FERRY_LAYER_MAX_TENSORS];
	enum ferry_placement place[FERRY_LAYER_MAX_TENSORS];
	int index[FERRY_LAYER_MAX_TENSORS], n_view;
	struct ferry_policy *pol = NULL;
	ferry_status st;

	st = ferry_policy_parse(policy ? policy : "everything_saveable", &pol);
	if (st)
		return st;
	n_view = policy_view(decl, pt, index);
	st = ferry_policy_place(pol, pt, n_view, place);
	ferry_policy_free(pol);
	if (st)
		return st;
	for (int i = 0; i < n_view; i++)
		sp->place[index[i]] = place[i];
	return FERRY_OK;
}

/* Tensor t's element and slot size, its kind of device slot and how many,
 * its host bytes when offloaded, and its share of the gradient bytes. */
static void plan_slots(const struct ferry_layer_decl *decl, const struct ferry_dims *dims,
		       struct ferry_stack_plan *sp, int t)
{
	size_t elem = ferry_layer_tensor_is_stat(decl, t) ? sizeof(float) : ferry_dtype_size(sp->act_dtype);
	size_t bytes = ferry_layer_tensor_numel(decl, t, dims) * elem;
	size_t sz = align_bytes(bytes);

	if (sp->tile_rows && ferry_row_tiles_inner(&sp->tiles, t)) /* one tile's rows */
		sz = align_bytes((size_t)sp->tile_rows * (size_t)ferry_shape_row_width(&decl->tensors[t].shape, dims) *
				 elem);
	bool stored = sp->stored & (1u << t);

	sp->elem[t] = elem;
	sp->slot_bytes[t] = sz;
	if (t == decl->output) {
		sp->kind[t] = FERRY_SLOT_NONE;
		sp->slots[t] = 0;
	} else if (t == decl->input) {
		sp->kind[t] = FERRY_SLOT_INPUT;
		sp->slots[t] = sp->input_offloaded ? sp->ring + 1 : sp->L + 1;
	} else if (stored && sp->place[t] == FERRY_PLACE_DEVICE) {
		sp->kind[t] = FERRY_SLOT_PER_LAYER;
		sp->slots[t] = sp->L;
	} else if (stored && sp->place[t] == FERRY_PLACE_OFFLOAD) {
		sp->kind[t] = FERRY_SLOT_RING;
		sp->slots[t] = sp->ring;
	} else {
		sp->kind[t] = FERRY_SLOT_SHARED;
		sp->slots[t] = 1;
	}
	if (stored && sp->place[t] == FERRY_PLACE_OFFLOAD) {
		sp->offloaded |= 1u << t;
		sp->host_bytes[t] = bytes;
	}
}

/* The forward indices of the ops whose backward a gradient lives between:
 * *first = its producer (reads it last), *last = its last reader (writes
 * it first). */
static void grad_life(const struct ferry_layer_decl *decl, int t, int *first, int *last)
{
	*first = *last = ferry_layer_producer(decl, t);
	for (int o = 0; o < decl->n_ops; o++)
		for (int i = 0; i < FERRY_OP_MAX_IN; i++)
			if (decl->ops[o].in[i] == t && o > *last)
				*last = o;
}

/* Lowest offset at which t's gradient meets no placed gradient whose life
 * meets t's (first fit). */
static size_t first_fit(const struct ferry_stack_plan *sp, unsigned placed, const int *first, const int *last,
			int t)
{
	size_t off = 0;
	bool moved = true;

	while (moved) {
		moved = false;
		for (int u = 0; u < sp->n_tensors; u++) {
			if (!(placed & (1u << u)) || first[u] > last[t] || first[t] > last[u])
				continue;
			if (off < sp->grad_off[u] + sp->slot_bytes[u] && sp->grad_off[u] < off + sp->slot_bytes[t]) {
				off = sp->grad_off[u] + sp->slot_bytes[u];
				moved = true;
			}
		}
	}
	return off;
}

static bool same_shape(const struct ferry_shape *a, const struct ferry_shape *b)
{
	if ((a->k ? a->k : 1) != (b->k ? b->k : 1))
		return false;
	for (int i = 0; i < FERRY_SHAPE_MAX_DIMS; i++) {
		if (a->d[i] != b->d[i])
			return false;
		if (a->d[i] == FERRY_DIM_NONE)
			break;
	}
	return true;
}

/* The output whose gradient bytes t's gradient may take over (see
 * grad_alias), or -1; *op: the op whose backward then assigns it.  Another
 * reader's backward would add into bytes the op overwrites, and the layer
 * input's gradient has its own slot. */
static int in_place_grad(const struct ferry_layer_decl *decl, const struct ferry_stack_plan *sp, int t, int *op)
{
	int readers = 0, u;

	if (t == decl->input || !(sp->has_grad & (1u << t)))
		return -1;
	for (int o = 0; o < decl->n_ops; o++)
		for (int i = 0; i < ferry_op_info(decl->ops[o].kind)->n_in; i++)
			if (decl->ops[o].in[i] == t) {
				*op = o;
				readers++;
			}
	if (readers != 1 || !ferry_op_info(decl->ops[*op].kind)->bwd_in_place)
		return -1;
	u = decl->ops[*op].out[0];
	if (!(sp->has_grad & (1u << u)) || sp->elem[u] != sp->elem[t] ||
	    !same_shape(&decl->tensors[u].shape, &decl->tensors[t].shape))
		return -1;
	return u;
}

/* sp->grad_alias (each resolved to the end of its chain) and
 * sp->grad_assign_ops. */
static void plan_aliases(const struct ferry_layer_decl *decl, struct ferry_stack_plan *sp)
{
	int op = -1;

	sp->grad_assign_ops = 0;
	for (int t = 0; t < decl->n_tensors; t++) {
		sp->grad_alias[t] = in_place_grad(decl, sp, t, &op);
		if (sp->grad_alias[t] >= 0)
			sp->grad_assign_ops |= 1u << op;
	}
	/* an op's output is made after its input: the chains end */
	for (int t = 0; t < decl->n_tensors; t++)
		while (sp->grad_alias[t] >= 0 && sp->grad_alias[sp->grad_alias[t]] >= 0)
			sp->grad_alias[t] = sp->grad_alias[sp->grad_alias[t]];
}

/* Tiled, the run's backward ops take turns tile after tile: a gradient
 * live at any of them is live over all of them. */
static void widen_over_tiles(const struct ferry_stack_plan *sp, unsigned todo, int *first, int *last)
{
	const int a = sp->tiles.first, b = sp->tiles.last;

	for (int t = 0; sp->tile_rows && t < sp->n_tensors; t++) {
		if (!(todo & (1u << t)) || first[t] > b || last[t] < a)
			continue;
		first[t] = first[t] < a ? first[t] : a;
		last[t] = last[t] > b ? last[t] : b;
	}
}

/* Offsets of the gradients in the workspace, largest first, after the
 * input's and output's slots (one of them the last-output slot where it
 * can be); sp->grad_bytes is the whole.  An aliased gradient stretches its
 * alias's life back to its own producer. */
static void assign_grads(const struct ferry_layer_decl *decl, struct ferry_stack_plan *sp)
{
	int first[FERRY_LAYER_MAX_TENSORS], last[FERRY_LAYER_MAX_TENSORS];
	unsigned todo = 0, placed = 0;
	size_t io, end = 0;

	sp->io_grad_in_last_output = !(sp->needed & (1u << decl->output));
	io = (sp->io_grad_in_last_output ? 1 : 2) * sp->slot_bytes[decl->input];

	plan_aliases(decl, sp);
	for (int t = 0; t < decl->n_tensors; t++) {
		sp->grad_zero_op[t] = -1;
		if (!(sp->has_grad & (1u << t)) || t == decl->input || t == decl->output || sp->grad_alias[t] >= 0)
			continue;
		grad_life(decl, t, &first[t], &last[t]);
		sp->grad_zero_op[t] = last[t];
		todo |= 1u << t;
	}
	for (int t = 0; t < decl->n_tensors; t++) {
		int a = sp->grad_alias[t], p = ferry_layer_producer(decl, t);

		if (a >= 0 && a != decl->output && p < first[a])
			first[a] = p;
	}
	widen_over_tiles(sp, todo, first, last);
	while (todo) {
		int t = __builtin_ctz(todo);

		for (int u = t + 1; u < decl->n_tensors; u++)
			if ((todo & (1u << u)) && sp->slot_bytes[u] > sp->slot_bytes[t])
				t = u;
		sp->grad_off[t] = first_fit(sp, placed, first, last, t);
		if (sp->grad_off[t] + sp->slot_bytes[t] > end)
			end = sp->grad_off[t] + sp->slot_bytes[t];
		placed |= 1u << t;
		todo &= ~(1u << t);
	}
	for (int t = 0; t < decl->n_tensors; t++)
		if (placed & (1u << t))
			sp->grad_off[t] += io;
	for (int t = 0; t < decl->n_tensors; t++)
		if (sp->grad_alias[t] >= 0)
			sp->grad_off[t] = sp->grad_off[sp->grad_alias[t]]; /* 0 for the layer output: unused */
	sp->grad_bytes = io + end;
}

/* --mlp-tile: the MLP's run and its tile; its inner tensors recomputed
 * (per tile, not with the layer's other recomputations). */
static ferry_status plan_tiles(const struct ferry_layer_decl *decl, const struct ferry_dims *dims, int asked,
			       struct ferry_stack_plan *sp)
{
	ferry_status st = ferry_layer_mlp_tiles(decl, dims, &sp->tiles);

	if (st)
		return st;
	sp->tile_rows = ferry_row_tiles_rows(&sp->tiles, asked, dims->v[FERRY_DIM_B] * dims->v[FERRY_DIM_T]);
	if (sp->tile_rows < 1)
		return ferry_error(FERRY_ERR_INVALID, "--mlp-tile %d: tokens per tile must be positive", asked);
	for (int t = 0; t < decl->n_tensors; t++)
		if (ferry_row_tiles_inner(&sp->tiles, t))
			sp->place[t] = FERRY_PLACE_REMAT;
	return FERRY_OK;
}

/* The run's ops leave the layer's recomputations (each tile recomputes
 * its inner tensors), unless backward reads an output of the run that is
 * not kept: then the whole run is recomputed too (tile_refill). */
static void tiles_recompute(const struct ferry_layer_decl *decl, struct ferry_stack_plan *sp)
{
	for (int o = sp->tiles.first; sp->tile_rows && o <= sp->tiles.last; o++) {
		const struct ferry_op_info *info = ferry_op_info(decl->ops[o].kind);

		for (int i = 0; i < info->n_out; i++) {
			int t = decl->ops[o].out[i];

			if (!ferry_row_tiles_inner(&sp->tiles, t) && (sp->needed & ~sp->stored & (1u << t)))
				sp->tile_refill = true;
		}
		sp->recompute_ops &= ~(1u << o);
	}
}

int ferry_stack_storage_slots(const struct ferry_stack_plan *sp, int t)
{
	return sp->slots[t] - (sp->kind[t] == FERRY_SLOT_INPUT && sp->input_in_place);
}

ferry_status ferry_stack_plan_make(const struct ferry_layer_decl *decl,
				   const struct ferry_dims *dims,
				   const struct ferry_exec_opts *opts, struct ferry_stack_plan *sp)
{
	const char *policy = opts ? opts->policy : NULL;
	int depth = opts && opts->prefetch_depth ? opts->prefetch_depth : FERRY_DEFAULT_PREFETCH_DEPTH;
	int64_t L = dims->v[FERRY_DIM_L];
	ferry_status st;

	memset(sp, 0, sizeof(*sp));
	st = check_plan_args(decl, dims, depth, L);
	if (!st)
		st = apply_policy(decl, policy, sp);
	if (st)
		return st;

	sp->n_tensors = decl->n_tensors;
	sp->n_ops = decl->n_ops;
	sp->L = (int)L;
	/* prefetching deeper than the stack buys nothing, and a ring longer
	 * than the stack would hold more than keeping every layer */
	sp->depth = depth < sp->L - 1 ? depth : sp->L - 1;
	sp->ring = sp->L == 1 ? 1 : sp->depth + 1 > 2 ? sp->depth + 1 : 2;
	sp->act_dtype = opts ? opts->act_dtype : FERRY_F32;
	/* the output is the next layer's input and shares its fate */
	sp->place[decl->output] = sp->place[decl->input];
	sp->residuals = ferry_layer_residuals(decl);
	sp->has_grad = ferry_layer_differentiable(decl);
	if (opts && opts->mlp_tile && (st = plan_tiles(decl, dims, opts->mlp_tile, sp)))
		return st;
	derive_needed(decl, sp);
	tiles_recompute(decl, sp);
	sp->input_offloaded = sp->place[decl->input] == FERRY_PLACE_OFFLOAD;

	for (int t = 0; t < decl->n_tensors; t++)
		plan_slots(decl, dims, sp, t);
	assign_grads(decl, sp);
	return FERRY_OK;
}

void ferry_plan_add_buffer(struct ferry_plan *plan, const char *name, enum ferry_buffer_kind kind,
			   enum ferry_tensor_kind tensor_kind, size_t bytes)
{
	struct ferry_plan_buffer *b;

	if (plan->n_buffers >= FERRY_PLAN_MAX_BUFFERS) {
		plan->too_many_buffers = true; /* ferry_plan_finish refuses the plan */
		return;
	}
	b = &plan->buffers[plan->n_buffers++];
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->kind = kind;
	b->tensor_kind = tensor_kind;
	b->bytes = (bytes + FERRY_BUFFER_ALIGN - 1) / FERRY_BUFFER_ALIGN * FERRY_BUFFER_ALIGN;
	if (b->bytes == 0)
		b->bytes = FERRY_BUFFER_ALIGN; /* the arena rounds 0 up to one unit */
}

ferry_status ferry_plan_finish(struct ferry_plan *plan)
{
	struct ferry_memory_analysis *m = &plan->mem;

	m->argument_bytes = m->output_bytes = m->alias_bytes = m->temp_bytes = m->peak_bytes = 0;
	memset(m->device_kind_bytes, 0, sizeof(m->device_kind_bytes));
	m->host_total_bytes = 0;
	for (int k = 0; k < FERRY_TK_COUNT; k++)
		m->host_total_bytes += m->host_kind_bytes[k];
	for (int i = 0; i < plan->n_buffers; i++) {
		const struct ferry_plan_buffer *b = &plan->buffers[i];

		switch (b->kind) {
		case FERRY_BUF_ARGUMENT: m->argument_bytes += b->bytes; break;
		case FERRY_BUF_DONATED:
			m->argument_bytes += b->bytes;
			m->output_bytes += b->bytes;
			m->alias_bytes += b->bytes;
			break;
		case FERRY_BUF_OUTPUT: m->output_bytes += b->bytes; break;
		case FERRY_BUF_TEMP: m->temp_bytes += b->bytes; break;
		}
		m->device_kind_bytes[b->tensor_kind] += b->bytes;
		m->peak_bytes += b->bytes;
	}
	m->total_bytes = m->argument_bytes + m->output_bytes + m->temp_bytes - m->alias_bytes;
	if (plan->too_many_buffers)
		return ferry_error(FERRY_ERR_INVALID, "plan of %s: more than %d device buffers", plan->model,
				   FERRY_PLAN_MAX_BUFFERS);
	return FERRY_OK;
}

void ferry_stack_plan_describe(const struct ferry_stack_plan *sp, const struct ferry_layer_decl *decl,
			       const struct ferry_dims *dims, struct ferry_plan *plan)
{
	plan->L = sp->L;
	plan->act_dtype = sp->act_dtype;
	plan->prefetch_depth = sp->depth;
	plan->n_tier_prefetch = sp->n_tier_depths;
	for (int i = 0; i < sp->n_tier_depths; i++) {
		plan->tier_prefetch[i] = sp->tier_depth[i];
		plan->tier_layers[i] = sp->tier_end[i] - (i ? sp->tier_end[i - 1] : 0);
	}
	plan->ring_slots = sp->ring;
	plan->n_ops = sp->n_ops;
	plan->n_recompute_ops = __builtin_popcount(sp->recompute_ops);
	for (int o = sp->tiles.first; sp->tile_rows && o <= sp->tiles.last; o++) /* per tile */
		plan->n_recompute_ops += sp->tile_refill || ferry_row_tiles_makes_inner(&sp->tiles, decl, o);
	plan->mlp_tile = sp->tile_rows;
	plan->n_tensors = sp->n_tensors;
	for (int t = 0; t < sp->n_tensors; t++) {
		struct ferry_plan_tensor *pt = &plan->tensors[t];
		int o = ferry_layer_producer(decl, t);

		snprintf(pt->name, sizeof(pt->name), "%s", decl->tensors[t].name);
		pt->placement = sp->place[t];
		pt->needed = sp->needed & (1u << t);
		pt->stored = sp->stored & (1u << t);
		pt->recomputed = o >= 0 && (sp->recompute_ops & (1u << o));
		pt->tiled = sp->tile_rows && ferry_row_tiles_inner(&sp->tiles, t);
		pt->recomputed |= pt->tiled;
		pt->layer_bytes = ferry_layer_tensor_numel(decl, t, dims) * sp->elem[t];
		pt->device_slots = ferry_stack_storage_slots(sp, t);
		pt->device_bytes = (size_t)pt->device_slots * sp->slot_bytes[t];
		pt->host_bytes = (size_t)sp->L * sp->host_bytes[t];
	}
}

const char *ferry_buffer_kind_name(enum ferry_buffer_kind kind)
{
	switch (kind) {
	case FERRY_BUF_ARGUMENT: return "argument";
	case FERRY_BUF_DONATED: return "donated";
	case FERRY_BUF_OUTPUT: return "output";
	case FERRY_BUF_TEMP: return "temp";
	}
	return "?";
}
