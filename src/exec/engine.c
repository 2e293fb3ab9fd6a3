/*
 * The layer-stack engine.  See engine.h for what it does; here is how.
 * It does not run anything: it emits tasks into a program (sched/schedule.h)
 * that the executor replays every step.
 *
 * Forward, layer l, op o: if o writes an offloaded tensor t into ring slot
 * s = l % R and that slot held layer l-R's copy, the compute stream first
 * waits for that copy's event (d2h_done[t][s]); after o, an event on the
 * compute stream orders the device-to-host copy of t after its producer.
 *
 * Backward: the last R layers' tensors are still in their slots and are
 * read in place, after their copy-out (a recomputation may rewrite them).
 * Any other layer j's offloaded tensors are copied back into ring slot
 * j % R on the host-to-device stream, after the slot's forward copy-out
 * (d2h_done) and after the backward of the layer that used the slot before
 * (bwd_done[s]), then prefetch_ready[s] is recorded.  Before layer l's
 * backward the compute stream waits for prefetch_ready[l % R]; after it, the
 * prefetch for layer l - depth - 1 is issued.  With R >= depth + 1 the
 * slot's previous user (layer j + R >= l) has always been submitted.  With
 * a depth per host tier, layer j is loaded depth(j) ahead, after layer
 * j + depth(j) + 1's backward (depth(j) <= depth: the same holds); the
 * tiers' depths grow with j (slower tiers hold later layers), so the loads
 * still go onto the h2d stream in the order the backward reads them.
 */
#include "exec/engine.h"
#include "core/error.h"
#include "sched/tier_copy.h"

#include <stdio.h>
#include <string.h>

struct ferry_layer_exec {
	const struct ferry_layer_decl *decl;
	struct ferry_dims dims;
	int B, T, L;         /* the largest batch, the stack's layers */
	float scalars[FERRY_OP_SCALAR_COUNT];
	struct ferry_weight_table weights;
	struct ferry_stack_plan sp;
	struct ferry_stack_storage mem;
	char *grad[FERRY_LAYER_MAX_TENSORS];
	char *io_grad[2];    /* alternating layer input/output gradients */
	int io_cur;          /* while emitting backward: io_grad[io_cur] is the
				current layer's output gradient */

	/* offloading: the schedule's streams and events */
	int compute, d2h, h2d;
	int produced;
	int d2h_done[FERRY_LAYER_MAX_TENSORS * 65]; /* [t * ring + slot] */
	int bwd_done[65], prefetch_ready[65];       /* [slot]; ring <= depth + 1 <= 65 */

	/* parameter streaming (weights.rings): the layers' weight ring, its
	 * events registered here */
	bool wstream;
	struct ferry_weight_rings wr;
	struct ferry_layer_hook hook;
};

static bool offloads(const struct ferry_layer_exec *ex)
{
	return ex->sp.offloaded != 0;
}

/* Device address of tensor t as layer l sees it. */
static char *act_ptr(const struct ferry_layer_exec *ex, int t, int l)
{
	const struct ferry_stack_plan *sp = &ex->sp;
	int slot = 0;

	if (t == ex->decl->output) { /* the next layer's input */
		t = ex->decl->input;
		l++;
	}
	switch (sp->kind[t]) {
	case FERRY_SLOT_PER_LAYER: slot = l; break;
	case FERRY_SLOT_RING: slot = l % sp->ring; break;
	case FERRY_SLOT_INPUT:
		slot = !sp->input_offloaded ? l : l == sp->L ? sp->ring : l % sp->ring;
		break;
	case FERRY_SLOT_SHARED:
	case FERRY_SLOT_NONE:
		break;
	}
	if (sp->kind[t] == FERRY_SLOT_INPUT && sp->input_in_place) {
		if (slot == 0)
			return ex->mem.input0; /* the caller's buffer */
		slot--;                        /* act[t] begins at slot 1 */
	}
	if (!ex->mem.act[t]) /* a dry build, for printing */
		return NULL;
	return (char *)ex->mem.act[t] + (size_t)slot * sp->slot_bytes[t];
}

static char *host_ptr(const struct ferry_layer_exec *ex, int t, int l)
{
	if (!ex->mem.host[t])
		return NULL;
	return (char *)ex->mem.host[t] + (size_t)l * (ex->sp.host_stride ? ex->sp.host_stride : ex->sp.host_bytes[t]);
}

static int d2h_event(const struct ferry_layer_exec *ex, int t, int l)
{
	return ex->d2h_done[t * ex->sp.ring + l % ex->sp.ring];
}

void ferry_layer_exec_free(struct ferry_layer_exec *ex)
{
	ferry_free(ex);
}

/* What the schedule calls the layers' weight ring. */
static const struct ferry_ring_names layer_ring_names = { "weights", "weight gradients", "weights",
							  "weight gradient slot" };

/* The layers' weight ring on the engine's streams. */
static void register_weight_rings(struct ferry_layer_exec *ex, struct ferry_sched_resources *res)
{
	ex->wr.per_stage = false;
	ex->wr.names = &layer_ring_names;
	ex->wr.compute = ex->compute;
	if (!ex->wr.gather) /* a gathered ring loads on the caller's comm stream */
		ex->wr.h2d = ex->h2d;
	ex->wr.d2h = ex->d2h;
	ferry_weight_ring_register(&ex->wr, res);
}

/* The copy streams and the events offloading orders its copies with. */
static ferry_status register_offload(struct ferry_layer_exec *ex, struct ferry_sched_resources *res)
{
	const struct ferry_stack_plan *sp = &ex->sp;
	char name[64];

	ex->d2h = ferry_sched_stream(res, "d2h");
	ex->h2d = ferry_sched_stream(res, "h2d");
	if (ex->wstream)
		register_weight_rings(ex, res);
	if (!offloads(ex))
		return res->failed ? ferry_error(FERRY_ERR_NOMEM, "offload engine: out of host memory") : FERRY_OK;
	ex->produced = ferry_sched_event(res, "produced");
	for (int t = 0; t < sp->n_tensors; t++)
		for (int s = 0; s < sp->ring && (sp->offloaded & (1u << t)); s++) {
			snprintf(name, sizeof(name), "copied out %.20s [%d]", ex->decl->tensors[t].name, s);
			ex->d2h_done[t * sp->ring + s] = ferry_sched_event(res, name);
		}
	for (int s = 0; s < sp->ring; s++) {
		snprintf(name, sizeof(name), "backward done [%d]", s);
		ex->bwd_done[s] = ferry_sched_event(res, name);
		snprintf(name, sizeof(name), "prefetched [%d]", s);
		ex->prefetch_ready[s] = ferry_sched_event(res, name);
	}
	return res->failed ? ferry_error(FERRY_ERR_NOMEM, "offload engine: out of host memory") : FERRY_OK;
}

ferry_status ferry_layer_exec_create(struct ferry_sched_resources *res, int compute,
				     const struct ferry_layer_decl *decl,
				     const struct ferry_dims *dims, const float *scalars,
				     const struct ferry_weight_table *weights,
				     const struct ferry_stack_plan *plan,
				     const struct ferry_stack_storage *storage,
				     struct ferry_layer_exec **out)
{
	struct ferry_layer_exec *ex;
	ferry_status st = FERRY_OK;
	char *g;

	*out = NULL;
	if (plan->ring > 65)
		return ferry_error(FERRY_ERR_INVALID, "offload ring of %d slots: at most 65", plan->ring);
	if (plan->input_in_place && plan->input_offloaded)
		return ferry_error(FERRY_ERR_INVALID, "an offloaded layer input cannot be read in place: its slots "
				   "are a ring");
	ex = ferry_calloc(1, sizeof(*ex));
	if (!ex)
		return ferry_error(FERRY_ERR_NOMEM, "layer executor: out of host memory");
	ex->decl = decl;
	ex->dims = *dims;
	ex->B = (int)dims->v[FERRY_DIM_B];
	ex->T = (int)dims->v[FERRY_DIM_T];
	ex->L = (int)dims->v[FERRY_DIM_L];
	if (scalars)
		memcpy(ex->scalars, scalars, sizeof(ex->scalars));
	ex->weights = *weights;
	ex->sp = *plan;
	ex->mem = *storage;
	ex->compute = compute;
	if (weights->rings) {
		if (weights->rings->ring < 1 || weights->rings->ring > FERRY_WEIGHT_RING_MAX ||
		    weights->rings->grad_ring < 1 || weights->rings->grad_ring > 2) {
			ferry_layer_exec_free(ex);
			return ferry_error(FERRY_ERR_INVALID, "weight ring of %d slots: from 1 to %d",
					   weights->rings->ring, FERRY_WEIGHT_RING_MAX);
		}
		ex->wstream = true;
		ex->wr = *weights->rings;
		ex->weights.rings = &ex->wr;
	}
	if (offloads(ex) || ex->wstream)
		st = register_offload(ex, res);
	if (st) {
		ferry_layer_exec_free(ex);
		return st;
	}
	g = ex->mem.grad;
	for (int t = 0; t < decl->n_tensors && g; t++) {
		if (!(plan->has_grad & (1u << t)) || t == decl->output)
			continue;
		if (t == decl->input) {
			ex->io_grad[0] = g;
			ex->io_grad[1] = plan->io_grad_in_last_output ? act_ptr(ex, t, ex->L)
								      : g + plan->slot_bytes[t];
		} else {
			ex->grad[t] = g + plan->grad_off[t];
		}
	}
	*out = ex;
	return FERRY_OK;
}

void *ferry_layer_exec_input(struct ferry_layer_exec *ex)
{
	return act_ptr(ex, ex->decl->input, 0);
}

void *ferry_layer_exec_output(struct ferry_layer_exec *ex)
{
	return act_ptr(ex, ex->decl->input, ex->L);
}

/* Backward starts on io_grad[0] and alternates once per layer. */
void *ferry_layer_exec_output_grad(struct ferry_layer_exec *ex)
{
	return ex->io_grad[0];
}

const void *ferry_layer_exec_input_grad(struct ferry_layer_exec *ex)
{
	return ex->io_grad[ex->L % 2];
}

/* Element offset of parameter w of layer l, for a call whose view of the
 * weight slot has `view` elements. */
static size_t weight_offset(const struct ferry_layer_exec *ex, struct ferry_weight_ref w, int l,
			    size_t view, bool grad)
{
	size_t layer = (size_t)l * ex->weights.layer_stride[w.param];

	if (grad && ex->weights.grad_slots && ex->weights.layer_stride[w.param]) /* a gradient slot */
		layer = (size_t)(l % ex->weights.grad_slots) * ex->weights.grad_slot_numel;
	else if (ex->wstream && ex->weights.layer_stride[w.param]) /* a ring slot */
		layer = (size_t)(l % (grad ? ex->wr.grad_ring : ex->wr.ring)) * ex->wr.slot_numel;
	return layer + (size_t)w.block * view;
}

/* The batch's dimensions: the created ones with B and T replaced. */
static struct ferry_dims batch_dims(const struct ferry_layer_exec *ex, int B, int T)
{
	struct ferry_dims d = ex->dims;

	d.v[FERRY_DIM_B] = B;
	d.v[FERRY_DIM_T] = T;
	return d;
}

/* The forward call of op o in layer l. */
static void make_call(const struct ferry_layer_exec *ex, int o, int l, int B, int T,
		      struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &ex->decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	struct ferry_dims d = batch_dims(ex, B, T);
	size_t asz = ferry_dtype_size(ex->sp.act_dtype);

	ferry_op_call_shape(ex->decl, o, &d, ex->scalars, l, c);
	c->ws = ex->mem.ws;
	c->ws_bytes = ex->mem.ws_bytes;
	if (op->kind == FERRY_OP_ROPE || op->kind == FERRY_OP_ATTENTION)
		c->positions = ex->mem.positions;
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = act_ptr(ex, op->out[i], l);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = act_ptr(ex, op->in[i], l);
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0)
			c->w[i] = !ex->weights.base[op->w[i].param] ? NULL :
				  (const char *)ex->weights.base[op->w[i].param] +
				  weight_offset(ex, op->w[i], l, ferry_op_weight_view(c, i), false) * asz;
}

/* The tensor and layer an output of layer l is stored as, if it is
 * offloaded: the layer output is the next layer's input. */
static bool offloaded_as(const struct ferry_layer_exec *ex, int t, int l, int *tt, int *ll)
{
	*tt = t;
	*ll = l;
	if (t == ex->decl->output) {
		*tt = ex->decl->input;
		*ll = l + 1;
		if (*ll == ex->L) /* the stack output stays for the epilogue */
			return false;
	}
	return ex->sp.offloaded & (1u << *tt);
}

static void copy_out(struct ferry_layer_exec *ex, struct ferry_program *p, int t, int l, size_t bytes)
{
	ferry_emit_record(p, ex->compute, ex->produced, l);
	ferry_emit_wait(p, ex->d2h, ex->produced, l);
	if (!ferry_tier_emit_copy(p, ex->d2h, ex->mem.tiers, host_ptr(ex, t, l), act_ptr(ex, t, l), bytes,
				  FERRY_COPY_D2H, l, ex->decl->tensors[t].name))
		ferry_emit_copy(p, ex->d2h, host_ptr(ex, t, l), act_ptr(ex, t, l), bytes, FERRY_COPY_D2H, l,
				ex->decl->tensors[t].name);
	ferry_emit_record(p, ex->d2h, d2h_event(ex, t, l), l);
}

static size_t tensor_bytes(const struct ferry_layer_exec *ex, int t, int B, int T)
{
	struct ferry_dims d = batch_dims(ex, B, T);

	return ferry_layer_tensor_numel(ex->decl, t, &d) * ex->sp.elem[t];
}

/* "query_proj" (forward) or "d query_proj" (backward): what op o makes. */
static const char *op_label(const struct ferry_layer_decl *decl, int o, bool backward, char *buf, size_t n)
{
	snprintf(buf, n, "%s%.40s", backward ? "d " : "", decl->tensors[decl->ops[o].out[0]].name);
	return buf;
}

/* Before op o of layer l: a ring slot it writes is rewritten only after
 * its last copy-out. */
static void slots_free(struct ferry_layer_exec *ex, struct ferry_program *p, int o, int l)
{
	const struct ferry_op_info *info = ferry_op_info(ex->decl->ops[o].kind);
	int t, tl;

	for (int i = 0; i < info->n_out; i++)
		if (offloaded_as(ex, ex->decl->ops[o].out[i], l, &t, &tl) && tl >= ex->sp.ring)
			ferry_emit_wait(p, ex->compute, d2h_event(ex, t, tl), l);
}

/* After op o of layer l: its offloaded outputs to the host. */
static void copy_outs(struct ferry_layer_exec *ex, struct ferry_program *p, int o, int l, int B, int T)
{
	const struct ferry_op_info *info = ferry_op_info(ex->decl->ops[o].kind);
	int t, tl;

	for (int i = 0; i < info->n_out; i++)
		if (offloaded_as(ex, ex->decl->ops[o].out[i], l, &t, &tl))
			copy_out(ex, p, t, tl, tensor_bytes(ex, t, B, T));
}

/* ---- the tiled MLP (--mlp-tile) ------------------------------------------------------ */

static bool inner(const struct ferry_layer_exec *ex, int t)
{
	return ferry_row_tiles_inner(&ex->sp.tiles, t);
}

/* Bytes of one row (token) of tensor t. */
static size_t row_bytes(const struct ferry_layer_exec *ex, int t)
{
	return (size_t)ferry_shape_row_width(&ex->decl->tensors[t].shape, &ex->dims) * ex->sp.elem[t];
}

/* ptr, moved to row r0 of tensor t unless t is inner (one tile's rows). */
static void *rows_at(const struct ferry_layer_exec *ex, const void *ptr, int t, int r0)
{
	return ptr && !inner(ex, t) ? (char *)ptr + (size_t)r0 * row_bytes(ex, t) : (void *)ptr;
}

/* Op o's forward call of layer l on rows [r0, r0 + rows) of the batch. */
static void tile_call(const struct ferry_layer_exec *ex, int o, int l, int r0, int rows, struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &ex->decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);

	make_call(ex, o, l, 1, rows, c);
	if (c->positions)
		c->positions += r0;
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = rows_at(ex, c->out[i], op->out[i], r0);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = rows_at(ex, c->in[i], op->in[i], r0);
}

static const char *tile_label(const struct ferry_layer_exec *ex, int o, const char *prefix, int r0, char *buf,
			      size_t n)
{
	snprintf(buf, n, "%.10s%.26s rows %d+", prefix, ex->decl->tensors[ex->decl->ops[o].out[0]].name, r0);
	return buf;
}

/* The MLP's ops tile after tile: every output row made once, the inner
 * tensors holding one tile at a time. */
static void tiled_forward(struct ferry_layer_exec *ex, struct ferry_program *p, int l, int B, int T,
			  const char *prefix)
{
	const int n = B * T, tr = ex->sp.tile_rows;
	struct ferry_op_call c;
	char label[56];

	for (int r0 = 0; r0 < n; r0 += tr)
		for (int o = ex->sp.tiles.first; o <= ex->sp.tiles.last; o++) {
			tile_call(ex, o, l, r0, n - r0 < tr ? n - r0 : tr, &c);
			ferry_emit_op(p, ex->compute, &c, l, tile_label(ex, o, prefix, r0, label, sizeof(label)));
		}
}

ferry_status ferry_layer_exec_forward(struct ferry_layer_exec *ex, struct ferry_program *p, int B, int T,
				      bool for_backward)
{
	const struct ferry_layer_decl *decl = ex->decl;
	bool offload = for_backward && offloads(ex);
	struct ferry_op_call c;
	char label[56];

	if (B < 1 || T < 1 || (int64_t)B * T > (int64_t)ex->B * ex->T || T > ex->T)
		return ferry_error(FERRY_ERR_INVALID, "batch %dx%d exceeds the executor's %dx%d",
				   B, T, ex->B, ex->T);
	if (offload && ex->sp.input_offloaded)
		copy_out(ex, p, decl->input, 0, tensor_bytes(ex, decl->input, B, T));
	for (int l = 0; ex->wstream && l < ex->wr.ring; l++)
		ferry_weight_ring_load(&ex->wr, p, l, false);
	for (int l = 0; l < ex->L; l++) {
		if (ex->wstream)
			ferry_weight_ring_acquire(&ex->wr, p, l);
		for (int o = 0; o < decl->n_ops; o++) {
			int last = ferry_stack_tiled_op(&ex->sp, o) ? ex->sp.tiles.last : o;

			for (int u = o; offload && u <= last; u++)
				slots_free(ex, p, u, l);
			if (last != o) {
				tiled_forward(ex, p, l, B, T, "");
			} else {
				make_call(ex, o, l, B, T, &c);
				ferry_emit_op(p, ex->compute, &c, l, op_label(decl, o, false, label, sizeof(label)));
			}
			for (int u = o; offload && u <= last; u++)
				copy_outs(ex, p, u, l, B, T);
			o = last;
		}
		if (ex->wstream) {
			ferry_weight_ring_release(&ex->wr, p, l);
			if (l + ex->wr.ring < ex->L)
				ferry_weight_ring_load(&ex->wr, p, l + ex->wr.ring, false);
		}
	}
	return p->failed ? ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory") : FERRY_OK;
}

/* The last R layers' tensors are still in their ring slots after the
 * forward pass: the backward reads them where they are. */
static bool resident(const struct ferry_layer_exec *ex, int j)
{
	return j >= ex->L - ex->sp.ring;
}

/* Copies layer j's offloaded tensors back into ring slot j % R. */
static void prefetch(struct ferry_layer_exec *ex, struct ferry_program *p, int j, int B, int T)
{
	int slot = j % ex->sp.ring;

	if (resident(ex, j))
		return;
	ferry_emit_wait(p, ex->h2d, ex->bwd_done[slot], j);
	for (int t = 0; t < ex->sp.n_tensors; t++) {
		if (!(ex->sp.offloaded & (1u << t)))
			continue;
		ferry_emit_wait(p, ex->h2d, d2h_event(ex, t, j), j);
		if (!ferry_tier_emit_copy(p, ex->h2d, ex->mem.tiers, host_ptr(ex, t, j), act_ptr(ex, t, j),
					  tensor_bytes(ex, t, B, T), FERRY_COPY_H2D, j, ex->decl->tensors[t].name))
			ferry_emit_copy(p, ex->h2d, act_ptr(ex, t, j), host_ptr(ex, t, j), tensor_bytes(ex, t, B, T),
					FERRY_COPY_H2D, j, ex->decl->tensors[t].name);
	}
	ferry_emit_record(p, ex->h2d, ex->prefetch_ready[slot], j);
}

static char *grad_of(struct ferry_layer_exec *ex, int t, int io_out)
{
	const struct ferry_layer_decl *decl = ex->decl;

	if (!(ex->sp.has_grad & (1u << t)))
		return NULL;
	if (ex->sp.grad_alias[t] >= 0) /* written in place over this one */
		t = ex->sp.grad_alias[t];
	if (t == decl->output)
		return ex->io_grad[io_out];
	if (t == decl->input)
		return ex->io_grad[!io_out];
	return ex->grad[t];
}

/* The tensor whose gradient bytes t's gradient is (itself, or the one
 * its in-place backward writes over). */
static int grad_owner(const struct ferry_layer_exec *ex, int t)
{
	return ex->sp.grad_alias[t] >= 0 ? ex->sp.grad_alias[t] : t;
}

/* Zeroes the gradient of tensor t (before its first accumulation). */
static void zero_grad(struct ferry_layer_exec *ex, struct ferry_program *p, int t, int io_out, int l, int B, int T)
{
	char label[56];

	snprintf(label, sizeof(label), "d %.50s", ex->decl->tensors[t].name);
	ferry_emit_zero(p, ex->compute, grad_of(ex, t, io_out), tensor_bytes(ex, t, B, T), l, label);
}

/* The input's gradient starts from zero (the others just before their
 * first writer: they share the workspace); what the policy dropped is
 * recomputed from what it kept. */
static void backward_prepare(struct ferry_layer_exec *ex, struct ferry_program *p, int l, int B, int T)
{
	const struct ferry_layer_decl *decl = ex->decl;
	struct ferry_op_call c;
	char label[56];

	if (ex->sp.has_grad & (1u << decl->input))
		zero_grad(ex, p, decl->input, ex->io_cur, l, B, T);
	for (int o = 0; o < decl->n_ops; o++) {
		if (ex->sp.tile_refill && o == ex->sp.tiles.first)
			tiled_forward(ex, p, l, B, T, "recompute ");
		if (!(ex->sp.recompute_ops & (1u << o)))
			continue;
		make_call(ex, o, l, B, T, &c);
		snprintf(label, sizeof(label), "recompute %.40s", decl->tensors[decl->ops[o].out[0]].name);
		ferry_emit_op(p, ex->compute, &c, l, label);
	}
}

/* The gradient fields of op o's backward call (its forward one made) in
 * layer l; r0 >= 0: on the tile starting at row r0. */
static void backward_fields(struct ferry_layer_exec *ex, int o, int l, int io_out, int r0, struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &ex->decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);

	c->backward = true;
	c->grad_assign = ex->sp.grad_assign_ops & (1u << o);
	for (int i = 0; i < info->n_out; i++)
		c->dout[i] = r0 < 0 ? grad_of(ex, op->out[i], io_out)
				    : rows_at(ex, grad_of(ex, op->out[i], io_out), grad_owner(ex, op->out[i]), r0);
	for (int i = 0; i < info->n_in; i++)
		c->din[i] = r0 < 0 ? grad_of(ex, op->in[i], io_out)
				   : rows_at(ex, grad_of(ex, op->in[i], io_out), grad_owner(ex, op->in[i]), r0);
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0 && ex->weights.grad_base[op->w[i].param])
			c->dw[i] = ex->weights.grad_base[op->w[i].param] +
				   weight_offset(ex, op->w[i], l, ferry_op_weight_view(c, i), true);
}

/* The MLP's backward, tile after tile: each tile's inner tensors made
 * again from the run's inputs, then its ops' backward in reverse on the
 * tile's rows; gradients of what outlives the run start from zero before
 * the first tile and gather every tile's share, the inner ones' (one
 * tile's rows) are zeroed per tile. */
static void tiled_backward(struct ferry_layer_exec *ex, struct ferry_program *p, int l, int B, int T, int io_out)
{
	const struct ferry_layer_decl *decl = ex->decl;
	const int n = B * T, tr = ex->sp.tile_rows, first = ex->sp.tiles.first, last = ex->sp.tiles.last;
	struct ferry_op_call c;
	char label[56];

	for (int t = 0; t < decl->n_tensors; t++)
		if (ex->sp.grad_zero_op[t] >= first && ex->sp.grad_zero_op[t] <= last && !inner(ex, t))
			zero_grad(ex, p, t, io_out, l, B, T);
	for (int r0 = 0; r0 < n; r0 += tr) {
		const int rows = n - r0 < tr ? n - r0 : tr;

		for (int o = first; o <= last; o++) {
			if (!ferry_row_tiles_makes_inner(&ex->sp.tiles, decl, o))
				continue;
			tile_call(ex, o, l, r0, rows, &c);
			ferry_emit_op(p, ex->compute, &c, l, tile_label(ex, o, "recompute ", r0, label, sizeof(label)));
		}
		for (int o = last; o >= first; o--) {
			for (int t = 0; t < decl->n_tensors; t++)
				if (ex->sp.grad_zero_op[t] == o && inner(ex, t))
					ferry_emit_zero(p, ex->compute, grad_of(ex, t, io_out), (size_t)rows * row_bytes(ex, t),
							l, tile_label(ex, ferry_layer_producer(decl, t), "d ", r0, label,
								      sizeof(label)));
			tile_call(ex, o, l, r0, rows, &c);
			backward_fields(ex, o, l, io_out, r0, &c);
			ferry_emit_op(p, ex->compute, &c, l, tile_label(ex, o, "d ", r0, label, sizeof(label)));
		}
	}
}

static void backward_layer(struct ferry_layer_exec *ex, struct ferry_program *p, int l, int B, int T)
{
	const struct ferry_layer_decl *decl = ex->decl;
	int io_out = ex->io_cur;
	struct ferry_op_call c;
	char label[56];

	backward_prepare(ex, p, l, B, T);
	for (int o = decl->n_ops - 1; o >= 0; o--) {
		if (ferry_stack_tiled_op(&ex->sp, o)) {
			tiled_backward(ex, p, l, B, T, io_out);
			o = ex->sp.tiles.first;
			continue;
		}
		for (int t = 0; t < decl->n_tensors; t++)
			if (ex->sp.grad_zero_op[t] == o)
				zero_grad(ex, p, t, io_out, l, B, T);
		make_call(ex, o, l, B, T, &c);
		backward_fields(ex, o, l, io_out, -1, &c);
		ferry_emit_op(p, ex->compute, &c, l, op_label(decl, o, true, label, sizeof(label)));
	}
	ferry_emit_grads_done(p, ex->compute, l);
	ex->io_cur = !io_out; /* this layer's input gradient feeds layer l-1 */
}

void ferry_layer_exec_set_hook(struct ferry_layer_exec *ex, const struct ferry_layer_hook *hook)
{
	ex->hook = hook ? *hook : (struct ferry_layer_hook){ 0 };
}

ferry_status ferry_layer_exec_backward(struct ferry_layer_exec *ex, struct ferry_program *p, int B, int T,
				       bool grads_from_host)
{
	int L = ex->L, depth = ex->sp.depth;
	bool offload = offloads(ex);

	ex->io_cur = 0;
	for (int j = L - 1; offload && j >= 0 && j >= L - 1 - depth; j--)
		if (j + ferry_stack_layer_depth(&ex->sp, j) >= L - 1)
			prefetch(ex, p, j, B, T);
	for (int l = L - 1; l >= 0; l--) {
		int slot = l % ex->sp.ring;

		if (offload && !resident(ex, l))
			ferry_emit_wait(p, ex->compute, ex->prefetch_ready[slot], l);
		/* a resident layer's slots may still be being copied out, and a
		 * recomputation rewrites (the same values into) kept tensors */
		for (int t = 0; offload && resident(ex, l) && t < ex->sp.n_tensors; t++)
			if (ex->sp.offloaded & (1u << t))
				ferry_emit_wait(p, ex->compute, d2h_event(ex, t, l), l);
		if (ex->wstream && l < ex->L - ex->wr.ring) /* else still there from the forward */
			ferry_weight_ring_acquire(&ex->wr, p, l);
		if (ex->hook.before_layer) /* (before the ring's gradients start: ZeRO-2 gathers what they start from) */
			ex->hook.before_layer(ex->hook.ctx, p, l);
		if (ex->wstream)
			ferry_weight_ring_start_grads(&ex->wr, p, l, grads_from_host);
		backward_layer(ex, p, l, B, T);
		if (ex->wstream) {
			ferry_weight_ring_release(&ex->wr, p, l);
			if (ex->hook.grads_written)
				ex->hook.grads_written(ex->hook.ctx, p, l);
			ferry_weight_ring_grads_out(&ex->wr, p, l);
			if (l - ex->wr.ring >= 0)
				ferry_weight_ring_load(&ex->wr, p, l - ex->wr.ring, true);
		}
		if (offload) {
			ferry_emit_record(p, ex->compute, ex->bwd_done[slot], l);
			for (int j = l - 1; j >= 0 && j >= l - depth - 1; j--)
				if (j + ferry_stack_layer_depth(&ex->sp, j) + 1 == l)
					prefetch(ex, p, j, B, T);
		}
		if (ex->hook.after_layer)
			ex->hook.after_layer(ex->hook.ctx, p, l);
	}
	return p->failed ? ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory") : FERRY_OK;
}
