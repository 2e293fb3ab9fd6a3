/*
 * Chat-template values: lists, mappings, truth, equality, and the two
 * ways a value becomes text: Python's str() (what {{ x }} prints) and
 * json.dumps(ensure_ascii=False) (transformers' tojson), byte for byte.
 */
#include "chat/chat_impl.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOMEM ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory")
#define TRY(x) do { ferry_status st_ = (x); if (st_) return st_; } while (0)

cvalue ferry_chat_cstr(const char *s)
{
	cvalue v = { .kind = V_STR, .s = s, .n = strlen(s) };

	return v;
}

cvalue ferry_chat_str(struct crender *r, const char *s, size_t n)
{
	char *p = ferry_chat_alloc(r, n + 1);
	cvalue v = { .kind = V_STR, .s = p, .n = n };

	if (p && n)
		memcpy(p, s, n);
	return v;
}

cvalue ferry_chat_new_list(struct crender *r)
{
	cvalue v = { .kind = V_LIST, .list = ferry_chat_alloc(r, sizeof(struct clist)) };

	return v;
}

cvalue ferry_chat_new_dict(struct crender *r)
{
	cvalue v = { .kind = V_DICT, .dict = ferry_chat_alloc(r, sizeof(struct cdict)) };

	return v;
}

ferry_status ferry_chat_list_push(struct crender *r, struct clist *l, cvalue v)
{
	if (!l)
		return NOMEM;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		cvalue *p = ferry_chat_alloc(r, cap * sizeof(*p));

		if (!p)
			return NOMEM;
		if (l->n)
			memcpy(p, l->v, l->n * sizeof(*p));
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return FERRY_OK;
}

const cvalue *ferry_chat_dict_get(const struct cdict *d, const char *k, size_t n)
{
	for (size_t i = 0; d && i < d->n; i++)
		if (d->key[i].kind == V_STR && d->key[i].n == n && !memcmp(d->key[i].s, k, n))
			return &d->val[i];
	return NULL;
}

ferry_status ferry_chat_dict_set(struct crender *r, struct cdict *d, cvalue k, cvalue v)
{
	if (!d)
		return NOMEM;
	for (size_t i = 0; i < d->n; i++)
		if (ferry_chat_equal(&d->key[i], &k)) {
			d->val[i] = v;
			return FERRY_OK;
		}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 8;
		cvalue *kk = ferry_chat_alloc(r, cap * sizeof(*kk));
		cvalue *vv = ferry_chat_alloc(r, cap * sizeof(*vv));

		if (!kk || !vv)
			return NOMEM;
		if (d->n) {
			memcpy(kk, d->key, d->n * sizeof(*kk));
			memcpy(vv, d->val, d->n * sizeof(*vv));
		}
		d->key = kk;
		d->val = vv;
		d->cap = cap;
	}
	d->key[d->n] = k;
	d->val[d->n++] = v;
	return FERRY_OK;
}

bool ferry_chat_truthy(const cvalue *v)
{
	switch (v->kind) {
	case V_UNDEF: case V_NONE: return false;
	case V_BOOL: case V_INT: return v->i != 0;
	case V_FLOAT: return v->f != 0;
	case V_STR: return v->n > 0;
	case V_LIST: return v->list->n > 0;
	case V_DICT: return v->dict->n > 0;
	default: return true;
	}
}

bool ferry_chat_equal(const cvalue *a, const cvalue *b)
{
	bool an = a->kind == V_INT || a->kind == V_FLOAT || a->kind == V_BOOL;
	bool bn = b->kind == V_INT || b->kind == V_FLOAT || b->kind == V_BOOL;

	if (an && bn)
		return (a->kind == V_FLOAT ? a->f : (double)a->i) ==
		       (b->kind == V_FLOAT ? b->f : (double)b->i);
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case V_UNDEF: case V_NONE: return true;
	case V_STR: return a->n == b->n && !memcmp(a->s, b->s, a->n);
	case V_LIST:
		if (a->list->n != b->list->n)
			return false;
		for (size_t i = 0; i < a->list->n; i++)
			if (!ferry_chat_equal(&a->list->v[i], &b->list->v[i]))
				return false;
		return true;
	case V_DICT:
		if (a->dict->n != b->dict->n)
			return false;
		for (size_t i = 0; i < a->dict->n; i++) {
			const cvalue *k = &a->dict->key[i];
			const cvalue *w = k->kind == V_STR ? ferry_chat_dict_get(b->dict, k->s, k->n) : NULL;

			if (!w || !ferry_chat_equal(&a->dict->val[i], w))
				return false;
		}
		return true;
	default:
		return a->func == b->func && a->self == b->self;
	}
}

size_t ferry_chat_utf8_len(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

size_t ferry_chat_utf8_at(const char *s, size_t n, size_t k)
{
	size_t i = 0;

	for (; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80 && k-- == 0)
			return i;
	return n;
}

/* ---- text ---- */

struct sbuf {
	struct crender *r;
	char *p;
	size_t n, cap;
};

static ferry_status sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		char *p;

		while (cap < b->n + n + 1)
			cap *= 2;
		p = ferry_chat_alloc(b->r, cap);
		if (!p)
			return NOMEM;
		if (b->n)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return FERRY_OK;
}

static ferry_status sb_str(struct sbuf *b, const char *s)
{
	return sb_add(b, s, strlen(s));
}

/* Python's repr(float) */
static void float_repr(double f, char *out, size_t size)
{
	char buf[64];
	int p;

	if (isnan(f)) {
		snprintf(out, size, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, size, f < 0 ? "-inf" : "inf");
		return;
	}
	for (p = 1; p < 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, f);
		if (strtod(buf, NULL) == f)
			break;
	}
	snprintf(buf, sizeof(buf), "%.*e", p - 1, f);
	int exp = atoi(strchr(buf, 'e') + 1);

	if (exp < -4 || exp >= 16) {
		/* d.ddde+XX, Python writes at least two exponent digits */
		char mant[40], *e = strchr(buf, 'e');

		snprintf(mant, sizeof(mant), "%.*s", (int)(e - buf), buf);
		snprintf(out, size, "%se%c%02d", mant, exp < 0 ? '-' : '+', abs(exp));
		return;
	}
	int dec = p - 1 - exp;

	snprintf(out, size, "%.*f", dec > 0 ? dec : 0, f);
	if (!strchr(out, '.'))
		strncat(out, ".0", size - strlen(out) - 1);
}

static ferry_status repr_str(struct sbuf *b, const char *s, size_t n)
{
	bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';

	TRY(sb_add(b, &q, 1));
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c == '\\' || c == (unsigned char)q) {
			esc[0] = '\\';
			esc[1] = (char)c;
			TRY(sb_add(b, esc, 2));
		} else if (c == '\n') {
			TRY(sb_str(b, "\\n"));
		} else if (c == '\r') {
			TRY(sb_str(b, "\\r"));
		} else if (c == '\t') {
			TRY(sb_str(b, "\\t"));
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			TRY(sb_str(b, esc));
		} else {
			TRY(sb_add(b, (const char *)&c, 1));
		}
	}
	return sb_add(b, &q, 1);
}

static ferry_status str_of(struct sbuf *b, const cvalue *v, bool repr)
{
	char num[64];

	switch (v->kind) {
	case V_UNDEF: return FERRY_OK;
	case V_NONE: return sb_str(b, "None");
	case V_BOOL: return sb_str(b, v->i ? "True" : "False");
	case V_INT:
		snprintf(num, sizeof(num), "%lld", v->i);
		return sb_str(b, num);
	case V_FLOAT:
		float_repr(v->f, num, sizeof(num));
		return sb_str(b, num);
	case V_STR: return repr ? repr_str(b, v->s, v->n) : sb_add(b, v->s, v->n);
	case V_LIST:
		TRY(sb_str(b, "["));
		for (size_t i = 0; i < v->list->n; i++) {
			if (i)
				TRY(sb_str(b, ", "));
			TRY(str_of(b, &v->list->v[i], true));
		}
		return sb_str(b, "]");
	case V_DICT:
		if (v->ns)
			return sb_str(b, "<Namespace>");
		TRY(sb_str(b, "{"));
		for (size_t i = 0; i < v->dict->n; i++) {
			if (i)
				TRY(sb_str(b, ", "));
			TRY(str_of(b, &v->dict->key[i], true));
			TRY(sb_str(b, ": "));
			TRY(str_of(b, &v->dict->val[i], true));
		}
		return sb_str(b, "}");
	default:
		return sb_str(b, "<function>");
	}
}

ferry_status ferry_chat_to_str(struct crender *r, const cvalue *v, cvalue *out)
{
	struct sbuf b = { .r = r };

	if (v->kind == V_STR) {
		*out = *v;
		return FERRY_OK;
	}
	TRY(str_of(&b, v, false));
	*out = ferry_chat_cstr("");
	if (b.p) {
		out->s = b.p;
		out->n = b.n;
	}
	return FERRY_OK;
}

static ferry_status json_str(struct sbuf *b, const char *s, size_t n)
{
	TRY(sb_str(b, "\""));
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		switch (c) {
		case '"': TRY(sb_str(b, "\\\"")); break;
		case '\\': TRY(sb_str(b, "\\\\")); break;
		case '\n': TRY(sb_str(b, "\\n")); break;
		case '\r': TRY(sb_str(b, "\\r")); break;
		case '\t': TRY(sb_str(b, "\\t")); break;
		case '\b': TRY(sb_str(b, "\\b")); break;
		case '\f': TRY(sb_str(b, "\\f")); break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				TRY(sb_str(b, esc));
			} else {
				TRY(sb_add(b, (const char *)&c, 1));
			}
		}
	}
	return sb_str(b, "\"");
}

static ferry_status newline(struct sbuf *b, int indent, int depth)
{
	TRY(sb_str(b, "\n"));
	for (int i = 0; i < indent * depth; i++)
		TRY(sb_str(b, " "));
	return FERRY_OK;
}

static ferry_status json_of(struct sbuf *b, const cvalue *v, int indent, int depth)
{
	char num[64];
	const char *item_sep = indent >= 0 ? "," : ", ";
	size_t n;

	switch (v->kind) {
	case V_NONE: return sb_str(b, "null");
	case V_BOOL: return sb_str(b, v->i ? "true" : "false");
	case V_INT:
		snprintf(num, sizeof(num), "%lld", v->i);
		return sb_str(b, num);
	case V_FLOAT:
		if (isnan(v->f))
			return sb_str(b, "NaN");
		if (isinf(v->f))
			return sb_str(b, v->f < 0 ? "-Infinity" : "Infinity");
		float_repr(v->f, num, sizeof(num));
		return sb_str(b, num);
	case V_STR: return json_str(b, v->s, v->n);
	case V_LIST: case V_DICT:
		n = v->kind == V_LIST ? v->list->n : v->dict->n;
		TRY(sb_str(b, v->kind == V_LIST ? "[" : "{"));
		for (size_t i = 0; i < n; i++) {
			if (i)
				TRY(sb_str(b, item_sep));
			if (indent >= 0)
				TRY(newline(b, indent, depth + 1));
			if (v->kind == V_LIST) {
				TRY(json_of(b, &v->list->v[i], indent, depth + 1));
				continue;
			}
			const cvalue *k = &v->dict->key[i];

			if (k->kind == V_STR) {
				TRY(json_str(b, k->s, k->n));
			} else {
				struct sbuf kb = { .r = b->r };

				TRY(json_of(&kb, k, -1, 0));
				TRY(json_str(b, kb.p, kb.n));
			}
			TRY(sb_str(b, ": "));
			TRY(json_of(b, &v->dict->val[i], indent, depth + 1));
		}
		if (n && indent >= 0)
			TRY(newline(b, indent, depth));
		return sb_str(b, v->kind == V_LIST ? "]" : "}");
	default:
		return ferry_error(FERRY_ERR_INVALID, "chat template: tojson of a value JSON cannot hold (%s)",
				   v->kind == V_UNDEF ? "undefined" : "a function");
	}
}

ferry_status ferry_chat_to_json(struct crender *r, const cvalue *v, int indent, cvalue *out)
{
	struct sbuf b = { .r = r };

	TRY(json_of(&b, v, indent, 0));
	*out = ferry_chat_cstr("");
	out->s = b.p;
	out->n = b.n;
	return FERRY_OK;
}
