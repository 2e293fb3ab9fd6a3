/* Analysis of a declared layer: validity, residuals, gradients, producers. */
#include "graph/layer.h"
#include "core/error.h"

size_t ferry_layer_tensor_numel(const struct ferry_layer_decl *decl, int t,
				const struct ferry_dims *dims)
{
	int64_t n = 0;

	return ferry_shape_numel(&decl->tensors[t].shape, dims, &n) ? (size_t)n : 0;
}

bool ferry_layer_tensor_is_stat(const struct ferry_layer_decl *decl, int t)
{
	int o = ferry_layer_producer(decl, t);

	if (o < 0)
		return false;
	const struct ferry_op_info *info = ferry_op_info(decl->ops[o].kind);

	for (int i = 0; i < info->n_out; i++)
		if (decl->ops[o].out[i] == t)
			return info->out_no_grad & (1u << i);
	return false;
}

unsigned ferry_layer_residuals(const struct ferry_layer_decl *decl)
{
	unsigned r = 0;

	for (int o = 0; o < decl->n_ops; o++) {
		const struct ferry_op_decl *op = &decl->ops[o];
		const struct ferry_op_info *info = ferry_op_info(op->kind);

		for (int i = 0; i < info->n_in; i++)
			if (info->bwd_needs & FERRY_NEEDS_IN(i))
				r |= 1u << op->in[i];
		for (int i = 0; i < info->n_out; i++)
			if (info->bwd_needs & FERRY_NEEDS_OUT(i))
				r |= 1u << op->out[i];
	}
	return r;
}

unsigned ferry_layer_differentiable(const struct ferry_layer_decl *decl)
{
	unsigned g = 1u << decl->input;

	for (int o = 0; o < decl->n_ops; o++) {
		const struct ferry_op_decl *op = &decl->ops[o];
		const struct ferry_op_info *info = ferry_op_info(op->kind);

		for (int i = 0; i < info->n_out; i++)
			if (!(info->out_no_grad & (1u << i)))
				g |= 1u << op->out[i];
	}
	return g;
}

int ferry_layer_producer(const struct ferry_layer_decl *decl, int t)
{
	for (int o = 0; o < decl->n_ops; o++) {
		const struct ferry_op_info *info = ferry_op_info(decl->ops[o].kind);

		for (int i = 0; i < info->n_out; i++)
			if (decl->ops[o].out[i] == t)
				return o;
	}
	return -1;
}

ferry_status ferry_layer_decl_check(const struct ferry_layer_decl *decl)
{
	int producers[FERRY_LAYER_MAX_TENSORS] = { 0 };
	int n = decl->n_tensors;

	if (n < 2 || n > FERRY_LAYER_MAX_TENSORS || decl->n_ops < 1 ||
	    decl->n_ops > FERRY_LAYER_MAX_OPS)
		return ferry_error(FERRY_ERR_INVALID, "layer %s: bad tensor or op count", decl->model);
	if (decl->input < 0 || decl->input >= n || decl->output < 0 || decl->output >= n ||
	    decl->input == decl->output)
		return ferry_error(FERRY_ERR_INVALID, "layer %s: bad input/output tensor", decl->model);
	for (int o = 0; o < decl->n_ops; o++) {
		const struct ferry_op_decl *op = &decl->ops[o];
		const struct ferry_op_info *info;

		if ((int)op->kind < 0 || op->kind >= FERRY_OP_COUNT)
			return ferry_error(FERRY_ERR_INVALID, "layer %s: op %d has a bad kind",
					   decl->model, o);
		info = ferry_op_info(op->kind);
		for (int i = 0; i < info->n_in; i++) {
			int t = op->in[i];

			if (t < 0 || t >= n)
				return ferry_error(FERRY_ERR_INVALID, "layer %s: op %d (%s) input %d out of range",
						   decl->model, o, info->name, i);
			if (t != decl->input && producers[t] == 0)
				return ferry_error(FERRY_ERR_INVALID,
						   "layer %s: op %d (%s) reads '%s' before it is produced",
						   decl->model, o, info->name, decl->tensors[t].name);
		}
		for (int i = 0; i < info->n_out; i++) {
			int t = op->out[i];

			if (t < 0 || t >= n || t == decl->input)
				return ferry_error(FERRY_ERR_INVALID, "layer %s: op %d (%s) output %d invalid",
						   decl->model, o, info->name, i);
			if (producers[t]++)
				return ferry_error(FERRY_ERR_INVALID, "layer %s: '%s' produced twice",
						   decl->model, decl->tensors[t].name);
		}
	}
	if (!producers[decl->output])
		return ferry_error(FERRY_ERR_INVALID, "layer %s: output '%s' is never produced",
				   decl->model, decl->tensors[decl->output].name);
	/* the output lives on as the next layer's input; a backward that read it
	 * would need it kept twice */
	if (ferry_layer_residuals(decl) & (1u << decl->output))
		return ferry_error(FERRY_ERR_INVALID, "layer %s: backward may not read the layer output",
				   decl->model);
	return FERRY_OK;
}
