/* Finding a program's tileable runs of ops (row_tiles.h). */
#include "graph/row_tiles.h"
#include "core/error.h"

/* Whether op o reads tensor t. */
static bool reads(const struct ferry_layer_decl *d, int o, int t)
{
	const struct ferry_op_info *info = ferry_op_info(d->ops[o].kind);

	for (int i = 0; i < info->n_in; i++)
		if (d->ops[o].in[i] == t)
			return true;
	return false;
}

static bool rows_first(const struct ferry_layer_decl *d, int t)
{
	const struct ferry_shape *s = &d->tensors[t].shape;

	return s->d[0] == FERRY_DIM_B && s->d[1] == FERRY_DIM_T && (s->k == 0 || s->k == 1);
}

/* Ops first..last as a run: each row by row over [B, T, ...] tensors;
 * its inner tensors are the outputs that some op of the run reads and no
 * op after it does (nor the program's output). */
static ferry_status run_of(const struct ferry_layer_decl *d, const struct ferry_dims *dims, int first, int last,
			   const char *what, struct ferry_row_tiles *r)
{
	*r = (struct ferry_row_tiles){ first, last, 0, 0 };
	for (int o = first; o <= last; o++) {
		const struct ferry_op_decl *op = &d->ops[o];
		const struct ferry_op_info *info = ferry_op_info(op->kind);

		if (!info->rows)
			return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s cannot be tiled: its op %d (%s) does not "
					   "compute each token alone", d->model, what, o, info->name);
		for (int i = 0; i < info->n_in; i++)
			if (!rows_first(d, op->in[i]))
				return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s cannot be tiled: '%s' is not [B, T, ...]",
						   d->model, what, d->tensors[op->in[i]].name);
		for (int i = 0; i < info->n_out; i++) {
			int t = op->out[i];
			bool inside = false, outside = t == d->output;

			for (int u = 0; u < d->n_ops; u++) {
				if (reads(d, u, t) && u >= first && u <= last)
					inside = true;
				else if (reads(d, u, t))
					outside = true;
			}
			if (!rows_first(d, t))
				return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s cannot be tiled: '%s' is not [B, T, ...]",
						   d->model, what, d->tensors[t].name);
			if (inside && !outside)
				r->inner |= 1u << t;
		}
	}
	r->width = ferry_shape_row_width(&d->tensors[d->ops[first].in[0]].shape, dims);
	return FERRY_OK;
}

static bool has_dim(const struct ferry_shape *s, enum ferry_dim dim)
{
	for (int i = 0; i < FERRY_SHAPE_MAX_DIMS && s->d[i] != FERRY_DIM_NONE; i++)
		if (s->d[i] == dim)
			return true;
	return false;
}

ferry_status ferry_layer_mlp_tiles(const struct ferry_layer_decl *d, const struct ferry_dims *dims,
				   struct ferry_row_tiles *out)
{
	int first = -1, last = -1;

	for (int o = 0; o < d->n_ops; o++) {
		const struct ferry_op_info *info = ferry_op_info(d->ops[o].kind);
		bool wide = false;

		for (int i = 0; i < info->n_in; i++)
			wide |= has_dim(&d->tensors[d->ops[o].in[i]].shape, FERRY_DIM_FFN);
		for (int i = 0; i < info->n_out; i++)
			wide |= has_dim(&d->tensors[d->ops[o].out[i]].shape, FERRY_DIM_FFN);
		if (wide && first >= 0 && last != o - 1)
			return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: the MLP's ops are not consecutive: it cannot be "
					   "tiled", d->model);
		if (wide) {
			first = first < 0 ? o : first;
			last = o;
		}
	}
	if (first < 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: no MLP (no tensor of the hidden width) to tile",
				   d->model);
	return run_of(d, dims, first, last, "the MLP", out);
}

/* Whether op o is a one-input op whose output op o + 1 reads first (a
 * link of a chain from the head's product to the loss). */
static bool feeds_next(const struct ferry_layer_decl *d, int o)
{
	return o + 1 < d->n_ops && d->ops[o].out[0] == d->ops[o + 1].in[0];
}

/* The LM head and the loss: a matrix product, then ops that each read
 * the one before's output row by row (Gemma 2's soft cap of the logits),
 * then the softmax cross-entropy; every output but the loss's made and
 * read only there. */
ferry_status ferry_layer_loss_tiles(const struct ferry_layer_decl *d, const struct ferry_dims *dims,
				    struct ferry_row_tiles *out)
{
	for (int o = 1; o < d->n_ops; o++) {
		int mm = o - 1;
		bool inner = true;

		if (d->ops[o].kind != FERRY_OP_SOFTMAX_XENT)
			continue;
		while (mm > 0 && d->ops[mm].kind != FERRY_OP_MATMUL && ferry_op_info(d->ops[mm].kind)->n_in == 1 &&
		       feeds_next(d, mm))
			mm--;
		if (d->ops[mm].kind != FERRY_OP_MATMUL || !feeds_next(d, mm) ||
		    run_of(d, dims, mm, o, "the loss", out) != FERRY_OK)
			continue;
		for (int u = mm; u < o; u++)
			inner &= ferry_row_tiles_inner(out, d->ops[u].out[0]);
		if (inner)
			return FERRY_OK;
	}
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: no matrix product feeding the loss alone: the loss cannot be "
			   "tiled", d->model);
}

int ferry_row_tiles_rows(const struct ferry_row_tiles *r, int asked, int64_t n)
{
	int64_t w = r->width > 0 ? r->width : 1, k = (n + w - 1) / w;

	if (asked >= 0)
		return (int)(asked < n ? asked : n);
	return (int)((n + k - 1) / k);
}

bool ferry_row_tiles_makes_inner(const struct ferry_row_tiles *r, const struct ferry_layer_decl *d, int o)
{
	const struct ferry_op_info *info = ferry_op_info(d->ops[o].kind);

	for (int i = 0; i < info->n_out; i++)
		if (ferry_row_tiles_inner(r, d->ops[o].out[i]))
			return true;
	return false;
}
