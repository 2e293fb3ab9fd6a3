/*
 * Hugging Face config.json for Llama models: reader (with LlamaConfig's
 * defaults) and atomic writer.  See include/ferry/safetensors.h.
 */
#include "ferry/safetensors.h"

#include "core/error.h"
#include "graph/model_decl.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Defined in safetensors.c (internal to libferry). */
typedef ferry_status (*ferry_st_emit_fn)(int fd, const char *tmp, void *ctx);
ferry_status ferry_st_atomic_write(const char *path, ferry_st_emit_fn emit,
				   void *ctx);
ferry_status ferry_st_write_all(int fd, const char *tmp, const void *buf,
				size_t n);
ferry_status ferry_st_read_small_file(const char *path, uint64_t max,
				      char **out, size_t *len);

#define CONFIG_NAME "config.json"
#define CONFIG_MAX_BYTES (16u << 20)

/* LlamaConfig's defaults (transformers). */
#define DEF_VOCAB 32000
#define DEF_HIDDEN 4096
#define DEF_INTERMEDIATE 11008
#define DEF_LAYERS 32
#define DEF_HEADS 32
#define DEF_MAX_POS 2048
#define DEF_ROPE_THETA 10000.0
#define DEF_RMS_EPS 1e-6

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

/* Describes a JSON value for a message: 4096, 4096.5, "x", true, ... */
static const char *describe(json_t *j, char *buf, size_t n)
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

/* The value of key, NULL when absent or null (transformers' None). */
static json_t *get(json_t *obj, const char *key)
{
	json_t *j = json_object_get(obj, key);

	return json_is_null(j) ? NULL : j;
}

static ferry_status get_int(json_t *root, const char *path, const char *key,
			    int def, int *out)
{
	json_t *j = get(root, key);
	char d[64];

	if (!j) {
		*out = def;
		return FERRY_OK;
	}
	if (!json_is_integer(j) || json_integer_value(j) <= 0 ||
	    json_integer_value(j) > INT_MAX)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s must be a positive integer that fits an int, not %s",
				   path, key, describe(j, d, sizeof(d)));
	*out = (int)json_integer_value(j);
	return FERRY_OK;
}

static ferry_status get_pos_real(json_t *obj, const char *path,
				 const char *key, double def, double *out)
{
	json_t *j = get(obj, key);
	char d[64];

	if (!j) {
		*out = def;
		return FERRY_OK;
	}
	if (!json_is_number(j) || !(json_number_value(j) > 0) ||
	    !isfinite(json_number_value(j)))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s must be a positive number, not %s",
				   path, key, describe(j, d, sizeof(d)));
	*out = json_number_value(j);
	return FERRY_OK;
}

static ferry_status get_string(json_t *obj, const char *path, const char *key,
			       const char *def, char *out, size_t size)
{
	json_t *j = get(obj, key);
	const char *s = def;
	char d[64];

	if (j) {
		s = json_string_value(j);
		if (!s || strlen(s) >= size)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: %s must be a string of at most %zu characters, not %s",
					   path, key, size - 1,
					   describe(j, d, sizeof(d)));
	}
	snprintf(out, size, "%s", s);
	return FERRY_OK;
}

/* rope_scaling / rope_parameters: only plain RoPE ("default", or no type
 * at all) is what ferry computes. */
static ferry_status check_rope(json_t *root, const char *path, const char *key)
{
	json_t *j = get(root, key), *type;
	char d[64];

	if (!j)
		return FERRY_OK;
	if (!json_is_object(j))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: %s %s is not supported (ferry's Llama has plain RoPE)",
				   path, key, describe(j, d, sizeof(d)));
	type = get(j, "rope_type");
	if (!type)
		type = get(j, "type");
	if (!type || (json_is_string(type) &&
		      !strcmp(json_string_value(type), "default")))
		return FERRY_OK;
	return ferry_error(FERRY_ERR_UNSUPPORTED,
			   "%s: %s of type %s is not supported (ferry's Llama has plain RoPE)",
			   path, key, describe(type, d, sizeof(d)));
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
	return FERRY_OK;
}

/* The model config.json describes (*md): its model_type's, or without one
 * the first in its architectures list that ferry declares. */
static ferry_status find_model(json_t *root, const char *path,
			       const struct ferry_model_decl **md)
{
	json_t *j = get(root, "model_type"), *a;
	const char *type = json_string_value(j);
	char d[64], titles[FERRY_MODEL_LIST_CHARS], archs[FERRY_MODEL_LIST_CHARS];
	size_t i;

	ferry_model_hf_list(FERRY_HF_TITLE, titles, sizeof(titles));
	if (j) {
		*md = type ? ferry_model_decl_find_hf(type, NULL) : NULL;
		if (!*md)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: model_type '%.40s' is not a %s",
					   path,
					   type ? type : describe(j, d, sizeof(d)),
					   titles);
		return FERRY_OK;
	}
	a = get(root, "architectures");
	*md = NULL;
	for (i = 0; json_is_array(a) && i < json_array_size(a) && !*md; i++)
		*md = ferry_model_decl_find_hf(
			NULL, json_string_value(json_array_get(a, i)));
	if (!*md)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: no model_type, and architectures does not "
				   "list %s: not a %s",
				   path,
				   ferry_model_hf_list(FERRY_HF_ARCHITECTURE, archs,
						       sizeof(archs)),
				   titles);
	return FERRY_OK;
}

/* The integer sizes, LlamaConfig's defaults for those absent. */
static ferry_status read_sizes(json_t *root, const char *path,
			       struct ferry_hf_config *c)
{
	ferry_status st;

	if ((st = get_int(root, path, "vocab_size", DEF_VOCAB, &c->vocab_size)) ||
	    (st = get_int(root, path, "hidden_size", DEF_HIDDEN, &c->hidden_size)) ||
	    (st = get_int(root, path, "intermediate_size", DEF_INTERMEDIATE,
			  &c->intermediate_size)) ||
	    (st = get_int(root, path, "num_hidden_layers", DEF_LAYERS,
			  &c->num_hidden_layers)) ||
	    (st = get_int(root, path, "num_attention_heads", DEF_HEADS,
			  &c->num_attention_heads)) ||
	    (st = get_int(root, path, "num_key_value_heads",
			  c->num_attention_heads, &c->num_key_value_heads)) ||
	    (st = get_int(root, path, "max_position_embeddings", DEF_MAX_POS,
			  &c->max_position_embeddings)))
		return st;
	if (!get(root, "head_dim") && c->hidden_size % c->num_attention_heads)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: hidden_size (%d) is not divisible by num_attention_heads (%d)",
				   path, c->hidden_size, c->num_attention_heads);
	return get_int(root, path, "head_dim",
		       c->hidden_size / c->num_attention_heads, &c->head_dim);
}

/* rope_theta, rms_norm_eps, tie_word_embeddings and the dtype. */
static ferry_status read_numerics(json_t *root, const char *path,
				  struct ferry_hf_config *c)
{
	json_t *j, *rp;
	ferry_status st;
	char d[64];

	/* transformers 5 moved rope_theta into rope_parameters. */
	rp = get(root, "rope_parameters");
	if (!get(root, "rope_theta") && json_is_object(rp))
		st = get_pos_real(rp, path, "rope_theta", DEF_ROPE_THETA,
				  &c->rope_theta);
	else
		st = get_pos_real(root, path, "rope_theta", DEF_ROPE_THETA,
				  &c->rope_theta);
	if (st ||
	    (st = get_pos_real(root, path, "rms_norm_eps", DEF_RMS_EPS,
			       &c->rms_norm_eps)))
		return st;

	j = get(root, "tie_word_embeddings");
	if (j && !json_is_boolean(j))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tie_word_embeddings must be true or false, not %s",
				   path, describe(j, d, sizeof(d)));
	c->tie_word_embeddings = j && json_is_true(j);

	/* transformers 5 renamed torch_dtype to dtype. */
	return get_string(root, path,
			  get(root, "torch_dtype") ? "torch_dtype" : "dtype",
			  "float32", c->torch_dtype, sizeof(c->torch_dtype));
}

/* What ferry's Llama does not compute is refused, not ignored. */
static ferry_status check_supported(json_t *root, const char *path)
{
	ferry_status st;
	json_t *j;
	char d[64];

	if ((st = check_rope(root, path, "rope_scaling")) ||
	    (st = check_rope(root, path, "rope_parameters")))
		return st;
	j = get(root, "hidden_act");
	if (j && (!json_is_string(j) || strcmp(json_string_value(j), "silu")))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: hidden_act %s is not supported (ferry's Llama uses silu)",
				   path, describe(j, d, sizeof(d)));
	if (json_is_true(get(root, "attention_bias")))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: attention_bias true is not supported",
				   path);
	if (json_is_true(get(root, "mlp_bias")))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: mlp_bias true is not supported", path);
	return FERRY_OK;
}

static ferry_status parse_config(json_t *root, const char *path,
				 struct ferry_hf_config *c)
{
	const struct ferry_model_decl *md;
	ferry_status st;

	if (!json_is_object(root))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: not a JSON object", path);
	st = find_model(root, path, &md);
	if (st)
		return st;
	snprintf(c->model_type, sizeof(c->model_type), "%s", md->hf_model_type);
	if ((st = read_sizes(root, path, c)) ||
	    (st = read_numerics(root, path, c)) ||
	    (st = check_supported(root, path)))
		return st;
	return check_config(c, path, FERRY_ERR_FORMAT,
			    get(root, "head_dim") != NULL);
}

ferry_status ferry_hf_config_read(const char *dir_or_file,
				  struct ferry_hf_config *out)
{
	struct ferry_hf_config c;
	json_error_t jerr;
	json_t *root;
	ferry_status st;
	char *path, *text = NULL;
	size_t len;

	if (!dir_or_file || !out)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_hf_config_read: path or out is NULL");
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
	st = parse_config(root, path, &c);
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

/* The model whose config.json is written for cfg: cfg->model_type's, or
 * when ferry has none of that type the first kept in Hugging Face
 * checkpoints (a config filled without a model_type). */
static const struct ferry_model_decl *
written_model(const struct ferry_hf_config *cfg)
{
	const struct ferry_model_decl *md =
		ferry_model_decl_find_hf(cfg->model_type, NULL);

	return md ? md : ferry_model_decl_of_format(FERRY_CKPT_HF);
}

/* config.json's fields for cfg, in transformers' order, into *out (the
 * caller releases it); dtype is the torch_dtype to write. */
static ferry_status build_config_json(const struct ferry_hf_config *cfg,
				      const char *dtype, const char *path,
				      json_t **out)
{
	const struct ferry_model_decl *md = written_model(cfg);
	json_t *root = json_object(), *arch = json_array();
	int bad;

	*out = root;
	bad = !root || !arch ||
	      json_array_append_new(arch, json_string(md->hf_architecture)) ||
	      json_object_set(root, "architectures", arch) ||
	      json_object_set_new(root, "model_type",
				  json_string(md->hf_model_type)) ||
	      json_object_set_new(root, "hidden_act", json_string("silu")) ||
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
	      json_object_set_new(root, "rms_norm_eps", json_real(cfg->rms_norm_eps)) ||
	      json_object_set_new(root, "tie_word_embeddings",
				  json_boolean(cfg->tie_word_embeddings)) ||
	      json_object_set_new(root, "attention_bias", json_false()) ||
	      json_object_set_new(root, "mlp_bias", json_false());
	json_decref(arch);
	if (!bad && json_object_set_new(root, "torch_dtype", json_string(dtype)))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: torch_dtype is not valid UTF-8", path);
	if (bad)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory building the JSON", path);
	return FERRY_OK;
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
	int prec;

	prec = real_digits(cfg->rope_theta);
	if (real_digits(cfg->rms_norm_eps) > prec)
		prec = real_digits(cfg->rms_norm_eps);
	flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(prec);
	n = json_dumpb(root, NULL, 0, flags);
	*buf = n ? ferry_malloc(n + 1) : NULL;
	if (!*buf || json_dumpb(root, *buf, n, flags) != n)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory encoding the JSON", path);
	(*buf)[n] = '\n';
	*len = n + 1;
	return FERRY_OK;
}

ferry_status ferry_hf_config_write(const char *dir,
				   const struct ferry_hf_config *cfg)
{
	const char *dtype;
	struct text txt;
	ferry_status st;
	json_t *root = NULL;
	char *path = NULL, *buf = NULL;
	size_t n;

	if (!dir || !cfg)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_hf_config_write: dir or cfg is NULL");
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
	dtype = cfg->torch_dtype[0] ? cfg->torch_dtype : "float32";
	if (!memchr(cfg->torch_dtype, '\0', sizeof(cfg->torch_dtype))) {
		st = ferry_error(FERRY_ERR_INVALID,
				 "%s: torch_dtype is not a terminated string",
				 path);
		goto out;
	}
	st = build_config_json(cfg, dtype, path, &root);
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
