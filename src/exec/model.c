/*
 * A declared model on a backend: the executor's public side.
 *
 * Creating a model builds its tensor table (src/plan/), allocates every
 * buffer it lists, and compiles each thing a step does into a program of
 * tasks (build.c); the calls below replay those programs.  A training step
 * (ferry_model_step_submit, then ferry_model_step_finish) synchronises with
 * the device once: to read the loss and the gradient norm, which the
 * clipping scale of the update needs.  Nothing here knows which model it
 * runs.
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "sched/comm_stage.h"
#include "ferry/safetensors.h"
#include "backend/run_op.h"
#include "core/error.h"
#include "core/host_fill.h"
#include "ops/cpu/kernels.h"
#include "sched/tier_copy.h"
#include "tier/nvme_tier.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const struct ferry_model_config *ferry_model_config(ferry_model_t m) { return &m->cfg; }
size_t ferry_model_num_params(ferry_model_t m) { return m->tt.n_params; }
int ferry_model_max_seq_len(ferry_model_t m) { return m->T; }

void ferry_model_free(ferry_model_t m)
{
	if (!m)
		return;
	ferry_sched_runtime_free(&m->rt); /* streams drain first */
	ferry_comm_stage_free(m->stage);
	for (int i = 0; i < m->n_progs; i++)
		ferry_program_release(&m->prog[i]);
	ferry_layer_exec_free(m->layers);
	ferry_trace_release(&m->trace); /* its events: the streams have drained */
	ferry_sched_resources_release(&m->res);
	ferry_tensor_table_free(&m->mem);
	ferry_tensor_table_release(&m->tt);
	if (m->be) {
		ferry_host_free(m->be, m->host_tokens);
		ferry_host_free(m->be, m->host_targets);
		ferry_host_free(m->be, m->host_positions);
		ferry_host_free(m->be, m->host_losses);
		ferry_host_free(m->be, m->host_sumsq);
		ferry_host_free(m->be, m->norm_parts);
	}
	ferry_free(m);
}

ferry_status ferry_model_plan(const struct ferry_model_config *cfg, int B, int T,
			      const struct ferry_exec_opts *opts, struct ferry_plan *plan)
{
	struct ferry_tensor_table tt;
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if ((st = ferry_tensor_table_build(cfg, B, T, opts, &tt)))
		return st;
	st = ferry_tensor_table_plan(&tt, plan);
	ferry_tensor_table_release(&tt);
	return st;
}

ferry_status ferry_model_rank_plan(const struct ferry_model_config *cfg, int B, int T,
				   const struct ferry_exec_opts *opts, int ranks, int rank, struct ferry_plan *plan)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	struct ferry_places p;
	size_t stage;
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if (ranks < 1 || rank < 0 || rank >= ranks)
		return ferry_error(FERRY_ERR_INVALID, "rank %d of %d ranks: ranks from 0 to N-1, N at least 1", rank,
				   ranks);
	o.comm = NULL; /* the split is over `ranks`, not a run's */
	if (o.zero && !o.zero_ranks)
		o.zero_ranks = ranks;
	if ((st = ferry_exec_opts_places(&o, &p)))
		return st;
	if ((st = ferry_shard_check(&p.group[FERRY_GROUP_ADAM], ranks)) || (st = ferry_model_plan(cfg, B, T, &o, plan)) ||
	    (st = ferry_dp_stage_planned(&o, ranks, &stage)))
		return st;
	plan->mem.host_alloc_bytes += stage; /* MPI on device memory */
	return FERRY_OK;
}

/* Whether a layout after k (a unit later in the forward, earlier in the
 * backward) reads parameter q too. */
static bool read_later(const struct ferry_table_ring *tr, int k, int q)
{
	for (int j = k + 1; j < tr->n_layouts; j++)
		if (tr->w[j][q] >= 0)
			return true;
	return false;
}

/* Streamed group g's ring (weight_ring.h) from the table's
 * (tt.ix.ring[g]): a part for each parameter each layout reads, from its
 * host arrays (the kernel type's copy when there is one). */
static void bind_ring(struct ferry_model *m, enum ferry_place_group g)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	const struct ferry_table_ring *tr = &ix->ring[g];
	struct ferry_weight_rings *r = &m->ring[g];

	*r = (struct ferry_weight_rings){ .ring = tr->slots, .grad_ring = tr->grad_slots, .slot_numel = tr->slot_numel,
					  .elem = m->asz, .per_stage = tr->n_layouts > 1 };
	if (g == FERRY_GROUP_LAYER_WEIGHTS && ix->grad_ring >= 0) { /* ZeRO-2: the layers' go to host slots */
		r->host_grad_slots = ix->grad_slots;
		r->host_grad_slot_numel = ix->grad_slot_numel;
	}
	for (int k = 0; k < tr->n_layouts; k++)
		for (int q = 0; q < m->md->n_params; q++) {
			struct ferry_param_info pi;

			if (tr->w[k][q] < 0 || ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK)
				continue;
			r->s[r->n++] = (struct ferry_weight_stream){
				pi.name, ferry_entry(m, ix->host_copy[q] >= 0 ? ix->host_copy[q] : ix->param[q]),
				r->host_grad_slots ? ferry_at(ferry_entry(m, ix->grad_ring), ix->grad_slot_off[q] * sizeof(float))
						   : ferry_entry(m, ix->grad[q]),
				ferry_at(ferry_entry(m, tr->w[k][q]), tr->off[q] * m->asz),
				ferry_at(ferry_entry(m, tr->g[k][q]), tr->off[q] * sizeof(float)), pi.layer_numel, k,
				r->per_stage && read_later(tr, k, q), pi.offset };
			if (tr->grad_slots)
				r->grad_slot0 = ferry_entry(m, tr->g[k][q]);
		}
}

/* Parameter p's addresses in each stage's layout of the edges' ring
 * (reading q, the tensor it is tied to or itself), if it has one. */
static void bind_edges(struct ferry_model *m, int p, int q)
{
	const struct ferry_table_ring *edges = &m->tt.ix.ring[FERRY_GROUP_EDGE_WEIGHTS];

	for (int s = 0; s < edges->n_layouts; s++) {
		m->edge_w[s][p] = ferry_entry(m, edges->w[s][q]);
		m->edge_g[s][p] = ferry_entry(m, edges->g[s][q]);
	}
}

/* Kernel and gradient addresses of every parameter with the layers'
 * weights streamed: a stacked one's in the layers' ring slot 0, the
 * others' their device copy, or per stage in the edges' ring.  A tied
 * parameter reads the tensor it is tied to. */
static void bind_offloaded(struct ferry_model *m)
{
	const struct ferry_table_index *ix = &m->tt.ix;

	for (int g = 0; g < FERRY_GROUP_COUNT; g++)
		if (ix->ring[g].slots)
			bind_ring(m, (enum ferry_place_group)g);
	for (int p = 0; p < m->md->n_params; p++) {
		const struct ferry_param_decl *pd = &m->md->params[p];
		int q = ferry_param_present(m->md, &m->cfg, p) ? p : pd->tied_to;
		const struct ferry_table_ring *layers = &ix->ring[FERRY_GROUP_LAYER_WEIGHTS];
		struct ferry_param_info pi;

		if (ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK)
			continue;
		m->stride[p] = pi.layers ? pi.layer_numel : 0;
		if (pi.layers && q == p) {
			m->wptr[p] = ferry_at(ferry_entry(m, layers->w[0][p]), layers->off[p] * m->asz);
			m->gptr[p] = ferry_at(ferry_entry(m, layers->g[0][p]), layers->off[p] * sizeof(float));
			continue;
		}
		m->wptr[p] = ferry_entry(m, ix->copy[q]);
		m->gptr[p] = ferry_entry(m, ix->dev_grad[q]);
		bind_edges(m, p, q);
	}
}

static void bind_params(struct ferry_model *m)
{
	if (ferry_layers_streamed(m)) {
		bind_offloaded(m);
		return;
	}
	for (int p = 0; p < m->md->n_params; p++) {
		const struct ferry_param_decl *pd = &m->md->params[p];
		int q = ferry_param_present(m->md, &m->cfg, p) ? p : pd->tied_to;
		struct ferry_param_info pi;

		m->gptr[p] = ferry_entry(m, m->tt.ix.grad[q]);
		m->wptr[p] = m->tt.ix.copy[q] >= 0 ? ferry_entry(m, m->tt.ix.copy[q]) : ferry_entry(m, m->tt.ix.param[q]);
		m->stride[p] = ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK && pi.layers ? pi.layer_numel : 0;
		if (m->tt.ix.grad_slice >= 0) /* ZeRO-2: a layer's in a slot, the unstacked whole */
			m->gptr[p] = m->stride[p] ? ferry_at(ferry_entry(m, m->tt.ix.grad_ring),
							     m->tt.ix.grad_slot_off[q] * sizeof(float))
						  : ferry_entry(m, m->tt.ix.dev_grad[q]);
		if (!m->stride[p]) /* ZeRO-3 with the edges gathered: in their ring */
			bind_edges(m, p, q);
	}
	if (m->tt.ix.ring[FERRY_GROUP_EDGE_WEIGHTS].slots)
		bind_ring(m, FERRY_GROUP_EDGE_WEIGHTS);
}

static ferry_status create_stack(struct ferry_model *m)
{
	const struct ferry_layer_decl *d = m->md->layer;
	struct ferry_weight_table wt = { m->wptr, m->gptr, m->stride,
					 m->ring[FERRY_GROUP_LAYER_WEIGHTS].ring ? &m->ring[FERRY_GROUP_LAYER_WEIGHTS] : NULL,
					 m->tt.ix.grad_slice >= 0 ? m->tt.ix.grad_slots : 0, m->tt.ix.grad_slot_numel };
	struct ferry_stack_storage mem = { .grad = ferry_entry(m, m->tt.ix.stack_grad), .tiers = m->tt.host_tiers };

	if (m->tt.ix.workspace >= 0) {
		mem.ws = ferry_entry(m, m->tt.ix.workspace);
		mem.ws_bytes = m->tt.e[m->tt.ix.workspace].bytes;
	}

	for (int t = 0; t < d->n_tensors; t++) {
		mem.act[t] = ferry_entry(m, m->tt.ix.stack_act[t]);
		mem.host[t] = ferry_entry(m, m->tt.ix.stack_host[t]);
	}
	for (int t = 0; m->tt.sp.host_stride && t < d->n_tensors; t++) /* layer by layer: from the first's */
		if (mem.host[t])
			mem.host[t] = (char *)ferry_entry(m, m->tt.ix.stack_host[ferry_stack_first_offloaded(&m->tt.sp)]) +
				      m->tt.sp.host_off[t];
	mem.positions = ferry_entry(m, m->tt.ix.positions);
	return ferry_layer_exec_create(&m->res, m->compute, d, &m->tt.dims, m->scalars, &wt, &m->tt.sp, &mem,
				       &m->layers);
}

static ferry_status alloc_host(struct ferry_model *m)
{
	size_t N = (size_t)m->B * m->T;
	ferry_status st;

	if (m->tt.ix.positions >= 0 &&
	    (st = ferry_host_alloc(m->be, N * sizeof(int32_t), (void **)&m->host_positions)))
		return st;
	if ((st = ferry_host_alloc(m->be, N * sizeof(int32_t), (void **)&m->host_tokens)) ||
	    (st = ferry_host_alloc(m->be, N * sizeof(int32_t), (void **)&m->host_targets)) ||
	    (st = ferry_host_alloc(m->be, N * sizeof(float), (void **)&m->host_losses)))
		return st;
	if (m->tt.ix.grad_ring >= 0 && /* ZeRO-2's norm: block sums */
	    (st = ferry_host_alloc(m->be, FERRY_CPU_SUM_BLOCKS * sizeof(double), (void **)&m->norm_parts)))
		return st;
	return ferry_host_alloc(m->be, sizeof(double), (void **)&m->host_sumsq);
}

/* The streams and events of the optimizer's ring (out of memory shows as
 * res.failed, refused when the runtime is made). */
static void add_optimizer_streams(struct ferry_model *m)
{
	static const char *const what[3] = { "optimizer slice staged", "optimizer slice updated",
					     "optimizer slot free" };
	char name[40];

	m->opt_h2d = ferry_sched_stream(&m->res, "h2d");
	m->opt_d2h = ferry_sched_stream(&m->res, "d2h");
	for (int slot = 0; slot < 2; slot++) {
		int *ev[3] = { &m->opt_staged[slot], &m->opt_updated[slot], &m->opt_free[slot] };

		for (int i = 0; i < 3; i++) {
			snprintf(name, sizeof(name), "%s [%d]", what[i], slot);
			*ev[i] = ferry_sched_event(&m->res, name);
		}
	}
	/* split with the parameters on the host: the unstacked uploaded whole once gathered (zero_host.c) */
	if (ferry_layers_streamed(m) && m->tt.ix.shard_numel)
		m->opt_uploaded = ferry_sched_event(&m->res, "updated weights on the device");
}

/* The streams and events of AdamW on host threads. */
static void add_cpu_optimizer_streams(struct ferry_model *m)
{
	m->opt_h2d = ferry_sched_stream(&m->res, "h2d");
	m->opt_d2h = ferry_sched_stream(&m->res, "d2h");
	m->opt_cpu_stream = ferry_sched_stream(&m->res, "cpu optimizer");
	m->opt_grads_home = ferry_sched_event(&m->res, "gradient slice on the host");
	m->opt_host_done = ferry_sched_event(&m->res, "slice updated on the host");
	m->opt_uploaded = ferry_sched_event(&m->res, "updated weights on the device");
	m->opt_layer_grads = ferry_sched_event(&m->res, "a layer's gradients written");
	for (int slot = 0; slot < m->tt.ix.host_grad_slots; slot++) {
		char name[40];

		snprintf(name, sizeof(name), "gradient slot filled [%d]", slot);
		m->grad_slot_full[slot] = ferry_sched_event(&m->res, name);
		snprintf(name, sizeof(name), "gradient slot free [%d]", slot);
		m->grad_slot_free[slot] = ferry_sched_event(&m->res, name);
	}
}

/* What the schedule calls the edges' ring. */
static const struct ferry_ring_names edge_ring_names = { "edge region", "edge gradients", "edge", NULL };

/* The edges' ring (edges.weights=host:stream) loaded on stream h2d, its
 * gradients sent home on the optimizer's d2h. */
static void add_edge_streams(struct ferry_model *m, int h2d)
{
	struct ferry_weight_rings *r = &m->ring[FERRY_GROUP_EDGE_WEIGHTS];

	r->names = &edge_ring_names;
	r->compute = m->compute;
	r->h2d = h2d;
	r->d2h = m->opt_d2h;
	ferry_weight_ring_register(r, &m->res);
}

/* layers.weights=host:stream: the norm runs on the host, after every
 * gradient has arrived there; with edges.weights=host:stream the edges'
 * ring moves on the copy streams. */
static void add_param_streams(struct ferry_model *m)
{
	m->opt_d2h = ferry_sched_stream(&m->res, "d2h");
	m->opt_cpu_stream = ferry_sched_stream(&m->res, "cpu optimizer");
	m->stage_grads_done = ferry_sched_event(&m->res, "unstacked gradients written");
	m->all_grads_home = ferry_sched_event(&m->res, "every gradient on the host");
	m->norm_done = ferry_sched_event(&m->res, "gradient norm on the host");
	if (ferry_table_streamed(&m->tt, FERRY_GROUP_EDGE_WEIGHTS))
		add_edge_streams(m, ferry_sched_stream(&m->res, "h2d"));
}

ferry_status ferry_model_build(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, ferry_model_t *out)
{
	struct ferry_model *m;
	ferry_status st;

	*out = NULL;
	m = ferry_calloc(1, sizeof(*m));
	if (!m)
		return ferry_error(FERRY_ERR_NOMEM, "model: out of host memory");
	m->be = be;
	if ((st = ferry_tensor_table_build(cfg, B, T, opts, &m->tt)))
		goto fail;
	m->cfg = m->tt.cfg;
	m->md = m->tt.md;
	m->act = m->tt.act_dtype;
	m->asz = ferry_dtype_size(m->act);
	m->B = B;
	m->T = T;
	ferry_model_scalars(&m->cfg, m->scalars);
	m->compute = ferry_sched_stream(&m->res, "compute");
	if (opts && ferry_comm_in_use(opts->comm))
		m->comm = opts->comm;
	m->host_comm = m->comm && opts->host_comm ? opts->host_comm : m->comm;
	if (be && ((st = ferry_tensor_table_alloc(&m->tt, be, &m->mem)) || (st = alloc_host(m))))
		goto fail;
	bind_params(m);
	if (m->tt.ix.opt_ring >= 0)
		add_optimizer_streams(m);
	if (ferry_table_host_update(&m->tt))
		add_cpu_optimizer_streams(m);
	if (ferry_layers_streamed(m))
		add_param_streams(m);
	if (m->comm || m->tt.ix.shard_numel) /* (a dry build of a split optimizer: its gather) */
		ferry_dp_add_streams(m);
	if (m->tt.ix.param_slice >= 0)
		ferry_zero_params_bind(m);
	if (m->ring[FERRY_GROUP_EDGE_WEIGHTS].gather) { /* ZeRO-3: gathered on the comm stream, sent home whole */
		m->all_grads_home = ferry_sched_event(&m->res, "every gradient on the host");
		add_edge_streams(m, m->comm_stream);
	}
	if ((st = ferry_dp_check(m)) || (st = create_stack(m)) ||
	    (be && (st = ferry_sched_runtime_create(be, &m->res, &m->rt))) || (st = ferry_dp_stage_create(m)))
		goto fail;
	/* gradients averaged over the ranks, and to the host, layer by layer */
	if (ferry_table_host_update(&m->tt) || m->comm || m->tt.ix.grad_ring >= 0)
		ferry_layer_exec_set_hook(m->layers, &(struct ferry_layer_hook){
			ferry_dp_after_layer, m->tt.ix.grad_ring >= 0 ? ferry_zero_grads_before_layer : NULL,
			ferry_dp_on_device(m) ? ferry_dp_grads_written : NULL, m });
	*out = m;
	return FERRY_OK;
fail:
	ferry_model_free(m);
	return st;
}

static ferry_status zero_state(struct ferry_model *m)
{
	ferry_stream_t s = m->rt.stream[m->compute];
	const int bufs[] = { m->tt.ix.mom_buffer, m->tt.ix.var_buffer, m->tt.ix.grads_buffer };
	ferry_status st = FERRY_OK;

	if (m->tt.ix.dev_grad_buffer >= 0 && m->tt.buffers[m->tt.ix.dev_grad_buffer].bytes)
		st = ferry_memset_zero_async(s, ferry_model_buffer_ptr(m, m->tt.ix.dev_grad_buffer),
					     m->tt.buffers[m->tt.ix.dev_grad_buffer].bytes);
	for (int i = 0; i < 3 && !st; i++) {
		size_t n = m->tt.buffers[bufs[i]].bytes; /* the parameter array's (a slice's: adam=device:shard) */

		if (ferry_model_buffer_on_host(m, bufs[i]) && !ferry_host_tiers_file_zero(m->tt.host_tiers,
				ferry_model_buffer_ptr(m, bufs[i]), n, &st))
			ferry_host_zero(ferry_model_buffer_ptr(m, bufs[i]), n);
		else if (!ferry_model_buffer_on_host(m, bufs[i]))
			st = ferry_memset_zero_async(s, ferry_model_buffer_ptr(m, bufs[i]), n);
	}
	return st ? st : ferry_stream_synchronize(s);
}

ferry_status ferry_model_create(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				const struct ferry_exec_opts *opts, ferry_model_t *out)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	ferry_model_t m;
	ferry_status st;

	*out = NULL;
	o.act_dtype = ferry_backend_caps(be).act_dtype; /* the backend decides */
	o.backend = ferry_backend_name(be);
	if ((st = ferry_model_build(be, cfg, B, T, &o, &m)))
		return st;
	if (ferry_backend_caps(be).max_head_size && m->cfg.head_size > ferry_backend_caps(be).max_head_size) {
		st = ferry_error(FERRY_ERR_UNSUPPORTED, "head size %d is larger than the %s backend's %d",
				 m->cfg.head_size, ferry_backend_name(be), ferry_backend_caps(be).max_head_size);
		ferry_model_free(m);
		return st;
	}
	if ((st = zero_state(m))) {
		ferry_model_free(m);
		return st;
	}
	*out = m;
	return FERRY_OK;
}

/* ---- steps ---------------------------------------------------------------------- */

/* Ids within the vocabulary; targets may also be below 0 (not counted). */
static ferry_status check_tokens(const ferry_model_t m, const int32_t *tok, size_t n, const char *what)
{
	const bool targets = !strcmp(what, "target");

	for (size_t i = 0; i < n; i++)
		if ((tok[i] < 0 && !targets) || tok[i] >= m->cfg.vocab)
			return ferry_error(FERRY_ERR_INVALID, "%s token %d at position %zu is outside the vocabulary (%d)",
					   what, tok[i], i, m->cfg.vocab);
	return FERRY_OK;
}

static ferry_status run(ferry_model_t m, const struct ferry_prog_key *key, const struct ferry_step_values *v)
{
	const struct ferry_program *p;
	ferry_status st = ferry_model_program(m, key, &p);

	if (!st)
		st = ferry_program_submit_traced(p, &m->rt, v, &m->trace);
	if (!st && (key->kind == FERRY_PROG_ZERO || key->kind == FERRY_PROG_BACKWARD))
		m->grads_added = key->kind == FERRY_PROG_BACKWARD;
	return st;
}

/* Positions of a packed batch: row (b, t)'s in 0 .. t (it sees keys
 * t - p .. t of its row), staged; none given: t. */
static ferry_status stage_positions(ferry_model_t m, int B, int T)
{
	const int32_t *pos = m->next_positions;

	m->next_positions = NULL;
	if (!pos && m->tt.ix.positions < 0)
		return FERRY_OK;
	if (m->tt.ix.positions < 0)
		return ferry_error(FERRY_ERR_INVALID, "positions given to a model made for token streams "
				   "(ferry_exec_opts.packed false)");
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			int32_t p = pos ? pos[(size_t)b * T + t] : t;

			if (p < 0 || p > t)
				return ferry_error(FERRY_ERR_INVALID, "position %d of row %d, token %d: a token's "
						   "position in its document is between 0 and its index in the row",
						   p, b, t);
			m->host_positions[(size_t)b * T + t] = p;
		}
	return FERRY_OK;
}

ferry_status ferry_model_set_positions(ferry_model_t m, const int32_t *positions)
{
	m->next_positions = positions;
	return positions && m->tt.ix.positions < 0 ? stage_positions(m, 0, 0) : FERRY_OK;
}

bool ferry_model_packed(ferry_model_t m)
{
	return m->tt.ix.positions >= 0;
}

/* Checks the batch, stages it for upload and submits the forward. */
static ferry_status submit_forward(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B, int T,
				   bool for_backward, bool loss_later)
{
	struct ferry_prog_key key = { FERRY_PROG_FORWARD, B, T, for_backward, targets != NULL, loss_later, 0 };
	size_t N = (size_t)B * T;
	ferry_status st;

	if (B < 1 || T < 1 || T > m->T || N > (size_t)m->B * m->T)
		return ferry_error(FERRY_ERR_INVALID, "batch %dx%d does not fit the model's %dx%d "
				   "(max sequence %d)", B, T, m->B, m->T, m->cfg.max_seq);
	st = check_tokens(m, inputs, N, "input");
	if (!st && targets)
		st = check_tokens(m, targets, N, "target");
	if (!st) /* (the previous step's uploads have run: its finish synchronised) */
		st = stage_positions(m, B, T);
	if (st)
		return st;
	/* the previous step's uploads have run: its finish synchronised */
	memcpy(m->host_tokens, inputs, N * sizeof(int32_t));
	if (targets)
		memcpy(m->host_targets, targets, N * sizeof(int32_t));
	m->cur_B = B;
	m->cur_T = T;
	m->have_targets = false;
	if ((st = run(m, &key, NULL)))
		return st;
	m->have_targets = targets != NULL && for_backward;
	return FERRY_OK;
}

double ferry_model_loss_sum(ferry_model_t m)
{
	size_t N = (size_t)m->cur_B * m->cur_T;
	double sum = 0;

	for (size_t i = 0; i < N; i++)
		sum += m->host_losses[i];
	return sum;
}

static float mean_loss(const ferry_model_t m)
{
	size_t N = (size_t)m->cur_B * m->cur_T;
	double sum = 0;

	for (size_t i = 0; i < N; i++)
		sum += m->host_losses[i];
	return (float)(sum / (double)N);
}

ferry_status ferry_model_forward(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B,
				 int T, float *loss)
{
	ferry_status st = submit_forward(m, inputs, targets, B, T, targets != NULL, false);

	if (!st)
		st = ferry_stream_synchronize(ferry_model_compute_stream(m));
	if (!st && targets && loss)
		*loss = mean_loss(m);
	return st;
}

ferry_status ferry_model_loss(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B, int T,
			      float *loss)
{
	ferry_status st;

	if (!targets)
		return ferry_error(FERRY_ERR_INVALID, "a loss needs targets");
	st = submit_forward(m, inputs, targets, B, T, false, false);
	if (!st)
		st = ferry_stream_synchronize(ferry_model_compute_stream(m));
	if (!st && loss)
		*loss = mean_loss(m);
	return st;
}

ferry_status ferry_model_probs(ferry_model_t m, int row, float *probs)
{
	const struct ferry_layer_decl *epi = m->md->epilogue;
	size_t V = (size_t)m->cfg.vocab;
	ferry_status st;
	char *base = NULL;

	if (row < 0 || row >= m->cur_B * m->cur_T)
		return ferry_error(FERRY_ERR_INVALID, "row %d outside the last batch", row);
	/* the softmax's probabilities: its second output, in place of the logits */
	for (int o = 0; o < epi->n_ops; o++)
		if (epi->ops[o].kind == FERRY_OP_SOFTMAX_XENT) {
			int t = epi->ops[o].out[1];

			while (m->md->epilogue_roles[t].role == FERRY_ROLE_ALIAS)
				t = m->md->epilogue_roles[t].alias_of;
			base = ferry_entry(m, m->tt.ix.epilogue[t]);
		}
	if (!base)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "model %s has no softmax output", m->cfg.arch);
	if (m->tt.place.loss_tile) { /* only the last tile's rows are there */
		int last = (m->cur_B * m->cur_T - 1) / m->tt.place.loss_tile * m->tt.place.loss_tile;

		if (row < last)
			return ferry_error(FERRY_ERR_INVALID, "row %d: with the loss over tiles of %d tokens only the last "
					   "tile's probabilities (rows %d on) are kept", row, m->tt.place.loss_tile, last);
		row -= last;
	}
	st = ferry_model_copy_sync(m, probs, base + (size_t)row * m->cfg.padded_vocab * m->asz, V * m->asz, FERRY_COPY_D2H);
	/* bf16 probabilities widen in place, from the end so nothing is
	 * overwritten before it is read: a bf16 is the top half of an fp32 */
	for (size_t i = V; !st && m->act == FERRY_BF16 && i-- > 0;) {
		uint16_t h;
		uint32_t bits;

		memcpy(&h, (char *)probs + 2 * i, 2);
		bits = (uint32_t)h << 16;
		memcpy(&probs[i], &bits, 4);
	}
	return st;
}

ferry_status ferry_model_zero_grad(ferry_model_t m)
{
	struct ferry_prog_key key = { .kind = FERRY_PROG_ZERO };
	ferry_status st = run(m, &key, NULL);

	return st ? st : ferry_stream_synchronize(ferry_model_compute_stream(m));
}

/* A collective that failed on the comm stream's thread (dp_reduce.c). */
static ferry_status comm_status(const ferry_model_t m)
{
	if (!m->comm_status)
		return FERRY_OK;
	return ferry_error(m->comm_status, "averaging the gradients over %d ranks failed", ferry_comm_size(m->comm));
}

static ferry_status submit_backward(ferry_model_t m)
{
	struct ferry_prog_key key = { FERRY_PROG_BACKWARD, m->cur_B, m->cur_T, true, true, false, 0 };

	/* streamed weights: the gradients added so far are on the host */
	if (m->grads_added && (ferry_layers_streamed(m) || m->tt.ix.grad_slice >= 0))
		key.variant = FERRY_BACKWARD_ADD; /* (ZeRO-2: in the ranks' slices) */
	if (!m->have_targets)
		return ferry_error(FERRY_ERR_INVALID,
				   "backward needs a forward pass with targets (one backward per forward)");
	/* the epilogue's backward may overwrite what it saved (the softmax
	 * turns probabilities into their gradient in place) */
	m->have_targets = false;
	return run(m, &key, NULL);
}

ferry_status ferry_model_backward(ferry_model_t m)
{
	ferry_status st = submit_backward(m);

	if (!st)
		st = ferry_stream_synchronize(ferry_model_compute_stream(m));
	if (!st)
		st = comm_status(m);
	/* the NVMe tier's file I/O ran on the copy streams' host threads: the
	 * backward's reads, which it waited for, report their errors here */
	return st ? st : ferry_host_tiers_io_status(m->tt.host_tiers);
}

static struct ferry_step_values step_values(const struct ferry_adamw *opt, int t)
{
	return (struct ferry_step_values){ opt->lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay, 1.0f, t };
}

/* After a speculative backward: which update completes the step.  Early
 * updates made with other values than the step's are redone too. */
static enum ferry_update_variant speculation_outcome(const ferry_model_t m, const struct ferry_adamw *opt, int t,
						     double norm)
{
	if (!isfinite(norm))
		return FERRY_UPDATE_UNDO;
	if ((opt->grad_clip > 0 && norm > opt->grad_clip) || t != m->spec_t ||
	    memcmp(opt, &m->spec_opt, sizeof(*opt)))
		return FERRY_UPDATE_REDO;
	return FERRY_UPDATE_COMMIT;
}

/* After the gradient norm has reached the host: clips and submits AdamW
 * (asynchronously). */
static ferry_status submit_update(ferry_model_t m, const struct ferry_adamw *opt, int t, float scale,
				  float *gnorm)
{
	struct ferry_prog_key key = { .kind = FERRY_PROG_UPDATE };
	struct ferry_step_values v = step_values(opt, t);
	double norm = sqrt(*m->host_sumsq) * scale;
	ferry_status st;

	m->set_hash_valid = false; /* the values move on */

	if (gnorm)
		*gnorm = (float)norm;
	if (m->spec_pending) {
		m->spec_pending = false;
		key.variant = speculation_outcome(m, opt, t, norm);
		m->spec_undone += key.variant != FERRY_UPDATE_COMMIT;
		if (key.variant == FERRY_UPDATE_UNDO) { /* the state before the step, then the error */
			if ((st = run(m, &key, &v)) || (st = ferry_model_sync_all(m)))
				return st;
		}
	}
	if (!isfinite(norm))
		return ferry_error(FERRY_ERR_INVALID, "gradient norm is %f: training diverged", norm);
	v.grad_scale = scale;
	if (opt->grad_clip > 0 && norm > opt->grad_clip)
		v.grad_scale = scale == 1.0f ? (float)(opt->grad_clip / norm) : (float)(scale * opt->grad_clip / norm);
	return run(m, &key, &v);
}

void ferry_model_host_memory(ferry_model_t m, struct ferry_host_memory *out)
{
	out->pinned_bytes = m->mem.pool ? m->tt.pinned_bytes : 0;
	out->pageable_bytes = m->tt.pageable_bytes + (m->mem.pool ? 0 : m->tt.pinned_bytes);
	out->limit = m->tt.pinned_limit;
	out->over_limit = m->tt.over_pinned_limit;
	out->pin_failed = m->mem.pool_failed || m->mem.pool_pageable;
	out->allocated_bytes = m->mem.host_bytes;
}

bool ferry_model_collective_forward(ferry_model_t m)
{
	return m->comm && m->tt.ix.param_slice >= 0;
}

bool ferry_model_speculative(ferry_model_t m)
{
	return ferry_table_place(&m->tt, FERRY_GROUP_ADAM)->speculative;
}

ferry_status ferry_model_step_speculate(ferry_model_t m, const struct ferry_adamw *opt, int t)
{
	if (!ferry_model_speculative(m))
		return ferry_error(FERRY_ERR_INVALID, "speculative updates need ferry_exec_opts.clip_order "
				   "FERRY_CLIP_SPECULATIVE (with the optimizer on host threads)");
	m->set_hash_valid = false; /* updates run within the backward */
	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	m->spec_opt = *opt;
	m->spec_t = t;
	m->spec_armed = true;
	return FERRY_OK;
}

int ferry_model_speculation_undone(ferry_model_t m)
{
	return m->spec_undone;
}

ferry_status ferry_model_update(ferry_model_t m, const struct ferry_adamw *opt, int t, float *gnorm)
{
	return ferry_model_update_scaled(m, opt, t, 1.0f, gnorm);
}

ferry_status ferry_model_update_scaled(ferry_model_t m, const struct ferry_adamw *opt, int t, float scale,
				       float *gnorm)
{
	struct ferry_prog_key key = { .kind = FERRY_PROG_NORM };
	ferry_status st;

	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	if (!(scale > 0) || !isfinite(scale))
		return ferry_error(FERRY_ERR_INVALID, "gradient scale %g must be positive", (double)scale);
	if ((st = run(m, &key, NULL)) || (st = ferry_stream_synchronize(ferry_model_compute_stream(m))) ||
	    (st = submit_update(m, opt, t, scale, gnorm)))
		return st;
	return ferry_stream_synchronize(ferry_model_compute_stream(m));
}

void ferry_model_step_keys(int B, int T, struct ferry_prog_key keys[FERRY_STEP_PROGRAMS])
{
	const struct ferry_prog_key k[FERRY_STEP_PROGRAMS] = {
		{ .kind = FERRY_PROG_ZERO },
		{ FERRY_PROG_FORWARD, B, T, true, true, true, 0 },
		{ FERRY_PROG_BACKWARD, B, T, true, true, false, 0 },
		{ FERRY_PROG_NORM, B, T, false, true, true, 0 },
		{ .kind = FERRY_PROG_UPDATE },
	};

	memcpy(keys, k, sizeof(k));
}

/* The backward of the step just submitted, with early updates when a
 * speculative step was armed. */
static ferry_status submit_step_backward(ferry_model_t m)
{
	struct ferry_prog_key key = { FERRY_PROG_BACKWARD, m->cur_B, m->cur_T, true, true, false,
				      FERRY_BACKWARD_SPECULATIVE };
	struct ferry_step_values v;
	ferry_status st;

	if (!m->spec_armed)
		return submit_backward(m);
	m->spec_armed = false;
	if (!m->have_targets)
		return ferry_error(FERRY_ERR_INVALID, "backward needs a forward pass with targets");
	m->have_targets = false;
	v = step_values(&m->spec_opt, m->spec_t);
	if ((st = run(m, &key, &v)))
		return st;
	m->spec_pending = true;
	return FERRY_OK;
}

ferry_status ferry_model_step_submit(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B,
				     int T)
{
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	ferry_status st;

	if (!targets)
		return ferry_error(FERRY_ERR_INVALID, "a training step needs targets");
	ferry_model_step_keys(B, T, keys);
	if ((st = run(m, &keys[0], NULL)) || (st = submit_forward(m, inputs, targets, B, T, true, true)) ||
	    (st = submit_step_backward(m)))
		return st;
	return run(m, &keys[3], NULL);
}


ferry_status ferry_model_step_finish(ferry_model_t m, const struct ferry_adamw *opt, int t, float *loss,
				     float *gnorm)
{
	ferry_status st;

	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	/* the step's one synchronisation: its loss and gradient norm */
	if ((st = ferry_stream_synchronize(ferry_model_compute_stream(m))) || (st = comm_status(m)))
		return st;
	if (loss)
		*loss = mean_loss(m);
	return submit_update(m, opt, t, 1.0f, gnorm);
}

ferry_status ferry_model_step_finish_scaled(ferry_model_t m, const struct ferry_adamw *opt, int t, float scale,
					    float *loss, float *gnorm)
{
	ferry_status st;

	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	if (!(scale > 0) || !isfinite(scale))
		return ferry_error(FERRY_ERR_INVALID, "gradient scale %g must be positive", (double)scale);
	if ((st = ferry_stream_synchronize(ferry_model_compute_stream(m))) || (st = comm_status(m)))
		return st;
	if (loss)
		*loss = mean_loss(m);
	return submit_update(m, opt, t, scale, gnorm);
}

ferry_status ferry_model_sync(ferry_model_t m)
{
	return ferry_model_sync_all(m);
}

/* The host tiers' share of the traced model's host memory, tier by tier. */
static void trace_tiers(ferry_model_t m)
{
	struct ferry_tier_report rep;

	m->trace.n_tiers = 0;
	if (!m->tt.host_tiers)
		return;
	ferry_host_tiers_report(m->tt.host_tiers, &rep);
	for (int i = 0; i < rep.n && m->trace.n_tiers < FERRY_TRACE_MAX_TIERS; i++) {
		int k = m->trace.n_tiers++;

		ferry_tier_describe(&rep.use[i].tier, m->trace.tier_name[k], sizeof(m->trace.tier_name[k]));
		m->trace.tier_bytes[k] = rep.use[i].total;
	}
}

ferry_status ferry_model_trace_begin(ferry_model_t m)
{
	if (!m->be)
		return ferry_error(FERRY_ERR_INVALID, "trace: the model has no backend");
	ferry_status st = ferry_trace_begin(&m->trace, m->be, ferry_model_compute_stream(m));

	m->trace.host_bytes = 0; /* for the trace's host memory counters */
	for (int b = 0; b < m->tt.n_buffers; b++)
		if (m->tt.buffers[b].site == FERRY_SITE_HOST)
			m->trace.host_bytes += m->tt.buffers[b].bytes;
	trace_tiers(m);
	return st;
}

ferry_status ferry_model_trace_end(ferry_model_t m, const char *path)
{
	if (!path)
		return ferry_error(FERRY_ERR_INVALID, "trace: no path");
	return ferry_model_trace_end_stats(m, path, NULL);
}

ferry_status ferry_model_trace_end_stats(ferry_model_t m, const char *path, struct ferry_trace_stats *stats)
{
	char about[400];
	ferry_status st = FERRY_OK;

	if (!m->trace.on)
		return ferry_error(FERRY_ERR_INVALID, "trace: ferry_model_trace_begin was not called");
	for (int i = 0; i < m->rt.n_streams && !st; i++)
		st = ferry_stream_synchronize(m->rt.stream[i]);
	if (st) {
		m->trace.on = false;
		return st;
	}
	snprintf(about, sizeof(about), "ferry: %s %d layers, %d channels, batch %d x %d on %s", m->cfg.arch,
		 m->cfg.layers, m->cfg.channels, m->cur_B, m->cur_T, ferry_backend_description(m->be));
	return ferry_trace_finish(&m->trace, &m->res, about, path, stats);
}
