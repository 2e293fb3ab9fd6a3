/*
 * Memory plans: before step 1, exactly how much device and host memory a
 * configuration needs, in the terms of JAX's Compiled.memory_analysis.
 *
 * A plan lists every device buffer a model will allocate, each classified:
 *   argument  inputs of a step that it does not update (the batch; the
 *             weights when only gradients are computed);
 *   donated   arguments updated in place (weights, optimizer state): each
 *             counts as an argument, as an output, and as an alias;
 *   output    results that are not arguments (the losses; gradients when
 *             they are the result);
 *   temp      everything else (activations, gradients, workspace).
 * total = argument + output + temp - alias, as JAX computes it.  peak is the
 * high-water mark of live device bytes over a step; ferry allocates every
 * buffer before step 1 and nothing inside a step, so the peak equals the
 * sum of the buffers, and the backend's arena measures it independently.
 * Sizes are rounded up to the arena's 256-byte alignment, as allocated.
 */
#ifndef FERRY_PLAN_H
#define FERRY_PLAN_H

#include <stdbool.h>
#include "ferry/ferry.h"
#include "ferry/policy.h"
#include "ferry/backend.h"
#include "ferry/place.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_PLAN_MAX_TENSORS 32
#define FERRY_PLAN_MAX_BUFFERS 48
/* Bytes of a buffer's or an activation's name, with its NUL. */
#define FERRY_PLAN_NAME_CHARS 48
/* A plan whose tensors add up to more (4 EiB, 2^62 bytes) is refused: no
 * machine has it, and every total of a plan's bytes then fits 64 bits. */
#define FERRY_PLAN_MAX_BYTES ((uint64_t)1 << 62)

enum ferry_buffer_kind {
	FERRY_BUF_ARGUMENT,
	FERRY_BUF_DONATED,
	FERRY_BUF_OUTPUT,
	FERRY_BUF_TEMP,
};

/* What a training tensor is (the tensor table's kinds; `ferry plan` sums
 * device and host bytes by kind). */
enum ferry_tensor_kind {
	FERRY_TK_WEIGHT,      /* fp32 master weights */
	FERRY_TK_WEIGHT_COPY, /* their low-precision copy, what kernels read */
	FERRY_TK_GRAD,        /* weight gradients (fp32) */
	FERRY_TK_OPT_STATE,   /* AdamW moments */
	FERRY_TK_ACTIVATION,  /* layer, prologue and epilogue activations, logits */
	FERRY_TK_ACT_GRAD,    /* activation gradients */
	FERRY_TK_BATCH,       /* token ids, targets (and positions) */
	FERRY_TK_LOSS,        /* per-row losses */
	FERRY_TK_WORKSPACE,   /* kernel scratch, the gradient norm */
	FERRY_TK_COUNT
};

const char *ferry_tensor_kind_name(enum ferry_tensor_kind kind);

struct ferry_plan_buffer {
	char name[FERRY_PLAN_NAME_CHARS];
	enum ferry_buffer_kind kind;
	enum ferry_tensor_kind tensor_kind;
	size_t bytes;
};

/* One named activation of the layer. */
struct ferry_plan_tensor {
	char name[FERRY_PLAN_NAME_CHARS];
	enum ferry_placement placement; /* what the policy asked */
	bool needed;          /* read by the backward pass or a recomputation */
	bool stored;          /* kept from forward to backward (device or host) */
	bool recomputed;      /* produced again in the backward pass */
	bool tiled;           /* inside the tiled MLP: one tile's rows, recomputed per tile */
	size_t layer_bytes;   /* bytes of one layer's tensor */
	int device_slots;     /* device copies: L (kept), a ring (offloaded), 1 (shared) */
	size_t device_bytes;  /* all its device slots */
	size_t host_bytes;    /* L layers on the host (offloaded) */
};

struct ferry_memory_analysis {
	size_t argument_bytes, output_bytes, alias_bytes, temp_bytes;
	size_t total_bytes, peak_bytes;
	size_t host_activation_bytes; /* offloaded activations, all layers */
	size_t host_total_bytes;
	size_t host_pinned_bytes;   /* host buffers carved from the one pinned pool */
	size_t host_pageable_bytes; /* the rest: past pinned_limit, or never copied
				       (AdamW's moments on host threads, undo copies) */
	size_t pinned_limit;        /* the limit applied */
	size_t host_alloc_bytes;    /* the host memory the model's buffers take as allocated:
				       the pinned pool, and each other buffer rounded up to
				       a 4 KiB page (on host tiers, each buffer's bytes);
				       what a rank's host_bytes measures
				       (ferry_model_host_memory) */
	size_t device_kind_bytes[FERRY_TK_COUNT]; /* device bytes by tensor kind */
	size_t host_kind_bytes[FERRY_TK_COUNT];   /* host bytes by tensor kind */
	size_t host_act_unit; /* one layer's offloaded activations, when they are one
				 tensor per layer (they may then span host tiers); else 0 */
};

struct ferry_plan {
	char model[32];
	char policy[256];
	char place[FERRY_PLACE_CHARS]; /* every group's placement (ferry/place.h): --place
					  given this reproduces the plan */
	enum ferry_dtype act_dtype;
	int B, T, L;
	int n_table_entries;  /* tensors in the model's tensor table */
	int prefetch_depth;   /* layers prefetched ahead in backward (per tier: the deepest) */
	int n_tier_prefetch;  /* offloaded activations over host tiers with a depth per
				 tier: how many tiers (0: one depth) */
	int tier_prefetch[FERRY_PREFETCH_TIERS]; /* each tier's depth, in the span's order */
	int tier_layers[FERRY_PREFETCH_TIERS]; /* the layers on each tier */
	int ring_slots;       /* device slots per offloaded tensor */
	int param_ring_slots; /* --offload-params: the weight ring's slots (0: off) */
	size_t edge_bytes;    /* --offload-embeddings: the edge region (0: off) */
	int64_t edge_saved_bytes; /* the device copies and gradients of the unstacked
				     parameters it replaces, less its size (below 0
				     when its entries' alignment costs more) */
	int mlp_tile;         /* tokens per MLP tile (0: untiled) */
	int loss_tile;        /* tokens per tile of the LM head and loss (0: untiled) */
	int n_tensors;
	struct ferry_plan_tensor tensors[FERRY_PLAN_MAX_TENSORS];
	int n_recompute_ops;  /* ops of a layer re-run in backward */
	int n_ops;
	int n_buffers;
	struct ferry_plan_buffer buffers[FERRY_PLAN_MAX_BUFFERS];
	bool too_many_buffers; /* a model bug; the plan functions refuse it */
	struct ferry_memory_analysis mem;
};

const char *ferry_buffer_kind_name(enum ferry_buffer_kind kind);

/* Where AdamW's state (fp32 master weights and both moments) lives. */
enum ferry_optim_place {
	FERRY_OPTIM_DEVICE, /* in device memory (the default) */
	FERRY_OPTIM_STREAM, /* in host memory: each slice (a layer, or a chunk that size) passes
			       through a two-slot device ring for its update, while the device
			       keeps only the weights the kernels read */
	FERRY_OPTIM_CPU,    /* in host memory, updated there by host threads (the fused CPU
			       AdamW): each slice's gradients come to the host, its updated
			       weights go back to the device's compute copy */
};

/* When AdamW on host threads (FERRY_OPTIM_CPU) updates a layer, given
 * that clipping by the global norm needs every gradient first. */
enum ferry_clip_order {
	FERRY_CLIP_EXACT,       /* after the norm: every update waits for the backward */
	FERRY_CLIP_SPECULATIVE, /* each layer as soon as its gradients are on the host,
				   assuming no clipping, with an undo copy of its state;
				   a step whose norm then needs clipping (or is not
				   finite) is undone and redone (or only undone):
				   the same bits either way (ferry_model_step_speculate) */
};

/* Options for building a model's executor: the policy and the prefetch depth. */
struct ferry_exec_opts {
	const char *policy;     /* NULL: everything_saveable */
	int prefetch_depth;     /* 0: default (2); FERRY_PREFETCH_AUTO (ferry/place.h):
				   per tier, resolved by ferry_prefetch_auto first */
	enum ferry_optim_place optimizer; /* --offload-optimizer */
	bool offload_params;    /* --offload-params: the layers' weights live on the host
				   and pass through a device ring (prefetched param_prefetch
				   layers ahead, in forward and again in backward), their
				   gradients go to the host as each layer's backward ends;
				   the optimizer must be stream or cpu */
	int param_prefetch;     /* 0: default (1); the ring has min(N + 1, L) slots */
	bool offload_embeddings; /* --offload-embeddings, with offload_params: the
				   unstacked parameters (embeddings, head, final norm)
				   live on the host too, loaded into one device edge
				   region before the stage that reads them (prologue,
				   epilogue; the epilogue's kept for its backward), their
				   gradients copied to the host after that stage's
				   backward (the size of the larger stage's weights and
				   gradients on the device instead of all of them) */
	enum ferry_clip_order clip_order; /* --clip-order, with optimizer cpu */
	int device_grads;       /* --device-grads, with optimizer cpu: 0, a host copy of
				   every gradient; D (1 to 15), the gradients stay on the
				   device and the host threads read them through a ring
				   of D + 1 host slots, each a layer's slice of every
				   stacked parameter (adam.grads=device:stream(D)) */
	size_t pinned_limit;    /* --pinned-limit: host buffers that copies read or write
				   come from one pinned pool (pinned where the backend can)
				   of at most this many bytes, offloaded activations first;
				   past it the rest are pageable.  0: half the memory
				   ferry_memory_limit reports */
	enum ferry_dtype act_dtype; /* the backend's (ferry_backend_act_dtype) */
	const char *backend;    /* whose kernels run it, for their scratch
				   (NULL: none needed, as on the CPU) */
	struct ferry_host_tiers *host_tiers; /* where host state lives (ferry/tier.h;
						NULL: the backend's host memory) */
	const char *place;      /* --place: placements written down (ferry/place.h),
				   applied over what the flags above set (NULL: none) */
	int mlp_tile;           /* --mlp-tile: the layer's MLP runs over tiles of this many
				   tokens (rows of B x T), its hidden-width activations
				   recomputed per tile in backward, so one tile's exist at
				   a time; FERRY_TILE_AUTO: the plan's choice; 0: untiled */
	int loss_tile;          /* --loss-tile: the LM head's matrix product, the softmax
				   cross-entropy and their backward over tiles of this many
				   tokens, so one tile's logits exist at a time (the backward
				   recomputes them); FERRY_TILE_AUTO; 0: untiled */
	const char *host_tier;  /* --host-tier KIND=TIER,...: the host tiers the
				   placements name, below place (NULL: none); what
				   host_tiers places when it is made from them */
	int zero;               /* --zero: 1 splits AdamW's moments over the
				   ranks (ZeRO-1, adam=device:shard(N); with
				   optimizer stream or cpu also its master weights
				   and host gradients, adam=host:...:shard(N)), 2 the
				   gradients too (ZeRO-2, shard(N,grads)), 3 the
				   parameters too (ZeRO-3, shard(N,params)); 0 none */
	int zero_ranks;         /* ... over this many (0: comm's ranks) */
	int prefetch_tiers[FERRY_PREFETCH_TIERS]; /* offloaded activations over host tiers: the layers on
				   the Nth tier of their span loaded prefetch_tiers[N]
				   layers ahead (0 after the last; none: prefetch_depth
				   for all); the ring holds the deepest */
	struct ferry_comm *comm; /* data parallel (ferry/comm.h): each backward's
				   weight gradients are averaged over these ranks
				   on a stream of their own, layer by layer (NULL
				   or one rank: none); collectives run on the
				   stream's thread, so no other thread may use it */
	bool packed;            /* batches of packed documents (version-3 data,
				   docs/data.md): each forward takes the rows'
				   positions (ferry_model_set_positions), a [B, T]
				   int32 "positions" tensor beside the tokens that the
				   encoder, rotary embedding and attention read, so no
				   token attends across a document; false: positions t,
				   no such tensor */
	int doc_tokens;         /* packed: the documents' length the cost model prices
				   attention at (the pairs within each document;
				   0: a row's whole causal triangle); no effect on
				   the plan or the run */
	struct ferry_comm *host_comm; /* NULL, or with a comm on device buffers
				   (NCCL) the same ranks on host buffers (MPI), for
				   the collectives on host memory (--offload-params
				   with ZeRO or --offload-embeddings); run on the
				   same stream's thread, so no other thread may use it */
};

/* The placement of every group of training tensors that o asks for: its
 * shorthand flags, then o->place over them, checked (ferry/place.h). */
ferry_status ferry_exec_opts_places(const struct ferry_exec_opts *o, struct ferry_places *out) FERRY_MUST_CHECK;
/* The reverse: the shorthand flags that give p (every placement today
 * has them); o->policy then points into p, and o->place is cleared.  The
 * host tiers' shorthand is a spec: o->host_tier is left to the caller
 * (ferry_places_tier_spec writes it). */
void ferry_exec_opts_set_places(struct ferry_exec_opts *o, const struct ferry_places *p);
/* AdamW's placement as the optimizer enum (host tiers decide by it). */
enum ferry_optim_place ferry_places_optimizer(const struct ferry_places *p);
/* ferry_places_host_use of AdamW placed as o (the rest as the defaults). */
void ferry_optim_host_use(enum ferry_optim_place o, unsigned *cpu_kinds, unsigned *copied_kinds);

/* The host kind a tensor kind's host bytes count as, and a plan's host
 * bytes by host kind (what ferry_host_tiers_place takes). */
enum ferry_host_kind ferry_host_kind_of(enum ferry_tensor_kind k);
void ferry_plan_host_kinds(const struct ferry_plan *plan, size_t out[FERRY_HOST_KINDS]);

/* ---- the prepared schedule of a training step ------------------------------------
 * Every task a training step submits, in order: on which stream, what it
 * does, to which tensor, for which layer.  Names are cut to their arrays. */
#define FERRY_SCHED_MAX_STREAMS 5
#define FERRY_SCHED_NAME_CHARS 16  /* a program's or a stream's name, with its NUL */
#define FERRY_SCHED_KIND_CHARS 24  /* a task's kind */
#define FERRY_SCHED_LABEL_CHARS 56 /* what a task works on */

struct ferry_sched_task_info {
	char program[FERRY_SCHED_NAME_CHARS]; /* "forward", "backward", "gradient norm",
						 "update", ... */
	char stream[FERRY_SCHED_NAME_CHARS];  /* "compute", "d2h", "h2d" */
	char kind[FERRY_SCHED_KIND_CHARS];    /* "op matmul", "op matmul bwd", "copy", "zero",
						 "record", "wait", "grads done" */
	char what[FERRY_SCHED_LABEL_CHARS];   /* the tensor (or the event) it works on */
	int layer;         /* -1: not a layer's */
	size_t bytes;      /* copies and zeroing */
	double flops;      /* ops */
};

struct ferry_schedule_info {
	int n_tasks;
	struct ferry_sched_task_info *tasks; /* owned; ferry_schedule_info_free */
	int n_streams, n_events;
	char streams[FERRY_SCHED_MAX_STREAMS][FERRY_SCHED_NAME_CHARS];
	int host_syncs;    /* host synchronisations per step */
	int sync_after;    /* tasks submitted before the synchronisation */
};

void ferry_schedule_info_free(struct ferry_schedule_info *info);

/* A traced run of the schedule in figures (ferry_model_trace_end_stats):
 * from the first task's start to the last one's end, and per stream the
 * time its tasks ran. */
struct ferry_trace_stats {
	double span_s;
	int n_streams;
	char stream[FERRY_SCHED_MAX_STREAMS][FERRY_SCHED_NAME_CHARS];
	double busy_s[FERRY_SCHED_MAX_STREAMS];
};

#ifdef __cplusplus
}
#endif
#endif
