/*
 * Internal: where each tensor of a layer stack lives under a policy.
 *
 * From the op table and the placements the planner derives:
 *  - needed: tensors the backward pass reads, plus the inputs of the ops it
 *    must re-run because something it reads was not kept (the smallest
 *    closure back to what is kept; the layer input is always kept);
 *  - stored: needed tensors the policy keeps (device or host);
 *  - recompute_ops: ops re-run in the backward pass, in forward order;
 *  - element types: statistics (per-row, per-head) are fp32, every other
 *    activation is the backend's activation type (bf16 on CUDA);
 *  - device storage: a kept-on-device tensor has one slot per layer; an
 *    offloaded one a ring of `ring` slots (staging in forward, prefetch in
 *    backward); everything else one slot shared by all layers.  The layer
 *    input has L+1 slots on the device, or ring + 1 when offloaded (the
 *    extra slot holds the last layer's output for the epilogue).
 */
#ifndef FERRY_PLAN_STACK_PLAN_H
#define FERRY_PLAN_STACK_PLAN_H

#include "ferry/plan.h"
#include "graph/layer.h"
#include "graph/row_tiles.h"

enum ferry_slot_kind {
	FERRY_SLOT_NONE,      /* the layer output: it is the next layer's input */
	FERRY_SLOT_SHARED,    /* one slot for all layers */
	FERRY_SLOT_PER_LAYER, /* one slot per layer */
	FERRY_SLOT_RING,      /* ring of offload staging / prefetch slots */
	FERRY_SLOT_INPUT,     /* the layer input: L+1 slots, or ring + 1 */
};

struct ferry_stack_plan {
	int n_tensors, n_ops, L;
	int depth, ring;
	enum ferry_placement place[FERRY_LAYER_MAX_TENSORS];
	unsigned residuals, needed, stored, offloaded, has_grad;
	unsigned recompute_ops;
	bool input_offloaded;
	enum ferry_slot_kind kind[FERRY_LAYER_MAX_TENSORS];
	int slots[FERRY_LAYER_MAX_TENSORS];
	/* Set by the caller, for an input kept on the device only: slot 0 of
	 * the layer input is the caller's buffer (the stack reads its
	 * argument in place), so the stack's own storage of it is one slot
	 * smaller (ferry_stack_storage_slots). */
	bool input_in_place;
	enum ferry_dtype act_dtype;
	size_t elem[FERRY_LAYER_MAX_TENSORS];       /* bytes per element */
	size_t slot_bytes[FERRY_LAYER_MAX_TENSORS]; /* aligned to 256 bytes */
	size_t host_bytes[FERRY_LAYER_MAX_TENSORS]; /* per layer, offloaded only */
	/* Set by the caller: the host copies laid out layer by layer, layer l's
	 * tensor t at l * host_stride + host_off[t] from the first's (0:
	 * tensor by tensor, tensor t's layer l at l * host_bytes[t]) */
	size_t host_stride, host_off[FERRY_LAYER_MAX_TENSORS];
	size_t grad_bytes;                          /* activation gradient workspace */
	/* The workspace: the layer input's and output's gradients alternate in
	 * its first two slots; every other gradient lives from the backward of
	 * its last reader (where it is zeroed: grad_zero_op) to the backward of
	 * its producer, and gradients whose lives do not meet share bytes
	 * (grad_off: its offset in the workspace). */
	size_t grad_off[FERRY_LAYER_MAX_TENSORS];
	int grad_zero_op[FERRY_LAYER_MAX_TENSORS];
	/* The input of a bwd_in_place op (GELU) that only it reads, not the
	 * layer input, the shape of its output: its gradient is that output's
	 * gradient's bytes, which the op's backward overwrites element by
	 * element (grad_assign_ops), so it has no bytes and no zeroing of its
	 * own.  grad_alias: the tensor whose gradient bytes t's are (the end
	 * of a chain of such ops; maybe the layer output), or -1. */
	int grad_alias[FERRY_LAYER_MAX_TENSORS];
	unsigned grad_assign_ops;
	/* The second of the two alternating input/output gradient buffers is
	 * the stack's last-output slot rather than workspace bytes: that slot
	 * is dead once the epilogue's backward has read it, and the last
	 * layer's backward writes its input gradient there first.  Set when no
	 * backward op of the layer reads the layer output (else the slot is
	 * still read while the gradient is written). */
	bool io_grad_in_last_output;
	/* --mlp-tile: the MLP's ops (tiles.first..last) run over tiles of
	 * tile_rows tokens (0: untiled), in forward and again, each tile's
	 * hidden activations recomputed first, in backward.  Its inner tensors
	 * (graph/row_tiles.h) and their gradients have one tile's rows, in a
	 * shared slot; they are placed remat whatever the policy said.  Their
	 * gradients' lives are the whole run's, so no other gradient meets
	 * them.  tile_refill: an output of the run that backward reads is
	 * recomputed too, so the whole run goes again, tile by tile, where
	 * backward_prepare recomputes in forward order. */
	int tile_rows;
	struct ferry_row_tiles tiles;
	bool tile_refill;
	/* Offloaded activations over host tiers with a depth per tier (set
	 * by the caller, who knows the tiers): layers [tier_end[i - 1],
	 * tier_end[i]) are on tier i and loaded tier_depth[i] layers ahead,
	 * the deepest of which is `depth`, which the ring holds.  n_tier_depths 0: every
	 * layer `depth` ahead. */
	int n_tier_depths;
	int tier_depth[FERRY_PREFETCH_TIERS], tier_end[FERRY_PREFETCH_TIERS];
};

/* The first offloaded tensor (its host copy starts the host buffer). */
static inline int ferry_stack_first_offloaded(const struct ferry_stack_plan *sp)
{
	return sp->offloaded ? __builtin_ctz(sp->offloaded) : -1;
}

/* How many layers ahead of its backward layer l's offloaded tensors are
 * loaded. */
static inline int ferry_stack_layer_depth(const struct ferry_stack_plan *sp, int l)
{
	for (int i = 0; i < sp->n_tier_depths; i++)
		if (l < sp->tier_end[i])
			return sp->tier_depth[i];
	return sp->depth;
}

/* Whether op o runs tile by tile. */
static inline bool ferry_stack_tiled_op(const struct ferry_stack_plan *sp, int o)
{
	return sp->tile_rows && o >= sp->tiles.first && o <= sp->tiles.last;
}

/* Places the layer's tensors by the policy spec and derives the rest.
 * Errors: a bad policy (the message says why), depth < 1, a tensor whose
 * size overflows. */
ferry_status ferry_stack_plan_make(const struct ferry_layer_decl *decl,
				   const struct ferry_dims *dims,
				   const struct ferry_exec_opts *opts,
				   struct ferry_stack_plan *out) FERRY_MUST_CHECK;

/* Slots of tensor t in the stack's own device storage. */
int ferry_stack_storage_slots(const struct ferry_stack_plan *sp, int t);

/* Describes each of the layer's tensors (placement, bytes per layer,
 * device slots, host bytes) in plan->tensors. */
void ferry_stack_plan_describe(const struct ferry_stack_plan *sp,
			       const struct ferry_layer_decl *decl,
			       const struct ferry_dims *dims, struct ferry_plan *plan);

/* Adds one device buffer to a plan (bytes rounded up to the arena's
 * alignment). */
void ferry_plan_add_buffer(struct ferry_plan *plan, const char *name,
			   enum ferry_buffer_kind kind, enum ferry_tensor_kind tensor_kind,
			   size_t bytes);
/* Sums the buffers into plan->mem (host bytes by kind are the caller's);
 * refuses a plan whose buffer list overflowed. */
ferry_status ferry_plan_finish(struct ferry_plan *plan) FERRY_MUST_CHECK;

/* Layers a stack may have: slot counts (L + 1) and per-layer loops are int. */
#define FERRY_MAX_LAYERS (1 << 20)

#endif
