/*
 * Models: a configuration, its parameter tensors, and a model on a backend.
 *
 * Every model (GPT-2, Llama) is a declaration inside libferry; this API is
 * the same for all of them.  Parameters live in one fp32 array in the
 * declaration's order, each per-layer tensor stacked [L, ...] (llm.c's
 * layout for GPT-2, so an llm.c checkpoint is read straight into it);
 * ferry_model_param_info says where each tensor is.
 */
#ifndef FERRY_MODEL_H
#define FERRY_MODEL_H

#include <stdbool.h>
#include "ferry/ferry.h"
#include "ferry/backend.h"
#include "ferry/plan.h"
#include "ferry/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The prepared schedule of one training step of ferry_model_create with
 * the same arguments (opts->act_dtype as the backend's), built without a
 * device. */
ferry_status ferry_model_schedule(const struct ferry_model_config *cfg, int B, int T,
				  const struct ferry_exec_opts *opts, struct ferry_schedule_info *out)
	FERRY_MUST_CHECK;

/* ---- a model on a backend ------------------------------------------------------
 * Holds parameters, gradients, AdamW state and activations for batches of
 * up to B x T in the backend's device arena, every buffer the tensor table
 * lists (ferry_model_plan).  Calls are synchronous from the caller's view
 * (work runs on the backend's streams; results are ready when a call
 * returns). */
typedef struct ferry_model *ferry_model_t;

struct ferry_adamw {
	float lr, beta1, beta2, eps, weight_decay;
	float grad_clip; /* clip the global gradient norm to this; 0 = off */
};

/* opts: activation policy and prefetch depth (NULL: everything on the
 * device).  Allocates exactly the buffers ferry_model_plan lists. */
ferry_status ferry_model_create(ferry_backend_t be, const struct ferry_model_config *cfg, int B,
				int T, const struct ferry_exec_opts *opts, ferry_model_t *out)
	FERRY_MUST_CHECK;
/* The memory plan of ferry_model_create with the same arguments, without
 * allocating anything: fails the same way on a bad shape or policy. */
ferry_status ferry_model_plan(const struct ferry_model_config *cfg, int B, int T,
			      const struct ferry_exec_opts *opts, struct ferry_plan *plan)
	FERRY_MUST_CHECK;
/* The plan of rank `rank` of a data-parallel run of `ranks` (mpirun -np
 * ranks), made without one: opts with --zero's split over `ranks` (0 or
 * `ranks` in opts->zero_ranks; an adam=device:shard(N) placement must
 * say N = ranks).  Averaging the gradients adds no device buffer (in
 * place), so without --zero every rank's device plan is the one
 * process's; MPI on device memory adds its pinned staging buffer to the
 * host bytes (FERRY_COMM_ENGINE=mpi on the CUDA backend, or NCCL not
 * built in; FERRY_COMM_STAGE=1 on the CPU's; FERRY_ERR_INVALID for a
 * malformed FERRY_COMM_STAGE or FERRY_COMM_STAGE_BYTES); with --zero 1
 * each rank holds one slice of S = n/ranks (rounded up) elements of each
 * moment, the last rank's padded past n, so every rank's bytes are the
 * same today. */
ferry_status ferry_model_rank_plan(const struct ferry_model_config *cfg, int B, int T,
				   const struct ferry_exec_opts *opts, int ranks, int rank, struct ferry_plan *plan)
	FERRY_MUST_CHECK;
void ferry_model_free(ferry_model_t m);
const struct ferry_model_config *ferry_model_config(ferry_model_t m);
size_t ferry_model_num_params(ferry_model_t m);
/* The longest sequence a forward pass accepts: min(T created for, max_seq). */
int ferry_model_max_seq_len(ferry_model_t m);

/* Initialisation as the declaration says (GPT-2: N(0, 0.02) weights,
 * residual projections scaled by 1/sqrt(2L), zero biases, unit norm gains);
 * deterministic in seed. */
ferry_status ferry_model_init_random(ferry_model_t m, uint64_t seed) FERRY_MUST_CHECK;

/* Copies between host arrays (n_params floats, declaration order) and the
 * device.  With the optimizer state split over the ranks (ZeRO-1, opts'
 * zero: its moments; with the optimizer on the host also its master
 * weights) or the parameters split too (--zero 3), each rank keeps its
 * slice, and reading back what is split (the optimizer state; the
 * parameters in those two cases) is a collective: every rank calls it. */
ferry_status ferry_model_set_params(ferry_model_t m, const float *params) FERRY_MUST_CHECK;
ferry_status ferry_model_get_params(ferry_model_t m, float *params) FERRY_MUST_CHECK;
/* A hash of the model's values, without a second copy of them all: the
 * master weights this rank holds, read where they are (the device, host
 * memory, an NVMe file) in pieces; where each rank keeps only its slice
 * (--zero 3, or --zero 1's master weights split on the host), the whole
 * array last given to ferry_model_set_params (a load's, the random
 * initialisation's), until an update.  *whole: the hash is of the whole
 * model's values; false (and *hash 0) for slices after an update, whose
 * hashes would differ per rank whatever they hold.  Not a collective. */
ferry_status ferry_model_params_hash(ferry_model_t m, uint64_t *hash, bool *whole) FERRY_MUST_CHECK;
/* Whether every forward is a collective: the parameters are split over
 * several ranks (--zero 3) and gathered as it goes, so every rank runs
 * each forward (and a rank alone, a sample say, cannot). */
bool ferry_model_collective_forward(ferry_model_t m);
ferry_status ferry_model_get_grads(ferry_model_t m, float *grads) FERRY_MUST_CHECK;
ferry_status ferry_model_set_opt_state(ferry_model_t m, const float *mom, const float *var)
	FERRY_MUST_CHECK;
ferry_status ferry_model_get_opt_state(ferry_model_t m, float *mom, float *var) FERRY_MUST_CHECK;
/* What ferry_model_get_params / _get_opt_state would copy, there in place
 * where it is one whole buffer in host memory (the parameters and AdamW's
 * state of --offload-params and --offload-optimizer cpu; not split over
 * ranks, not in an NVMe file), the streams drained first: a save writes it
 * and a resume reads AdamW's state into it without a copy (at 8B, tens of
 * GB).  Writing it is ferry_model_set_opt_state's effect.  NULL / false
 * otherwise; valid until the next step. */
const float *ferry_model_params_in_place(ferry_model_t m);
bool ferry_model_opt_state_in_place(ferry_model_t m, float **mom, float **var);

/* Forward pass over inputs [B, T] (B, T within the created size).  With
 * targets, *loss gets the mean cross-entropy; tokens are checked against the
 * vocabulary and T against max_seq first. */
ferry_status ferry_model_forward(ferry_model_t m, const int32_t *inputs, const int32_t *targets,
				 int B, int T, float *loss) FERRY_MUST_CHECK;
/* The mean loss of a batch without keeping anything for a backward pass
 * (validation, evaluation): offloaded tensors are not copied out. */
ferry_status ferry_model_loss(ferry_model_t m, const int32_t *inputs, const int32_t *targets,
			      int B, int T, float *loss) FERRY_MUST_CHECK;
/* Packed documents (a model made with ferry_exec_opts.packed): the next
 * forward's positions, [B, T] int32 of that forward, each token's index in
 * its document (0 .. its index in the row); read (and checked) when the
 * forward is submitted, so the array must live until then.  A packed
 * model's forward without them: t.  Targets below 0 are not counted:
 * their loss and gradient are 0.  FERRY_ERR_INVALID: positions for a
 * model made without packed. */
ferry_status ferry_model_set_positions(ferry_model_t m, const int32_t *positions) FERRY_MUST_CHECK;
bool ferry_model_packed(ferry_model_t m);
/* After a forward pass with targets: the sum of its rows' losses (in
 * double; rows whose target is below 0 add 0), for a mean over counted
 * targets that spans batches. */
double ferry_model_loss_sum(ferry_model_t m);
/* After a forward pass: the next-token probabilities (V floats) at row
 * b * T + t. */
ferry_status ferry_model_probs(ferry_model_t m, int row, float *probs) FERRY_MUST_CHECK;

ferry_status ferry_model_zero_grad(ferry_model_t m) FERRY_MUST_CHECK;
/* Backward pass of the last forward (which must have had targets; each
 * forward allows one backward); gradients of the mean loss accumulate into
 * the gradient buffer. */
ferry_status ferry_model_backward(ferry_model_t m) FERRY_MUST_CHECK;
/* Clips by global norm and applies AdamW step t (>= 1); *grad_norm gets the
 * norm before clipping.  Weight decay applies where the declaration says
 * (matrices and embeddings, not biases or norm gains). */
ferry_status ferry_model_update(ferry_model_t m, const struct ferry_adamw *opt, int t,
				float *grad_norm) FERRY_MUST_CHECK;
/* The same with the gradient buffer times scale (> 0) as the gradient:
 * 1/N after N backwards accumulated; the norm (*grad_norm) and the
 * clipping are of the scaled gradient.  Scale 1 is ferry_model_update. */
ferry_status ferry_model_update_scaled(ferry_model_t m, const struct ferry_adamw *opt, int t, float scale,
				       float *grad_norm) FERRY_MUST_CHECK;

/* A training step in two halves, with one host synchronisation: submit
 * zeroes the gradients and queues forward, backward and the gradient norm
 * for a batch with targets, and returns without waiting (the caller may
 * prepare the next batch meanwhile); finish waits for the device, gives
 * the mean loss and the norm, and queues the clipped AdamW step t without
 * waiting for it (the next call that needs the device does).  The same
 * results as forward, zero_grad, backward and update. */
ferry_status ferry_model_step_submit(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B,
				     int T) FERRY_MUST_CHECK;
ferry_status ferry_model_step_finish(ferry_model_t m, const struct ferry_adamw *opt, int t, float *loss,
				     float *grad_norm) FERRY_MUST_CHECK;
/* The same with the gradient times scale (> 0), as ferry_model_update_scaled:
 * the loss over counted targets (a backward's gradient is of its batch's
 * loss sum over B*T; scale B*T / count makes it the mean's). */
ferry_status ferry_model_step_finish_scaled(ferry_model_t m, const struct ferry_adamw *opt, int t, float scale,
					    float *loss, float *grad_norm) FERRY_MUST_CHECK;
/* The speculative clipping order (ferry_exec_opts.clip_order
 * FERRY_CLIP_SPECULATIVE, optimizer on host threads): arms the next
 * ferry_model_step_submit to update each layer on the host as soon as its
 * gradients are there, with AdamW step t's values and no clipping.
 * ferry_model_step_finish then keeps those updates when the norm is finite
 * and within opt->grad_clip (and opt and t are these), or puts the layers
 * back and updates them again with the clipping scale, or, with a norm
 * that is not finite, puts them back and fails as without speculation: the
 * same bits as the exact order in every case.  Without it, a step runs in
 * the exact order.  FERRY_ERR_INVALID: the model was made without the
 * speculative order, t < 1. */
/* Whether m was made with the speculative order (adam=host:cpu(speculative)). */
bool ferry_model_speculative(ferry_model_t m);
ferry_status ferry_model_step_speculate(ferry_model_t m, const struct ferry_adamw *opt, int t)
	FERRY_MUST_CHECK;
/* Speculative steps put back so far (clipped, diverged or re-valued). */
int ferry_model_speculation_undone(ferry_model_t m);

/* Where the model's host buffers are (ferry_exec_opts.pinned_limit): one
 * pinned pool sized before step 1, and pageable memory for the rest. */
struct ferry_host_memory {
	size_t pinned_bytes;   /* the pool (pageable after all when pin_failed) */
	size_t pageable_bytes; /* the rest */
	size_t limit;          /* the limit applied */
	bool over_limit;       /* buffers that copies use are pageable: past the limit */
	bool pin_failed;       /* the backend could not pin the pool: it is pageable */
	size_t allocated_bytes; /* host bytes the buffers' allocations got, counted as
				   they were made: the plan's host_alloc_bytes */
};
void ferry_model_host_memory(ferry_model_t m, struct ferry_host_memory *out);

/* Waits until everything queued has run. */
ferry_status ferry_model_sync(ferry_model_t m) FERRY_MUST_CHECK;

/* Traces every task the model submits from now (ops, copies, zeroing;
 * each timed on its stream) until ferry_model_trace_end, which waits for
 * them and writes Chrome trace JSON to path, whole or not at all:
 * Perfetto (ui.perfetto.dev) opens it, one track per stream, one slice
 * per task named by its tensor, with its program, layer and bytes. */
ferry_status ferry_model_trace_begin(ferry_model_t m) FERRY_MUST_CHECK;
ferry_status ferry_model_trace_end(ferry_model_t m, const char *path) FERRY_MUST_CHECK;

/* ferry_model_trace_end, writing the file only when path is not NULL, and
 * the figures into *stats (struct ferry_trace_stats, ferry/plan.h). */
ferry_status ferry_model_trace_end_stats(ferry_model_t m, const char *path, struct ferry_trace_stats *stats)
	FERRY_MUST_CHECK;

/* The model's FLOPs for one training step (forward + backward) at B x T,
 * without recomputation: the sum of its ops' FLOPs. */
double ferry_model_step_flops(ferry_model_t m, int B, int T);
/* The same for a batch of packed documents: attention scores each token's
 * keys of its own document only (positions [B, T] in host memory; NULL:
 * ferry_model_step_flops). */
double ferry_model_step_flops_at(ferry_model_t m, int B, int T, const int32_t *positions);

/* How ferry_model_sample draws each token. */
struct ferry_sample_opts {
	float temperature; /* probabilities as softmax(logits / temperature):
			      1 the model's own, below 1 sharper, above 1
			      flatter; 0 always takes the most probable token */
	int top_k;         /* draw among the k most probable tokens only;
			      0 = all */
};

/* Appends n sampled tokens to a sequence of *len tokens (buffer of cap),
 * sliding the context window to the model's T.  opts NULL: temperature 1,
 * all tokens.  rng is advanced (one draw per token); the same rng state,
 * model and opts give the same tokens. */
ferry_status ferry_model_sample(ferry_model_t m, int32_t *tokens, int *len, int cap, int n,
			       const struct ferry_sample_opts *opts, uint64_t *rng) FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
