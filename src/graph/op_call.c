/* From a declared op and the model's dimensions to the sizes of its call. */
#include "graph/layer.h"

#include <string.h>

bool ferry_window_at_layer(const float *scalars, int l)
{
	const int every = (int)scalars[FERRY_SCALAR_WINDOW_EVERY], full = (int)scalars[FERRY_SCALAR_WINDOW_FULL_EVERY];

	return l >= (int)scalars[FERRY_SCALAR_WINDOW_FROM] && (every <= 1 || l % every == 0) &&
	       (full <= 1 || (l + 1) % full != 0);
}

/* An RMSNorm whose statistic has g values per token normalises each of
 * the token's g groups of C / g channels (Qwen 3's and Gemma 3's norm over
 * each head of q and k): the kernels see g times the rows, each 1/g as
 * wide, so the plain norm's kernels serve it unchanged. */
static void norm_groups(const struct ferry_layer_decl *decl, const struct ferry_op_decl *op,
			const struct ferry_dims *dims, struct ferry_op_call *c)
{
	const int64_t g = op->out[1] >= 0 ? ferry_shape_row_width(&decl->tensors[op->out[1]].shape, dims) : 1;

	if (g <= 1 || c->C % g)
		return;
	c->T *= (int)g;
	c->C /= (int)g;
	c->OC /= (int)g;
}

/* Gemma 3's windowed layers turn by their own base, unscaled (its global
 * layers by rope_theta and rope_scaling). */
static void local_rope(const float *scalars, struct ferry_op_call *c)
{
	memset(c->scalar, 0, sizeof(c->scalar));
	c->scalar[0] = scalars[FERRY_SCALAR_ROPE_LOCAL_THETA];
}

void ferry_op_call_shape(const struct ferry_layer_decl *decl, int o, const struct ferry_dims *dims,
			 const float *scalars, int layer, struct ferry_op_call *c)
{
	int n_scalars = 0;

	const struct ferry_op_decl *op = &decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	const struct ferry_shape *out0 = &decl->tensors[op->out[0]].shape;
	const struct ferry_shape *first = info->n_in ? &decl->tensors[op->in[0]].shape : out0;

	memset(c, 0, sizeof(*c));
	c->kind = op->kind;
	c->B = (int)dims->v[FERRY_DIM_B];
	c->T = (int)dims->v[FERRY_DIM_T];
	c->NH = (int)dims->v[FERRY_DIM_NH];
	c->V = (int)dims->v[FERRY_DIM_V];
	c->Vp = (int)dims->v[FERRY_DIM_VP];
	c->C = (int)ferry_shape_row_width(first, dims);
	c->OC = (int)ferry_shape_row_width(out0, dims);
	c->n = (long)ferry_layer_tensor_numel(decl, op->out[0], dims);
	c->NKV = (int)dims->v[FERRY_DIM_NKV];
	/* rotary embedding turns each head of its tensor: query or key/value heads */
	if (op->kind == FERRY_OP_ROPE && dims->v[FERRY_DIM_HS] > 0)
		c->NH = (int)(c->C / dims->v[FERRY_DIM_HS]);
	if (op->kind == FERRY_OP_RMSNORM)
		norm_groups(decl, op, dims, c);
	for (; op->scalar != FERRY_SCALAR_NONE && n_scalars < (info->n_scalars ? info->n_scalars : 1) &&
	       op->scalar + n_scalars < FERRY_OP_SCALAR_COUNT; n_scalars++)
		c->scalar[n_scalars] = scalars[op->scalar + n_scalars];
	if (op->k != 0.0f)
		c->scalar[info->n_scalars ? info->n_scalars : 1] = op->k;
	if (op->scalar == FERRY_SCALAR_ATTN_WINDOW && layer >= 0 && !ferry_window_at_layer(scalars, layer))
		c->scalar[0] = 0.0f;
	if (op->kind == FERRY_OP_ROPE && layer >= 0 && scalars[FERRY_SCALAR_ROPE_LOCAL_THETA] > 0 &&
	    ferry_window_at_layer(scalars, layer))
		local_rope(scalars, c);
}

size_t ferry_op_weight_view(const struct ferry_op_call *c, int slot)
{
	if (c->kind == FERRY_OP_MATMUL && slot == 0)
		return (size_t)c->OC * (size_t)c->C;
	return (size_t)c->OC;
}
