/*
 * GPT-2's transformer block, declared as data.  Tensor names follow JAX /
 * MaxText checkpoint names where they exist (decoder_layer_input,
 * query_proj, key_proj, value_proj, context, out_proj, mlpwi, mlpwo).  The
 * fused QKV projection is three matrix products over the row blocks of
 * qkvw, so query, key and value are separate, separately placeable tensors.
 */
#include "models/gpt2_internal.h"

enum {
	X, LN1, LN1_MEAN, LN1_RSTD, Q, K, V_, CTX, LSE, OUT_PROJ, MID,
	LN2, LN2_MEAN, LN2_RSTD, MLPWI, MLP_ACT, MLPWO, Y, N_TENSORS
};

#define W(p, r) { FERRY_GPT2_##p, r }
#define NOW { -1, 0 }

const struct ferry_layer_decl ferry_gpt2_layer = {
	.model = "gpt2",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", FERRY_SHAPE_N_C },
		[LN1] = { "pre_attention_norm", FERRY_SHAPE_N_C },
		[LN1_MEAN] = { "pre_attention_norm_mean", FERRY_SHAPE_N },
		[LN1_RSTD] = { "pre_attention_norm_rstd", FERRY_SHAPE_N },
		[Q] = { "query_proj", FERRY_SHAPE_N_C },
		[K] = { "key_proj", FERRY_SHAPE_N_C },
		[V_] = { "value_proj", FERRY_SHAPE_N_C },
		[CTX] = { "context", FERRY_SHAPE_N_C },
		[LSE] = { "attention_lse", FERRY_SHAPE_B_NH_T },
		[OUT_PROJ] = { "out_proj", FERRY_SHAPE_N_C },
		[MID] = { "post_attention_residual", FERRY_SHAPE_N_C },
		[LN2] = { "pre_mlp_norm", FERRY_SHAPE_N_C },
		[LN2_MEAN] = { "pre_mlp_norm_mean", FERRY_SHAPE_N },
		[LN2_RSTD] = { "pre_mlp_norm_rstd", FERRY_SHAPE_N },
		[MLPWI] = { "mlpwi", FERRY_SHAPE_N_4C },
		[MLP_ACT] = { "mlp_activation", FERRY_SHAPE_N_4C },
		[MLPWO] = { "mlpwo", FERRY_SHAPE_N_C },
		[Y] = { "decoder_layer_output", FERRY_SHAPE_N_C },
	},
	.n_ops = 12,
	.ops = {
		{ FERRY_OP_LAYERNORM, { LN1, LN1_MEAN, LN1_RSTD }, { X, -1, -1 }, { W(LN1W, 0), W(LN1B, 0) }, 0, 0 },
		/* the C-row blocks of qkvw (and of qkvb) are query, key, value */
		{ FERRY_OP_MATMUL, { Q, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 0), W(QKVB, 0) }, 1, 1 },
		{ FERRY_OP_MATMUL, { K, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 1), W(QKVB, 1) }, 1, 1 },
		{ FERRY_OP_MATMUL, { V_, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 2), W(QKVB, 2) }, 1, 1 },
		{ FERRY_OP_ATTENTION, { CTX, LSE, -1 }, { Q, K, V_ }, { NOW, NOW }, 0, 0 },
		{ FERRY_OP_MATMUL, { OUT_PROJ, -1, -1 }, { CTX, -1, -1 }, { W(ATTPROJW, 0), W(ATTPROJB, 0) }, 1, 1 },
		{ FERRY_OP_RESIDUAL, { MID, -1, -1 }, { X, OUT_PROJ, -1 }, { NOW, NOW }, 0, 0 },
		{ FERRY_OP_LAYERNORM, { LN2, LN2_MEAN, LN2_RSTD }, { MID, -1, -1 }, { W(LN2W, 0), W(LN2B, 0) }, 0, 0 },
		{ FERRY_OP_MATMUL, { MLPWI, -1, -1 }, { LN2, -1, -1 }, { W(FCW, 0), W(FCB, 0) }, 1, 4 },
		{ FERRY_OP_GELU, { MLP_ACT, -1, -1 }, { MLPWI, -1, -1 }, { NOW, NOW }, 0, 0 },
		{ FERRY_OP_MATMUL, { MLPWO, -1, -1 }, { MLP_ACT, -1, -1 }, { W(FCPROJW, 0), W(FCPROJB, 0) }, 4, 1 },
		{ FERRY_OP_RESIDUAL, { Y, -1, -1 }, { MID, MLPWO, -1 }, { NOW, NOW }, 0, 0 },
	},
	.input = X,
	.output = Y,
};
