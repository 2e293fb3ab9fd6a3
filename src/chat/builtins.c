/*
 * Chat-template filters, tests, global functions and the string and
 * mapping methods chat templates call, with Python's and Jinja's meaning.
 * Case mapping and whitespace are Unicode's (utf8proc), one code point at
 * a time (no special casing such as ß -> SS).
 */
#include "chat/chat_impl.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define NOMEM ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory")
#define TRY(x) do { ferry_status st_ = (x); if (st_) return st_; } while (0)

enum func {
	F_NONE, F_RAISE, F_NAMESPACE, F_RANGE, F_STRFTIME, F_DICT,
	/* string methods */
	M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_REPLACE,
	M_LOWER, M_UPPER, M_TITLE, M_CAPITALIZE, M_FIND, M_COUNT, M_JOIN,
	/* mapping methods */
	M_ITEMS, M_GET, M_KEYS, M_VALUES
};

static const struct { const char *name; int f; bool str; } METHODS[] = {
	{ "startswith", M_STARTSWITH, true }, { "endswith", M_ENDSWITH, true },
	{ "strip", M_STRIP, true }, { "lstrip", M_LSTRIP, true }, { "rstrip", M_RSTRIP, true },
	{ "split", M_SPLIT, true }, { "replace", M_REPLACE, true }, { "lower", M_LOWER, true },
	{ "upper", M_UPPER, true }, { "title", M_TITLE, true }, { "capitalize", M_CAPITALIZE, true },
	{ "find", M_FIND, true }, { "count", M_COUNT, true }, { "join", M_JOIN, true },
	{ "items", M_ITEMS, false }, { "get", M_GET, false }, { "keys", M_KEYS, false },
	{ "values", M_VALUES, false },
};

static bool name_is(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && !memcmp(s, name, n);
}

static bool in_names(const char *s, size_t n, const char *const *names)
{
	for (; *names; names++)
		if (name_is(s, n, *names))
			return true;
	return false;
}

static const char *const FILTERS[] = {
	"trim", "tojson", "length", "count", "upper", "lower", "capitalize", "title",
	"string", "join", "default", "d", "items", "first", "last", "selectattr",
	"rejectattr", "select", "reject", "map", "list", "reverse", "replace", "int", "float", "abs",
	"safe", NULL
};

static const char *const TESTS[] = {
	"defined", "undefined", "none", "string", "mapping", "iterable", "sequence",
	"number", "integer", "float", "boolean", "true", "false", "equalto", "eq",
	"ne", "odd", "even", "divisibleby", "in", NULL
};

bool ferry_chat_known_filter(const char *name, size_t n)
{
	return in_names(name, n, FILTERS);
}

bool ferry_chat_known_test(const char *name, size_t n)
{
	return in_names(name, n, TESTS);
}

cvalue ferry_chat_method(const cvalue *obj, const char *name, size_t n)
{
	cvalue v = { .kind = V_UNDEF };

	if (obj->kind != V_STR && (obj->kind != V_DICT || obj->ns))
		return v;
	for (size_t i = 0; i < sizeof(METHODS) / sizeof(METHODS[0]); i++)
		if (METHODS[i].str == (obj->kind == V_STR) && name_is(name, n, METHODS[i].name)) {
			v.kind = V_FUNC;
			v.func = METHODS[i].f;
			v.self = obj;
			break;
		}
	return v;
}

cvalue ferry_chat_global(const char *name, size_t n)
{
	static const struct { const char *name; int f; } G[] = {
		{ "raise_exception", F_RAISE }, { "namespace", F_NAMESPACE },
		{ "range", F_RANGE }, { "strftime_now", F_STRFTIME }, { "dict", F_DICT },
	};
	cvalue v = { .kind = V_UNDEF };

	for (size_t i = 0; i < sizeof(G) / sizeof(G[0]); i++)
		if (name_is(name, n, G[i].name)) {
			v.kind = V_FUNC;
			v.func = G[i].f;
		}
	return v;
}

/* ---- strings ---- */

static bool py_space(int32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f);
	return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
	       c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
					      (utf8proc_ssize_t)(n - i), &c);

	*len = l > 0 ? (size_t)l : 1;
	return l > 0 ? c : (unsigned char)s[i];
}

static bool in_chars(int32_t c, const cvalue *chars)
{
	if (!chars || chars->kind != V_STR)
		return py_space(c);
	for (size_t i = 0, l; i < chars->n; i += l)
		if (cp_at(chars->s, chars->n, i, &l) == c)
			return true;
	return false;
}

static cvalue strip(const cvalue *s, const cvalue *chars, bool left, bool right)
{
	size_t a = 0, b = s->n, l;
	cvalue v = *s;

	while (left && a < b && in_chars(cp_at(s->s, s->n, a, &l), chars))
		a += l;
	while (right && b > a) {
		size_t k = b - 1;

		while (k > a && ((unsigned char)s->s[k] & 0xC0) == 0x80)
			k--;
		if (!in_chars(cp_at(s->s, s->n, k, &l), chars))
			break;
		b = k;
	}
	v.s = s->s + a;
	v.n = b - a;
	return v;
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python's title, 'j'
 * Jinja's title filter (words start after spaces, '-', brackets). */
static ferry_status recase(struct crender *r, const cvalue *s, char mode, cvalue *out)
{
	char *o = ferry_chat_alloc(r, 4 * s->n + 1);
	size_t k = 0, l;
	bool start = true;

	if (!o)
		return NOMEM;
	for (size_t i = 0; i < s->n; i += l) {
		int32_t c = cp_at(s->s, s->n, i, &l), m;
		const utf8proc_property_t *pr = utf8proc_get_property(c);
		bool cased = pr->category == UTF8PROC_CATEGORY_LU || pr->category == UTF8PROC_CATEGORY_LL ||
			     pr->category == UTF8PROC_CATEGORY_LT;

		switch (mode) {
		case 'u': m = utf8proc_toupper(c); break;
		case 'l': m = utf8proc_tolower(c); break;
		case 'c': m = i == 0 ? utf8proc_toupper(c) : utf8proc_tolower(c); break;
		case 't':
			m = start ? utf8proc_toupper(c) : utf8proc_tolower(c);
			start = !cased;
			break;
		default:
			m = start ? utf8proc_toupper(c) : utf8proc_tolower(c);
			start = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
		}
		k += (size_t)utf8proc_encode_char(m, (utf8proc_uint8_t *)o + k);
	}
	*out = ferry_chat_cstr("");
	out->s = o;
	out->n = k;
	return FERRY_OK;
}

static ferry_status replace(struct crender *r, const cvalue *s, const cvalue *old,
			    const cvalue *new_, long long count, cvalue *out)
{
	size_t cap = s->n + 1, k = 0;
	char *o;

	if (old->n == 0) /* Python inserts between characters; rare in templates */
		return ferry_error(FERRY_ERR_UNSUPPORTED, "chat template: replace of an empty string");
	for (size_t i = 0; i + old->n <= s->n; i++)
		if (!memcmp(s->s + i, old->s, old->n))
			cap += new_->n;
	o = ferry_chat_alloc(r, cap);
	if (!o)
		return NOMEM;
	for (size_t i = 0; i < s->n;) {
		if (count != 0 && i + old->n <= s->n && !memcmp(s->s + i, old->s, old->n)) {
			memcpy(o + k, new_->s, new_->n);
			k += new_->n;
			i += old->n;
			count--;
		} else {
			o[k++] = s->s[i++];
		}
	}
	*out = ferry_chat_cstr("");
	out->s = o;
	out->n = k;
	return FERRY_OK;
}

static ferry_status split(struct crender *r, const cvalue *s, const cvalue *sep,
			  long long maxsplit, cvalue *out)
{
	size_t i = 0, l;

	*out = ferry_chat_new_list(r);
	if (!out->list)
		return NOMEM;
	if (sep && sep->kind == V_STR) {
		if (!sep->n)
			return ferry_error(FERRY_ERR_INVALID, "chat template: split with an empty separator");
		for (;;) {
			const char *hit = maxsplit != 0 ? memmem(s->s + i, s->n - i, sep->s, sep->n) : NULL;
			size_t e = hit ? (size_t)(hit - s->s) : s->n;

			TRY(ferry_chat_list_push(r, out->list, ferry_chat_str(r, s->s + i, e - i)));
			if (!hit)
				return FERRY_OK;
			i = e + sep->n;
			maxsplit--;
		}
	}
	for (;;) { /* runs of whitespace */
		while (i < s->n && py_space(cp_at(s->s, s->n, i, &l)))
			i += l;
		if (i >= s->n)
			return FERRY_OK;
		size_t a = i;

		if (maxsplit == 0) {
			cvalue rest = strip(&(cvalue){ .kind = V_STR, .s = s->s + a, .n = s->n - a },
					    NULL, false, true);

			return ferry_chat_list_push(r, out->list, ferry_chat_str(r, rest.s, rest.n));
		}
		while (i < s->n && !py_space(cp_at(s->s, s->n, i, &l)))
			i += l;
		TRY(ferry_chat_list_push(r, out->list, ferry_chat_str(r, s->s + a, i - a)));
		maxsplit--;
	}
}

static bool starts(const cvalue *s, const cvalue *p, bool end)
{
	if (p->kind == V_LIST) {
		for (size_t i = 0; i < p->list->n; i++)
			if (starts(s, &p->list->v[i], end))
				return true;
		return false;
	}
	if (p->kind != V_STR || p->n > s->n)
		return false;
	return !memcmp(end ? s->s + s->n - p->n : s->s, p->s, p->n);
}

static ferry_status join(struct crender *r, const cvalue *items, const cvalue *sep,
			 const cvalue *attr, cvalue *out)
{
	size_t tot = 0, k = 0;
	cvalue *parts;
	size_t n;

	if (items->kind != V_LIST)
		return ferry_error(FERRY_ERR_INVALID, "chat template: join of something that is not a list");
	n = items->list->n;
	parts = ferry_chat_alloc(r, (n + 1) * sizeof(*parts));
	if (!parts)
		return NOMEM;
	for (size_t i = 0; i < n; i++) {
		cvalue v = items->list->v[i];

		if (attr && attr->kind == V_STR && v.kind == V_DICT) {
			const cvalue *a = ferry_chat_dict_get(v.dict, attr->s, attr->n);

			v.kind = V_UNDEF;
			if (a)
				v = *a;
		}
		TRY(ferry_chat_to_str(r, &v, &parts[i]));
		tot += parts[i].n + (i ? sep->n : 0);
	}
	char *o = ferry_chat_alloc(r, tot + 1);

	if (!o)
		return NOMEM;
	for (size_t i = 0; i < n; i++) {
		if (i) {
			memcpy(o + k, sep->s, sep->n);
			k += sep->n;
		}
		memcpy(o + k, parts[i].s, parts[i].n);
		k += parts[i].n;
	}
	*out = ferry_chat_cstr("");
	out->s = o;
	out->n = k;
	return FERRY_OK;
}

static ferry_status items_of(struct crender *r, const cvalue *d, int which, cvalue *out)
{
	*out = ferry_chat_new_list(r);
	if (!out->list)
		return NOMEM;
	for (size_t i = 0; d->kind == V_DICT && i < d->dict->n; i++) {
		cvalue v = which == 1 ? d->dict->key[i] : d->dict->val[i];

		if (which == 0) {
			v = ferry_chat_new_list(r);
			TRY(ferry_chat_list_push(r, v.list, d->dict->key[i]));
			TRY(ferry_chat_list_push(r, v.list, d->dict->val[i]));
		}
		TRY(ferry_chat_list_push(r, out->list, v));
	}
	return FERRY_OK;
}

static const cvalue *kwarg(const char *const *kw, const cvalue *kwv, int n_kw, const char *name)
{
	for (int k = 0; k < n_kw; k++)
		if (!strcmp(kw[k], name))
			return &kwv[k];
	return NULL;
}

/* The i-th positional argument, else the keyword, else NULL. */
static const cvalue *arg(const cvalue *args, int n_args, int i, const char *const *kw,
			 const cvalue *kwv, int n_kw, const char *name)
{
	return i < n_args ? &args[i] : kwarg(kw, kwv, n_kw, name);
}

#define ARG(i, name) arg(args, n_args, i, kw, kwv, n_kw, name)

static ferry_status need_str(struct crender *r, int line, const cvalue *v, const char *what)
{
	if (!v || v->kind != V_STR)
		return ferry_chat_fail(r, line, "%s needs a string", what);
	return FERRY_OK;
}

static ferry_status call_method(struct crender *r, int line, const cvalue *fn,
				const cvalue *args, int n_args, const char *const *kw,
				const cvalue *kwv, int n_kw, cvalue *out)
{
	const cvalue *self = fn->self, *a0 = ARG(0, "x"), *a1 = ARG(1, "y");
	long long cnt = -1;

	switch (fn->func) {
	case M_STARTSWITH: case M_ENDSWITH:
		if (!a0)
			return ferry_chat_fail(r, line, "startswith/endswith needs an argument");
		out->kind = V_BOOL;
		out->i = starts(self, a0, fn->func == M_ENDSWITH);
		return FERRY_OK;
	case M_STRIP: case M_LSTRIP: case M_RSTRIP:
		*out = strip(self, a0 && a0->kind == V_STR ? a0 : NULL, fn->func != M_RSTRIP,
			     fn->func != M_LSTRIP);
		return FERRY_OK;
	case M_SPLIT:
		a0 = ARG(0, "sep");
		a1 = ARG(1, "maxsplit");
		return split(r, self, a0 && a0->kind == V_STR ? a0 : NULL,
			     a1 && a1->kind == V_INT ? a1->i : -1, out);
	case M_REPLACE:
		TRY(need_str(r, line, a0, "replace"));
		TRY(need_str(r, line, a1, "replace"));
		if (n_args > 2 && args[2].kind == V_INT)
			cnt = args[2].i;
		return replace(r, self, a0, a1, cnt, out);
	case M_LOWER: return recase(r, self, 'l', out);
	case M_UPPER: return recase(r, self, 'u', out);
	case M_TITLE: return recase(r, self, 't', out);
	case M_CAPITALIZE: return recase(r, self, 'c', out);
	case M_FIND: case M_COUNT: {
		long long found = -1, count = 0;

		TRY(need_str(r, line, a0, "find/count"));
		for (size_t i = 0; a0->n && i + a0->n <= self->n; i++)
			if (!memcmp(self->s + i, a0->s, a0->n)) {
				if (found < 0)
					found = (long long)ferry_chat_utf8_len(self->s, i);
				count++;
				i += a0->n - 1;
			}
		out->kind = V_INT;
		out->i = fn->func == M_FIND ? found : count;
		return FERRY_OK;
	}
	case M_JOIN:
		if (!a0)
			return ferry_chat_fail(r, line, "join needs a list");
		return join(r, a0, self, NULL, out);
	case M_ITEMS: return items_of(r, self, 0, out);
	case M_KEYS: return items_of(r, self, 1, out);
	case M_VALUES: return items_of(r, self, 2, out);
	case M_GET: {
		const cvalue *v = a0 && a0->kind == V_STR ? ferry_chat_dict_get(self->dict, a0->s, a0->n) : NULL;

		if (v)
			*out = *v;
		else if (a1)
			*out = *a1;
		else
			out->kind = V_NONE;
		return FERRY_OK;
	}
	}
	return ferry_chat_fail(r, line, "an unknown method");
}

ferry_status ferry_chat_call(struct crender *r, int line, const cvalue *fn, const cvalue *args,
			     int n_args, const char *const *kw, const cvalue *kwv, int n_kw,
			     cvalue *out)
{
	memset(out, 0, sizeof(*out));
	switch (fn->func) {
	case F_RAISE: {
		cvalue msg = { .kind = V_STR, .s = "", .n = 0 };

		if (n_args)
			TRY(ferry_chat_to_str(r, &args[0], &msg));
		return ferry_error(FERRY_ERR_INVALID, "chat template line %d: raise_exception: %.*s",
				   line, (int)msg.n, msg.s);
	}
	case F_NAMESPACE: case F_DICT:
		*out = ferry_chat_new_dict(r);
		if (!out->dict)
			return NOMEM;
		out->ns = fn->func == F_NAMESPACE;
		for (int k = 0; k < n_args; k++)
			for (size_t i = 0; args[k].kind == V_DICT && i < args[k].dict->n; i++)
				TRY(ferry_chat_dict_set(r, out->dict, args[k].dict->key[i], args[k].dict->val[i]));
		for (int k = 0; k < n_kw; k++)
			TRY(ferry_chat_dict_set(r, out->dict, ferry_chat_cstr(kw[k]), kwv[k]));
		return FERRY_OK;
	case F_RANGE: {
		long long a = 0, b = 0, step = 1;

		for (int k = 0; k < n_args; k++)
			if (args[k].kind != V_INT)
				return ferry_chat_fail(r, line, "range needs integers");
		if (n_args == 1)
			b = args[0].i;
		else if (n_args >= 2) {
			a = args[0].i;
			b = args[1].i;
			if (n_args > 2)
				step = args[2].i;
		}
		if (!step)
			return ferry_chat_fail(r, line, "range step cannot be zero");
		*out = ferry_chat_new_list(r);
		for (long long i = a; step > 0 ? i < b : i > b; i += step)
			TRY(ferry_chat_list_push(r, out->list, (cvalue){ .kind = V_INT, .i = i }));
		return out->list ? FERRY_OK : NOMEM;
	}
	case F_STRFTIME: {
		char buf[256];
		time_t now = time(NULL);
		struct tm tm;
		char fmt[128];

		TRY(need_str(r, line, n_args ? &args[0] : NULL, "strftime_now"));
		snprintf(fmt, sizeof(fmt), "%.*s", (int)args[0].n, args[0].s);
		localtime_r(&now, &tm);
		size_t n = strftime(buf, sizeof(buf), fmt, &tm);

		*out = ferry_chat_str(r, buf, n);
		return FERRY_OK;
	}
	}
	return call_method(r, line, fn, args, n_args, kw, kwv, n_kw, out);
}

/* ---- filters ---- */

/* select/reject (attr false: the items themselves pass the test) and
 * selectattr/rejectattr (attr: the items' attribute args[0] does). */
static ferry_status select_items(struct crender *r, const struct cnode_s *node, const cvalue *in,
				 const cvalue *args, int n_args, bool attr, bool reject, cvalue *out)
{
	int t = attr ? 1 : 0;

	*out = ferry_chat_new_list(r);
	if (!out->list)
		return NOMEM;
	if (in->kind != V_LIST || (attr && (n_args < 1 || args[0].kind != V_STR)))
		return ferry_chat_fail(r, node->line, "select/reject need a list%s",
				       attr ? " and an attribute name" : "");
	for (size_t i = 0; i < in->list->n; i++) {
		const cvalue *item = &in->list->v[i];
		const cvalue *a = !attr ? item : item->kind == V_DICT ?
			ferry_chat_dict_get(item->dict, args[0].s, args[0].n) : NULL;
		cvalue v = { .kind = V_UNDEF };
		bool keep;

		if (a)
			v = *a;
		if (n_args > t) {
			struct cnode_s test = *node;

			if (args[t].kind != V_STR || !ferry_chat_known_test(args[t].s, args[t].n))
				return ferry_chat_fail(r, node->line, "select/reject: a test outside the subset");
			test.s = args[t].s;
			test.sn = args[t].n;
			TRY(ferry_chat_test(r, &test, v, args + t + 1, n_args - t - 1, &keep));
		} else {
			keep = ferry_chat_truthy(&v);
		}
		if (keep != reject)
			TRY(ferry_chat_list_push(r, out->list, *item));
	}
	return FERRY_OK;
}

static ferry_status seq_of(struct crender *r, const cvalue *in, cvalue *out)
{
	if (in->kind == V_LIST) {
		*out = *in;
		return FERRY_OK;
	}
	*out = ferry_chat_new_list(r);
	if (!out->list)
		return NOMEM;
	if (in->kind == V_DICT)
		return items_of(r, in, 1, out);
	if (in->kind == V_STR)
		for (size_t i = 0, l; i < in->n; i += l) {
			cp_at(in->s, in->n, i, &l);
			TRY(ferry_chat_list_push(r, out->list, ferry_chat_str(r, in->s + i, l)));
		}
	return FERRY_OK;
}

static ferry_status filter_seq(struct crender *r, const struct cnode_s *node, cvalue in,
			       const cvalue *args, int n_args, const char *const *kw,
			       const cvalue *kwv, int n_kw, cvalue *out);
static ferry_status filter_str(struct crender *r, const struct cnode_s *node, cvalue in,
			       const cvalue *args, int n_args, const char *const *kw,
			       const cvalue *kwv, int n_kw, cvalue *out);

ferry_status ferry_chat_filter(struct crender *r, const struct cnode_s *node, cvalue in,
			       const cvalue *args, int n_args, const char *const *kw,
			       const cvalue *kwv, int n_kw, cvalue *out)
{
	const char *f = node->s;
	size_t fn = node->sn;

	memset(out, 0, sizeof(*out));
	if (name_is(f, fn, "safe") || name_is(f, fn, "string")) {
		if (name_is(f, fn, "string"))
			return ferry_chat_to_str(r, &in, out);
		*out = in;
		return FERRY_OK;
	}
	if (name_is(f, fn, "default") || name_is(f, fn, "d")) {
		const cvalue *def = ARG(0, "default_value"), *boolean = ARG(1, "boolean");
		bool use = in.kind == V_UNDEF || (boolean && ferry_chat_truthy(boolean) && !ferry_chat_truthy(&in));

		*out = use ? (def ? *def : ferry_chat_cstr("")) : in;
		return FERRY_OK;
	}
	if (name_is(f, fn, "tojson")) {
		const cvalue *ind = ARG(0, "indent");

		return ferry_chat_to_json(r, &in, ind && ind->kind == V_INT ? (int)ind->i : -1, out);
	}
	if (name_is(f, fn, "length") || name_is(f, fn, "count")) {
		out->kind = V_INT;
		if (in.kind == V_STR)
			out->i = (long long)ferry_chat_utf8_len(in.s, in.n);
		else if (in.kind == V_LIST)
			out->i = (long long)in.list->n;
		else if (in.kind == V_DICT)
			out->i = (long long)in.dict->n;
		else if (in.kind == V_UNDEF)
			out->i = 0;
		else
			return ferry_chat_fail(r, node->line, "length of a value that has none");
		return FERRY_OK;
	}
	if (name_is(f, fn, "items"))
		return in.kind == V_UNDEF ? items_of(r, &in, 0, out)
		       : in.kind == V_DICT ? items_of(r, &in, 0, out)
		       : ferry_chat_fail(r, node->line, "items of something that is not a mapping");
	if (name_is(f, fn, "selectattr") || name_is(f, fn, "rejectattr") || name_is(f, fn, "select") ||
	    name_is(f, fn, "reject"))
		return select_items(r, node, &in, args, n_args, fn > 6, f[0] == 'r', out);
	if (name_is(f, fn, "int") || name_is(f, fn, "float") || name_is(f, fn, "abs")) {
		char num[64];
		double x = in.kind == V_FLOAT ? in.f : in.kind == V_INT || in.kind == V_BOOL ? (double)in.i : 0;

		if (in.kind == V_STR) {
			snprintf(num, sizeof(num), "%.*s", (int)(in.n < 63 ? in.n : 63), in.s);
			x = strtod(num, NULL);
		}

		if (f[0] == 'a') {
			if (in.kind != V_INT && in.kind != V_FLOAT)
				return ferry_chat_fail(r, node->line, "abs needs a number");
			*out = in;
			if (in.kind == V_INT)
				out->i = llabs(in.i);
			else
				out->f = fabs(in.f);
		} else if (f[0] == 'i') {
			out->kind = V_INT;
			out->i = (long long)x;
		} else {
			out->kind = V_FLOAT;
			out->f = x;
		}
		return FERRY_OK;
	}
	return filter_seq(r, node, in, args, n_args, kw, kwv, n_kw, out);
}

/* Filters of sequences, then of strings. */
static ferry_status filter_seq(struct crender *r, const struct cnode_s *node, cvalue in,
			       const cvalue *args, int n_args, const char *const *kw,
			       const cvalue *kwv, int n_kw, cvalue *out)
{
	const char *f = node->s;
	size_t fn = node->sn;
	cvalue seq;

	if (name_is(f, fn, "map")) {
		const cvalue *attr = kwarg(kw, kwv, n_kw, "attribute");

		if (!attr || attr->kind != V_STR)
			return ferry_chat_fail(r, node->line, "map is in the subset with attribute= only");
		TRY(seq_of(r, &in, &seq));
		*out = ferry_chat_new_list(r);
		for (size_t i = 0; i < seq.list->n; i++) {
			const cvalue *it = &seq.list->v[i];
			const cvalue *a = it->kind == V_DICT ? ferry_chat_dict_get(it->dict, attr->s, attr->n) : NULL;
			cvalue v = { .kind = V_UNDEF };

			if (a)
				v = *a;
			TRY(ferry_chat_list_push(r, out->list, v));
		}
		return FERRY_OK;
	}
	if (name_is(f, fn, "join")) {
		const cvalue *sep = ARG(0, "d");
		cvalue empty = ferry_chat_cstr("");

		TRY(seq_of(r, &in, &seq));
		return join(r, &seq, sep && sep->kind == V_STR ? sep : &empty,
			    ARG(1, "attribute"), out);
	}
	if (name_is(f, fn, "first") || name_is(f, fn, "last") || name_is(f, fn, "list") ||
	    name_is(f, fn, "reverse")) {
		TRY(seq_of(r, &in, &seq));
		if (f[0] == 'f' || f[1] == 'a') {
			out->kind = V_UNDEF;
			if (seq.list->n)
				*out = seq.list->v[f[0] == 'f' ? 0 : seq.list->n - 1];
			return FERRY_OK;
		}
		*out = ferry_chat_new_list(r);
		for (size_t i = 0; i < seq.list->n; i++)
			TRY(ferry_chat_list_push(r, out->list,
						 seq.list->v[f[0] == 'l' ? i : seq.list->n - 1 - i]));
		if (f[0] == 'r' && in.kind == V_STR)
			return join(r, out, &(cvalue){ .kind = V_STR, .s = "", .n = 0 }, NULL, out);
		return FERRY_OK;
	}
	return filter_str(r, node, in, args, n_args, kw, kwv, n_kw, out);
}

static ferry_status filter_str(struct crender *r, const struct cnode_s *node, cvalue in,
			       const cvalue *args, int n_args, const char *const *kw,
			       const cvalue *kwv, int n_kw, cvalue *out)
{
	const char *f = node->s;
	size_t fn = node->sn;

	TRY(ferry_chat_to_str(r, &in, &in));
	if (name_is(f, fn, "trim")) {
		*out = strip(&in, ARG(0, "chars"), true, true);
		return FERRY_OK;
	}
	if (name_is(f, fn, "upper"))
		return recase(r, &in, 'u', out);
	if (name_is(f, fn, "lower"))
		return recase(r, &in, 'l', out);
	if (name_is(f, fn, "capitalize"))
		return recase(r, &in, 'c', out);
	if (name_is(f, fn, "title"))
		return recase(r, &in, 'j', out);
	if (name_is(f, fn, "replace")) {
		const cvalue *a0 = ARG(0, "old"), *a1 = ARG(1, "new"), *c = ARG(2, "count");

		TRY(need_str(r, node->line, a0, "replace"));
		TRY(need_str(r, node->line, a1, "replace"));
		return replace(r, &in, a0, a1, c && c->kind == V_INT ? c->i : -1, out);
	}
	return ferry_chat_fail(r, node->line, "the filter '%.*s' is outside the subset", (int)fn, f);
}

/* ---- tests ---- */

ferry_status ferry_chat_test(struct crender *r, const struct cnode_s *node, cvalue in,
			     const cvalue *args, int n_args, bool *out)
{
	const char *t = node->s;
	size_t tn = node->sn;
	bool ok;

	if (name_is(t, tn, "defined") || name_is(t, tn, "undefined"))
		*out = (in.kind != V_UNDEF) == (t[0] == 'd');
	else if (name_is(t, tn, "none"))
		*out = in.kind == V_NONE;
	else if (name_is(t, tn, "string"))
		*out = in.kind == V_STR;
	else if (name_is(t, tn, "mapping"))
		*out = in.kind == V_DICT;
	else if (name_is(t, tn, "iterable"))
		*out = in.kind == V_LIST || in.kind == V_DICT || in.kind == V_STR;
	else if (name_is(t, tn, "sequence"))
		*out = in.kind == V_LIST || in.kind == V_DICT || in.kind == V_STR;
	else if (name_is(t, tn, "number"))
		*out = in.kind == V_INT || in.kind == V_FLOAT;
	else if (name_is(t, tn, "integer"))
		*out = in.kind == V_INT;
	else if (name_is(t, tn, "float"))
		*out = in.kind == V_FLOAT;
	else if (name_is(t, tn, "boolean"))
		*out = in.kind == V_BOOL;
	else if (name_is(t, tn, "true") || name_is(t, tn, "false"))
		*out = in.kind == V_BOOL && (in.i != 0) == (t[0] == 't');
	else if (name_is(t, tn, "odd") || name_is(t, tn, "even") || name_is(t, tn, "divisibleby")) {
		long long d = t[0] == 'd' ? (n_args && args[0].kind == V_INT ? args[0].i : 0) : 2;

		if (in.kind != V_INT || d == 0)
			return ferry_chat_fail(r, node->line, "'%.*s' needs integers", (int)tn, t);
		*out = t[0] == 'o' ? in.i % 2 != 0 : in.i % d == 0;
	} else {
		if (n_args < 1)
			return ferry_chat_fail(r, node->line, "the test '%.*s' needs an argument", (int)tn, t);
		if (name_is(t, tn, "in")) {
			const cvalue *h = &args[0];

			ok = false;
			if (h->kind == V_STR && in.kind == V_STR)
				ok = !in.n || memmem(h->s, h->n, in.s, in.n);
			for (size_t i = 0; h->kind == V_LIST && i < h->list->n && !ok; i++)
				ok = ferry_chat_equal(&h->list->v[i], &in);
			for (size_t i = 0; h->kind == V_DICT && i < h->dict->n && !ok; i++)
				ok = ferry_chat_equal(&h->dict->key[i], &in);
			*out = ok;
		} else {
			*out = ferry_chat_equal(&in, &args[0]) == !name_is(t, tn, "ne");
		}
	}
	return FERRY_OK;
}
