/*
 * GPT-2, declared: parameters in llm.c's order (train_gpt2.c's
 * ParameterTensors, so an llm.c checkpoint is the parameter array),
 * prologue (token + position embedding), the transformer block, epilogue
 * (final layernorm, LM head tied to the token embedding, softmax
 * cross-entropy).
 *
 * Activation names follow JAX / MaxText checkpoint names where they exist
 * (decoder_layer_input, query_proj, key_proj, value_proj, context,
 * out_proj, mlpwi, mlpwo).  The fused QKV projection is three matrix
 * products over the [C, C] views of qkvw, so query, key and value are
 * separate, separately placeable tensors.
 */
#include "models/model_table.h"
#include "core/error.h"

#include <limits.h>
#include <string.h>

enum {
	WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B,
	FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, N_PARAMS
};

#define B_ FERRY_DIM_B
#define T_ FERRY_DIM_T
#define C_ FERRY_DIM_C
#define SHAPE(...) { .d = { __VA_ARGS__ } }
#define BTC SHAPE(B_, T_, C_)
#define BT SHAPE(B_, T_)
#define W(p, r) { p, r }
#define NOW { -1, 0 }

/* ---- the transformer block -------------------------------------------------- */

enum {
	X, LN1, LN1_MEAN, LN1_RSTD, Q, K, V_, CTX, LSE, OUT_PROJ, MID,
	LN2, LN2_MEAN, LN2_RSTD, MLPWI, MLP_ACT, MLPWO, Y, N_TENSORS
};

static const struct ferry_layer_decl layer = {
	.model = "gpt2",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_attention_norm", BTC },
		[LN1_MEAN] = { "pre_attention_norm_mean", BT },
		[LN1_RSTD] = { "pre_attention_norm_rstd", BT },
		[Q] = { "query_proj", BTC },
		[K] = { "key_proj", BTC },
		[V_] = { "value_proj", BTC },
		[CTX] = { "context", BTC },
		[LSE] = { "attention_lse", SHAPE(B_, FERRY_DIM_NH, T_) },
		[OUT_PROJ] = { "out_proj", BTC },
		[MID] = { "post_attention_residual", BTC },
		[LN2] = { "pre_mlp_norm", BTC },
		[LN2_MEAN] = { "pre_mlp_norm_mean", BT },
		[LN2_RSTD] = { "pre_mlp_norm_rstd", BT },
		[MLPWI] = { "mlpwi", SHAPE(B_, T_, FERRY_DIM_FFN) },
		[MLP_ACT] = { "mlp_activation", SHAPE(B_, T_, FERRY_DIM_FFN) },
		[MLPWO] = { "mlpwo", BTC },
		[Y] = { "decoder_layer_output", BTC },
	},
	.n_ops = 12,
	.ops = {
		{ FERRY_OP_LAYERNORM, { LN1, LN1_MEAN, LN1_RSTD }, { X, -1, -1 }, { W(LN1W, 0), W(LN1B, 0) } },
		/* the three [C, C] views of qkvw (and [C] of qkvb) are query, key, value */
		{ FERRY_OP_MATMUL, { Q, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 0), W(QKVB, 0) } },
		{ FERRY_OP_MATMUL, { K, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 1), W(QKVB, 1) } },
		{ FERRY_OP_MATMUL, { V_, -1, -1 }, { LN1, -1, -1 }, { W(QKVW, 2), W(QKVB, 2) } },
		{ FERRY_OP_ATTENTION, { CTX, LSE, -1 }, { Q, K, V_ }, { NOW, NOW } },
		{ FERRY_OP_MATMUL, { OUT_PROJ, -1, -1 }, { CTX, -1, -1 }, { W(ATTPROJW, 0), W(ATTPROJB, 0) } },
		{ FERRY_OP_RESIDUAL, { MID, -1, -1 }, { X, OUT_PROJ, -1 }, { NOW, NOW } },
		{ FERRY_OP_LAYERNORM, { LN2, LN2_MEAN, LN2_RSTD }, { MID, -1, -1 }, { W(LN2W, 0), W(LN2B, 0) } },
		{ FERRY_OP_MATMUL, { MLPWI, -1, -1 }, { LN2, -1, -1 }, { W(FCW, 0), W(FCB, 0) } },
		{ FERRY_OP_GELU, { MLP_ACT, -1, -1 }, { MLPWI, -1, -1 }, { NOW, NOW } },
		{ FERRY_OP_MATMUL, { MLPWO, -1, -1 }, { MLP_ACT, -1, -1 }, { W(FCPROJW, 0), W(FCPROJB, 0) } },
		{ FERRY_OP_RESIDUAL, { Y, -1, -1 }, { MID, MLPWO, -1 }, { NOW, NOW } },
	},
	.input = X,
	.output = Y,
};

/* ---- prologue: token + position embedding ------------------------------------- */

enum { P_TOKENS, P_EMBED, P_N };

static const struct ferry_layer_decl prologue = {
	.model = "gpt2 prologue",
	.n_tensors = P_N,
	.tensors = { [P_TOKENS] = { "tokens", BT }, [P_EMBED] = { "embedding", BTC } },
	.n_ops = 1,
	.ops = { { FERRY_OP_ENCODER, { P_EMBED, -1, -1 }, { -1, -1, -1 }, { W(WTE, 0), W(WPE, 0) },
		   .tokens = P_TOKENS } },
	.input = P_TOKENS,
	.output = P_EMBED,
};

static const struct ferry_stage_tensor prologue_roles[P_N] = {
	[P_TOKENS] = { .role = FERRY_ROLE_TOKENS },
	[P_EMBED] = { .role = FERRY_ROLE_STACK_INPUT },
};

/* ---- epilogue: final layernorm, tied LM head, softmax cross-entropy ----------- */

enum { E_IN, E_LNF, E_LNF_MEAN, E_LNF_RSTD, E_LOGITS, E_PROBS, E_LOSSES, E_TARGETS, E_N };

static const struct ferry_layer_decl epilogue = {
	.model = "gpt2 epilogue",
	.n_tensors = E_N,
	.tensors = {
		[E_IN] = { "decoder_output", BTC },
		[E_LNF] = { "final_norm", BTC },
		[E_LNF_MEAN] = { "final_norm_mean", BT },
		[E_LNF_RSTD] = { "final_norm_rstd", BT },
		[E_LOGITS] = { "logits", SHAPE(B_, T_, FERRY_DIM_VP) },
		[E_PROBS] = { "probs", SHAPE(B_, T_, FERRY_DIM_VP) },
		[E_LOSSES] = { "losses", BT },
		[E_TARGETS] = { "targets", BT },
	},
	.n_ops = 3,
	.ops = {
		{ FERRY_OP_LAYERNORM, { E_LNF, E_LNF_MEAN, E_LNF_RSTD }, { E_IN, -1, -1 }, { W(LNFW, 0), W(LNFB, 0) } },
		{ FERRY_OP_MATMUL, { E_LOGITS, -1, -1 }, { E_LNF, -1, -1 }, { W(WTE, 0), NOW } },
		{ FERRY_OP_SOFTMAX_XENT, { E_LOSSES, E_PROBS, -1 }, { E_LOGITS, -1, -1 }, { NOW, NOW },
		  .tokens = E_TARGETS },
	},
	.input = E_IN,
	.output = E_LOSSES,
};

static const struct ferry_stage_tensor epilogue_roles[E_N] = {
	[E_IN] = { .role = FERRY_ROLE_STACK_OUTPUT },
	/* the softmax backward turns the probabilities into d(logits) in place */
	[E_LOGITS] = { .grad_in_place = true },
	[E_PROBS] = { .role = FERRY_ROLE_ALIAS, .alias_of = E_LOGITS },
	[E_LOSSES] = { .role = FERRY_ROLE_LOSSES },
	[E_TARGETS] = { .role = FERRY_ROLE_TARGETS },
};

/* ---- configuration ------------------------------------------------------------ */

static ferry_status gpt2_config_check(struct ferry_model_config *cfg)
{
	if (cfg->heads <= 0 || cfg->channels <= 0)
		return ferry_error(FERRY_ERR_INVALID, "gpt2: heads (%d) and channels (%d) must be positive",
				   cfg->heads, cfg->channels);
	if (cfg->channels % cfg->heads != 0)
		return ferry_error(FERRY_ERR_INVALID, "channels (%d) is not divisible by heads (%d)",
				   cfg->channels, cfg->heads);
	if (cfg->channels > INT_MAX / 4)
		return ferry_error(FERRY_ERR_INVALID, "channels (%d) is too large (4*channels overflows int)",
				   cfg->channels);
	if ((cfg->kv_heads && cfg->kv_heads != cfg->heads) ||
	    (cfg->head_size && cfg->head_size != cfg->channels / cfg->heads) ||
	    (cfg->ffn && cfg->ffn != 4 * cfg->channels) || cfg->tie_embeddings < 0)
		return ferry_error(FERRY_ERR_INVALID, "gpt2 has no grouped-query attention, other head size, "
				   "MLP width or untied head: those are Llama options (--model llama)");
	cfg->kv_heads = cfg->heads;
	cfg->head_size = cfg->channels / cfg->heads;
	cfg->ffn = 4 * cfg->channels;
	cfg->tie_embeddings = 1;
	return FERRY_OK;
}

#define SC SHAPE(C_)
const struct ferry_model_decl ferry_gpt2_decl = {
	.name = "gpt2",
	.title = "GPT-2",
	.ckpt = FERRY_CKPT_LLMC,
	.n_params = N_PARAMS,
	.params = {
		[WTE] = { "wte", NULL, SHAPE(FERRY_DIM_VP, C_), false, true, FERRY_INIT_NORMAL, .zero_pad_rows = true },
		[WPE] = { "wpe", NULL, SHAPE(FERRY_DIM_MAXT, C_), false, true, FERRY_INIT_NORMAL },
		[LN1W] = { "ln1w", NULL, SC, true, false, FERRY_INIT_ONE },
		[LN1B] = { "ln1b", NULL, SC, true, false, FERRY_INIT_ZERO },
		[QKVW] = { "qkvw", NULL, { .k = 3, .d = { C_, C_ } }, true, true, FERRY_INIT_NORMAL },
		[QKVB] = { "qkvb", NULL, { .k = 3, .d = { C_ } }, true, false, FERRY_INIT_ZERO },
		[ATTPROJW] = { "attprojw", NULL, SHAPE(C_, C_), true, true, FERRY_INIT_NORMAL_RESID },
		[ATTPROJB] = { "attprojb", NULL, SC, true, false, FERRY_INIT_ZERO },
		[LN2W] = { "ln2w", NULL, SC, true, false, FERRY_INIT_ONE },
		[LN2B] = { "ln2b", NULL, SC, true, false, FERRY_INIT_ZERO },
		[FCW] = { "fcw", NULL, SHAPE(FERRY_DIM_FFN, C_), true, true, FERRY_INIT_NORMAL },
		[FCB] = { "fcb", NULL, SHAPE(FERRY_DIM_FFN), true, false, FERRY_INIT_ZERO },
		[FCPROJW] = { "fcprojw", NULL, SHAPE(C_, FERRY_DIM_FFN), true, true, FERRY_INIT_NORMAL_RESID },
		[FCPROJB] = { "fcprojb", NULL, SC, true, false, FERRY_INIT_ZERO },
		[LNFW] = { "lnfw", NULL, SC, false, false, FERRY_INIT_ONE },
		[LNFB] = { "lnfb", NULL, SC, false, false, FERRY_INIT_ZERO },
	},
	.prologue = &prologue,
	.layer = &layer,
	.epilogue = &epilogue,
	.prologue_roles = prologue_roles,
	.epilogue_roles = epilogue_roles,
	.config_check = gpt2_config_check,
};
