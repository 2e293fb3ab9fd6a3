/* Llama checkpoints in Hugging Face's layout: a random Llama saved and
 * loaded bit for bit (tied and untied, through every path form), bf16, fp16
 * and sharded checkpoints loading the exact widened values, config.json
 * mapping, every bad checkpoint refused with one clean error naming the file
 * and tensor, saves that fail at any point (an allocation, a write) leaving
 * the previous checkpoint whole, the directory swapped as a whole with the
 * files it holds beside the checkpoint kept, the recovery of a swap a kill
 * interrupted, and a Llama trainer's save and resume equal to an unbroken
 * run. */
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/model.h"
#include "ferry/safetensors.h"
#include "ferry/train.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_test_util.h"
#include "shard_util.h"

#define MAXT 512 /* tensors of a test model */

static ferry_backend_t be;

static struct ferry_model_config llama_cfg(int tie)
{
	struct ferry_model_config c = { .arch = "llama", .max_seq = 16, .vocab = 37, .layers = 3,
					.heads = 4, .kv_heads = 2, .channels = 32, .ffn = 48,
					.rope_theta = 500000.0f, .norm_eps = 1e-6f, .tie_embeddings = tie };

	if (ferry_model_config_complete(&c) != FERRY_OK) {
		fprintf(stderr, "config: %s\n", ferry_last_error());
		exit(1);
	}
	return c;
}

/* A random model's parameters, made by a model on the cpu backend. */
static float *random_params(const struct ferry_model_config *cfg, uint64_t seed, size_t *n)
{
	ferry_model_t m = NULL;
	float *p;

	CHECK_OK(ferry_model_create(be, cfg, 1, 4, NULL, &m));
	if (!m)
		exit(1);
	*n = ferry_model_num_params(m);
	p = malloc(*n * sizeof(float));
	if (!p)
		exit(1);
	CHECK_OK(ferry_model_init_random(m, seed));
	CHECK_OK(ferry_model_get_params(m, p));
	ferry_model_free(m);
	return p;
}

/* Parameters through a fresh model: set, then get. */
static float *through_model(const struct ferry_model_config *cfg, const float *params, size_t n)
{
	ferry_model_t m = NULL;
	float *p = calloc(n, sizeof(float));

	CHECK_OK(ferry_model_create(be, cfg, 1, 4, NULL, &m));
	if (!m || !p)
		exit(1);
	CHECK(ferry_model_num_params(m) == n);
	CHECK_OK(ferry_model_set_params(m, params));
	CHECK_OK(ferry_model_get_params(m, p));
	ferry_model_free(m);
	return p;
}

static bool same_bits(const float *a, const float *b, size_t n)
{
	return memcmp(a, b, n * sizeof(float)) == 0;
}

static bool same_cfg(const struct ferry_model_config *a, const struct ferry_model_config *b)
{
	return !strcmp(a->arch, b->arch) && a->max_seq == b->max_seq && a->vocab == b->vocab &&
	       a->padded_vocab == b->padded_vocab && a->layers == b->layers && a->heads == b->heads &&
	       a->kv_heads == b->kv_heads && a->channels == b->channels && a->head_size == b->head_size &&
	       a->ffn == b->ffn && a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta &&
	       a->tie_embeddings == b->tie_embeddings;
}

/* Every stored tensor of cfg's model, per layer, as the writer lays it out
 * (names in names[k]); returns the count. */
static int collect(const struct ferry_model_config *cfg, const float *params, struct ferry_st_write *t,
		   char (*names)[128])
{
	int k = 0;

	for (int p = 0; p < ferry_model_param_tensors(cfg); p++) {
		struct ferry_param_info pi;

		CHECK_OK(ferry_model_param_info(cfg, p, &pi));
		if (!pi.present)
			continue;
		for (int l = 0; l < (pi.layers ? pi.layers : 1); l++) {
			if (pi.layers)
				snprintf(names[k], 128, pi.hf_name, l);
			else
				snprintf(names[k], 128, "%s", pi.hf_name);
			memset(&t[k], 0, sizeof(t[k]));
			t[k].name = names[k];
			t[k].dtype = FERRY_ST_F32;
			t[k].ndim = pi.ndim;
			for (int d = 0; d < pi.ndim; d++)
				t[k].shape[d] = pi.shape[d];
			t[k].data = params + pi.offset + (size_t)l * pi.layer_numel;
			k++;
		}
	}
	return k;
}

static int find_tensor(struct ferry_st_write *t, int n, const char *name)
{
	for (int k = 0; k < n; k++)
		if (!strcmp(t[k].name, name))
			return k;
	fprintf(stderr, "no tensor %s\n", name);
	exit(1);
}

/* dir with config.json for cfg (torch_dtype as given). */
static const char *make_ckpt_dir(const char *name, const struct ferry_model_config *cfg, const char *dtype)
{
	const char *d = tpath(name);
	struct ferry_hf_config hf;

	mkdir(d, 0777);
	CHECK_OK(ferry_model_config_to_hf(cfg, &hf));
	snprintf(hf.torch_dtype, sizeof(hf.torch_dtype), "%s", dtype);
	CHECK_OK(ferry_hf_config_write(d, &hf));
	return d;
}

static const char *in(const char *d, const char *name)
{
	static char buf[64][4300];
	static int at;
	char *p = buf[at++ % 64];

	snprintf(p, sizeof(buf[0]), "%s/%s", d, name);
	return p;
}

static void write_text(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(s, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

static char *read_file(const char *path, long *size)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	*size = -1;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*size = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)*size + 1);
	if (!buf || fread(buf, 1, (size_t)*size, f) != (size_t)*size)
		exit(1);
	buf[*size] = 0;
	fclose(f);
	return buf;
}

static bool same_file(const char *a, const char *b)
{
	long na, nb;
	char *x = read_file(a, &na), *y = read_file(b, &nb);
	bool same = x && y && na == nb && !memcmp(x, y, (size_t)na);

	free(x);
	free(y);
	return same;
}

/* Names in dir other than the checkpoint's own files (temporaries). */
static int strangers(const char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	int n = 0;

	if (!dp)
		return 0;
	while ((e = readdir(dp))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, FERRY_HF_CONFIG_NAME) || !strcmp(e->d_name, FERRY_HF_WEIGHTS_NAME) ||
		    !strcmp(e->d_name, FERRY_HF_STATE_NAME))
			continue;
		fprintf(stderr, "%s: unexpected file %s\n", d, e->d_name);
		n++;
	}
	closedir(dp);
	return n;
}

/* Entries beside the checkpoint directory `name` that are temporaries. */
static int temporaries_beside(const char *name)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	size_t n = strlen(name);
	int count = 0;

	while (dp && (e = readdir(dp)))
		if (!strncmp(e->d_name, name, n) && e->d_name[n] == '.' &&
		    (strstr(e->d_name + n, ".tmp") || strstr(e->d_name + n, ".old"))) {
			fprintf(stderr, "  temporary beside %s: %s\n", name, e->d_name);
			count++;
		}
	if (dp)
		closedir(dp);
	return count;
}

/* ---- round trips -------------------------------------------------------------------- */

static void test_round_trip(int tie)
{
	struct ferry_model_config cfg = llama_cfg(tie), got;
	struct ferry_st_write t[MAXT];
	char names[MAXT][128];
	const char *d = tpath(tie > 0 ? "tied" : "untied");
	ferry_safetensors_t st = NULL;
	size_t n;
	float *p = random_params(&cfg, 7 + (uint64_t)tie, &n), *q = calloc(n, sizeof(float)), *r;
	int count = collect(&cfg, p, t, names);
	const char *forms[] = { d, in(d, ""), in(d, FERRY_HF_CONFIG_NAME), in(d, FERRY_HF_WEIGHTS_NAME) };

	CHECK(count == 2 + 9 * cfg.layers + (tie > 0 ? 0 : 1));
	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, p));
	CHECK(exists(in(d, FERRY_HF_CONFIG_NAME)) && exists(in(d, FERRY_HF_WEIGHTS_NAME)));
	CHECK(strangers(d) == 0);
	for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
		memset(&got, 0, sizeof(got));
		memset(q, 0xff, n * sizeof(float));
		CHECK(ferry_checkpoint_is_hf(forms[f]));
		CHECK_OK(ferry_checkpoint_any_read_config(forms[f], &got));
		CHECK(same_cfg(&got, &cfg));
		CHECK_OK(ferry_checkpoint_any_read(forms[f], &got, q, n));
		CHECK(same_cfg(&got, &cfg));
		CHECK(same_bits(p, q, n));
	}
	/* into a new model and back out: bit for bit */
	r = through_model(&got, q, n);
	CHECK(same_bits(p, r, n));
	CHECK(ferry_params_hash(p, n) == ferry_params_hash(r, n));

	/* the file holds exactly the model's tensors, F32, under HF's names */
	CHECK_OK(ferry_safetensors_open(d, &st));
	CHECK(ferry_safetensors_count(st) == count);
	for (int k = 0; k < count; k++) {
		const struct ferry_st_tensor *x = ferry_safetensors_find(st, t[k].name);

		CHECK(x && x->dtype == FERRY_ST_F32 && x->ndim == t[k].ndim && x->shape[0] == t[k].shape[0] &&
		      x->shape[1] == t[k].shape[1]);
	}
	CHECK(ferry_safetensors_find(st, "model.layers.2.mlp.down_proj.weight") &&
	      ferry_safetensors_find(st, "model.layers.2.mlp.down_proj.weight")->shape[1] == 48);
	CHECK(ferry_safetensors_find(st, "model.layers.1.self_attn.k_proj.weight")->shape[0] == 16);
	CHECK((ferry_safetensors_find(st, "lm_head.weight") != NULL) == (tie < 0));
	CHECK(ferry_safetensors_metadata(st, "format") && !strcmp(ferry_safetensors_metadata(st, "format"), "pt"));
	ferry_safetensors_close(st);

	/* saving again over it: the same files, nothing else left */
	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, p));
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, q, n));
	CHECK(same_bits(p, q, n));
	CHECK(strangers(d) == 0);
	free(p);
	free(q);
	free(r);
}

/* Two-byte dtypes widen exactly: the loaded values are the stored ones. */
static void test_dtypes(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	struct ferry_st_write t[MAXT];
	char names[MAXT][128];
	size_t n;
	float *p = random_params(&cfg, 11, &n), *want = malloc(n * sizeof(float)), *q = calloc(n, sizeof(float));
	int count = collect(&cfg, p, t, names);
	const struct {
		const char *dir, *torch;
		int mode; /* 0 bf16, 1 f16, 2 mixed */
	} cases[] = { { "bf16", "bfloat16", 0 }, { "f16", "float16", 1 }, { "mixed", "bfloat16", 2 } };

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *d = make_ckpt_dir(cases[c].dir, &cfg, cases[c].torch);

		memcpy(want, p, n * sizeof(float));
		for (int k = 0; k < count; k++) {
			int mode = cases[c].mode == 2 ? k % 3 : cases[c].mode; /* mixed: bf16, f16, f32 */
			size_t off = (size_t)(t[k].data - p), numel = (size_t)t[k].shape[0] * (t[k].ndim > 1 ? (size_t)t[k].shape[1] : 1);

			t[k].dtype = mode == 0 ? FERRY_ST_BF16 : mode == 1 ? FERRY_ST_F16 : FERRY_ST_F32;
			for (size_t i = 0; i < numel; i++) {
				float v = p[off + i];

				want[off + i] = mode == 0 ? ferry_st_bf16_to_f32(ferry_st_f32_to_bf16(v)) :
						mode == 1 ? ferry_st_f16_to_f32(ferry_st_f32_to_f16(v)) : v;
			}
		}
		CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), t, count, "pt"));
		memset(q, 0, n * sizeof(float));
		CHECK_OK(ferry_hf_checkpoint_read(d, &got, q, n));
		CHECK(same_bits(want, q, n));
		CHECK(same_cfg(&got, &cfg));
		/* rounding happened: the file is not a copy of p */
		CHECK(cases[c].mode == 2 || !same_bits(want, p, n));
	}
	for (int k = 0; k < count; k++)
		t[k].dtype = FERRY_ST_F32;
	free(p);
	free(want);
	free(q);
}

/* Shards with model.safetensors.index.json, by the directory or the index. */
static void test_sharded(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	struct ferry_st_write t[MAXT];
	char names[MAXT][128];
	size_t n;
	float *p = random_params(&cfg, 13, &n), *q = calloc(n, sizeof(float));
	int count = collect(&cfg, p, t, names), half = count / 2;
	const char *d = make_ckpt_dir("sharded", &cfg, "float32");
	char *json = malloc(65536);
	size_t used = 0;

	CHECK_OK(ferry_safetensors_write(in(d, "model-00001-of-00002.safetensors"), t, half, "pt"));
	CHECK_OK(ferry_safetensors_write(in(d, "model-00002-of-00002.safetensors"), t + half, count - half, "pt"));
	used += (size_t)snprintf(json + used, 65536 - used, "{\"metadata\": {}, \"weight_map\": {");
	for (int k = 0; k < count; k++)
		used += (size_t)snprintf(json + used, 65536 - used, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
					 k ? ", " : "", t[k].name, k < half ? 1 : 2);
	snprintf(json + used, 65536 - used, "}}\n");
	write_text(in(d, FERRY_HF_INDEX_NAME), json);
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, q, n));
	CHECK(same_bits(p, q, n));
	memset(q, 0, n * sizeof(float));
	CHECK_OK(ferry_checkpoint_any_read(in(d, FERRY_HF_INDEX_NAME), &got, q, n));
	CHECK(same_bits(p, q, n));

	/* saving a model of another shape over it: the index goes, so no reader
	 * can pair the new config.json with the old shards */
	{
		struct ferry_model_config c2 = llama_cfg(1);
		size_t n2;
		float *p2 = random_params(&c2, 14, &n2), *q2 = calloc(n2, sizeof(float));

		CHECK_OK(ferry_hf_checkpoint_write(d, &c2, p2));
		CHECK(!exists(in(d, FERRY_HF_INDEX_NAME)));
		CHECK_OK(ferry_hf_checkpoint_read(d, &got, q2, n2));
		CHECK(same_bits(p2, q2, n2) && same_cfg(&got, &c2));
		free(p2);
		free(q2);
	}
	free(json);
	free(p);
	free(q);
}

/* config.json as Hugging Face writes it maps onto the model config. */
static void test_config_mapping(void)
{
	const char *d = tpath("tinyllama");
	struct ferry_model_config c;
	struct ferry_hf_config hf;
	long size;
	char *text;

	mkdir(d, 0777);
	write_text(in(d, "config.json"),
		   "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n"
		   "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"hidden_act\": \"silu\",\n"
		   "  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 5632,\n"
		   "  \"max_position_embeddings\": 2048,\n  \"model_type\": \"llama\",\n"
		   "  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 22,\n  \"num_key_value_heads\": 4,\n"
		   "  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": null,\n"
		   "  \"rope_theta\": 10000.0,\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n"
		   "  \"transformers_version\": \"4.35.0\",\n  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n");
	CHECK_OK(ferry_hf_checkpoint_read_config(d, &c));
	CHECK(!strcmp(c.arch, "llama") && c.channels == 2048 && c.ffn == 5632 && c.heads == 32 &&
	      c.kv_heads == 4 && c.head_size == 64 && c.layers == 22 && c.vocab == 32000 &&
	      c.padded_vocab == 32000 && c.max_seq == 2048 && c.rope_theta == 10000.0f &&
	      c.norm_eps == 1e-5f && c.tie_embeddings == -1);
	CHECK(ferry_model_config_num_params(&c) == 1100048384); /* TinyLlama-1.1B */

	/* ferry's config.json: the shortest decimals, read back as the same floats */
	c = llama_cfg(1);
	c.norm_eps = 1e-5f;
	c.rope_theta = 10000.0f;
	CHECK_OK(ferry_model_config_to_hf(&c, &hf));
	CHECK(hf.rms_norm_eps == 1e-5 && hf.rope_theta == 10000.0 && hf.tie_word_embeddings &&
	      hf.head_dim == 8 && !strcmp(hf.torch_dtype, "float32"));
	d = tpath("mapped");
	mkdir(d, 0777);
	CHECK_OK(ferry_hf_config_write(d, &hf));
	text = read_file(in(d, "config.json"), &size);
	CHECK(text && (strstr(text, "\"rms_norm_eps\": 1e-05") || strstr(text, "\"rms_norm_eps\": 1e-5")));
	CHECK(text && strstr(text, "\"rope_theta\": 10000.0"));
	free(text);
	{
		struct ferry_model_config back;

		CHECK_OK(ferry_hf_checkpoint_read_config(in(d, "config.json"), &back));
		CHECK(same_cfg(&back, &c));
	}

	/* what cannot be a Hugging Face Llama */
	c = llama_cfg(-1);
	c.padded_vocab = 64;
	CHECK_ERR(ferry_model_config_to_hf(&c, &hf), FERRY_ERR_INVALID, "padded vocabulary 64");
	c = (struct ferry_model_config){ .arch = "gpt2", .max_seq = 8, .vocab = 10, .layers = 1, .heads = 1,
					 .channels = 8 };
	CHECK_ERR(ferry_model_config_to_hf(&c, &hf), FERRY_ERR_INVALID, "not 'gpt2'");

	/* which kind a path is */
	CHECK(ferry_checkpoint_is_hf(tpath("")) && ferry_checkpoint_is_hf("x/model.safetensors") &&
	      ferry_checkpoint_is_hf("x/config.json") && !ferry_checkpoint_is_hf("gpt2_124M.bin") &&
	      !ferry_checkpoint_is_hf("missing"));
	{
		char sp[4300];

		CHECK_OK(ferry_checkpoint_state_path("model.bin", false, sp, sizeof(sp)));
		CHECK(!strcmp(sp, "model.bin.state"));
		CHECK_OK(ferry_checkpoint_state_path("newdir", true, sp, sizeof(sp)));
		CHECK(!strcmp(sp, "newdir/ferry_state.bin"));
		CHECK_OK(ferry_checkpoint_state_path("newdir/", true, sp, sizeof(sp)));
		CHECK(!strcmp(sp, "newdir/ferry_state.bin"));
		CHECK_OK(ferry_checkpoint_state_path(in(d, "config.json"), true, sp, sizeof(sp)));
		CHECK(!strcmp(sp, in(d, "ferry_state.bin")));
		CHECK_ERR(ferry_checkpoint_state_path("model.bin", false, sp, 8), FERRY_ERR_INVALID, "too long");
	}
}

/* ---- bad checkpoints ---------------------------------------------------------------- */

static void test_bad_checkpoints(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), tied = llama_cfg(1), got;
	struct ferry_st_write t[MAXT], x[MAXT + 1];
	char names[MAXT][128];
	size_t n, nt;
	float *p = random_params(&cfg, 17, &n), *q = calloc(n, sizeof(float));
	float *pt = random_params(&tied, 18, &nt), *qt = calloc(nt, sizeof(float)), *bad;
	int count = collect(&cfg, p, t, names), k;
	const char *d;
	long size;
	char *bytes;

	/* a tensor missing */
	d = make_ckpt_dir("missing", &cfg, "float32");
	k = find_tensor(t, count, "model.layers.1.self_attn.k_proj.weight");
	memcpy(x, t, sizeof(t[0]) * (size_t)k);
	memcpy(x + k, t + k + 1, sizeof(t[0]) * (size_t)(count - k - 1));
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count - 1, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT,
		  "tensor model.layers.1.self_attn.k_proj.weight is missing");
	CHECK(strstr(ferry_last_error(), d) != NULL);

	/* the LM head missing from an untied checkpoint */
	d = make_ckpt_dir("nohead", &cfg, "float32");
	k = find_tensor(t, count, "lm_head.weight");
	memcpy(x, t, sizeof(t[0]) * (size_t)k);
	memcpy(x + k, t + k + 1, sizeof(t[0]) * (size_t)(count - k - 1));
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count - 1, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT, "lm_head.weight is missing");
	CHECK(strstr(ferry_last_error(), "tie_word_embeddings false") != NULL);

	/* ... present in a tied one: ignored, the embedding is the head */
	d = make_ckpt_dir("tiedhead", &tied, "float32");
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), t, count, "pt")); /* untied p's tensors */
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, qt, nt));
	CHECK(got.tie_embeddings == 1 && nt < n && same_bits(qt, p, nt)); /* the tied layout is a prefix */

	/* a tensor of the wrong shape */
	d = make_ckpt_dir("shape", &cfg, "float32");
	memcpy(x, t, sizeof(t[0]) * (size_t)count);
	k = find_tensor(x, count, "model.layers.2.self_attn.v_proj.weight");
	x[k].shape[0] = 32;
	x[k].shape[1] = 16;
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT,
		  "model.layers.2.self_attn.v_proj.weight has shape [32, 16], expected [16, 32]");
	CHECK(strstr(ferry_last_error(), in(d, FERRY_HF_WEIGHTS_NAME)) != NULL);

	/* a tensor the config does not describe: a fourth layer */
	d = make_ckpt_dir("extra", &cfg, "float32");
	memcpy(x, t, sizeof(t[0]) * (size_t)count);
	x[count] = x[find_tensor(x, count, "model.layers.2.input_layernorm.weight")];
	x[count].name = "model.layers.3.input_layernorm.weight";
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count + 1, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT,
		  "unexpected tensor model.layers.3.input_layernorm.weight: not a parameter of the 3-layer Llama");
	/* ... but an old checkpoint's rotary buffer is fine */
	x[count].name = "model.layers.0.self_attn.rotary_emb.inv_freq";
	x[count].ndim = 1;
	x[count].shape[0] = 4;
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count + 1, "pt"));
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, q, n));
	CHECK(same_bits(p, q, n));

	/* config.json of another model */
	d = tpath("gpt2cfg");
	mkdir(d, 0777);
	write_text(in(d, "config.json"), "{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768}\n");
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), t, count, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read_config(d, &got), FERRY_ERR_FORMAT, "model_type 'gpt2' is not a Llama");
	CHECK_ERR(ferry_checkpoint_any_read(d, &got, q, n), FERRY_ERR_FORMAT, "gpt2cfg/config.json");

	/* no config.json, no weights */
	d = tpath("noconfig");
	mkdir(d, 0777);
	CHECK_ERR(ferry_checkpoint_any_read_config(d, &got), FERRY_ERR_IO, "noconfig/config.json");
	d = make_ckpt_dir("noweights", &cfg, "float32");
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_IO, "holds neither model.safetensors");

	/* truncated weights */
	d = make_ckpt_dir("truncated", &cfg, "float32");
	CHECK_OK(ferry_safetensors_write(tpath("full.safetensors"), t, count, "pt"));
	bytes = read_file(tpath("full.safetensors"), &size);
	{
		FILE *f = fopen(in(d, FERRY_HF_WEIGHTS_NAME), "wb");

		CHECK(f && fwrite(bytes, 1, (size_t)size - 100, f) == (size_t)size - 100);
		fclose(f);
	}
	free(bytes);
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT, in(d, FERRY_HF_WEIGHTS_NAME));

	/* non-finite values, named with the tensor and where */
	bad = malloc(n * sizeof(float));
	memcpy(bad, p, n * sizeof(float));
	d = make_ckpt_dir("nan", &cfg, "float32");
	memcpy(x, t, sizeof(t[0]) * (size_t)count);
	k = find_tensor(x, count, "model.layers.1.mlp.up_proj.weight");
	bad[x[k].data - p + 2 * 32 + 3] = NAN;
	x[k].data = bad + (x[k].data - p);
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT,
		  "model.layers.1.mlp.up_proj.weight holds a non-finite value (nan) at [2, 3]");
	d = make_ckpt_dir("inf", &cfg, "bfloat16");
	memcpy(x, t, sizeof(t[0]) * (size_t)count);
	memcpy(bad, p, n * sizeof(float));
	bad[5] = -INFINITY; /* model.embed_tokens.weight[0, 5] */
	for (k = 0; k < count; k++) {
		x[k].data = bad + (x[k].data - p);
		x[k].dtype = FERRY_ST_BF16;
	}
	CHECK_OK(ferry_safetensors_write(in(d, FERRY_HF_WEIGHTS_NAME), x, count, "pt"));
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n), FERRY_ERR_FORMAT,
		  "model.embed_tokens.weight holds a non-finite value (-inf) at [0, 5]");

	/* a buffer of the wrong size */
	d = tpath("untied");
	CHECK_ERR(ferry_hf_checkpoint_read(d, &got, q, n - 1), FERRY_ERR_INVALID, "parameters");

	free(bad);
	free(p);
	free(q);
	free(pt);
	free(qt);
}

/* ---- saves that fail ----------------------------------------------------------------- */

static void test_bad_saves(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *p = random_params(&cfg, 19, &n), *q = calloc(n, sizeof(float));
	const char *d = tpath("keep"), *file = tpath("plain.bin");

	/* a non-finite parameter: refused before anything is written */
	p[n - 7] = NAN;
	CHECK_ERR(ferry_hf_checkpoint_write(tpath("never"), &cfg, p), FERRY_ERR_INVALID, "not saved: lm_head.weight");
	CHECK(!exists(tpath("never")));
	p[n - 7] = 0.5f;
	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, p));
	{
		/* copies of the good checkpoint's files, to compare with */
		long s1, s2;
		char *a = read_file(in(d, FERRY_HF_WEIGHTS_NAME), &s1), *b = read_file(in(d, FERRY_HF_CONFIG_NAME), &s2);
		FILE *f1 = fopen(tpath("keep_weights"), "wb"), *f2 = fopen(tpath("keep_config"), "wb");

		CHECK(fwrite(a, 1, (size_t)s1, f1) == (size_t)s1 && fwrite(b, 1, (size_t)s2, f2) == (size_t)s2);
		fclose(f1);
		fclose(f2);
		free(a);
		free(b);
	}
	p[3] = INFINITY;
	CHECK_ERR(ferry_hf_checkpoint_write(d, &cfg, p), FERRY_ERR_INVALID, "model.embed_tokens.weight");
	CHECK(same_file(in(d, FERRY_HF_WEIGHTS_NAME), tpath("keep_weights")));
	CHECK(same_file(in(d, FERRY_HF_CONFIG_NAME), tpath("keep_config")));
	p[3] = 0.25f;

	/* a path that is a file; GPT-2 into a directory */
	write_text(file, "not a directory\n");
	CHECK_ERR(ferry_checkpoint_any_write(file, &cfg, p), FERRY_ERR_INVALID, "exists and is not a directory");
	{
		struct ferry_model_config g = { .arch = "gpt2", .max_seq = 8, .vocab = 10, .layers = 1,
						.heads = 1, .channels = 8 };

		CHECK_ERR(ferry_checkpoint_any_write(d, &g, p), FERRY_ERR_INVALID, "is a directory");
		CHECK_ERR(ferry_hf_checkpoint_write(tpath("g"), &g, p), FERRY_ERR_INVALID,
			  "hold Llama or Qwen 2 or Mistral or Gemma 2 or Qwen 3 or Gemma 3 or Gemma 4 models");
	}
	CHECK(same_file(in(d, FERRY_HF_WEIGHTS_NAME), tpath("keep_weights")));
	CHECK_ERR(ferry_hf_checkpoint_write(tpath("no/such/parent"), &cfg, p), FERRY_ERR_IO,
		  "cannot create the checkpoint directory");
	free(p);
	free(q);
	(void)got;
}

/* Every host allocation of a save fails in turn.  The old checkpoint stays,
 * bit for bit, whether the new one is of the same model or another (the
 * directory is swapped whole): never the new config with the old weights.
 * Nothing but the checkpoint's files is left behind, inside it or beside. */
static void fail_each_allocation(const char *name, const struct ferry_model_config *old_cfg,
				 const struct ferry_model_config *new_cfg, bool same)
{
	const char *d = tpath(name);
	size_t n_old, n_new;
	float *old = random_params(old_cfg, 23, &n_old), *new = random_params(new_cfg, 29, &n_new);
	size_t nmax = n_old > n_new ? n_old : n_new;
	float *q = calloc(nmax, sizeof(float));
	int failed = 0, refused = 0;

	for (long k = 0; k < 1000; k++) {
		struct ferry_model_config got;
		ferry_status st, rd;

		CHECK_OK(ferry_hf_checkpoint_write(d, old_cfg, old));
		ferry_fault_fail_after(k);
		st = ferry_hf_checkpoint_write(d, new_cfg, new);
		ferry_fault_fail_after(-1);
		CHECK(strangers(d) == 0);
		CHECK(temporaries_beside(name) == 0);
		memset(&got, 0, sizeof(got));
		if (st == FERRY_OK) {
			CHECK_OK(ferry_hf_checkpoint_read(d, &got, q, n_new));
			CHECK(same_cfg(&got, new_cfg) && same_bits(q, new, n_new));
			break;
		}
		CHECK(st == FERRY_ERR_NOMEM);
		failed++;
		ferry_status cst = ferry_hf_checkpoint_read_config(d, &got);

		if (cst == FERRY_OK && same_cfg(&got, old_cfg)) {
			rd = ferry_hf_checkpoint_read(d, &got, q, n_old);
			CHECK(rd == FERRY_OK || !same);
			if (rd == FERRY_OK)
				CHECK(same_bits(q, old, n_old));
			else
				refused++;
		} else {
			/* the new config.json is there: its weights must not be the old ones */
			CHECK(!same && cst == FERRY_OK && same_cfg(&got, new_cfg));
			rd = ferry_hf_checkpoint_read(d, &got, q, n_new);
			CHECK(rd == FERRY_ERR_IO || rd == FERRY_ERR_FORMAT);
			refused++;
		}
	}
	printf("%s: a save survives each of its %d host allocations failing (%d left a checkpoint "
	       "that is refused cleanly)\n", name, failed, refused);
	CHECK(failed > 5);
	CHECK(refused == 0);
	(void)same;
	free(old);
	free(new);
	free(q);
}

/* Every host allocation of a load fails in turn: a clean FERRY_ERR_NOMEM
 * (the sanitizer build checks nothing leaks), then the load succeeds. */
static void test_load_failures(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *p = random_params(&cfg, 31, &n), *q = calloc(n, sizeof(float));
	const char *d = tpath("load_faults");
	int failed = 0;

	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, p));
	for (long k = 0; k < 1000; k++) {
		ferry_status st;

		ferry_fault_fail_after(k);
		st = ferry_checkpoint_any_read(d, &got, q, n);
		ferry_fault_fail_after(-1);
		if (st == FERRY_OK) {
			CHECK(same_bits(p, q, n));
			break;
		}
		CHECK(st == FERRY_ERR_NOMEM);
		failed++;
	}
	printf("a load survives each of its %d host allocations failing\n", failed);
	CHECK(failed > 5);
	free(p);
	free(q);
}

static void test_save_failures(void)
{
	struct ferry_model_config a = llama_cfg(-1), b = llama_cfg(-1), c = llama_cfg(-1);

	b.rope_theta = 10000.0f; /* same shapes, another model: the silent case */
	fail_each_allocation("faults_same", &a, &c, true);
	fail_each_allocation("faults_other", &a, &b, false);
}

/* ---- the directory swap ----------------------------------------------------------------- */

static long dead_pid(void)
{
	pid_t p = fork();

	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (long)p;
}

static ino_t inode_of(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

/* What a Hugging Face directory holds beside the checkpoint stays: files
 * and subdirectories, hard-linked into the new directory; old shards and
 * an index go. */
static void test_swap_keeps_others(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *p = random_params(&cfg, 41, &n), *q = random_params(&cfg, 42, &n), *r = calloc(n, sizeof(float));
	const char *d = tpath("keeps");
	char sub[1024];
	ino_t readme;

	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, p));
	write_text(in(d, "README.md"), "my model\n");
	write_text(in(d, "tokenizer.json"), "{}\n");
	write_text(in(d, "model-00001-of-00002.safetensors"), "an old shard\n");
	write_text(in(d, "adapter_model.safetensors"), "someone's adapter\n");
	snprintf(sub, sizeof(sub), "%s/extra", d);
	CHECK(mkdir(sub, 0755) == 0);
	write_text(in(sub, "notes.txt"), "notes\n");
	readme = inode_of(in(d, "README.md"));
	CHECK_OK(ferry_hf_checkpoint_write(d, &cfg, q));
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, r, n));
	CHECK(same_bits(q, r, n));
	CHECK(exists(in(d, "tokenizer.json")) && exists(in(sub, "notes.txt")));
	CHECK(inode_of(in(d, "README.md")) == readme); /* the same file, linked */
	CHECK(!exists(in(d, "model-00001-of-00002.safetensors")) && exists(in(d, "adapter_model.safetensors")));
	CHECK(temporaries_beside("keeps") == 0);

	/* a symbolic link to a directory is not saved through */
	CHECK(symlink("keeps", tpath("keeps_link")) == 0);
	CHECK_ERR(ferry_hf_checkpoint_write(tpath("keeps_link"), &cfg, p), FERRY_ERR_INVALID,
		  "keeps_link is a symbolic link");
	free(p);
	free(q);
	free(r);
}

/* A model with its state, every write of the save failing in turn: the
 * previous pair stays whole, nothing is left beside it. */
static void test_pair_write_faults(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *a = random_params(&cfg, 43, &n), *b = random_params(&cfg, 44, &n), *r = calloc(n, sizeof(float));
	float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
	struct ferry_train_state sa = { .step = 1, .total_steps = 9, .lr = 1e-3f }, sb = sa, back;
	const char *d = tpath("pairs");
	int failed = 0;

	sa.params_hash = ferry_params_hash(a, n);
	sb.step = 2;
	sb.params_hash = ferry_params_hash(b, n);
	for (long k = 0; k < 100; k++) {
		ferry_status st;

		CHECK_OK(ferry_checkpoint_save(d, &cfg, a, &sa, m, v, n));
		write_text(in(d, "README.md"), "kept\n");
		ferry_fault_fail_write_after(k);
		st = ferry_checkpoint_save(d, &cfg, b, &sb, m, v, n);
		ferry_fault_fail_write_after(-1);
		CHECK(temporaries_beside("pairs") == 0);
		CHECK_OK(ferry_hf_checkpoint_read(d, &got, r, n));
		CHECK_OK(ferry_state_read(in(d, FERRY_HF_STATE_NAME), &back, m, v, n));
		CHECK(exists(in(d, "README.md")));
		if (st == FERRY_OK) {
			CHECK(same_bits(b, r, n) && back.step == 2);
			break;
		}
		CHECK_ERR(st, FERRY_ERR_IO, "No space left on device");
		CHECK(same_bits(a, r, n) && back.step == 1 && back.params_hash == ferry_params_hash(r, n));
		failed++;
	}
	printf("a directory save survives each of its %d write-path operations failing\n", failed);
	CHECK(failed >= 7); /* mkdir, a link, state header, glob, m, v, fsync, directory fsync */
	free(a);
	free(b);
	free(r);
	free(m);
	free(v);
}

/* Where renameat2 cannot exchange, a swap is two renames: a kill between
 * them leaves no DIR, DIR.old.<pid> and DIR.tmp.<pid> (complete); recovery
 * finishes it.  A DIR.old alone goes back; a partial DIR.tmp is removed. */
/* bf16 by bit operations of our own: round to nearest, ties to even. */
static float bf16_of(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
	memcpy(&x, &u, 4);
	return x;
}

/* Every tensor of dir's weights of dtype want. */
static bool weights_all(const char *dir, enum ferry_st_dtype want)
{
	ferry_safetensors_t h;
	bool all = ferry_safetensors_open(dir, &h) == FERRY_OK && ferry_safetensors_count(h) > 0;

	for (int i = 0; all && i < ferry_safetensors_count(h); i++)
		all = ferry_safetensors_tensor(h, i)->dtype == want;
	if (all || h)
		ferry_safetensors_close(h);
	return all;
}

/* ferry_checkpoint_save_as: the source directory's tokenizer files and
 * token ids carried into a new directory, each write of the carry failing
 * in turn leaving the old checkpoint whole; bf16 weights rounded to
 * nearest even with the state hashing them, a source in bf16 saved in
 * bf16, a value too large for bf16 and bf16 for GPT-2 refused. */
static void test_save_as(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *a = random_params(&cfg, 51, &n), *r = calloc(n, sizeof(float));
	float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
	struct ferry_train_state s = { .step = 3, .total_steps = 9, .lr = 1e-3f }, back;
	const char *src = tpath("sa_src"), *dst = tpath("sa_dst"), *b16 = tpath("sa_b16");
	struct ferry_hf_config hf;
	ferry_status st;
	int failed = 0;

	s.params_hash = ferry_params_hash(a, n);
	CHECK_OK(ferry_hf_checkpoint_write(src, &cfg, a));
	CHECK_OK(ferry_hf_config_read(src, &hf));
	hf.has_bos = true, hf.bos_token_id = 5, hf.n_eos = 2, hf.eos_list = true;
	hf.eos_token_id[0] = 6, hf.eos_token_id[1] = 7;
	CHECK_OK(ferry_hf_config_write(src, &hf));
	write_text(in(src, "tokenizer.json"), "{\"model\": {}}\n");
	write_text(in(src, "generation_config.json"), "{\"eos_token_id\": [6, 7]}\n");
	CHECK_OK(ferry_checkpoint_save(dst, &cfg, a, &s, m, v, n)); /* the old checkpoint there */
	for (long k = 0; k < 100; k++) {
		ferry_fault_fail_write_after(k);
		st = ferry_checkpoint_save_as(dst, &cfg, a, &s, m, v, n, &(struct ferry_save_opts){ src, 0, NULL });
		ferry_fault_fail_write_after(-1);
		CHECK(temporaries_beside("sa_dst") == 0);
		if (st == FERRY_OK)
			break;
		CHECK(!exists(in(dst, "tokenizer.json")) && !exists(in(dst, "generation_config.json")));
		failed++;
	}
	printf("carrying the tokenizer survives each of %d write-path operations failing\n", failed);
	CHECK(failed >= 10); /* mkdir, two files' writes and fsyncs, config, weights, state, fsync */
	CHECK(same_file(in(src, "tokenizer.json"), in(dst, "tokenizer.json")) &&
	      same_file(in(src, "generation_config.json"), in(dst, "generation_config.json")));
	CHECK_OK(ferry_hf_config_read(dst, &hf));
	CHECK(hf.has_bos && hf.bos_token_id == 5 && hf.eos_list && hf.n_eos == 2 && hf.eos_token_id[1] == 7 &&
	      !strcmp(hf.torch_dtype, "float32") && weights_all(dst, FERRY_ST_F32));

	/* bf16: each value rounded, the state's hash that of what reads back */
	CHECK_OK(ferry_checkpoint_save_as(b16, &cfg, a, &s, m, v, n,
					  &(struct ferry_save_opts){ src, FERRY_SAVE_BF16, NULL }));
	CHECK(weights_all(b16, FERRY_ST_BF16));
	CHECK_OK(ferry_hf_checkpoint_read(b16, &got, r, n));
	CHECK_OK(ferry_state_read(in(b16, FERRY_HF_STATE_NAME), &back, m, v, n));
	CHECK(back.params_hash == ferry_params_hash(r, n) && back.params_hash != s.params_hash);
	for (size_t i = 0; i < n; i++)
		if (r[i] != bf16_of(a[i])) {
			CHECK(!"a bf16 value is the f32 one rounded to nearest even");
			break;
		}
	CHECK_OK(ferry_hf_config_read(b16, &hf));
	CHECK(!strcmp(hf.torch_dtype, "bfloat16") && hf.bos_token_id == 5);
	/* from the bf16 directory: bf16 by default, f32 when asked */
	CHECK_OK(ferry_checkpoint_save_as(tpath("sa_auto"), &cfg, r, NULL, NULL, NULL, 0,
					  &(struct ferry_save_opts){ b16, FERRY_SAVE_AUTO, NULL }));
	CHECK(weights_all(tpath("sa_auto"), FERRY_ST_BF16));
	CHECK_OK(ferry_checkpoint_save_as(tpath("sa_f32"), &cfg, r, NULL, NULL, NULL, 0,
					  &(struct ferry_save_opts){ b16, FERRY_SAVE_F32, NULL }));
	CHECK(weights_all(tpath("sa_f32"), FERRY_ST_F32));

	a[2] = 3.3999e38f; /* finite in f32, infinite in bf16 */
	CHECK_ERR(ferry_checkpoint_save_as(tpath("sa_big"), &cfg, a, &s, m, v, n,
					   &(struct ferry_save_opts){ NULL, FERRY_SAVE_BF16, NULL }),
		  FERRY_ERR_INVALID, "not saved in bf16 (too large for it): model.embed_tokens.weight");
	CHECK(!exists(tpath("sa_big")) && temporaries_beside("sa_big") == 0);
	{
		struct ferry_model_config g = { .arch = "gpt2", .max_seq = 8, .vocab = 10, .layers = 1,
						.heads = 1, .channels = 8 };

		CHECK_ERR(ferry_checkpoint_save_as(tpath("sa_g.bin"), &g, a, NULL, NULL, NULL, 0,
						   &(struct ferry_save_opts){ NULL, FERRY_SAVE_BF16, NULL }),
			  FERRY_ERR_INVALID, "an llm.c model file holds fp32 weights only");
		CHECK(!exists(tpath("sa_g.bin")));
	}
	free(a);
	free(r);
	free(m);
	free(v);
}

static void test_swap_recovery(void)
{
	struct ferry_model_config cfg = llama_cfg(-1), got;
	size_t n;
	float *a = random_params(&cfg, 45, &n), *b = random_params(&cfg, 46, &n), *r = calloc(n, sizeof(float));
	const char *d = tpath("swap");
	char old[1024], tmp[1024];
	long pid = dead_pid();

	snprintf(old, sizeof(old), "%s.old.%ld", d, pid);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", d, pid);
	CHECK_OK(ferry_hf_checkpoint_write(old, &cfg, a));
	CHECK_OK(ferry_hf_checkpoint_write(tmp, &cfg, b));
	CHECK_OK(ferry_checkpoint_recover(d));
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, r, n));
	CHECK(same_bits(b, r, n));
	CHECK(temporaries_beside("swap") == 0);

	CHECK(rename(d, old) == 0);
	CHECK_OK(ferry_checkpoint_recover(d));
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, r, n));
	CHECK(same_bits(b, r, n));

	CHECK(mkdir(tmp, 0755) == 0);
	write_text(in(tmp, FERRY_HF_CONFIG_NAME), "{\"partial\n");
	CHECK_OK(ferry_checkpoint_recover(in(d, FERRY_HF_WEIGHTS_NAME))); /* a file in it: the directory */
	CHECK(!exists(tmp) && temporaries_beside("swap") == 0);
	CHECK_OK(ferry_hf_checkpoint_read(d, &got, r, n));
	CHECK(same_bits(b, r, n));
	free(a);
	free(b);
	free(r);
}

/* ---- training ------------------------------------------------------------------------ */

static float *trainer_params(ferry_trainer_t tr, size_t *n)
{
	ferry_model_t m = ferry_trainer_model(tr);
	float *p;

	*n = ferry_model_num_params(m);
	p = calloc(*n, sizeof(float));
	CHECK_OK(ferry_model_get_params(m, p));
	return p;
}

/* 8 steps straight == 3 steps, save as HF, resume, 5 steps: bit for bit. */
static void test_train_resume(void)
{
	struct ferry_train_opts o;
	struct ferry_step_metrics m;
	ferry_trainer_t tr = NULL;
	uint16_t tok[600];
	float *straight, *resumed;
	size_t n1 = 0, n2 = 0;
	const char *d = tpath("run3");

	for (int i = 0; i < 600; i++)
		tok[i] = (uint16_t)((i * 7 + i / 3) % 37);
	write_shard(tpath("train_0.bin"), tok, 300);
	write_shard(tpath("train_1.bin"), tok + 300, 300);
	ferry_train_opts_default(&o);
	o.model = llama_cfg(-1);
	o.data = tpath("train_*.bin");
	o.B = 2;
	o.T = 8;
	o.threads = 2;
	o.steps = 8;
	o.warmup = 2;

	CHECK_OK(ferry_trainer_create(&o, &tr));
	for (int s = 0; s < 8; s++)
		CHECK_OK(ferry_trainer_step(tr, &m));
	straight = trainer_params(tr, &n1);
	ferry_trainer_free(tr);

	CHECK_OK(ferry_trainer_create(&o, &tr));
	for (int s = 0; s < 3; s++)
		CHECK_OK(ferry_trainer_step(tr, &m));
	CHECK_OK(ferry_trainer_save(tr, d));
	CHECK(exists(in(d, FERRY_HF_STATE_NAME)) && exists(in(d, FERRY_HF_WEIGHTS_NAME)));
	for (int s = 0; s < 2; s++)
		CHECK_OK(ferry_trainer_step(tr, &m));
	CHECK_OK(ferry_trainer_save(tr, tpath("run5")));
	ferry_trainer_free(tr);

	o.resume = d;
	memset(o.model.arch, 0, sizeof(o.model.arch)); /* the checkpoint says which model */
	tr = NULL;
	CHECK_OK(ferry_trainer_create(&o, &tr));
	if (tr) {
		CHECK(ferry_trainer_step_count(tr) == 3);
		CHECK(!strcmp(ferry_model_config(ferry_trainer_model(tr))->arch, "llama"));
		while (ferry_trainer_step_count(tr) < 8)
			CHECK_OK(ferry_trainer_step(tr, &m));
		resumed = trainer_params(tr, &n2);
		CHECK(n1 == n2 && same_bits(straight, resumed, n1));
		free(resumed);
		ferry_trainer_free(tr);
	}

	/* the model asked for must be the checkpoint's */
	snprintf(o.model.arch, sizeof(o.model.arch), "gpt2");
	tr = NULL;
	CHECK_ERR(ferry_trainer_create(&o, &tr), FERRY_ERR_INVALID, "model gpt2 asked for, but");
	CHECK(!tr);
	memset(o.model.arch, 0, sizeof(o.model.arch));

	/* weights from one save, state from another: refused */
	{
		long size;
		char *w = read_file(in(tpath("run5"), FERRY_HF_WEIGHTS_NAME), &size);
		FILE *f = fopen(in(d, FERRY_HF_WEIGHTS_NAME), "wb");

		CHECK(w && f && fwrite(w, 1, (size_t)size, f) == (size_t)size);
		fclose(f);
		free(w);
	}
	tr = NULL;
	CHECK_ERR(ferry_trainer_create(&o, &tr), FERRY_ERR_FORMAT, "different saves");
	/* ... but --checkpoint (weights only) works */
	o.resume = NULL;
	o.checkpoint = d;
	tr = NULL;
	CHECK_OK(ferry_trainer_create(&o, &tr));
	CHECK(tr && ferry_trainer_step_count(tr) == 0);
	ferry_trainer_free(tr);
	free(straight);
}

int main(void)
{
	struct ferry_backend_opts bo = { .device_mem = 256u << 20, .threads = 2 };

	scratch_dir_make("ferry_hf_checkpoint");
	if (ferry_backend_open("cpu", &bo, &be) != FERRY_OK) {
		fprintf(stderr, "cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	test_round_trip(-1);
	test_round_trip(1);
	test_dtypes();
	test_sharded();
	test_config_mapping();
	test_bad_checkpoints();
	test_bad_saves();
	test_save_failures();
	test_swap_keeps_others();
	test_pair_write_faults();
	test_save_as();
	test_swap_recovery();
	test_load_failures();
	test_train_resume();
	ferry_backend_close(be);
	return scratch_finish("test_hf_checkpoint");
}
