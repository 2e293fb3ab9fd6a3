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
 * the ranks' slices into slot l % 2, one layer ahead of use, in forward
 * and again in backward (the last layer's stays for it), the slot reused
 * once its layer is done.  The gradients are not the ring's: a layer's
 * are written into ZeRO-2's gradient slots and reduce-scattered from
 * there.  The unstacked parameters (embeddings, head, final norm), read
 * at both ends of the step, stay whole on every rank (the kernels' copy),
 * gathered after each update; their master weights, moments and
 * gradients are split like the rest.
 *
 * Each rank updates its slice (zero.c); the gathered weights are the
 * updated slices' bits, so every stage gives the bits of --zero 0 where
 * ZeRO-2 does.
 */
#include "exec/model_internal.h"

static void *entry(const struct ferry_model *m, int i)
{
	return ferry_tensor_ptr(&m->tt, &m->mem, i);
}

/* base + bytes, or NULL in a dry build. */
static void *at(void *base, size_t bytes)
{
	return base ? (char *)base + bytes : NULL;
}

void ferry_zero_params_bind(struct ferry_model *m)
{
	const struct ferry_table_ring *tr = &m->tt.ix.ring[FERRY_GROUP_LAYER_WEIGHTS];
	struct ferry_weight_rings *r = &m->ring[FERRY_GROUP_LAYER_WEIGHTS];

	m->zero_gather = (struct ferry_ring_gather){ m->comm, entry(m, m->tt.ix.copy_slice), m->tt.ix.shard_numel,
						     &m->comm_status };
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
		s->dev = at(entry(m, tr->w[0][q]), tr->off[q] * m->asz);
		m->wptr[q] = s->dev;
	}
}

void ferry_zero_params_gather_unstacked(struct ferry_model *m, struct ferry_program *p)
{
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (m->tt.ix.copy[q] >= 0 && ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK)
			ferry_emit_all_gather_slices(p, m->comm_stream, m->comm, entry(m, m->tt.ix.copy[q]),
						     entry(m, m->tt.ix.copy_slice), pi.offset, pi.numel, m->asz,
						     m->tt.ix.shard_numel, &m->comm_status, -1, "gather params: unstacked");
	}
}
