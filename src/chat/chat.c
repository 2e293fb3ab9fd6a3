/*
 * Chat templates (ferry/chat.h): where a tokenizer directory keeps its
 * template and special tokens, and the render's variables made from JSON.
 */
#include "chat/chat_impl.h"
#include "chat/chat_json.h"
#include "core/error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct ferry_chat {
	struct ctemplate t;
	json_t *specials; /* name -> string */
	char name[512];
	char dir[4096];   /* the tokenizer directory, "" for a bare source */
	char gen_config[4200];
};

static const char *const SPECIALS[] = {
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
	"cls_token", "mask_token", NULL
};

static ferry_status read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open", path);
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return ferry_error(FERRY_ERR_IO, "%s: cannot read", path);
	}
	*out = malloc((size_t)n + 1);
	if (!*out) {
		fclose(f);
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	}
	if (fread(*out, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(*out);
		return ferry_error(FERRY_ERR_IO, "%s: cannot read", path);
	}
	fclose(f);
	(*out)[n] = 0;
	*len = (size_t)n;
	return FERRY_OK;
}

/* The strings of tokenizer_config.json's special tokens. */
static json_t *specials_of(json_t *cfg)
{
	json_t *out = json_object();

	for (int i = 0; out && SPECIALS[i]; i++) {
		json_t *v = json_object_get(cfg, SPECIALS[i]);

		if (json_is_object(v))
			v = json_object_get(v, "content");
		if (json_is_string(v))
			json_object_set(out, SPECIALS[i], v);
	}
	return out;
}

ferry_status ferry_chat_open_source(const char *src, size_t n, const char *name,
				    const char *specials, ferry_chat_t *out)
{
	struct ferry_chat *c = calloc(1, sizeof(*c));
	ferry_status st;

	if (!c)
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "chat template");
	c->t.src = malloc(n + 1);
	if (!c->t.src) {
		free(c);
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	}
	memcpy(c->t.src, src, n);
	c->t.src[n] = 0;
	if (specials) {
		json_error_t err;
		json_t *cfg = json_loads(specials, 0, &err);

		c->specials = cfg ? specials_of(cfg) : NULL;
		json_decref(cfg);
	} else {
		c->specials = json_object();
	}
	st = c->specials ? FERRY_OK : ferry_error(FERRY_ERR_FORMAT, "%s: the special tokens are not a JSON object", c->name);
	if (!st)
		st = ferry_chat_lex(c->t.src, n, &c->t.toks);
	if (!st)
		st = ferry_chat_parse(&c->t);
	if (st) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", ferry_last_error());
		ferry_chat_free(c);
		return ferry_error(st, "%s: %s", name ? name : "chat template", msg);
	}
	*out = c;
	return FERRY_OK;
}

static bool exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

ferry_status ferry_chat_open(const char *path, ferry_chat_t *out)
{
	char dir[4096], cfg_path[4200], jinja[4200];
	struct stat sb;
	json_t *cfg = NULL, *tmpl;
	json_error_t err;
	char *src = NULL, *spec = NULL;
	size_t n = 0;
	ferry_status st;

	snprintf(dir, sizeof(dir), "%s", path);
	if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		char *slash = strrchr(dir, '/');

		if (slash)
			*slash = 0;
		else
			snprintf(dir, sizeof(dir), ".");
	}
	snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", dir);
	snprintf(jinja, sizeof(jinja), "%s/chat_template.jinja", dir);
	if (exists(cfg_path)) {
		cfg = json_load_file(cfg_path, 0, &err);
		if (!cfg)
			return ferry_error(FERRY_ERR_FORMAT, "%s:%d: %s", cfg_path, err.line, err.text);
	}
	if (exists(jinja)) {
		st = read_file(jinja, &src, &n);
		if (st) {
			json_decref(cfg);
			return st;
		}
	} else {
		tmpl = json_object_get(cfg, "chat_template");
		if (json_is_array(tmpl)) { /* named templates: the default */
			size_t i;
			json_t *v, *pick = NULL;

			json_array_foreach(tmpl, i, v)
				if (json_is_string(json_object_get(v, "name")) &&
				    !strcmp(json_string_value(json_object_get(v, "name")), "default"))
					pick = json_object_get(v, "template");
			tmpl = pick;
		}
		if (!json_is_string(tmpl)) {
			json_decref(cfg);
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json)",
					   dir);
		}
		n = json_string_length(tmpl);
		src = malloc(n + 1);
		if (src)
			memcpy(src, json_string_value(tmpl), n + 1);
	}
	spec = cfg ? json_dumps(cfg, 0) : NULL;
	json_decref(cfg);
	if (!src) {
		free(spec);
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	}
	st = ferry_chat_open_source(src, n, exists(jinja) ? jinja : cfg_path, spec, out);
	if (!st)
		snprintf((*out)->dir, sizeof((*out)->dir), "%s", dir);
	free(src);
	free(spec);
	return st;
}

void ferry_chat_free(ferry_chat_t c)
{
	if (!c)
		return;
	ferry_chat_tree_free(&c->t);
	ferry_chat_tokens_free(&c->t.toks);
	free(c->t.src);
	json_decref(c->specials);
	free(c);
}

const char *ferry_chat_special(ferry_chat_t c, const char *name)
{
	return c ? json_string_value(json_object_get(c->specials, name)) : NULL;
}

static ferry_status from_json(struct crender *r, json_t *j, cvalue *out)
{
	memset(out, 0, sizeof(*out));
	switch (json_typeof(j)) {
	case JSON_STRING:
		*out = ferry_chat_str(r, json_string_value(j), json_string_length(j));
		break;
	case JSON_INTEGER: out->kind = V_INT; out->i = json_integer_value(j); break;
	case JSON_REAL: out->kind = V_FLOAT; out->f = json_real_value(j); break;
	case JSON_TRUE: case JSON_FALSE: out->kind = V_BOOL; out->i = json_is_true(j); break;
	case JSON_NULL: out->kind = V_NONE; break;
	case JSON_ARRAY: {
		size_t i;
		json_t *v;

		*out = ferry_chat_new_list(r);
		json_array_foreach(j, i, v) {
			cvalue x;
			ferry_status st = from_json(r, v, &x);

			if (!st)
				st = ferry_chat_list_push(r, out->list, x);
			if (st)
				return st;
		}
		break;
	}
	case JSON_OBJECT: {
		const char *k;
		json_t *v;

		*out = ferry_chat_new_dict(r);
		json_object_foreach(j, k, v) {
			cvalue x;
			ferry_status st = from_json(r, v, &x);

			if (!st)
				st = ferry_chat_dict_set(r, out->dict, ferry_chat_str(r, k, strlen(k)), x);
			if (st)
				return st;
		}
		break;
	}
	}
	return FERRY_OK;
}

struct make_ctx {
	struct ferry_chat *c;
	json_t *messages;
	size_t n;
	bool gen;
};

static const char *const VARS[] = {
	"messages", "add_generation_prompt", "tools", "documents",
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
	"cls_token", "mask_token"
};

static ferry_status make_vars(struct crender *r, void *ctx, cvalue *vals)
{
	struct make_ctx *m = ctx;
	ferry_status st = FERRY_OK;

	vals[0] = ferry_chat_new_list(r);
	for (size_t i = 0; i < m->n && !st; i++) {
		cvalue x;

		st = from_json(r, json_array_get(m->messages, i), &x);
		if (!st)
			st = ferry_chat_list_push(r, vals[0].list, x);
	}
	vals[1].kind = V_BOOL;
	vals[1].i = m->gen;
	vals[2].kind = vals[3].kind = V_NONE;
	for (int k = 4; k < (int)(sizeof(VARS) / sizeof(VARS[0])); k++) {
		json_t *v = json_object_get(m->c->specials, VARS[k]);

		vals[k].kind = V_UNDEF;
		if (v)
			vals[k] = ferry_chat_str(r, json_string_value(v), json_string_length(v));
	}
	return st;
}

ferry_status ferry_chat_render_json(ferry_chat_t c, json_t *messages, size_t n, bool gen,
				    char **out, size_t *len)
{
	struct make_ctx m = { c, messages, n, gen };

	if (!json_is_array(messages))
		return ferry_error(FERRY_ERR_INVALID, "chat: messages must be a JSON array");
	if (n > json_array_size(messages))
		n = m.n = json_array_size(messages);
	return ferry_chat_eval(&c->t, VARS, (int)(sizeof(VARS) / sizeof(VARS[0])), make_vars, &m,
			       out, len);
}

ferry_status ferry_chat_render(ferry_chat_t c, const char *messages_json, long n_messages,
			       bool gen, char **out, size_t *len)
{
	json_error_t err;
	json_t *msgs = json_loads(messages_json, 0, &err);
	ferry_status st;

	if (!msgs)
		return ferry_error(FERRY_ERR_FORMAT, "chat: messages are not JSON (line %d: %s)", err.line,
				   err.text);
	st = ferry_chat_render_json(c, msgs, n_messages < 0 ? json_array_size(msgs) : (size_t)n_messages,
				    gen, out, len);
	json_decref(msgs);
	return st;
}

int ferry_chat_stop_ids(ferry_chat_t c, ferry_tokenizer_t tok, int32_t *ids, int cap,
			const char **from)
{
	const char *eos = ferry_chat_special(c, "eos_token");
	json_t *gen = NULL, *v;
	int n = 0;

	*from = NULL;
	if (*c->dir) {
		snprintf(c->gen_config, sizeof(c->gen_config), "%s/generation_config.json", c->dir);
		if (exists(c->gen_config))
			gen = json_load_file(c->gen_config, 0, NULL);
	}
	v = json_object_get(gen, "eos_token_id");
	if (json_is_integer(v) && cap > 0) {
		ids[n++] = (int32_t)json_integer_value(v);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;

		json_array_foreach(v, i, x)
			if (json_is_integer(x) && n < cap)
				ids[n++] = (int32_t)json_integer_value(x);
	}
	json_decref(gen);
	if (n) {
		*from = c->gen_config;
		return n;
	}
	if (eos && cap > 0 && ferry_tokenizer_token_id(tok, eos) >= 0) {
		ids[n++] = ferry_tokenizer_token_id(tok, eos);
		*from = "tokenizer_config.json's eos_token";
	}
	return n;
}
