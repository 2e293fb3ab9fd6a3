/*
 * Reading a Hugging Face tokenizer.json: the BPE model (vocab, merges,
 * unk, byte_fallback, fuse_unk, ignore_merges), the added tokens, and the
 * steps around them (hf_steps.c); then the ids each tokenizer needs by name
 * (BOS, EOS).
 *
 * Everything a file says is checked before use: an id outside 0..2^22, two
 * tokens with one id, a merge naming a token the vocab lacks or whose
 * result it lacks, a field of the wrong type, are FERRY_ERR_FORMAT with the
 * file and the field named; a model or step ferry does not implement is
 * FERRY_ERR_UNSUPPORTED, named.
 */
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/hf_json.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_bytes(const char *s, size_t n)
{
	char *p = ferry_malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

static ferry_status vocab_size(json_t *vocab, const char *path, int *n_ids)
{
	const char *key;
	json_t *val;

	*n_ids = 0;
	json_object_foreach(vocab, key, val) {
		json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;

		if (id < 0 || id >= TOK_MAX_ID)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: model.vocab: '%.40s' has id %s, not an integer in 0..%d",
					   path, key, json_is_integer(val) ? "out of range" : "of another type",
					   TOK_MAX_ID - 1);
		if (id + 1 > *n_ids)
			*n_ids = (int)id + 1;
	}
	return FERRY_OK;
}

static ferry_status parse_vocab(struct tok_bpe *b, json_t *vocab,
				const char *path)
{
	ferry_status st;
	const char *key;
	json_t *val;
	int old;

	if (!json_is_object(vocab))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: model.vocab is missing or not an object", path);
	st = vocab_size(vocab, path, &b->n_ids);
	if (st)
		return st;
	b->token = ferry_calloc((size_t)b->n_ids + 1, sizeof(*b->token));
	b->token_len = ferry_calloc((size_t)b->n_ids + 1, sizeof(*b->token_len));
	if (!b->token || !b->token_len)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for %d ids",
				   path, b->n_ids);
	st = ferry_tok_map_new(json_object_size(vocab), &b->vocab);
	json_object_foreach(vocab, key, val) {
		int id = (int)json_integer_value(val);
		size_t n = strlen(key);

		if (st)
			return st;
		if (b->token[id])
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: model.vocab: id %d is given to both '%.40s' and '%.40s'",
					   path, id, b->token[id], key);
		b->token[id] = dup_bytes(key, n);
		b->token_len[id] = (uint32_t)n;
		if (!b->token[id])
			return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
		st = ferry_tok_map_put(b->vocab, b->token[id], n, id, &old);
	}
	return st;
}

/* One merge rule into its two halves. */
static ferry_status merge_parts(json_t *m, size_t i, const char *path,
				const char **a, size_t *na, const char **b,
				size_t *nb)
{
	if (json_is_string(m)) {
		const char *s = json_string_value(m), *sp = strchr(s, ' ');

		if (!sp || strchr(sp + 1, ' '))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: model.merges[%zu] '%.60s' is not two tokens separated by one space",
					   path, i, s);
		*a = s;
		*na = (size_t)(sp - s);
		*b = sp + 1;
		*nb = strlen(sp + 1);
		return FERRY_OK;
	}
	if (json_is_array(m) && json_array_size(m) == 2 &&
	    json_is_string(json_array_get(m, 0)) &&
	    json_is_string(json_array_get(m, 1))) {
		*a = json_string_value(json_array_get(m, 0));
		*b = json_string_value(json_array_get(m, 1));
		*na = strlen(*a);
		*nb = strlen(*b);
		return FERRY_OK;
	}
	return ferry_error(FERRY_ERR_FORMAT,
			   "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
			   path, i);
}

static ferry_status parse_merges(struct tok_bpe *b, json_t *merges,
				 const char *path)
{
	struct tok_str ab = { 0 };
	ferry_status st;
	size_t i;
	json_t *m;

	if (!json_is_array(merges))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: model.merges is missing or not an array", path);
	st = ferry_tok_bpe_alloc_merges(b, json_array_size(merges));
	json_array_foreach(merges, i, m) {
		const char *l = NULL, *r = NULL;
		size_t nl = 0, nr = 0;
		int il, ir, im;

		st = st ? st : merge_parts(m, i, path, &l, &nl, &r, &nr);
		if (st)
			break;
		il = ferry_tok_map_get(b->vocab, l, nl);
		ir = ferry_tok_map_get(b->vocab, r, nr);
		ab.n = 0;
		st = ferry_tok_str_add(&ab, l, nl);
		st = st ? st : ferry_tok_str_add(&ab, r, nr);
		im = st ? -1 : ferry_tok_map_get(b->vocab, ab.p, ab.n);
		if (!st && (il < 0 || ir < 0 || im < 0)) {
			st = ferry_error(FERRY_ERR_FORMAT,
					 "%s: model.merges[%zu] ('%.*s' '%.*s'): '%.*s' is not in the vocab",
					 path, i, (int)nl, l, (int)nr, r,
					 il < 0 ? (int)nl : ir < 0 ? (int)nr : (int)ab.n,
					 il < 0 ? l : ir < 0 ? r : ab.p);
			break;
		}
		st = st ? st : ferry_tok_bpe_add_merge(b, il, ir, (uint32_t)i, im);
	}
	ferry_tok_str_free(&ab);
	return st;
}

static ferry_status model_flags(struct tok_bpe *b, json_t *model,
				const char *path)
{
	const char *unk = hfj_str(model, "unk_token");
	json_t *drop = json_object_get(model, "dropout");
	const char *pre = hfj_str(model, "continuing_subword_prefix");
	const char *suf = hfj_str(model, "end_of_word_suffix");

	if (drop && !json_is_null(drop) && json_number_value(drop) != 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: model.dropout is not supported (a training option)", path);
	if ((pre && *pre) || (suf && *suf))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: model.%s is not supported", path,
				   pre && *pre ? "continuing_subword_prefix" : "end_of_word_suffix");
	b->byte_fallback = hfj_bool(model, "byte_fallback", false);
	b->fuse_unk = hfj_bool(model, "fuse_unk", false);
	b->ignore_merges = hfj_bool(model, "ignore_merges", false);
	b->unk = unk ? ferry_tok_map_get(b->vocab, unk, strlen(unk)) : -1;
	if (unk && b->unk < 0)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: model.unk_token '%.40s' is not in the vocab", path, unk);
	for (int i = 0; i < 256; i++) {
		char name[8];

		snprintf(name, sizeof(name), "<0x%02X>", i);
		b->byte_id[i] = ferry_tok_map_get(b->vocab, name, 6);
	}
	return FERRY_OK;
}

/* The model's type; older files (BERT's) leave it out, and HF then takes
 * the first model whose fields fit: BPE has merges, WordPiece its
 * subword prefix, Unigram a list for a vocab. */
static const char *model_type(json_t *model)
{
	const char *type = hfj_str(model, "type");

	if (type)
		return type;
	if (json_object_get(model, "merges"))
		return "BPE";
	if (json_is_array(json_object_get(model, "vocab")))
		return "Unigram";
	if (json_object_get(model, "continuing_subword_prefix") ||
	    json_object_get(model, "max_input_chars_per_word"))
		return "WordPiece";
	return json_object_get(model, "vocab") ? "WordLevel" : "BPE";
}

static ferry_status parse_model(struct tok_bpe *b, json_t *model,
				const char *path)
{
	const char *type;
	ferry_status st;

	if (!json_is_object(model))
		return ferry_error(FERRY_ERR_FORMAT, "%s: no \"model\" object", path);
	type = model_type(model);
	if (strcmp(type, "BPE"))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: model type %.40s is not supported (ferry reads BPE)",
				   path, type);
	st = parse_vocab(b, json_object_get(model, "vocab"), path);
	st = st ? st : parse_merges(b, json_object_get(model, "merges"), path);
	st = st ? st : ferry_tok_cache_new(&b->cache);
	return st ? st : model_flags(b, model, path);
}

static ferry_status parse_added_one(struct ferry_hf_tokenizer *t, json_t *o,
				    size_t i, const char *path)
{
	struct tok_added *a = &t->added[t->n_added];
	const char *content = hfj_str(o, "content");
	json_t *id = json_object_get(o, "id");

	if (!json_is_object(o) || !content || !*content || !json_is_integer(id) ||
	    json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_ID)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: added_tokens[%zu] needs a non-empty \"content\" and an \"id\" in 0..%d",
				   path, i, TOK_MAX_ID - 1);
	a->len = strlen(content);
	a->content = dup_bytes(content, a->len);
	if (!a->content)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	a->id = (int)json_integer_value(id);
	a->special = hfj_bool(o, "special", false);
	a->lstrip = hfj_bool(o, "lstrip", false);
	a->rstrip = hfj_bool(o, "rstrip", false);
	a->single_word = hfj_bool(o, "single_word", false);
	a->normalized = hfj_bool(o, "normalized", !a->special);
	t->n_added++;
	return FERRY_OK;
}

static ferry_status parse_added(struct ferry_hf_tokenizer *t, json_t *arr,
				const char *path)
{
	ferry_status st = FERRY_OK;
	size_t i;
	json_t *o;

	if (!arr || json_is_null(arr))
		return FERRY_OK;
	if (!json_is_array(arr))
		return ferry_error(FERRY_ERR_FORMAT, "%s: added_tokens is not an array",
				   path);
	t->added = ferry_calloc(json_array_size(arr) + 1, sizeof(*t->added));
	if (!t->added)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	json_array_foreach(arr, i, o) {
		st = parse_added_one(t, o, i, path);
		if (st)
			break;
	}
	return st;
}

/* n_ids, by id: special or not, which added token; the added tokens'
 * first bytes. */
static ferry_status index_ids(struct ferry_hf_tokenizer *t, const char *path)
{
	t->n_ids = t->bpe.n_ids;
	for (int i = 0; i < t->n_added; i++)
		if (t->added[i].id + 1 > t->n_ids)
			t->n_ids = t->added[i].id + 1;
	t->is_special = ferry_calloc((size_t)t->n_ids + 1, sizeof(*t->is_special));
	t->added_of_id = ferry_malloc(((size_t)t->n_ids + 1) * sizeof(int));
	if (!t->is_special || !t->added_of_id)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	for (int i = 0; i < t->n_ids; i++)
		t->added_of_id[i] = -1;
	for (int i = 0; i < t->n_added; i++) {
		t->added_of_id[t->added[i].id] = i;
		t->is_special[t->added[i].id] = t->added[i].special;
	}
	return FERRY_OK;
}

/* Each added token's form to look for (the normalizers run over the
 * normalized ones: Llama 2's "<s>" is looked for as "▁<s>"), and the
 * bytes they start with. */
static ferry_status match_forms(struct ferry_hf_tokenizer *t, const char *path)
{
	for (int i = 0; i < t->n_added; i++) {
		struct tok_added *a = &t->added[i];
		struct tok_str s = { 0 };
		ferry_status st = a->normalized ? ferry_tok_normalize(t, a->content, a->len, &s) :
						  ferry_tok_str_add(&s, a->content, a->len);

		if (st) {
			char msg[512];

			snprintf(msg, sizeof(msg), "%s", ferry_last_error());
			ferry_tok_str_free(&s);
			return ferry_error(st, "%s: added_tokens[%d] '%.40s': %s", path, i, a->content, msg);
		}
		a->match = s.p;
		a->match_len = s.n;
		if (s.n) /* normalized away: nothing to find */
			t->added_first[a->normalized][(unsigned char)s.p[0]] = true;
	}
	for (int k = 0; k < 2; k++) { /* 256: several */
		t->added_one_first[k] = -1;
		for (int b = 0; b < 256; b++)
			if (t->added_first[k][b])
				t->added_one_first[k] = t->added_one_first[k] < 0 ? b : 256;
	}
	return FERRY_OK;
}

int ferry_tok_hf_token_id(const struct ferry_hf_tokenizer *t, const char *s)
{
	for (int i = 0; i < t->n_added; i++)
		if (!strcmp(t->added[i].content, s))
			return t->added[i].id;
	return ferry_tok_map_get(t->bpe.vocab, s, strlen(s));
}

/* tokenizer_config.json's bos_token / eos_token: a string or
 * {"content": ...}. */
static int config_token(const struct ferry_hf_tokenizer *t, json_t *cfg,
			const char *key)
{
	json_t *v = json_object_get(cfg, key);
	const char *s = json_is_object(v) ? hfj_str(v, "content") :
					    json_string_value(v);

	return s ? ferry_tok_hf_token_id(t, s) : -1;
}

static int first_known(const struct ferry_hf_tokenizer *t,
		       const char *const *names)
{
	for (; *names; names++) {
		int id = ferry_tok_hf_token_id(t, *names);

		if (id >= 0)
			return id;
	}
	return -1;
}

/* BOS and EOS: the config's, else the template's, else well-known names. */
static void find_bos_eos(struct ferry_hf_tokenizer *t, const char *config)
{
	static const char *const bos_names[] = { "<|begin_of_text|>", "<s>",
						 "<|endoftext|>", NULL };
	static const char *const eos_names[] = { "<|end_of_text|>", "</s>",
						 "<|endoftext|>", NULL };
	json_t *cfg = config ? json_load_file(config, 0, NULL) : NULL;

	t->bos = config_token(t, cfg, "bos_token");
	t->eos = config_token(t, cfg, "eos_token");
	json_decref(cfg);
	if (t->bos < 0 && t->n_post_before)
		t->bos = t->post_before[0];
	if (t->eos < 0 && t->n_post_after)
		t->eos = t->post_after[t->n_post_after - 1];
	if (t->bos < 0)
		t->bos = first_known(t, bos_names);
	if (t->eos < 0)
		t->eos = first_known(t, eos_names);
}

ferry_status ferry_tok_hf_load_json(struct ferry_hf_tokenizer *t, const char *path,
			      const char *config)
{
	json_error_t err;
	ferry_status st;
	json_t *root;

	t->path = ferry_strdup(path);
	if (!t->path)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	root = json_load_file(path, 0, &err);
	if (!root)
		return ferry_error(FERRY_ERR_FORMAT, "%s: line %d: %s", path,
				   err.line, err.text);
	if (!json_is_object(root)) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: not a tokenizer.json (the top level is not an object)",
				 path);
		goto out;
	}
	st = parse_model(&t->bpe, json_object_get(root, "model"), path);
	st = st ? st : parse_added(t, json_object_get(root, "added_tokens"), path);
	st = st ? st : index_ids(t, path);
	st = st ? st : ferry_tok_parse_steps(t, root, path);
	st = st ? st : match_forms(t, path);
	if (!st)
		find_bos_eos(t, config);
out:
	json_decref(root);
	return st;
}

void ferry_tok_hf_free(struct ferry_hf_tokenizer *t)
{
	ferry_tok_bpe_free(&t->bpe);
	for (int i = 0; t->added && i < t->n_added; i++) {
		ferry_free(t->added[i].content);
		free(t->added[i].match);
	}
	ferry_free(t->added);
	ferry_free(t->is_special);
	ferry_free(t->added_of_id);
	ferry_tok_free_steps(t);
	ferry_free(t->path);
	memset(t, 0, sizeof(*t));
}
