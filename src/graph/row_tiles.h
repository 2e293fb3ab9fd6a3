/*
 * Row tiles: a run of a declared program's ops that compute each token's
 * row from the same row alone (ferry_op_info's rows) may run over a tile
 * of rows at a time.  The tensors the run makes and only it reads (its
 * inner tensors: the MLP's hidden activations, the logits) then exist for
 * one tile's rows only; its inputs and outputs keep every row.
 *
 * Two runs are tiled: the layer's MLP (the ops that make or read a tensor
 * of the hidden width, FERRY_DIM_FFN) and an epilogue's LM head and loss
 * (the matrix product whose output only the softmax cross-entropy reads,
 * directly or through one-input row-by-row ops: Gemma 2's soft cap).
 * Nothing here knows a model; the declarations say which ops these are.
 */
#ifndef FERRY_GRAPH_ROW_TILES_H
#define FERRY_GRAPH_ROW_TILES_H

#include "graph/layer.h"

struct ferry_row_tiles {
	int first, last;       /* its ops, first..last in forward order */
	unsigned inner;        /* bit t: tensor t is made and read only inside */
	int64_t width;         /* the row width of the run's first input */
};

/* The layer's MLP.  Errors (the message names the model): no tensor of
 * the hidden width, or ops that are not consecutive and row by row. */
ferry_status ferry_layer_mlp_tiles(const struct ferry_layer_decl *d, const struct ferry_dims *dims,
				   struct ferry_row_tiles *out) FERRY_MUST_CHECK;

/* An epilogue's LM head and loss: a matrix product and the softmax
 * cross-entropy that alone reads its output, or reads it through a chain
 * of one-input row-by-row ops (a soft cap), each of whose outputs only the
 * next reads.  Errors: the program has no such run. */
ferry_status ferry_layer_loss_tiles(const struct ferry_layer_decl *d, const struct ferry_dims *dims,
				    struct ferry_row_tiles *out) FERRY_MUST_CHECK;

/* Tokens per tile for n rows: `asked` (at most n), or for asked < 0 (the
 * plan's choice, FERRY_TILE_AUTO) about `width` (the run's input's row width, the model's width C): n
 * split evenly into ceil(n / width) tiles.  A tile's inner tensors then
 * hold C rows whatever the length (Llama 3 8B: 1 GiB of bf16 logits, 336
 * MiB of hidden activations), and its matrix products have C rows or
 * more, about as fast per row as the whole's. */
int ferry_row_tiles_rows(const struct ferry_row_tiles *r, int asked, int64_t n);

/* Whether tensor t is tiled in the run: inner (one tile's rows). */
static inline bool ferry_row_tiles_inner(const struct ferry_row_tiles *r, int t)
{
	return t >= 0 && (r->inner & (1u << t));
}

/* Whether op o writes an inner tensor of the run (so a tile's backward
 * makes it again first). */
bool ferry_row_tiles_makes_inner(const struct ferry_row_tiles *r, const struct ferry_layer_decl *d, int o);

#endif
