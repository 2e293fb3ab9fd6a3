/*
 * The model table: every declared model, looked up by name or by its
 * checkpoints' names, and what a configuration of one means (completing
 * it, its parameter layout).  Above graph/, which only describes a
 * declaration's shape: the table names the declarations of models/.
 */
#include "models/model_table.h"
#include "core/error.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Every model; the first is the default (a config that names none). */
static const struct ferry_model_decl *const models[] = { &ferry_gpt2_decl, &ferry_llama_decl, &ferry_qwen2_decl,
							  &ferry_mistral_decl, &ferry_gemma2_decl, &ferry_qwen3_decl,
							  &ferry_gemma3_decl, &ferry_gemma4_decl };
#define N_MODELS (int)(sizeof(models) / sizeof(models[0]))
_Static_assert(N_MODELS <= FERRY_MODEL_MAX_DECLS, "FERRY_MODEL_MAX_DECLS is too small");

const struct ferry_model_decl *ferry_model_decl_find(const char *arch)
{
	if (arch && !arch[0])
		return models[0];
	for (int i = 0; arch && i < N_MODELS; i++)
		if (strcmp(models[i]->name, arch) == 0)
			return models[i];
	return NULL;
}

int ferry_model_decl_count(void)
{
	return N_MODELS;
}

const struct ferry_model_decl *ferry_model_decl_at(int i)
{
	return i >= 0 && i < N_MODELS ? models[i] : NULL;
}

const struct ferry_model_decl *ferry_model_decl_of_format(enum ferry_ckpt_format f)
{
	for (int i = 0; i < N_MODELS; i++)
		if (models[i]->ckpt == f)
			return models[i];
	return NULL;
}

const struct ferry_model_decl *ferry_model_decl_find_hf(const char *model_type, const char *architecture)
{
	for (int i = 0; i < N_MODELS; i++) {
		const struct ferry_model_decl *md = models[i];

		if (md->ckpt != FERRY_CKPT_HF)
			continue;
		if (model_type ? !strcmp(md->hf->model_type, model_type)
			       : architecture && !strcmp(md->hf->architecture, architecture))
			return md;
	}
	return NULL;
}

int ferry_model_hf_families(const struct ferry_hf_family **out)
{
	int n = 0;

	for (int i = 0; i < N_MODELS; i++)
		if (models[i]->ckpt == FERRY_CKPT_HF)
			out[n++] = models[i]->hf;
	return n;
}

const char *ferry_model_hf_list(enum ferry_hf_field what, char *buf, size_t n)
{
	size_t used = 0;

	buf[0] = 0;
	for (int i = 0; i < N_MODELS && used < n; i++)
		if (models[i]->ckpt == FERRY_CKPT_HF)
			used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " or " : "",
						 what == FERRY_HF_TITLE ? models[i]->title
									: models[i]->hf->architecture);
	return buf;
}

/* "gpt2, llama": the names in the table's order, made once. */
static char arch_list[N_MODELS * (FERRY_MODEL_ARCH_CHARS + 2)];
static pthread_once_t arch_list_once = PTHREAD_ONCE_INIT;

static void arch_list_make(void)
{
	size_t used = 0;

	for (int i = 0; i < N_MODELS && used < sizeof(arch_list); i++)
		used += (size_t)snprintf(arch_list + used, sizeof(arch_list) - used, "%s%s", i ? ", " : "",
					 models[i]->name);
}

const char *ferry_model_arch_list(void)
{
	pthread_once(&arch_list_once, arch_list_make);
	return arch_list;
}

const char *ferry_model_title(const char *arch)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(arch);

	return md ? md->title : arch;
}

/*
 * Largest parameter count we accept.  The training state file holds two fp32
 * arrays (AdamW m and v) after a 1 KiB header, so 8 bytes per parameter plus
 * the header must fit in both size_t and off_t (int64).
 */
static uint64_t max_params(void)
{
	uint64_t lim = ((uint64_t)INT64_MAX - 1024) / 8;

	if ((uint64_t)SIZE_MAX / 8 < lim)
		lim = (uint64_t)SIZE_MAX / 8;
	return lim;
}

/* Elements of parameter p (all layers); false on overflow. */
static bool param_numel(const struct ferry_model_decl *md, const struct ferry_model_config *cfg, int p,
			int64_t *layer_n, int64_t *n)
{
	struct ferry_dims d = ferry_model_dims(cfg, 1, 1);

	if (!ferry_param_present(md, cfg, p)) {
		*layer_n = *n = 0;
		return true;
	}
	if (!ferry_shape_numel(&md->params[p].shape, &d, layer_n))
		return false;
	*n = *layer_n;
	return !md->params[p].per_layer || !__builtin_mul_overflow(*layer_n, (int64_t)cfg->layers, n);
}

static ferry_status check_common(const struct ferry_model_config *cfg)
{
#define POSITIVE(f) \
	if (cfg->f <= 0) \
		return ferry_error(FERRY_ERR_INVALID, #f " must be positive (got %d)", cfg->f)
	POSITIVE(max_seq);
	POSITIVE(vocab);
	POSITIVE(layers);
	POSITIVE(heads);
	POSITIVE(channels);
#undef POSITIVE
	if (cfg->padded_vocab < 0)
		return ferry_error(FERRY_ERR_INVALID, "padded_vocab must be positive (got %d)", cfg->padded_vocab);
	if (cfg->padded_vocab && cfg->padded_vocab < cfg->vocab)
		return ferry_error(FERRY_ERR_INVALID, "padded_vocab (%d) is smaller than vocab (%d)",
				   cfg->padded_vocab, cfg->vocab);
	if (cfg->layers > (1 << 20))
		return ferry_error(FERRY_ERR_INVALID, "layers (%d) must be at most %d", cfg->layers, 1 << 20);
	return FERRY_OK;
}

/* Whether one of md's programs has an op that reads the model constant s
 * (its first, or one of the consecutive ones it takes). */
static bool model_reads(const struct ferry_model_decl *md, enum ferry_op_scalar s)
{
	const struct ferry_layer_decl *prog[3] = { md->prologue, md->layer, md->epilogue };

	for (int p = 0; p < 3; p++)
		for (int o = 0; o < prog[p]->n_ops; o++) {
			const struct ferry_op_decl *op = &prog[p]->ops[o];
			const int n = ferry_op_info(op->kind)->n_scalars;

			if (op->scalar != FERRY_SCALAR_NONE && s >= op->scalar && s < op->scalar + (n ? n : 1))
				return true;
		}
	return false;
}

/* A sliding window only for a model whose attention takes it, and one the
 * op's float constant holds exactly; the layers it acts on likewise. */
static ferry_status check_window(const struct ferry_model_decl *md, const struct ferry_model_config *cfg)
{
	if (cfg->sliding_window < 0 || cfg->sliding_window > (1 << 24))
		return ferry_error(FERRY_ERR_INVALID, "sliding_window (%d) must be between 0 (none) and %d",
				   cfg->sliding_window, 1 << 24);
	if (cfg->sliding_window && !model_reads(md, FERRY_SCALAR_ATTN_WINDOW))
		return ferry_error(FERRY_ERR_INVALID, "sliding_window (%d): %s's attention has no window",
				   cfg->sliding_window, md->title);
	if (cfg->window_full_every && !(md->hf && md->hf->sliding_window_pattern > 0))
		return ferry_error(FERRY_ERR_INVALID, "window_full_every (%d): %s's layers all attend alike",
				   cfg->window_full_every, md->title);
	if (cfg->window_layers_every < 0 || cfg->window_layers_every > (1 << 24) || cfg->window_layers_from < 0 ||
	    cfg->window_layers_from > (1 << 24) || cfg->window_full_every < 0 || cfg->window_full_every > (1 << 24))
		return ferry_error(FERRY_ERR_INVALID, "window_layers_every (%d) and window_layers_from (%d) must be "
				   "between 0 and %d", cfg->window_layers_every, cfg->window_layers_from, 1 << 24);
	return FERRY_OK;
}

/* Gemma 2's constants only for a model whose checkpoints say them (so
 * that nothing is computed that a saved model would lose). */
static ferry_status check_gemma_constants(const struct ferry_model_decl *md, const struct ferry_model_config *cfg)
{
	const struct ferry_hf_family *f = md->hf;

	if (cfg->query_pre_attn_scalar && !(f && f->query_pre_attn_scalar > 0))
		return ferry_error(FERRY_ERR_INVALID, "query_pre_attn_scalar (%d): %s's attention has no such scale",
				   cfg->query_pre_attn_scalar, md->title);
	if (cfg->attn_softcap > 0 && !(f && f->attn_logit_softcapping > 0))
		return ferry_error(FERRY_ERR_INVALID, "attn_softcap (%g): %s's attention has no soft-capping",
				   cfg->attn_softcap, md->title);
	if (cfg->rope_local_theta != 0 && !(f && f->rope_local_base_freq > 0))
		return ferry_error(FERRY_ERR_INVALID, "rope_local_theta (%g): %s turns every layer alike",
				   cfg->rope_local_theta, md->title);
	if (cfg->final_softcap > 0 && !model_reads(md, FERRY_SCALAR_FINAL_SOFTCAP))
		return ferry_error(FERRY_ERR_INVALID, "final_softcap (%g): %s's logits have no soft-capping",
				   cfg->final_softcap, md->title);
	return FERRY_OK;
}

ferry_status ferry_model_config_complete(struct ferry_model_config *cfg)
{
	const struct ferry_model_decl *md;
	uint64_t total = 0;
	ferry_status st;

	if (!cfg)
		return ferry_error(FERRY_ERR_INVALID, "model config is NULL");
	md = ferry_model_decl_find(cfg->arch);
	if (md && !cfg->arch[0])
		snprintf(cfg->arch, sizeof(cfg->arch), "%s", md->name);
	if (!md)
		return ferry_error(FERRY_ERR_INVALID, "unknown model '%s' (models: %s)", cfg->arch,
				   ferry_model_arch_list());
	if ((st = check_common(cfg)) || (st = check_window(md, cfg)) || (st = check_gemma_constants(md, cfg)) ||
	    (st = md->config_check(cfg)))
		return st;
	if (!cfg->padded_vocab)
		cfg->padded_vocab = ferry_pad_vocab(cfg->vocab);
	if (!cfg->padded_vocab)
		return ferry_error(FERRY_ERR_INVALID, "vocab (%d) is too large", cfg->vocab);
	for (int p = 0; p < md->n_params; p++) {
		int64_t layer_n, n;

		if (!param_numel(md, cfg, p, &layer_n, &n) || __builtin_add_overflow(total, (uint64_t)n, &total) ||
		    total > max_params())
			return ferry_error(FERRY_ERR_INVALID,
					   "config (L=%d, C=%d, Vp=%d, maxT=%d) has too many parameters",
					   cfg->layers, cfg->channels, cfg->padded_vocab, cfg->max_seq);
	}
	return FERRY_OK;
}

int ferry_model_param_tensors(const struct ferry_model_config *cfg)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(cfg->arch);

	return md ? md->n_params : 0;
}

size_t ferry_model_config_num_params(const struct ferry_model_config *cfg)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(cfg->arch);
	size_t total = 0;

	for (int p = 0; md && p < md->n_params; p++) {
		int64_t layer_n, n;

		if (param_numel(md, cfg, p, &layer_n, &n))
			total += (size_t)n;
	}
	return total;
}

ferry_status ferry_model_param_info(const struct ferry_model_config *cfg, int i,
				    struct ferry_param_info *out)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(cfg->arch);
	struct ferry_dims d = ferry_model_dims(cfg, 1, 1);
	size_t offset = 0;

	if (!md || i < 0 || i >= md->n_params)
		return ferry_error(FERRY_ERR_INVALID, "parameter %d of model '%s' does not exist", i, cfg->arch);
	for (int p = 0; p < i; p++) {
		int64_t layer_n, n;

		if (!param_numel(md, cfg, p, &layer_n, &n))
			return ferry_error(FERRY_ERR_INVALID, "model '%s' has too many parameters", cfg->arch);
		offset += (size_t)n;
	}
	const struct ferry_param_decl *pd = &md->params[i];
	int64_t layer_n, n;

	if (!param_numel(md, cfg, i, &layer_n, &n))
		return ferry_error(FERRY_ERR_INVALID, "model '%s' has too many parameters", cfg->arch);
	memset(out, 0, sizeof(*out));
	out->name = pd->name;
	out->hf_name = pd->hf_name;
	out->layers = pd->per_layer ? cfg->layers : 0;
	out->layer_numel = (size_t)layer_n;
	out->numel = (size_t)n;
	out->offset = offset;
	out->present = ferry_param_present(md, cfg, i);
	/* a multiplier folds into the first dimension: qkvw is [3C, C] */
	for (int k = 0; k < FERRY_SHAPE_MAX_DIMS && pd->shape.d[k] != FERRY_DIM_NONE && k < 4; k++) {
		out->shape[k] = d.v[pd->shape.d[k]] * (k == 0 && pd->shape.k ? pd->shape.k : 1);
		out->ndim = k + 1;
	}
	return FERRY_OK;
}

int ferry_model_param_find(const struct ferry_model_config *cfg, const char *name)
{
	const struct ferry_model_decl *md = ferry_model_decl_find(cfg->arch);

	for (int p = 0; md && p < md->n_params; p++)
		if (strcmp(md->params[p].name, name) == 0)
			return p;
	return -1;
}

/*
 * Padding rule: vocabularies above 4096 round up to a multiple of 128, as
 * llm.c's exporter does (GPT-2's 50257 -> 50304); small ones (the byte-level
 * 257) round up to a multiple of 64 (-> 320) so tiny models do not carry a
 * mostly dead embedding table.  Returns 0 for vocab <= 0 or when the result
 * would not fit in an int.
 */
int ferry_pad_vocab(int vocab)
{
	int align = vocab > 4096 ? 128 : 64;

	if (vocab <= 0 || vocab > INT_MAX - (align - 1))
		return 0;
	return (vocab + align - 1) / align * align;
}
