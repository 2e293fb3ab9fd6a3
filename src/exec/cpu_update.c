/*
 * AdamW on host threads (FERRY_OPTIM_CPU): its programs.
 *
 * Gradients come to the host layer by layer during the backward pass: the
 * engine calls ferry_cpu_update_after_layer once a layer's weight
 * gradients are complete, and it queues their copy on the device-to-host
 * stream (with --offload-params the engine's gradient ring has already
 * sent them).  The unstacked parameters' gradients (embedding, head, final
 * norm) are complete only after the whole backward.
 *
 * Clipping by the global norm needs every gradient before any update:
 *  - exact order: the update program runs after the norm, each layer's
 *    slice of each stacked parameter, then the unstacked ones in chunks;
 *  - speculative order: in a speculative backward each layer is updated on
 *    a host thread as soon as its gradients are on the host, with
 *    grad_scale 1 (what the exact order uses when the norm is within the
 *    clip), the fused kernel first copying the slice's master, m and v to
 *    an undo copy.  After the norm: no clipping needed, the COMMIT program
 *    updates the unstacked parameters; clipping needed, REDO puts every
 *    layer back from its undo copy and updates it again with the scale;
 *    a norm that is not finite, UNDO puts them back only.  AdamW is
 *    elementwise, so any slicing gives the same bits, and so does either
 *    order.
 * Updated weights go to the device's compute copy (the bf16 bits the same
 * pass wrote, or the fp32 master): on the host-to-device stream after the
 * exact update, on the host optimizer stream itself after a speculative
 * one (so the activation prefetches on h2d never wait behind the host
 * threads).  With --offload-params the stacked weights are not uploaded:
 * the weight ring loads them from the host before their next use.  Every
 * update program ends with the host-to-device stream waiting for the last
 * host task and the compute stream for it, so the next step reads the
 * updated weights.
 *
 * Split over the ranks (adam=host:cpu:shard(N), zero_host.c) the host
 * holds only the rank's slice of the parameter array: every slice above
 * is cut to its part of the slice (ferry_zero_host_piece), gradients come
 * down and weights go up only there, and after the update the compute
 * copy is all-gathered.  With the gradients split too (host:cpu:shard(N,
 * grads), ZeRO-2) they come down from the device's slice once a layer's
 * are reduce-scattered into it (zero_grads.c); with the parameters split
 * too (host:cpu:shard(N,params), ZeRO-3) the weights go up into the
 * device's slice, and only the unstacked ones are gathered after the
 * update (the layers are, ahead of use, by ZeRO-3's ring); with the
 * slice on the host (--offload-params) only the unstacked ones go up,
 * into their whole copy, and ZeRO-3's ring stages the layers' parts from
 * the host.
 *
 * With the gradients kept on the device (adam.grads=device:stream(D),
 * --device-grads) nothing goes down during the backward: the host holds
 * a ring of D + 1 slots, and each unit (a layer's slice of every stacked
 * parameter, or a slot's worth of an unstacked one) is copied into the
 * next slot on the device-to-host stream once the slot is free, updated
 * from it by the host threads, and the slot freed, so the next units'
 * copies overlap this one's update.  The exact order does this after the
 * norm; the speculative order for each layer during the backward (on
 * several ranks once its average is done), and REDO copies the layers
 * down again (the device still has them).  Split over the ranks, a unit
 * is the rank's pieces of it (from the whole device gradients, or ZeRO-2's
 * slice), each where its whole part would be in the slot.
 */
#include "exec/model_internal.h"

#include <stdio.h>

static bool split(const struct ferry_model *m)
{
	return ferry_zero_host_split(m); /* adam=host:cpu:shard(N) (zero_host.c) */
}

static const char *name_of(ferry_model_t m, int q)
{
	struct ferry_param_info pi;

	return ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK ? pi.name : "";
}

/* Parameter q's AdamW call over [off, off + n) of its array on the host. */
static struct ferry_op_call host_call(ferry_model_t m, int q, size_t off, size_t n)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	struct ferry_op_call c = { .kind = FERRY_OP_ADAMW, .n = (long)n };

	c.param = ferry_zero_host_at(m, ix->param, ix->host_param_slice, q, off, sizeof(float));
	c.out[0] = ferry_zero_host_at(m, ix->mom, ix->mom_slice, q, off, sizeof(float));
	c.out[1] = ferry_zero_host_at(m, ix->var, ix->var_slice, q, off, sizeof(float));
	c.in[0] = ferry_zero_host_at(m, ferry_layers_streamed(m) ? ix->grad : ix->host_grad,
				     ix->host_grad_slice, q, off, sizeof(float));
	if (ix->host_copy_slice >= 0 || ix->host_copy[q] >= 0)
		c.param_copy = ferry_zero_host_at(m, ix->host_copy, ix->host_copy_slice, q, off, m->asz);
	c.scalar[4] = m->md->params[q].decay ? 1.0f : 0.0f;
	return c;
}

/* Where table entry i's copy for rollback (the table's rollback rule)
 * holds the slice `bytes` into it. */
static void *rollback(ferry_model_t m, int i, size_t bytes)
{
	const struct ferry_tensor_entry *e = &m->tt.e[i];

	return ferry_at(ferry_entry(m, e->rollback), e->rollback_off + bytes);
}

/* The copies for rollback of elements from off of stacked parameter q's
 * master, m and v, in c->din[0..2]. */
static void with_undo(ferry_model_t m, int q, size_t off, struct ferry_op_call *c)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	const int state[3] = { ix->host_param_slice >= 0 ? ix->host_param_slice : ix->param[q],
			       split(m) ? ix->mom_slice : ix->mom[q], split(m) ? ix->var_slice : ix->var[q] };

	for (int i = 0; i < 3; i++)
		c->din[i] = rollback(m, state[i], ferry_zero_host_index(m, q, off) * sizeof(float));
}

/* The updated slice into the device's compute copy, on stream s (after
 * the host task: s waits for it unless s is the host stream itself). */
static void upload(ferry_model_t m, struct ferry_program *p, int s, int q, size_t off, size_t n, int layer,
		   const struct ferry_op_call *c)
{
	char label[56];

	if ((m->tt.ix.copy[q] < 0 && (m->tt.ix.param_slice < 0 || m->tt.ix.param_stage >= 0)) ||
	    (ferry_layers_streamed(m) && (layer >= 0 || split(m))))
		return; /* the weight ring loads it from the host (split: uploaded whole once gathered;
			   ZeRO-3's: stages its part) */
	if (s != m->opt_cpu_stream)
		ferry_emit_wait(p, s, m->opt_host_done, layer);
	snprintf(label, sizeof(label), "weights: %.40s", name_of(m, q));
	ferry_emit_copy(p, s, ferry_zero_host_device_copy(m, q, off), c->param_copy ? c->param_copy : c->param,
			n * m->asz, FERRY_COPY_H2D, layer, label);
}

/* Slice [off, off + n) of parameter q (layer `layer`, or -1), updated by a
 * host thread: its gradients copied down first unless they are there. */
static void cpu_slice(ferry_model_t m, struct ferry_program *p, int q, size_t off, size_t n, int layer,
		      bool copy_grad)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	struct ferry_op_call c;
	char label[56];

	if (!ferry_zero_host_piece(m, q, &off, &n))
		return;
	c = host_call(m, q, off, n);
	if (copy_grad && !ferry_layers_streamed(m)) {
		snprintf(label, sizeof(label), "grad: %.40s", name_of(m, q));
		ferry_emit_copy(p, m->opt_d2h,
				ferry_zero_host_at(m, ix->host_grad, ix->host_grad_slice, q, off, sizeof(float)),
				ferry_zero_host_device_grad(m, q, off), n * sizeof(float), FERRY_COPY_D2H, layer, label);
		ferry_emit_record(p, m->opt_d2h, m->opt_grads_home, layer);
		ferry_emit_wait(p, m->opt_cpu_stream, m->opt_grads_home, layer);
	}
	snprintf(label, sizeof(label), "cpu adamw %.40s", name_of(m, q));
	ferry_emit_host_adamw(p, m->opt_cpu_stream, &c, layer, label);
	ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, layer);
	upload(m, p, m->opt_h2d, q, off, n, layer, &c);
}

/* ---- adam.grads=device:stream(D): the gradients through a host ring ---------------- */

static bool grads_on_device(const struct ferry_model *m)
{
	return m->tt.ix.host_grad_ring >= 0;
}

/* The next unit's slot: the device-to-host stream waits until the host
 * threads have read what it held. */
static int ring_take(ferry_model_t m, struct ferry_program *p, int layer)
{
	int slot = m->grad_slot_next++ % m->tt.ix.host_grad_slots;

	ferry_emit_wait(p, m->opt_d2h, m->grad_slot_free[slot], layer);
	return slot;
}

/* Element off of slot `slot`. */
static float *ring_at(ferry_model_t m, int slot, size_t off)
{
	return ferry_at(ferry_entry(m, m->tt.ix.host_grad_ring), ((size_t)slot * m->tt.ix.host_grad_slot_numel + off) * sizeof(float));
}

/* n gradient elements of parameter q from off down into dst. */
static void ring_copy(ferry_model_t m, struct ferry_program *p, float *dst, int q, size_t off, size_t n, int layer)
{
	char label[56];

	snprintf(label, sizeof(label), "grad: %.40s", name_of(m, q));
	ferry_emit_copy(p, m->opt_d2h, dst, ferry_zero_host_device_grad(m, q, off), n * sizeof(float), FERRY_COPY_D2H,
			layer, label);
}

/* The slot is filled: the host threads wait for it. */
static void ring_filled(ferry_model_t m, struct ferry_program *p, int slot, int layer)
{
	ferry_emit_record(p, m->opt_d2h, m->grad_slot_full[slot], layer);
	ferry_emit_wait(p, m->opt_cpu_stream, m->grad_slot_full[slot], layer);
}

/* Parameter q's AdamW over [off, off + n) from gradients at g, on a host
 * thread; early: before the norm (grad_scale 1, an undo copy first, the
 * weights up on the host stream itself). */
static void ring_adamw(ferry_model_t m, struct ferry_program *p, int q, size_t off, size_t n, int layer,
		       const float *g, bool early)
{
	struct ferry_op_call c = host_call(m, q, off, n);
	char label[56];

	c.in[0] = g;
	if (early)
		with_undo(m, q, off, &c);
	snprintf(label, sizeof(label), "%s %.40s", early ? "early adamw" : "cpu adamw", name_of(m, q));
	ferry_emit_host_adamw(p, m->opt_cpu_stream, &c, layer, label);
	if (early && !p->failed)
		p->t[p->n - 1].patch = FERRY_PATCH_ADAMW_UNCLIPPED;
	if (!early)
		ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, layer);
	upload(m, p, early ? m->opt_cpu_stream : m->opt_h2d, q, off, n, layer, &c);
}

/* Stacked parameter q's part of layer l this rank updates (split: the
 * piece in its slice), as [*off, *off + *n), *pi its info; false: none. */
static bool layer_piece(ferry_model_t m, int q, int l, struct ferry_param_info *pi, size_t *off,
			size_t *n)
{
	if (!ferry_zero_host_updated(m, q, pi) || !pi->layers)
		return false;
	*off = (size_t)l * pi->layer_numel, *n = pi->layer_numel;
	return ferry_zero_host_piece(m, q, off, n);
}

/* Layer l's slice of every stacked parameter (split: the rank's pieces of
 * it, each where the whole slice would be in the slot): down into a slot,
 * updated from it, the slot freed; none taken when the rank has no piece. */
static void ring_layer(ferry_model_t m, struct ferry_program *p, int l, bool early)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	struct ferry_param_info pi;
	size_t off, n;
	int slot = -1;

	for (int pass = 0; pass < 2; pass++) {
		for (int q = 0; q < m->md->n_params; q++) {
			if (!layer_piece(m, q, l, &pi, &off, &n))
				continue;
			if (slot < 0)
				slot = ring_take(m, p, l);
			if (pass == 0)
				ring_copy(m, p, ring_at(m, slot, ix->host_grad_slot_off[q]), q, off, n, l);
			else
				ring_adamw(m, p, q, off, n, l, ring_at(m, slot, ix->host_grad_slot_off[q]), early);
		}
		if (pass == 0 && slot >= 0)
			ring_filled(m, p, slot, l);
	}
	if (slot >= 0)
		ferry_emit_record(p, m->opt_cpu_stream, m->grad_slot_free[slot], l);
}

/* Elements [off, off + n) of unstacked parameter q through a slot (split:
 * the rank's piece of them, if any). */
static void ring_chunk(ferry_model_t m, struct ferry_program *p, int q, size_t off, size_t n)
{
	int slot;

	if (!ferry_zero_host_piece(m, q, &off, &n))
		return;
	slot = ring_take(m, p, -1);

	ring_copy(m, p, ring_at(m, slot, 0), q, off, n, -1);
	ring_filled(m, p, slot, -1);
	ring_adamw(m, p, q, off, n, -1, ring_at(m, slot, 0), false);
	ferry_emit_record(p, m->opt_cpu_stream, m->grad_slot_free[slot], -1);
}

/* The device-to-host stream waits until layer l's gradients are final on
 * the device: written, and on several ranks averaged (dp_reduce.c; ZeRO-2:
 * reduce-scattered into the slice, zero_grads.c). */
static void layer_grads_final(ferry_model_t m, struct ferry_program *p, int l)
{
	const struct ferry_table_index *ix = &m->tt.ix;

	if (!m->comm)
		ferry_emit_record(p, m->compute, m->opt_layer_grads, l);
	ferry_emit_wait(p, m->opt_d2h, !m->comm ? m->opt_layer_grads
				      : ix->grad_slice >= 0 ? m->zero_slot_free[l % ix->grad_slots] : m->dp_reduced, l);
}

/* A speculative backward's early update of layer l, once its gradients
 * are final on the device. */
static void early_from_device(ferry_model_t m, struct ferry_program *p, int l)
{
	layer_grads_final(m, p, l);
	ring_layer(m, p, l, true);
	ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, l);
}

/* Layer l's slice of every stacked parameter: undone first (REDO, UNDO),
 * then updated (FULL, REDO). */
static void layer_update(ferry_model_t m, struct ferry_program *p, int l, enum ferry_update_variant variant)
{
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;
		struct ferry_op_call c;
		size_t off, n;
		char label[56];

		if (!layer_piece(m, q, l, &pi, &off, &n))
			continue;
		if (variant == FERRY_UPDATE_REDO || variant == FERRY_UPDATE_UNDO) {
			c = host_call(m, q, off, n);
			with_undo(m, q, off, &c);
			snprintf(label, sizeof(label), "undo %.40s", pi.name);
			ferry_emit_host_restore(p, m->opt_cpu_stream, &c, l, label);
			ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, l);
			if (variant == FERRY_UPDATE_UNDO)
				upload(m, p, m->opt_h2d, q, off, n, l, &c);
		}
		if ((variant == FERRY_UPDATE_FULL || variant == FERRY_UPDATE_REDO) && !grads_on_device(m))
			cpu_slice(m, p, q, off, n, l, false);
	}
	if ((variant == FERRY_UPDATE_FULL || variant == FERRY_UPDATE_REDO) && grads_on_device(m))
		ring_layer(m, p, l, false);
}

/* The unstacked parameters, in slices of the optimizer chunk. */
static void unstacked_update(ferry_model_t m, struct ferry_program *p)
{
	const size_t chunk = grads_on_device(m) ? m->tt.ix.host_grad_slot_numel : m->tt.ix.opt_chunk;

	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (!ferry_zero_host_updated(m, q, &pi) || pi.layers)
			continue;
		for (size_t off = 0; off < pi.numel; off += chunk)
			if (grads_on_device(m))
				ring_chunk(m, p, q, off, pi.numel - off < chunk ? pi.numel - off : chunk);
			else
				cpu_slice(m, p, q, off, pi.numel - off < chunk ? pi.numel - off : chunk, -1, true);
	}
}

void ferry_emit_update_cpu(ferry_model_t m, struct ferry_program *p, enum ferry_update_variant variant)
{
	/* the layers' gradients reached the host during the backward, or
	   come down now, after every gradient is written */
	if (!grads_on_device(m)) {
		ferry_emit_wait(p, m->opt_cpu_stream, m->opt_grads_home, -1);
	} else {
		ferry_emit_record(p, m->compute, m->opt_layer_grads, -1);
		ferry_emit_wait(p, m->opt_d2h, m->opt_layer_grads, -1);
	}
	for (int l = 0; l < m->cfg.layers && variant != FERRY_UPDATE_COMMIT; l++)
		layer_update(m, p, l, variant);
	if (variant != FERRY_UPDATE_UNDO)
		unstacked_update(m, p);
	/* the next forward (its weight loads on h2d, its ops) follows every host task */
	ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, -1);
	ferry_emit_wait(p, m->opt_h2d, m->opt_host_done, -1);
	ferry_emit_record(p, m->opt_h2d, m->opt_uploaded, -1);
	ferry_emit_wait(p, m->compute, m->opt_uploaded, -1);
	if (split(m)) /* every rank's slice of the compute copy to every rank */
		ferry_zero_host_gather(m, p);
}

/* Layer l's early update, before the norm is known: grad_scale 1, with an
 * undo copy; its weights uploaded on the host stream itself. */
static void speculative_layer(ferry_model_t m, struct ferry_program *p, int l)
{
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;
		struct ferry_op_call c;
		size_t off, n;
		char label[56];

		if (!layer_piece(m, q, l, &pi, &off, &n))
			continue;
		c = host_call(m, q, off, n);
		with_undo(m, q, off, &c);
		snprintf(label, sizeof(label), "early adamw %.40s", pi.name);
		ferry_emit_host_adamw(p, m->opt_cpu_stream, &c, l, label);
		if (!p->failed)
			p->t[p->n - 1].patch = FERRY_PATCH_ADAMW_UNCLIPPED;
		upload(m, p, m->opt_cpu_stream, q, off, n, l, &c);
	}
}

void ferry_cpu_update_after_layer(void *model, struct ferry_program *p, int l)
{
	ferry_model_t m = model;
	const struct ferry_table_index *ix = &m->tt.ix;
	char label[56];

	if (grads_on_device(m)) { /* nothing goes down but a speculative layer's */
		if (m->emit_speculative)
			early_from_device(m, p, l);
		return;
	}

	if (!ferry_layers_streamed(m)) { /* else the gradient ring's copies are queued on d2h */
		layer_grads_final(m, p, l);
		for (int q = 0; q < m->md->n_params; q++) {
			struct ferry_param_info pi;
			size_t off, n;

			if (!layer_piece(m, q, l, &pi, &off, &n))
				continue;
			snprintf(label, sizeof(label), "grad: %.40s", pi.name);
			ferry_emit_copy(p, m->opt_d2h,
					ferry_zero_host_at(m, ix->host_grad, ix->host_grad_slice, q, off, sizeof(float)),
					ferry_zero_host_device_grad(m, q, off), n * sizeof(float), FERRY_COPY_D2H, l, label);
		}
	}
	/* streamed weights on several ranks: home once averaged there (or,
	 * averaged on the device, once copied) */
	ferry_emit_record(p, m->comm && ferry_layers_streamed(m) && !ferry_dp_on_device(m)
				     ? m->comm_stream : m->opt_d2h, m->opt_grads_home, l);
	if (!m->emit_speculative)
		return;
	ferry_emit_wait(p, m->opt_cpu_stream, m->opt_grads_home, l);
	speculative_layer(m, p, l);
	ferry_emit_record(p, m->opt_cpu_stream, m->opt_host_done, l);
}
