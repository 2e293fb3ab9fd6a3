/*
 * ZeRO-2 (adam=device:shard(N,grads), --zero 2): the gradients split over
 * the ranks as the moments are (zero.c), each rank keeping only its slice
 * [r*S, (r+1)*S) of the gradient array.
 *
 * A layer's backward writes its whole gradients into one of two slots
 * (the engine's gradient slots); once it is done, the comm stream
 * reduce-scatters them, parameter by parameter, into the slices (each
 * rank receives the average of the part that falls in its slice, as the
 * all-reduce averages: the bits of --zero 0), while the backward of the
 * layers below goes on; the slot is zeroed again for layer l - 2 only
 * after that.  The unstacked parameters' gradients (embeddings, head,
 * final norm), written at both ends of the backward, stay whole and are
 * reduce-scattered after it.  A backward that adds to the last one's
 * (a later micro-batch) starts each slot, and the unstacked gradients,
 * from their average gathered back from the slices, as --zero 0 starts
 * from the averaged whole buffer.
 *
 * The gradient norm keeps its bits: S is whole blocks of the CPU sum's
 * (ops/cpu/kernels.h), each rank sums the blocks of its slice, the block
 * sums are summed over the ranks (each block's is one rank's, the others
 * add 0) and then added in order, as the sum over the whole array does.
 * On the CPU backend the block sums run on host threads; on a GPU a
 * kernel writes them into the kernel workspace (the same blocks and the
 * same order as the GPU's whole sum, so --zero 2 keeps --zero 0's bits
 * there too), the ranks sum them there, and they come down to be added.
 *
 * With the weights streamed (layers.weights=host:stream, AdamW on host
 * threads) the slice, the slots and the unstacked gradients are on the
 * host: the weight ring sends a layer's gradients into its host slot, the
 * comm stream reduce-scatters them from there once the copy is done (and
 * the ring's next copy into that slot waits for it); the unstacked
 * parameters' are scattered from their host arrays once every gradient
 * is on the host; adding, a layer's average is gathered back into its host
 * slot (the unstacked ones' into their arrays) before the ring brings it
 * up; the norm's block sums run on the host optimizer's stream.  ZeRO-3
 * with the edges gathered (zero_params.c) sends only the unstacked
 * gradients to host arrays, through the edges' ring, and scatters them
 * from there in the same way.
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "ops/cpu/kernels.h"

#include <stdio.h>

/* This rank's slice of the gradient array: the device's, or the host's. */
static float *slice_of(const struct ferry_model *m)
{
	return ferry_entry(m, m->tt.ix.grad_slice >= 0 ? m->tt.ix.grad_slice : m->tt.ix.host_grad_slice);
}

static float *slot_of(const struct ferry_model *m, int l)
{
	const struct ferry_table_index *ix = &m->tt.ix;

	return ferry_at(ferry_entry(m, ix->grad_ring), (size_t)(l % ix->grad_slots) * ix->grad_slot_numel * sizeof(float));
}

void ferry_zero_grads_add_events(struct ferry_model *m)
{
	char name[40];

	for (int s = 0; s < m->tt.ix.grad_slots; s++) {
		snprintf(name, sizeof(name), "gradient slot scattered [%d]", s);
		m->zero_slot_free[s] = ferry_sched_event(&m->res, name);
	}
	for (int s = 0; s < m->tt.ix.grad_slots; s++) {
		snprintf(name, sizeof(name), "gradient slot gathered [%d]", s);
		m->zero_slot_in[s] = ferry_sched_event(&m->res, name);
	}
	m->zero_edges_in = ferry_sched_event(&m->res, "unstacked gradients gathered");
	m->zero_parts_done = ferry_sched_event(&m->res, "norm: this rank's block sums");
	m->zero_parts_summed = ferry_sched_event(&m->res, "norm: block sums over the ranks");
}

/* Parameter q's gradient elements [off, off + n) of the array, whole at
 * `whole` on every rank, into the ranks' slices (or back: gather). */
static void move(struct ferry_model *m, struct ferry_program *p, const struct ferry_param_info *pi, float *whole,
		 size_t off, size_t n, int layer, bool gather)
{
	struct ferry_comm *comm = ferry_layers_streamed(m) ? m->host_comm : m->comm; /* (the slots and slice on the host) */
	float *slice = slice_of(m);
	char label[56];

	snprintf(label, sizeof(label), "%s grad: %.40s", gather ? "gather" : "scatter", pi->name);
	if (gather)
		ferry_emit_all_gather_slices(p, m->comm_stream, comm, whole, slice, off, n, sizeof(float),
					     m->tt.ix.shard_numel, &m->comm_status, layer, label);
	else
		ferry_emit_reduce_scatter_slices(p, m->comm_stream, comm, slice, whole, off, n, m->tt.ix.shard_numel,
						 &m->comm_status, layer, label);
}

/* Layer l's gradients between its slot and the slices. */
static void move_layer(struct ferry_model *m, struct ferry_program *p, int l, bool gather)
{
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK && pi.present && pi.layers)
			move(m, p, &pi, ferry_at(slot_of(m, l), m->tt.ix.grad_slot_off[q] * sizeof(float)),
			     pi.offset + (size_t)l * pi.layer_numel, pi.layer_numel, l, gather);
	}
}

/* Whether the unstacked parameters' gradients are whole on the host: the
 * layers' or (ZeRO-3) the edges' ring sends them there. */
static bool unstacked_on_host(const struct ferry_model *m)
{
	return ferry_layers_streamed(m) || m->ring[FERRY_GROUP_EDGE_WEIGHTS].gather;
}

/* The unstacked parameters' gradients between their arrays (the
 * device's, or the host's) and the slices. */
static void move_unstacked(struct ferry_model *m, struct ferry_program *p, bool gather)
{
	for (int q = 0; q < m->md->n_params; q++) {
		const int whole = unstacked_on_host(m) ? m->tt.ix.grad[q] : m->tt.ix.dev_grad[q];
		struct ferry_param_info pi;

		if (whole >= 0 && ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK)
			move(m, p, &pi, ferry_entry(m, whole), pi.offset, pi.numel, -1, gather);
	}
}

/* Before layer l's backward: its slot zeroed once the gradients it last
 * held are scattered, or, adding to them, their average gathered into it
 * (after that scatter: the comm stream's order).  A host slot: the ring
 * zeroes its device slot, and its copy into the host slot waits for the
 * scatter. */
void ferry_zero_grads_before_layer(void *model, struct ferry_program *p, int l)
{
	struct ferry_model *m = model;
	const int s = l % m->tt.ix.grad_slots;

	if (ferry_layers_streamed(m))
		ferry_emit_wait(p, m->opt_d2h, m->zero_slot_free[s], l);
	if (m->emit_adding) {
		move_layer(m, p, l, true);
		ferry_emit_record(p, m->comm_stream, m->zero_slot_in[s], l);
		ferry_emit_wait(p, m->compute, m->zero_slot_in[s], l);
		return;
	}
	if (ferry_layers_streamed(m))
		return;
	ferry_emit_wait(p, m->compute, m->zero_slot_free[s], l);
	ferry_emit_zero(p, m->compute, slot_of(m, l), m->tt.ix.grad_slot_numel * sizeof(float), l,
			"weight gradient slot");
}

void ferry_zero_grads_adding_start(struct ferry_model *m, struct ferry_program *p)
{
	move_unstacked(m, p, true);
	ferry_emit_record(p, m->comm_stream, m->zero_edges_in, -1);
	ferry_emit_wait(p, m->compute, m->zero_edges_in, -1);
}

void ferry_zero_grads_after_layer(struct ferry_model *m, struct ferry_program *p, int l)
{
	ferry_emit_record(p, ferry_layers_streamed(m) ? m->opt_d2h : m->compute, m->dp_ready, l); /* (the ring's copy out) */
	ferry_emit_wait(p, m->comm_stream, m->dp_ready, l);
	move_layer(m, p, l, false);
	ferry_emit_record(p, m->comm_stream, m->zero_slot_free[l % m->tt.ix.grad_slots], l);
}

void ferry_zero_grads_after_backward(struct ferry_model *m, struct ferry_program *p)
{
	if (unstacked_on_host(m)) { /* (streamed: the host norm waits for dp_all) */
		ferry_emit_wait(p, m->comm_stream, m->all_grads_home, -1);
	} else {
		ferry_emit_record(p, m->compute, m->dp_ready, -1);
		ferry_emit_wait(p, m->comm_stream, m->dp_ready, -1);
	}
	move_unstacked(m, p, false);
	ferry_emit_record(p, m->comm_stream, m->dp_all, -1);
	if (!ferry_layers_streamed(m))
		ferry_emit_wait(p, m->compute, m->dp_all, -1);
}

/* The block sums at parts (this rank's), summed over the ranks in place on
 * the comm stream by comm; `stream` waits for them. */
static void sum_over_ranks(struct ferry_model *m, struct ferry_program *p, int stream, struct ferry_comm *comm,
			   double *parts)
{
	ferry_emit_record(p, stream, m->zero_parts_done, -1);
	ferry_emit_wait(p, m->comm_stream, m->zero_parts_done, -1);
	ferry_emit_sum_f64(p, m->comm_stream, comm, parts, FERRY_CPU_SUM_BLOCKS, &m->comm_status,
			   "grad norm: block sums over the ranks");
	ferry_emit_record(p, m->comm_stream, m->zero_parts_summed, -1);
	ferry_emit_wait(p, stream, m->zero_parts_summed, -1);
}

void ferry_zero_grads_norm(struct ferry_model *m, struct ferry_program *p, int stream)
{
	const size_t S = m->tt.ix.shard_numel, lo = m->comm ? (size_t)ferry_comm_rank(m->comm) * S : 0;
	const long n = (long)m->tt.n_params;

	if (m->be && !ferry_backend_caps(m->be).unified && m->tt.ix.grad_slice >= 0) {
		/* a GPU's slice: the block sums into the kernel workspace, which
		 * no op reuses before the stream has waited for their sum and
		 * copied it down */
		double *parts = ferry_entry(m, m->tt.ix.workspace);
		struct ferry_op_call c = { .kind = FERRY_OP_SUM_SQUARES, .n = n, .lo = (long)lo, .hi = (long)(lo + S) };

		c.in[0] = slice_of(m);
		c.out[0] = parts;
		ferry_emit_op(p, stream, &c, -1, "grad norm: this rank's block sums");
		sum_over_ranks(m, p, stream, m->comm, parts);
		ferry_emit_copy(p, stream, m->norm_parts, parts, FERRY_CPU_SUM_BLOCKS * sizeof(double), FERRY_COPY_D2H,
				-1, "grad norm: block sums");
	} else {
		ferry_emit_host_sum_squares_parts(p, stream, slice_of(m), n, lo, lo + S, m->norm_parts,
						  "grad norm: this rank's block sums");
		sum_over_ranks(m, p, stream, m->host_comm, m->norm_parts);
	}
	ferry_emit_host_sum_parts(p, stream, m->norm_parts, m->host_sumsq, "grad norm: sum of squares");
}
