/*
 * The stream rule's emitters (weight_ring.h): one slot discipline for
 * every streamed group of weights.  A unit's slot is u % ring; a layer's
 * tasks carry its layer, a stage's none (-1).
 */
#include "exec/weight_ring.h"

#include <stdio.h>

static int layer_of(const struct ferry_weight_rings *r, int u)
{
	return r->per_stage ? -1 : u;
}

static int grad_slot(const struct ferry_weight_rings *r, int u)
{
	return u % (r->grad_ring ? r->grad_ring : r->ring);
}

static bool reads(const struct ferry_weight_rings *r, const struct ferry_weight_stream *s, int u)
{
	return !r->per_stage || s->unit == u;
}

/* Elements into a part's host arrays where unit u's start. */
static size_t host_numel(const struct ferry_weight_rings *r, const struct ferry_weight_stream *s, int u)
{
	return r->per_stage ? 0 : (size_t)u * s->numel;
}

/* Where unit u's gradient of a part is on the host: in its arrays, or
 * in the unit's host slot. */
static float *host_grad(const struct ferry_weight_rings *r, const struct ferry_weight_stream *s, int u)
{
	size_t off = r->host_grad_slots ? (size_t)(u % r->host_grad_slots) * r->host_grad_slot_numel : host_numel(r, s, u);

	return ferry_at(s->host_grad, off * sizeof(float));
}

static int ring_event(struct ferry_sched_resources *res, const char *what, const char *state,
		      const struct ferry_weight_rings *r, int slot)
{
	char name[64]; /* event names are kept to 39 characters; these fit */

	if (r->per_stage)
		snprintf(name, sizeof(name), "%s %s", what, state);
	else
		snprintf(name, sizeof(name), "%s %s [%d]", what, state, slot);
	return ferry_sched_event(res, name);
}

void ferry_weight_ring_register(struct ferry_weight_rings *r, struct ferry_sched_resources *res)
{
	for (int s = 0; s < r->ring; s++) {
		r->loaded[s] = ring_event(res, r->names->slot, "loaded", r, s);
		r->read[s] = ring_event(res, r->names->slot, "read", r, s);
		if (r->grad_ring)
			continue;
		r->written[s] = r->read[s];
		r->out[s] = ring_event(res, r->names->grads, "copied out", r, s);
	}
	for (int g = 0; g < r->grad_ring; g++) {
		r->written[g] = ring_event(res, r->names->grads, "written", r, g);
		r->out[g] = ring_event(res, r->names->grads, "copied out", r, g);
	}
}

/* This rank's part of elements [a, b) of the parameter array. */
static void part_of(const struct ferry_ring_gather *g, size_t a, size_t b, size_t *lo, size_t *hi)
{
	const size_t last = g->first + g->slice_numel;

	*lo = a > g->first ? a : g->first;
	*hi = b < last ? b : last;
}

/* Elements [a, a + n) of the array from the ranks' host slices into dst:
 * this rank's part staged up, then gathered from there. */
static void gather_staged(const struct ferry_weight_rings *r, struct ferry_program *p,
			  const struct ferry_weight_stream *s, int u, size_t a, size_t n, void *dst, const char *label)
{
	const struct ferry_ring_gather *g = r->gather;
	size_t lo, hi;
	char what[56];

	part_of(g, a, a + n, &lo, &hi);
	snprintf(what, sizeof(what), "staged %.40s", s->name);
	if (hi > lo)
		ferry_emit_copy(p, r->h2d, g->stage, ferry_at(g->slice, (lo - g->first) * r->elem), (hi - lo) * r->elem,
				FERRY_COPY_H2D, layer_of(r, u), what);
	ferry_emit_all_gather_part(p, r->h2d, g->comm, dst, g->stage, a, n, r->elem, g->slice_numel, g->status,
				   layer_of(r, u), label);
}

/* Unit u's elements of s from the ranks' slices into its slot; a host
 * slice's part staged first, in pieces the staging slot holds when it is
 * larger (an edge's parameter: a layer's part always fits). */
static void gather_unit(const struct ferry_weight_rings *r, struct ferry_program *p,
			const struct ferry_weight_stream *s, int u, const char *label)
{
	const struct ferry_ring_gather *g = r->gather;
	const size_t a = s->flat + host_numel(r, s, u), b = a + s->numel;
	char *dst = ferry_at(s->dev, (size_t)(u % r->ring) * r->slot_numel * r->elem);
	/* (the same pieces on every rank: any rank's part is at most n and S) */
	const size_t most = s->numel < g->slice_numel ? s->numel : g->slice_numel;
	const size_t piece = most <= g->stage_numel ? s->numel : g->stage_numel;

	if (!g->stage) {
		ferry_emit_all_gather_slices(p, r->h2d, g->comm, dst, g->slice, a, s->numel, r->elem, g->slice_numel,
					     g->status, layer_of(r, u), label);
		return;
	}
	for (size_t c = a; c < b; c += piece)
		gather_staged(r, p, s, u, c, b - c < piece ? b - c : piece, ferry_at(dst, (c - a) * r->elem), label);
}

void ferry_weight_ring_load(struct ferry_weight_rings *r, struct ferry_program *p, int u, bool backward)
{
	const int slot = u % r->ring, g = grad_slot(r, u), layer = layer_of(r, u);
	char label[56];

	ferry_emit_wait(p, r->h2d, r->read[slot], layer);
	if (!r->grad_ring)
		ferry_emit_wait(p, r->h2d, r->out[slot], layer);
	for (int i = 0; i < r->n; i++) {
		const struct ferry_weight_stream *s = &r->s[i];
		const size_t bytes = s->numel * r->elem, gbytes = s->numel * sizeof(float);

		if (!reads(r, s, u))
			continue;
		snprintf(label, sizeof(label), "%s: %.40s", r->names->label, s->name);
		if (r->gather)
			gather_unit(r, p, s, u, label);
		else
			ferry_emit_copy(p, r->h2d, ferry_at(s->dev, (size_t)slot * r->slot_numel * r->elem),
					ferry_at(s->host, host_numel(r, s, u) * r->elem), bytes, FERRY_COPY_H2D, layer, label);
		if (!backward || !s->grad_in)
			continue;
		snprintf(label, sizeof(label), "%s grad: %.40s", r->names->label, s->name);
		ferry_emit_copy(p, r->h2d, ferry_at(s->dev_grad, (size_t)g * r->slot_numel * sizeof(float)), host_grad(r, s, u),
				gbytes, FERRY_COPY_H2D, layer, label);
	}
	ferry_emit_record(p, r->h2d, r->loaded[slot], layer);
}

void ferry_weight_ring_acquire(struct ferry_weight_rings *r, struct ferry_program *p, int u)
{
	ferry_emit_wait(p, r->compute, r->loaded[u % r->ring], layer_of(r, u));
}

void ferry_weight_ring_release(struct ferry_weight_rings *r, struct ferry_program *p, int u)
{
	ferry_emit_record(p, r->compute, r->read[u % r->ring], layer_of(r, u));
}

void ferry_weight_ring_start_grads(struct ferry_weight_rings *r, struct ferry_program *p, int u, bool from_host)
{
	const int g = grad_slot(r, u), layer = layer_of(r, u);
	char label[56];

	if (r->grads_apart)
		return;
	if (r->grad_ring) {
		ferry_emit_wait(p, r->compute, r->out[g], layer);
		if (!from_host) {
			ferry_emit_zero(p, r->compute, ferry_at(r->grad_slot0, (size_t)g * r->slot_numel * sizeof(float)),
					r->slot_numel * sizeof(float), layer, r->names->zero);
			return;
		}
	}
	for (int i = 0; i < r->n; i++) {
		const struct ferry_weight_stream *s = &r->s[i];
		void *dev = ferry_at(s->dev_grad, (size_t)g * r->slot_numel * sizeof(float));

		if (!reads(r, s, u) || s->grad_in)
			continue;
		snprintf(label, sizeof(label), "%s grad: %.40s", r->names->label, s->name);
		if (from_host) /* its last copy out is done: the wait above, or the slot's load, waited */
			ferry_emit_copy(p, r->compute, dev, host_grad(r, s, u), s->numel * sizeof(float), FERRY_COPY_H2D,
					layer, label);
		else
			ferry_emit_zero(p, r->compute, dev, s->numel * sizeof(float), layer, label);
	}
}

float *ferry_weight_ring_dev_grad(const struct ferry_weight_rings *r, int i, int u)
{
	return ferry_at(r->s[i].dev_grad, (size_t)grad_slot(r, u) * r->slot_numel * sizeof(float));
}

void ferry_weight_ring_grads_out(struct ferry_weight_rings *r, struct ferry_program *p, int u)
{
	const int g = grad_slot(r, u), layer = layer_of(r, u);
	char label[56];

	if (r->grads_apart)
		return;
	ferry_emit_record(p, r->compute, r->written[g], layer);
	ferry_emit_wait(p, r->d2h, r->written[g], layer);
	for (int i = 0; i < r->n; i++) {
		const struct ferry_weight_stream *s = &r->s[i];

		if (!reads(r, s, u))
			continue;
		snprintf(label, sizeof(label), "grad: %.40s", s->name);
		ferry_emit_copy(p, r->d2h, host_grad(r, s, u), ferry_weight_ring_dev_grad(r, i, u), s->numel * sizeof(float),
				FERRY_COPY_D2H, layer, label);
	}
	ferry_emit_record(p, r->d2h, r->out[g], layer);
}
