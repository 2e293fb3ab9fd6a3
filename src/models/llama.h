/*
 * The Llama family's declaration, shared (src/models/llama.c holds the
 * stages and the check): Llama, Qwen 2 and Mistral are one program over the
 * same tensors and parameters, and differ in values only.  A family gives
 * its layer with FERRY_LLAMA_LAYER (its name, the parameters of the q, k,
 * v biases or -1, and the model constant its attention reads: the sliding
 * window, or none) and its parameters with FERRY_LLAMA_PARAMS, a family's
 * own (Qwen 2's biases) after Llama's; FERRY_LLAMA_STAGES fills the rest.
 */
#ifndef FERRY_MODELS_LLAMA_H
#define FERRY_MODELS_LLAMA_H

#include "models/model_table.h"

/* Llama's parameters, in this order (the shared prologue and epilogue read
 * the embedding, the final norm and the head by index); a family appends
 * its own from FERRY_LLAMA_N_PARAMS. */
enum ferry_llama_param {
	FERRY_LLAMA_EMBED, FERRY_LLAMA_IN_NORM, FERRY_LLAMA_Q, FERRY_LLAMA_K, FERRY_LLAMA_V, FERRY_LLAMA_O,
	FERRY_LLAMA_POST_NORM, FERRY_LLAMA_GATE, FERRY_LLAMA_UP, FERRY_LLAMA_DOWN, FERRY_LLAMA_NORM,
	FERRY_LLAMA_LM_HEAD, FERRY_LLAMA_N_PARAMS
};

/* The layer's tensors, under MaxText's names. */
enum ferry_llama_tensor {
	FERRY_LT_X, FERRY_LT_LN1, FERRY_LT_LN1_RSTD, FERRY_LT_QR, FERRY_LT_KR, FERRY_LT_Q, FERRY_LT_K, FERRY_LT_V,
	FERRY_LT_CTX, FERRY_LT_LSE, FERRY_LT_OUT, FERRY_LT_MID, FERRY_LT_LN2, FERRY_LT_LN2_RSTD, FERRY_LT_GATE,
	FERRY_LT_UP, FERRY_LT_H, FERRY_LT_MLPWO, FERRY_LT_Y, FERRY_LT_N
};

#define FERRY_LL_SHAPE(...) { .d = { __VA_ARGS__ } }
#define FERRY_LL_BTC FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C)
#define FERRY_LL_BT FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_T)
#define FERRY_LL_BTX(x) FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_T, x)

/* Ops by kind: outputs, inputs, weights (parameter indices, -1: none). */
#define FERRY_LL_NONE { { -1, 0 }, { -1, 0 } }
#define FERRY_LL_RMSNORM(y, rstd, x, g) \
	{ FERRY_OP_RMSNORM, { y, rstd, -1 }, { x, -1, -1 }, { { g, 0 }, { -1, 0 } }, FERRY_SCALAR_NORM_EPS }
/* Gemma's RMSNorm, by 1 + w: the op's gain offset k = 1. */
#define FERRY_LL_RMSNORM_1W(y, rstd, x, g) \
	{ FERRY_OP_RMSNORM, { y, rstd, -1 }, { x, -1, -1 }, { { g, 0 }, { -1, 0 } }, FERRY_SCALAR_NORM_EPS, .k = 1.0f }
#define FERRY_LL_MATMUL(y, x, w, b) { FERRY_OP_MATMUL, { y, -1, -1 }, { x, -1, -1 }, { { w, 0 }, { b, 0 } } }
#define FERRY_LL_ROPE(y, x) { FERRY_OP_ROPE, { y, -1, -1 }, { x, -1, -1 }, FERRY_LL_NONE, FERRY_SCALAR_ROPE_THETA }
#define FERRY_LL_ATTENTION(ctx, lse, q, k, v, sc) \
	{ FERRY_OP_ATTENTION, { ctx, lse, -1 }, { q, k, v }, FERRY_LL_NONE, sc }
#define FERRY_LL_BINARY(kind, y, a, b) { kind, { y, -1, -1 }, { a, b, -1 }, FERRY_LL_NONE }

/* One Llama-family layer: RMSNorm, the q, k, v products (biases qb, kb, vb:
 * parameter indices, -1 for none), the rotary embedding, grouped-query
 * attention reading model constant attn (FERRY_SCALAR_NONE or
 * FERRY_SCALAR_ATTN_WINDOW), the output product, RMSNorm, the SwiGLU MLP,
 * two residuals. */
#define FERRY_LLAMA_LAYER(name, qb, kb, vb, attn) { \
	.model = name, \
	.n_tensors = FERRY_LT_N, \
	.tensors = { \
		[FERRY_LT_X] = { "decoder_layer_input", FERRY_LL_BTC }, \
		[FERRY_LT_LN1] = { "pre_self_attention_norm", FERRY_LL_BTC }, \
		[FERRY_LT_LN1_RSTD] = { "pre_self_attention_norm_rstd", FERRY_LL_BT }, \
		[FERRY_LT_QR] = { "query_unrotated", FERRY_LL_BTX(FERRY_DIM_QD) }, \
		[FERRY_LT_KR] = { "key_unrotated", FERRY_LL_BTX(FERRY_DIM_KVD) }, \
		[FERRY_LT_Q] = { "query_proj", FERRY_LL_BTX(FERRY_DIM_QD) }, \
		[FERRY_LT_K] = { "key_proj", FERRY_LL_BTX(FERRY_DIM_KVD) }, \
		[FERRY_LT_V] = { "value_proj", FERRY_LL_BTX(FERRY_DIM_KVD) }, \
		[FERRY_LT_CTX] = { "context", FERRY_LL_BTX(FERRY_DIM_QD) }, \
		[FERRY_LT_LSE] = { "attention_lse", FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_NH, FERRY_DIM_T) }, \
		[FERRY_LT_OUT] = { "out_proj", FERRY_LL_BTC }, \
		[FERRY_LT_MID] = { "post_self_attention_residual", FERRY_LL_BTC }, \
		[FERRY_LT_LN2] = { "post_self_attention_norm", FERRY_LL_BTC }, \
		[FERRY_LT_LN2_RSTD] = { "post_self_attention_norm_rstd", FERRY_LL_BT }, \
		[FERRY_LT_GATE] = { "mlpwi_0", FERRY_LL_BTX(FERRY_DIM_FFN) }, \
		[FERRY_LT_UP] = { "mlpwi_1", FERRY_LL_BTX(FERRY_DIM_FFN) }, \
		[FERRY_LT_H] = { "mlpwi", FERRY_LL_BTX(FERRY_DIM_FFN) }, \
		[FERRY_LT_MLPWO] = { "mlpwo", FERRY_LL_BTC }, \
		[FERRY_LT_Y] = { "decoder_layer_output", FERRY_LL_BTC }, \
	}, \
	.n_ops = 15, \
	.ops = { \
		FERRY_LL_RMSNORM(FERRY_LT_LN1, FERRY_LT_LN1_RSTD, FERRY_LT_X, FERRY_LLAMA_IN_NORM), \
		FERRY_LL_MATMUL(FERRY_LT_QR, FERRY_LT_LN1, FERRY_LLAMA_Q, qb), \
		FERRY_LL_MATMUL(FERRY_LT_KR, FERRY_LT_LN1, FERRY_LLAMA_K, kb), \
		FERRY_LL_MATMUL(FERRY_LT_V, FERRY_LT_LN1, FERRY_LLAMA_V, vb), \
		FERRY_LL_ROPE(FERRY_LT_Q, FERRY_LT_QR), \
		FERRY_LL_ROPE(FERRY_LT_K, FERRY_LT_KR), \
		FERRY_LL_ATTENTION(FERRY_LT_CTX, FERRY_LT_LSE, FERRY_LT_Q, FERRY_LT_K, FERRY_LT_V, attn), \
		FERRY_LL_MATMUL(FERRY_LT_OUT, FERRY_LT_CTX, FERRY_LLAMA_O, -1), \
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, FERRY_LT_MID, FERRY_LT_X, FERRY_LT_OUT), \
		FERRY_LL_RMSNORM(FERRY_LT_LN2, FERRY_LT_LN2_RSTD, FERRY_LT_MID, FERRY_LLAMA_POST_NORM), \
		FERRY_LL_MATMUL(FERRY_LT_GATE, FERRY_LT_LN2, FERRY_LLAMA_GATE, -1), \
		FERRY_LL_MATMUL(FERRY_LT_UP, FERRY_LT_LN2, FERRY_LLAMA_UP, -1), \
		FERRY_LL_BINARY(FERRY_OP_SWIGLU, FERRY_LT_H, FERRY_LT_GATE, FERRY_LT_UP), \
		FERRY_LL_MATMUL(FERRY_LT_MLPWO, FERRY_LT_H, FERRY_LLAMA_DOWN, -1), \
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, FERRY_LT_Y, FERRY_LT_MID, FERRY_LT_MLPWO), \
	}, \
	.input = FERRY_LT_X, \
	.output = FERRY_LT_Y, \
}

/* One parameter: short name, Hugging Face name ("%d": the layer), one
 * layer's shape, stacked per layer, decayed, initialised how. */
#define FERRY_LL_P(name, hf, shape, per_layer, decay, init) { name, hf, shape, per_layer, decay, init }
#define FERRY_LL_LAYER_P(name, hf, shape, decay, init) { name, "model.layers.%d." hf, shape, true, decay, init }

/* Llama's parameters under Hugging Face's names, [out, in] layout: the
 * initialisers of params[0 .. FERRY_LLAMA_N_PARAMS), the norms' gains
 * starting at 1 (Gemma's, which scale by 1 + w, at 0: FERRY_LLAMA_PARAMS_AS). */
#define FERRY_LLAMA_PARAMS FERRY_LLAMA_PARAMS_AS(FERRY_INIT_ONE)
#define FERRY_LLAMA_PARAMS_AS(gain_init) \
	[FERRY_LLAMA_EMBED] = { "embed_tokens", "model.embed_tokens.weight", \
				FERRY_LL_SHAPE(FERRY_DIM_VP, FERRY_DIM_C), false, true, FERRY_INIT_NORMAL, \
				.zero_pad_rows = true }, \
	[FERRY_LLAMA_IN_NORM] = FERRY_LL_LAYER_P("input_layernorm", "input_layernorm.weight", \
						 FERRY_LL_SHAPE(FERRY_DIM_C), false, gain_init), \
	[FERRY_LLAMA_Q] = FERRY_LL_LAYER_P("q_proj", "self_attn.q_proj.weight", \
					   FERRY_LL_SHAPE(FERRY_DIM_QD, FERRY_DIM_C), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_K] = FERRY_LL_LAYER_P("k_proj", "self_attn.k_proj.weight", \
					   FERRY_LL_SHAPE(FERRY_DIM_KVD, FERRY_DIM_C), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_V] = FERRY_LL_LAYER_P("v_proj", "self_attn.v_proj.weight", \
					   FERRY_LL_SHAPE(FERRY_DIM_KVD, FERRY_DIM_C), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_O] = FERRY_LL_LAYER_P("o_proj", "self_attn.o_proj.weight", \
					   FERRY_LL_SHAPE(FERRY_DIM_C, FERRY_DIM_QD), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_POST_NORM] = FERRY_LL_LAYER_P("post_attention_layernorm", "post_attention_layernorm.weight", \
						   FERRY_LL_SHAPE(FERRY_DIM_C), false, gain_init), \
	[FERRY_LLAMA_GATE] = FERRY_LL_LAYER_P("gate_proj", "mlp.gate_proj.weight", \
					      FERRY_LL_SHAPE(FERRY_DIM_FFN, FERRY_DIM_C), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_UP] = FERRY_LL_LAYER_P("up_proj", "mlp.up_proj.weight", \
					    FERRY_LL_SHAPE(FERRY_DIM_FFN, FERRY_DIM_C), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_DOWN] = FERRY_LL_LAYER_P("down_proj", "mlp.down_proj.weight", \
					      FERRY_LL_SHAPE(FERRY_DIM_C, FERRY_DIM_FFN), true, FERRY_INIT_NORMAL), \
	[FERRY_LLAMA_NORM] = FERRY_LL_P("norm", "model.norm.weight", FERRY_LL_SHAPE(FERRY_DIM_C), false, false, \
					gain_init), \
	[FERRY_LLAMA_LM_HEAD] = { "lm_head", "lm_head.weight", FERRY_LL_SHAPE(FERRY_DIM_VP, FERRY_DIM_C), false, \
				  true, FERRY_INIT_NORMAL, .zero_pad_rows = true, .tied_head = true, \
				  .tied_to = FERRY_LLAMA_EMBED }

/* What every Llama-family declaration shares: its checkpoint, prologue
 * (the token embedding), epilogue (final RMSNorm, LM head, loss), their
 * roles and the configuration check. */
#define FERRY_LLAMA_STAGES \
	.ckpt = FERRY_CKPT_HF, \
	.prologue = &ferry_llama_prologue, \
	.epilogue = &ferry_llama_epilogue, \
	.prologue_roles = ferry_llama_prologue_roles, \
	.epilogue_roles = ferry_llama_epilogue_roles, \
	.config_check = ferry_llama_config_check

extern const struct ferry_layer_decl ferry_llama_prologue, ferry_llama_epilogue;
extern const struct ferry_stage_tensor ferry_llama_prologue_roles[], ferry_llama_epilogue_roles[];

/* Gemma's norms before and after the MLP (gains w of its (1 + w) rule, zero at start),
 * as parameters pre and post. */
#define FERRY_GEMMA_FFW_NORMS(pre, post) \
	[pre] = FERRY_LL_LAYER_P("pre_feedforward_layernorm", "pre_feedforward_layernorm.weight", \
				 FERRY_LL_SHAPE(FERRY_DIM_C), false, FERRY_INIT_ZERO), \
	[post] = FERRY_LL_LAYER_P("post_feedforward_layernorm", "post_feedforward_layernorm.weight", \
				  FERRY_LL_SHAPE(FERRY_DIM_C), false, FERRY_INIT_ZERO)

/* Gemma's query_pre_attn_scalar: the head size when not given, else
 * positive and at most 2^24 (gemma2.c). */
ferry_status ferry_gemma_scalar_check(struct ferry_model_config *cfg);

/* Gemma's prologue (gemma2.c): the token embedding times sqrt(C). */
extern const struct ferry_layer_decl ferry_gemma_prologue;
extern const struct ferry_stage_tensor ferry_gemma_prologue_roles[];

/* Llama's defaults and checks (kv heads, head size, MLP width, epsilon,
 * theta, rope scaling). */
ferry_status ferry_llama_config_check(struct ferry_model_config *cfg);

/* The rotary scaling alone: none, linear (factor) or llama3 (all four). */
ferry_status ferry_llama_rope_scaling_check(const struct ferry_rope_scaling *r);

#endif
