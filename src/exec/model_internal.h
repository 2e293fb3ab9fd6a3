/*
 * Internal: a declared model on a backend (model.c: lifecycle and the
 * public calls; build.c: compiling a step into programs of tasks).
 */
#ifndef FERRY_EXEC_MODEL_INTERNAL_H
#define FERRY_EXEC_MODEL_INTERNAL_H

#include "ferry/model.h"
#include "exec/engine.h"
#include "sched/schedule.h"
#include "sched/trace.h"
#include "plan/tensor_table.h"

/* What a program does, for a batch of B x T. */
enum ferry_prog_kind {
	FERRY_PROG_FORWARD,  /* upload the batch, forward; with targets, losses to the host */
	FERRY_PROG_BACKWARD, /* backward of the last forward */
	FERRY_PROG_NORM,     /* the squared gradient norm, to the host */
	FERRY_PROG_UPDATE,   /* AdamW on every parameter tensor (patched per step) */
	FERRY_PROG_ZERO,     /* zero the weight gradients */
};

/* Variants of a program (ferry_prog_key.variant). */
enum ferry_update_variant {   /* FERRY_PROG_UPDATE, AdamW on host threads */
	FERRY_UPDATE_FULL,    /* every parameter (and every other placement's update) */
	FERRY_UPDATE_COMMIT,  /* after a speculative backward that needs no clipping:
				 the unstacked parameters */
	FERRY_UPDATE_REDO,    /* after one that does: the layers' undone and updated
				 again with the clipping scale, then the unstacked */
	FERRY_UPDATE_UNDO,    /* after one whose norm is not finite: undone only */
};
enum {                        /* FERRY_PROG_BACKWARD */
	FERRY_BACKWARD_SPECULATIVE = 1, /* with early updates */
	FERRY_BACKWARD_ADD,           /* with streamed weights, after another backward since
					 the gradients were zeroed: each unit's come back from
					 the host to be added to (micro-batches) */
};

struct ferry_prog_key {
	enum ferry_prog_kind kind;
	int B, T;
	bool for_backward, targets;
	/* the training step: the forward leaves the per-row losses on the
	 * device and the gradient-norm program copies them to the host (the
	 * host reads the loss only at the step's end; a copy on the compute
	 * stream mid-step would queue behind the offload copies sharing the
	 * copy engine and stall the compute stream until they drain) */
	bool loss_later;
	int variant;                  /* enum ferry_update_variant or ferry_backward_variant */
};

#define FERRY_PROG_CACHE 8

struct ferry_model {
	ferry_backend_t be;          /* NULL: a dry build (a schedule to print) */
	struct ferry_tensor_table tt;
	struct ferry_table_alloc mem;
	const struct ferry_model_decl *md;
	struct ferry_model_config cfg;
	int B, T;                     /* largest batch */
	int cur_B, cur_T;             /* of the last forward */
	bool have_targets;
	bool grads_added;             /* a backward since the gradients were zeroed */
	enum ferry_dtype act;
	size_t asz;                   /* bytes per activation element */
	float scalars[FERRY_OP_SCALAR_COUNT];
	void *wptr[FERRY_MODEL_MAX_PARAMS];   /* what kernels read: params or their copy */
	float *gptr[FERRY_MODEL_MAX_PARAMS];  /* fp32 gradients */
	size_t stride[FERRY_MODEL_MAX_PARAMS];
	struct ferry_layer_exec *layers;
	struct ferry_sched_resources res;
	int compute;                  /* the compute stream's index */
	struct ferry_sched_runtime rt;
	int n_progs;                  /* programs built so far, kept for reuse */
	struct ferry_prog_key prog_key[FERRY_PROG_CACHE];
	struct ferry_program prog[FERRY_PROG_CACHE];
	int32_t *host_tokens, *host_targets; /* [B*T] staging the batch uploads read */
	int32_t *host_positions;      /* [B*T], packed documents (tt.ix.positions >= 0) only */
	const int32_t *next_positions; /* ferry_model_set_positions: the next forward's */
	float *host_losses;           /* [B*T] */
	double *host_sumsq;
	struct ferry_sched_trace trace; /* on between trace_begin and trace_end */
	/* optimizer streaming (tt.ix.opt_ring >= 0): its streams, and per ring
	 * slot the events "staged", "updated", "free again" */
	int opt_h2d, opt_d2h;
	int opt_staged[2], opt_updated[2], opt_free[2];
	/* AdamW on host threads (tt.ix.opt_cpu): its stream, and the events
	 * "a slice's gradients are on the host", "updated", "all uploaded" */
	int opt_cpu_stream, opt_grads_home, opt_host_done, opt_uploaded;
	/* adam.grads=device:stream(D) (tt.ix.host_grad_ring): per host slot
	 * "a unit's gradients in it", "read, free again"; the slot the next
	 * unit takes (units take the slots in turn, across programs) */
	int grad_slot_full[FERRY_GRADS_DEVICE_MAX_DEPTH + 1], grad_slot_free[FERRY_GRADS_DEVICE_MAX_DEPTH + 1];
	int grad_slot_next;
	/* each streamed weight group's ring (weight_ring.h; the table's
	 * tt.ix.ring): the layers' (the engine streams them; their streams and
	 * events are the engine's) and the edges' (units the stages, on the
	 * "h2d" and "d2h" streams), by group; and parameter p's kernel and
	 * gradient addresses while stage s (FERRY_EDGE_PROLOGUE, _EPILOGUE)
	 * holds the edges' (NULL: that stage does not read p) */
	struct ferry_weight_rings ring[FERRY_GROUP_COUNT];
	void *edge_w[FERRY_EDGE_STAGES][FERRY_MODEL_MAX_PARAMS];
	float *edge_g[FERRY_EDGE_STAGES][FERRY_MODEL_MAX_PARAMS];
	/* layers.weights=host:stream: the events "the unstacked parameters'
	 * gradients are written", "every gradient is on the host", "the norm
	 * is computed" */
	int stage_grads_done, all_grads_home, norm_done;
	/* AdamW on host threads: "layer l's gradients written" (the d2h copy
	 * waits for it); the speculative order's step (armed by
	 * ferry_model_step_speculate, pending between submit and finish) */
	int opt_layer_grads;
	bool emit_speculative;        /* while a speculative backward is emitted */
	bool spec_armed, spec_pending;
	struct ferry_adamw spec_opt;
	int spec_t;
	int spec_undone;              /* speculative steps undone (redone or diverged) */
	/* split master weights: the hash of the whole array last given to
	 * ferry_model_set_params, until an update (ferry_model_params_hash) */
	uint64_t set_hash;
	bool set_hash_valid;
	/* data parallel (opts->comm over several ranks; NULL: one rank): the
	 * communicator the comm stream runs, the stream, the events
	 * "gradients to average", "a layer's gradients averaged", "every
	 * gradient averaged", and the first failure on the stream's thread */
	struct ferry_comm *comm;
	struct ferry_comm *host_comm; /* the collectives on host memory's: comm, or
				 with comm on device buffers, opts->host_comm */
	int comm_stream, dp_ready, dp_reduced, dp_all;
	ferry_status comm_status;
	struct ferry_comm_stage *stage; /* MPI on device memory: its host copy (dp_reduce.c) */
	/* adam=device:shard(N): "this rank's slices updated", "every slice
	 * gathered" (zero.c; adam=host:...:shard(N): zero_host.c) */
	int zero_updated, zero_gathered;
	/* adam=device:shard(N,grads) (zero_grads.c): per gradient slot "its
	 * layer's gradients scattered"; the norm's "this rank's block sums",
	 * "summed over the ranks", and those FERRY_CPU_SUM_BLOCKS sums */
	int zero_slot_free[2], zero_parts_done, zero_parts_summed;
	int zero_slot_in[2], zero_edges_in; /* "gathered back" (adding) */
	bool emit_adding;             /* while a backward adding to the last is emitted */
	double *norm_parts;
	struct ferry_ring_gather zero_gather; /* ZeRO-3: the layers' ring's loads */
};

/* The programs of a training step as ferry_model_step_submit and _finish
 * run them: zero, forward, backward, norm (and losses), update. */
#define FERRY_STEP_PROGRAMS 5
void ferry_model_step_keys(int B, int T, struct ferry_prog_key keys[FERRY_STEP_PROGRAMS]);

/* AdamW on host threads (cpu_update.c): the update program, and the hook
 * the engine calls after each layer's backward (gradients to the host and,
 * in a speculative backward, that layer's early update). */
void ferry_emit_update_cpu(ferry_model_t m, struct ferry_program *p, enum ferry_update_variant variant);
void ferry_cpu_update_after_layer(void *model, struct ferry_program *p, int layer);

/* Data parallel (dp_reduce.c): the comm stream and its events; whether
 * the placements let the communicator reach the gradients; the hook after
 * each layer's backward (its average, then AdamW on host threads' part);
 * the unstacked parameters' average at the backward's end. */
void ferry_dp_add_streams(struct ferry_model *m);
ferry_status ferry_dp_check(const struct ferry_model *m) FERRY_MUST_CHECK;
/* Refuses a split of AdamW's state (adam's placement) over another number
 * of ranks than the run's, naming the placement. */
ferry_status ferry_shard_check(const struct ferry_place *adam, int ranks) FERRY_MUST_CHECK;
/* MPI on a backend whose memory the host cannot address (or
 * FERRY_COMM_STAGE=1): the runtime's collectives through a pinned host
 * buffer, made here (sched/comm_stage.h). */
ferry_status ferry_dp_stage_create(struct ferry_model *m) FERRY_MUST_CHECK;
/* The host bytes it takes on each of `ranks` ranks into *bytes, planned
 * before the run (ferry_comm_pick_planned_nccl's assumption); 0: none.
 * FERRY_ERR_INVALID: a staging variable not understood. */
ferry_status ferry_dp_stage_planned(const struct ferry_exec_opts *o, int ranks, size_t *bytes) FERRY_MUST_CHECK;
/* Whether the streamed weights' gradients are averaged on the device
 * before their copies to the host (collectives on device memory); the
 * hook that does it for layer l once written (-1: the unstacked
 * parameters', before their copies), the d2h stream waiting for it. */
bool ferry_dp_on_device(const struct ferry_model *m);
void ferry_dp_grads_written(void *model, struct ferry_program *p, int layer);
void ferry_dp_after_layer(void *model, struct ferry_program *p, int layer);
void ferry_dp_after_backward(struct ferry_model *m, struct ferry_program *p);

/* ZeRO-1 (zero.c, adam=device:shard(N)): the update of this rank's slice
 * and the all-gather of every rank's; the moments to and from whole
 * arrays (a collective: every rank calls it). */
void ferry_emit_update_sharded(ferry_model_t m, struct ferry_program *p);
ferry_status ferry_zero_set_opt_state(ferry_model_t m, const float *mom, const float *var) FERRY_MUST_CHECK;
ferry_status ferry_zero_get_opt_state(ferry_model_t m, float *mom, float *var) FERRY_MUST_CHECK;

/* ZeRO-1 with AdamW's state on the host (zero_host.c, adam=host:cpu:shard(N),
 * host:stream:shard(N); else all of it, and nothing split): whether it is
 * split; this rank's part of elements [*off, *off + *n) of parameter q
 * (false: none); where element off of q is in the host array whose
 * entries are whole[q] or, when it has one (slice >= 0), this rank's
 * slice entry, and its index there; the all-gather of every rank's slice
 * of the compute copy (with --offload-params, of the host's parameters)
 * after the update (the compute stream waits for it); the parameters from
 * and to whole arrays (reading them is a collective: every rank calls it). */
bool ferry_zero_host_split(const struct ferry_model *m);
bool ferry_zero_host_piece(const struct ferry_model *m, int q, size_t *off, size_t *n);
size_t ferry_zero_host_index(const struct ferry_model *m, int q, size_t off);
void *ferry_zero_host_at(ferry_model_t m, const int *whole, int slice, int q, size_t off, size_t elem);
/* Whether parameter q is updated (its info in *pi): it has an entry, or
 * (ZeRO-3, no parameters' entries) storage in the slices; where the
 * device holds its gradient elements from off, whole or (ZeRO-2) in this
 * rank's slice, and where their update goes up, the compute copy or
 * (ZeRO-3) this rank's slice of it. */
bool ferry_zero_host_updated(const struct ferry_model *m, int q, struct ferry_param_info *pi);
void *ferry_zero_host_device_grad(ferry_model_t m, int q, size_t off);
void *ferry_zero_host_device_copy(ferry_model_t m, int q, size_t off);
void ferry_zero_host_gather(ferry_model_t m, struct ferry_program *p);
ferry_status ferry_zero_host_set_params(ferry_model_t m, const float *params) FERRY_MUST_CHECK;
ferry_status ferry_zero_host_get_params(ferry_model_t m, float *params) FERRY_MUST_CHECK;

/* ZeRO-2 (zero_grads.c, adam=device:shard(N,grads)): its events; before
 * and after each layer's backward, its gradient slot zeroed, then
 * reduce-scattered into the slices (adding: the average gathered back
 * into it first); the unstacked parameters' after the backward; the
 * gradient norm from the slices, on `stream` (with the weights streamed:
 * all of it on the host, where the weight ring sends them). */
void ferry_zero_grads_add_events(struct ferry_model *m);
void ferry_zero_grads_before_layer(void *model, struct ferry_program *p, int layer);
void ferry_zero_grads_after_layer(struct ferry_model *m, struct ferry_program *p, int layer);
void ferry_zero_grads_after_backward(struct ferry_model *m, struct ferry_program *p);
/* A backward adding to the last one's: the unstacked gradients' average
 * gathered back whole first. */
void ferry_zero_grads_adding_start(struct ferry_model *m, struct ferry_program *p);
void ferry_zero_grads_norm(struct ferry_model *m, struct ferry_program *p, int stream);

/* ZeRO-3 (zero_params.c, adam=device:shard(N,params)): the layers' weight
 * ring loaded by all-gathers (after the comm stream exists); the
 * unstacked parameters gathered whole after an update; the parameters to
 * and from whole arrays (zero.c; reading them is a collective). */
void ferry_zero_params_bind(struct ferry_model *m);
void ferry_zero_params_gather_unstacked(struct ferry_model *m, struct ferry_program *p);
ferry_status ferry_zero_set_params(ferry_model_t m, const float *params) FERRY_MUST_CHECK;
ferry_status ferry_zero_get_params(ferry_model_t m, float *params) FERRY_MUST_CHECK;
/* n weights from fp32 into type t at dst (zero.c): as they are, or bf16
 * rounded as the CPU AdamW rounds. */
void ferry_zero_compute_bits(enum ferry_dtype t, void *dst, const float *src, size_t n);

/* Whether table buffer b is host memory, and its address: device memory,
 * or host memory (the optimizer state when it is streamed). */
static inline bool ferry_model_buffer_on_host(const struct ferry_model *m, int b)
{
	return m->tt.buffers[b].site == FERRY_SITE_HOST;
}

static inline void *ferry_model_buffer_ptr(const struct ferry_model *m, int b)
{
	return ferry_model_buffer_on_host(m, b) ? m->mem.host[b] : ferry_buffer_ptr(m->mem.dev[b]);
}

static inline ferry_stream_t ferry_model_compute_stream(const struct ferry_model *m)
{
	return m->rt.stream[m->compute];
}

/* A copy on the compute stream, waited for; every stream waited for (host
 * buffers that copies write are then final) (model_params.c). */
ferry_status ferry_model_copy_sync(ferry_model_t m, void *dst, const void *src, size_t n, enum ferry_copy_kind kind)
	FERRY_MUST_CHECK;
ferry_status ferry_model_sync_all(ferry_model_t m) FERRY_MUST_CHECK;

/* n bytes of table buffer b to or from host memory (model_params.c). */
ferry_status ferry_model_buffer_read(ferry_model_t m, int b, void *dst, size_t n) FERRY_MUST_CHECK;
ferry_status ferry_model_buffer_write(ferry_model_t m, int b, const void *src, size_t n) FERRY_MUST_CHECK;

/* Builds the model's tensor table, and with a backend allocates it and
 * creates streams and events (be NULL: a dry build). */
ferry_status ferry_model_build(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, ferry_model_t *out) FERRY_MUST_CHECK;

/* The address of m's tensor table entry i (NULL for i < 0 or in a dry build). */
static inline void *ferry_entry(const struct ferry_model *m, int i)
{
	return ferry_tensor_ptr(&m->tt, &m->mem, i);
}

/* Whether the layers' weights live on the host, streamed in a device ring. */
static inline bool ferry_layers_streamed(const struct ferry_model *m)
{
	return ferry_table_streamed(&m->tt, FERRY_GROUP_LAYER_WEIGHTS);
}

/* The program for key, built on first use and kept (up to
 * FERRY_PROG_CACHE; after that a program is rebuilt into the last slot). */
ferry_status ferry_model_program(ferry_model_t m, const struct ferry_prog_key *key,
				 const struct ferry_program **out) FERRY_MUST_CHECK;

/* Emits what key says into p. */
ferry_status ferry_model_emit(ferry_model_t m, const struct ferry_prog_key *key, struct ferry_program *p)
	FERRY_MUST_CHECK;

#endif
