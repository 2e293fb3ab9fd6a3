/*
 * Qwen 2 and 2.5, declared (transformers' Qwen2ForCausalLM): Llama's
 * program with a bias on the query, key and value projections (not on the
 * output projection, nor in the MLP), the same prologue (token embedding),
 * epilogue (final RMSNorm, LM head, loss) and rotary embedding.  The small
 * models (0.5B to 3B) tie the LM head to the embedding; rope_theta is
 * 1e6 in their config.json files.
 *
 * The Llama family's declaration (models/llama.h) with three values of
 * its own: the biases, three more parameters after Llama's (the shared
 * stages read the embedding, the final norm and the head by index).
 */
#include "models/llama.h"

enum { Q_BIAS = FERRY_LLAMA_N_PARAMS, K_BIAS, V_BIAS, N_PARAMS };

/* Llama's layer with biases on the q, k, v products, its attention reading
 * the window (acting from layer max_window_layers on). */
static const struct ferry_layer_decl layer =
	FERRY_LLAMA_LAYER("qwen2", Q_BIAS, K_BIAS, V_BIAS, FERRY_SCALAR_ATTN_WINDOW);

/* Qwen2Config's defaults (transformers); its sliding window (4096) acts
 * only with use_sliding_window true, and then on the layers from
 * max_window_layers (28) on. */
static const struct ferry_hf_family qwen2_hf = {
	.model_type = "qwen2",
	.architecture = "Qwen2ForCausalLM",
	.title = "Qwen 2",
	.vocab_size = 151936,
	.hidden_size = 4096,
	.intermediate_size = 22016,
	.num_hidden_layers = 32,
	.num_attention_heads = 32,
	.max_position_embeddings = 32768,
	.rope_theta = 10000.0,
	.rms_norm_eps = 1e-6,
	.qkv_bias = true,
	.sliding_window = 4096,
	.gated_sliding_window = true,
	.max_window_layers = 28,
};

const struct ferry_model_decl ferry_qwen2_decl = {
	.name = "qwen2",
	.title = "Qwen 2",
	.hf = &qwen2_hf,
	.n_params = N_PARAMS,
	.params = {
		FERRY_LLAMA_PARAMS,
		/* biases: not decayed (nanoGPT's rule), zero at a fresh start */
		[Q_BIAS] = FERRY_LL_LAYER_P("q_bias", "self_attn.q_proj.bias", FERRY_LL_SHAPE(FERRY_DIM_QD), false,
					    FERRY_INIT_ZERO),
		[K_BIAS] = FERRY_LL_LAYER_P("k_bias", "self_attn.k_proj.bias", FERRY_LL_SHAPE(FERRY_DIM_KVD), false,
					    FERRY_INIT_ZERO),
		[V_BIAS] = FERRY_LL_LAYER_P("v_bias", "self_attn.v_proj.bias", FERRY_LL_SHAPE(FERRY_DIM_KVD), false,
					    FERRY_INIT_ZERO),
	},
	.layer = &layer,
	FERRY_LLAMA_STAGES,
};
