/*
 * Qwen 3, declared (transformers' Qwen3ForCausalLM): Llama's program with
 * an RMSNorm over each head of the query and the key after their products
 * and before the rotary embedding (self_attn.q_norm, k_norm: a gain of
 * head_dim, shared by the heads), no q, k, v biases, its head_dim
 * independent of the width, and Qwen 2's gated window (use_sliding_window,
 * from max_window_layers; layer_types where given must say the same).
 *
 * The per-head norm is the rmsnorm op with a statistic per head ([B, T,
 * NH]): ferry_op_call_shape runs it over rows of head_dim.
 */
#include "models/llama.h"

enum { Q_NORM = FERRY_LLAMA_N_PARAMS, K_NORM, N_PARAMS };

enum {
	X, LN1, LN1_RSTD, QP, KP, QN_RSTD, KN_RSTD, QR, KR, Q, K, V_, CTX, LSE, OUT, MID, LN2, LN2_RSTD, GATE_OUT,
	UP_OUT, H, MLPWO, Y, N_TENSORS
};

#define BTC FERRY_LL_BTC
#define BT FERRY_LL_BT
#define BTX FERRY_LL_BTX
#define HEAD_STAT(h) FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_T, h)

static const struct ferry_layer_decl layer = {
	.model = "qwen3",
	.n_tensors = N_TENSORS,
	.tensors = {
		[X] = { "decoder_layer_input", BTC },
		[LN1] = { "pre_self_attention_norm", BTC },
		[LN1_RSTD] = { "pre_self_attention_norm_rstd", BT },
		[QP] = { "query_unnormed", BTX(FERRY_DIM_QD) },
		[KP] = { "key_unnormed", BTX(FERRY_DIM_KVD) },
		[QN_RSTD] = { "query_norm_rstd", HEAD_STAT(FERRY_DIM_NH) },
		[KN_RSTD] = { "key_norm_rstd", HEAD_STAT(FERRY_DIM_NKV) },
		[QR] = { "query_unrotated", BTX(FERRY_DIM_QD) },
		[KR] = { "key_unrotated", BTX(FERRY_DIM_KVD) },
		[Q] = { "query_proj", BTX(FERRY_DIM_QD) },
		[K] = { "key_proj", BTX(FERRY_DIM_KVD) },
		[V_] = { "value_proj", BTX(FERRY_DIM_KVD) },
		[CTX] = { "context", BTX(FERRY_DIM_QD) },
		[LSE] = { "attention_lse", FERRY_LL_SHAPE(FERRY_DIM_B, FERRY_DIM_NH, FERRY_DIM_T) },
		[OUT] = { "out_proj", BTC },
		[MID] = { "post_self_attention_residual", BTC },
		[LN2] = { "post_self_attention_norm", BTC },
		[LN2_RSTD] = { "post_self_attention_norm_rstd", BT },
		[GATE_OUT] = { "mlpwi_0", BTX(FERRY_DIM_FFN) },
		[UP_OUT] = { "mlpwi_1", BTX(FERRY_DIM_FFN) },
		[H] = { "mlpwi", BTX(FERRY_DIM_FFN) },
		[MLPWO] = { "mlpwo", BTC },
		[Y] = { "decoder_layer_output", BTC },
	},
	.n_ops = 17,
	.ops = {
		FERRY_LL_RMSNORM(LN1, LN1_RSTD, X, FERRY_LLAMA_IN_NORM),
		FERRY_LL_MATMUL(QP, LN1, FERRY_LLAMA_Q, -1),
		FERRY_LL_MATMUL(KP, LN1, FERRY_LLAMA_K, -1),
		FERRY_LL_MATMUL(V_, LN1, FERRY_LLAMA_V, -1),
		FERRY_LL_RMSNORM(QR, QN_RSTD, QP, Q_NORM),
		FERRY_LL_RMSNORM(KR, KN_RSTD, KP, K_NORM),
		FERRY_LL_ROPE(Q, QR),
		FERRY_LL_ROPE(K, KR),
		FERRY_LL_ATTENTION(CTX, LSE, Q, K, V_, FERRY_SCALAR_ATTN_WINDOW),
		FERRY_LL_MATMUL(OUT, CTX, FERRY_LLAMA_O, -1),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, MID, X, OUT),
		FERRY_LL_RMSNORM(LN2, LN2_RSTD, MID, FERRY_LLAMA_POST_NORM),
		FERRY_LL_MATMUL(GATE_OUT, LN2, FERRY_LLAMA_GATE, -1),
		FERRY_LL_MATMUL(UP_OUT, LN2, FERRY_LLAMA_UP, -1),
		FERRY_LL_BINARY(FERRY_OP_SWIGLU, H, GATE_OUT, UP_OUT),
		FERRY_LL_MATMUL(MLPWO, H, FERRY_LLAMA_DOWN, -1),
		FERRY_LL_BINARY(FERRY_OP_RESIDUAL, Y, MID, MLPWO),
	},
	.input = X,
	.output = Y,
};

/* Qwen3Config's defaults (transformers): head_dim 128 whatever the width,
 * Qwen 2's window rule, no attention bias (attention_bias false). */
static const struct ferry_hf_family qwen3_hf = {
	.model_type = "qwen3",
	.architecture = "Qwen3ForCausalLM",
	.title = "Qwen 3",
	.vocab_size = 151936,
	.hidden_size = 4096,
	.intermediate_size = 22016,
	.num_hidden_layers = 32,
	.num_attention_heads = 32,
	.num_key_value_heads = 32,
	.head_dim = 128,
	.max_position_embeddings = 32768,
	.rope_theta = 10000.0,
	.rms_norm_eps = 1e-6,
	.sliding_window = 4096,
	.gated_sliding_window = true,
	.max_window_layers = 28,
};

const struct ferry_model_decl ferry_qwen3_decl = {
	.name = "qwen3",
	.title = "Qwen 3",
	.hf = &qwen3_hf,
	.n_params = N_PARAMS,
	.params = {
		FERRY_LLAMA_PARAMS,
		/* one gain of head_dim per layer, shared by the heads */
		[Q_NORM] = FERRY_LL_LAYER_P("q_norm", "self_attn.q_norm.weight", FERRY_LL_SHAPE(FERRY_DIM_HS), false,
					    FERRY_INIT_ONE),
		[K_NORM] = FERRY_LL_LAYER_P("k_norm", "self_attn.k_norm.weight", FERRY_LL_SHAPE(FERRY_DIM_HS), false,
					    FERRY_INIT_ONE),
	},
	.layer = &layer,
	FERRY_LLAMA_STAGES,
};
