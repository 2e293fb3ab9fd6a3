/*
 * Internal: the layer stack both networks of JAX's host-offloading tutorial
 * run on (exec/tutorial.c, tutorial_adam.c): its device slots,
 * activation-gradient workspace and host copies, listed in a plan or
 * allocated by one function so the two cannot disagree.
 */
#ifndef FERRY_EXEC_TUTORIAL_STACK_H
#define FERRY_EXEC_TUTORIAL_STACK_H

#include "exec/engine.h"
#include "plan/stack_plan.h"

struct ferry_tutorial_stack {
	ferry_backend_t be;
	ferry_buffer_t act_buf[FERRY_LAYER_MAX_TENSORS], act_grad;
	void *host;
	struct ferry_stack_storage storage;
};

/* With plan: adds the stack's device buffers to it (and nothing is
 * allocated; st may be NULL).  Without: allocates them into st on be. */
ferry_status ferry_tutorial_stack_storage(const struct ferry_layer_decl *decl, const struct ferry_stack_plan *sp,
					  struct ferry_plan *plan, ferry_backend_t be,
					  struct ferry_tutorial_stack *st) FERRY_MUST_CHECK;
/* Host bytes of the offloaded activations (all layers). */
size_t ferry_tutorial_stack_host_bytes(const struct ferry_stack_plan *sp);
void ferry_tutorial_stack_free(struct ferry_tutorial_stack *st);

#endif
