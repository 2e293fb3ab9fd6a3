#include "exec/tutorial_stack.h"

#include <stdio.h>

size_t ferry_tutorial_stack_host_bytes(const struct ferry_stack_plan *sp)
{
	size_t host = 0;

	for (int i = 0; i < sp->n_tensors; i++)
		host += (size_t)sp->L * sp->host_bytes[i];
	return host;
}

static ferry_status alloc_host(const struct ferry_stack_plan *sp, struct ferry_tutorial_stack *st)
{
	size_t host = ferry_tutorial_stack_host_bytes(sp), off = 0;
	ferry_status s;

	if (!host)
		return FERRY_OK;
	if ((s = ferry_host_alloc(st->be, host, &st->host)))
		return s;
	for (int i = 0; i < sp->n_tensors; off += (size_t)sp->L * sp->host_bytes[i], i++)
		st->storage.host[i] = sp->host_bytes[i] ? (char *)st->host + off : NULL;
	return FERRY_OK;
}

ferry_status ferry_tutorial_stack_storage(const struct ferry_layer_decl *decl, const struct ferry_stack_plan *sp,
					  struct ferry_plan *plan, ferry_backend_t be,
					  struct ferry_tutorial_stack *st)
{
	ferry_status s = FERRY_OK;
	char name[64];

	if (st)
		st->be = be;
	for (int i = 0; i < sp->n_tensors && !s; i++) {
		size_t bytes = (size_t)ferry_stack_storage_slots(sp, i) * sp->slot_bytes[i];

		if (sp->kind[i] == FERRY_SLOT_NONE)
			continue;
		snprintf(name, sizeof(name), "act:%.40s", decl->tensors[i].name ? decl->tensors[i].name : "?");
		if (plan)
			ferry_plan_add_buffer(plan, name, FERRY_BUF_TEMP, FERRY_TK_ACTIVATION, bytes);
		else if (!(s = ferry_buffer_alloc(be, bytes, &st->act_buf[i])))
			st->storage.act[i] = ferry_buffer_ptr(st->act_buf[i]);
	}
	if (plan) {
		ferry_plan_add_buffer(plan, "activation gradients", FERRY_BUF_TEMP, FERRY_TK_ACT_GRAD,
				      sp->grad_bytes);
		return FERRY_OK;
	}
	if (!s && !(s = ferry_buffer_alloc(be, sp->grad_bytes, &st->act_grad)))
		st->storage.grad = ferry_buffer_ptr(st->act_grad);
	return s ? s : alloc_host(sp, st);
}

void ferry_tutorial_stack_free(struct ferry_tutorial_stack *st)
{
	for (int i = 0; i < FERRY_LAYER_MAX_TENSORS; i++)
		ferry_buffer_free(st->act_buf[i]);
	ferry_buffer_free(st->act_grad);
	if (st->host)
		ferry_host_free(st->be, st->host);
	*st = (struct ferry_tutorial_stack){ 0 };
}
