/*
 * Internal: the tensor table, one entry for every tensor a training step
 * touches, and the single source of truth for sizes and placement.
 *
 * Built from a model declaration, a config, the largest batch and the
 * execution options (activation policy, prefetch depth, activation type):
 * weights, their low-precision copy, weight gradients, AdamW moments, the
 * batch, prologue/epilogue activations and their gradients, the layer
 * stack's activations as the stack plan places them (device slots, offload
 * rings, host copies) and their gradient workspace, and kernel workspace.
 *
 * Entries are carved from buffers by byte offset: one device allocation per
 * buffer, one host allocation per host buffer.  The memory plan lists the
 * buffers (ferry_tensor_table_plan), the executor allocates them
 * (ferry_tensor_table_alloc) and reads every address from the table, so the
 * measured arena peak equals the plan by construction, and a test checks it.
 */
#ifndef FERRY_PLAN_TENSOR_TABLE_H
#define FERRY_PLAN_TENSOR_TABLE_H

#include "ferry/plan.h"
#include "models/model_table.h"
#include "plan/stack_plan.h"

enum ferry_site {
	FERRY_SITE_DEVICE,
	FERRY_SITE_HOST, /* host memory; tier 0 = DRAM, pinned where possible */
};

struct ferry_tensor_entry {
	char name[64];
	enum ferry_tensor_kind kind;
	int layer;                 /* -1: not per layer (or all layers stacked) */
	enum ferry_dtype dtype;
	size_t bytes;              /* all slots or layers it holds */
	enum ferry_site site;
	int host_tier;
	enum ferry_placement act;  /* activations: kept, offloaded or recomputed */
	enum ferry_place_group group; /* whose placement put it here (ferry/place.h) */
	int rollback;              /* a speculative update's: the entry holding the
				      copy it is rolled back from, -1: none */
	size_t rollback_off;       /* bytes into that entry where its copy starts */
	int buffer;                /* the buffer it is carved from */
	size_t offset;             /* bytes into that buffer */
};

struct ferry_table_buffer {
	char name[FERRY_PLAN_NAME_CHARS]; /* as the plan's buffer (ferry/plan.h) */
	enum ferry_site site;
	enum ferry_buffer_kind mem; /* device buffers: JAX's classification */
	enum ferry_tensor_kind kind;
	size_t bytes;
	bool pinned;                /* host buffers: carved from the pinned pool */
};

#define FERRY_TABLE_MAX_BUFFERS 56

/* The stages, the units of the edges' ring. */
enum { FERRY_EDGE_PROLOGUE, FERRY_EDGE_EPILOGUE, FERRY_EDGE_STAGES };

/* A weight group placed on the host and streamed (host:stream): the
 * device slots its parameters pass through, unit by unit (the stream rule,
 * src/exec/weight_ring.h).  The layers' units are the stack's layers,
 * every one reading all stacked parameters (one layout), layer l in slot
 * l % slots; the edges' are the stages, each reading its own parameters
 * (a layout each, FERRY_EDGE_PROLOGUE and _EPILOGUE, overlapping), in one
 * slot their gradients share.  Layout k holds parameter q's compute copy at element
 * off[q] of entry w[k][q] and its gradient at element off[q] of entry
 * g[k][q] (-1: its units do not read q); slot s is s * slot_numel
 * elements further into both. */
struct ferry_table_ring {
	int slots;                  /* 0: the group is not streamed */
	int grad_slots;             /* 0: the gradients share the weights' slot */
	int n_layouts;              /* 1: every unit reads alike; else one per unit */
	int buffer;                 /* the first buffer it is carved from, -1: none */
	size_t slot_numel;
	size_t off[FERRY_MODEL_MAX_PARAMS];
	int w[FERRY_EDGE_STAGES][FERRY_MODEL_MAX_PARAMS];
	int g[FERRY_EDGE_STAGES][FERRY_MODEL_MAX_PARAMS];
};

/* Entry indices the executor looks up by role. */
struct ferry_table_index {
	int param[FERRY_MODEL_MAX_PARAMS];      /* -1 when absent (tied) */
	int grad[FERRY_MODEL_MAX_PARAMS];
	int copy[FERRY_MODEL_MAX_PARAMS];       /* -1 without a compute copy */
	int mom[FERRY_MODEL_MAX_PARAMS], var[FERRY_MODEL_MAX_PARAMS];
	int prologue[FERRY_LAYER_MAX_TENSORS], prologue_grad[FERRY_LAYER_MAX_TENSORS];
	int epilogue[FERRY_LAYER_MAX_TENSORS], epilogue_grad[FERRY_LAYER_MAX_TENSORS];
	int stack_act[FERRY_LAYER_MAX_TENSORS]; /* device slots of each layer tensor */
	int stack_host[FERRY_LAYER_MAX_TENSORS];/* host copies of offloaded ones */
	int stack_grad;                         /* the activation-gradient workspace */
	int grad_norm;
	int positions;                          /* packed documents: [B, T] int32; -1: none */
	int workspace;                          /* kernel scratch; -1: none needed */
	int params_buffer, grads_buffer, mom_buffer, var_buffer, copy_buffer;
	int opt_ring;                           /* adam=host:stream: the device ring, -1: none */
	size_t opt_chunk;                       /* floats per slice of a ring slot's array */
	int host_grad[FERRY_MODEL_MAX_PARAMS];  /* adam=host:cpu: gradients on the host */
	int host_copy[FERRY_MODEL_MAX_PARAMS];  /* adam on the host, bf16: the update's bf16 result, -1: none */
	int host_copy_buffer;                   /* their buffer, -1: none */
	/* layers.weights=host:stream: grad[q] and param[q] are host entries
	 * (the parameter array's layout); the stacked parameters pass through
	 * the layers' ring, the unstacked ones (embedding, head, final norm)
	 * keep a device copy (copy[q]) and device gradients (dev_grad[q]),
	 * or with edges.weights=host:stream pass through the edges' ring */
	struct ferry_table_ring ring[FERRY_GROUP_COUNT]; /* by group (adam=host:stream's is opt_ring) */
	int dev_grad[FERRY_MODEL_MAX_PARAMS];   /* unstacked parameters' device gradients, -1: none */
	int dev_grad_buffer;                    /* their buffer, -1: none */
	/* adam=device:shard(N): no mom[q], var[q]; this rank's slice of each
	 * moment (shard_numel elements of the parameter array from rank *
	 * shard_numel), and the parameter array and its compute copy padded
	 * to N slices (0: not split); adam=host:cpu:shard(N) with
	 * layers.weights=host:stream: the host's, its parameters and their
	 * bf16 copy whole, padded so */
	int mom_slice, var_slice;
	size_t shard_numel;
	/* adam=host:cpu:shard(N), host:stream:shard(N): on the host also this
	 * rank's slice of the master weights and (cpu) of the gradients and
	 * (bf16) of the update's result, no host entries per parameter
	 * (param[q] is the device compute copy, whole, padded to N slices;
	 * -1 otherwise) */
	int host_param_slice, host_grad_slice, host_copy_slice;
	/* adam=device:shard(N,grads) (ZeRO-2): no grad[q]; this rank's slice
	 * of the gradient array (entry grad_slice, shard_numel elements), the
	 * stacked parameters' gradients one layer at a time in grad_slots
	 * slots (entry grad_ring, slot s grad_slot_numel * s elements on,
	 * parameter q at element grad_slot_off[q] of it), the unstacked ones
	 * whole in dev_grad[q] (-1, 0: not split).  With layers.weights=
	 * host:stream (adam=host:cpu:shard(N,grads)) grad_slice is -1: the
	 * slice is host_grad_slice, the slots (grad_ring) are on the host,
	 * where the weight ring sends a layer's gradients, and grad[q] are
	 * the unstacked parameters' host gradients, whole */
	int grad_slice, grad_ring, grad_slots;
	size_t grad_slot_numel, grad_slot_off[FERRY_MODEL_MAX_PARAMS];
	/* adam=device:shard(N,params) (ZeRO-3): no param[q]; this rank's
	 * slice of the parameter array (entry param_slice, in params_buffer:
	 * fp32 master weights, or with AdamW on host threads the compute
	 * copy), and of the compute copy, in the kernels' type, which the
	 * gathers read (entry copy_slice: param_slice itself when that is of
	 * the kernels' type); the stacked parameters one layer at a time in
	 * the slots of ring[FERRY_GROUP_LAYER_WEIGHTS] (the gradient slots'
	 * layout), the unstacked ones whole in copy[q], both in the kernels'
	 * type (-1: not split).  With the layers' weights on the host too
	 * (host:cpu:shard(N,params) with layers.weights=host:stream,
	 * --offload-params) the slice is on the host (param_slice is
	 * host_param_slice; copy_slice too in fp32, in bf16 host_copy_slice,
	 * the update's result), and each layer's part of a parameter in
	 * copy_slice goes up into the device slot param_stage before that
	 * layer's gather (-1: none) */
	int param_slice, param_stage, copy_slice;
	/* adam.grads=device:stream(D): no host_grad[q] (split: no
	 * host_grad_slice); the host ring the device's gradients come down
	 * through (entry host_grad_ring, -1: none), host_grad_slots slots of
	 * host_grad_slot_numel floats, a layer's slice of stacked parameter q
	 * (split: the rank's piece of it) at element host_grad_slot_off[q] of
	 * a slot (an unstacked parameter: a slot's worth at a time) */
	int host_grad_ring, host_grad_slots;
	size_t host_grad_slot_numel, host_grad_slot_off[FERRY_MODEL_MAX_PARAMS];
};

struct ferry_tensor_table {
	const struct ferry_model_decl *md;
	struct ferry_model_config cfg;
	struct ferry_dims dims;       /* at the largest batch */
	enum ferry_dtype act_dtype;
	struct ferry_places place;    /* every group's placement: what the table is built from */
	struct ferry_stack_plan sp;
	char policy[256];             /* the activation policy as shown (truncated) */
	size_t n_params;              /* floats in the parameter array */
	int n, cap;
	struct ferry_tensor_entry *e;
	int n_buffers;
	struct ferry_table_buffer buffers[FERRY_TABLE_MAX_BUFFERS];
	struct ferry_table_index ix;
	struct ferry_host_tiers *host_tiers; /* opts->host_tiers: host buffers' tiers */
	size_t pinned_limit;          /* the limit applied (opts, or the default) */
	size_t pinned_bytes, pageable_bytes; /* host buffers, by where they come from */
	size_t host_alloc_bytes;      /* what allocating them takes: the pool, each other
					 buffer rounded up to a page (on tiers: as asked) */
	bool over_pinned_limit;       /* some copied buffer is pageable for it */
	struct ferry_row_tiles loss;  /* place.loss_tile > 0: the epilogue's head and loss
					 run tile by tile; its inner tensors (the logits)
					 have place.loss_tile rows */
};

/* Group g's placement. */
static inline const struct ferry_place *ferry_table_place(const struct ferry_tensor_table *tt,
							  enum ferry_place_group g)
{
	return &tt->place.group[g];
}

/* Whether group g streams through device rings from the host, whole
 * parameters copied in (weight_ring.h).  ZeRO-3's layers on the host
 * (adam=...:shard(N,params) with layers.weights=host:stream) do not: they
 * are gathered from the ranks' host slices through ZeRO-3's ring
 * (ix.param_stage). */
static inline bool ferry_table_streamed(const struct ferry_tensor_table *tt, enum ferry_place_group g)
{
	return tt->place.group[g].access == FERRY_ACCESS_STREAM &&
	       !(g == FERRY_GROUP_LAYER_WEIGHTS && tt->place.group[FERRY_GROUP_ADAM].shard_params);
}

/* Whether AdamW runs on host threads (adam=host:cpu). */
static inline bool ferry_table_host_update(const struct ferry_tensor_table *tt)
{
	return tt->place.group[FERRY_GROUP_ADAM].update == FERRY_UPDATE_HOST;
}

/* Builds the table of cfg's model (completed with
 * ferry_model_config_complete) for batches of up to B x T.  Errors: a bad
 * shape or policy, sizes that overflow, out of host memory. */
ferry_status ferry_tensor_table_build(const struct ferry_model_config *cfg, int B, int T,
				      const struct ferry_exec_opts *opts,
				      struct ferry_tensor_table *tt) FERRY_MUST_CHECK;
void ferry_tensor_table_release(struct ferry_tensor_table *tt);

/* The memory plan: the device buffers in allocation order, each
 * activation's placement, bytes by kind on the device and the host. */
/* One layer's host bytes of offloaded activations when they are one
 * tensor per layer, from the host buffer's start (spreadable over host
 * tiers layer by layer); else 0. */
size_t ferry_tensor_table_act_unit(const struct ferry_tensor_table *tt);
ferry_status ferry_tensor_table_plan(const struct ferry_tensor_table *tt, struct ferry_plan *plan)
	FERRY_MUST_CHECK;

/* The table's buffers, allocated on a backend: the pinned host buffers
 * carved from one pool (ferry_host_alloc), the others pageable. */
struct ferry_table_alloc {
	ferry_backend_t be;
	struct ferry_host_tiers *tiers; /* the host buffers' (NULL: the backend's) */
	int n;
	ferry_buffer_t dev[FERRY_TABLE_MAX_BUFFERS];
	void *host[FERRY_TABLE_MAX_BUFFERS];
	bool in_pool[FERRY_TABLE_MAX_BUFFERS];
	void *pool;                   /* NULL: none (nothing to pin, or it failed) */
	size_t pool_bytes;
	bool pool_failed;             /* the pool could not be had: all pageable */
	bool pool_pageable;           /* the backend gave it, but not pinned */
	size_t host_bytes;            /* host bytes the allocations got (the pool, each
					 other buffer as allocated): measured, for the plan's
					 host_alloc_bytes */
};

/* Allocates every buffer in table order (device buffers from the arena,
 * host buffers pinned where the backend can, or on their host tiers,
 * placed first: a tier too small fails before anything is allocated). */
ferry_status ferry_tensor_table_alloc(const struct ferry_tensor_table *tt, ferry_backend_t be,
				      struct ferry_table_alloc *a) FERRY_MUST_CHECK;
void ferry_tensor_table_free(struct ferry_table_alloc *a);

/* The address of entry i (NULL for i < 0). */
void *ferry_tensor_ptr(const struct ferry_tensor_table *tt, const struct ferry_table_alloc *a, int i);

#endif
