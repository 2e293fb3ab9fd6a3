/*
 * Reading the steps of a tokenizer.json around its model: normalizer,
 * pre_tokenizer, decoder and post_processor, each one object or a
 * "Sequence" of them, flattened here into one list per kind.  Types ferry
 * does not implement are refused by name, with the ones it does.
 */
#include "tokenizer/hf_json.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

#define METASPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static ferry_status too_many(const char *path, const char *what)
{
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: more than %d %s steps",
			   path, TOK_MAX_STEPS, what);
}

static ferry_status no_mem(const char *path)
{
	return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
}

/* ferry_tok_compile_regex with the file named in its error. */
static ferry_status compile(const char *pat, bool literal, void **re,
			    const char *path)
{
	ferry_status st = ferry_tok_compile_regex(pat, strlen(pat), literal, re);
	char msg[512];

	if (!st)
		return FERRY_OK;
	snprintf(msg, sizeof(msg), "%s", ferry_last_error());
	return ferry_error(st, "%s: %s", path, msg);
}

/* {"String": s} or {"Regex": r}: *s the text, *regex whether a regex. */
static ferry_status pattern_of(json_t *o, const char *where, const char *path,
			       const char **s, bool *regex)
{
	json_t *p = json_object_get(o, "pattern");

	*s = hfj_str(p, "String");
	*regex = !*s;
	if (!*s)
		*s = hfj_str(p, "Regex");
	if (!*s)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s: \"pattern\" needs a \"String\" or a \"Regex\"",
				   path, where);
	return FERRY_OK;
}

/* Where s stands in names[0..n), or n when s is NULL or not there. */
static size_t index_of(const char *s, const char *const *names, size_t n)
{
	size_t i;

	for (i = 0; s && i < n; i++)
		if (!strcmp(s, names[i]))
			break;
	return s ? i : n;
}

typedef ferry_status (*step_parser)(struct ferry_hf_tokenizer *t, json_t *o,
				    const char *path);

/* A "Sequence"'s list of steps, each read by parse; the first error stops. */
static ferry_status parse_each(struct ferry_hf_tokenizer *t, json_t *list,
			       step_parser parse, const char *path)
{
	size_t i;
	json_t *e;

	json_array_foreach(list, i, e) {
		ferry_status st = parse(t, e, path);

		if (st)
			return st;
	}
	return FERRY_OK;
}

static ferry_status parse_norm(struct ferry_hf_tokenizer *t, json_t *o,
			       const char *path)
{
	static const char *const plain[] = { "NFC", "NFD", "NFKC", "NFKD",
					     "Prepend", "Replace", "Lowercase" };
	const char *type = hfj_str(o, "type"), *pat;
	struct tok_norm *nm;
	bool regex;
	size_t i;

	if (!o || json_is_null(o))
		return FERRY_OK;
	if (type && !strcmp(type, "Sequence"))
		return parse_each(t, json_object_get(o, "normalizers"), parse_norm, path);
	i = index_of(type, plain, N_OF(plain));
	if (i == N_OF(plain))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: normalizer %.40s is not supported (ferry reads Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace)",
				   path, type ? type : "without a type");
	if (t->n_norm == TOK_MAX_STEPS)
		return too_many(path, "normalizer");
	nm = &t->norm[t->n_norm++];
	nm->kind = (enum tok_norm_kind)i;
	if (nm->kind == NORM_PREPEND) {
		nm->content = ferry_strdup(hfj_str(o, "prepend") ? hfj_str(o, "prepend") : "");
		return nm->content ? FERRY_OK : no_mem(path);
	}
	if (nm->kind != NORM_REPLACE)
		return FERRY_OK;
	if (pattern_of(o, "normalizer Replace", path, &pat, &regex))
		return FERRY_ERR_FORMAT;
	nm->pattern = ferry_strdup(pat);
	nm->content = ferry_strdup(hfj_str(o, "content") ? hfj_str(o, "content") : "");
	if (!nm->pattern || !nm->content)
		return no_mem(path);
	return regex ? compile(pat, false, &nm->regex, path) : FERRY_OK;
}

static ferry_status parse_split(struct tok_pre *p, json_t *o, const char *path)
{
	static const char *const how[] = { "Removed", "Isolated",
					   "MergedWithPrevious",
					   "MergedWithNext", "Contiguous" };
	const char *b = hfj_str(o, "behavior"), *pat;
	bool regex;
	size_t i;

	if (pattern_of(o, "pre_tokenizer Split", path, &pat, &regex))
		return FERRY_ERR_FORMAT;
	i = index_of(b, how, N_OF(how));
	if (i == N_OF(how))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: pre_tokenizer Split: behavior %.40s is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
				   path, b ? b : "(missing)");
	p->behavior = (enum tok_split_behavior)i;
	p->invert = hfj_bool(o, "invert", false);
	p->pattern = ferry_strdup(pat);
	return p->pattern ? compile(pat, !regex, &p->regex, path) : no_mem(path);
}

/* Metaspace's prepend_scheme, or the older add_prefix_space: 0 never,
 * 1 first, 2 always. */
static int prepend_scheme(json_t *o)
{
	const char *s = hfj_str(o, "prepend_scheme");

	if (s)
		return !strcmp(s, "never") ? 0 : !strcmp(s, "first") ? 1 : 2;
	return hfj_bool(o, "add_prefix_space", true) ? 2 : 0;
}

static ferry_status parse_pre_one(struct ferry_hf_tokenizer *t,
				  struct tok_pre *p, const char *type,
				  json_t *o, const char *path)
{
	const char *rep = hfj_str(o, "replacement");

	if (!strcmp(type, "Split")) {
		p->kind = PRE_SPLIT;
		return parse_split(p, o, path);
	}
	if (!strcmp(type, "Digits")) {
		p->kind = PRE_DIGITS;
		p->behavior = hfj_bool(o, "individual_digits", false) ?
				      SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
		p->pattern = ferry_strdup("\\p{N}");
		return p->pattern ? compile(p->pattern, false, &p->regex, path) : no_mem(path);
	}
	if (!strcmp(type, "ByteLevel")) {
		/* each one maps every byte to up to two: 16 in a row grow text
		 * 65536-fold, and no trained tokenizer has two */
		if (t->byte_level)
			return ferry_error(FERRY_ERR_UNSUPPORTED,
					   "%s: pre_tokenizer: more than one ByteLevel step (each maps the bytes the one before made; ferry reads one)",
					   path);
		p->kind = PRE_BYTELEVEL;
		p->add_prefix_space = hfj_bool(o, "add_prefix_space", true);
		t->byte_level = true;
		for (int b = 0; b < 256; b++)
			t->byte_map[b][2] = (unsigned char)ferry_tok_byte_char(
				(unsigned char)b, (char *)t->byte_map[b]);
		if (!hfj_bool(o, "use_regex", true))
			return FERRY_OK;
		p->pattern = ferry_strdup(ferry_tok_gpt2_pattern);
		return p->pattern ? compile(p->pattern, false, &p->regex, path) : no_mem(path);
	}
	p->kind = PRE_METASPACE;
	p->replacement = ferry_strdup(rep ? rep : METASPACE);
	p->prepend = prepend_scheme(o);
	p->split = hfj_bool(o, "split", true);
	return p->replacement ? FERRY_OK : no_mem(path);
}

static ferry_status parse_pre(struct ferry_hf_tokenizer *t, json_t *o,
			      const char *path)
{
	const char *type = hfj_str(o, "type");

	if (!o || json_is_null(o))
		return FERRY_OK;
	if (type && !strcmp(type, "Sequence"))
		return parse_each(t, json_object_get(o, "pretokenizers"), parse_pre, path);
	if (!type || (strcmp(type, "Split") && strcmp(type, "ByteLevel") &&
		      strcmp(type, "Metaspace") && strcmp(type, "Digits")))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: pre_tokenizer %.40s is not supported (ferry reads Sequence, Split, ByteLevel, Metaspace, Digits)",
				   path, type ? type : "without a type");
	if (t->n_pre == TOK_MAX_STEPS)
		return too_many(path, "pre_tokenizer");
	return parse_pre_one(t, &t->pre[t->n_pre++], type, o, path);
}

static ferry_status parse_dec_one(struct tok_dec *d, const char *type,
				  json_t *o, const char *path)
{
	const char *pat, *rep = hfj_str(o, "replacement");
	bool regex;

	if (!strcmp(type, "Replace")) {
		d->kind = DEC_REPLACE;
		if (pattern_of(o, "decoder Replace", path, &pat, &regex))
			return FERRY_ERR_FORMAT;
		if (regex)
			return ferry_error(FERRY_ERR_UNSUPPORTED,
					   "%s: decoder Replace with a Regex pattern is not supported",
					   path);
		d->pattern = ferry_strdup(pat);
		d->content = ferry_strdup(hfj_str(o, "content") ? hfj_str(o, "content") : "");
	} else if (!strcmp(type, "Strip")) {
		d->kind = DEC_STRIP;
		d->content = ferry_strdup(hfj_str(o, "content") ? hfj_str(o, "content") : " ");
		d->start = (int)json_integer_value(json_object_get(o, "start"));
		d->stop = (int)json_integer_value(json_object_get(o, "stop"));
		d->pattern = ferry_strdup("");
	} else if (!strcmp(type, "Metaspace")) {
		d->kind = DEC_METASPACE;
		d->pattern = ferry_strdup(rep ? rep : METASPACE);
		d->content = ferry_strdup(" ");
		d->start = prepend_scheme(o) != 0;
	} else {
		d->kind = !strcmp(type, "ByteLevel") ? DEC_BYTELEVEL :
			  !strcmp(type, "Fuse") ? DEC_FUSE : DEC_BYTEFALLBACK;
		return FERRY_OK;
	}
	return d->pattern && d->content ? FERRY_OK : no_mem(path);
}

static ferry_status parse_dec(struct ferry_hf_tokenizer *t, json_t *o,
			      const char *path)
{
	static const char *const known[] = { "ByteLevel", "Replace", "ByteFallback",
					     "Fuse", "Strip", "Metaspace" };
	const char *type = hfj_str(o, "type");

	if (!o || json_is_null(o))
		return FERRY_OK;
	if (type && !strcmp(type, "Sequence"))
		return parse_each(t, json_object_get(o, "decoders"), parse_dec, path);
	if (index_of(type, known, N_OF(known)) == N_OF(known))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "%s: decoder %.40s is not supported (ferry reads Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)",
				   path, type ? type : "without a type");
	if (t->n_dec == TOK_MAX_STEPS)
		return too_many(path, "decoder");
	return parse_dec_one(&t->dec[t->n_dec++], type, o, path);
}

static ferry_status post_push(struct ferry_hf_tokenizer *t, bool after,
			      json_int_t id, const char *path)
{
	int *n = after ? &t->n_post_after : &t->n_post_before;

	if (id < 0 || id >= t->n_ids)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: post_processor: token id %lld is not in the vocabulary",
				   path, (long long)id);
	if (*n == TOK_MAX_STEPS)
		return too_many(path, "post_processor token");
	(after ? t->post_after : t->post_before)[(*n)++] = (int)id;
	return FERRY_OK;
}

/* TemplateProcessing's single template: special tokens before and after
 * the sequence $A. */
static ferry_status parse_template(struct ferry_hf_tokenizer *t, json_t *o,
				   const char *path)
{
	json_t *single = json_object_get(o, "single"), *item, *id;
	json_t *specials = json_object_get(o, "special_tokens");
	ferry_status st = FERRY_OK;
	bool after = false;
	size_t i, k;

	if (!json_is_array(single))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: post_processor TemplateProcessing has no \"single\" list",
				   path);
	json_array_foreach(single, i, item) {
		json_t *sp = json_object_get(item, "SpecialToken");
		const char *name = hfj_str(sp, "id");
		json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");

		if (json_object_get(item, "Sequence")) {
			after = true;
			continue;
		}
		if (!name || !json_is_array(ids))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: post_processor: single[%zu] names no special token with ids",
					   path, i);
		json_array_foreach(ids, k, id) {
			st = post_push(t, after, json_integer_value(id), path);
			if (st)
				return st;
		}
	}
	return st;
}

static ferry_status parse_post(struct ferry_hf_tokenizer *t, json_t *o,
			       const char *path)
{
	const char *type = hfj_str(o, "type");
	ferry_status st;

	if (!o || json_is_null(o) || (type && !strcmp(type, "ByteLevel")))
		return FERRY_OK; /* ByteLevel's only trims offsets */
	if (type && !strcmp(type, "Sequence"))
		return parse_each(t, json_object_get(o, "processors"), parse_post, path);
	if (type && !strcmp(type, "TemplateProcessing"))
		return parse_template(t, o, path);
	if (type && (!strcmp(type, "RobertaProcessing") ||
		     !strcmp(type, "BertProcessing"))) {
		st = post_push(t, false, json_integer_value(json_array_get(
					      json_object_get(o, "cls"), 1)), path);
		return st ? st : post_push(t, true, json_integer_value(json_array_get(
					   json_object_get(o, "sep"), 1)), path);
	}
	return ferry_error(FERRY_ERR_UNSUPPORTED,
			   "%s: post_processor %.40s is not supported (ferry reads Sequence, TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing)",
			   path, type ? type : "without a type");
}

ferry_status ferry_tok_parse_steps(struct ferry_hf_tokenizer *t, json_t *root,
			     const char *path)
{
	ferry_status st;

	st = parse_norm(t, json_object_get(root, "normalizer"), path);
	st = st ? st : parse_pre(t, json_object_get(root, "pre_tokenizer"), path);
	st = st ? st : parse_dec(t, json_object_get(root, "decoder"), path);
	return st ? st : parse_post(t, json_object_get(root, "post_processor"), path);
}

void ferry_tok_free_steps(struct ferry_hf_tokenizer *t)
{
	for (int i = 0; i < t->n_norm; i++) {
		ferry_free(t->norm[i].pattern);
		ferry_free(t->norm[i].content);
		ferry_tok_free_regex(t->norm[i].regex);
	}
	for (int i = 0; i < t->n_pre; i++) {
		ferry_tok_free_regex(t->pre[i].regex);
		ferry_free(t->pre[i].pattern);
		ferry_free(t->pre[i].replacement);
	}
	for (int i = 0; i < t->n_dec; i++) {
		ferry_free(t->dec[i].pattern);
		ferry_free(t->dec[i].content);
	}
	t->n_norm = t->n_pre = t->n_dec = 0;
}
