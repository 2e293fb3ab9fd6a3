/*
 * The families' config.json files (Llama, Qwen 2, Mistral, Gemma 2, Qwen
 * 3, Gemma 3), as published and as ferry writes them:
 *
 *   published  Mistral 7B v0.1 and v0.3, Qwen 2.5 7B (and with
 *              use_sliding_window), Gemma 2 2B, 9B and 27B, Qwen 3 0.6B
 *              and 8B, Gemma 3 1B (their files'
 *              fields, written out here): each is read,
 *              becomes a model config whose parameter count is the model's
 *              published one, and goes back to config.json: read again the
 *              same fields, and every key the published file has that ferry
 *              writes holds the same JSON value (the keys ferry leaves out
 *              are listed: token ids, generation, what transformers does
 *              not read; a null is the default, left out);
 *   defaults   a file that names only model_type takes its config class's
 *              defaults (Gemma2Config: 4 key/value heads, head_dim 256, a
 *              tied head, window 4096, caps 50 and 30, scalar 256;
 *              Qwen3Config: head_dim 128 whatever the width);
 *   layers     layer_types is accepted where it says what the family's rule
 *              gives and refused, by index, where not;
 *   refusals   each family's keys in another family, bad values, a writer
 *              asked for what the family cannot say, and model configs
 *              that set Gemma 2's constants on other models.
 */
#include "ferry/hf_checkpoint.h"
#include "ferry/model.h"
#include "ferry/safetensors.h"

#include <jansson.h>

#include "file_test_util.h"

/* ---- published files ------------------------------------------------------------ */

#define GEMMA2(hidden, inter, heads, layers, kv, hd, qpas, extra)                                              \
	"{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"     \
	" \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\","           \
	" \"eos_token_id\": 1, \"final_logit_softcapping\": 30.0, \"head_dim\": " #hd ","                        \
	" \"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\","                  \
	" \"hidden_size\": " #hidden ", \"initializer_range\": 0.02, \"intermediate_size\": " #inter ","          \
	" \"max_position_embeddings\": 8192, \"model_type\": \"gemma2\", \"num_attention_heads\": " #heads ","    \
	" \"num_hidden_layers\": " #layers ", \"num_key_value_heads\": " #kv ", \"pad_token_id\": 0,"           \
	" \"query_pre_attn_scalar\": " #qpas ", \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"              \
	" \"sliding_window\": 4096," extra " \"torch_dtype\": \"float32\", \"transformers_version\": \"4.42.4\"," \
	" \"use_cache\": true, \"vocab_size\": 256000}"

#define MISTRAL7B(theta, window, vocab)                                                                          \
	"{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2,"                  \
	" \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"                            \
	" \"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\","            \
	" \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"                      \
	" \"rms_norm_eps\": 1e-05, \"rope_theta\": " theta ", \"sliding_window\": " window ","                       \
	" \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.34.0.dev0\"," \
	" \"use_cache\": true, \"vocab_size\": " vocab "}"

#define QWEN25_7B(use, extra)                                                                                    \
	"{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"         \
	" \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 3584, \"initializer_range\": 0.02,"  \
	" \"intermediate_size\": 18944, \"max_position_embeddings\": 131072, \"max_window_layers\": 28,"            \
	" \"model_type\": \"qwen2\", \"num_attention_heads\": 28, \"num_hidden_layers\": 28,"                      \
	" \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0," extra                   \
	" \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.1\","     \
	" \"use_cache\": true, \"use_sliding_window\": " use ", \"vocab_size\": 152064}"

#define QWEN3(hidden, inter, layers, heads, tie)                                                                 \
	"{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"       \
	" \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","      \
	" \"hidden_size\": " #hidden ", \"initializer_range\": 0.02, \"intermediate_size\": " #inter ","           \
	" \"max_position_embeddings\": 40960, \"max_window_layers\": " #layers ", \"model_type\": \"qwen3\","     \
	" \"num_attention_heads\": " #heads ", \"num_hidden_layers\": " #layers ", \"num_key_value_heads\": 8,"   \
	" \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null,"  \
	" \"tie_word_embeddings\": " #tie ", \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\"," \
	" \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}"

#define GEMMA3_1B                                                                                                \
	"{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"      \
	" \"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\","            \
	" \"eos_token_id\": 1, \"final_logit_softcapping\": null, \"head_dim\": 256,"                              \
	" \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02,"      \
	" \"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\","      \
	" \"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, \"pad_token_id\": 0," \
	" \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000,"               \
	" \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6," \
	" \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true,"          \
	" \"vocab_size\": 262144}"

/* Keys a published file has that ferry does not write back: token ids,
 * generation and initialisation settings, the library's version, and
 * Gemma's hidden_act and sliding_window_size (transformers reads neither),
 * Gemma 3's sliding_window_pattern (the family's 6, its class's default). */
static const char *const dropped[] = {
	"bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "transformers_version",
	"cache_implementation", "attention_dropout", "sliding_window_size", "hidden_act", "sliding_window_pattern", NULL,
};

static const struct published {
	const char *name, *text;
	size_t params;     /* the model's published parameter count */
	int window, from;  /* what ferry makes of its window */
	bool gate_shut;    /* use_sliding_window false: sliding_window and
			      max_window_layers say nothing, and are dropped */
} published[] = {
	{ "mistral-7b-v0.1", MISTRAL7B("10000.0", "4096", "32000"), 7241732096u, 4096, 0, false },
	{ "mistral-7b-v0.3", MISTRAL7B("1000000.0", "null", "32768"), 7248023552u, 0, 0, false },
	{ "qwen2.5-7b", QWEN25_7B("false", " \"sliding_window\": 131072,"), 7615616512u, 0, 0, true },
	{ "qwen2.5-7b windowed", QWEN25_7B("true", " \"sliding_window\": 4096,"), 7615616512u, 4096, 28, false },
	{ "gemma-2-2b", GEMMA2(2304, 9216, 8, 26, 4, 256, 256, ""), 2614341888u, 4096, 0, false },
	{ "gemma-2-9b", GEMMA2(3584, 14336, 16, 42, 8, 256, 256, " \"sliding_window_size\": 4096,"), 9241705984u,
	  4096, 0, false },
	{ "gemma-2-27b", GEMMA2(4608, 36864, 32, 46, 16, 128, 144, ""), 27227128320u, 4096, 0, false },
	{ "qwen3-0.6b", QWEN3(1024, 3072, 28, 16, true), 596049920u, 0, 0, true },
	{ "qwen3-8b", QWEN3(4096, 12288, 36, 32, false), 8190735360u, 0, 0, true },
	{ "gemma-3-1b", GEMMA3_1B, 999885952u, 512, 0, false },
};

static const char *write_case(const char *name, const char *text)
{
	char sub[96];
	const char *d;
	FILE *f;

	snprintf(sub, sizeof(sub), "%s", name);
	for (char *c = sub; *c; c++)
		*c = *c == ' ' ? '_' : *c;
	d = tpath(sub);
	mkdir(d, 0755);
	snprintf(sub + strlen(sub), sizeof(sub) - strlen(sub), "/config.json");
	f = fopen(tpath(sub), "w");
	if (!f || fputs(text, f) < 0 || fclose(f)) {
		fprintf(stderr, "cannot write %s\n", sub);
		exit(1);
	}
	return d;
}

static bool dropped_key(const char *key, bool gate_shut)
{
	if (gate_shut && (!strcmp(key, "sliding_window") || !strcmp(key, "max_window_layers")))
		return true;
	for (int i = 0; dropped[i]; i++)
		if (!strcmp(dropped[i], key))
			return true;
	return false;
}

/* Every key of the published file ferry's rewrite has holds the same value;
 * the others are the dropped ones. */
static void same_json(const char *name, const char *text, const char *rewritten, bool gate_shut)
{
	json_t *a = json_loads(text, 0, NULL), *b = json_load_file(rewritten, 0, NULL), *v;
	const char *key;

	CHECK(a && b);
	json_object_foreach(a, key, v) {
		json_t *w = json_object_get(b, key);

		if (!w && (dropped_key(key, gate_shut) || json_is_null(v)))
			continue; /* null: the class's default, which ferry leaves out */
		if (!w || !(json_equal(v, w) || (json_is_number(v) && json_is_number(w) &&
						 json_number_value(v) == json_number_value(w)))) {
			fprintf(stderr, "%s: %s is %s in the rewrite\n", name, key, w ? "other" : "absent");
			failures++;
		}
	}
	json_decref(a);
	json_decref(b);
}

static void check_published(const struct published *p)
{
	const char *d = write_case(p->name, p->text);
	struct ferry_hf_config hf, back;
	struct ferry_model_config m;
	char out[300];

	CHECK_OK(ferry_hf_config_read(d, &hf));
	CHECK_OK(ferry_hf_config_to_model(&hf, NULL, &m));
	CHECK(ferry_model_config_num_params(&m) == p->params);
	CHECK(m.sliding_window == p->window && m.window_layers_from == p->from);
	CHECK_OK(ferry_model_config_to_hf(&m, &back));
	snprintf(out, sizeof(out), "%s.out", d);
	mkdir(out, 0755);
	/* what a model's shape does not say, and a save carries from its source */
	snprintf(back.torch_dtype, sizeof(back.torch_dtype), "%s", hf.torch_dtype);
	back.has_bos = hf.has_bos;
	back.bos_token_id = hf.bos_token_id;
	back.n_eos = hf.n_eos;
	back.eos_list = hf.eos_list;
	memcpy(back.eos_token_id, hf.eos_token_id, sizeof(hf.eos_token_id));
	CHECK_OK(ferry_hf_config_write(out, &back));
	CHECK_OK(ferry_hf_config_read(out, &back));
	CHECK(!memcmp(&hf, &back, sizeof(hf)) || (fprintf(stderr, "%s: fields differ\n", p->name), 0));
	strcat(out, "/config.json");
	CHECK(exists(out));
	same_json(p->name, p->text, out, p->gate_shut);
	printf("%-22s %11zu parameters, window %d from layer %d: read, saved, the same\n", p->name,
	       ferry_model_config_num_params(&m), m.sliding_window, m.window_layers_from);
}

/* ---- defaults, layer types, refusals ---------------------------------------------------- */

static void check_defaults(void)
{
	struct ferry_hf_config c;
	struct ferry_model_config m;

	CHECK_OK(ferry_hf_config_read(write_case("g2min", "{\"model_type\": \"gemma2\"}"), &c));
	CHECK(c.num_key_value_heads == 4 && c.head_dim == 256 && c.tie_word_embeddings && c.sliding_window == 4096 &&
	      c.query_pre_attn_scalar == 256 && c.attn_logit_softcapping == 50.0 && c.final_logit_softcapping == 30.0);
	CHECK_OK(ferry_hf_config_to_model(&c, NULL, &m));
	CHECK(m.window_layers_every == 2 && m.attn_softcap == 50.0f && m.final_softcap == 30.0f);
	CHECK_OK(ferry_hf_config_read(write_case("g2null", "{\"model_type\": \"gemma2\", \"sliding_window\": null,"
						 " \"attn_logit_softcapping\": null}"), &c));
	CHECK(c.sliding_window == 0 && c.attn_logit_softcapping == 0 && c.final_logit_softcapping == 30.0);
	CHECK_OK(ferry_hf_config_to_model(&c, NULL, &m));
	CHECK(m.sliding_window == 0 && m.attn_softcap < 0); /* none, not the default */
	CHECK_OK(ferry_hf_config_read(write_case("qmin", "{\"model_type\": \"qwen2\", \"use_sliding_window\": true}"),
				      &c));
	CHECK(c.sliding_window == 4096 && c.max_window_layers == 28); /* Qwen2Config's */
	CHECK_OK(ferry_hf_config_read(write_case("q3min", "{\"model_type\": \"qwen3\"}"), &c));
	CHECK(c.head_dim == 128 && c.num_key_value_heads == 32 && !c.tie_word_embeddings && c.sliding_window == 0);
	CHECK_OK(ferry_hf_config_to_model(&c, NULL, &m));
	CHECK(m.head_size == 128 && m.channels == 4096 && m.heads == 32); /* Qwen3Config's: not 4096 / 32 */
	CHECK_OK(ferry_hf_config_read(write_case("g3min", "{\"model_type\": \"gemma3_text\"}"), &c));
	CHECK(c.head_dim == 256 && c.tie_word_embeddings && c.sliding_window == 4096 && c.rope_theta == 1e6 &&
	      c.rope_local_base_freq == 1e4 && c.query_pre_attn_scalar == 256 && c.attn_logit_softcapping == 0);
	CHECK_OK(ferry_hf_config_to_model(&c, NULL, &m));
	CHECK(m.window_full_every == 6 && m.rope_local_theta == 1e4f && m.attn_softcap == 0 && m.final_softcap == 0);
	/* transformers 5's rope_parameters, one object per layer type */
	CHECK_OK(ferry_hf_config_read(write_case("g3rp", "{\"model_type\": \"gemma3_text\", \"rope_parameters\":"
						 " {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0,"
						 " \"rope_theta\": 500000.0}, \"sliding_attention\": {\"rope_type\":"
						 " \"default\", \"rope_theta\": 20000.0}}}"), &c));
	CHECK(c.rope_theta == 5e5 && c.rope_type == FERRY_HF_ROPE_LINEAR && c.rope_factor == 8.0 &&
	      c.rope_local_base_freq == 2e4);
	printf("%-22s defaults as the config classes'\n", "defaults");
}

/* A config.json text, and what reading it gives: 0 or an error and its
 * message. */
static const struct bad {
	const char *name, *text;
	ferry_status want;
	const char *needle;
} cases[] = {
	{ "g_lt_ok", "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 3, \"layer_types\": [\"sliding_attention\","
		     " \"full_attention\", \"sliding_attention\"]}", FERRY_OK, "" },
	{ "g_lt_odd", "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\","
		      " \"sliding_attention\"]}", FERRY_ERR_UNSUPPORTED,
	  "layer_types[0] \"full_attention\" is not supported (ferry's Gemma 2 has sliding_attention there)" },
	{ "g_lt_len", "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 3, \"layer_types\": [\"sliding_attention\"]}",
	  FERRY_ERR_FORMAT, "layer_types must list num_hidden_layers (3) entries" },
	{ "g_lt_none", "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 2, \"sliding_window\": null,"
		       " \"layer_types\": [\"sliding_attention\", \"full_attention\"]}", FERRY_OK, "" },
	{ "q_lt_ok", "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 3, \"use_sliding_window\": true,"
		     " \"max_window_layers\": 1, \"layer_types\": [\"full_attention\", \"sliding_attention\","
		     " \"sliding_attention\"]}", FERRY_OK, "" },
	{ "q_lt_bad", "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, \"use_sliding_window\": true,"
		      " \"max_window_layers\": 1, \"layer_types\": [\"full_attention\", \"full_attention\"]}",
	  FERRY_ERR_UNSUPPORTED, "layer_types[1] \"full_attention\" is not supported" },
	{ "q3_lt_ok", "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"use_sliding_window\": true,"
		      " \"sliding_window\": 8, \"max_window_layers\": 1, \"layer_types\": [\"full_attention\","
		      " \"sliding_attention\"]}", FERRY_OK, "" },
	{ "q3_lt_bad", "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"use_sliding_window\": true,"
		       " \"max_window_layers\": 0, \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
	  FERRY_ERR_UNSUPPORTED, "layer_types[0] \"full_attention\" is not supported (ferry's Qwen 3 has" },
	{ "q3_bias", "{\"model_type\": \"qwen3\", \"attention_bias\": true}", FERRY_ERR_UNSUPPORTED,
	  "attention_bias true is not supported" },
	{ "q3_cap", "{\"model_type\": \"qwen3\", \"final_logit_softcapping\": 30.0}", FERRY_ERR_UNSUPPORTED,
	  "final_logit_softcapping is not a field of Qwen3ForCausalLM" },
	{ "g3_lt_ok", "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 7, \"layer_types\":"
		      " [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
		      " \"sliding_attention\", \"full_attention\", \"sliding_attention\"]}", FERRY_OK, "" },
	{ "g3_lt_bad", "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 2, \"layer_types\":"
		       " [\"sliding_attention\", \"full_attention\"]}", FERRY_ERR_UNSUPPORTED,
	  "layer_types[1] \"full_attention\" is not supported (ferry's Gemma 3 has sliding_attention there)" },
	{ "g3_pattern", "{\"model_type\": \"gemma3_text\", \"sliding_window_pattern\": 4}", FERRY_ERR_UNSUPPORTED,
	  "sliding_window_pattern 4 is not supported (ferry's Gemma 3 attends fully on every 6-th layer)" },
	{ "g3_cap", "{\"model_type\": \"gemma3_text\", \"attn_logit_softcapping\": 50.0}", FERRY_ERR_UNSUPPORTED,
	  "attn_logit_softcapping is not a field of Gemma3ForCausalLM" },
	{ "g3_bidi", "{\"model_type\": \"gemma3_text\", \"use_bidirectional_attention\": true}",
	  FERRY_ERR_UNSUPPORTED, "use_bidirectional_attention true is not supported" },
	{ "g3_local_scaled", "{\"model_type\": \"gemma3_text\", \"rope_parameters\": {\"full_attention\":"
			     " {\"rope_type\": \"default\"}, \"sliding_attention\": {\"rope_type\": \"linear\","
			     " \"factor\": 2.0}}}", FERRY_ERR_UNSUPPORTED,
	  "rope_parameters' sliding_attention of a scaled type is not supported" },
	{ "l_local", "{\"model_type\": \"llama\", \"rope_local_base_freq\": 10000}", FERRY_ERR_UNSUPPORTED,
	  "rope_local_base_freq is not a field of LlamaForCausalLM" },
	{ "l_layer_ropes", "{\"model_type\": \"llama\", \"rope_parameters\": {\"full_attention\":"
			   " {\"rope_type\": \"default\"}}}", FERRY_ERR_UNSUPPORTED,
	  "rope_parameters by layer type is not supported (ferry's Llama turns every layer alike)" },
	{ "m_lt_ok", "{\"model_type\": \"mistral\", \"num_hidden_layers\": 2, \"layer_types\":"
		     " [\"sliding_attention\", \"sliding_attention\"]}", FERRY_OK, "" },
	{ "q_mwl", "{\"model_type\": \"qwen2\", \"use_sliding_window\": true, \"max_window_layers\": -1}",
	  FERRY_ERR_FORMAT, "max_window_layers must be an integer from 0 to" },
	{ "q_use", "{\"model_type\": \"qwen2\", \"use_sliding_window\": \"yes\"}", FERRY_ERR_UNSUPPORTED,
	  "use_sliding_window \"yes\" is not supported" },
	{ "m_use", "{\"model_type\": \"mistral\", \"use_sliding_window\": true}", FERRY_ERR_UNSUPPORTED,
	  "use_sliding_window true is not supported" },
	{ "l_cap", "{\"model_type\": \"llama\", \"final_logit_softcapping\": 30.0}", FERRY_ERR_UNSUPPORTED,
	  "final_logit_softcapping is not a field of LlamaForCausalLM" },
	{ "m_qpas", "{\"model_type\": \"mistral\", \"query_pre_attn_scalar\": 128}", FERRY_ERR_UNSUPPORTED,
	  "query_pre_attn_scalar is not a field of MistralForCausalLM" },
	{ "l_act", "{\"model_type\": \"llama\", \"hidden_activation\": \"silu\"}", FERRY_ERR_UNSUPPORTED,
	  "hidden_activation is not a field of LlamaForCausalLM" },
	{ "g_act", "{\"model_type\": \"gemma2\", \"hidden_act\": \"silu\"}", FERRY_ERR_UNSUPPORTED,
	  "hidden_act \"silu\" is not supported (ferry's Gemma 2 uses gelu_pytorch_tanh)" },
	{ "g_qpas", "{\"model_type\": \"gemma2\", \"query_pre_attn_scalar\": 1.5}", FERRY_ERR_FORMAT,
	  "query_pre_attn_scalar must be an integer from 1 to" },
	{ "g_cap", "{\"model_type\": \"gemma2\", \"attn_logit_softcapping\": -1}", FERRY_ERR_FORMAT,
	  "attn_logit_softcapping must be null or a positive number, not -1" },
	{ "g_mwl", "{\"model_type\": \"gemma2\", \"max_window_layers\": 3}", FERRY_ERR_UNSUPPORTED,
	  "max_window_layers is not a field of Gemma2ForCausalLM" },
};

static void check_cases(void)
{
	struct ferry_hf_config c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *d = write_case(cases[i].name, cases[i].text);

		if (cases[i].want == FERRY_OK)
			CHECK_OK(ferry_hf_config_read(d, &c));
		else
			CHECK_ERR(ferry_hf_config_read(d, &c), cases[i].want, cases[i].needle);
	}
	printf("%-22s %zu files accepted or refused by name\n", "layer types, refusals", sizeof(cases) / sizeof(cases[0]));
}

/* What a family's file cannot say, refused by the writer and by the model
 * config's conversion; Gemma 2's constants on other models. */
static void check_writer_and_models(void)
{
	struct ferry_hf_config c;
	struct ferry_model_config m = { .arch = "mistral", .max_seq = 16, .vocab = 32, .layers = 2, .heads = 2,
					.channels = 16, .sliding_window = 4, .window_layers_every = 2 };
	const char *d = write_case("w", "{\"model_type\": \"llama\"}");

	CHECK_OK(ferry_hf_config_read(d, &c));
	c.attn_logit_softcapping = 50.0;
	CHECK_ERR(ferry_hf_config_write(d, &c), FERRY_ERR_INVALID, "soft caps 50 and 0: the family has none");
	c.attn_logit_softcapping = 0.0;
	c.max_window_layers = 3;
	CHECK_ERR(ferry_hf_config_write(d, &c), FERRY_ERR_INVALID, "max_window_layers 3: not a field of the family");
	CHECK_ERR(ferry_model_config_to_hf(&m, &c), FERRY_ERR_INVALID,
		  "Mistral's window acts on the layers its family says, not every 2 from 0");
	m = (struct ferry_model_config){ .arch = "llama", .max_seq = 16, .vocab = 32, .layers = 2, .heads = 2,
					 .channels = 16, .attn_softcap = 5.0f };
	CHECK_ERR(ferry_model_config_complete(&m), FERRY_ERR_INVALID,
		  "attn_softcap (5): Llama's attention has no soft-capping");
	m.attn_softcap = 0.0f;
	m.query_pre_attn_scalar = 64;
	CHECK_ERR(ferry_model_config_complete(&m), FERRY_ERR_INVALID, "query_pre_attn_scalar (64)");
	m = (struct ferry_model_config){ .arch = "gpt2", .max_seq = 16, .vocab = 32, .layers = 2, .heads = 2,
					 .channels = 16, .final_softcap = 30.0f };
	CHECK_ERR(ferry_model_config_complete(&m), FERRY_ERR_INVALID, "final_softcap (30): GPT-2's logits have no");
	m = (struct ferry_model_config){ .arch = "llama", .max_seq = 16, .vocab = 32, .layers = 2, .heads = 2,
					 .channels = 16, .rope_local_theta = 1e4f };
	CHECK_ERR(ferry_model_config_complete(&m), FERRY_ERR_INVALID, "rope_local_theta (10000): Llama turns every");
	m.rope_local_theta = 0;
	m.window_full_every = 6;
	CHECK_ERR(ferry_model_config_complete(&m), FERRY_ERR_INVALID, "window_full_every (6): Llama's layers");
	printf("%-22s refused what a family cannot say\n", "writer, model configs");
	fflush(stdout);
}

/* ---- Gemma 4's keys (a family with gemma4_keys, read by itself) ------------------------ */

/* Gemma4TextConfig's defaults, as src/models/gemma4.c declares them (its
 * unscaled scores: query_pre_attn_scalar 1, not a key); read with
 * ferry_hf_config_read_as, the family alone. */
static const struct ferry_hf_family gemma4 = {
	.model_type = "gemma4_text", .architecture = "Gemma4ForCausalLM", .title = "Gemma 4",
	.vocab_size = 262144, .hidden_size = 2304, .intermediate_size = 9216, .num_hidden_layers = 30,
	.num_attention_heads = 8, .num_key_value_heads = 4, .head_dim = 256, .max_position_embeddings = 131072,
	.rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = true, .hidden_act = "gelu_pytorch_tanh",
	.act_key = "hidden_activation", .sliding_window = 512, .sliding_window_pattern = 6,
	.rope_local_base_freq = 1e4, .query_pre_attn_scalar = 1, .final_logit_softcapping = 30.0, .gemma4_keys = true,
};

/* transformers 5.25's config.json of a tiny Gemma4TextConfig with the
 * features ferry lacks switched off; extra: more keys, replacing none. */
#define G4(extra)                                                                                                  \
	"{\"architectures\": [\"Gemma4ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"     \
	" \"bos_token_id\": 2, \"dtype\": \"float32\","                                                            \
	" \"eos_token_id\": 1, \"head_dim\": 8, \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 32," \
	" \"initializer_range\": 0.02, \"intermediate_size\": 48, \"max_position_embeddings\": 131072,"          \
	" \"model_type\": \"gemma4_text\", \"moe_intermediate_size\": null, \"num_attention_heads\": 4,"          \
	" \"num_hidden_layers\": 6, \"num_key_value_heads\": 2, \"pad_token_id\": 0,"      \
	" \"rms_norm_eps\": 1e-06, \"sliding_window\": 4, \"tie_word_embeddings\": true, \"top_k_experts\": null,"  \
	" \"transformers_version\": \"5.25.0\", \"use_cache\": true,"                                              \
	" \"use_double_wide_mlp\": false, \"vocab_size\": 64, \"vocab_size_per_layer_input\": 262144" extra "}"
#define G4_ROPE(full)                                                                                              \
	", \"rope_parameters\": {\"full_attention\": " full ", \"sliding_attention\": {\"rope_theta\": 10000.0,"  \
	" \"rope_type\": \"default\"}}"
#define G4_PLAIN G4_ROPE("{\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}")
#define G4_OK(extra) G4(G4_PLAIN ", \"per_layer_config\": {}, \"hidden_size_per_layer_input\": 0" extra)

static const struct bad gemma4_cases[] = {
	{ "g4_ok", G4_OK(", \"final_logit_softcapping\": 30.0, \"num_kv_shared_layers\": 0, \"attention_k_eq_v\": false,"
			 " \"enable_moe_block\": false, \"num_experts\": null, \"use_bidirectional_attention\": null,"
			 " \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
			 " \"sliding_attention\", \"sliding_attention\", \"full_attention\"]"), FERRY_OK, "" },
	{ "g4_global_same", G4(G4_PLAIN ", \"hidden_size_per_layer_input\": 0, \"global_head_dim\": 8, \"num_global_key_value_heads\": 2"), FERRY_OK, "" },
	{ "g4_ple", G4(G4_PLAIN ", \"per_layer_config\": {}, \"hidden_size_per_layer_input\": 256"),
	  FERRY_ERR_UNSUPPORTED, "hidden_size_per_layer_input 256 is not implemented yet (per-layer input embeddings)" },
	{ "g4_shared", G4_OK(", \"num_kv_shared_layers\": 2"), FERRY_ERR_UNSUPPORTED,
	  "num_kv_shared_layers 2 is not implemented yet (K/V shared by the last layers)" },
	{ "g4_keqv", G4_OK(", \"attention_k_eq_v\": true"), FERRY_ERR_UNSUPPORTED,
	  "attention_k_eq_v true is not implemented yet (keys used as values on the global layers)" },
	{ "g4_moe", G4_OK(", \"enable_moe_block\": true"), FERRY_ERR_UNSUPPORTED,
	  "enable_moe_block true is not implemented yet (the mixture-of-experts block)" },
	{ "g4_experts", G4_OK(", \"num_experts\": 8"), FERRY_ERR_UNSUPPORTED, "num_experts 8 is not implemented yet" },
	{ "g4_plc", G4(G4_PLAIN ", \"hidden_size_per_layer_input\": 0, \"per_layer_config\": {\"5\": {\"head_dim\": 16}}"), FERRY_ERR_UNSUPPORTED,
	  "per_layer_config an object is not implemented yet (the global layers' own head size and kv heads)" },
	{ "g4_global_dim", G4(G4_PLAIN ", \"hidden_size_per_layer_input\": 0, \"global_head_dim\": 16"), FERRY_ERR_UNSUPPORTED,
	  "global_head_dim 16 is not implemented yet (the global layers' own head size; ferry's Gemma 4 layers all "
	  "have one shape: it must be 8)" },
	{ "g4_global_kv", G4_OK(", \"num_global_key_value_heads\": 1"), FERRY_ERR_UNSUPPORTED,
	  "num_global_key_value_heads 1 is not implemented yet" },
	{ "g4_default_global", G4(G4_PLAIN ", \"hidden_size_per_layer_input\": 0"), FERRY_ERR_UNSUPPORTED,
	  "per_layer_config and global_head_dim are absent: the class's default gives the global layers head size 512" },
	{ "g4_no_ple_key", "{\"model_type\": \"gemma4_text\"}", FERRY_ERR_UNSUPPORTED,
	  "hidden_size_per_layer_input is absent: the class's default (256) gives per-layer input embeddings" },
	{ "g4_no_rope", G4(", \"per_layer_config\": {}, \"hidden_size_per_layer_input\": 0"), FERRY_ERR_UNSUPPORTED,
	  "rope_parameters must give full_attention and sliding_attention" },
	{ "g4_proportional", G4(G4_ROPE("{\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.25}")
				", \"per_layer_config\": {}, \"hidden_size_per_layer_input\": 0"), FERRY_ERR_UNSUPPORTED,
	  "full_attention of type \"proportional\" is not supported" },
	{ "g4_local", G4_OK(", \"rope_local_base_freq\": 10000.0"), FERRY_ERR_UNSUPPORTED,
	  "rope_local_base_freq is not a field of Gemma4ForCausalLM" },
	{ "g4_acap", G4_OK(", \"attn_logit_softcapping\": 50.0"), FERRY_ERR_UNSUPPORTED,
	  "attn_logit_softcapping is not a field of Gemma4ForCausalLM" },
	{ "g4_bidi", G4_OK(", \"use_bidirectional_attention\": \"all\""), FERRY_ERR_UNSUPPORTED,
	  "use_bidirectional_attention \"all\" is not supported (ferry's Gemma 4 attends causally" },
	{ "g4_vision", G4_OK(", \"use_bidirectional_attention\": \"vision\""), FERRY_OK, "" },
	{ "g4_lt", G4_OK(", \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\","
			 " \"sliding_attention\", \"sliding_attention\", \"full_attention\"]"), FERRY_ERR_UNSUPPORTED,
	  "layer_types[1] \"full_attention\" is not supported (ferry's Gemma 4 has sliding_attention there)" },
};

/* Gemma 4's keys accepted switched off, refused by name otherwise; the
 * writer gives rope_parameters by layer type and the features off, and
 * reads back the same. */
static void check_gemma4(void)
{
	const struct ferry_hf_family *fam[] = { &gemma4 };
	struct ferry_hf_config c, again;

	for (size_t i = 0; i < sizeof(gemma4_cases) / sizeof(gemma4_cases[0]); i++) {
		const char *d = write_case(gemma4_cases[i].name, gemma4_cases[i].text);

		if (gemma4_cases[i].want == FERRY_OK)
			CHECK_OK(ferry_hf_config_read_as(d, fam, 1, &c));
		else
			CHECK_ERR(ferry_hf_config_read_as(d, fam, 1, &c), gemma4_cases[i].want, gemma4_cases[i].needle);
	}
	CHECK_OK(ferry_hf_config_read_as(write_case("g4_read", G4_OK("")), fam, 1, &c));
	CHECK(c.head_dim == 8 && c.sliding_window == 4 && c.rope_theta == 1e6 && c.rope_local_base_freq == 1e4 &&
	      c.final_logit_softcapping == 0 && c.query_pre_attn_scalar == 1); /* an absent cap: the class's None */
	c.final_logit_softcapping = 30.0;
	const char *d = write_case("g4_write", "{}");
	CHECK_OK(ferry_hf_config_write_as(d, &c, &gemma4));
	CHECK_OK(ferry_hf_config_read_as(d, fam, 1, &again));
	CHECK(again.rope_theta == 1e6 && again.rope_local_base_freq == 1e4 && again.final_logit_softcapping == 30.0 &&
	      again.head_dim == 8 && again.sliding_window == 4);
	printf("%-22s %zu files accepted or refused by name, written back\n", "gemma 4 keys",
	       sizeof(gemma4_cases) / sizeof(gemma4_cases[0]));
}

int main(void)
{
	scratch_dir_make("test_hf_families");
	for (size_t i = 0; i < sizeof(published) / sizeof(published[0]); i++)
		check_published(&published[i]);
	check_defaults();
	check_cases();
	check_writer_and_models();
	check_gemma4();
	return scratch_finish("test_hf_families");
}
