/*
 * Gemma 4's config.json keys (Gemma4TextConfig, a family with gemma4_keys):
 * what ferry's gemma4 declaration computes is accepted, the rest refused by
 * name.  Implemented: layer_types, the windowed and global layers' own RoPE
 * bases (rope_parameters by layer type, required: the class's default turns
 * the global layers by a proportional, partial rotary), q/k/v norms, the
 * final cap.  Not yet (each accepted only switched off):
 *
 *   - per-layer input embeddings: hidden_size_per_layer_input 0
 *     (vocab_size_per_layer_input is then unused);
 *   - K/V shared by the last layers: num_kv_shared_layers 0
 *     (use_double_wide_mlp widens only those layers' MLP: then no effect);
 *   - attention_k_eq_v false (the global layers' keys as values);
 *   - the global layers' own head size and kv heads: per_layer_config {},
 *     global_head_dim the head_dim, num_global_key_value_heads the
 *     num_key_value_heads (ferry's layers are all one shape);
 *   - the mixture-of-experts block: enable_moe_block false, its sizes null.
 *
 * use_bidirectional_attention "vision" is accepted (text has no image
 * tokens), "all" refused.
 */
#include "hf/hf_config_internal.h"
#include "core/error.h"

#include <string.h>

/* The keys refused unless switched off (0, false, {}; null passes before). */
static const struct {
	const char *key;
	const char *what;
} off_keys[] = {
	{ "hidden_size_per_layer_input", "per-layer input embeddings" },
	{ "num_kv_shared_layers", "K/V shared by the last layers" },
	{ "attention_k_eq_v", "keys used as values on the global layers" },
	{ "enable_moe_block", "the mixture-of-experts block" },
	{ "num_experts", "the mixture-of-experts block" },
	{ "top_k_experts", "the mixture-of-experts block" },
	{ "moe_intermediate_size", "the mixture-of-experts block" },
	{ "per_layer_config", "the global layers' own head size and kv heads" },
};

static bool switched_off(json_t *v)
{
	return json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
	       (json_is_object(v) && json_object_size(v) == 0);
}

/* An integer key equal to want (null: the class's default, which is want). */
static ferry_status same_int(const char *path, const char *key, json_t *v, int want, const char *what)
{
	char d[64];

	if (json_is_integer(v) && json_integer_value(v) == want)
		return FERRY_OK;
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not implemented yet (%s; ferry's Gemma 4 "
			   "layers all have one shape: it must be %d)", path, key, ferry_hfc_describe(v, d, sizeof(d)),
			   what, want);
}

bool ferry_hfc_gemma4_key(const char *path, const struct ferry_hf_family *f, const struct ferry_hf_config *c,
			  const char *key, json_t *v, ferry_status *st)
{
	char d[64];

	if (!f->gemma4_keys)
		return false;
	*st = FERRY_OK;
	for (size_t i = 0; i < sizeof(off_keys) / sizeof(off_keys[0]); i++)
		if (!strcmp(key, off_keys[i].key)) {
			if (!switched_off(v))
				*st = ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not implemented yet (%s)", path,
						  key, ferry_hfc_describe(v, d, sizeof(d)), off_keys[i].what);
			return true;
		}
	if (!strcmp(key, "vocab_size_per_layer_input"))
		return true; /* unused without per-layer inputs */
	if (!strcmp(key, "use_double_wide_mlp")) {
		if (!json_is_boolean(v))
			*st = ferry_error(FERRY_ERR_FORMAT, "%s: use_double_wide_mlp must be true or false", path);
		return true; /* it widens the shared-K/V layers' MLP alone: there are none */
	}
	if (!strcmp(key, "use_bidirectional_attention")) {
		/* "vision" acts on image tokens alone, in the multimodal model */
		if (!json_is_string(v) || strcmp(json_string_value(v), "vision"))
			*st = ferry_error(FERRY_ERR_UNSUPPORTED, "%s: use_bidirectional_attention %s is not supported "
					  "(ferry's Gemma 4 attends causally: null or \"vision\")", path,
					  ferry_hfc_describe(v, d, sizeof(d)));
		return true;
	}
	if (!strcmp(key, "global_head_dim"))
		*st = same_int(path, key, v, c->head_dim, "the global layers' own head size");
	else if (!strcmp(key, "num_global_key_value_heads"))
		*st = same_int(path, key, v, c->num_key_value_heads, "the global layers' own kv heads");
	else if (!strcmp(key, "rope_local_base_freq") || !strcmp(key, "query_pre_attn_scalar") ||
		 !strcmp(key, "attn_logit_softcapping"))
		*st = ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s is not a field of %s", path, key, f->architecture);
	else
		return false;
	return true;
}

ferry_status ferry_hfc_gemma4_required(json_t *root, const char *path, const struct ferry_hf_family *f,
				       const struct ferry_hf_config *c)
{
	json_t *rp = ferry_hfc_get(root, "rope_parameters");

	if (!f->gemma4_keys)
		return FERRY_OK;
	/* absent keys take the class's defaults, which are what ferry lacks */
	if (!json_object_get(root, "hidden_size_per_layer_input"))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: hidden_size_per_layer_input is absent: the class's "
				   "default (256) gives per-layer input embeddings, not implemented yet", path);
	if (!json_object_get(root, "per_layer_config") && c->head_dim != 512 &&
	    !ferry_hfc_get(root, "global_head_dim"))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: per_layer_config and global_head_dim are absent: the "
				   "class's default gives the global layers head size 512, not head_dim %d (not "
				   "implemented yet)", path, c->head_dim);
	if (!json_is_object(ferry_hfc_get(rp, "full_attention")) || !json_is_object(ferry_hfc_get(rp, "sliding_attention")))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: rope_parameters must give full_attention and "
				   "sliding_attention (the class's default turns the global layers by a "
				   "proportional, partial rotary, not implemented yet)", path);
	return FERRY_OK;
}

int ferry_hfc_set_gemma4(json_t *root, const struct ferry_hf_family *f, const struct ferry_hf_config *c)
{
	json_t *rp;

	if (!f->gemma4_keys)
		return 0;
	rp = json_pack("{s:{s:f,s:s},s:{s:f,s:s}}", "full_attention", "rope_theta", c->rope_theta, "rope_type",
		       "default", "sliding_attention", "rope_theta", c->rope_local_base_freq, "rope_type", "default");
	if (!rp)
		return -1;
	/* its scores are unscaled: the family's query_pre_attn_scalar 1, not a key */
	json_object_del(root, "query_pre_attn_scalar");
	json_object_del(root, "rope_theta");
	json_object_del(root, "rope_local_base_freq");
	return json_object_set_new(root, "rope_parameters", rp) ||
	       json_object_set_new(root, "hidden_size_per_layer_input", json_integer(0)) ||
	       json_object_set_new(root, "num_kv_shared_layers", json_integer(0)) ||
	       json_object_set_new(root, "attention_k_eq_v", json_false()) ||
	       json_object_set_new(root, "use_double_wide_mlp", json_false()) ||
	       json_object_set_new(root, "enable_moe_block", json_false()) ||
	       json_object_set_new(root, "per_layer_config", json_object());
}
