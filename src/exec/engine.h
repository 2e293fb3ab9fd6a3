/*
 * Internal: runs a declared layer over a stack of L layers, placing each
 * tensor as a stack plan says: kept on the device, offloaded to host memory
 * (copied out on a device-to-host stream as soon as it is produced, and
 * prefetched back on a host-to-device stream while later layers run their
 * backward pass), or recomputed before the layer's backward ops.
 */
#ifndef FERRY_EXEC_ENGINE_H
#define FERRY_EXEC_ENGINE_H

#include "ferry/backend.h"
#include "plan/stack_plan.h"
#include "sched/schedule.h"
#include "exec/weight_ring.h"

struct ferry_layer_exec;

/* Where the executor finds a layer's weights and weight gradients:
 * parameter p of layer l starts layer_stride[p] * l elements into base[p]
 * (weights in the activation type, as the kernels read them) and into
 * grad_base[p] (fp32).
 *
 * With the layers' weights streamed (layers.weights=host:stream), `rings`
 * is their weight ring (weight_ring.h, units the layers, the ring's
 * streams and names the engine's): a stacked parameter p (one with a
 * layer_stride) of layer l is at base[p] + (l % ring) * slot_numel
 * elements, and its gradient at grad_base[p] + (l % grad_ring) *
 * slot_numel.  Weights come from the host `ring - 1` layers ahead, in
 * forward and again in backward (the last `ring` layers of the forward
 * stay for the backward); each layer's gradients go to the host as soon as
 * its backward is done. */
struct ferry_weight_table {
	void *const *base;
	float *const *grad_base;
	const size_t *layer_stride;
	struct ferry_weight_rings *rings; /* NULL: every layer's weights resident */
	int grad_slots;      /* weights resident, their gradients one layer at a
				time in slots (ZeRO-2): layer l's in slot l %
				grad_slots, grad_slot_numel elements per slot
				from grad_base; 0: every layer's resident */
	size_t grad_slot_numel;
};

/* Where the stack's activations live: device slots of tensor t (as the
 * stack plan sizes them; NULL for the layer output), the activation-gradient
 * workspace (sp->grad_bytes), and host copies of offloaded tensor t (L
 * layers).  The tensor table allocates them; the executor only reads them. */
struct ferry_stack_storage {
	void *act[FERRY_LAYER_MAX_TENSORS]; /* the layer input's from slot 1
					       when sp->input_in_place */
	void *input0;      /* the layer input's slot 0 when sp->input_in_place */
	void *grad;
	void *host[FERRY_LAYER_MAX_TENSORS];
	void *ws;          /* kernel scratch for every op (NULL: none) */
	size_t ws_bytes;
	const int32_t *positions; /* packed documents: the batch's [B, T] positions,
				     which rope and attention read (NULL: t) */
	struct ferry_host_tiers *tiers; /* host copies' tiers (NULL: none): an
					   NVMe-tier copy is file I/O */
};

/* dims: the largest batch's; scalars (indexed by enum ferry_op_scalar, may
 * be NULL when no op takes one): the model's constants.  The stack's ops
 * run on stream `compute`; an offloading plan adds the copy streams and
 * the events ordering its copies to res.  Storage may be all NULL for a dry
 * build (a schedule to print, never run). */
ferry_status ferry_layer_exec_create(struct ferry_sched_resources *res, int compute,
				     const struct ferry_layer_decl *decl,
				     const struct ferry_dims *dims, const float *scalars,
				     const struct ferry_weight_table *weights,
				     const struct ferry_stack_plan *plan,
				     const struct ferry_stack_storage *storage,
				     struct ferry_layer_exec **out) FERRY_MUST_CHECK;
void ferry_layer_exec_free(struct ferry_layer_exec *ex);

/* The stack's input (the prologue writes it), its output (the epilogue
 * reads it), and their gradients: the epilogue writes d(output) before
 * backward, the prologue reads d(input) after. */
void *ferry_layer_exec_input(struct ferry_layer_exec *ex);
void *ferry_layer_exec_output(struct ferry_layer_exec *ex);
void *ferry_layer_exec_output_grad(struct ferry_layer_exec *ex);
const void *ferry_layer_exec_input_grad(struct ferry_layer_exec *ex);

/* Emits the forward pass into p for a batch of up to B x T.  With
 * for_backward, offloaded tensors are copied out for a backward pass. */
ferry_status ferry_layer_exec_forward(struct ferry_layer_exec *ex, struct ferry_program *p, int B, int T,
				      bool for_backward) FERRY_MUST_CHECK;
/* Called as the backward pass is emitted, after layer l's weight
 * gradients are complete on the compute stream (with weight rings, after
 * their copies to the host are queued on the "d2h" stream): the caller may
 * emit tasks that start on them (the CPU optimizer's early updates). */
struct ferry_layer_hook {
	void (*after_layer)(void *ctx, struct ferry_program *p, int layer);
	/* NULL, or before layer l's backward (its gradient slot made ready;
	 * with weight rings, before the ring's gradients start) */
	void (*before_layer)(void *ctx, struct ferry_program *p, int layer);
	/* NULL, or with weight rings after layer l's backward, before the
	 * ring sends its gradients to the host (the d2h stream may be made to
	 * wait: averaged on the device first) */
	void (*grads_written)(void *ctx, struct ferry_program *p, int layer);
	void *ctx;
};
void ferry_layer_exec_set_hook(struct ferry_layer_exec *ex, const struct ferry_layer_hook *hook);

/* Emits the backward pass (after a forward with for_backward); weight
 * gradients accumulate into the weight table's grad_base; after each
 * layer, a "gradients complete" marker.  With weight rings, each layer's
 * gradients start from zero in their slot, or with grads_from_host from
 * the host's (what earlier backwards added up there). */
ferry_status ferry_layer_exec_backward(struct ferry_layer_exec *ex, struct ferry_program *p, int B, int T,
				       bool grads_from_host) FERRY_MUST_CHECK;

#endif
