/*
 * Mistral, declared (transformers' MistralForCausalLM): Llama's program,
 * tensor for tensor and parameter for parameter under the same names, with
 * sliding-window attention: query t attends to the last sliding_window keys,
 * itself included (t - W < t2 <= t, transformers' sliding-window causal
 * mask), on every layer.  The window reaches the attention op as a model
 * constant (FERRY_SCALAR_ATTN_WINDOW, the model config's sliding_window;
 * 0: full attention, as config.json's null).  Mistral 7B v0.1 has a window
 * of 4096; v0.2 and v0.3 have none (null), which is Llama's arithmetic.
 *
 * Its prologue, epilogue and configuration check are Llama's, shared
 * through models/llama.h; the layer differs from Llama's in one op's
 * constant, the parameters not at all.
 */
#include "models/llama.h"

enum {
	EMBED, IN_NORM, Q_PROJ, K_PROJ, V_PROJ, O_PROJ, POST_NORM, GATE, UP, DOWN, NORM, LM_HEAD, N_PARAMS
};
_Static_assert(EMBED == FERRY_LLAMA_PARAM_EMBED && NORM == FERRY_LLAMA_PARAM_NORM &&
		       LM_HEAD == FERRY_LLAMA_PARAM_LM_HEAD && N_PARAMS == FERRY_LLAMA_N_PARAMS,
	       "Llama's parameters, in Llama's order");

#define B_ FERRY_DIM_B
#define T_ FERRY_DIM_T
#define C_ FERRY_DIM_C
#define F_ FERRY_DIM_FFN
#define SHAPE(...) { .d = { __VA_ARGS__ } }
#define BTC SHAPE(B_, T_, C_)
#define BT SHAPE(B_, T_)
#define W(p) { { p, 0 }, { -1, 0 } }
#define NOW { { -1, 0 }, { -1, 0 } }

enum {
	X, LN1, LN1_RSTD, QR, KR, Q, K, V_, CTX, LSE, OUT, MID, LN2, LN2_RSTD,
	GATE_OUT, UP_OUT, H, MLPWO, Y, N_TENSORS
};

/* Llama's layer, tensor for tensor (MaxText's names), its attention
 * reading the window. */
static const struct ferry_layer_decl layer = {
	.model = "mistral",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_self_attention_norm", BTC },
		[LN1_RSTD] = { "pre_self_attention_norm_rstd", BT },
		[QR] = { "query_unrotated", SHAPE(B_, T_, FERRY_DIM_QD) },
		[KR] = { "key_unrotated", SHAPE(B_, T_, FERRY_DIM_KVD) },
		[Q] = { "query_proj", SHAPE(B_, T_, FERRY_DIM_QD) },
		[K] = { "key_proj", SHAPE(B_, T_, FERRY_DIM_KVD) },
		[V_] = { "value_proj", SHAPE(B_, T_, FERRY_DIM_KVD) },
		[CTX] = { "context", SHAPE(B_, T_, FERRY_DIM_QD) },
		[LSE] = { "attention_lse", SHAPE(B_, FERRY_DIM_NH, T_) },
		[OUT] = { "out_proj", BTC },
		[MID] = { "post_self_attention_residual", BTC },
		[LN2] = { "post_self_attention_norm", BTC },
		[LN2_RSTD] = { "post_self_attention_norm_rstd", BT },
		[GATE_OUT] = { "mlpwi_0", SHAPE(B_, T_, F_) },
		[UP_OUT] = { "mlpwi_1", SHAPE(B_, T_, F_) },
		[H] = { "mlpwi", SHAPE(B_, T_, F_) },
		[MLPWO] = { "mlpwo", BTC },
		[Y] = { "decoder_layer_output", BTC },
	},
	.n_ops = 15,
	.ops = {
		{ FERRY_OP_RMSNORM, { LN1, LN1_RSTD, -1 }, { X, -1, -1 }, W(IN_NORM), FERRY_SCALAR_NORM_EPS },
		{ FERRY_OP_MATMUL, { QR, -1, -1 }, { LN1, -1, -1 }, W(Q_PROJ) },
		{ FERRY_OP_MATMUL, { KR, -1, -1 }, { LN1, -1, -1 }, W(K_PROJ) },
		{ FERRY_OP_MATMUL, { V_, -1, -1 }, { LN1, -1, -1 }, W(V_PROJ) },
		{ FERRY_OP_ROPE, { Q, -1, -1 }, { QR, -1, -1 }, NOW, FERRY_SCALAR_ROPE_THETA },
		{ FERRY_OP_ROPE, { K, -1, -1 }, { KR, -1, -1 }, NOW, FERRY_SCALAR_ROPE_THETA },
		{ FERRY_OP_ATTENTION, { CTX, LSE, -1 }, { Q, K, V_ }, NOW, FERRY_SCALAR_ATTN_WINDOW },
		{ FERRY_OP_MATMUL, { OUT, -1, -1 }, { CTX, -1, -1 }, W(O_PROJ) },
		{ FERRY_OP_RESIDUAL, { MID, -1, -1 }, { X, OUT, -1 }, NOW },
		{ FERRY_OP_RMSNORM, { LN2, LN2_RSTD, -1 }, { MID, -1, -1 }, W(POST_NORM), FERRY_SCALAR_NORM_EPS },
		{ FERRY_OP_MATMUL, { GATE_OUT, -1, -1 }, { LN2, -1, -1 }, W(GATE) },
		{ FERRY_OP_MATMUL, { UP_OUT, -1, -1 }, { LN2, -1, -1 }, W(UP) },
		{ FERRY_OP_SWIGLU, { H, -1, -1 }, { GATE_OUT, UP_OUT, -1 }, NOW },
		{ FERRY_OP_MATMUL, { MLPWO, -1, -1 }, { H, -1, -1 }, W(DOWN) },
		{ FERRY_OP_RESIDUAL, { Y, -1, -1 }, { MID, MLPWO, -1 }, NOW },
	},
	.input = X,
	.output = Y,
};

/* MistralConfig's defaults (transformers): its sliding_window (4096 when
 * config.json leaves it out, none when it says null) acts on every layer
 * whenever it is set. */
static const struct ferry_hf_family mistral_hf = {
	.model_type = "mistral",
	.architecture = "MistralForCausalLM",
	.title = "Mistral",
	.vocab_size = 32000,
	.hidden_size = 4096,
	.intermediate_size = 14336,
	.num_hidden_layers = 32,
	.num_attention_heads = 32,
	.max_position_embeddings = 4096 * 32,
	.rope_theta = 10000.0,
	.rms_norm_eps = 1e-6,
	.sliding_window = 4096,
};

#define P(name, hf, shape, per_layer, decay, init) { name, hf, shape, per_layer, decay, init }
const struct ferry_model_decl ferry_mistral_decl = {
	.name = "mistral",
	.title = "Mistral",
	.ckpt = FERRY_CKPT_HF,
	.hf = &mistral_hf,
	.n_params = N_PARAMS,
	.params = {
		[EMBED] = { "embed_tokens", "model.embed_tokens.weight", SHAPE(FERRY_DIM_VP, C_), false, true,
			    FERRY_INIT_NORMAL, .zero_pad_rows = true },
		[IN_NORM] = P("input_layernorm", "model.layers.%d.input_layernorm.weight", SHAPE(C_), true, false,
			      FERRY_INIT_ONE),
		[Q_PROJ] = P("q_proj", "model.layers.%d.self_attn.q_proj.weight", SHAPE(FERRY_DIM_QD, C_), true,
			     true, FERRY_INIT_NORMAL),
		[K_PROJ] = P("k_proj", "model.layers.%d.self_attn.k_proj.weight", SHAPE(FERRY_DIM_KVD, C_), true,
			     true, FERRY_INIT_NORMAL),
		[V_PROJ] = P("v_proj", "model.layers.%d.self_attn.v_proj.weight", SHAPE(FERRY_DIM_KVD, C_), true,
			     true, FERRY_INIT_NORMAL),
		[O_PROJ] = P("o_proj", "model.layers.%d.self_attn.o_proj.weight", SHAPE(C_, FERRY_DIM_QD), true,
			     true, FERRY_INIT_NORMAL),
		[POST_NORM] = P("post_attention_layernorm", "model.layers.%d.post_attention_layernorm.weight",
				SHAPE(C_), true, false, FERRY_INIT_ONE),
		[GATE] = P("gate_proj", "model.layers.%d.mlp.gate_proj.weight", SHAPE(F_, C_), true, true,
			   FERRY_INIT_NORMAL),
		[UP] = P("up_proj", "model.layers.%d.mlp.up_proj.weight", SHAPE(F_, C_), true, true,
			 FERRY_INIT_NORMAL),
		[DOWN] = P("down_proj", "model.layers.%d.mlp.down_proj.weight", SHAPE(C_, F_), true, true,
			   FERRY_INIT_NORMAL),
		[NORM] = P("norm", "model.norm.weight", SHAPE(C_), false, false, FERRY_INIT_ONE),
		[LM_HEAD] = { "lm_head", "lm_head.weight", SHAPE(FERRY_DIM_VP, C_), false, true, FERRY_INIT_NORMAL,
			      .zero_pad_rows = true, .tied_head = true, .tied_to = EMBED },
	},
	.prologue = &ferry_llama_prologue,
	.layer = &layer,
	.epilogue = &ferry_llama_epilogue,
	.prologue_roles = ferry_llama_prologue_roles,
	.epilogue_roles = ferry_llama_epilogue_roles,
	.config_check = ferry_llama_config_check,
};
