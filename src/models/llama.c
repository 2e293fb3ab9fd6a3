/*
 * Llama, declared: token embedding (no position table), the decoder layer
 * (RMSNorm, grouped-query attention with rotary position embedding in
 * Hugging Face's rotate_half convention, SwiGLU MLP, no biases), final
 * RMSNorm and an LM head, untied by default (Hugging Face's
 * tie_word_embeddings = false), tied as an option.
 *
 * Parameters carry Hugging Face's names (model.layers.N.self_attn.q_proj.
 * weight, ...) in its [out, in] layout, so a safetensors checkpoint maps
 * tensor by tensor.  Activation names are MaxText's checkpoint names:
 * query_proj and key_proj are the projections after the rotary embedding
 * (as MaxText names them); the projections before it are query_unrotated
 * and key_unrotated, which no backward pass reads.
 */
#include "models/llama.h"
#include "core/error.h"

#include <limits.h>
#include <math.h>

enum {
	EMBED, IN_NORM, Q_PROJ, K_PROJ, V_PROJ, O_PROJ, POST_NORM, GATE, UP, DOWN, NORM, LM_HEAD, N_PARAMS
};
_Static_assert(EMBED == FERRY_LLAMA_PARAM_EMBED && NORM == FERRY_LLAMA_PARAM_NORM &&
		       LM_HEAD == FERRY_LLAMA_PARAM_LM_HEAD && N_PARAMS == FERRY_LLAMA_N_PARAMS,
	       "models/llama.h's parameter indices");

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

static const struct ferry_layer_decl layer = {
	.model = "llama",
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
		{ FERRY_OP_ATTENTION, { CTX, LSE, -1 }, { Q, K, V_ }, NOW },
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

/* ---- prologue: token embedding --------------------------------------------------- */

enum { P_TOKENS, P_EMBED, P_N };

const struct ferry_layer_decl ferry_llama_prologue = {
	.model = "llama prologue",
	.n_tensors = P_N,
	.tensors = { [P_TOKENS] = { "tokens", BT }, [P_EMBED] = { "embedding", BTC } },
	.n_ops = 1,
	.ops = { { FERRY_OP_ENCODER, { P_EMBED, -1, -1 }, { -1, -1, -1 }, W(EMBED), .tokens = P_TOKENS } },
	.input = P_TOKENS,
	.output = P_EMBED,
};

const struct ferry_stage_tensor ferry_llama_prologue_roles[P_N] = {
	[P_TOKENS] = { .role = FERRY_ROLE_TOKENS },
	[P_EMBED] = { .role = FERRY_ROLE_STACK_INPUT },
};

/* ---- epilogue: final RMSNorm, LM head, softmax cross-entropy --------------------- */

enum { E_IN, E_NORM, E_NORM_RSTD, E_LOGITS, E_PROBS, E_LOSSES, E_TARGETS, E_N };

const struct ferry_layer_decl ferry_llama_epilogue = {
	.model = "llama epilogue",
	.n_tensors = E_N,
	.tensors = {
		[E_IN] = { "decoder_output", BTC },
		[E_NORM] = { "final_norm", BTC },
		[E_NORM_RSTD] = { "final_norm_rstd", BT },
		[E_LOGITS] = { "logits", SHAPE(B_, T_, FERRY_DIM_VP) },
		[E_PROBS] = { "probs", SHAPE(B_, T_, FERRY_DIM_VP) },
		[E_LOSSES] = { "losses", BT },
		[E_TARGETS] = { "targets", BT },
	},
	.n_ops = 3,
	.ops = {
		{ FERRY_OP_RMSNORM, { E_NORM, E_NORM_RSTD, -1 }, { E_IN, -1, -1 }, W(NORM), FERRY_SCALAR_NORM_EPS },
		{ FERRY_OP_MATMUL, { E_LOGITS, -1, -1 }, { E_NORM, -1, -1 }, W(LM_HEAD) },
		{ FERRY_OP_SOFTMAX_XENT, { E_LOSSES, E_PROBS, -1 }, { E_LOGITS, -1, -1 }, NOW,
		  .tokens = E_TARGETS },
	},
	.input = E_IN,
	.output = E_LOSSES,
};

const struct ferry_stage_tensor ferry_llama_epilogue_roles[E_N] = {
	[E_IN] = { .role = FERRY_ROLE_STACK_OUTPUT },
	[E_LOGITS] = { .grad_in_place = true },
	[E_PROBS] = { .role = FERRY_ROLE_ALIAS, .alias_of = E_LOGITS },
	[E_LOSSES] = { .role = FERRY_ROLE_LOSSES },
	[E_TARGETS] = { .role = FERRY_ROLE_TARGETS },
};

/* ---- configuration ------------------------------------------------------------ */

ferry_status ferry_llama_rope_scaling_check(const struct ferry_rope_scaling *r)
{
	if (r->type == FERRY_ROPE_SCALING_NONE)
		return FERRY_OK;
	if (r->type != FERRY_ROPE_SCALING_LINEAR && r->type != FERRY_ROPE_SCALING_LLAMA3)
		return ferry_error(FERRY_ERR_INVALID, "rope scaling type %d is not none (0), linear (1) or "
				   "llama3 (2)", r->type);
	if (!(r->factor > 0) || !isfinite(r->factor))
		return ferry_error(FERRY_ERR_INVALID, "rope scaling factor %g must be positive", r->factor);
	if (r->type == FERRY_ROPE_SCALING_LINEAR)
		return FERRY_OK;
	if (!(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) ||
	    !isfinite(r->high_freq_factor))
		return ferry_error(FERRY_ERR_INVALID, "llama3 rope scaling: low_freq_factor %g must be positive "
				   "and high_freq_factor %g greater", r->low_freq_factor, r->high_freq_factor);
	if (r->original_max_pos <= 0 || r->original_max_pos > (1 << 24))
		return ferry_error(FERRY_ERR_INVALID, "llama3 rope scaling: original_max_position_embeddings "
				   "%d must be positive (at most 2^24)", r->original_max_pos);
	return FERRY_OK;
}

/* Defaults: kv_heads = heads, head size C / heads, MLP width 8C/3 rounded up
 * to a multiple of 64 (Llama's 2/3 of 4C for SwiGLU), RMSNorm epsilon 1e-5,
 * rotary base 10000, no vocabulary padding (Hugging Face files have V rows). */
ferry_status ferry_llama_config_check(struct ferry_model_config *cfg)
{
	if (!cfg->kv_heads)
		cfg->kv_heads = cfg->heads;
	if (cfg->kv_heads < 0 || cfg->heads % cfg->kv_heads != 0)
		return ferry_error(FERRY_ERR_INVALID, "kv_heads (%d) must divide heads (%d)", cfg->kv_heads,
				   cfg->heads);
	if (!cfg->head_size) {
		if (cfg->channels % cfg->heads != 0)
			return ferry_error(FERRY_ERR_INVALID, "channels (%d) is not divisible by heads (%d)",
					   cfg->channels, cfg->heads);
		cfg->head_size = cfg->channels / cfg->heads;
	}
	if (cfg->head_size < 2 || cfg->head_size % 2 || cfg->head_size > 4096)
		return ferry_error(FERRY_ERR_INVALID, "head size %d must be even, between 2 and 4096 "
				   "(the rotary embedding turns pairs)", cfg->head_size);
	if (cfg->channels > INT_MAX / 8 || (int64_t)cfg->heads * cfg->head_size > INT_MAX / 8)
		return ferry_error(FERRY_ERR_INVALID, "channels (%d) or heads x head size is too large",
				   cfg->channels);
	if (!cfg->ffn)
		cfg->ffn = (int)(((int64_t)8 * cfg->channels / 3 + 63) / 64 * 64);
	if (cfg->ffn < 1 || cfg->ffn > INT_MAX / 8)
		return ferry_error(FERRY_ERR_INVALID, "MLP width %d is out of range", cfg->ffn);
	if (!cfg->padded_vocab)
		cfg->padded_vocab = cfg->vocab;
	if (!cfg->tie_embeddings)
		cfg->tie_embeddings = -1;
	if (cfg->norm_eps == 0)
		cfg->norm_eps = 1e-5f;
	if (cfg->rope_theta == 0)
		cfg->rope_theta = 10000.0f;
	if (!(cfg->norm_eps > 0) || !(cfg->rope_theta > 1) || cfg->rope_theta > 1e12f)
		return ferry_error(FERRY_ERR_INVALID, "norm epsilon %g must be positive and rope theta %g "
				   "greater than 1", cfg->norm_eps, cfg->rope_theta);
	return ferry_llama_rope_scaling_check(&cfg->rope_scaling);
}

/* LlamaConfig's defaults (transformers). */
static const struct ferry_hf_family llama_hf = {
	.model_type = "llama",
	.architecture = "LlamaForCausalLM",
	.title = "Llama",
	.vocab_size = 32000,
	.hidden_size = 4096,
	.intermediate_size = 11008,
	.num_hidden_layers = 32,
	.num_attention_heads = 32,
	.max_position_embeddings = 2048,
	.rope_theta = 10000.0,
	.rms_norm_eps = 1e-6,
};

#define P(name, hf, shape, per_layer, decay, init) { name, hf, shape, per_layer, decay, init }
const struct ferry_model_decl ferry_llama_decl = {
	.name = "llama",
	.title = "Llama",
	.ckpt = FERRY_CKPT_HF,
	.hf = &llama_hf,
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
