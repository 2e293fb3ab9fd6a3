/*
 * Gemma 3 (text), declared (transformers' Gemma3ForCausalLM, config class
 * Gemma3TextConfig): Gemma 2's layer, prologue and parameters, and:
 *
 *   - an RMSNorm by 1 + w over each head of q and k before the rotary
 *     embedding (self_attn.q_norm, k_norm: the rmsnorm op with a statistic
 *     per head and the gain offset 1);
 *   - the window on five layers of six: every sixth (index + 1 a multiple
 *     of 6) attends fully (window_full_every);
 *   - the windowed layers turn by rope_local_base_freq, unscaled, the full
 *     ones by rope_theta and rope_scaling (rope_local_theta);
 *   - scores scaled by query_pre_attn_scalar^-1/2, no soft caps: the
 *     epilogue is Llama's with Gemma's final norm (no capped logits).
 */
#include "models/llama.h"
#include "core/error.h"

enum { PRE_FFW = FERRY_LLAMA_N_PARAMS, POST_FFW, Q_NORM, K_NORM, N_PARAMS };

enum {
	X, LN1, LN1_RSTD, QP, KP, QN_RSTD, KN_RSTD, QR, KR, Q, K, V_, CTX, LSE, OUT, ATT_N, ATT_N_RSTD, MID, LN2,
	LN2_RSTD, GATE_OUT, UP_OUT, H, MLPWO, FFN_N, FFN_N_RSTD, Y, N_TENSORS
};

#define SHAPE FERRY_LL_SHAPE
#define BTC FERRY_LL_BTC
#define BT FERRY_LL_BT
#define BTX FERRY_LL_BTX
#define NORM1 FERRY_LL_RMSNORM_1W

static const struct ferry_layer_decl layer = {
	.model = "gemma3",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_self_attention_norm", BTC },
		[LN1_RSTD] = { "pre_self_attention_norm_rstd", BT },
		[QP] = { "query_unnormed", BTX(FERRY_DIM_QD) },
		[KP] = { "key_unnormed", BTX(FERRY_DIM_KVD) },
		[QN_RSTD] = { "query_norm_rstd", SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NH) },
		[KN_RSTD] = { "key_norm_rstd", SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NKV) },
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
	.n_ops = 19,
	.ops = {
		NORM1(LN1, LN1_RSTD, X, FERRY_LLAMA_IN_NORM),
		FERRY_LL_MATMUL(QP, LN1, FERRY_LLAMA_Q, -1),
		FERRY_LL_MATMUL(KP, LN1, FERRY_LLAMA_K, -1),
		FERRY_LL_MATMUL(V_, LN1, FERRY_LLAMA_V, -1),
		NORM1(QR, QN_RSTD, QP, Q_NORM),
		NORM1(KR, KN_RSTD, KP, K_NORM),
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

/* ---- epilogue: the final norm by 1 + w, the LM head, the loss ---------------------- */

enum { E_IN, E_NORM, E_NORM_RSTD, E_LOGITS, E_PROBS, E_LOSSES, E_TARGETS, E_N };

static const struct ferry_layer_decl epilogue = {
	.model = "gemma3 epilogue",
	.n_tensors = E_N,
	.tensors = {
		[E_IN] = { "decoder_output", BTC },
		[E_NORM] = { "final_norm", BTC },
		[E_NORM_RSTD] = { "final_norm_rstd", BT },
		[E_LOGITS] = { "logits", BTX(FERRY_DIM_VP) },
		[E_PROBS] = { "probs", BTX(FERRY_DIM_VP) },
		[E_LOSSES] = { "losses", BT },
		[E_TARGETS] = { "targets", BT },
	},
	.n_ops = 3,
	.ops = {
		NORM1(E_NORM, E_NORM_RSTD, E_IN, FERRY_LLAMA_NORM),
		FERRY_LL_MATMUL(E_LOGITS, E_NORM, FERRY_LLAMA_LM_HEAD, -1),
		{ FERRY_OP_SOFTMAX_XENT, { E_LOSSES, E_PROBS, -1 }, { E_LOGITS, -1, -1 }, FERRY_LL_NONE,
		  .tokens = E_TARGETS },
	},
	.input = E_IN,
	.output = E_LOSSES,
};

static const struct ferry_stage_tensor epilogue_roles[E_N] = {
	[E_IN] = { .role = FERRY_ROLE_STACK_OUTPUT },
	[E_LOGITS] = { .grad_in_place = true },
	[E_PROBS] = { .role = FERRY_ROLE_ALIAS, .alias_of = E_LOGITS },
	[E_LOSSES] = { .role = FERRY_ROLE_LOSSES },
	[E_TARGETS] = { .role = FERRY_ROLE_TARGETS },
};

/* ---- configuration ------------------------------------------------------------ */

/* Gemma3TextConfig's defaults where they are not Llama's: MLP width 4C (a
 * fresh model's), epsilon 1e-6, a tied head, every sixth layer full, bases
 * 1e6 (global) and 1e4 (windowed), scores scaled by the head size. */
static ferry_status gemma3_config_check(struct ferry_model_config *cfg)
{
	ferry_status st;

	if (!cfg->ffn && cfg->channels > 0)
		cfg->ffn = cfg->channels <= (1 << 28) ? 4 * cfg->channels : -1;
	if (cfg->norm_eps == 0)
		cfg->norm_eps = 1e-6f;
	if (!cfg->tie_embeddings)
		cfg->tie_embeddings = 1;
	if (!cfg->window_full_every)
		cfg->window_full_every = 6;
	if (cfg->rope_theta == 0)
		cfg->rope_theta = 1e6f;
	if (cfg->rope_local_theta == 0)
		cfg->rope_local_theta = 1e4f;
	if (!(cfg->rope_local_theta > 1) || cfg->rope_local_theta > 1e12f)
		return ferry_error(FERRY_ERR_INVALID, "rope_local_theta %g must be greater than 1",
				   cfg->rope_local_theta);
	if (cfg->window_layers_every > 1)
		return ferry_error(FERRY_ERR_INVALID, "window_layers_every (%d): Gemma 3's window acts on five "
				   "layers of six", cfg->window_layers_every);
	if ((st = ferry_llama_config_check(cfg)))
		return st;
	return ferry_gemma_scalar_check(cfg);
}

/* Gemma3TextConfig's defaults (transformers): the 2B-like shape, window
 * 4096, every sixth layer full, rope_theta 1e6 and local 1e4, scalar 256,
 * no caps (null), the activation under hidden_activation. */
static const struct ferry_hf_family gemma3_hf = {
	.model_type = "gemma3_text",
	.architecture = "Gemma3ForCausalLM",
	.title = "Gemma 3",
	.vocab_size = 262208,
	.hidden_size = 2304,
	.intermediate_size = 9216,
	.num_hidden_layers = 26,
	.num_attention_heads = 8,
	.num_key_value_heads = 4,
	.head_dim = 256,
	.max_position_embeddings = 131072,
	.rope_theta = 1e6,
	.rms_norm_eps = 1e-6,
	.tie_word_embeddings = true,
	.hidden_act = "gelu_pytorch_tanh",
	.act_key = "hidden_activation",
	.sliding_window = 4096,
	.sliding_window_pattern = 6,
	.rope_local_base_freq = 1e4,
	.query_pre_attn_scalar = 256,
};

const struct ferry_model_decl ferry_gemma3_decl = {
	.name = "gemma3",
	.title = "Gemma 3",
	.ckpt = FERRY_CKPT_HF,
	.hf = &gemma3_hf,
	.n_params = N_PARAMS,
	.params = {
		FERRY_LLAMA_PARAMS_AS(FERRY_INIT_ZERO),
		FERRY_GEMMA_FFW_NORMS(PRE_FFW, POST_FFW),
		[Q_NORM] = FERRY_LL_LAYER_P("q_norm", "self_attn.q_norm.weight", FERRY_LL_SHAPE(FERRY_DIM_HS), false,
					    FERRY_INIT_ZERO),
		[K_NORM] = FERRY_LL_LAYER_P("k_norm", "self_attn.k_norm.weight", FERRY_LL_SHAPE(FERRY_DIM_HS), false,
					    FERRY_INIT_ZERO),
	},
	.prologue = &ferry_gemma_prologue,
	.layer = &layer,
	.epilogue = &epilogue,
	.prologue_roles = ferry_gemma_prologue_roles,
	.epilogue_roles = epilogue_roles,
	.config_check = gemma3_config_check,
};
