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

#define B_ FERRY_DIM_B
#define T_ FERRY_DIM_T
#define SHAPE FERRY_LL_SHAPE
#define BTC FERRY_LL_BTC
#define BT FERRY_LL_BT
#define W(p) { { p, 0 }, { -1, 0 } }
#define NOW FERRY_LL_NONE

static const struct ferry_layer_decl layer = FERRY_LLAMA_LAYER("llama", -1, -1, -1, FERRY_SCALAR_NONE);

/* ---- prologue: token embedding --------------------------------------------------- */

enum { P_TOKENS, P_EMBED, P_N };

const struct ferry_layer_decl ferry_llama_prologue = {
	.model = "llama prologue",
	.n_tensors = P_N,
	.tensors = { [P_TOKENS] = { "tokens", BT }, [P_EMBED] = { "embedding", BTC } },
	.n_ops = 1,
	.ops = { { FERRY_OP_ENCODER, { P_EMBED, -1, -1 }, { -1, -1, -1 }, W(FERRY_LLAMA_EMBED), .tokens = P_TOKENS } },
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
		{ FERRY_OP_RMSNORM, { E_NORM, E_NORM_RSTD, -1 }, { E_IN, -1, -1 }, W(FERRY_LLAMA_NORM), FERRY_SCALAR_NORM_EPS },
		{ FERRY_OP_MATMUL, { E_LOGITS, -1, -1 }, { E_NORM, -1, -1 }, W(FERRY_LLAMA_LM_HEAD) },
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

const struct ferry_model_decl ferry_llama_decl = {
	.name = "llama",
	.title = "Llama",
	.hf = &llama_hf,
	.n_params = FERRY_LLAMA_N_PARAMS,
	.params = { FERRY_LLAMA_PARAMS },
	.layer = &layer,
	FERRY_LLAMA_STAGES,
};
