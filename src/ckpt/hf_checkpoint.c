/*
 * Llama checkpoints in Hugging Face's layout (config.json + safetensors),
 * and the dispatch between them and llm.c's model files.  See
 * include/ferry/hf_checkpoint.h.
 */
#include "ferry/hf_checkpoint.h"
#include "ferry/checkpoint.h"
#include "core/error.h"
#include "models/model_table.h"
#include "ckpt/commit.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INV_FREQ_SUFFIX ".rotary_emb.inv_freq"
/* Longest tensor name ferry makes: a declared name plus a layer number. */
#define NAME_MAX_LEN 256
/* Parameter tensors of a declaration (Llama has 12). */
#define MAX_PARAMS 32

/* ---- paths ------------------------------------------------------------------------ */

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static bool is_dir(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool ferry_checkpoint_is_hf(const char *path)
{
	if (!path)
		return false;
	return is_dir(path) || ends_with(path, ".safetensors") || ends_with(path, ".json");
}

bool ferry_checkpoint_model_is_hf(const struct ferry_model_config *cfg)
{
	const struct ferry_model_decl *md = cfg ? ferry_model_decl_find(cfg->arch) : NULL;

	return md && md->ckpt == FERRY_CKPT_HF;
}

/* A copy of the directory part of path ("." when none). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
	char *d = ferry_malloc(n + 2);

	if (!d)
		return NULL;
	if (!slash)
		snprintf(d, 2, ".");
	else
		snprintf(d, n + 1, "%s", path);
	return d;
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir), m = strlen(name);
	bool slash = n && dir[n - 1] == '/';
	char *p = ferry_malloc(n + m + 2);

	if (!p)
		return NULL;
	snprintf(p, n + m + 2, "%s%s%s", dir, slash ? "" : "/", name);
	return p;
}

/* Where a checkpoint path's parts are: dir holds config.json and the state
 * file; weights is what ferry_safetensors_open gets. */
struct hf_paths {
	char *dir, *config, *weights;
};

static void paths_free(struct hf_paths *p)
{
	ferry_free(p->dir);
	ferry_free(p->config);
	ferry_free(p->weights);
	memset(p, 0, sizeof(*p));
}

static ferry_status paths_resolve(const char *path, struct hf_paths *p)
{
	memset(p, 0, sizeof(*p));
	if (is_dir(path)) {
		p->dir = ferry_strdup(path);
		p->weights = ferry_strdup(path);
	} else if (!strcmp(base_name(path), FERRY_HF_CONFIG_NAME)) {
		p->dir = dir_of(path);
		p->weights = dir_of(path);
	} else { /* *.safetensors, or an index *.json */
		p->dir = dir_of(path);
		p->weights = ferry_strdup(path);
	}
	p->config = p->dir ? join(p->dir, FERRY_HF_CONFIG_NAME) : NULL;
	if (p->dir && p->config && p->weights)
		return FERRY_OK;
	paths_free(p);
	return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", path);
}

ferry_status ferry_checkpoint_state_path(const char *path, bool hf, char *buf, size_t n)
{
	struct stat sb;
	int len;

	if (!path || !buf)
		return ferry_error(FERRY_ERR_INVALID, "state path: NULL argument");
	if (!hf) {
		len = snprintf(buf, n, "%s.state", path);
	} else if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		/* a file in the checkpoint directory */
		const char *slash = strrchr(path, '/');

		if (slash)
			len = snprintf(buf, n, "%.*s/%s", (int)(slash - path), path, FERRY_HF_STATE_NAME);
		else
			len = snprintf(buf, n, "%s", FERRY_HF_STATE_NAME);
	} else {
		size_t m = strlen(path);

		len = snprintf(buf, n, "%s%s%s", path, m && path[m - 1] == '/' ? "" : "/",
			       FERRY_HF_STATE_NAME);
	}
	if (len < 0 || (size_t)len >= n)
		return ferry_error(FERRY_ERR_INVALID, "%s: path too long for its training state file", path);
	return FERRY_OK;
}

/* ---- config.json <-> model config ----------------------------------------------- */

_Static_assert((int)FERRY_HF_ROPE_LINEAR == (int)FERRY_ROPE_SCALING_LINEAR &&
		       (int)FERRY_HF_ROPE_LLAMA3 == (int)FERRY_ROPE_SCALING_LLAMA3,
	       "config.json's rope types are the model config's");

/* config.json's rope_scaling as the model's (the model's check refuses
 * constants out of a float's range). */
static void hf_rope_to_model(const struct ferry_hf_config *hf, struct ferry_rope_scaling *r)
{
	memset(r, 0, sizeof(*r));
	r->type = hf->rope_type;
	if (!r->type)
		return;
	r->factor = (float)hf->rope_factor;
	r->low_freq_factor = (float)hf->rope_low_freq_factor;
	r->high_freq_factor = (float)hf->rope_high_freq_factor;
	r->original_max_pos = hf->rope_original_max_position_embeddings;
}

/* A soft cap of config.json as the model config's: the family's none (0)
 * is -1 there, 0 being its default; a cap outside a float's range is
 * refused, naming the field. */
static ferry_status hf_cap_to_model(double v, bool family_has, const char *key, const char *path, float *out)
{
	*out = !family_has ? 0.0f : v > 0 ? (float)v : -1.0f;
	if (family_has && v > 0 && !(isfinite(*out) && *out > 0))
		return ferry_error(FERRY_ERR_FORMAT, "%s: %s %g is out of the range of a float", path, key, v);
	return FERRY_OK;
}

/* How config.json says each layer attends, as the model config says it:
 * the window, the layers it acts on (the family's rule; a gated family's
 * from max_window_layers), Gemma 2's scale and caps. */
static ferry_status hf_attention_to_model(const struct ferry_hf_config *hf, const struct ferry_hf_family *f,
					  const char *path, struct ferry_model_config *c)
{
	ferry_status st;

	c->sliding_window = hf->sliding_window;
	c->window_layers_every = f->window_layers_every;
	c->window_layers_from = f->gated_sliding_window ? hf->max_window_layers : 0;
	c->window_full_every = f->sliding_window_pattern;
	c->rope_local_theta = (float)hf->rope_local_base_freq;
	if (hf->rope_local_base_freq > 0 && !(c->rope_local_theta > 1 && isfinite(c->rope_local_theta)))
		return ferry_error(FERRY_ERR_FORMAT, "%s: rope_local_base_freq %g must be above 1, in a float's range",
				   path, hf->rope_local_base_freq);
	c->query_pre_attn_scalar = hf->query_pre_attn_scalar;
	if ((st = hf_cap_to_model(hf->attn_logit_softcapping, f->attn_logit_softcapping > 0, "attn_logit_softcapping",
				  path, &c->attn_softcap)))
		return st;
	return hf_cap_to_model(hf->final_logit_softcapping, f->final_logit_softcapping > 0, "final_logit_softcapping",
			       path, &c->final_softcap);
}

/* ---- config.json with the families ferry has ------------------------------------ */

ferry_status ferry_hf_config_read(const char *dir_or_file, struct ferry_hf_config *out)
{
	const struct ferry_hf_family *fam[FERRY_MODEL_MAX_DECLS];

	return ferry_hf_config_read_as(dir_or_file, fam, ferry_model_hf_families(fam), out);
}

ferry_status ferry_hf_config_write(const char *dir, const struct ferry_hf_config *cfg)
{
	const struct ferry_model_decl *md = cfg ? ferry_model_decl_find_hf(cfg->model_type, NULL) : NULL;
	char titles[FERRY_MODEL_LIST_CHARS];

	if (cfg && !md)
		return ferry_error(FERRY_ERR_INVALID, "%s: model_type '%.32s' is not a %s", dir ? dir : "(null)",
				   cfg->model_type, ferry_model_hf_list(FERRY_HF_TITLE, titles, sizeof(titles)));
	return ferry_hf_config_write_as(dir, cfg, md ? md->hf : NULL);
}

ferry_status ferry_hf_config_to_model(const struct ferry_hf_config *hf, const char *path,
				      struct ferry_model_config *cfg)
{
	const struct ferry_model_decl *md;
	struct ferry_model_config c;
	char titles[FERRY_MODEL_LIST_CHARS];
	float theta, eps;
	ferry_status st;

	if (!hf || !cfg)
		return ferry_error(FERRY_ERR_INVALID, "ferry_hf_config_to_model: NULL argument");
	if (!path)
		path = FERRY_HF_CONFIG_NAME;
	md = ferry_model_decl_find_hf(hf->model_type, NULL);
	if (!md)
		return ferry_error(FERRY_ERR_FORMAT, "%s: model_type '%s' is not a %s", path, hf->model_type,
				   ferry_model_hf_list(FERRY_HF_TITLE, titles, sizeof(titles)));
	theta = (float)hf->rope_theta;
	eps = (float)hf->rms_norm_eps;
	/* 0 would mean "the default" to the model config (a value too small
	   for a float becomes 0): refuse it here, naming the field */
	if (!(eps > 0) || !isfinite(eps))
		return ferry_error(FERRY_ERR_FORMAT, "%s: rms_norm_eps %g is out of the range of a float", path,
				   hf->rms_norm_eps);
	if (!(theta > 0) || !isfinite(theta))
		return ferry_error(FERRY_ERR_FORMAT, "%s: rope_theta %g is out of the range of a float", path,
				   hf->rope_theta);
	memset(&c, 0, sizeof(c));
	snprintf(c.arch, sizeof(c.arch), "%s", md->name);
	c.channels = hf->hidden_size;
	c.ffn = hf->intermediate_size;
	c.heads = hf->num_attention_heads;
	c.kv_heads = hf->num_key_value_heads;
	c.head_size = hf->head_dim;
	c.layers = hf->num_hidden_layers;
	c.vocab = hf->vocab_size;
	c.padded_vocab = hf->vocab_size;
	c.max_seq = hf->max_position_embeddings;
	c.rope_theta = theta;
	c.norm_eps = eps;
	c.tie_embeddings = hf->tie_word_embeddings ? 1 : -1;
	hf_rope_to_model(hf, &c.rope_scaling);
	if ((st = hf_attention_to_model(hf, md->hf, path, &c)))
		return st;
	if (ferry_model_config_complete(&c) != FERRY_OK) {
		char why[384];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_FORMAT, "%s: not a model ferry can build: %s", path, why);
	}
	*cfg = c;
	return FERRY_OK;
}

/* The shortest decimal that reads back (through a double) as f. */
static double short_decimal(float f)
{
	char buf[64];

	for (int p = 1; p <= 9; p++) {
		snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
		if ((float)strtod(buf, NULL) == f)
			return strtod(buf, NULL);
	}
	return (double)f;
}

/* The model config's attention as config.json says it; what the family's
 * file cannot say (a window on other layers than its rule's) is refused. */
static ferry_status model_attention_to_hf(const struct ferry_model_config *c, const struct ferry_hf_family *f,
					  struct ferry_hf_config *h)
{
	const int every = c->window_layers_every > 1 ? c->window_layers_every : 0;
	const int full = c->window_full_every > 1 ? c->window_full_every : 0;

	if (c->sliding_window && (every != (f->window_layers_every > 1 ? f->window_layers_every : 0) ||
				  full != (f->sliding_window_pattern > 1 ? f->sliding_window_pattern : 0) ||
				  (c->window_layers_from && !f->gated_sliding_window)))
		return ferry_error(FERRY_ERR_INVALID, "config.json: %s's window acts on the layers its family "
				   "says, not every %d from %d", f->title, every ? every : 1, c->window_layers_from);
	h->sliding_window = c->sliding_window;
	h->max_window_layers = f->gated_sliding_window && c->sliding_window ? c->window_layers_from : 0;
	h->query_pre_attn_scalar = c->query_pre_attn_scalar;
	h->rope_local_base_freq = c->rope_local_theta > 0 ? short_decimal(c->rope_local_theta) : 0.0;
	h->attn_logit_softcapping = c->attn_softcap > 0 ? short_decimal(c->attn_softcap) : 0.0;
	h->final_logit_softcapping = c->final_softcap > 0 ? short_decimal(c->final_softcap) : 0.0;
	return FERRY_OK;
}

/* cfg completed, a model kept in Hugging Face checkpoints, with Vp == V;
 * *out gets the completed copy. */
static ferry_status hf_model_config(const struct ferry_model_config *cfg, const char *what,
				    struct ferry_model_config *out)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(cfg->arch);
	struct ferry_model_config c = *cfg;
	char titles[FERRY_MODEL_LIST_CHARS];

	if (!md || md->ckpt != FERRY_CKPT_HF)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: Hugging Face checkpoints hold %s models, not '%s'", what,
				   ferry_model_hf_list(FERRY_HF_TITLE, titles, sizeof(titles)),
				   md ? md->name : c.arch);
	if (ferry_model_config_complete(&c) != FERRY_OK) {
		char why[384];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_INVALID, "%s: invalid model config: %s", what, why);
	}
	if (c.padded_vocab != c.vocab)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: a Hugging Face checkpoint has vocab_size rows: padded vocabulary %d must "
				   "equal the vocabulary %d", what, c.padded_vocab, c.vocab);
	*out = c;
	return FERRY_OK;
}

ferry_status ferry_model_config_to_hf(const struct ferry_model_config *cfg, struct ferry_hf_config *hf)
{
	struct ferry_model_config c;
	struct ferry_hf_config h;
	ferry_status st;

	if (!cfg || !hf)
		return ferry_error(FERRY_ERR_INVALID, "ferry_model_config_to_hf: NULL argument");
	st = hf_model_config(cfg, "config.json", &c);
	if (st)
		return st;
	memset(&h, 0, sizeof(h));
	snprintf(h.model_type, sizeof(h.model_type), "%s", ferry_model_decl_find(c.arch)->hf->model_type);
	h.hidden_size = c.channels;
	h.intermediate_size = c.ffn;
	h.num_attention_heads = c.heads;
	h.num_key_value_heads = c.kv_heads;
	h.num_hidden_layers = c.layers;
	h.vocab_size = c.vocab;
	h.max_position_embeddings = c.max_seq;
	h.head_dim = c.head_size;
	h.rope_theta = short_decimal(c.rope_theta);
	h.rms_norm_eps = short_decimal(c.norm_eps);
	h.tie_word_embeddings = c.tie_embeddings > 0;
	snprintf(h.torch_dtype, sizeof(h.torch_dtype), "float32");
	h.rope_type = c.rope_scaling.type; /* the same numbering, checked in hf_rope_to_model */
	if (h.rope_type) {
		h.rope_factor = short_decimal(c.rope_scaling.factor);
		h.rope_low_freq_factor = short_decimal(c.rope_scaling.low_freq_factor);
		h.rope_high_freq_factor = short_decimal(c.rope_scaling.high_freq_factor);
		h.rope_original_max_position_embeddings = c.rope_scaling.original_max_pos;
	}
	if ((st = model_attention_to_hf(&c, ferry_model_decl_find(c.arch)->hf, &h)))
		return st;
	*hf = h;
	return FERRY_OK;
}

/* Every parameter tensor of a completed config, in declaration order. */
static ferry_status param_infos(const struct ferry_model_config *cfg, struct ferry_param_info *pi,
				int *np)
{
	ferry_status st;

	*np = ferry_model_param_tensors(cfg);
	if (*np > MAX_PARAMS)
		return ferry_error(FERRY_ERR_INVALID, "model '%s' declares %d parameter tensors, more than %d",
				   cfg->arch, *np, MAX_PARAMS);
	for (int p = 0; p < *np; p++) {
		st = ferry_model_param_info(cfg, p, &pi[p]);
		if (st)
			return st;
		if (pi[p].present && !pi[p].hf_name)
			return ferry_error(FERRY_ERR_INVALID, "parameter %s of model '%s' has no Hugging Face name",
					   pi[p].name, cfg->arch);
	}
	return FERRY_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

ferry_status ferry_hf_checkpoint_read_config(const char *path, struct ferry_model_config *cfg)
{
	struct ferry_hf_config hf;
	struct hf_paths p;
	ferry_status st;

	if (!path || !cfg)
		return ferry_error(FERRY_ERR_INVALID, "ferry_hf_checkpoint_read_config: NULL argument");
	st = paths_resolve(path, &p);
	if (st)
		return st;
	st = ferry_hf_config_read(p.config, &hf);
	if (!st)
		st = ferry_hf_config_to_model(&hf, p.config, cfg);
	paths_free(&p);
	return st;
}

/* Whether name is "<prefix><layer><suffix>" for fmt = "<prefix>%d<suffix>"
 * and a layer in [0, layers), or fmt itself when it takes no layer. */
static bool name_matches(const char *fmt, int layers, const char *name)
{
	const char *pct = strstr(fmt, "%d"), *s;
	size_t pre;
	long v = 0;

	if (!layers || !pct)
		return !strcmp(fmt, name);
	pre = (size_t)(pct - fmt);
	if (strncmp(fmt, name, pre) != 0)
		return false;
	s = name + pre;
	if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
		return false; /* digits, no sign, no leading zero */
	while (*s >= '0' && *s <= '9' && v < layers)
		v = v * 10 + (*s++ - '0');
	return v < layers && !strcmp(s, pct + 2);
}

static const char *index_str(char *buf, size_t n, const struct ferry_param_info *pi, size_t at)
{
	size_t used = 0;

	buf[0] = 0;
	for (int d = 0; d < pi->ndim && used < n; d++) {
		size_t stride = 1;

		for (int e = d + 1; e < pi->ndim; e++)
			stride *= (size_t)pi->shape[e];
		used += (size_t)snprintf(buf + used, n - used, "%s%zu", d ? ", " : "[", at / stride);
		at %= stride;
	}
	if (used < n)
		snprintf(buf + used, n - used, "]");
	return buf;
}

/* The first non-finite value of x[0..n), or n. */
static size_t first_non_finite(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return i;
	return n;
}

/* The tensor name of parameter pi's layer l. */
static void tensor_name(char *buf, size_t n, const struct ferry_param_info *pi, int l)
{
	if (pi->layers)
		snprintf(buf, n, pi->hf_name, l);
	else
		snprintf(buf, n, "%s", pi->hf_name);
}

/* Every tensor of the file is a parameter of cfg's model (or one ferry may
 * ignore: a tied head's stored copy, rotary inv_freq buffers). */
static ferry_status check_no_strangers(ferry_safetensors_t h, const struct ferry_model_config *cfg,
				       const struct ferry_param_info *pi, int np, const char *config_path)
{
	for (int i = 0; i < ferry_safetensors_count(h); i++) {
		const struct ferry_st_tensor *t = ferry_safetensors_tensor(h, i);
		bool known = ends_with(t->name, INV_FREQ_SUFFIX);

		for (int p = 0; p < np && !known; p++)
			known = pi[p].hf_name && name_matches(pi[p].hf_name, pi[p].layers, t->name);
		if (!known)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: unexpected tensor %s: not a parameter of the %d-layer %s "
					   "that %s describes", t->file, t->name, cfg->layers,
					   ferry_model_title(cfg->arch), config_path);
	}
	return FERRY_OK;
}

static ferry_status read_params(ferry_safetensors_t h, const char *weights,
				const struct ferry_model_config *cfg, const struct ferry_param_info *infos,
				int np, const char *config_path, float *params)
{
	ferry_status st;

	for (int p = 0; p < np; p++) {
		const struct ferry_param_info *pi = &infos[p];

		if (!pi->present)
			continue; /* the tied LM head: the embedding is read */
		for (int l = 0; l < (pi->layers ? pi->layers : 1); l++) {
			const struct ferry_st_tensor *t;
			float *dst = params + pi->offset + (size_t)l * pi->layer_numel;
			char name[NAME_MAX_LEN], at[160];
			size_t bad;

			tensor_name(name, sizeof(name), pi, l);
			t = ferry_safetensors_find(h, name);
			if (!t) {
				if (!strcmp(pi->name, "lm_head"))
					return ferry_error(FERRY_ERR_FORMAT,
							   "%s: tensor %s is missing (%s has tie_word_embeddings "
							   "false: the LM head must be stored)",
							   weights, name, config_path);
				return ferry_error(FERRY_ERR_FORMAT,
						   "%s: tensor %s is missing (%s describes a %d-layer %s)",
						   weights, name, config_path, cfg->layers,
						   ferry_model_title(cfg->arch));
			}
			st = ferry_safetensors_read_f32(h, name, pi->shape, pi->ndim, dst);
			if (st)
				return st;
			bad = first_non_finite(dst, pi->layer_numel);
			if (bad < pi->layer_numel)
				return ferry_error(FERRY_ERR_FORMAT, "%s: tensor %s holds a non-finite value (%g) at %s",
						   t->file, name, (double)dst[bad], index_str(at, sizeof(at), pi, bad));
		}
	}
	return FERRY_OK;
}

ferry_status ferry_hf_checkpoint_read(const char *path, struct ferry_model_config *cfg,
				      float *params, size_t n_params)
{
	struct ferry_param_info pi[MAX_PARAMS];
	struct ferry_model_config c;
	struct ferry_hf_config hf;
	ferry_safetensors_t h = NULL;
	struct hf_paths p;
	ferry_status st;
	size_t n;
	int np = 0;

	if (!path || !cfg || !params)
		return ferry_error(FERRY_ERR_INVALID, "%s: config or parameter buffer is NULL",
				   path ? path : "(null)");
	st = paths_resolve(path, &p);
	if (st)
		return st;
	st = ferry_hf_config_read(p.config, &hf);
	if (!st)
		st = ferry_hf_config_to_model(&hf, p.config, &c);
	if (st)
		goto out;
	n = ferry_model_config_num_params(&c);
	if (n != n_params) {
		st = ferry_error(FERRY_ERR_INVALID, "%s: model has %zu parameters, buffer holds %zu", path, n,
				 n_params);
		goto out;
	}
	st = param_infos(&c, pi, &np);
	if (!st)
		st = ferry_safetensors_open(p.weights, &h);
	if (!st)
		st = check_no_strangers(h, &c, pi, np, p.config);
	if (!st)
		st = read_params(h, p.weights, &c, pi, np, p.config, params);
	if (!st)
		*cfg = c;
out:
	ferry_safetensors_close(h);
	paths_free(&p);
	return st;
}

/* ---- writing ----------------------------------------------------------------------- */

/* The tensors to write, in Hugging Face's order: the embedding, layer by
 * layer, then the final norm and the head; names[k * NAME_MAX_LEN] holds
 * w[k]'s name.  A value that is not finite refuses the save (before
 * anything is written). */
static ferry_status lay_out(const char *dir, const struct ferry_model_config *c,
			    const struct ferry_param_info *pi, int np, const float *params,
			    enum ferry_st_dtype dtype, struct ferry_st_write *w, char *names, int count)
{
	int k = 0;

	for (int pass = 0; pass < 3; pass++) {
		for (int l = 0; l < (pass == 1 ? c->layers : 1); l++) {
			for (int p = 0; p < np; p++) {
				bool embed = !strcmp(pi[p].name, "embed_tokens");
				char *name = names + (size_t)k * NAME_MAX_LEN, at[160];
				const float *src = params + pi[p].offset + (size_t)l * pi[p].layer_numel;
				size_t bad;

				if (!pi[p].present || (pass == 1) != (pi[p].layers > 0) || (pass == 0 && !embed) ||
				    (pass == 2 && embed))
					continue;
				if (k == count)
					return ferry_error(FERRY_ERR_INVALID, "%s: more than %d tensors", dir, count);
				tensor_name(name, NAME_MAX_LEN, &pi[p], l);
				bad = first_non_finite(src, pi[p].layer_numel);
				if (bad < pi[p].layer_numel)
					return ferry_error(FERRY_ERR_INVALID,
							   "%s: not saved: %s holds a non-finite value (%g) at %s", dir,
							   name, (double)src[bad], index_str(at, sizeof(at), &pi[p], bad));
				w[k] = (struct ferry_st_write){ .name = name, .dtype = dtype, .ndim = pi[p].ndim,
								.data = src };
				for (int d = 0; d < pi[p].ndim; d++)
					w[k].shape[d] = pi[p].shape[d];
				k++;
			}
		}
	}
	if (k != count)
		return ferry_error(FERRY_ERR_INVALID, "%s: %d of %d tensors laid out", dir, k, count);
	return FERRY_OK;
}

ferry_status ferry_ckpt_hf_write_files(const char *dir, const struct ferry_model_config *cfg,
				       const float *params, const struct ferry_hf_source *src)
{
	const bool bf16 = src && src->bf16;
	struct ferry_param_info pi[MAX_PARAMS];
	struct ferry_model_config c;
	struct ferry_hf_config hf;
	struct ferry_st_write *w = NULL;
	char *names = NULL, *weights = NULL;
	int np = 0, count = 0;
	ferry_status st;

	st = hf_model_config(cfg, dir, &c);
	if (!st)
		st = ferry_model_config_to_hf(&c, &hf);
	if (!st)
		st = param_infos(&c, pi, &np);
	if (st)
		return st;
	if (src) { /* the special tokens of where the model came from */
		hf.has_bos = src->ids.has_bos, hf.bos_token_id = src->ids.bos_token_id;
		hf.n_eos = src->ids.n_eos, hf.eos_list = src->ids.eos_list;
		memcpy(hf.eos_token_id, src->ids.eos_token_id, sizeof(hf.eos_token_id));
	}
	snprintf(hf.torch_dtype, sizeof(hf.torch_dtype), "%s", bf16 ? "bfloat16" : "float32");
	for (int p = 0; p < np; p++)
		if (pi[p].present)
			count += pi[p].layers ? pi[p].layers : 1; /* layers <= 2^20: no overflow */
	w = ferry_calloc((size_t)count, sizeof(*w));
	names = ferry_calloc((size_t)count, NAME_MAX_LEN);
	weights = join(dir, FERRY_HF_WEIGHTS_NAME);
	if (!w || !names || !weights)
		st = ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory for %d tensors", dir, count);
	if (!st)
		st = lay_out(dir, &c, pi, np, params, bf16 ? FERRY_ST_BF16 : FERRY_ST_F32, w, names, count);
	if (!st)
		st = ferry_hf_config_write_as(dir, &hf, ferry_model_decl_find(c.arch)->hf);
	if (!st)
		st = ferry_safetensors_write(weights, w, count, "pt");
	ferry_free(weights);
	ferry_free(names);
	ferry_free(w);
	return st;
}

/* Every tensor of the checkpoint BF16 (rotary_emb.inv_freq buffers, which
 * ferry ignores, aside). */
static bool all_bf16(ferry_safetensors_t h)
{
	int n = 0;

	for (int i = 0; i < ferry_safetensors_count(h); i++) {
		const struct ferry_st_tensor *t = ferry_safetensors_tensor(h, i);

		if (ends_with(t->name, INV_FREQ_SUFFIX))
			continue;
		if (t->dtype != FERRY_ST_BF16)
			return false;
		n++;
	}
	return n > 0;
}

ferry_status ferry_ckpt_hf_source(const struct ferry_save_opts *so, struct ferry_hf_source *src)
{
	struct ferry_hf_config hf;
	ferry_safetensors_t h = NULL;
	struct hf_paths p;
	ferry_status st;

	memset(src, 0, sizeof(*src));
	src->bf16 = so && so->dtype == FERRY_SAVE_BF16;
	src->tokenizer = so ? so->tokenizer : NULL;
	if (!so || !so->from || !ferry_checkpoint_is_hf(so->from))
		return FERRY_OK;
	if ((st = paths_resolve(so->from, &p)))
		return st;
	/* what is there at the save (a source removed since gives nothing) */
	if (ferry_hf_config_read(p.config, &hf) == FERRY_OK)
		src->ids = hf;
	if (so->dtype == FERRY_SAVE_AUTO && ferry_safetensors_open(p.weights, &h) == FERRY_OK)
		src->bf16 = all_bf16(h);
	ferry_safetensors_close(h);
	src->dir = p.dir;
	p.dir = NULL;
	paths_free(&p);
	return FERRY_OK;
}

void ferry_ckpt_hf_source_free(struct ferry_hf_source *src)
{
	ferry_free(src->dir);
	src->dir = NULL;
}

ferry_status ferry_hf_checkpoint_write(const char *dir, const struct ferry_model_config *cfg,
				       const float *params)
{
	struct ferry_model_config c;
	ferry_status st;

	if (!dir || !cfg || !params)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint write: NULL directory, config or parameters");
	st = hf_model_config(cfg, dir, &c);
	if (st)
		return st;
	return ferry_checkpoint_save(dir, &c, params, NULL, NULL, NULL, 0);
}

/* ---- either kind -------------------------------------------------------------------- */

ferry_status ferry_checkpoint_any_read_config(const char *path, struct ferry_model_config *cfg)
{
	if (ferry_checkpoint_is_hf(path))
		return ferry_hf_checkpoint_read_config(path, cfg);
	return ferry_checkpoint_read_config(path, cfg);
}

ferry_status ferry_checkpoint_any_read(const char *path, struct ferry_model_config *cfg,
				       float *params, size_t n_params)
{
	if (ferry_checkpoint_is_hf(path))
		return ferry_hf_checkpoint_read(path, cfg, params, n_params);
	return ferry_checkpoint_read(path, cfg, params, n_params);
}

ferry_status ferry_checkpoint_any_write(const char *path, const struct ferry_model_config *cfg,
					const float *params)
{
	ferry_status st;

	if (!path || !cfg || !params)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint write: NULL path, config or parameters");
	st = ferry_checkpoint_check_save_path(path, cfg);
	if (st)
		return st;
	if (ferry_checkpoint_model_is_hf(cfg))
		return ferry_hf_checkpoint_write(path, cfg, params);
	return ferry_checkpoint_write(path, cfg, params);
}
