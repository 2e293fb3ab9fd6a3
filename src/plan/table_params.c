/*
 * The tensor table's rules for parameters: their compute copy, gradients
 * and AdamW state as the placements put them (device, host, rings, ZeRO
 * slices, copies for rollback).  See tensor_table.h.
 *
 * Layout: parameters, their gradients, the AdamW moments and the compute
 * copy are one buffer each, entries at the declaration's element offsets
 * (the parameter array's layout, so checkpoints copy straight in and the
 * gradient norm is one reduction).
 */
#include "plan/table_build.h"
#include "ops/cpu/kernels.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

size_t ferry_table_arena_aligned(size_t n)
{
	return (n + FERRY_TABLE_ARENA_ALIGN - 1) / FERRY_TABLE_ARENA_ALIGN * FERRY_TABLE_ARENA_ALIGN;
}

int ferry_table_add_buffer(struct ferry_tensor_table *tt, const char *name, enum ferry_site site,
			   enum ferry_buffer_kind mem, enum ferry_tensor_kind kind)
{
	struct ferry_table_buffer *b;

	if (tt->n_buffers >= FERRY_TABLE_MAX_BUFFERS)
		return -1;
	b = &tt->buffers[tt->n_buffers];
	memset(b, 0, sizeof(*b));
	snprintf(b->name, sizeof(b->name), "%.*s", FERRY_PLAN_NAME_CHARS - 1, name);
	b->site = site;
	b->mem = mem;
	b->kind = kind;
	return tt->n_buffers++;
}

/* The group whose placement decides an entry of this kind, before the
 * callers that know better say (stacked weights, rings, host copies). */
static enum ferry_place_group kind_group(enum ferry_tensor_kind kind)
{
	switch (kind) {
	case FERRY_TK_WEIGHT:
	case FERRY_TK_OPT_STATE: return FERRY_GROUP_ADAM;
	case FERRY_TK_WEIGHT_COPY:
	case FERRY_TK_GRAD: return FERRY_GROUP_EDGE_WEIGHTS;
	case FERRY_TK_ACTIVATION: return FERRY_GROUP_ACTIVATIONS;
	default: return FERRY_GROUP_NONE;
	}
}

/* Appends an entry at the end of buffer `buf`. */
int ferry_table_add_entry(struct ferry_tensor_table *tt, int buf, const char *name, enum ferry_tensor_kind kind,
			  int layer, enum ferry_dtype dtype, size_t bytes, enum ferry_placement act)
{
	struct ferry_tensor_entry *e;

	if (buf < 0)
		return -1;
	if (tt->n == tt->cap) {
		int cap = tt->cap ? 2 * tt->cap : 64;
		struct ferry_tensor_entry *ne = ferry_calloc((size_t)cap, sizeof(*ne));

		if (!ne)
			return -2;
		if (tt->e)
			memcpy(ne, tt->e, (size_t)tt->n * sizeof(*ne));
		ferry_free(tt->e);
		tt->e = ne;
		tt->cap = cap;
	}
	e = &tt->e[tt->n];
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%.63s", name);
	e->kind = kind;
	e->layer = layer;
	e->dtype = dtype;
	e->bytes = bytes;
	e->site = tt->buffers[buf].site;
	e->act = act;
	e->group = kind_group(kind);
	e->rollback = -1;
	e->buffer = buf;
	e->offset = tt->buffers[buf].bytes;
	tt->buffers[buf].bytes += bytes;
	return tt->n++;
}

/* A buffer holding one entry of the same name. */
int ferry_table_add_single(struct ferry_tensor_table *tt, const char *name, enum ferry_site site,
			   enum ferry_buffer_kind mem, enum ferry_tensor_kind kind, enum ferry_dtype dtype,
			   size_t bytes, enum ferry_placement act)
{
	return ferry_table_add_entry(tt, ferry_table_add_buffer(tt, name, site, mem, kind), name, kind, -1, dtype, bytes, act);
}

/* Entries of a parameter group placed by the weights' groups: the
 * layers' or the edges' by whether the parameter is stacked. */
#define BY_STACKING FERRY_GROUP_COUNT

/* One buffer with an entry per present parameter (or per unstacked one),
 * in array order: with all of them, at its array offset; each entry in
 * group `group` (or BY_STACKING). */
static int add_param_subset(struct ferry_tensor_table *tt, const char *buf_name, const char *prefix,
			    enum ferry_site site, enum ferry_buffer_kind mem, enum ferry_tensor_kind kind,
			    enum ferry_dtype dtype, int *index, bool unstacked_only, int group)
{
	int buf = ferry_table_add_buffer(tt, buf_name, site, mem, kind);
	char name[64];

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		index[p] = -1;
		if (ferry_model_param_info(&tt->cfg, p, &pi))
			return -1;
		if (!pi.present || (unstacked_only && pi.layers))
			continue;
		snprintf(name, sizeof(name), "%s%s", prefix, pi.name);
		index[p] = ferry_table_add_entry(tt, buf, name, kind, -1, dtype, pi.numel * ferry_dtype_size(dtype),
				     site == FERRY_SITE_HOST ? FERRY_PLACE_OFFLOAD : FERRY_PLACE_DEVICE);
		if (index[p] < 0)
			return index[p];
		tt->e[index[p]].group = group != BY_STACKING ? group
				      : pi.layers ? FERRY_GROUP_LAYER_WEIGHTS : FERRY_GROUP_EDGE_WEIGHTS;
	}
	return buf;
}

static int add_param_group(struct ferry_tensor_table *tt, const char *buf_name, const char *prefix,
			   enum ferry_site site, enum ferry_buffer_kind mem, enum ferry_tensor_kind kind,
			   enum ferry_dtype dtype, int *index, int group)
{
	return add_param_subset(tt, buf_name, prefix, site, mem, kind, dtype, index, false, group);
}

/* Floats per optimizer slice: a layer's slice of the largest stacked
 * parameter (the whole largest parameter when none is stacked); larger
 * unstacked parameters go in several slices. */
static size_t optimizer_chunk(const struct ferry_tensor_table *tt)
{
	size_t layer = 0, whole = 1;

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi) || !pi.present)
			continue;
		if (pi.layers && pi.layer_numel > layer)
			layer = pi.layer_numel;
		if (pi.numel > whole)
			whole = pi.numel;
	}
	return layer ? layer : whole;
}

/* 64 elements: ring offsets keep kernels' vector loads aligned. */
static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* adam.grads=device:stream(D): D + 1 host slots, each a layer's slice of
 * every stacked parameter (at least one optimizer chunk), in place of the
 * gradients' host copy. */
static int add_host_grad_ring(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;

	ix->host_grad_slot_numel = 0;
	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi) || !pi.present || !pi.layers)
			continue;
		ix->host_grad_slot_off[p] = ix->host_grad_slot_numel;
		ix->host_grad_slot_numel += align64(pi.layer_numel);
	}
	if (!ix->host_grad_slot_numel)
		ix->host_grad_slot_numel = optimizer_chunk(tt);
	ix->host_grad_slots = tt->place.adam_grads_device + 1;
	ix->host_grad_ring = ferry_table_add_single(tt, "host: gradient ring", FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_GRAD,
					FERRY_F32, (size_t)ix->host_grad_slots * ix->host_grad_slot_numel * sizeof(float),
					FERRY_PLACE_OFFLOAD);
	if (ix->host_grad_ring >= 0)
		tt->e[ix->host_grad_ring].group = FERRY_GROUP_ADAM;
	return ix->host_grad_ring;
}

/* With AdamW on host threads: the gradients' host copy and, when the
 * kernels read bf16, the update's bf16 result to upload (both the
 * update's, so they live where it runs). */
static int add_cpu_optimizer(struct ferry_tensor_table *tt)
{
	int r = tt->place.adam_grads_device ? add_host_grad_ring(tt)
		: add_param_group(tt, "host: grads", "host grad:", FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_GRAD,
				  FERRY_F32, tt->ix.host_grad, FERRY_GROUP_ADAM);

	tt->ix.opt_chunk = optimizer_chunk(tt);
	if (r >= 0 && tt->act_dtype != FERRY_F32)
		r = tt->ix.host_copy_buffer = add_param_group(tt, "host: params (compute copy)", "host copy:",
							      FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
							      tt->act_dtype, tt->ix.host_copy, FERRY_GROUP_ADAM);
	return r;
}

/* The layers' units: a weight ring of depth + 1 slots and a gradient ring
 * of two, a slot holding one layer of every stacked parameter. */
static int add_layer_slots(struct ferry_tensor_table *tt, struct ferry_table_ring *r, int depth)
{
	const int L = tt->cfg.layers;
	unsigned stacked = 0;
	int w, g;

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi) || !pi.present || !pi.layers)
			continue;
		stacked |= 1u << p;
		r->off[p] = r->slot_numel;
		r->slot_numel += align64(pi.layer_numel);
	}
	r->n_layouts = 1;
	r->slots = depth + 1 < L ? depth + 1 : L;
	r->grad_slots = L < 2 ? L : 2;
	r->buffer = tt->n_buffers;
	w = ferry_table_add_single(tt, "weight ring", FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY, tt->act_dtype,
		       (size_t)r->slots * r->slot_numel * ferry_dtype_size(tt->act_dtype), FERRY_PLACE_DEVICE);
	if (w < 0)
		return w;
	g = ferry_table_add_single(tt, "gradient ring", FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_GRAD, FERRY_F32,
		       (size_t)r->grad_slots * r->slot_numel * sizeof(float), FERRY_PLACE_DEVICE);
	if (g < 0)
		return g;
	tt->e[w].group = tt->e[g].group = FERRY_GROUP_LAYER_WEIGHTS;
	for (int p = 0; p < tt->md->n_params; p++)
		if (stacked & (1u << p)) {
			r->w[0][p] = w;
			r->g[0][p] = g;
		}
	return g;
}

/* The parameters a stage's ops read, as a bit mask (a tied head reads
 * the parameter it is tied to). */
static unsigned stage_params(const struct ferry_tensor_table *tt, const struct ferry_layer_decl *d)
{
	unsigned mask = 0;

	for (int o = 0; o < d->n_ops; o++) {
		const struct ferry_op_info *info = ferry_op_info(d->ops[o].kind);

		for (int i = 0; i < info->n_w; i++) {
			int p = d->ops[o].w[i].param;

			if (p >= 0 && !ferry_param_present(tt->md, &tt->cfg, p))
				p = tt->md->params[p].tied_to;
			if (p >= 0)
				mask |= 1u << p;
		}
	}
	return mask;
}


/* One entry of the edge region at the next aligned offset. */
static int add_edge_entry(struct ferry_tensor_table *tt, int buf, const char *what, const struct ferry_param_info *pi,
			  const char *stage, bool grad)
{
	char name[64];

	tt->buffers[buf].bytes = ferry_table_arena_aligned(tt->buffers[buf].bytes);
	snprintf(name, sizeof(name), "%s: %.30s (%s)", what, pi->name, stage);
	return ferry_table_add_entry(tt, buf, name, grad ? FERRY_TK_GRAD : FERRY_TK_WEIGHT_COPY, -1,
			 grad ? FERRY_F32 : tt->act_dtype, pi->numel * (grad ? sizeof(float) : ferry_dtype_size(tt->act_dtype)),
			 FERRY_PLACE_DEVICE);
}

/* The edges' units, the stages: one slot, the edge region, laid out once
 * per stage from its start (the compute copy and the gradient of each
 * parameter the stage reads, in array order), as large as the larger
 * layout. */
static int add_stage_slots(struct ferry_tensor_table *tt, struct ferry_table_ring *r)
{
	static const char *const stage_name[FERRY_EDGE_STAGES] = { "prologue", "epilogue" };
	const struct ferry_layer_decl *stage[FERRY_EDGE_STAGES] = { tt->md->prologue, tt->md->epilogue };
	int buf = ferry_table_add_buffer(tt, "edge region (embeddings, head)", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
			     FERRY_TK_WEIGHT_COPY);
	size_t most = 0;

	r->buffer = buf;
	r->n_layouts = FERRY_EDGE_STAGES;
	r->slots = 1;
	for (int s = 0; s < FERRY_EDGE_STAGES && buf >= 0; s++) {
		unsigned mask = stage_params(tt, stage[s]);

		tt->buffers[buf].bytes = 0;
		for (int q = 0; q < tt->md->n_params; q++) {
			struct ferry_param_info pi;

			if (!(mask & (1u << q)) || ferry_model_param_info(&tt->cfg, q, &pi) || !pi.present || pi.layers)
				continue;
			if ((r->w[s][q] = add_edge_entry(tt, buf, "edge", &pi, stage_name[s], false)) < 0 ||
			    (r->g[s][q] = add_edge_entry(tt, buf, "edge grad", &pi, stage_name[s], true)) < 0)
				return -2;
		}
		most = tt->buffers[buf].bytes > most ? tt->buffers[buf].bytes : most;
	}
	if (buf >= 0)
		tt->buffers[buf].bytes = most;
	return buf;
}

/* The device slots of streamed weight group g (struct ferry_table_ring):
 * the layers' units are layers, the edges' the stages. */
static int add_ring(struct ferry_tensor_table *tt, enum ferry_place_group g)
{
	struct ferry_table_ring *r = &tt->ix.ring[g];

	return g == FERRY_GROUP_LAYER_WEIGHTS ? add_layer_slots(tt, r, ferry_table_place(tt, g)->depth)
					      : add_stage_slots(tt, r);
}

/* The unstacked parameters' device compute copy and gradients: all of
 * them, or the edges' ring they pass through in turn. */
static int add_unstacked(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r;

	if (ferry_table_streamed(tt, FERRY_GROUP_EDGE_WEIGHTS))
		return add_ring(tt, FERRY_GROUP_EDGE_WEIGHTS);
	r = ix->copy_buffer = add_param_subset(tt, "unstacked params (compute copy)", "copy:", FERRY_SITE_DEVICE,
					       FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY, tt->act_dtype, ix->copy, true,
					       FERRY_GROUP_EDGE_WEIGHTS);
	if (r >= 0)
		r = ix->dev_grad_buffer = add_param_subset(tt, "unstacked grads", "device grad:", FERRY_SITE_DEVICE,
							   FERRY_BUF_TEMP, FERRY_TK_GRAD, FERRY_F32, ix->dev_grad, true,
							   FERRY_GROUP_EDGE_WEIGHTS);
	return r;
}

/* layers.weights=host:stream: master weights, gradients and AdamW's
 * state on the host in the parameter array's layout (and the bf16
 * compute copy the rings are filled from, when the kernels read bf16); on
 * the device the rings, and a compute copy and gradients of the unstacked
 * parameters (or, with edges.weights=host:stream, the edge region). */
static int add_offloaded_shard(struct ferry_tensor_table *tt);
static int add_offloaded_grads(struct ferry_tensor_table *tt);

static int add_offloaded_params(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	const bool bf16 = tt->act_dtype != FERRY_F32, shard = ferry_table_place(tt, FERRY_GROUP_ADAM)->shard > 1;
	int r;

	r = ix->params_buffer = add_param_group(tt, "host: params", "", FERRY_SITE_HOST, FERRY_BUF_DONATED,
						FERRY_TK_WEIGHT, FERRY_F32, ix->param, FERRY_GROUP_ADAM);
	if (r >= 0 && ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_grads) /* ZeRO-2: a slice and two layer slots */
		r = add_offloaded_grads(tt);
	else if (r >= 0)
		r = ix->grads_buffer = add_param_group(tt, "host: grads", "grad:", FERRY_SITE_HOST, FERRY_BUF_TEMP,
						       FERRY_TK_GRAD, FERRY_F32, ix->grad, FERRY_GROUP_ADAM);
	if (r >= 0 && !shard)
		r = ix->mom_buffer = add_param_group(tt, "host: adamw m", "adamw m:", FERRY_SITE_HOST,
						     FERRY_BUF_DONATED, FERRY_TK_OPT_STATE, FERRY_F32, ix->mom,
						     FERRY_GROUP_ADAM);
	if (r >= 0 && !shard)
		r = ix->var_buffer = add_param_group(tt, "host: adamw v", "adamw v:", FERRY_SITE_HOST,
						     FERRY_BUF_DONATED, FERRY_TK_OPT_STATE, FERRY_F32, ix->var,
						     FERRY_GROUP_ADAM);
	if (r >= 0 && bf16)
		r = ix->host_copy_buffer = add_param_group(tt, "host: params (compute copy)", "host copy:",
							   FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
							   tt->act_dtype, ix->host_copy, FERRY_GROUP_ADAM);
	if (r >= 0 && shard)
		r = add_offloaded_shard(tt);
	if (r >= 0)
		r = add_unstacked(tt);
	if (r >= 0)
		r = add_ring(tt, FERRY_GROUP_LAYER_WEIGHTS);
	ix->opt_chunk = optimizer_chunk(tt);
	if (r >= 0 && !ferry_table_host_update(tt)) /* master, m, v, gradient (+ the compute copy) */
		r = ix->opt_ring = ferry_table_add_single(tt, "optimizer ring", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
					      FERRY_TK_OPT_STATE, FERRY_F32,
					      2 * ix->opt_chunk * (4 * sizeof(float) + (bf16 ? ferry_dtype_size(tt->act_dtype) : 0)),
					      FERRY_PLACE_DEVICE);
	return r;
}

/* The host copy for rollback.  A speculative update (adam=host:cpu(
 * speculative)) writes each layer's slice of AdamW's state before the step
 * knows whether the norm needs clipping, so what it writes (the master
 * weights and both moments of the stacked parameters) is first copied
 * aside: an entry per state array, its stacked parameters one after the
 * other, each state entry pointing at its place (rollback, rollback_off).
 * The copies never leave the host. */
static int add_rollback(struct ferry_tensor_table *tt)
{
	static const char *const what[3] = { "undo: master", "undo: adamw m", "undo: adamw v" };
	const int *const state[3] = { tt->ix.param, tt->ix.mom, tt->ix.var };
	int buf = ferry_table_add_buffer(tt, "host: optimizer undo copy", FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_OPT_STATE);
	unsigned stacked = 0;
	size_t n = 0;

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi) || !pi.present || !pi.layers)
			continue;
		stacked |= 1u << p;
		n += pi.numel;
	}
	for (int i = 0; i < 3; i++) {
		int c = ferry_table_add_entry(tt, buf, what[i], FERRY_TK_OPT_STATE, -1, FERRY_F32, n * sizeof(float),
				  FERRY_PLACE_OFFLOAD);
		size_t off = 0;

		if (c < 0)
			return c;
		for (int p = 0; p < tt->md->n_params; p++) {
			if (!(stacked & (1u << p)))
				continue;
			tt->e[state[i][p]].rollback = c;
			tt->e[state[i][p]].rollback_off = off;
			off += tt->e[state[i][p]].bytes;
		}
	}
	return buf;
}

/* Elements per rank of a split over N ranks: n / N rounded up; with the
 * gradients split, rounded up to whole blocks of the gradient norm's sum
 * (each rank then sums whole blocks: the norm keeps its bits). */
static size_t shard_numel(const struct ferry_tensor_table *tt)
{
	const size_t N = (size_t)ferry_table_place(tt, FERRY_GROUP_ADAM)->shard, n = tt->n_params;
	const size_t per = (size_t)ferry_cpu_sum_block((long)n), blocks = (n + per - 1) / per;

	if (!ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_grads)
		return (n + N - 1) / N;
	return (blocks + N - 1) / N * per;
}

/* An entry at the end of buffer b (a parameter array's layout) padding
 * it to N slices of shard_numel elements, when the slices pass n: the
 * all-gather of the updated slices writes every one.  0: none needed. */
static int add_padding(struct ferry_tensor_table *tt, int b, const char *name, enum ferry_tensor_kind kind,
		       enum ferry_dtype dtype)
{
	const size_t all = (size_t)ferry_table_place(tt, FERRY_GROUP_ADAM)->shard * tt->ix.shard_numel;
	const bool host = tt->buffers[b].site == FERRY_SITE_HOST;
	int r;

	if (all <= tt->n_params)
		return 0;
	r = ferry_table_add_entry(tt, b, name, kind, -1, dtype, (all - tt->n_params) * ferry_dtype_size(dtype),
		      host ? FERRY_PLACE_OFFLOAD : FERRY_PLACE_DEVICE);
	if (r >= 0 && host) /* the host's arrays are AdamW's */
		tt->e[r].group = FERRY_GROUP_ADAM;
	return r;
}

/* ZeRO-2's gradient slots: one layer of every stacked parameter whole in
 * each of two slots (laid out as the weight ring's gradient slots), on
 * the device, or on the host where the weight ring sends the gradients
 * (layers.weights=host:stream). */
static int add_grad_slots(struct ferry_tensor_table *tt, enum ferry_site site, const char *name)
{
	struct ferry_table_index *ix = &tt->ix;

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi))
			return -1;
		if (!pi.present || !pi.layers)
			continue;
		ix->grad_slot_off[p] = ix->grad_slot_numel;
		ix->grad_slot_numel += align64(pi.layer_numel);
	}
	ix->grad_slots = tt->cfg.layers < 2 ? tt->cfg.layers : 2;
	ix->grad_ring = ferry_table_add_single(tt, name, site, FERRY_BUF_TEMP, FERRY_TK_GRAD, FERRY_F32,
				   (size_t)ix->grad_slots * ix->grad_slot_numel * sizeof(float),
				   site == FERRY_SITE_HOST ? FERRY_PLACE_OFFLOAD : FERRY_PLACE_DEVICE);
	if (ix->grad_ring >= 0)
		tt->e[ix->grad_ring].group = FERRY_GROUP_LAYER_WEIGHTS;
	return ix->grad_ring;
}

/* Whether ZeRO-3's edges are gathered from the host slices into the
 * edge region (adam=...:shard(N,params) with layers.weights and
 * edges.weights=host:stream: --zero 3 --offload-params
 * --offload-embeddings). */
static bool edges_gathered(const struct ferry_tensor_table *tt)
{
	return ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params &&
	       ferry_table_place(tt, FERRY_GROUP_LAYER_WEIGHTS)->home == FERRY_HOME_HOST &&
	       ferry_table_streamed(tt, FERRY_GROUP_EDGE_WEIGHTS);
}

/* ZeRO-2's gradients: this rank's slice, one layer's whole in each of
 * two slots, the unstacked parameters' whole (on the device; with the
 * edges gathered on the host, where the edge region sends them, as
 * --offload-embeddings' do). */
static int add_grad_slices(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r;

	ix->shard_numel = shard_numel(tt);
	ix->grads_buffer = ferry_table_add_buffer(tt, "grads (this rank's slice)", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
			FERRY_TK_GRAD);
	r = ix->grad_slice = ferry_table_add_entry(tt, ix->grads_buffer, "grads (this rank's slice)", FERRY_TK_GRAD, -1,
			FERRY_F32,
				       ix->shard_numel * sizeof(float), FERRY_PLACE_DEVICE);
	for (int p = 0; p < FERRY_MODEL_MAX_PARAMS; p++)
		ix->grad[p] = -1;
	if (r >= 0)
		r = add_grad_slots(tt, FERRY_SITE_DEVICE, "gradient slots");
	if (r >= 0 && edges_gathered(tt))
		r = add_param_subset(tt, "host: grads (unstacked)", "grad:", FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_GRAD,
				     FERRY_F32, ix->grad, true, FERRY_GROUP_ADAM);
	else if (r >= 0)
		r = ix->dev_grad_buffer = add_param_subset(tt, "unstacked grads", "device grad:", FERRY_SITE_DEVICE,
							   FERRY_BUF_TEMP, FERRY_TK_GRAD, FERRY_F32, ix->dev_grad, true,
							   FERRY_GROUP_EDGE_WEIGHTS);
	if (r >= 0)
		tt->e[ix->grad_slice].group = FERRY_GROUP_ADAM;
	return r;
}

/* ZeRO-3 with the layers' weights on the host: the device slot a
 * layer's part of one parameter in this rank's host slice passes through,
 * as large as the largest such part (a layer's elements of a parameter,
 * or a whole slice); with the edges gathered, theirs pass in pieces of
 * its size. */
static int add_param_stage(struct ferry_tensor_table *tt)
{
	size_t most = 0;

	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt->cfg, p, &pi) || !pi.present || !pi.layers)
			continue;
		most = pi.layer_numel > most ? pi.layer_numel : most;
	}
	most = most < tt->ix.shard_numel ? most : tt->ix.shard_numel;
	tt->ix.param_stage = ferry_table_add_single(tt, "params (a layer's part, staged)", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
					FERRY_TK_WEIGHT_COPY, tt->act_dtype, most * ferry_dtype_size(tt->act_dtype),
					FERRY_PLACE_DEVICE);
	if (tt->ix.param_stage >= 0)
		tt->e[tt->ix.param_stage].group = FERRY_GROUP_LAYER_WEIGHTS;
	return tt->ix.param_stage;
}

/* ZeRO-3's compute copy, this rank's slice in the kernels' type: apart
 * from a slice of another type (the fp32 master beside bf16 kernels). */
static int add_copy_slice(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	const char *name = "params (compute copy, this rank's slice)";

	if (tt->e[ix->param_slice].dtype == tt->act_dtype)
		return ix->copy_slice = ix->param_slice;
	ix->copy_slice = ferry_table_add_single(tt, name, FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
			tt->act_dtype,
				    ix->shard_numel * ferry_dtype_size(tt->act_dtype), FERRY_PLACE_DEVICE);
	if (ix->copy_slice >= 0)
		tt->e[ix->copy_slice].group = FERRY_GROUP_ADAM;
	return ix->copy_slice;
}

/* ZeRO-3's slice of the parameters on the device, in type t (fp32 master
 * weights, or with AdamW on host threads the compute copy), and its
 * compute copy's (add_copy_slice). */
static int add_device_param_slice(struct ferry_tensor_table *tt, enum ferry_dtype t)
{
	struct ferry_table_index *ix = &tt->ix;
	const enum ferry_tensor_kind kind = t == FERRY_F32 ? FERRY_TK_WEIGHT : FERRY_TK_WEIGHT_COPY;

	ix->params_buffer = ferry_table_add_buffer(tt, "params (this rank's slice)", FERRY_SITE_DEVICE,
			FERRY_BUF_DONATED, kind);
	ix->param_slice = ferry_table_add_entry(tt, ix->params_buffer, "params (this rank's slice)", kind, -1, t,
				    ix->shard_numel * ferry_dtype_size(t), FERRY_PLACE_DEVICE);
	if (ix->param_slice < 0)
		return ix->param_slice;
	tt->e[ix->param_slice].group = FERRY_GROUP_ADAM;
	return add_copy_slice(tt);
}

/* Whether ZeRO-3's slice of the parameters is on the host, beside its
 * master slice (adam=host:cpu:shard(N,params) or
 * host:stream:shard(N,params) with layers.weights=host:stream). */
static bool params_on_host(const struct ferry_tensor_table *tt)
{
	return ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params &&
	       ferry_table_place(tt, FERRY_GROUP_LAYER_WEIGHTS)->home == FERRY_HOME_HOST;
}

/* ZeRO-3's parameters: this rank's slice (on the host: add_host_shard
 * adds it, the device a slot to stage it through; on the device in type
 * t, add_device_param_slice), the unstacked ones whole (the kernels'
 * copy; with the edges gathered, a stage's at a time in the edge region,
 * --offload-embeddings'), the stacked ones gathered into the slots of a ring, laid out as
 * the gradient slots (add_grad_slices first), both in the kernels' type.
 * The ring gathers one layer ahead, or with the slice on the host
 * --param-prefetch's D (layers.weights=host:stream(D)): D + 1 slots. */
static int add_param_slices(struct ferry_tensor_table *tt, enum ferry_dtype t)
{
	struct ferry_table_index *ix = &tt->ix;
	struct ferry_table_ring *r = &ix->ring[FERRY_GROUP_LAYER_WEIGHTS];
	const size_t asz = ferry_dtype_size(tt->act_dtype);
	const int depth = params_on_host(tt) ? ferry_table_place(tt, FERRY_GROUP_LAYER_WEIGHTS)->depth : 1;
	int w = params_on_host(tt) ? add_param_stage(tt) : add_device_param_slice(tt, t);

	if (w < 0)
		return w;
	if (edges_gathered(tt)) /* the edge region, each stage's gathered into it */
		w = add_ring(tt, FERRY_GROUP_EDGE_WEIGHTS);
	else
		w = ix->copy_buffer = add_param_subset(tt, "unstacked params (whole)", "copy:", FERRY_SITE_DEVICE,
						       FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY, tt->act_dtype, ix->copy, true,
						       FERRY_GROUP_EDGE_WEIGHTS);
	if (w < 0)
		return w;
	r->slots = tt->cfg.layers < depth + 1 ? tt->cfg.layers : depth + 1;
	r->n_layouts = 1;
	r->slot_numel = ix->grad_slot_numel;
	r->buffer = tt->n_buffers;
	w = ferry_table_add_single(tt, "weight ring (gathered)", FERRY_SITE_DEVICE, FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
		       tt->act_dtype, (size_t)r->slots * r->slot_numel * asz, FERRY_PLACE_DEVICE);
	if (w < 0)
		return w;
	tt->e[w].group = FERRY_GROUP_LAYER_WEIGHTS;
	for (int p = 0; p < tt->md->n_params; p++) {
		struct ferry_param_info pi;

		ix->param[p] = -1;
		if (!ferry_model_param_info(&tt->cfg, p, &pi) && pi.present && pi.layers) {
			r->off[p] = ix->grad_slot_off[p];
			r->w[0][p] = w;
		}
	}
	return w;
}

/* adam=device:shard(N): a slice of each moment, and the parameter array
 * and its compute copy padded to N slices (the update's all-gather writes
 * every slice). */
static int add_adam_shard(struct ferry_tensor_table *tt)
{
	static const char *const names[2] = { "adamw m (this rank's slice)", "adamw v (this rank's slice)" };
	struct ferry_table_index *ix = &tt->ix;
	const size_t S = shard_numel(tt);
	int *buf[2] = { &ix->mom_buffer, &ix->var_buffer }, *slice[2] = { &ix->mom_slice, &ix->var_slice }, r = 0;

	ix->shard_numel = S;
	for (int q = 0; q < FERRY_MODEL_MAX_PARAMS; q++)
		ix->mom[q] = ix->var[q] = -1;
	for (int i = 0; i < 2 && r >= 0; i++) {
		*buf[i] = ferry_table_add_buffer(tt, names[i], FERRY_SITE_DEVICE, FERRY_BUF_DONATED, FERRY_TK_OPT_STATE);
		r = *slice[i] = ferry_table_add_entry(tt, *buf[i], names[i], FERRY_TK_OPT_STATE, -1, FERRY_F32, S * sizeof(float),
					  FERRY_PLACE_DEVICE);
	}
	if (r >= 0 && ix->param_slice < 0)
		r = add_padding(tt, ix->params_buffer, "params: padding to whole slices", FERRY_TK_WEIGHT, FERRY_F32);
	if (r >= 0 && ix->copy_buffer >= 0 && ix->param_slice < 0)
		r = add_padding(tt, ix->copy_buffer, "copy: padding to whole slices", FERRY_TK_WEIGHT_COPY, tt->act_dtype);
	return r;
}

/* One host buffer holding this rank's slice of a parameter array
 * (adam=host:cpu:shard(N)): S elements of dtype. */
static int add_host_slice(struct ferry_tensor_table *tt, const char *name, enum ferry_buffer_kind mem,
			  enum ferry_tensor_kind kind, enum ferry_dtype dtype, int *buffer)
{
	int r = *buffer = ferry_table_add_buffer(tt, name, FERRY_SITE_HOST, mem, kind);

	r = ferry_table_add_entry(tt, r, name, kind, -1, dtype, tt->ix.shard_numel * ferry_dtype_size(dtype),
			FERRY_PLACE_OFFLOAD);
	if (r >= 0)
		tt->e[r].group = FERRY_GROUP_ADAM;
	return r;
}

/* This rank's slice of both moments on the host, in place of whole ones. */
static int add_host_moments(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r;

	for (int q = 0; q < FERRY_MODEL_MAX_PARAMS; q++)
		ix->mom[q] = ix->var[q] = -1;
	r = ix->mom_slice = add_host_slice(tt, "host: adamw m (this rank's slice)", FERRY_BUF_DONATED,
					   FERRY_TK_OPT_STATE, FERRY_F32, &ix->mom_buffer);
	if (r >= 0)
		r = ix->var_slice = add_host_slice(tt, "host: adamw v (this rank's slice)", FERRY_BUF_DONATED,
						   FERRY_TK_OPT_STATE, FERRY_F32, &ix->var_buffer);
	return r;
}

/* adam=host:cpu:shard(N,grads) with layers.weights=host:stream (ZeRO-2):
 * on the host this rank's slice of the gradients, two slots the weight
 * ring sends a layer's gradients into (each reduce-scattered from there
 * into the slices), and the unstacked parameters' whole (the edges' ring
 * and their device copy exchange them there). */
static int add_offloaded_grads(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r, unused;

	ix->shard_numel = shard_numel(tt);
	r = ix->grads_buffer = add_param_subset(tt, "host: grads (unstacked)", "grad:", FERRY_SITE_HOST, FERRY_BUF_TEMP,
						FERRY_TK_GRAD, FERRY_F32, ix->grad, true, FERRY_GROUP_ADAM);
	if (r >= 0)
		r = ix->host_grad_slice = add_host_slice(tt, "host: grads (this rank's slice)", FERRY_BUF_TEMP,
							 FERRY_TK_GRAD, FERRY_F32, &unused);
	return r >= 0 ? add_grad_slots(tt, FERRY_SITE_HOST, "host: gradient slots") : r;
}

/* adam=host:cpu:shard(N) or host:stream:shard(N) with
 * layers.weights=host:stream (ZeRO-1; with (N,grads), ZeRO-2): the weight
 * ring reads the parameters (and their bf16 copy) whole from the host, so
 * every rank keeps them whole there, padded to N slices (the update's
 * all-gather writes every slice), and (ZeRO-1) the gradients whole (the
 * ring writes each layer's; they are averaged in place); the moments are
 * this rank's slice. */
static int add_offloaded_shard(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r;

	ix->shard_numel = shard_numel(tt);
	r = add_host_moments(tt);
	if (r >= 0)
		r = add_padding(tt, ix->params_buffer, "host: params: padding to whole slices", FERRY_TK_WEIGHT, FERRY_F32);
	if (r >= 0 && ix->host_copy_buffer >= 0)
		r = add_padding(tt, ix->host_copy_buffer, "host copy: padding to whole slices", FERRY_TK_WEIGHT_COPY,
				tt->act_dtype);
	return r;
}

/* When the kernels read bf16, this rank's slice of the update's bf16
 * result on the host: uploaded piece by piece after host threads'
 * update; with the parameters on the host too (ZeRO-3), the slice the
 * layers are gathered from, which a streamed update copies down. */
static int add_host_copy_slice(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r = ix->host_copy_slice = add_host_slice(tt, "host: params (compute copy, this rank's slice)",
						     FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY, tt->act_dtype,
						     &ix->host_copy_buffer);

	if (r >= 0 && params_on_host(tt))
		ix->copy_slice = r;
	return r;
}

/* adam=host:stream:shard(N): the device's two-slot ring of master, m
 * and v slices (ZeRO-3 with the parameters on the host, in bf16: and of
 * the update's bf16 result, copied down into the host's slice). */
static int add_streamed_shard(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	const bool copy = params_on_host(tt) && tt->act_dtype != FERRY_F32;
	const size_t slot = 3 * sizeof(float) + (copy ? ferry_dtype_size(tt->act_dtype) : 0);
	int r = copy ? add_host_copy_slice(tt) : 0;

	if (r < 0)
		return r;
	return ix->opt_ring = ferry_table_add_single(tt, "optimizer ring", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
			FERRY_TK_OPT_STATE,
					 FERRY_F32, 2 * ix->opt_chunk * slot, FERRY_PLACE_DEVICE);
}

/* adam=host:cpu:shard(N), host:stream:shard(N): on the device the
 * gradients (host:cpu:shard(N,grads): this rank's slice, as ZeRO-2's)
 * and the compute copy whole (the copy padded to N slices: the
 * update's all-gather writes every slice), which is then the parameters'
 * entry (host:cpu:shard(N,params): ZeRO-3's slice of it, its ring and
 * the unstacked parameters whole, no parameters' entry); on the host
 * this rank's slice of the master weights and both moments; updated by
 * host threads, also of the gradients and, when the kernels read bf16,
 * of the update's bf16 result; streamed, add_streamed_shard. */
static int add_host_shard(struct ferry_tensor_table *tt)
{
	struct ferry_table_index *ix = &tt->ix;
	int r, unused;

	ix->shard_numel = shard_numel(tt);
	if (ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_grads) /* ZeRO-2: the device's gradients a slice */
		r = add_grad_slices(tt);
	else
		r = ix->grads_buffer = add_param_group(tt, "grads", "grad:", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
						       FERRY_TK_GRAD, FERRY_F32, ix->grad, BY_STACKING);
	if (r >= 0 && ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params) /* ZeRO-3: its slice, ring and edges */
		r = add_param_slices(tt, tt->act_dtype);
	else if (r >= 0)
		r = ix->copy_buffer = add_param_group(tt, "params (compute copy)", "", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
						      FERRY_TK_WEIGHT_COPY, tt->act_dtype, ix->copy, BY_STACKING);
	if (r >= 0 && !ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params)
		r = add_padding(tt, ix->copy_buffer, "copy: padding to whole slices", FERRY_TK_WEIGHT_COPY, tt->act_dtype);
	if (!ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params)
		memcpy(ix->param, ix->copy, sizeof(ix->param));
	if (r >= 0)
		r = ix->host_param_slice = add_host_slice(tt, "host: params (this rank's slice)", FERRY_BUF_DONATED,
						     FERRY_TK_WEIGHT, FERRY_F32, &ix->params_buffer);
	if (params_on_host(tt)) /* fp32: the master's bits are the weights' (bf16: below) */
		ix->param_slice = ix->copy_slice = ix->host_param_slice;
	if (r >= 0)
		r = add_host_moments(tt);
	ix->opt_chunk = optimizer_chunk(tt);
	if (r >= 0 && !ferry_table_host_update(tt))
		return add_streamed_shard(tt);
	if (r >= 0 && tt->place.adam_grads_device) /* --device-grads: the slice's pieces through a host ring */
		r = add_host_grad_ring(tt);
	else if (r >= 0)
		r = ix->host_grad_slice = add_host_slice(tt, "host: grads (this rank's slice)", FERRY_BUF_TEMP,
							 FERRY_TK_GRAD, FERRY_F32, &unused);
	if (r >= 0 && tt->act_dtype != FERRY_F32)
		r = add_host_copy_slice(tt);
	return r;
}

/* The host copy for rollback of a split speculative update: this rank's
 * slice of the master weights and both moments, each slice's copy at
 * the start of its own entry (with the master whole, each parameter's
 * entry points at the master's). */
static int add_rollback_slices(struct ferry_tensor_table *tt)
{
	static const char *const what[3] = { "undo: master (this rank's slice)", "undo: adamw m (this rank's slice)",
					     "undo: adamw v (this rank's slice)" };
	const int state[3] = { tt->ix.host_param_slice, tt->ix.mom_slice, tt->ix.var_slice };
	int buf = ferry_table_add_buffer(tt, "host: optimizer undo copy", FERRY_SITE_HOST, FERRY_BUF_TEMP, FERRY_TK_OPT_STATE);

	for (int i = 0; i < 3; i++) {
		int c = ferry_table_add_entry(tt, buf, what[i], FERRY_TK_OPT_STATE, -1, FERRY_F32, tt->ix.shard_numel * sizeof(float),
				  FERRY_PLACE_OFFLOAD);

		if (c < 0)
			return c;
		if (state[i] >= 0)
			tt->e[state[i]].rollback = c;
		for (int q = 0; state[i] < 0 && q < tt->md->n_params; q++) /* the master whole (--offload-params) */
			if (tt->ix.param[q] >= 0)
				tt->e[tt->ix.param[q]].rollback = c; /* at the slice's index (cpu_update.c) */
	}
	return buf;
}

/* Every streamed weight group's ring off (struct ferry_table_ring). */
static void rings_off(struct ferry_table_index *ix)
{
	memset(ix->ring, 0, sizeof(ix->ring));
	for (int g = 0; g < FERRY_GROUP_COUNT; g++) {
		ix->ring[g].buffer = -1;
		for (int k = 0; k < FERRY_EDGE_STAGES; k++)
			for (int p = 0; p < FERRY_MODEL_MAX_PARAMS; p++)
				ix->ring[g].w[k][p] = ix->ring[g].g[k][p] = -1;
	}
}

/* Parameters, gradients, AdamW moments and the compute copy as the
 * weights' and the optimizer's placements say.  With the optimizer state
 * on the host (streamed through a device ring, or updated by host
 * threads) the master weights and moments live there, and the kernels
 * read a device copy (in the activation type, fp32 included).  Returns
 * < 0 on failure. */
static int add_params_placed(struct ferry_tensor_table *tt)
{
	const bool stream = ferry_table_place(tt, FERRY_GROUP_ADAM)->home == FERRY_HOME_HOST;
	const bool shard = ferry_table_place(tt, FERRY_GROUP_ADAM)->shard > 1;
	const enum ferry_site opt = stream ? FERRY_SITE_HOST : FERRY_SITE_DEVICE;
	int r;

	tt->ix.copy_buffer = tt->ix.opt_ring = tt->ix.host_copy_buffer = -1;
	tt->ix.mom_slice = tt->ix.var_slice = -1;
	tt->ix.host_param_slice = tt->ix.host_grad_slice = tt->ix.host_copy_slice = -1;
	tt->ix.grad_slice = tt->ix.grad_ring = tt->ix.param_slice = tt->ix.param_stage = tt->ix.copy_slice =
		tt->ix.host_grad_ring = -1;
	tt->ix.grad_slots = 0;
	tt->ix.grad_slot_numel = 0;
	tt->ix.shard_numel = 0;
	tt->ix.dev_grad_buffer = -1;
	for (int p = 0; p < FERRY_MODEL_MAX_PARAMS; p++)
		tt->ix.copy[p] = tt->ix.host_grad[p] = tt->ix.host_copy[p] = tt->ix.dev_grad[p] = -1;
	rings_off(&tt->ix);
	if (ferry_table_streamed(tt, FERRY_GROUP_LAYER_WEIGHTS))
		return add_offloaded_params(tt);
	if (stream && shard)
		return add_host_shard(tt);
	if (ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_params) { /* ZeRO-3 */
		r = add_grad_slices(tt);
		r = r >= 0 ? add_param_slices(tt, FERRY_F32) : r;
		return r >= 0 ? add_adam_shard(tt) : r;
	}
	r = tt->ix.params_buffer = add_param_group(tt, stream ? "host: params" : "params", "", opt,
						   FERRY_BUF_DONATED, FERRY_TK_WEIGHT, FERRY_F32, tt->ix.param,
						   FERRY_GROUP_ADAM);
	if (r >= 0 && ferry_table_place(tt, FERRY_GROUP_ADAM)->shard_grads)
		r = add_grad_slices(tt);
	else if (r >= 0)
		r = tt->ix.grads_buffer = add_param_group(tt, "grads", "grad:", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
							  FERRY_TK_GRAD, FERRY_F32, tt->ix.grad, BY_STACKING);
	if (r >= 0 && !shard)
		r = tt->ix.mom_buffer = add_param_group(tt, stream ? "host: adamw m" : "adamw m", "adamw m:", opt,
							FERRY_BUF_DONATED, FERRY_TK_OPT_STATE, FERRY_F32, tt->ix.mom,
							FERRY_GROUP_ADAM);
	if (r >= 0 && !shard)
		r = tt->ix.var_buffer = add_param_group(tt, stream ? "host: adamw v" : "adamw v", "adamw v:", opt,
							FERRY_BUF_DONATED, FERRY_TK_OPT_STATE, FERRY_F32, tt->ix.var,
							FERRY_GROUP_ADAM);
	/* derived from the parameters, kept across steps */
	if (r >= 0 && (tt->act_dtype != FERRY_F32 || stream))
		r = tt->ix.copy_buffer = add_param_group(tt, "params (compute copy)", "copy:", FERRY_SITE_DEVICE,
							 FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY, tt->act_dtype,
							 tt->ix.copy, BY_STACKING);
	if (r >= 0 && shard)
		return add_adam_shard(tt);
	if (r >= 0 && ferry_table_host_update(tt))
		return add_cpu_optimizer(tt);
	if (r >= 0 && stream) {
		/* two slots, each a slice of master weights, m and v */
		tt->ix.opt_chunk = optimizer_chunk(tt);
		r = tt->ix.opt_ring = ferry_table_add_single(tt, "optimizer ring", FERRY_SITE_DEVICE, FERRY_BUF_TEMP,
						 FERRY_TK_OPT_STATE, FERRY_F32, 2 * 3 * tt->ix.opt_chunk * sizeof(float),
						 FERRY_PLACE_DEVICE);
	}
	return r;
}

int ferry_table_add_params(struct ferry_tensor_table *tt)
{
	int r = add_params_placed(tt);

	if (r >= 0 && ferry_table_place(tt, FERRY_GROUP_ADAM)->speculative)
		r = tt->ix.shard_numel ? add_rollback_slices(tt) : add_rollback(tt);
	return r;
}
