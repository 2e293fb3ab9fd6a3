/*
 * Internal: the stream rule, how a group of weights placed on the host and
 * streamed (ferry/place.h: host:stream) reaches the kernels.  The group's
 * parameters pass through device slots unit by unit: loaded on the
 * host-to-device stream once the slot's last reader is done, read by the
 * compute stream, their gradients zeroed (or, for a later micro-batch,
 * brought back from the host) before the unit's backward and sent to the
 * host on the device-to-host stream after it.
 *
 * Units are the stack's layers (layers.weights: every layer reads every
 * stacked parameter, layer l in slot l % ring, `depth` layers loaded ahead;
 * the gradients in a ring of their own) or the stages (edges.weights: the
 * prologue and the epilogue, each its own parameters, in one slot that
 * their gradients share).  These emitters are the rule; the callers say
 * when each unit moves (engine.c for the layers, build.c for the stages).
 * With ZeRO-3 the layers' ring loads by all-gathering the ranks' slices of
 * the parameters instead (struct ferry_ring_gather, zero_params.c).
 */
#ifndef FERRY_EXEC_WEIGHT_RING_H
#define FERRY_EXEC_WEIGHT_RING_H

#include "graph/model_decl.h"
#include "sched/schedule.h"

#define FERRY_WEIGHT_RING_MAX 65
#define FERRY_WEIGHT_RING_PARTS (2 * FERRY_MODEL_MAX_PARAMS) /* every parameter, read by two stages */

/* One parameter as a unit reads it. */
struct ferry_weight_stream {
	const char *name;
	const void *host;     /* its weights, in the kernel type (units that are
				 layers: layer 0's, layer l's l * numel elements on) */
	float *host_grad;     /* its gradient (layer l's l * numel elements on) */
	void *dev;            /* the weights in slot 0 */
	float *dev_grad;      /* the gradient in (gradient) slot 0 */
	size_t numel;         /* one unit's elements */
	int unit;             /* units that are stages: the stage that reads it */
	bool grad_in;         /* units that are stages: an earlier unit of the
				 backward sent this gradient to the host, so it
				 comes back with the weights and accumulates */
	size_t flat;          /* gathered rings: unit 0's first element in the
				 parameter array */
};

/* A ring loaded by gathering the ranks' slices of the parameter array
 * (ZeRO-3) instead of copying from the host: on its "h2d" stream, the
 * comm stream, each unit's elements of each parameter all-gathered from
 * `slice` (this rank's compute copy, `slice_numel` elements a rank, of
 * the ring's element size) into the slot.  With `stage` (the slice in
 * host memory: --offload-params) this rank's part is first copied up into
 * that device slot, on the same stream, and gathered from there (in
 * pieces of the slot's size where a rank's part may not fit: an edge's
 * parameter): the stream's order frees the slot for the next. */
struct ferry_ring_gather {
	struct ferry_comm *comm;
	const void *slice;
	size_t slice_numel;
	ferry_status *status;
	void *stage;          /* NULL: the slice is on the device */
	size_t stage_numel;   /* the staging slot's elements */
	size_t first;         /* the slice's first element in the parameter array */
};

/* What the schedule calls a ring's slots, gradients and copies. */
struct ferry_ring_names {
	const char *slot;     /* events "<slot> loaded", "<slot> read" */
	const char *grads;    /* events "<grads> written", "<grads> copied out" */
	const char *label;    /* copies "<label>: NAME", "<label> grad: NAME" */
	const char *zero;     /* a gradient ring's slot, zeroed whole */
};

struct ferry_weight_rings {
	int ring;             /* weight slots */
	int grad_ring;        /* gradient slots; 0: in the weights' slot */
	size_t slot_numel;    /* elements from one slot to the next */
	size_t elem;          /* bytes per weight element */
	float *grad_slot0;    /* a gradient ring's first slot */
	bool per_stage;       /* units are stages (parts name theirs), not layers */
	const struct ferry_ring_gather *gather; /* NULL: loaded by copies */
	bool grads_apart;     /* the gradients are not the ring's (the engine's
				 gradient slots): start_grads, grads_out do nothing */
	int host_grad_slots;  /* 0: the host's gradients are whole arrays; else
				 unit u's are in host slot u % host_grad_slots,
				 host_grad_slot_numel elements apart (ZeRO-2) */
	size_t host_grad_slot_numel;
	const struct ferry_ring_names *names;
	int n;
	struct ferry_weight_stream s[FERRY_WEIGHT_RING_PARTS];
	/* streams, and per slot the events (ferry_weight_ring_register) */
	int compute, h2d, d2h;
	int loaded[FERRY_WEIGHT_RING_MAX], read[FERRY_WEIGHT_RING_MAX];
	int written[FERRY_WEIGHT_RING_MAX], out[FERRY_WEIGHT_RING_MAX];
};

/* The ring's events, in its streams' resources (r->compute, h2d, d2h
 * already set); per weight slot "loaded" and "read", per gradient slot
 * "written" and "copied out" (in a shared slot "read" is "written"). */
void ferry_weight_ring_register(struct ferry_weight_rings *r, struct ferry_sched_resources *res);

/* Unit u's weights into its slot once the slot's last reader (and, in a
 * shared slot, its last gradient copy-out) is done; in backward also the
 * gradients that come back in. */
void ferry_weight_ring_load(struct ferry_weight_rings *r, struct ferry_program *p, int u, bool backward);
/* The compute stream waits for unit u's load. */
void ferry_weight_ring_acquire(struct ferry_weight_rings *r, struct ferry_program *p, int u);
/* Unit u's slot read for the last time on the compute stream. */
void ferry_weight_ring_release(struct ferry_weight_rings *r, struct ferry_program *p, int u);
/* Before unit u's backward: its gradients from zero (a gradient ring's
 * slot whole, once copied out; in a shared slot each gradient not
 * brought in), or from_host, from the host's (an earlier backward's since
 * they were zeroed: micro-batches add up there), on the compute stream. */
void ferry_weight_ring_start_grads(struct ferry_weight_rings *r, struct ferry_program *p, int u, bool from_host);
/* Where part i's gradient of unit u is on the device (its gradient slot). */
float *ferry_weight_ring_dev_grad(const struct ferry_weight_rings *r, int i, int u);
/* After unit u's backward: its gradients written (in a shared slot, the
 * slot read), then copied to the host on the device-to-host stream. */
void ferry_weight_ring_grads_out(struct ferry_weight_rings *r, struct ferry_program *p, int u);

#endif
