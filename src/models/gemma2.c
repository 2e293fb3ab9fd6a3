/*
 * Gemma 2, declared (transformers' Gemma2ForCausalLM): Llama's parameters
 * and attention, and around them:
 *
 *   - every RMSNorm scales by 1 + w (its gains start at 0): the rmsnorm
 *     op's gain offset, k = 1;
 *   - norms before and after the attention and the MLP: four per layer, the
 *     post-norms on the branch before its residual;
 *   - GeGLU (gelu_pytorch_tanh) for SwiGLU;
 *   - the embedding times sqrt(C), in the activation type (transformers'
 *     normalizer, cast to the model's dtype);
 *   - scores scaled by query_pre_attn_scalar^-1/2, its own head size
 *     (head_dim, not C / heads), and soft-capped: s -> 50 tanh(s / 50);
 *   - a sliding window on the even layers (transformers: layer_idx % 2 ==
 *     0 is sliding), full attention on the odd ones;
 *   - the logits soft-capped (30) before the loss; the head tied.
 *
 * The soft-capped logits need their input in the backward (the softmax
 * writes its probabilities over its own input), so the epilogue holds two
 * [B, T, V] buffers, the uncapped logits and the capped ones.
 */
#include "models/llama.h"
#include "core/error.h"

#include <math.h>

enum { PRE_FFW = FERRY_LLAMA_N_PARAMS, POST_FFW, N_PARAMS };

enum {
	X, LN1, LN1_RSTD, QR, KR, Q, K, V_, CTX, LSE, OUT, ATT_N, ATT_N_RSTD, MID, LN2, LN2_RSTD, GATE_OUT,
	UP_OUT, H, MLPWO, FFN_N, FFN_N_RSTD, Y, N_TENSORS
};

#define SHAPE FERRY_LL_SHAPE
#define BTC FERRY_LL_BTC
#define BT FERRY_LL_BT
#define BTX FERRY_LL_BTX
#define NORM1 FERRY_LL_RMSNORM_1W

static const struct ferry_layer_decl layer = {
	.model = "gemma2",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_self_attention_norm", BTC },
		[LN1_RSTD] = { "pre_self_attention_norm_rstd", BT },
		[QR] = { "query_unrotated", BTX(FERRY_DIM_QD) },
		[KR] = { "key_unrotated", BTX(FERRY_DIM_KVD) },
		[Q] = { "query_proj", BTX(FERRY_DIM_QD) },
		[K] = { "key_proj", BTX(FERRY_DIM_KVD) },
		[V_] = { "value_proj", BTX(FERRY_DIM_KVD) },
		[CTX] = { "context", BTX(FERRY_DIM_QD) },
		[LSE] = { "attention_lse", SHAPE(FERRY_DIM_B, FERRY_DIM_NH, FERRY_DIM_T) },
		[OUT] = { "out_proj", BTC },
		[ATT_N] = { "post_self_attention_norm", BTC },
		[ATT_N_RSTD] = { "post_self_attention_norm_rstd", BT },
		[MID] = { "post_self_attention_residual", BTC },
		[LN2] = { "pre_ffw_norm", BTC },
		[LN2_RSTD] = { "pre_ffw_norm_rstd", BT },
		[GATE_OUT] = { "mlpwi_0", BTX(FERRY_DIM_FFN) },
		[UP_OUT] = { "mlpwi_1", BTX(FERRY_DIM_FFN) },
		[H] = { "mlpwi", BTX(FERRY_DIM_FFN) },
		[MLPWO] = { "mlpwo", BTC },
		[FFN_N] = { "post_ffw_norm", BTC },
		[FFN_N_RSTD] = { "post_ffw_norm_rstd", BT },
		[Y] = { "decoder_layer_output", BTC },
	},
	.n_ops = 17,
	.ops = {
		NORM1(LN1, LN1_RSTD, X, FERRY_LLAMA_IN_NORM),
		FERRY_LL_MATMUL(QR, LN1, FERRY_LLAMA_Q, -1),
		FERRY_LL_MATMUL(KR, LN1, FERRY_LLAMA_K, -1),
		FERRY_LL_MATMUL(V_, LN1, FERRY_LLAMA_V, -1),
		FERRY_LL_ROPE(Q, QR),
		FERRY_LL_ROPE(K, KR),
		FERRY_LL_ATTENTION(CTX, LSE, Q, K, V_, FERRY_SCALAR_ATTN_WINDOW),
		FERRY_LL_MATMUL(OUT, CTX, FERRY_LLAMA_O, -1),
		NORM1(ATT_N, ATT_N_RSTD, OUT, FERRY_LLAMA_POST_NORM),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, MID, X, ATT_N),
		NORM1(LN2, LN2_RSTD, MID, PRE_FFW),
		FERRY_LL_MATMUL(GATE_OUT, LN2, FERRY_LLAMA_GATE, -1),
		FERRY_LL_MATMUL(UP_OUT, LN2, FERRY_LLAMA_UP, -1),
		FERRY_LL_BINARY(FERRY_OP_GEGLU, H, GATE_OUT, UP_OUT),
		FERRY_LL_MATMUL(MLPWO, H, FERRY_LLAMA_DOWN, -1),
		NORM1(FFN_N, FFN_N_RSTD, MLPWO, POST_FFW),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, Y, MID, FFN_N),
	},
	.input = X,
	.output = Y,
};

/* ---- prologue: the token embedding times sqrt(C) ---------------------------------- */

enum { P_TOKENS, P_RAW, P_EMBED, P_N };

ferry_status ferry_gemma_scalar_check(struct ferry_model_config *cfg)
{
	if (!cfg->query_pre_attn_scalar)
		cfg->query_pre_attn_scalar = cfg->head_size;
	if (cfg->query_pre_attn_scalar < 0 || cfg->query_pre_attn_scalar > (1 << 24))
		return ferry_error(FERRY_ERR_INVALID, "query_pre_attn_scalar (%d) must be positive, at most %d",
				   cfg->query_pre_attn_scalar, 1 << 24);
	return FERRY_OK;
}

const struct ferry_layer_decl ferry_gemma_prologue = {
	.model = "gemma2 prologue",
	.n_tensors = P_N,
	.tensors = {
		[P_TOKENS] = { "tokens", BT },
		[P_RAW] = { "embedding_unscaled", BTC },
		[P_EMBED] = { "embedding", BTC },
	},
	.n_ops = 2,
	.ops = {
		{ FERRY_OP_ENCODER, { P_RAW, -1, -1 }, { -1, -1, -1 }, { { FERRY_LLAMA_EMBED, 0 }, { -1, 0 } },
		  .tokens = P_TOKENS },
		{ FERRY_OP_SCALE, { P_EMBED, -1, -1 }, { P_RAW, -1, -1 }, FERRY_LL_NONE, FERRY_SCALAR_EMBED_SCALE },
	},
	.input = P_TOKENS,
	.output = P_EMBED,
};

const struct ferry_stage_tensor ferry_gemma_prologue_roles[P_N] = {
	[P_TOKENS] = { .role = FERRY_ROLE_TOKENS },
	[P_RAW] = { .grad_in_place = true },
	[P_EMBED] = { .role = FERRY_ROLE_STACK_INPUT },
};

/* ---- epilogue: final norm, LM head, soft-capping, softmax cross-entropy ------------ */

enum { E_IN, E_NORM, E_NORM_RSTD, E_RAW, E_LOGITS, E_PROBS, E_LOSSES, E_TARGETS, E_N };

static const struct ferry_layer_decl epilogue = {
	.model = "gemma2 epilogue",
	.n_tensors = E_N,
	.tensors = {
		[E_IN] = { "decoder_output", BTC },
		[E_NORM] = { "final_norm", BTC },
		[E_NORM_RSTD] = { "final_norm_rstd", BT },
		[E_RAW] = { "logits_uncapped", BTX(FERRY_DIM_VP) },
		[E_LOGITS] = { "logits", BTX(FERRY_DIM_VP) },
		[E_PROBS] = { "probs", BTX(FERRY_DIM_VP) },
		[E_LOSSES] = { "losses", BT },
		[E_TARGETS] = { "targets", BT },
	},
	.n_ops = 4,
	.ops = {
		NORM1(E_NORM, E_NORM_RSTD, E_IN, FERRY_LLAMA_NORM),
		FERRY_LL_MATMUL(E_RAW, E_NORM, FERRY_LLAMA_LM_HEAD, -1),
		{ FERRY_OP_SOFTCAP, { E_LOGITS, -1, -1 }, { E_RAW, -1, -1 }, FERRY_LL_NONE, FERRY_SCALAR_FINAL_SOFTCAP },
		{ FERRY_OP_SOFTMAX_XENT, { E_LOSSES, E_PROBS, -1 }, { E_LOGITS, -1, -1 }, FERRY_LL_NONE,
		  .tokens = E_TARGETS },
	},
	.input = E_IN,
	.output = E_LOSSES,
};

static const struct ferry_stage_tensor epilogue_roles[E_N] = {
	[E_IN] = { .role = FERRY_ROLE_STACK_OUTPUT },
	[E_RAW] = { .grad_in_place = true },
	[E_LOGITS] = { .grad_in_place = true },
	[E_PROBS] = { .role = FERRY_ROLE_ALIAS, .alias_of = E_LOGITS },
	[E_LOSSES] = { .role = FERRY_ROLE_LOSSES },
	[E_TARGETS] = { .role = FERRY_ROLE_TARGETS },
};

/* ---- configuration ------------------------------------------------------------ */

/* A soft cap: 0 becomes the default, a negative one none; it must be finite. */
static ferry_status cap_check(float *cap, float def, const char *name)
{
	if (*cap == 0)
		*cap = def;
	if (!isfinite(*cap))
		return ferry_error(FERRY_ERR_INVALID, "%s (%g) must be finite (negative: none)", name, *cap);
	return FERRY_OK;
}

/* Gemma 2's defaults where they are not Llama's: MLP width 4C, epsilon
 * 1e-6, a tied head, the window on the even layers, the scores scaled by
 * the head size and capped at 50, the logits at 30. */
static ferry_status gemma2_config_check(struct ferry_model_config *cfg)
{
	ferry_status st;

	if (!cfg->ffn && cfg->channels > 0)
		cfg->ffn = cfg->channels <= (1 << 28) ? 4 * cfg->channels : -1;
	if (cfg->norm_eps == 0)
		cfg->norm_eps = 1e-6f;
	if (!cfg->tie_embeddings)
		cfg->tie_embeddings = 1;
	if (!cfg->window_layers_every)
		cfg->window_layers_every = 2;
	if ((st = ferry_llama_config_check(cfg)) || (st = cap_check(&cfg->attn_softcap, 50.0f, "attn_softcap")) ||
	    (st = cap_check(&cfg->final_softcap, 30.0f, "final_softcap")))
		return st;
	return ferry_gemma_scalar_check(cfg);
}

/* Gemma2Config's defaults (transformers): the 2B's shape, a window of
 * 4096, caps 50 and 30, the activation under hidden_activation. */
static const struct ferry_hf_family gemma2_hf = {
	.model_type = "gemma2",
	.architecture = "Gemma2ForCausalLM",
	.title = "Gemma 2",
	.vocab_size = 256000,
	.hidden_size = 2304,
	.intermediate_size = 9216,
	.num_hidden_layers = 26,
	.num_attention_heads = 8,
	.num_key_value_heads = 4,
	.head_dim = 256,
	.max_position_embeddings = 8192,
	.rope_theta = 10000.0,
	.rms_norm_eps = 1e-6,
	.tie_word_embeddings = true,
	.hidden_act = "gelu_pytorch_tanh",
	.act_key = "hidden_activation",
	.sliding_window = 4096,
	.window_layers_every = 2,
	.query_pre_attn_scalar = 256,
	.attn_logit_softcapping = 50.0,
	.final_logit_softcapping = 30.0,
};

const struct ferry_model_decl ferry_gemma2_decl = {
	.name = "gemma2",
	.title = "Gemma 2",
	.ckpt = FERRY_CKPT_HF,
	.hf = &gemma2_hf,
	.n_params = N_PARAMS,
	.params = {
		FERRY_LLAMA_PARAMS_AS(FERRY_INIT_ZERO),
		FERRY_GEMMA_FFW_NORMS(PRE_FFW, POST_FFW),
	},
	.prologue = &ferry_gemma_prologue,
	.layer = &layer,
	.epilogue = &epilogue,
	.prologue_roles = ferry_gemma_prologue_roles,
	.epilogue_roles = epilogue_roles,
	.config_check = gemma2_config_check,
};
