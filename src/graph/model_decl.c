/* Model declarations: a configuration's dimensions and constants. */
#include "graph/model_decl.h"
#include "ops/rope_freq.h"

#include <math.h>
#include <string.h>

struct ferry_dims ferry_model_dims(const struct ferry_model_config *cfg, int B, int T)
{
	struct ferry_dims d = { { 0 } };

	d.v[FERRY_DIM_B] = B;
	d.v[FERRY_DIM_T] = T;
	d.v[FERRY_DIM_C] = cfg->channels;
	d.v[FERRY_DIM_NH] = cfg->heads;
	d.v[FERRY_DIM_NKV] = cfg->kv_heads;
	d.v[FERRY_DIM_HS] = cfg->head_size;
	d.v[FERRY_DIM_QD] = (int64_t)cfg->heads * cfg->head_size;
	d.v[FERRY_DIM_KVD] = (int64_t)cfg->kv_heads * cfg->head_size;
	d.v[FERRY_DIM_FFN] = cfg->ffn;
	d.v[FERRY_DIM_V] = cfg->vocab;
	d.v[FERRY_DIM_VP] = cfg->padded_vocab;
	d.v[FERRY_DIM_MAXT] = cfg->max_seq;
	d.v[FERRY_DIM_L] = cfg->layers;
	return d;
}

void ferry_model_scalars(const struct ferry_model_config *cfg, float out[FERRY_OP_SCALAR_COUNT])
{
	memset(out, 0, FERRY_OP_SCALAR_COUNT * sizeof(float));
	out[FERRY_SCALAR_NORM_EPS] = cfg->norm_eps;
	out[FERRY_SCALAR_ROPE_THETA] = cfg->rope_theta;
	out[FERRY_SCALAR_ROPE_TYPE] = (float)cfg->rope_scaling.type;
	out[FERRY_SCALAR_ROPE_FACTOR] = cfg->rope_scaling.factor;
	out[FERRY_SCALAR_ROPE_LOW_FREQ_FACTOR] = cfg->rope_scaling.low_freq_factor;
	out[FERRY_SCALAR_ROPE_HIGH_FREQ_FACTOR] = cfg->rope_scaling.high_freq_factor;
	out[FERRY_SCALAR_ROPE_ORIGINAL_MAX_POS] = (float)cfg->rope_scaling.original_max_pos;
	out[FERRY_SCALAR_ATTN_WINDOW] = (float)cfg->sliding_window; /* exact: at most 2^24 */
	out[FERRY_SCALAR_WINDOW_EVERY] = (float)cfg->window_layers_every;
	out[FERRY_SCALAR_WINDOW_FROM] = (float)cfg->window_layers_from;
	out[FERRY_SCALAR_WINDOW_FULL_EVERY] = (float)cfg->window_full_every;
	out[FERRY_SCALAR_ROPE_LOCAL_THETA] = cfg->rope_local_theta;
	/* Gemma 2's: the scale transformers computes in double and multiplies
	   into float32 scores; the caps as given (negative: none) */
	out[FERRY_SCALAR_ATTN_SCALE] = cfg->query_pre_attn_scalar > 0 ? (float)pow(cfg->query_pre_attn_scalar, -0.5)
									: 0.0f;
	out[FERRY_SCALAR_ATTN_SOFTCAP] = cfg->attn_softcap > 0 ? cfg->attn_softcap : 0.0f;
	out[FERRY_SCALAR_FINAL_SOFTCAP] = cfg->final_softcap > 0 ? cfg->final_softcap : 0.0f;
	out[FERRY_SCALAR_EMBED_SCALE] = (float)sqrt((double)cfg->channels);
}

/* The public scaling types are the rope op's, and its constants follow its
 * theta in the order ops/rope_freq.h reads them. */
_Static_assert((int)FERRY_ROPE_SCALING_LINEAR == (int)FERRY_ROPE_LINEAR &&
		       (int)FERRY_ROPE_SCALING_LLAMA3 == (int)FERRY_ROPE_LLAMA3,
	       "rope scaling types");
_Static_assert(FERRY_SCALAR_ROPE_ORIGINAL_MAX_POS - FERRY_SCALAR_ROPE_THETA + 1 == FERRY_ROPE_N_SCALARS,
	       "rope constants");

bool ferry_param_present(const struct ferry_model_decl *md, const struct ferry_model_config *cfg, int p)
{
	return !md->params[p].tied_head || cfg->tie_embeddings < 0;
}
