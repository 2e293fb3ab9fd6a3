/*
 * Hugging Face config.json: reader (with the family's defaults: LlamaConfig's,
 * Qwen2Config's, given by the caller, since the model table sits above
 * data/) and atomic writer.  Every key of a file is read, known not to
 * change the arithmetic, or refused by name.  See include/ferry/safetensors.h.
 */
#include "ferry/safetensors.h"

#include "core/error.h"
#include "hf/hf_config_internal.h"
#include "hf/st_io.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_NAME "config.json"
#define CONFIG_MAX_BYTES (16u << 20)

/* dir/config.json when dir_or_file is a directory, else a copy of it. */
static char *config_path(const char *dir_or_file)
{
	struct stat sb;
	size_t n = strlen(dir_or_file);
	char *p = ferry_malloc(n + sizeof("/" CONFIG_NAME));

	if (!p)
		return NULL;
	memcpy(p, dir_or_file, n + 1);
	if (stat(dir_or_file, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		if (n == 0 || p[n - 1] != '/')
			p[n++] = '/';
		memcpy(p + n, CONFIG_NAME, sizeof(CONFIG_NAME));
	}
	return p;
}

const char *ferry_hfc_describe(json_t *j, char *buf, size_t n)
{
	switch (json_typeof(j)) {
	case JSON_INTEGER:
		snprintf(buf, n, "%lld", (long long)json_integer_value(j));
		break;
	case JSON_REAL:
		snprintf(buf, n, "%g", json_real_value(j));
		break;
	case JSON_STRING:
		snprintf(buf, n, "\"%.40s\"", json_string_value(j));
		break;
	case JSON_TRUE: snprintf(buf, n, "true"); break;
	case JSON_FALSE: snprintf(buf, n, "false"); break;
	case JSON_NULL: snprintf(buf, n, "null"); break;
	case JSON_ARRAY: snprintf(buf, n, "an array"); break;
	case JSON_OBJECT: snprintf(buf, n, "an object"); break;
	}
	return buf;
}

json_t *ferry_hfc_get(json_t *obj, const char *key)
{
	json_t *j = json_object_get(obj, key);

	return json_is_null(j) ? NULL : j;
}

static ferry_status get_int(json_t *root, const char *path, const char *key,
			    int def, int *out)
{
	json_t *j = ferry_hfc_get(root, key);
	char d[64];

	if (!j) {
		*out = def;
		return FERRY_OK;
	}
	if (!json_is_integer(j) || json_integer_value(j) <= 0 ||
	    json_integer_value(j) > INT_MAX)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s must be a positive integer that fits an int, not %s",
				   path, key, ferry_hfc_describe(j, d, sizeof(d)));
	*out = (int)json_integer_value(j);
	return FERRY_OK;
}

static ferry_status get_pos_real(json_t *obj, const char *path,
				 const char *key, double def, double *out)
{
	json_t *j = ferry_hfc_get(obj, key);
	char d[64];

	if (!j) {
		*out = def;
		return FERRY_OK;
	}
	if (!json_is_number(j) || !(json_number_value(j) > 0) ||
	    !isfinite(json_number_value(j)))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s must be a positive number, not %s",
				   path, key, ferry_hfc_describe(j, d, sizeof(d)));
	*out = json_number_value(j);
	return FERRY_OK;
}

static ferry_status get_string(json_t *obj, const char *path, const char *key,
			       const char *def, char *out, size_t size)
{
	json_t *j = ferry_hfc_get(obj, key);
	const char *s = def;
	char d[64];

	if (j) {
		s = json_string_value(j);
		if (!s || strlen(s) >= size)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: %s must be a string of at most %zu characters, not %s",
					   path, key, size - 1,
					   ferry_hfc_describe(j, d, sizeof(d)));
	}
	snprintf(out, size, "%s", s);
	return FERRY_OK;
}

/* ---- rope_scaling ------------------------------------------------------------ */

/* A positive number inside the rope_scaling object obj (named key there). */
static ferry_status rope_real(json_t *obj, const char *path, const char *key, const char *field,
			      double *out)
{
	json_t *j = ferry_hfc_get(obj, field);
	char d[64];

	if (!j || !json_is_number(j) || !(json_number_value(j) > 0) || !isfinite(json_number_value(j)))
		return ferry_error(FERRY_ERR_FORMAT, "%s: %s's %s must be a positive number, not %s", path, key,
				   field, j ? ferry_hfc_describe(j, d, sizeof(d)) : "absent");
	*out = json_number_value(j);
	return FERRY_OK;
}

/* Every key of obj is one of the type's (NULL-terminated list). */
static ferry_status rope_keys_known(json_t *obj, const char *path, const char *key, const char *type,
				    const char *const *known)
{
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v) {
		int ok = json_is_null(v);

		for (int i = 0; known[i] && !ok; i++)
			ok = !strcmp(k, known[i]);
		if (!ok)
			return ferry_error(FERRY_ERR_UNSUPPORTED,
					   "%s: %s's %s is not supported (ferry's %s rope scaling has no such "
					   "field)", path, key, k, type);
	}
	return FERRY_OK;
}

/* The scaling's fields of rope type name (linear, llama3) into c. */
static ferry_status rope_fields(json_t *j, const char *path, const char *key, const char *name,
				struct ferry_hf_config *c)
{
	static const char *const linear[] = { "rope_type", "type", "factor", "rope_theta", NULL };
	static const char *const llama3[] = { "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
					      "original_max_position_embeddings", "rope_theta", NULL };
	const int is_llama3 = !strcmp(name, "llama3");
	ferry_status st;
	int orig;

	if ((st = rope_keys_known(j, path, key, name, is_llama3 ? llama3 : linear)) ||
	    (st = rope_real(j, path, key, "factor", &c->rope_factor)))
		return st;
	c->rope_type = is_llama3 ? FERRY_HF_ROPE_LLAMA3 : FERRY_HF_ROPE_LINEAR;
	if (!is_llama3)
		return FERRY_OK;
	if ((st = rope_real(j, path, key, "low_freq_factor", &c->rope_low_freq_factor)) ||
	    (st = rope_real(j, path, key, "high_freq_factor", &c->rope_high_freq_factor)) ||
	    (st = get_int(j, path, "original_max_position_embeddings", 0, &orig)))
		return st;
	if (!orig || c->rope_high_freq_factor <= c->rope_low_freq_factor)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s of type \"llama3\" needs original_max_position_embeddings and "
				   "high_freq_factor (%g) above low_freq_factor (%g)", path, key,
				   c->rope_high_freq_factor, c->rope_low_freq_factor);
	c->rope_original_max_position_embeddings = orig;
	return FERRY_OK;
}

/* rope_scaling or transformers 5's rope_parameters: plain RoPE ("default",
 * or no type at all), "linear" or "llama3"; any other type is refused. */
static ferry_status read_rope(json_t *root, const char *path, const char *key, struct ferry_hf_config *c)
{
	json_t *j = ferry_hfc_get(root, key), *type;
	char d[64];

	if (!j)
		return FERRY_OK;
	if (!json_is_object(j))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: %s %s is not supported (ferry's rotary embedding takes an object)",
				   path, key, ferry_hfc_describe(j, d, sizeof(d)));
	type = ferry_hfc_get(j, "rope_type");
	if (!type)
		type = ferry_hfc_get(j, "type");
	if (!type || (json_is_string(type) && !strcmp(json_string_value(type), "default")))
		return FERRY_OK;
	if (json_is_string(type) && (!strcmp(json_string_value(type), "linear") ||
				     !strcmp(json_string_value(type), "llama3")))
		return rope_fields(j, path, key, json_string_value(type), c);
	return ferry_error(FERRY_ERR_UNSUPPORTED,
			   "%s: %s of type %s is not supported (ferry computes default, linear and llama3 "
			   "rotary embeddings)", path, key, ferry_hfc_describe(type, d, sizeof(d)));
}

/* The scaling's constants: a known type, positive factors, high above low. */
static ferry_status check_rope_scaling(const struct ferry_hf_config *c, const char *path, ferry_status code)
{
	if (c->rope_type == FERRY_HF_ROPE_DEFAULT)
		return FERRY_OK;
	if (c->rope_type != FERRY_HF_ROPE_LINEAR && c->rope_type != FERRY_HF_ROPE_LLAMA3)
		return ferry_error(code, "%s: rope scaling type %d is not default, linear or llama3", path,
				   c->rope_type);
	if (!(c->rope_factor > 0) || !isfinite(c->rope_factor))
		return ferry_error(code, "%s: rope_scaling's factor must be positive", path);
	if (c->rope_type == FERRY_HF_ROPE_LINEAR)
		return FERRY_OK;
	if (!(c->rope_low_freq_factor > 0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
	    !isfinite(c->rope_high_freq_factor) || c->rope_original_max_position_embeddings <= 0)
		return ferry_error(code, "%s: llama3 rope_scaling needs positive factors, high_freq_factor above "
				   "low_freq_factor and original_max_position_embeddings", path);
	return FERRY_OK;
}

/* The shape rules shared by the reader (FERRY_ERR_FORMAT) and the writer
 * (FERRY_ERR_INVALID).  head_dim_given: head_dim came from the file. */
static ferry_status check_config(const struct ferry_hf_config *c,
				 const char *path, ferry_status code,
				 int head_dim_given)
{
	const struct {
		const char *name;
		int v;
	} ints[] = {
		{ "hidden_size", c->hidden_size },
		{ "intermediate_size", c->intermediate_size },
		{ "num_attention_heads", c->num_attention_heads },
		{ "num_key_value_heads", c->num_key_value_heads },
		{ "num_hidden_layers", c->num_hidden_layers },
		{ "vocab_size", c->vocab_size },
		{ "max_position_embeddings", c->max_position_embeddings },
		{ "head_dim", c->head_dim },
	};
	size_t i;

	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (ints[i].v <= 0)
			return ferry_error(code, "%s: %s must be positive, not %d",
					   path, ints[i].name, ints[i].v);
	if (!head_dim_given && c->hidden_size % c->num_attention_heads)
		return ferry_error(code,
				   "%s: hidden_size (%d) is not divisible by num_attention_heads (%d)",
				   path, c->hidden_size, c->num_attention_heads);
	if (c->num_attention_heads % c->num_key_value_heads)
		return ferry_error(code,
				   "%s: num_attention_heads (%d) is not divisible by num_key_value_heads (%d)",
				   path, c->num_attention_heads,
				   c->num_key_value_heads);
	if (c->head_dim % 2)
		return ferry_error(code,
				   "%s: head_dim (%d) must be even for rotary embeddings",
				   path, c->head_dim);
	if ((long long)c->head_dim * c->num_attention_heads > INT_MAX)
		return ferry_error(code,
				   "%s: head_dim * num_attention_heads is too large",
				   path);
	if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
		return ferry_error(code, "%s: rope_theta must be positive",
				   path);
	if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
		return ferry_error(code, "%s: rms_norm_eps must be positive",
				   path);
	if ((c->has_bos && c->bos_token_id < 0) || c->n_eos < 0 || c->n_eos > FERRY_HF_MAX_EOS)
		return ferry_error(code, "%s: bad bos_token_id or eos_token_id", path);
	for (i = 0; i < (size_t)c->n_eos; i++)
		if (c->eos_token_id[i] < 0)
			return ferry_error(code, "%s: eos_token_id %d is negative", path, c->eos_token_id[i]);
	return check_rope_scaling(c, path, code);
}

/* "Llama or Qwen 2": the families' titles, for messages. */
static const char *family_titles(const struct ferry_hf_family *const *fam, int n, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = 0;
	for (int i = 0; i < n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " or " : "", fam[i]->title);
	return buf;
}

/* The family config.json says it is: its model_type, or without one an
 * architectures entry. */
static ferry_status find_family(json_t *root, const char *path, const struct ferry_hf_family *const *fam,
				int n, const struct ferry_hf_family **out)
{
	json_t *j = ferry_hfc_get(root, "model_type"), *a;
	char d[64], titles[128], archs[256] = "";

	for (int f = 0; f < n; f++) {
		*out = fam[f];
		if (j && json_is_string(j) && !strcmp(json_string_value(j), fam[f]->model_type))
			return FERRY_OK;
		a = j ? NULL : ferry_hfc_get(root, "architectures");
		for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++) {
			const char *s = json_string_value(json_array_get(a, i));

			if (s && !strcmp(s, fam[f]->architecture))
				return FERRY_OK;
		}
	}
	family_titles(fam, n, titles, sizeof(titles));
	if (j)
		return ferry_error(FERRY_ERR_FORMAT, "%s: model_type '%.40s' is not a %s", path,
				   json_is_string(j) ? json_string_value(j) : ferry_hfc_describe(j, d, sizeof(d)), titles);
	for (int f = 0, used = 0; f < n && used < (int)sizeof(archs); f++)
		used += snprintf(archs + used, sizeof(archs) - (size_t)used, "%s%s", f ? ", " : "",
				 fam[f]->architecture);
	return ferry_error(FERRY_ERR_FORMAT, "%s: no model_type, and architectures lists none of %s: not a %s",
			   path, archs, titles);
}

/* The integer sizes, the family's defaults for those absent. */
static ferry_status read_sizes(json_t *root, const char *path, const struct ferry_hf_family *f,
			       struct ferry_hf_config *c)
{
	ferry_status st;

	if ((st = get_int(root, path, "vocab_size", f->vocab_size, &c->vocab_size)) ||
	    (st = get_int(root, path, "hidden_size", f->hidden_size, &c->hidden_size)) ||
	    (st = get_int(root, path, "intermediate_size", f->intermediate_size, &c->intermediate_size)) ||
	    (st = get_int(root, path, "num_hidden_layers", f->num_hidden_layers, &c->num_hidden_layers)) ||
	    (st = get_int(root, path, "num_attention_heads", f->num_attention_heads, &c->num_attention_heads)) ||
	    (st = get_int(root, path, "num_key_value_heads",
			  f->num_key_value_heads ? f->num_key_value_heads : c->num_attention_heads,
			  &c->num_key_value_heads)) ||
	    (st = get_int(root, path, "max_position_embeddings", f->max_position_embeddings,
			  &c->max_position_embeddings)))
		return st;
	if (!ferry_hfc_get(root, "head_dim") && !f->head_dim && c->hidden_size % c->num_attention_heads)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: hidden_size (%d) is not divisible by num_attention_heads (%d)",
				   path, c->hidden_size, c->num_attention_heads);
	return get_int(root, path, "head_dim",
		       f->head_dim ? f->head_dim : c->hidden_size / c->num_attention_heads, &c->head_dim);
}

/* Gemma 3's windowed layers' base: rope_local_base_freq, or transformers
 * 5's rope_parameters.sliding_attention.rope_theta. */
static ferry_status read_local_theta(json_t *root, const char *path, const struct ferry_hf_family *f,
				     struct ferry_hf_config *c)
{
	json_t *local = ferry_hfc_get(ferry_hfc_get(root, "rope_parameters"), "sliding_attention");

	c->rope_local_base_freq = 0.0;
	if (!(f->rope_local_base_freq > 0))
		return FERRY_OK;
	if (!ferry_hfc_get(root, "rope_local_base_freq") && json_is_object(local))
		return get_pos_real(local, path, "rope_theta", f->rope_local_base_freq, &c->rope_local_base_freq);
	return get_pos_real(root, path, "rope_local_base_freq", f->rope_local_base_freq, &c->rope_local_base_freq);
}

/* rope_theta, rms_norm_eps, tie_word_embeddings and the dtype. */
static ferry_status read_numerics(json_t *root, const char *path, const struct ferry_hf_family *f,
				  struct ferry_hf_config *c)
{
	json_t *j, *rp;
	ferry_status st;
	char d[64];

	/* transformers 5 moved rope_theta into rope_parameters (Gemma 3's:
	   one object per layer type, the global layers' full_attention) */
	rp = ferry_hfc_get(root, "rope_parameters");
	if (json_is_object(ferry_hfc_get(rp, "full_attention")))
		rp = ferry_hfc_get(rp, "full_attention");
	if (!ferry_hfc_get(root, "rope_theta") && json_is_object(rp))
		st = get_pos_real(rp, path, "rope_theta", f->rope_theta, &c->rope_theta);
	else
		st = get_pos_real(root, path, "rope_theta", f->rope_theta, &c->rope_theta);
	if (st || (st = get_pos_real(root, path, "rms_norm_eps", f->rms_norm_eps, &c->rms_norm_eps)) ||
	    (st = read_local_theta(root, path, f, c)))
		return st;

	j = ferry_hfc_get(root, "tie_word_embeddings");
	if (j && !json_is_boolean(j))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tie_word_embeddings must be true or false, not %s",
				   path, ferry_hfc_describe(j, d, sizeof(d)));
	c->tie_word_embeddings = j ? json_is_true(j) : f->tie_word_embeddings;

	/* transformers 5 renamed torch_dtype to dtype. */
	return get_string(root, path,
			  ferry_hfc_get(root, "torch_dtype") ? "torch_dtype" : "dtype",
			  "float32", c->torch_dtype, sizeof(c->torch_dtype));
}

/* ---- the special tokens' ids --------------------------------------------------------- */

static bool token_id(json_t *j)
{
	return json_is_integer(j) && json_integer_value(j) >= 0 && json_integer_value(j) <= INT_MAX;
}

/* bos_token_id (one id) and eos_token_id (one, or a list), null or absent:
 * none. */
static ferry_status read_token_ids(json_t *root, const char *path, struct ferry_hf_config *c)
{
	json_t *bos = ferry_hfc_get(root, "bos_token_id"), *eos = ferry_hfc_get(root, "eos_token_id"), *e;
	size_t i;
	char d[64];

	if (bos && !token_id(bos))
		return ferry_error(FERRY_ERR_FORMAT, "%s: bos_token_id must be a token id (an integer from 0) or null, "
				   "not %s", path, ferry_hfc_describe(bos, d, sizeof(d)));
	c->has_bos = bos != NULL;
	c->bos_token_id = bos ? (int)json_integer_value(bos) : 0;
	c->eos_list = json_is_array(eos);
	if (eos && !token_id(eos) &&
	    !(c->eos_list && json_array_size(eos) >= 1 && json_array_size(eos) <= FERRY_HF_MAX_EOS))
		return ferry_error(FERRY_ERR_FORMAT, "%s: eos_token_id must be a token id (an integer from 0), a list "
				   "of 1 to %d of them, or null, not %s", path, FERRY_HF_MAX_EOS,
				   ferry_hfc_describe(eos, d, sizeof(d)));
	if (!c->eos_list) {
		c->n_eos = eos != NULL;
		c->eos_token_id[0] = eos ? (int)json_integer_value(eos) : 0;
		return FERRY_OK;
	}
	json_array_foreach(eos, i, e) {
		if (!token_id(e))
			return ferry_error(FERRY_ERR_FORMAT, "%s: eos_token_id[%zu] must be a token id (an integer "
					   "from 0), not %s", path, i, ferry_hfc_describe(e, d, sizeof(d)));
		c->eos_token_id[c->n_eos++] = (int)json_integer_value(e);
	}
	return FERRY_OK;
}

/* ---- every key accounted for ---------------------------------------------------- */

enum key_rule {
	KEY_READ,   /* read above */
	KEY_META,   /* does not change the model's arithmetic */
	KEY_FALSE,  /* accepted false only */
	KEY_ZERO,   /* accepted 0 only */
	KEY_ACT,    /* the activation: see check_act */
};

static const struct {
	const char *key;
	enum key_rule rule;
} known_keys[] = {
	{ "model_type", KEY_READ }, { "architectures", KEY_READ }, { "vocab_size", KEY_READ },
	{ "hidden_size", KEY_READ }, { "intermediate_size", KEY_READ }, { "num_hidden_layers", KEY_READ },
	{ "num_attention_heads", KEY_READ }, { "num_key_value_heads", KEY_READ },
	{ "max_position_embeddings", KEY_READ }, { "head_dim", KEY_READ }, { "rope_theta", KEY_READ },
	{ "rms_norm_eps", KEY_READ }, { "tie_word_embeddings", KEY_READ }, { "torch_dtype", KEY_READ },
	{ "dtype", KEY_READ }, { "rope_scaling", KEY_READ }, { "rope_parameters", KEY_READ },
	{ "hidden_act", KEY_ACT }, { "hidden_activation", KEY_ACT },
	/* token ids, generation, the library that wrote it, how transformers
	   initialises fresh weights or splits its matrix products */
	{ "bos_token_id", KEY_READ }, { "eos_token_id", KEY_READ },
	{ "transformers_version", KEY_META }, { "_name_or_path", KEY_META },
	{ "pad_token_id", KEY_META }, { "use_cache", KEY_META },
	{ "initializer_range", KEY_META }, { "pretraining_tp", KEY_META }, { "tokenizer_class", KEY_META },
	{ "return_dict", KEY_META }, { "output_attentions", KEY_META }, { "output_hidden_states", KEY_META },
	{ "torchscript", KEY_META }, { "_attn_implementation_autoset", KEY_META },
	{ "cache_implementation", KEY_META }, { "sliding_window_size", KEY_META }, /* Gemma 2's, unread */
	{ "attention_bias", KEY_FALSE }, { "mlp_bias", KEY_FALSE }, { "attention_dropout", KEY_ZERO },
	{ "use_bidirectional_attention", KEY_FALSE }, /* Gemma 3's; true is an encoder's */
};

/* The activation: the family's (silu, Gemma 2's gelu_pytorch_tanh) under
 * hidden_act or the family's own key; hidden_activation is only Gemma's. */
static ferry_status check_act(const char *path, const struct ferry_hf_family *f, const char *key, json_t *v)
{
	const char *act = f->hidden_act ? f->hidden_act : "silu";
	char d[64];

	if (strcmp(key, "hidden_act") && (!f->act_key || strcmp(key, f->act_key)))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s is not a field of %s", path, key, f->architecture);
	if (!json_is_string(v) || strcmp(json_string_value(v), act))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not supported (ferry's %s uses %s)", path, key,
				   ferry_hfc_describe(v, d, sizeof(d)), f->title, act);
	return FERRY_OK;
}

/* One key: known and acceptable, or refused by name. */
static ferry_status check_key(json_t *root, const char *path, const struct ferry_hf_family *f,
			      const struct ferry_hf_config *c, const char *key, json_t *v)
{
	ferry_status st;
	char d[64];

	if (json_is_null(v))
		return FERRY_OK; /* None: the class's default */
	if (ferry_hfc_gemma4_key(path, f, c, key, v, &st) || ferry_hfc_attention_key(root, path, f, c, key, v, &st))
		return st;
	if (!strcmp(key, "rope_local_base_freq") && !(f->rope_local_base_freq > 0))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: rope_local_base_freq is not a field of %s (ferry's %s "
				   "turns every layer alike)", path, f->architecture, f->title);
	if (!strcmp(key, "rope_local_base_freq"))
		return FERRY_OK; /* read_local_theta's */
	if (f->qkv_bias && !strcmp(key, "attention_bias"))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: attention_bias is not a field of %s (its q, k, v projections always "
				   "have biases)", path, f->architecture);
	for (size_t i = 0; i < sizeof(known_keys) / sizeof(known_keys[0]); i++) {
		if (strcmp(known_keys[i].key, key))
			continue;
		switch (known_keys[i].rule) {
		case KEY_READ:
		case KEY_META:
			return FERRY_OK;
		case KEY_FALSE:
			if (json_is_false(v))
				return FERRY_OK;
			break;
		case KEY_ZERO:
			if (json_is_number(v) && json_number_value(v) == 0)
				return FERRY_OK;
			break;
		case KEY_ACT:
			return check_act(path, f, key, v);
		}
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not supported", path, key,
				   ferry_hfc_describe(v, d, sizeof(d)));
	}
	return ferry_error(FERRY_ERR_UNSUPPORTED,
			   "%s: %s is not a field ferry implements (refused rather than ignored)", path, key);
}

/* rope_parameters per layer type (transformers 5's Gemma 3): the global
 * layers' scaling in full_attention, the windowed layers' plain RoPE. */
static ferry_status read_layer_ropes(json_t *root, const char *path, const struct ferry_hf_family *f,
				     struct ferry_hf_config *c)
{
	json_t *rp = ferry_hfc_get(root, "rope_parameters");
	struct ferry_hf_config local;
	ferry_status st;

	if (!json_is_object(ferry_hfc_get(rp, "full_attention")) && !ferry_hfc_get(rp, "sliding_attention"))
		return FERRY_OK;
	if (!(f->rope_local_base_freq > 0))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: rope_parameters by layer type is not supported "
				   "(ferry's %s turns every layer alike)", path, f->title);
	memset(&local, 0, sizeof(local));
	if ((st = read_rope(rp, path, "full_attention", c)) || (st = read_rope(rp, path, "sliding_attention", &local)))
		return st;
	if (local.rope_type != FERRY_HF_ROPE_DEFAULT)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: rope_parameters' sliding_attention of a scaled type is "
				   "not supported (ferry's %s turns its windowed layers unscaled)", path, f->title);
	return FERRY_OK;
}

/* What ferry does not compute is refused, not ignored. */
static ferry_status check_supported(json_t *root, const char *path, const struct ferry_hf_family *f,
				    struct ferry_hf_config *c)
{
	const char *key;
	ferry_status st;
	json_t *v;

	if ((st = read_rope(root, path, "rope_scaling", c)) || (st = read_rope(root, path, "rope_parameters", c)) ||
	    (st = read_layer_ropes(root, path, f, c)) || (st = ferry_hfc_gemma4_required(root, path, f, c)))
		return st;
	json_object_foreach(root, key, v) {
		if ((st = check_key(root, path, f, c, key, v)))
			return st;
	}
	return FERRY_OK;
}

static ferry_status parse_config(json_t *root, const char *path, const struct ferry_hf_family *const *fam,
				 int n, struct ferry_hf_config *c)
{
	const struct ferry_hf_family *f = NULL;
	ferry_status st;

	if (!json_is_object(root))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: not a JSON object", path);
	st = find_family(root, path, fam, n, &f);
	if (st)
		return st;
	snprintf(c->model_type, sizeof(c->model_type), "%s", f->model_type);
	if ((st = read_sizes(root, path, f, c)) ||
	    (st = read_numerics(root, path, f, c)) ||
	    (st = ferry_hfc_read_attention(root, path, f, c)) ||
	    (st = read_token_ids(root, path, c)) ||
	    (st = check_supported(root, path, f, c)))
		return st;
	return check_config(c, path, FERRY_ERR_FORMAT,
			    ferry_hfc_get(root, "head_dim") != NULL || f->head_dim);
}

ferry_status ferry_hf_config_read_as(const char *dir_or_file, const struct ferry_hf_family *const *families,
				     int n, struct ferry_hf_config *out)
{
	struct ferry_hf_config c;
	json_error_t jerr;
	json_t *root;
	ferry_status st;
	char *path, *text = NULL;
	size_t len;

	if (!dir_or_file || !out || (n && !families) || n < 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_hf_config_read: path, families or out is NULL");
	path = config_path(dir_or_file);
	if (!path)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory",
				   dir_or_file);
	st = ferry_st_read_small_file(path, CONFIG_MAX_BYTES, &text, &len);
	if (st)
		goto out;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: not valid JSON: %s (line %d, column %d)",
				 path, jerr.text, jerr.line, jerr.column);
		goto out;
	}
	memset(&c, 0, sizeof(c));
	st = parse_config(root, path, families, n, &c);
	json_decref(root);
	if (!st)
		*out = c;
out:
	ferry_free(text);
	ferry_free(path);
	return st;
}

/* ---- writer ---------------------------------------------------------------- */

/* Significant digits for printing v with "%.*g": the fewest that read back
 * as v exactly, but at least all of its integer digits, so that 10000.0
 * prints as Python does and not as 1e+04. */
static int real_digits(double v)
{
	char buf[64];
	double a = fabs(v);
	int p, min = 1;

	while (min < 17 && a >= 10.0) {
		a /= 10.0;
		min++;
	}
	for (p = min; p < 17; p++) {
		snprintf(buf, sizeof(buf), "%.*g", p, v);
		if (strtod(buf, NULL) == v)
			return p;
	}
	return 17;
}

struct text {
	const char *s;
	size_t n;
};

static ferry_status emit_text(int fd, const char *tmp, void *ctx)
{
	const struct text *t = ctx;

	return ferry_st_write_all(fd, tmp, t->s, t->n);
}

/* rope_scaling's object for cfg (keys sorted, as transformers writes them),
 * or NULL on no memory. */
static json_t *rope_scaling_json(const struct ferry_hf_config *cfg)
{
	json_t *r = json_object();
	const int llama3 = cfg->rope_type == FERRY_HF_ROPE_LLAMA3;
	int bad = !r || json_object_set_new(r, "factor", json_real(cfg->rope_factor));

	if (llama3)
		bad = bad || json_object_set_new(r, "high_freq_factor", json_real(cfg->rope_high_freq_factor)) ||
		      json_object_set_new(r, "low_freq_factor", json_real(cfg->rope_low_freq_factor)) ||
		      json_object_set_new(r, "original_max_position_embeddings",
					  json_integer(cfg->rope_original_max_position_embeddings));
	bad = bad || json_object_set_new(r, "rope_type", json_string(llama3 ? "llama3" : "linear"));
	if (bad) {
		json_decref(r);
		return NULL;
	}
	return r;
}

/* The keys of the family: its attention's (hf_config_attn.c: the window,
 * Gemma 2's scale and caps), Llama's biases off. */
static int set_family_keys(json_t *root, const struct ferry_hf_family *f, const struct ferry_hf_config *cfg)
{
	if (ferry_hfc_set_attention(root, f, cfg))
		return -1;
	if (f->rope_local_base_freq > 0 &&
	    json_object_set_new(root, "rope_local_base_freq", json_real(cfg->rope_local_base_freq)))
		return -1;
	if (f->qkv_bias)
		return 0;
	return json_object_set_new(root, "attention_bias", json_false()) ||
	       json_object_set_new(root, "mlp_bias", json_false());
}

/* bos_token_id and eos_token_id, where cfg has them. */
static int set_token_ids(json_t *root, const struct ferry_hf_config *cfg)
{
	json_t *eos;

	if (cfg->has_bos && json_object_set_new(root, "bos_token_id", json_integer(cfg->bos_token_id)))
		return -1;
	if (!cfg->n_eos)
		return 0;
	if (!cfg->eos_list)
		return json_object_set_new(root, "eos_token_id", json_integer(cfg->eos_token_id[0]));
	if (!(eos = json_array()))
		return -1;
	for (int i = 0; i < cfg->n_eos; i++)
		if (json_array_append_new(eos, json_integer(cfg->eos_token_id[i]))) {
			json_decref(eos);
			return -1;
		}
	return json_object_set_new(root, "eos_token_id", eos);
}

/* config.json's fields for cfg, in transformers' order, into *out (the
 * caller releases it); dtype is the torch_dtype to write. */
static ferry_status build_config_json(const struct ferry_hf_config *cfg, const struct ferry_hf_family *f,
				      const char *dtype, const char *path, json_t **out)
{
	json_t *root = json_object(), *arch = json_array();
	int bad;

	*out = root;
	bad = !root || !arch ||
	      json_array_append_new(arch, json_string(f->architecture)) ||
	      json_object_set(root, "architectures", arch) ||
	      json_object_set_new(root, "model_type", json_string(f->model_type)) ||
	      json_object_set_new(root, f->act_key ? f->act_key : "hidden_act",
				  json_string(f->hidden_act ? f->hidden_act : "silu")) ||
	      json_object_set_new(root, "hidden_size", json_integer(cfg->hidden_size)) ||
	      json_object_set_new(root, "intermediate_size",
				  json_integer(cfg->intermediate_size)) ||
	      json_object_set_new(root, "num_attention_heads",
				  json_integer(cfg->num_attention_heads)) ||
	      json_object_set_new(root, "num_key_value_heads",
				  json_integer(cfg->num_key_value_heads)) ||
	      json_object_set_new(root, "num_hidden_layers",
				  json_integer(cfg->num_hidden_layers)) ||
	      json_object_set_new(root, "head_dim", json_integer(cfg->head_dim)) ||
	      json_object_set_new(root, "vocab_size", json_integer(cfg->vocab_size)) ||
	      json_object_set_new(root, "max_position_embeddings",
				  json_integer(cfg->max_position_embeddings)) ||
	      json_object_set_new(root, "rope_theta", json_real(cfg->rope_theta)) ||
	      (cfg->rope_type && json_object_set_new(root, "rope_scaling", rope_scaling_json(cfg))) ||
	      json_object_set_new(root, "rms_norm_eps", json_real(cfg->rms_norm_eps)) ||
	      json_object_set_new(root, "tie_word_embeddings",
				  json_boolean(cfg->tie_word_embeddings)) ||
	      set_token_ids(root, cfg) ||
	      set_family_keys(root, f, cfg) || ferry_hfc_set_gemma4(root, f, cfg);
	json_decref(arch);
	if (!bad && json_object_set_new(root, "torch_dtype", json_string(dtype)))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: torch_dtype is not valid UTF-8", path);
	if (bad)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory building the JSON", path);
	return FERRY_OK;
}

/* The digits every real of cfg needs to read back exactly. */
static int config_digits(const struct ferry_hf_config *cfg)
{
	const double reals[] = { cfg->rope_theta, cfg->rms_norm_eps, cfg->rope_factor, cfg->rope_low_freq_factor,
				 cfg->rope_high_freq_factor, cfg->attn_logit_softcapping,
				 cfg->final_logit_softcapping, cfg->rope_local_base_freq };
	int prec = 1;

	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
		if (real_digits(reals[i]) > prec)
			prec = real_digits(reals[i]);
	return prec;
}

/* root indented as transformers writes it, reals printed with the digits
 * that read back exactly, and a final newline: *buf (the caller frees it),
 * *len bytes. */
static ferry_status encode_config_json(json_t *root,
				       const struct ferry_hf_config *cfg,
				       const char *path, char **buf,
				       size_t *len)
{
	size_t n, flags;

	flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(config_digits(cfg));
	n = json_dumpb(root, NULL, 0, flags);
	*buf = n ? ferry_malloc(n + 1) : NULL;
	if (!*buf || json_dumpb(root, *buf, n, flags) != n)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory encoding the JSON", path);
	(*buf)[n] = '\n';
	*len = n + 1;
	return FERRY_OK;
}

ferry_status ferry_hf_config_write_as(const char *dir, const struct ferry_hf_config *cfg,
				      const struct ferry_hf_family *family)
{
	const char *dtype;
	struct text txt;
	ferry_status st;
	json_t *root = NULL;
	char *path = NULL, *buf = NULL;
	size_t n;

	if (!dir || !cfg || !family)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_hf_config_write: dir, cfg or family is NULL");
	n = strlen(dir);
	path = ferry_malloc(n + sizeof("/" CONFIG_NAME));
	if (!path)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", dir);
	memcpy(path, dir, n);
	if (n == 0 || dir[n - 1] != '/')
		path[n++] = '/';
	memcpy(path + n, CONFIG_NAME, sizeof(CONFIG_NAME));

	st = check_config(cfg, path, FERRY_ERR_INVALID, 1);
	if (st)
		goto out;
	if ((st = ferry_hfc_check_attention(cfg, family, path)))
		goto out;
	dtype = cfg->torch_dtype[0] ? cfg->torch_dtype : "float32";
	if (!memchr(cfg->torch_dtype, '\0', sizeof(cfg->torch_dtype))) {
		st = ferry_error(FERRY_ERR_INVALID,
				 "%s: torch_dtype is not a terminated string",
				 path);
		goto out;
	}
	st = build_config_json(cfg, family, dtype, path, &root);
	if (!st)
		st = encode_config_json(root, cfg, path, &buf, &txt.n);
	if (st)
		goto out;
	txt.s = buf;
	st = ferry_st_atomic_write(path, emit_text, &txt);
out:
	json_decref(root);
	ferry_free(buf);
	ferry_free(path);
	return st;
}
