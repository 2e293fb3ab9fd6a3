/*
 * Gemma 4 (text, dense), declared (transformers' Gemma4ForCausalLM, config
 * class Gemma4TextConfig): Gemma 3's layer and prologue, and:
 *
 *   - every RMSNorm scales by w itself (Gemma4RMSNorm), its gains starting
 *     at 1, not Gemma 2 and 3's 1 + w;
 *   - q and k normed per head with gains, v per head with none (v_norm:
 *     the rmsnorm op with no weight and the gain offset 1);
 *   - scores unscaled (scaling 1.0: query_pre_attn_scalar 1, which
 *     config.json does not carry);
 *   - the window on five layers of six, the windowed layers turning by
 *     rope_parameters.sliding_attention's base, the full ones by
 *     full_attention's (rope_local_theta, as Gemma 3);
 *   - the final logits soft-capped where final_logit_softcapping says
 *     (Gemma 2's epilogue, with the norm by w).
 *
 * Not yet (refused by name in src/hf/hf_config_gemma4.c; docs/models.md):
 * per-layer input embeddings, K/V shared by the last layers, keys used as
 * values, the global layers' own head size and kv heads, their partial
 * (proportional) rotary, the MoE block.  Each layer's layer_scalar buffer
 * (1 in a fresh model) is not a parameter here: a checkpoint holding it is
 * refused as an unexpected tensor.
 */
#include "models/llama.h"
#include "core/error.h"

#include <math.h>

enum { PRE_FFW = FERRY_LLAMA_N_PARAMS, POST_FFW, Q_NORM, K_NORM, N_PARAMS };

enum {
	X, LN1, LN1_RSTD, QP, KP, VP, QN_RSTD, KN_RSTD, VN_RSTD, QR, KR, Q, K, V_, CTX, LSE, OUT, ATT_N, ATT_N_RSTD,
	MID, LN2, LN2_RSTD, GATE_OUT, UP_OUT, H, MLPWO, FFN_N, FFN_N_RSTD, Y, N_TENSORS
};

#define SHAPE FERRY_LL_SHAPE
#define BTC FERRY_LL_BTC
#define BT FERRY_LL_BT
#define BTX FERRY_LL_BTX
#define NORM FERRY_LL_RMSNORM
/* v_norm: no gain, the op's offset 1 alone */
#define NORM_NO_GAIN(y, rstd, x) \
	{ FERRY_OP_RMSNORM, { y, rstd, -1 }, { x, -1, -1 }, FERRY_LL_NONE, FERRY_SCALAR_NORM_EPS, .k = 1.0f }

static const struct ferry_layer_decl layer = {
	.model = "gemma4",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_self_attention_norm", BTC },
		[LN1_RSTD] = { "pre_self_attention_norm_rstd", BT },
		[QP] = { "query_unnormed", BTX(FERRY_DIM_QD) },
		[KP] = { "key_unnormed", BTX(FERRY_DIM_KVD) },
		[VP] = { "value_unnormed", BTX(FERRY_DIM_KVD) },
		[QN_RSTD] = { "query_norm_rstd", SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NH) },
		[KN_RSTD] = { "key_norm_rstd", SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NKV) },
		[VN_RSTD] = { "value_norm_rstd", SHAPE(FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_NKV) },
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
	.n_ops = 20,
	.ops = {
		NORM(LN1, LN1_RSTD, X, FERRY_LLAMA_IN_NORM),
		FERRY_LL_MATMUL(QP, LN1, FERRY_LLAMA_Q, -1),
		FERRY_LL_MATMUL(KP, LN1, FERRY_LLAMA_K, -1),
		FERRY_LL_MATMUL(VP, LN1, FERRY_LLAMA_V, -1),
		NORM(QR, QN_RSTD, QP, Q_NORM),
		NORM(KR, KN_RSTD, KP, K_NORM),
		NORM_NO_GAIN(V_, VN_RSTD, VP),
		FERRY_LL_ROPE(Q, QR),
		FERRY_LL_ROPE(K, KR),
		FERRY_LL_ATTENTION(CTX, LSE, Q, K, V_, FERRY_SCALAR_ATTN_WINDOW),
		FERRY_LL_MATMUL(OUT, CTX, FERRY_LLAMA_O, -1),
		NORM(ATT_N, ATT_N_RSTD, OUT, FERRY_LLAMA_POST_NORM),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, MID, X, ATT_N),
		NORM(LN2, LN2_RSTD, MID, PRE_FFW),
		FERRY_LL_MATMUL(GATE_OUT, LN2, FERRY_LLAMA_GATE, -1),
		FERRY_LL_MATMUL(UP_OUT, LN2, FERRY_LLAMA_UP, -1),
		FERRY_LL_BINARY(FERRY_OP_GEGLU, H, GATE_OUT, UP_OUT),
		FERRY_LL_MATMUL(MLPWO, H, FERRY_LLAMA_DOWN, -1),
		NORM(FFN_N, FFN_N_RSTD, MLPWO, POST_FFW),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, Y, MID, FFN_N),
	},
	.input = X,
	.output = Y,
};

/* ---- epilogue: the final norm by w, the LM head, the soft cap, the loss ------------ */

enum { E_IN, E_NORM, E_NORM_RSTD, E_RAW, E_LOGITS, E_PROBS, E_LOSSES, E_TARGETS, E_N };

static const struct ferry_layer_decl epilogue = {
	.model = "gemma4 epilogue",
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
		NORM(E_NORM, E_NORM_RSTD, E_IN, FERRY_LLAMA_NORM),
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

/* Gemma4TextConfig's defaults where they are not Llama's: MLP width 4C (a
 * fresh model's), epsilon 1e-6, a tied head, every sixth layer full, bases
 * 1e6 (global) and 1e4 (windowed), unscaled scores, no final cap. */
static ferry_status gemma4_config_check(struct ferry_model_config *cfg)
{
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
	if (cfg->final_softcap == 0)
		cfg->final_softcap = -1.0f;
	if (!cfg->query_pre_attn_scalar)
		cfg->query_pre_attn_scalar = 1;
	if (cfg->query_pre_attn_scalar != 1)
		return ferry_error(FERRY_ERR_INVALID, "query_pre_attn_scalar (%d): Gemma 4's scores are unscaled",
				   cfg->query_pre_attn_scalar);
	if (!(cfg->rope_local_theta > 1) || cfg->rope_local_theta > 1e12f)
		return ferry_error(FERRY_ERR_INVALID, "rope_local_theta %g must be greater than 1",
				   cfg->rope_local_theta);
	if (!isfinite(cfg->final_softcap))
		return ferry_error(FERRY_ERR_INVALID, "final_softcap (%g) must be finite (negative: none)",
				   cfg->final_softcap);
	if (cfg->window_layers_every > 1)
		return ferry_error(FERRY_ERR_INVALID, "window_layers_every (%d): Gemma 4's window acts on five "
				   "layers of six", cfg->window_layers_every);
	/* transformers forces Gemma 4's last layer to attend fully, where the
	   rule of six would give it the window */
	if (cfg->sliding_window && cfg->window_full_every > 1 && cfg->layers % cfg->window_full_every)
		return ferry_error(FERRY_ERR_INVALID, "layers (%d): with a window, Gemma 4's last layer attends fully, "
				   "which ferry's rule (every %d-th layer) gives only to a multiple of %d layers",
				   cfg->layers, cfg->window_full_every, cfg->window_full_every);
	return ferry_llama_config_check(cfg);
}

/* Gemma4TextConfig's defaults (transformers 5.25): the E2B-like shape,
 * window 512, every sixth layer full, bases 1e6 and 1e4, the activation
 * under hidden_activation; query_pre_attn_scalar 1 stands for its scaling
 * 1.0 (not a key of its config.json); a final cap is a field (none when
 * absent: gemma4_keys). */
static const struct ferry_hf_family gemma4_hf = {
	.model_type = "gemma4_text",
	.architecture = "Gemma4ForCausalLM",
	.title = "Gemma 4",
	.vocab_size = 262144,
	.hidden_size = 2304,
	.intermediate_size = 9216,
	.num_hidden_layers = 30,
	.num_attention_heads = 8,
	.num_key_value_heads = 4,
	.head_dim = 256,
	.max_position_embeddings = 131072,
	.rope_theta = 1e6,
	.rms_norm_eps = 1e-6,
	.tie_word_embeddings = true,
	.hidden_act = "gelu_pytorch_tanh",
	.act_key = "hidden_activation",
	.sliding_window = 512,
	.sliding_window_pattern = 6,
	.rope_local_base_freq = 1e4,
	.query_pre_attn_scalar = 1,
	.final_logit_softcapping = 30.0,
	.gemma4_keys = true,
};

#define GAIN_ONE(name, hf) FERRY_LL_LAYER_P(name, hf, FERRY_LL_SHAPE(FERRY_DIM_C), false, FERRY_INIT_ONE)
#define HEAD_GAIN(name, hf) FERRY_LL_LAYER_P(name, hf, FERRY_LL_SHAPE(FERRY_DIM_HS), false, FERRY_INIT_ONE)

const struct ferry_model_decl ferry_gemma4_decl = {
	.name = "gemma4",
	.title = "Gemma 4",
	.ckpt = FERRY_CKPT_HF,
	.hf = &gemma4_hf,
	.n_params = N_PARAMS,
	.params = {
		FERRY_LLAMA_PARAMS_AS(FERRY_INIT_ONE),
		[PRE_FFW] = GAIN_ONE("pre_feedforward_layernorm", "pre_feedforward_layernorm.weight"),
		[POST_FFW] = GAIN_ONE("post_feedforward_layernorm", "post_feedforward_layernorm.weight"),
		[Q_NORM] = HEAD_GAIN("q_norm", "self_attn.q_norm.weight"),
		[K_NORM] = HEAD_GAIN("k_norm", "self_attn.k_norm.weight"),
	},
	.prologue = &ferry_gemma_prologue,
	.layer = &layer,
	.epilogue = &epilogue,
	.prologue_roles = ferry_gemma_prologue_roles,
	.epilogue_roles = epilogue_roles,
	.config_check = gemma4_config_check,
};
