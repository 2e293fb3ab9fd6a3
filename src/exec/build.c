/*
 * Compiling a model's step into programs of tasks (sched/schedule.h): the
 * prologue and epilogue here, the layer stack by the offload engine.
 *
 * Stage tensors bound to the stack (the prologue's output, the epilogue's
 * input) are the engine's storage, and so are their gradients.  Nothing
 * here knows which model it compiles.
 */
#include "exec/model_internal.h"
#include "core/error.h"
#include "sched/tier_copy.h"

#include <stdio.h>
#include <string.h>

/* The prologue or the epilogue: a declaration, its roles, table indices,
 * where its ops find their parameters and gradients. */
struct stage {
	const struct ferry_layer_decl *d;
	const struct ferry_stage_tensor *roles;
	const int *index, *grad_index;
	void *const *w;
	float *const *g;
	int unit;  /* its unit in the edges' ring: FERRY_EDGE_PROLOGUE or _EPILOGUE */
};

static struct stage prologue_of(const struct ferry_model *m)
{
	bool e = ferry_table_streamed(&m->tt, FERRY_GROUP_EDGE_WEIGHTS);

	return (struct stage){ m->md->prologue, m->md->prologue_roles, m->tt.ix.prologue, m->tt.ix.prologue_grad,
			       e ? m->edge_w[FERRY_EDGE_PROLOGUE] : m->wptr, e ? m->edge_g[FERRY_EDGE_PROLOGUE] : m->gptr,
			       FERRY_EDGE_PROLOGUE };
}

static struct stage epilogue_of(const struct ferry_model *m)
{
	bool e = ferry_table_streamed(&m->tt, FERRY_GROUP_EDGE_WEIGHTS);

	return (struct stage){ m->md->epilogue, m->md->epilogue_roles, m->tt.ix.epilogue, m->tt.ix.epilogue_grad,
			       e ? m->edge_w[FERRY_EDGE_EPILOGUE] : m->wptr, e ? m->edge_g[FERRY_EDGE_EPILOGUE] : m->gptr,
			       FERRY_EDGE_EPILOGUE };
}

/* The first present parameter: its host entries start the parameter array. */
static int first_param(const struct ferry_model *m)
{
	for (int q = 0; q < m->md->n_params; q++)
		if (m->tt.ix.param[q] >= 0)
			return q;
	return 0;
}

/* The gradient buffer (all parameters' gradients, in array order). */
static void *grads_base(const struct ferry_model *m)
{
	ferry_buffer_t b = m->mem.dev[m->tt.ix.grads_buffer];

	return b ? ferry_buffer_ptr(b) : NULL;
}

/* --offload-params: the unstacked parameters' device gradients. */
static void *dev_grads(const struct ferry_model *m)
{
	ferry_buffer_t b = m->mem.dev[m->tt.ix.dev_grad_buffer];

	return b ? ferry_buffer_ptr(b) : NULL;
}

static void *stage_ptr(const struct ferry_model *m, const struct stage *s, int t)
{
	switch (s->roles[t].role) {
	case FERRY_ROLE_STACK_INPUT: return ferry_layer_exec_input(m->layers);
	case FERRY_ROLE_STACK_OUTPUT: return ferry_layer_exec_output(m->layers);
	case FERRY_ROLE_ALIAS: return stage_ptr(m, s, s->roles[t].alias_of);
	default: return ferry_entry(m, s->index[t]);
	}
}

static bool stage_has_grad(const struct stage *s, int t)
{
	if (!(ferry_layer_differentiable(s->d) & (1u << t)))
		return false;
	switch (s->roles[t].role) {
	case FERRY_ROLE_STACK_INPUT:
	case FERRY_ROLE_STACK_OUTPUT:
	case FERRY_ROLE_ACT:
		return true;
	default:
		return false;
	}
}

/* The address of stage tensor t's gradient (NULL: none, or a dry build). */
static void *stage_grad(const struct ferry_model *m, const struct stage *s, int t)
{
	if (!stage_has_grad(s, t))
		return NULL;
	switch (s->roles[t].role) {
	case FERRY_ROLE_STACK_INPUT: return (void *)ferry_layer_exec_input_grad(m->layers);
	case FERRY_ROLE_STACK_OUTPUT: return ferry_layer_exec_output_grad(m->layers);
	default: return s->roles[t].grad_in_place ? stage_ptr(m, s, t) : ferry_entry(m, s->grad_index[t]);
	}
}

/* Stage tensor index of a role (tokens, targets, losses), or -1. */
static int role_tensor(const struct stage *s, enum ferry_tensor_role role)
{
	for (int t = 0; t < s->d->n_tensors; t++)
		if (s->roles[t].role == role)
			return t;
	return -1;
}

/* The tensor table's kernel workspace, for the backends that need one. */
static void with_workspace(const struct ferry_model *m, struct ferry_op_call *c)
{
	if (m->tt.ix.workspace >= 0) {
		c->ws = ferry_entry(m, m->tt.ix.workspace);
		c->ws_bytes = m->tt.e[m->tt.ix.workspace].bytes;
	}
}

/* Op o's forward call in a stage (stage parameters are not per layer). */
static void stage_call(const struct ferry_model *m, const struct stage *s, int o, int B, int T,
		       struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &s->d->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	struct ferry_dims d = ferry_model_dims(&m->cfg, B, T);

	ferry_op_call_shape(s->d, o, &d, m->scalars, -1, c);
	with_workspace(m, c);
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = stage_ptr(m, s, op->out[i]);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = stage_ptr(m, s, op->in[i]);
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0 && s->w[op->w[i].param])
			c->w[i] = (char *)s->w[op->w[i].param] +
				  (size_t)op->w[i].block * ferry_op_weight_view(c, i) * m->asz;
	if (op->kind == FERRY_OP_ENCODER || op->kind == FERRY_OP_SOFTMAX_XENT)
		c->tokens = stage_ptr(m, s, op->tokens);
	if (op->kind == FERRY_OP_ENCODER || op->kind == FERRY_OP_ROPE || op->kind == FERRY_OP_ATTENTION)
		c->positions = ferry_entry(m, m->tt.ix.positions); /* NULL: token streams */
}

/* ---- --loss-tile: the LM head and the loss over tiles of tokens ------------------- */

static bool loss_tiled(const struct ferry_model *m, const struct stage *s, int o)
{
	return m->tt.place.loss_tile && s->d == m->md->epilogue && o >= m->tt.loss.first && o <= m->tt.loss.last;
}

/* Bytes per row (token) of stage tensor t as stored: ids, losses and
 * statistics 4 bytes a value, activations the activation type. */
static size_t stage_row_bytes(const struct ferry_model *m, const struct stage *s, int t)
{
	enum ferry_tensor_role r = s->roles[t].role;
	size_t elem = r == FERRY_ROLE_TOKENS || r == FERRY_ROLE_TARGETS || r == FERRY_ROLE_LOSSES ||
				      ferry_layer_tensor_is_stat(s->d, t) ? 4 : m->asz;

	return (size_t)ferry_shape_row_width(&s->d->tensors[t].shape, &m->tt.dims) * elem;
}

/* ptr (tensor t's, or its gradient's: grad), moved to row r0 unless the
 * tensor it is stored as holds one tile's rows. */
static void *stage_rows(const struct ferry_model *m, const struct stage *s, void *ptr, int t, int r0, bool grad)
{
	while (s->roles[t].role == FERRY_ROLE_ALIAS)
		t = s->roles[t].alias_of;
	if (!ptr || r0 <= 0 || ferry_row_tiles_inner(&m->tt.loss, t))
		return ptr;
	return (char *)ptr + (size_t)r0 * (grad ? (size_t)ferry_shape_row_width(&s->d->tensors[t].shape, &m->tt.dims) *
							      m->asz
						    : stage_row_bytes(m, s, t));
}

/* Op o's forward call on rows [r0, r0 + rows) of the batch. */
static void stage_tile_call(ferry_model_t m, const struct stage *s, int o, int r0, int rows, struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &s->d->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);

	stage_call(m, s, o, 1, rows, c);
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = stage_rows(m, s, c->out[i], op->out[i], r0, false);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = stage_rows(m, s, (void *)c->in[i], op->in[i], r0, false);
	if (c->tokens)
		c->tokens += r0;
	if (c->positions)
		c->positions += r0;
}

/* The gradient fields of op o's backward call (its forward one made) in a
 * B x T batch; r0 >= 0: on the tile starting at row r0. */
static void stage_backward_fields(ferry_model_t m, const struct stage *s, int o, int r0, int B, int T,
				  struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &s->d->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);

	c->backward = true;
	for (int i = 0; i < info->n_out; i++)
		c->dout[i] = stage_rows(m, s, stage_grad(m, s, op->out[i]), op->out[i], r0, true);
	for (int i = 0; i < info->n_in; i++)
		c->din[i] = stage_rows(m, s, stage_grad(m, s, op->in[i]), op->in[i], r0, true);
	/* a gradient in place over its value starts nowhere: assigned */
	c->grad_assign = info->bwd_in_place && info->n_in && s->roles[op->in[0]].grad_in_place;
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0 && s->g[op->w[i].param])
			c->dw[i] = s->g[op->w[i].param] + (size_t)op->w[i].block * ferry_op_weight_view(c, i);
	if (op->kind == FERRY_OP_SOFTMAX_XENT)
		c->scalar[0] = 1.0f / (float)((size_t)B * T); /* the loss is the mean over B*T */
}

/* The head and the loss tile after tile, so one tile's logits exist at a
 * time.  Forward: each tile's logits, then its rows' losses.  Backward
 * (backward): each tile's logits and probabilities made again (the
 * losses written again with the same values), then the loss's and the
 * head's backward on its rows: d(logits) in place, the head's input
 * gradient for its rows, the head's weight gradient accumulating over
 * tiles.  Recomputing costs the head's product once more; it keeps the
 * forward free of gradients, so evaluation, micro-batches and the edge
 * region's gradient copies are as without tiles. */
static void loss_tiles(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T,
			       bool backward)
{
	const int n = B * T, tr = m->tt.place.loss_tile, first = m->tt.loss.first, last = m->tt.loss.last;
	struct ferry_op_call c;
	char label[56];

	for (int r0 = 0; r0 < n; r0 += tr) {
		const int rows = n - r0 < tr ? n - r0 : tr;

		for (int o = first; o <= last; o++) {
			stage_tile_call(m, s, o, r0, rows, &c);
			snprintf(label, sizeof(label), "%s%.26s rows %d+", backward ? "recompute " : "",
				 s->d->tensors[s->d->ops[o].out[0]].name, r0);
			ferry_emit_op(p, m->compute, &c, -1, label);
		}
		for (int o = last; backward && o >= first; o--) {
			stage_tile_call(m, s, o, r0, rows, &c);
			stage_backward_fields(m, s, o, r0, B, T, &c);
			snprintf(label, sizeof(label), "d %.34s rows %d+", s->d->tensors[s->d->ops[o].out[0]].name, r0);
			ferry_emit_op(p, m->compute, &c, -1, label);
		}
	}
}

static void stage_forward(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T)
{
	struct ferry_op_call c;

	for (int o = 0; o < s->d->n_ops; o++) {
		if (loss_tiled(m, s, o)) {
			loss_tiles(m, p, s, B, T, false);
			o = m->tt.loss.last;
			continue;
		}
		stage_call(m, s, o, B, T, &c);
		ferry_emit_op(p, m->compute, &c, -1, s->d->tensors[s->d->ops[o].out[0]].name);
	}
}

/* Gradients accumulate, so each starts at zero, except the stage output's
 * (it arrives from outside) and those written in place. */
static void stage_zero_grads(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T)
{
	struct ferry_dims d = ferry_model_dims(&m->cfg, B, T);
	char label[56];

	for (int t = 0; t < s->d->n_tensors; t++) {
		if (!stage_has_grad(s, t) || t == s->d->output || s->roles[t].grad_in_place)
			continue;
		snprintf(label, sizeof(label), "d %.50s", s->d->tensors[t].name);
		ferry_emit_zero(p, m->compute, stage_grad(m, s, t), ferry_layer_tensor_numel(s->d, t, &d) * m->asz,
				-1, label);
	}
}

static void stage_backward(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T)
{
	struct ferry_op_call c;
	char label[56];

	stage_zero_grads(m, p, s, B, T);
	for (int o = s->d->n_ops - 1; o >= 0; o--) {
		if (loss_tiled(m, s, o)) {
			loss_tiles(m, p, s, B, T, true);
			o = m->tt.loss.first;
			continue;
		}
		stage_call(m, s, o, B, T, &c);
		stage_backward_fields(m, s, o, -1, B, T, &c);
		snprintf(label, sizeof(label), "d %.50s", s->d->tensors[s->d->ops[o].out[0]].name);
		ferry_emit_op(p, m->compute, &c, -1, label);
	}
}

/* The per-row losses of a B x T batch to the host. */
static void emit_losses_copy(ferry_model_t m, struct ferry_program *p, const struct ferry_prog_key *k)
{
	struct stage epi = epilogue_of(m);

	ferry_emit_copy(p, m->compute, m->host_losses, stage_ptr(m, &epi, role_tensor(&epi, FERRY_ROLE_LOSSES)),
			(size_t)k->B * k->T * sizeof(float), FERRY_COPY_D2H, -1, "losses");
}

/* ---- the stages' parameters, placed ------------------------------------------- */

/* The ring the stages' parameters stream through (edges.weights=
 * host:stream, units the stages), or NULL: they are on the device. */
static struct ferry_weight_rings *stage_ring(ferry_model_t m)
{
	struct ferry_weight_rings *r = &m->ring[FERRY_GROUP_EDGE_WEIGHTS];

	return r->ring ? r : NULL;
}

/* A stage's forward, its parameters first loaded into their slot when
 * they stream. */
static void placed_stage_forward(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T)
{
	struct ferry_weight_rings *r = stage_ring(m);

	if (r) {
		ferry_weight_ring_load(r, p, s->unit, false);
		ferry_weight_ring_acquire(r, p, s->unit);
	}
	stage_forward(m, p, s, B, T);
	if (r)
		ferry_weight_ring_release(r, p, s->unit);
}

/* A stage's backward; when its parameters stream, their gradients start
 * from zero in the slot (or from the host's, adding a micro-batch to
 * them) and go to the host after it.  The epilogue, the
 * forward's last unit, is still in the slot; the prologue is loaded again,
 * with the gradients the epilogue's backward left on the host for
 * parameters both read (a tied embedding's head contribution, which the
 * embedding's backward then adds to, in the order it does on the device). */
static void placed_stage_backward(ferry_model_t m, struct ferry_program *p, const struct stage *s, int B, int T,
				  bool grads_from_host)
{
	struct ferry_weight_rings *r = stage_ring(m);

	if (r && s->unit != FERRY_EDGE_EPILOGUE) {
		ferry_weight_ring_load(r, p, s->unit, true);
		ferry_weight_ring_acquire(r, p, s->unit);
	}
	if (r)
		ferry_weight_ring_start_grads(r, p, s->unit, grads_from_host);
	stage_backward(m, p, s, B, T);
	if (r)
		ferry_weight_ring_grads_out(r, p, s->unit);
}

/* Uploads the batch from the host staging buffers (targets: zeros without,
 * any valid target will do when the loss is not read), runs the forward,
 * and with targets copies the per-row losses to the host. */
static ferry_status emit_forward(ferry_model_t m, struct ferry_program *p, const struct ferry_prog_key *k)
{
	struct stage pro = prologue_of(m), epi = epilogue_of(m);
	size_t N = (size_t)k->B * k->T;
	void *tgt = stage_ptr(m, &epi, role_tensor(&epi, FERRY_ROLE_TARGETS));
	ferry_status st;

	ferry_emit_copy(p, m->compute, stage_ptr(m, &pro, role_tensor(&pro, FERRY_ROLE_TOKENS)), m->host_tokens,
			N * sizeof(int32_t), FERRY_COPY_H2D, -1, "tokens");
	if (m->tt.ix.positions >= 0)
		ferry_emit_copy(p, m->compute, ferry_entry(m, m->tt.ix.positions), m->host_positions,
				N * sizeof(int32_t), FERRY_COPY_H2D, -1, "positions");
	if (k->targets)
		ferry_emit_copy(p, m->compute, tgt, m->host_targets, N * sizeof(int32_t), FERRY_COPY_H2D, -1,
				"targets");
	else
		ferry_emit_zero(p, m->compute, tgt, N * sizeof(int32_t), -1, "targets");
	placed_stage_forward(m, p, &pro, k->B, k->T);
	if ((st = ferry_layer_exec_forward(m->layers, p, k->B, k->T, k->for_backward)))
		return st;
	placed_stage_forward(m, p, &epi, k->B, k->T); /* the epilogue's parameters stay for its backward */
	if (k->targets && !k->loss_later)
		emit_losses_copy(m, p, k);
	return FERRY_OK;
}

/* The unstacked parameters' device gradients to their host arrays (D2H)
 * or from them (H2D), on stream s. */
static void unstacked_grads_copy(ferry_model_t m, struct ferry_program *p, int s, enum ferry_copy_kind kind)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	char label[56];

	for (int q = 0; q < m->md->n_params; q++) {
		void *host, *dev;

		if (ix->dev_grad[q] < 0)
			continue;
		host = ferry_entry(m, ix->grad[q]);
		dev = ferry_entry(m, ix->dev_grad[q]);
		snprintf(label, sizeof(label), "grad: %.40s", m->tt.e[ix->param[q]].name);
		ferry_emit_copy(p, s, kind == FERRY_COPY_D2H ? host : dev, kind == FERRY_COPY_D2H ? dev : host,
				m->tt.e[ix->dev_grad[q]].bytes, kind, -1, label);
	}
}

/* --offload-params: after the last backward op, the unstacked parameters'
 * gradients join the layers' on the host, and then every gradient is. */
static void unstacked_grads_out(ferry_model_t m, struct ferry_program *p)
{
	ferry_dp_grads_written(m, p, -1); /* (on several ranks, maybe averaged first) */
	ferry_emit_record(p, m->compute, m->stage_grads_done, -1);
	ferry_emit_wait(p, m->opt_d2h, m->stage_grads_done, -1);
	unstacked_grads_copy(m, p, m->opt_d2h, FERRY_COPY_D2H);
	ferry_emit_record(p, m->opt_d2h, m->all_grads_home, -1);
}

/* A backward adding to what the last one left: every gradient of that on
 * the host first (on several ranks averaged there), so nothing is read
 * back, or grows on the device, under a copy or an average.  On several
 * ranks the unstacked ones start from the host's average too (the device
 * holds this rank's own sum). */
static void adding_backward_start(ferry_model_t m, struct ferry_program *p)
{
	if (m->tt.ix.grad_ring >= 0) /* ZeRO-2: they are in the slices, gathered whole (on the host if streamed) */
		ferry_zero_grads_adding_start(m, p);
	else
		ferry_emit_wait(p, m->compute, m->comm ? m->dp_all : m->all_grads_home, -1);
	if (m->comm && ferry_layers_streamed(m) && !stage_ring(m))
		unstacked_grads_copy(m, p, m->compute, FERRY_COPY_H2D);
}

static ferry_status emit_backward(ferry_model_t m, struct ferry_program *p, const struct ferry_prog_key *k)
{
	struct stage pro = prologue_of(m), epi = epilogue_of(m);
	const bool from_host = k->variant == FERRY_BACKWARD_ADD;
	ferry_status st;

	if (from_host)
		adding_backward_start(m, p);
	placed_stage_backward(m, p, &epi, k->B, k->T, from_host);
	if ((st = ferry_layer_exec_backward(m->layers, p, k->B, k->T, from_host)))
		return st;
	placed_stage_backward(m, p, &pro, k->B, k->T, from_host);
	if (stage_ring(m)) /* the stages' gradients went out with their ring */
		ferry_emit_record(p, m->opt_d2h, m->all_grads_home, -1);
	else if (ferry_layers_streamed(m))
		unstacked_grads_out(m, p);
	ferry_dp_after_backward(m, p); /* on several ranks: the stages' gradients averaged */
	return FERRY_OK;
}

/* --offload-params: the gradients are on the host, and so is their norm
 * (the compute stream waits for it, so the step's one synchronisation
 * covers it). */
static void emit_host_norm(ferry_model_t m, struct ferry_program *p)
{
	ferry_emit_wait(p, m->opt_cpu_stream, m->comm ? m->dp_all : m->all_grads_home, -1); /* averaged */
	if (m->tt.ix.grad_ring >= 0) /* ZeRO-2: from every rank's slice */
		ferry_zero_grads_norm(m, p, m->opt_cpu_stream);
	else
		ferry_emit_host_sum_squares(p, m->opt_cpu_stream, ferry_entry(m, m->tt.ix.grad[first_param(m)]),
					    (long)m->tt.n_params, m->host_sumsq, "grad norm: sum of squares");
	ferry_emit_record(p, m->opt_cpu_stream, m->norm_done, -1);
	ferry_emit_wait(p, m->compute, m->norm_done, -1);
}

/* The global gradient norm: one reduction over the gradient buffer (and
 * in a training step, first the losses its forward left on the device). */
static void emit_norm(ferry_model_t m, struct ferry_program *p, const struct ferry_prog_key *k)
{
	if (k->loss_later)
		emit_losses_copy(m, p, k);
	if (ferry_layers_streamed(m)) {
		emit_host_norm(m, p);
		return;
	}
	if (m->tt.ix.grad_slice >= 0) { /* ZeRO-2: from every rank's slice */
		ferry_zero_grads_norm(m, p, m->compute);
	} else {
		void *sumsq = ferry_entry(m, m->tt.ix.grad_norm);
		struct ferry_op_call c = { .kind = FERRY_OP_SUM_SQUARES };

		ferry_emit_zero(p, m->compute, sumsq, sizeof(double), -1, "grad norm");
		c.in[0] = grads_base(m);
		c.n = (long)m->tt.n_params;
		with_workspace(m, &c);
		c.result = sumsq;
		ferry_emit_op(p, m->compute, &c, -1, "grad norm: sum of squares");
		ferry_emit_copy(p, m->compute, m->host_sumsq, sumsq, sizeof(double), FERRY_COPY_D2H, -1, "grad norm");
	}
	/* the step's synchronisation also waits for a speculative backward's
	 * early updates: the next step re-patches their tasks in place */
	if (ferry_table_place(&m->tt, FERRY_GROUP_ADAM)->speculative)
		ferry_emit_wait(p, m->compute, m->opt_host_done, -1);
}

/* AdamW of every parameter tensor; learning rate, betas, epsilon, step
 * and the clipping scale are patched in per step, weight decay is
 * scalar[4] x this tensor's decay flag. */
static void emit_update(ferry_model_t m, struct ferry_program *p)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	char label[56];

	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;
		struct ferry_op_call c = { .kind = FERRY_OP_ADAMW };
		struct ferry_task *t;

		if (ix->param[q] < 0 || ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK)
			continue;
		c.param = ferry_entry(m, ix->param[q]);
		c.param_copy = ferry_entry(m, ix->copy[q]);
		c.out[0] = ferry_entry(m, ix->mom[q]);
		c.out[1] = ferry_entry(m, ix->var[q]);
		c.in[0] = ferry_entry(m, ix->grad[q]);
		c.n = (long)pi.numel;
		c.scalar[4] = m->md->params[q].decay ? 1.0f : 0.0f;
		snprintf(label, sizeof(label), "adamw %.40s", pi.name);
		ferry_emit_op(p, m->compute, &c, -1, label);
		if (!p->failed && (t = &p->t[p->n - 1]))
			t->patch = FERRY_PATCH_ADAMW;
	}
}

/* Slice [off, off + n) of parameter q through ring slot `slot`: master
 * weights and moments to the device, AdamW there next to the gradients
 * and the compute copy, and back to the host. */
/* An optimizer ring slot's arrays for slice [off, off + n) of parameter
 * q, and their host homes: master, m, v, and with --offload-params the
 * gradient (in) and the bf16 compute copy (out, when the host has one). */
struct opt_slice {
	int n_in, n_out;    /* arrays copied in; copied back (the first n_out, then the copy) */
	void *dev[5], *host[5];
	size_t bytes[5];
	void *param_copy;   /* AdamW's compute-copy output */
	bool copy_out;      /* dev[4] goes back to host[4] */
};

static struct opt_slice opt_slice_of(ferry_model_t m, int q, size_t off, size_t n, int slot)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	const size_t chunk = ix->opt_chunk, f32 = chunk * sizeof(float);
	const int k = ferry_layers_streamed(m) ? 4 : 3;
	char *ring = ferry_at(ferry_entry(m, ix->opt_ring),
			      (size_t)slot * (k * f32 + (ix->host_copy_buffer >= 0 ? chunk * m->asz : 0)));
	const int *home[4] = { ix->param, ix->mom, ix->var, ix->grad };
	/* split: adam=host:stream:shard(N) (with --offload-params, ZeRO-2's host slice of the gradients) */
	const int slice[4] = { ix->host_param_slice, ix->mom_slice, ix->var_slice, ix->host_grad_slice };
	struct opt_slice s = { .n_in = k, .n_out = 3 };

	for (int i = 0; i < k; i++) {
		s.dev[i] = ferry_at(ring, (size_t)i * f32);
		s.host[i] = ferry_zero_host_at(m, home[i], slice[i], q, off, sizeof(float));
		s.bytes[i] = n * sizeof(float);
	}
	if (!ferry_layers_streamed(m)) /* the gradients are on the device */
		s.dev[3] = ferry_zero_host_device_grad(m, q, off); /* split: ZeRO-2's slice */
	if ((ix->host_copy[q] >= 0 && (ix->copy[q] < 0 || ferry_zero_host_split(m))) ||
	    (ix->host_copy_slice >= 0 && ix->copy[q] < 0)) {
		/* the bf16 bits the rings load (split: the unstacked ones' too, uploaded whole once gathered;
		   ZeRO-3's layers: the host slice their gathers stage) */
		s.param_copy = s.dev[4] = ferry_at(ring, (size_t)k * f32);
		s.host[4] = ferry_zero_host_at(m, ix->host_copy, ix->host_copy_slice, q, off, m->asz);
		s.bytes[4] = n * m->asz;
		s.copy_out = true;
	} else if (!ferry_layers_streamed(m)) {
		s.param_copy = ferry_zero_host_device_copy(m, q, off); /* ZeRO-3's (with its slice on the host: the unstacked) */
	} else if (ix->copy[q] >= 0) { /* an unstacked parameter: its device copy */
		s.param_copy = ferry_at(ferry_entry(m, ix->copy[q]), off * m->asz);
	}
	return s;
}

static void emit_streamed_slice(ferry_model_t m, struct ferry_program *p, int q, size_t off, size_t n, int slot,
				int layer)
{
	struct opt_slice s = opt_slice_of(m, q, off, n, slot);
	static const char *const part[5] = { "master", "adamw m", "adamw v", "grad", "weights" };
	const char *name = m->md->params[q].name;
	struct ferry_op_call c = { .kind = FERRY_OP_ADAMW, .n = (long)n };
	char label[56];

	ferry_emit_wait(p, m->opt_h2d, m->opt_free[slot], layer);
	for (int i = 0; i < s.n_in; i++) {
		snprintf(label, sizeof(label), "%s: %.40s", part[i], name);
		if (!ferry_tier_emit_copy(p, m->opt_h2d, m->tt.host_tiers, s.host[i], s.dev[i], s.bytes[i],
					  FERRY_COPY_H2D, layer, label)) /* NVMe: a file read */
			ferry_emit_copy(p, m->opt_h2d, s.dev[i], s.host[i], s.bytes[i], FERRY_COPY_H2D, layer, label);
	}
	ferry_emit_record(p, m->opt_h2d, m->opt_staged[slot], layer);
	ferry_emit_wait(p, m->compute, m->opt_staged[slot], layer);
	c.param = s.dev[0];
	c.param_copy = s.param_copy;
	c.out[0] = s.dev[1];
	c.out[1] = s.dev[2];
	c.in[0] = s.dev[3];
	c.scalar[4] = m->md->params[q].decay ? 1.0f : 0.0f;
	snprintf(label, sizeof(label), "adamw %.40s", name);
	ferry_emit_op(p, m->compute, &c, layer, label);
	if (!p->failed)
		p->t[p->n - 1].patch = FERRY_PATCH_ADAMW;
	ferry_emit_record(p, m->compute, m->opt_updated[slot], layer);
	ferry_emit_wait(p, m->opt_d2h, m->opt_updated[slot], layer);
	for (int i = 0; i < 5; i++) {
		if (i >= s.n_out && !(i == 4 && s.copy_out))
			continue;
		snprintf(label, sizeof(label), "%s: %.40s", part[i], name);
		if (!ferry_tier_emit_copy(p, m->opt_d2h, m->tt.host_tiers, s.host[i], s.dev[i], s.bytes[i],
					  FERRY_COPY_D2H, layer, label))
			ferry_emit_copy(p, m->opt_d2h, s.host[i], s.dev[i], s.bytes[i], FERRY_COPY_D2H, layer, label);
	}
	ferry_emit_record(p, m->opt_d2h, m->opt_free[slot], layer);
}

/* AdamW with its state on the host, slice by slice through two ring slots,
 * so one slice's copies overlap the next one's update.  Split over the
 * ranks (adam=host:stream:shard(N), zero_host.c) only this rank's pieces
 * pass, their gradients read from ZeRO-2's slice and their weights
 * written into ZeRO-3's (shard(N,grads), shard(N,params)); with the
 * parameters on the host (--offload-params) the gathers read what the
 * ring wrote back (the master weights; ZeRO-3 in bf16 the slice of their
 * bf16 copy), so the comm stream waits for the copies. */
static void emit_update_streamed(ferry_model_t m, struct ferry_program *p)
{
	const size_t chunk = m->tt.ix.opt_chunk;
	int k = 0;

	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (!ferry_zero_host_updated(m, q, &pi))
			continue;
		for (size_t off = 0; off < pi.numel; off += chunk) {
			size_t from = off, n = pi.numel - off < chunk ? pi.numel - off : chunk;
			int layer = pi.layers && pi.layer_numel == chunk ? (int)(off / chunk) : -1;

			if (ferry_zero_host_piece(m, q, &from, &n)) /* split: this rank's part */
				emit_streamed_slice(m, p, q, from, n, k++ % 2, layer);
		}
	}
	if (ferry_layers_streamed(m)) /* the next forward's weight loads (h2d) follow the write-backs */
		for (int slot = 0; slot < 2; slot++)
			ferry_emit_wait(p, m->opt_h2d, m->opt_free[slot], -1);
	if (!ferry_zero_host_split(m))
		return;
	if (ferry_layers_streamed(m) || m->tt.ix.param_stage >= 0)
		for (int slot = 0; slot < 2; slot++)
			ferry_emit_wait(p, m->comm_stream, m->opt_free[slot], -1);
	ferry_zero_host_gather(m, p); /* the ranks' slices (ZeRO-3: of the unstacked) to all */
}

ferry_status ferry_model_emit(ferry_model_t m, const struct ferry_prog_key *k, struct ferry_program *p)
{
	ferry_status st = FERRY_OK;

	m->emit_speculative = k->kind == FERRY_PROG_BACKWARD && k->variant == FERRY_BACKWARD_SPECULATIVE;
	m->emit_adding = k->kind == FERRY_PROG_BACKWARD && k->variant == FERRY_BACKWARD_ADD;
	switch (k->kind) {
	case FERRY_PROG_FORWARD: st = emit_forward(m, p, k); break;
	case FERRY_PROG_BACKWARD: st = emit_backward(m, p, k); break;
	case FERRY_PROG_NORM: emit_norm(m, p, k); break;
	case FERRY_PROG_UPDATE:
		if (ferry_table_host_update(&m->tt))
			ferry_emit_update_cpu(m, p, (enum ferry_update_variant)k->variant);
		else if (m->tt.ix.opt_ring >= 0)
			emit_update_streamed(m, p);
		else if (m->tt.ix.shard_numel) /* adam=device:shard(N) */
			ferry_emit_update_sharded(m, p);
		else
			emit_update(m, p);
		break;
	case FERRY_PROG_ZERO: /* with --offload-params the layers' zero their ring slot */
		if (ferry_table_streamed(&m->tt, FERRY_GROUP_EDGE_WEIGHTS)) /* and the edge region's before each stage's backward */
			break;
		if (ferry_layers_streamed(m) || m->tt.ix.grad_slice >= 0) /* (ZeRO-2: and the slots) */
			ferry_emit_zero(p, m->compute, dev_grads(m),
					m->tt.buffers[m->tt.ix.dev_grad_buffer].bytes, -1, "unstacked weight gradients");
		else
			ferry_emit_zero(p, m->compute, grads_base(m), m->tt.n_params * sizeof(float), -1,
					"weight gradients");
		break;
	}
	if (!st && p->failed)
		st = ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory");
	return st;
}

static bool same_key(const struct ferry_prog_key *a, const struct ferry_prog_key *b)
{
	return a->kind == b->kind && a->B == b->B && a->T == b->T && a->for_backward == b->for_backward &&
	       a->targets == b->targets && a->loss_later == b->loss_later && a->variant == b->variant;
}

static const char *prog_name(enum ferry_prog_kind k)
{
	static const char *const names[] = { "forward", "backward", "gradient norm", "update", "zero gradients" };

	return names[k];
}

ferry_status ferry_model_program(ferry_model_t m, const struct ferry_prog_key *key,
				 const struct ferry_program **out)
{
	struct ferry_program *p;
	ferry_status st;
	int i;

	for (i = 0; i < m->n_progs; i++)
		if (same_key(&m->prog_key[i], key)) {
			*out = &m->prog[i];
			return FERRY_OK;
		}
	if (m->n_progs < FERRY_PROG_CACHE)
		i = m->n_progs++;
	else
		i = FERRY_PROG_CACHE - 1;
	p = &m->prog[i];
	ferry_program_release(p);
	ferry_program_init(p, prog_name(key->kind));
	m->prog_key[i] = *key;
	if ((st = ferry_model_emit(m, key, p))) {
		ferry_program_release(p);
		m->prog_key[i].kind = (enum ferry_prog_kind)-1; /* matches nothing */
		return st;
	}
	*out = p;
	return FERRY_OK;
}

/* FLOPs of a stage's matrix products and attention, forward and backward
 * (attention's pairs from host positions when given). */
static double stage_flops(const struct ferry_model *m, const struct ferry_layer_decl *d, int B, int T,
			  const int32_t *positions)
{
	struct ferry_dims dims = ferry_model_dims(&m->cfg, B, T);
	struct ferry_op_call c;
	double f = 0;

	for (int o = 0; o < d->n_ops; o++) {
		if (!ferry_op_info(d->ops[o].kind)->is_dot && d->ops[o].kind != FERRY_OP_ATTENTION)
			continue;
		ferry_op_call_shape(d, o, &dims, m->scalars, -1, &c);
		f += ferry_op_flops_at(&c, positions);
		c.backward = true;
		f += ferry_op_flops_at(&c, positions);
	}
	return f;
}

double ferry_model_step_flops(ferry_model_t m, int B, int T)
{
	return ferry_model_step_flops_at(m, B, T, NULL);
}

double ferry_model_step_flops_at(ferry_model_t m, int B, int T, const int32_t *positions)
{
	return stage_flops(m, m->md->prologue, B, T, positions) +
	       m->cfg.layers * stage_flops(m, m->md->layer, B, T, positions) +
	       stage_flops(m, m->md->epilogue, B, T, positions);
}
