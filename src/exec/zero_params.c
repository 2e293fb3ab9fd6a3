/*
 * ZeRO-3 (adam=device:shard(N,params), --zero 3): the parameters split
 * over the ranks too, each rank keeping its slice [r*S, (r+1)*S) of the
 * master weights, moments and gradients (ZeRO-2's slices, zero_grads.c),
 * and of the compute copy in the kernels' type (bf16: an array of its
 * own, which AdamW writes beside the master; fp32: the master itself).
 * The gathers below read the compute copy's slice, 2 bytes an element in
 * bf16, 4 in fp32, and write the kernels' weights; gradients stay fp32.
 *
 * The stacked layers' weights reach the kernels through the weight ring
 * of --offload-params (weight_ring.h), whose load is here an all-gather:
 * on the comm stream, layer l's elements of each parameter gathered from
 * the ranks' slices into slot l % R, R - 1 layers ahead of use (R = 2;
 * with the slice on the host, --param-prefetch D + 1), in forward and
 * again in backward (the last R layers' stay for it), the slot
 * reused once its layer is done.  The gradients are not the ring's: a layer's
 * are written into ZeRO-2's gradient slots and reduce-scattered from
 * there.  The unstacked parameters (embeddings, head, final norm), read
 * at both ends of the step, stay whole on every rank (the kernels' copy),
 * gathered after each update; their master weights, moments and
 * gradients are split like the rest.
 *
 * Each rank updates its slice (zero.c); the gathered weights are the
 * updated slices' bits, so every stage gives the bits of --zero 0 where
 * ZeRO-2 does.
 *
 * With the parameters on the host too (--zero 3 --offload-params
 * --offload-optimizer cpu, FSDP2's CPU offload) the slice gathered from
 * is the host's (fp32: the master slice itself; bf16: the slice of the
 * compute copy the host AdamW writes beside it), and the device keeps
 * none: before each all-gather of a layer's parameter this rank's part
 * of it goes up into a device staging slot on the comm stream (2 bytes
 * an element in bf16), and is gathered from there.  The host AdamW sends only the unstacked
 * parameters' updated parts up, into their place in the whole, gathered
 * around them in place (zero_host.c).  With --offload-embeddings too
 * (edges.weights=host:stream) no rank keeps those whole: the edges' ring
 * (one region, a stage's parameters at a time, build.c) loads by the
 * same staged gathers, in pieces of the staging slot, and sends their
 * gradients home whole, reduce-scattered from there (zero_grads.c).
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"

void ferry_zero_params_bind(struct ferry_model *m)
{
	const struct ferry_table_ring *tr = &m->tt.ix.ring[FERRY_GROUP_LAYER_WEIGHTS];
	struct ferry_weight_rings *r = &m->ring[FERRY_GROUP_LAYER_WEIGHTS];
	const size_t S = m->tt.ix.shard_numel;

	/* (a dry build's slice: rank 0's) */
	m->zero_gather = (struct ferry_ring_gather){ m->comm, ferry_entry(m, m->tt.ix.copy_slice), S, &m->comm_status,
						     ferry_entry(m, m->tt.ix.param_stage),
						     m->tt.ix.param_stage >= 0 ? m->tt.e[m->tt.ix.param_stage].bytes / m->asz : 0,
						     m->comm ? (size_t)ferry_comm_rank(m->comm) * S : 0 };
	r->ring = tr->slots;
	r->grad_ring = m->tt.ix.grad_slots; /* the engine's gradient slots, not the ring's */
	r->grads_apart = true;
	r->slot_numel = tr->slot_numel;
	r->elem = m->asz;
	r->gather = &m->zero_gather;
	r->h2d = m->comm_stream; /* collectives run on the comm stream alone */
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;
		struct ferry_weight_stream *s;

		if (tr->w[0][q] < 0 || ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK)
			continue;
		s = &r->s[r->n++];
		*s = (struct ferry_weight_stream){ .name = m->md->params[q].name, .numel = pi.layer_numel,
						   .flat = pi.offset };
		s->dev = ferry_at(ferry_entry(m, tr->w[0][q]), tr->off[q] * m->asz);
		m->wptr[q] = s->dev;
	}
	if (m->ring[FERRY_GROUP_EDGE_WEIGHTS].ring) /* the edges' too, a stage's parameters into its region */
		m->ring[FERRY_GROUP_EDGE_WEIGHTS].gather = &m->zero_gather;
}

/* With the slice on the host (ix.param_stage) the update sent this
 * rank's part of each unstacked parameter up into its place in the whole,
 * and the gather fills in the others' around it. */
void ferry_zero_params_gather_unstacked(struct ferry_model *m, struct ferry_program *p)
{
	const size_t lo = m->zero_gather.first, S = m->tt.ix.shard_numel;

	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;
		void *whole = ferry_entry(m, m->tt.ix.copy[q]);
		size_t mine;

		if (m->tt.ix.copy[q] < 0 || ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK)
			continue;
		if (m->tt.ix.param_stage < 0) {
			ferry_emit_all_gather_slices(p, m->comm_stream, m->comm, whole, ferry_entry(m, m->tt.ix.copy_slice),
						     pi.offset, pi.numel, m->asz, S, &m->comm_status, -1,
						     "gather params: unstacked");
			continue;
		}
		mine = lo < pi.offset ? 0 : lo - pi.offset < pi.numel ? lo - pi.offset : pi.numel; /* its part's place */
		ferry_emit_all_gather_part(p, m->comm_stream, m->comm, whole, ferry_at(whole, mine * m->asz), pi.offset,
					   pi.numel, m->asz, S, &m->comm_status, -1, "gather params: unstacked, in place");
	}
}
