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
 * The Llama family's declaration (models/llama.h) with one value of its
 * own: the constant its attention reads.
 */
#include "models/llama.h"

/* Llama's layer, its attention reading the window. */
static const struct ferry_layer_decl layer = FERRY_LLAMA_LAYER("mistral", -1, -1, -1, FERRY_SCALAR_ATTN_WINDOW);

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

const struct ferry_model_decl ferry_mistral_decl = {
	.name = "mistral",
	.title = "Mistral",
	.hf = &mistral_hf,
	.n_params = FERRY_LLAMA_N_PARAMS,
	.params = { FERRY_LLAMA_PARAMS },
	.layer = &layer,
	FERRY_LLAMA_STAGES,
};
