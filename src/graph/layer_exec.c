/*
 * Runs a declared layer over a stack of L layers.
 *
 * Storage, carved from one device buffer:
 *  - the layer input: L+1 slots, slot l is layer l's input and slot l+1 its
 *    output (the output tensor aliases the next layer's input);
 *  - every other residual (read by backward): one slot per layer;
 *  - every other tensor: one slot shared by all layers (recomputed or
 *    consumed within the layer);
 *  - gradients: one shared slot per differentiable tensor, and two
 *    alternating slots for the input/output gradient, since layer l's input
 *    gradient is layer l-1's output gradient.
 */
#include "graph/layer.h"
#include "backend/backend_impl.h"
#include "core/error.h"

#include <string.h>

#define SLOT_ALIGN_FLOATS 64

struct ferry_layer_exec {
	ferry_backend_t be;
	const struct ferry_layer_decl *decl;
	struct ferry_layer_dims dims;
	struct ferry_weight_table weights;
	unsigned residuals;        /* bit t: read by backward */
	unsigned has_grad;         /* bit t: differentiable */
	ferry_buffer_t act_buf, grad_buf;
	float **act;               /* [(L+1) * n_tensors]: tensor t of layer l */
	float *grad[FERRY_LAYER_MAX_TENSORS];
	float *io_grad[2];         /* alternating input/output gradients */
	int io_cur;                /* io_grad[io_cur] is the current output grad */
};

size_t ferry_tensor_floats(enum ferry_tensor_shape shape, const struct ferry_layer_dims *d)
{
	size_t N = (size_t)d->B * d->T;

	switch (shape) {
	case FERRY_SHAPE_N_C: return N * d->C;
	case FERRY_SHAPE_N_4C: return N * 4 * d->C;
	case FERRY_SHAPE_N: return N;
	case FERRY_SHAPE_B_NH_T: return (size_t)d->B * d->NH * d->T;
	}
	return 0;
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

static unsigned differentiable(const struct ferry_layer_decl *decl)
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
	return FERRY_OK;
}

static size_t align_floats(size_t n)
{
	return (n + SLOT_ALIGN_FLOATS - 1) / SLOT_ALIGN_FLOATS * SLOT_ALIGN_FLOATS;
}

ferry_status ferry_layer_exec_create(ferry_backend_t be, const struct ferry_layer_decl *decl,
				     const struct ferry_layer_dims *dims,
				     const struct ferry_weight_table *weights,
				     struct ferry_layer_exec **out)
{
	struct ferry_layer_exec *ex;
	size_t act_floats = 0, grad_floats = 0, off;
	int n = decl->n_tensors, L = dims->L;
	ferry_status st;
	float *base;

	*out = NULL;
	st = ferry_layer_decl_check(decl);
	if (st)
		return st;
	ex = ferry_calloc(1, sizeof(*ex));
	if (!ex)
		return ferry_error(FERRY_ERR_NOMEM, "layer executor: out of host memory");
	ex->act = ferry_calloc((size_t)(L + 1) * n, sizeof(*ex->act));
	if (!ex->act) {
		st = ferry_error(FERRY_ERR_NOMEM, "layer executor: out of host memory");
		goto out_free;
	}
	ex->be = be;
	ex->decl = decl;
	ex->dims = *dims;
	ex->weights = *weights;
	ex->residuals = ferry_layer_residuals(decl);
	ex->has_grad = differentiable(decl);

	/* Sizes first, then carve. */
	for (int t = 0; t < n; t++) {
		size_t sz = align_floats(ferry_tensor_floats(decl->tensors[t].shape, dims));

		if (t == decl->input)
			act_floats += (size_t)(L + 1) * sz;
		else if (t == decl->output)
			continue;
		else if (ex->residuals & (1u << t))
			act_floats += (size_t)L * sz;
		else
			act_floats += sz;
		if (ex->has_grad & (1u << t))
			grad_floats += sz;
	}
	st = ferry_buffer_alloc(be, act_floats * sizeof(float), &ex->act_buf);
	if (st)
		goto out_free;
	st = ferry_buffer_alloc(be, grad_floats * sizeof(float), &ex->grad_buf);
	if (st)
		goto out_free;

	base = ferry_buffer_ptr(ex->act_buf);
	off = 0;
	for (int t = 0; t < n; t++) {
		size_t sz = align_floats(ferry_tensor_floats(decl->tensors[t].shape, dims));
		int slots = t == decl->input ? L + 1 :
			    (ex->residuals & (1u << t)) ? L : 1;

		if (t == decl->output)
			continue;
		for (int l = 0; l <= L; l++) {
			int slot = l < slots ? l : slots - 1;

			ex->act[(size_t)l * n + t] = base + off + (size_t)slot * sz;
		}
		off += (size_t)slots * sz;
	}
	for (int l = 0; l < L; l++) /* the output is the next layer's input */
		ex->act[(size_t)l * n + decl->output] = ex->act[(size_t)(l + 1) * n + decl->input];

	base = ferry_buffer_ptr(ex->grad_buf);
	off = 0;
	for (int t = 0; t < n; t++) {
		size_t sz = align_floats(ferry_tensor_floats(decl->tensors[t].shape, dims));

		if (!(ex->has_grad & (1u << t)))
			continue;
		if (t == decl->input || t == decl->output)
			ex->io_grad[t == decl->output] = base + off;
		else
			ex->grad[t] = base + off;
		off += sz;
	}
	*out = ex;
	return FERRY_OK;

out_free:
	ferry_layer_exec_free(ex);
	return st;
}

void ferry_layer_exec_free(struct ferry_layer_exec *ex)
{
	if (!ex)
		return;
	ferry_buffer_free(ex->grad_buf);
	ferry_buffer_free(ex->act_buf);
	ferry_free(ex->act);
	ferry_free(ex);
}

float *ferry_layer_exec_input(struct ferry_layer_exec *ex)
{
	return ex->act[ex->decl->input];
}

float *ferry_layer_exec_output(struct ferry_layer_exec *ex)
{
	return ex->act[(size_t)ex->dims.L * ex->decl->n_tensors + ex->decl->input];
}

float *ferry_layer_exec_output_grad(struct ferry_layer_exec *ex)
{
	return ex->io_grad[ex->io_cur];
}

const float *ferry_layer_exec_input_grad(struct ferry_layer_exec *ex)
{
	/* valid after backward, which leaves io_cur on the last input grad */
	return ex->io_grad[ex->io_cur];
}

size_t ferry_layer_exec_device_bytes(const struct ferry_layer_exec *ex)
{
	return ferry_buffer_size(ex->act_buf) + ferry_buffer_size(ex->grad_buf);
}

/* Parameter w of layer l: a matrix (rows of in_ch floats) or a vector. */
static size_t weight_offset(const struct ferry_layer_exec *ex, struct ferry_weight_ref w,
			    int l, int row_floats)
{
	return (size_t)l * ex->weights.layer_stride[w.param] +
	       (size_t)w.block * ex->dims.C * row_floats;
}

/* Matmuls have a matrix in slot 0 (rows of C_in) and a bias in slot 1. */
static int weight_row_floats(const struct ferry_op_call *c, int slot)
{
	return c->kind == FERRY_OP_MATMUL && slot == 0 ? c->C : 1;
}

/* The op call of op o in layer l, forward pointers filled in. */
static void make_call(const struct ferry_layer_exec *ex, int o, int l, int B, int T,
		      struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &ex->decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	struct ferry_layer_dims d = ex->dims;
	float *const *act = ex->act + (size_t)l * ex->decl->n_tensors;
	memset(c, 0, sizeof(*c));
	d.B = B;
	d.T = T;
	c->kind = op->kind;
	c->B = B;
	c->T = T;
	c->NH = d.NH;
	c->C = op->in_mult ? op->in_mult * d.C : d.C;
	c->OC = op->out_mult ? op->out_mult * d.C : d.C;
	c->n = (long)ferry_tensor_floats(ex->decl->tensors[op->out[0]].shape, &d);
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = act[op->out[i]];
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = act[op->in[i]];
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0)
			c->w[i] = ex->weights.base[op->w[i].param] +
				  weight_offset(ex, op->w[i], l, weight_row_floats(c, i));
}

ferry_status ferry_layer_exec_forward(struct ferry_layer_exec *ex, ferry_stream_t s, int B, int T)
{
	struct ferry_op_call c;
	ferry_status st;

	if (B < 1 || T < 1 || B * T > ex->dims.B * ex->dims.T || T > ex->dims.T)
		return ferry_error(FERRY_ERR_INVALID, "batch %dx%d exceeds the executor's %dx%d",
				   B, T, ex->dims.B, ex->dims.T);
	for (int l = 0; l < ex->dims.L; l++) {
		for (int o = 0; o < ex->decl->n_ops; o++) {
			make_call(ex, o, l, B, T, &c);
			st = ferry_stream_run_op(s, &c);
			if (st)
				return st;
		}
	}
	return FERRY_OK;
}

static float *grad_of(struct ferry_layer_exec *ex, int t, int io_out)
{
	const struct ferry_layer_decl *decl = ex->decl;

	if (!(ex->has_grad & (1u << t)))
		return NULL;
	if (t == decl->output)
		return ex->io_grad[io_out];
	if (t == decl->input)
		return ex->io_grad[!io_out];
	return ex->grad[t];
}

ferry_status ferry_layer_exec_backward(struct ferry_layer_exec *ex, ferry_stream_t s, int B, int T)
{
	const struct ferry_layer_decl *decl = ex->decl;
	struct ferry_layer_dims d = ex->dims;
	struct ferry_op_call c;
	ferry_status st;

	d.B = B;
	d.T = T;
	for (int l = ex->dims.L - 1; l >= 0; l--) {
		int io_out = ex->io_cur;

		/* Every gradient but the incoming one starts from zero. */
		for (int t = 0; t < decl->n_tensors; t++) {
			float *g = grad_of(ex, t, io_out);

			if (!g || t == decl->output)
				continue;
			st = ferry_memset_zero_async(s, g, ferry_tensor_floats(decl->tensors[t].shape, &d) *
							     sizeof(float));
			if (st)
				return st;
		}
		for (int o = decl->n_ops - 1; o >= 0; o--) {
			const struct ferry_op_decl *op = &decl->ops[o];
			const struct ferry_op_info *info = ferry_op_info(op->kind);

			make_call(ex, o, l, B, T, &c);
			c.backward = true;
			for (int i = 0; i < info->n_out; i++)
				c.dout[i] = grad_of(ex, op->out[i], io_out);
			for (int i = 0; i < info->n_in; i++)
				c.din[i] = grad_of(ex, op->in[i], io_out);
			for (int i = 0; i < info->n_w; i++)
				if (op->w[i].param >= 0)
					c.dw[i] = ex->weights.grad_base[op->w[i].param] +
						  weight_offset(ex, op->w[i], l, weight_row_floats(&c, i));
			st = ferry_stream_run_op(s, &c);
			if (st)
				return st;
		}
		ex->io_cur = !io_out; /* this layer's input grad feeds layer l-1 */
	}
	return FERRY_OK;
}
