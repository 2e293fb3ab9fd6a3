/*
 * The chat-template evaluator: renders the parser's tree with Jinja's
 * semantics for the subset.  Scopes: a `for` body is a scope of its own
 * (a `set` inside it does not outlive the iteration, which is why
 * templates carry state in namespace() objects); `if` is not.
 */
#include "chat/chat_impl.h"
#include "core/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK (1u << 16)

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
};

struct scope {
	struct cdict vars;
};

enum flow { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

struct crender {
	struct arena_block *blocks;
	struct scope *scopes;
	int n_scopes, cap_scopes;
	char *out;
	size_t n_out, cap_out;
	enum flow flow;
	bool failed_alloc;
};

void *ferry_chat_alloc(struct crender *r, size_t n)
{
	struct arena_block *b = r->blocks;

	n = (n + 15) & ~(size_t)15;
	if (!b || b->used + n > b->cap) {
		size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;

		b = malloc(sizeof(*b) + cap);
		if (!b) {
			r->failed_alloc = true;
			return NULL;
		}
		b->cap = cap;
		b->used = 0;
		b->next = r->blocks;
		r->blocks = b;
	}
	void *p = b->data + b->used;

	b->used += n;
	memset(p, 0, n);
	return p;
}

ferry_status ferry_chat_fail(struct crender *r, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	(void)r;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return ferry_error(FERRY_ERR_INVALID, "chat template line %d: %s", line, msg);
}

#define NOMEM(r) ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory")
#define TRY(x) do { ferry_status st_ = (x); if (st_) return st_; } while (0)

static ferry_status emit(struct crender *r, const char *s, size_t n)
{
	if (r->n_out + n + 1 > r->cap_out) {
		size_t cap = r->cap_out ? r->cap_out : 1024;
		char *p;

		while (cap < r->n_out + n + 1)
			cap *= 2;
		p = realloc(r->out, cap);
		if (!p)
			return NOMEM(r);
		r->out = p;
		r->cap_out = cap;
	}
	memcpy(r->out + r->n_out, s, n);
	r->n_out += n;
	r->out[r->n_out] = 0;
	return FERRY_OK;
}

static ferry_status push_scope(struct crender *r)
{
	if (r->n_scopes == r->cap_scopes) {
		int cap = r->cap_scopes ? 2 * r->cap_scopes : 16;
		struct scope *s = realloc(r->scopes, (size_t)cap * sizeof(*s));

		if (!s)
			return NOMEM(r);
		r->scopes = s;
		r->cap_scopes = cap;
	}
	memset(&r->scopes[r->n_scopes++], 0, sizeof(struct scope));
	return FERRY_OK;
}

static const cvalue *lookup(struct crender *r, const char *s, size_t n)
{
	for (int i = r->n_scopes - 1; i >= 0; i--) {
		const cvalue *v = ferry_chat_dict_get(&r->scopes[i].vars, s, n);

		if (v)
			return v;
	}
	return NULL;
}

static ferry_status set_var(struct crender *r, const char *s, size_t n, cvalue v)
{
	return ferry_chat_dict_set(r, &r->scopes[r->n_scopes - 1].vars,
				   ferry_chat_str(r, s, n), v);
}

static ferry_status eval(struct crender *r, const struct cnode_s *n, cvalue *out);

static bool is_num(const cvalue *v)
{
	return v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
}

static double num(const cvalue *v)
{
	return v->kind == V_FLOAT ? v->f : (double)v->i;
}

static cvalue mk_int(long long i)
{
	cvalue v = { .kind = V_INT, .i = i };

	return v;
}

static cvalue mk_float(double f)
{
	cvalue v = { .kind = V_FLOAT, .f = f };

	return v;
}

static cvalue mk_bool(bool b)
{
	cvalue v = { .kind = V_BOOL, .i = b };

	return v;
}

static int compare(const cvalue *a, const cvalue *b, bool *ok)
{
	*ok = true;
	if (is_num(a) && is_num(b)) {
		double x = num(a), y = num(b);

		return x < y ? -1 : x > y;
	}
	if (a->kind == V_STR && b->kind == V_STR) {
		size_t m = a->n < b->n ? a->n : b->n;
		int c = memcmp(a->s, b->s, m);

		return c ? (c < 0 ? -1 : 1) : (a->n < b->n ? -1 : a->n > b->n);
	}
	*ok = false;
	return 0;
}

static bool contains(const cvalue *hay, const cvalue *needle, bool *ok)
{
	*ok = true;
	if (hay->kind == V_STR && needle->kind == V_STR)
		return needle->n == 0 || memmem(hay->s, hay->n, needle->s, needle->n);
	if (hay->kind == V_LIST) {
		for (size_t i = 0; i < hay->list->n; i++)
			if (ferry_chat_equal(&hay->list->v[i], needle))
				return true;
		return false;
	}
	if (hay->kind == V_DICT) {
		for (size_t i = 0; i < hay->dict->n; i++)
			if (ferry_chat_equal(&hay->dict->key[i], needle))
				return true;
		return false;
	}
	*ok = false;
	return false;
}

/* ~, and + of strings or lists; *done false for anything else. */
static ferry_status concat(struct crender *r, const struct cnode_s *n, const cvalue *a,
			   const cvalue *b, cvalue *out, bool *done)
{
	char op = n->s[0];

	*done = true;
	if (op == '~') {
		cvalue x, y;

		TRY(ferry_chat_to_str(r, a, &x));
		TRY(ferry_chat_to_str(r, b, &y));
		char *s = ferry_chat_alloc(r, x.n + y.n + 1);

		if (!s)
			return NOMEM(r);
		memcpy(s, x.s, x.n);
		memcpy(s + x.n, y.s, y.n);
		*out = ferry_chat_str(r, s, x.n + y.n);
		out->s = s; /* already in the arena */
		return FERRY_OK;
	}
	if (op == '+' && a->kind == V_STR && b->kind == V_STR) {
		char *s = ferry_chat_alloc(r, a->n + b->n + 1);

		if (!s)
			return NOMEM(r);
		memcpy(s, a->s, a->n);
		memcpy(s + a->n, b->s, b->n);
		out->kind = V_STR;
		out->s = s;
		out->n = a->n + b->n;
		return FERRY_OK;
	}
	if (op == '+' && a->kind == V_LIST && b->kind == V_LIST) {
		*out = ferry_chat_new_list(r);
		for (size_t i = 0; i < a->list->n; i++)
			TRY(ferry_chat_list_push(r, out->list, a->list->v[i]));
		for (size_t i = 0; i < b->list->n; i++)
			TRY(ferry_chat_list_push(r, out->list, b->list->v[i]));
		return FERRY_OK;
	}
	if (op == '*' && n->sn == 1 && ((a->kind == V_STR && b->kind == V_INT) ||
					(a->kind == V_INT && b->kind == V_STR))) {
		const cvalue *str = a->kind == V_STR ? a : b;
		long long k = a->kind == V_INT ? a->i : b->i;
		char *o;

		if (k < 0)
			k = 0;
		if (str->n && (unsigned long long)k > (1ull << 30) / str->n)
			return ferry_chat_fail(r, n->line, "a string repeated past 1 GiB");
		o = ferry_chat_alloc(r, str->n * (size_t)k + 1);
		if (!o)
			return NOMEM(r);
		for (long long i = 0; i < k; i++)
			memcpy(o + (size_t)i * str->n, str->s, str->n);
		*out = ferry_chat_cstr("");
		out->s = o;
		out->n = str->n * (size_t)k;
		return FERRY_OK;
	}
	*done = false;
	return FERRY_OK;
}

static ferry_status arith(struct crender *r, const struct cnode_s *n, const cvalue *a,
			  const cvalue *b, cvalue *out)
{
	char op = n->s[0];
	bool two = n->sn == 2, done;

	TRY(concat(r, n, a, b, out, &done));
	if (done)
		return FERRY_OK;
	if (!is_num(a) || !is_num(b))
		return ferry_chat_fail(r, n->line, "'%.*s' needs numbers here", (int)n->sn, n->s);
	bool ints = a->kind != V_FLOAT && b->kind != V_FLOAT;
	double x = num(a), y = num(b);

	if ((op == '/' || op == '%') && y == 0)
		return ferry_chat_fail(r, n->line, "division by zero");
	switch (op) {
	case '+': *out = ints ? mk_int(a->i + b->i) : mk_float(x + y); break;
	case '-': *out = ints ? mk_int(a->i - b->i) : mk_float(x - y); break;
	case '*':
		if (two)
			*out = mk_float(pow(x, y));
		else
			*out = ints ? mk_int(a->i * b->i) : mk_float(x * y);
		break;
	case '/':
		if (two) {
			if (ints) {
				long long q = a->i / b->i;

				if ((a->i % b->i) && ((a->i < 0) != (b->i < 0)))
					q--;
				*out = mk_int(q);
			} else {
				*out = mk_float(floor(x / y));
			}
		} else {
			*out = mk_float(x / y);
		}
		break;
	case '%':
		if (ints) {
			long long m = a->i % b->i;

			if (m && ((m < 0) != (b->i < 0)))
				m += b->i;
			*out = mk_int(m);
		} else {
			*out = mk_float(x - y * floor(x / y));
		}
		break;
	}
	return FERRY_OK;
}

static ferry_status eval_binary(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	cvalue a, b;
	bool ok;

	TRY(eval(r, n->kid[0], &a));
	TRY(eval(r, n->kid[1], &b));
	if (n->sn == 2 && !memcmp(n->s, "in", 2)) {
		bool c = contains(&b, &a, &ok);

		if (!ok)
			return ferry_chat_fail(r, n->line, "'in' needs a string, list or mapping on its right");
		*out = mk_bool(c != n->negate);
		return FERRY_OK;
	}
	if (n->sn == 2 && (n->s[0] == '=' || n->s[0] == '!')) {
		*out = mk_bool(ferry_chat_equal(&a, &b) == (n->s[0] == '='));
		return FERRY_OK;
	}
	if (n->s[0] == '<' || n->s[0] == '>') {
		int c = compare(&a, &b, &ok);

		if (!ok)
			return ferry_chat_fail(r, n->line, "'%.*s' compares numbers or strings", (int)n->sn, n->s);
		bool res = n->s[0] == '<' ? (n->sn == 2 ? c <= 0 : c < 0) : (n->sn == 2 ? c >= 0 : c > 0);
		*out = mk_bool(res);
		return FERRY_OK;
	}
	return arith(r, n, &a, &b, out);
}

static long long norm_index(long long i, long long len)
{
	return i < 0 ? i + len : i;
}

static ferry_status eval_index(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	cvalue obj, key;

	TRY(eval(r, n->kid[0], &obj));
	TRY(eval(r, n->kid[1], &key));
	memset(out, 0, sizeof(*out));
	if (obj.kind == V_DICT && key.kind == V_STR) {
		const cvalue *v = ferry_chat_dict_get(obj.dict, key.s, key.n);

		cvalue *self = ferry_chat_alloc(r, sizeof(*self));

		if (!self)
			return NOMEM(r);
		*self = obj;
		if (v)
			*out = *v;
		else
			*out = ferry_chat_method(self, key.s, key.n);
		return FERRY_OK;
	}
	if ((obj.kind == V_LIST || obj.kind == V_STR) && key.kind == V_INT) {
		long long len = obj.kind == V_LIST ? (long long)obj.list->n
						   : (long long)ferry_chat_utf8_len(obj.s, obj.n);
		long long i = norm_index(key.i, len);

		if (i < 0 || i >= len)
			return FERRY_OK; /* undefined, as Jinja's getitem gives */
		if (obj.kind == V_LIST) {
			*out = obj.list->v[i];
		} else {
			size_t a = ferry_chat_utf8_at(obj.s, obj.n, (size_t)i);
			size_t b = ferry_chat_utf8_at(obj.s, obj.n, (size_t)i + 1);

			*out = ferry_chat_str(r, obj.s + a, b - a);
		}
		return FERRY_OK;
	}
	if (obj.kind == V_UNDEF)
		return ferry_chat_fail(r, n->line, "subscript of an undefined value");
	return FERRY_OK;
}

static ferry_status eval_slice(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	cvalue obj, part[3];
	long long len, start, stop, step = 1;

	TRY(eval(r, n->kid[0], &obj));
	for (int k = 0; k < 3; k++) {
		part[k].kind = V_NONE;
		if (n->kid[k + 1])
			TRY(eval(r, n->kid[k + 1], &part[k]));
		if (part[k].kind != V_NONE && part[k].kind != V_INT)
			return ferry_chat_fail(r, n->line, "slice bounds must be integers");
	}
	if (obj.kind != V_LIST && obj.kind != V_STR)
		return ferry_chat_fail(r, n->line, "only lists and strings slice");
	len = obj.kind == V_LIST ? (long long)obj.list->n : (long long)ferry_chat_utf8_len(obj.s, obj.n);
	if (part[2].kind == V_INT)
		step = part[2].i;
	if (step == 0)
		return ferry_chat_fail(r, n->line, "slice step cannot be zero");
	/* Python's slice.indices */
	if (part[0].kind == V_NONE) {
		start = step > 0 ? 0 : len - 1;
	} else {
		start = norm_index(part[0].i, len);
		start = step > 0 ? (start < 0 ? 0 : start > len ? len : start)
				 : (start < 0 ? -1 : start >= len ? len - 1 : start);
	}
	if (part[1].kind == V_NONE) {
		stop = step > 0 ? len : -1;
	} else {
		stop = norm_index(part[1].i, len);
		stop = step > 0 ? (stop < 0 ? 0 : stop > len ? len : stop)
				: (stop < -1 ? -1 : stop >= len ? len - 1 : stop);
	}
	cvalue res = obj.kind == V_LIST ? ferry_chat_new_list(r) : ferry_chat_new_list(r);

	if (!res.list)
		return NOMEM(r);
	for (long long i = start; step > 0 ? i < stop : i > stop; i += step) {
		cvalue v;

		if (obj.kind == V_LIST) {
			v = obj.list->v[i];
		} else {
			size_t a = ferry_chat_utf8_at(obj.s, obj.n, (size_t)i);
			size_t b = ferry_chat_utf8_at(obj.s, obj.n, (size_t)i + 1);

			v = ferry_chat_cstr("");
			v.s = obj.s + a;
			v.n = b - a;
		}
		TRY(ferry_chat_list_push(r, res.list, v));
	}
	if (obj.kind == V_STR) { /* join the characters back */
		size_t tot = 0;

		for (size_t i = 0; i < res.list->n; i++)
			tot += res.list->v[i].n;
		char *s = ferry_chat_alloc(r, tot + 1);

		if (!s)
			return NOMEM(r);
		tot = 0;
		for (size_t i = 0; i < res.list->n; i++) {
			memcpy(s + tot, res.list->v[i].s, res.list->v[i].n);
			tot += res.list->v[i].n;
		}
		res = ferry_chat_cstr("");
		res.s = s;
		res.n = tot;
	}
	*out = res;
	return FERRY_OK;
}

/* Arguments of a call, filter or test: positional from kid[first], keywords. */
static ferry_status eval_args(struct crender *r, const struct cnode_s *n, int first,
			      cvalue **args, cvalue **kwv)
{
	*args = ferry_chat_alloc(r, (size_t)(n->n_kid + 1) * sizeof(cvalue));
	*kwv = ferry_chat_alloc(r, (size_t)(n->n_kw + 1) * sizeof(cvalue));
	if (!*args || !*kwv)
		return NOMEM(r);
	for (int k = first; k < n->n_kid; k++)
		TRY(eval(r, n->kid[k], &(*args)[k - first]));
	for (int k = 0; k < n->n_kw; k++)
		TRY(eval(r, n->kwv[k], &(*kwv)[k]));
	return FERRY_OK;
}

static ferry_status eval_list_dict(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	*out = n->kind == N_LIST ? ferry_chat_new_list(r) : ferry_chat_new_dict(r);
	if (!out->list && !out->dict)
		return NOMEM(r);
	for (int k = 0; k < n->n_kid; k += n->kind == N_LIST ? 1 : 2) {
		cvalue a, b;

		TRY(eval(r, n->kid[k], &a));
		if (n->kind == N_LIST) {
			TRY(ferry_chat_list_push(r, out->list, a));
		} else {
			TRY(eval(r, n->kid[k + 1], &b));
			TRY(ferry_chat_dict_set(r, out->dict, a, b));
		}
	}
	return FERRY_OK;
}

static ferry_status eval_attr(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	cvalue obj;

	TRY(eval(r, n->kid[0], &obj));
	if (obj.kind == V_UNDEF)
		return ferry_chat_fail(r, n->line, "'%.*s' of an undefined value", (int)n->sn, n->s);
	cvalue *self = ferry_chat_alloc(r, sizeof(*self)); /* a method outlives this frame */

	if (!self)
		return NOMEM(r);
	*self = obj;
	*out = ferry_chat_method(self, n->s, n->sn);
	if (out->kind == V_UNDEF && obj.kind == V_DICT) {
		const cvalue *v = ferry_chat_dict_get(obj.dict, n->s, n->sn);

		if (v)
			*out = *v;
	}
	return FERRY_OK;
}

static ferry_status eval(struct crender *r, const struct cnode_s *n, cvalue *out)
{
	cvalue a, *args, *kwv;

	memset(out, 0, sizeof(*out));
	if (r->failed_alloc)
		return NOMEM(r);
	switch (n->kind) {
	case N_CONST_STR:
		*out = ferry_chat_cstr("");
		out->s = n->s;
		out->n = n->sn;
		return FERRY_OK;
	case N_CONST_INT: *out = mk_int(n->i); return FERRY_OK;
	case N_CONST_FLOAT: *out = mk_float(n->f); return FERRY_OK;
	case N_CONST_BOOL: *out = mk_bool(n->i != 0); return FERRY_OK;
	case N_CONST_NONE: out->kind = V_NONE; return FERRY_OK;
	case N_NAME: {
		const cvalue *v = lookup(r, n->s, n->sn);

		*out = v ? *v : ferry_chat_global(n->s, n->sn);
		return FERRY_OK;
	}
	case N_ATTR: return eval_attr(r, n, out);
	case N_INDEX: return eval_index(r, n, out);
	case N_SLICE: return eval_slice(r, n, out);
	case N_LIST: case N_DICT: return eval_list_dict(r, n, out);
	case N_CALL:
		TRY(eval(r, n->kid[0], &a));
		if (a.kind != V_FUNC)
			return ferry_chat_fail(r, n->line, "calling something that is not a function%s",
					       n->kid[0]->kind == N_NAME ? " (an unknown name?)" : "");
		TRY(eval_args(r, n, 1, &args, &kwv));
		return ferry_chat_call(r, n->line, &a, args, n->n_kid - 1, n->kw, kwv, n->n_kw, out);
	case N_FILTER:
		TRY(eval(r, n->kid[0], &a));
		TRY(eval_args(r, n, 1, &args, &kwv));
		return ferry_chat_filter(r, n, a, args, n->n_kid - 1, n->kw, kwv, n->n_kw, out);
	case N_TEST: {
		bool res;

		TRY(eval(r, n->kid[0], &a));
		TRY(eval_args(r, n, 1, &args, &kwv));
		TRY(ferry_chat_test(r, n, a, args, n->n_kid - 1, &res));
		*out = mk_bool(res != n->negate);
		return FERRY_OK;
	}
	case N_UNARY:
		TRY(eval(r, n->kid[0], &a));
		if (!is_num(&a))
			return ferry_chat_fail(r, n->line, "unary '%c' needs a number", n->s[0]);
		*out = n->s[0] == '+' ? a : a.kind == V_FLOAT ? mk_float(-a.f) : mk_int(-a.i);
		return FERRY_OK;
	case N_BINARY: return eval_binary(r, n, out);
	case N_NOT:
		TRY(eval(r, n->kid[0], &a));
		*out = mk_bool(!ferry_chat_truthy(&a));
		return FERRY_OK;
	case N_AND: case N_OR:
		TRY(eval(r, n->kid[0], &a));
		if (ferry_chat_truthy(&a) == (n->kind == N_OR)) {
			*out = a;
			return FERRY_OK;
		}
		return eval(r, n->kid[1], out);
	case N_COND:
		TRY(eval(r, n->kid[0], &a));
		if (ferry_chat_truthy(&a))
			return eval(r, n->kid[1], out);
		if (n->kid[2])
			return eval(r, n->kid[2], out);
		return FERRY_OK; /* undefined */
	default:
		return ferry_chat_fail(r, n->line, "a statement where a value should be");
	}
}

/* ---- statements ---- */

static ferry_status exec(struct crender *r, const struct cnode_s *n);

static ferry_status exec_body(struct crender *r, const struct cnode_s *n)
{
	for (int k = 0; k < n->n_kid && r->flow == FLOW_NONE; k++)
		TRY(exec(r, n->kid[k]));
	return FERRY_OK;
}

/* The items a for loop walks: a list's items, a mapping's keys, a
 * string's characters. */
static ferry_status iter_items(struct crender *r, const struct cnode_s *n, const cvalue *it,
			       cvalue *out)
{
	if (it->kind == V_LIST) {
		*out = *it;
		return FERRY_OK;
	}
	*out = ferry_chat_new_list(r);
	if (!out->list)
		return NOMEM(r);
	if (it->kind == V_DICT) {
		for (size_t i = 0; i < it->dict->n; i++)
			TRY(ferry_chat_list_push(r, out->list, it->dict->key[i]));
	} else if (it->kind == V_STR) {
		size_t len = ferry_chat_utf8_len(it->s, it->n);

		for (size_t i = 0; i < len; i++) {
			size_t a = ferry_chat_utf8_at(it->s, it->n, i);
			size_t b = ferry_chat_utf8_at(it->s, it->n, i + 1);

			TRY(ferry_chat_list_push(r, out->list, ferry_chat_str(r, it->s + a, b - a)));
		}
	} else if (it->kind != V_UNDEF && it->kind != V_NONE) {
		return ferry_chat_fail(r, n->line, "a for loop over something that is not a sequence");
	}
	return FERRY_OK;
}

static ferry_status bind_vars(struct crender *r, const struct cnode_s *n, const cvalue *item)
{
	if (n->n_vars == 1)
		return set_var(r, n->vars[0], strlen(n->vars[0]), *item);
	if (item->kind != V_LIST || item->list->n != (size_t)n->n_vars)
		return ferry_chat_fail(r, n->line, "cannot unpack an item into %d loop variables", n->n_vars);
	for (int k = 0; k < n->n_vars; k++)
		TRY(set_var(r, n->vars[k], strlen(n->vars[k]), item->list->v[k]));
	return FERRY_OK;
}

static ferry_status loop_var(struct crender *r, const struct clist *items, size_t i, cvalue *out)
{
	static const char *const names[] = { "index", "index0", "revindex", "revindex0",
					     "first", "last", "length" };
	long long n = (long long)items->n, k = (long long)i;
	cvalue vals[] = { mk_int(k + 1), mk_int(k), mk_int(n - k), mk_int(n - k - 1),
			  mk_bool(k == 0), mk_bool(k == n - 1), mk_int(n) };

	*out = ferry_chat_new_dict(r);
	if (!out->dict)
		return NOMEM(r);
	for (size_t j = 0; j < sizeof(vals) / sizeof(vals[0]); j++)
		TRY(ferry_chat_dict_set(r, out->dict, ferry_chat_cstr(names[j]), vals[j]));
	cvalue none = { .kind = V_UNDEF };

	TRY(ferry_chat_dict_set(r, out->dict, ferry_chat_cstr("previtem"), i ? items->v[i - 1] : none));
	return ferry_chat_dict_set(r, out->dict, ferry_chat_cstr("nextitem"),
				   k + 1 < n ? items->v[i + 1] : none);
}

static ferry_status exec_for(struct crender *r, const struct cnode_s *n)
{
	cvalue it, items, kept;
	ferry_status st = FERRY_OK;

	TRY(eval(r, n->kid[0], &it));
	TRY(iter_items(r, n, &it, &items));
	kept = items;
	if (n->kid[1]) { /* `for x in xs if cond`: the loop sees only those kept */
		kept = ferry_chat_new_list(r);
		if (!kept.list)
			return NOMEM(r);
		TRY(push_scope(r));
		for (size_t i = 0; i < items.list->n && !st; i++) {
			cvalue c;

			st = bind_vars(r, n, &items.list->v[i]);
			if (!st)
				st = eval(r, n->kid[1], &c);
			if (!st && ferry_chat_truthy(&c))
				st = ferry_chat_list_push(r, kept.list, items.list->v[i]);
		}
		r->n_scopes--;
		TRY(st);
	}
	for (size_t i = 0; i < kept.list->n && !st; i++) {
		cvalue loop;

		TRY(push_scope(r));
		st = loop_var(r, kept.list, i, &loop);
		if (!st)
			st = set_var(r, "loop", 4, loop);
		if (!st)
			st = bind_vars(r, n, &kept.list->v[i]);
		if (!st)
			st = exec_body(r, n->body);
		r->n_scopes--;
		if (r->flow == FLOW_BREAK) {
			r->flow = FLOW_NONE;
			break;
		}
		r->flow = FLOW_NONE;
	}
	if (!st && kept.list->n == 0 && n->else_)
		st = exec_body(r, n->else_);
	return st;
}

static ferry_status exec(struct crender *r, const struct cnode_s *n)
{
	cvalue v;

	switch (n->kind) {
	case N_TEXT:
		return emit(r, n->s, n->sn);
	case N_OUTPUT:
		TRY(eval(r, n->kid[0], &v));
		TRY(ferry_chat_to_str(r, &v, &v));
		return emit(r, v.s, v.n);
	case N_BODY:
		return exec_body(r, n);
	case N_IF:
		TRY(eval(r, n->kid[0], &v));
		if (ferry_chat_truthy(&v))
			return exec_body(r, n->body);
		return n->else_ ? exec(r, n->else_) : FERRY_OK;
	case N_FOR:
		return exec_for(r, n);
	case N_SET:
		TRY(eval(r, n->kid[0], &v));
		return set_var(r, n->s, n->sn, v);
	case N_SET_ATTR: {
		cvalue obj;

		TRY(eval(r, n->kid[0], &obj));
		if (obj.kind != V_DICT || !obj.ns)
			return ferry_chat_fail(r, n->line, "only a namespace() takes attributes (set %.*s.%.*s)",
					       (int)n->kid[0]->sn, n->kid[0]->s, (int)n->sn, n->s);
		TRY(eval(r, n->kid[1], &v));
		return ferry_chat_dict_set(r, obj.dict, ferry_chat_str(r, n->s, n->sn), v);
	}
	case N_BREAK:
		r->flow = FLOW_BREAK;
		return FERRY_OK;
	case N_CONTINUE:
		r->flow = FLOW_CONTINUE;
		return FERRY_OK;
	default:
		return ferry_chat_fail(r, n->line, "a value where a statement should be");
	}
}

ferry_status ferry_chat_eval(const struct ctemplate *t, const char *const *names,
			     int n_vals,
			     ferry_status (*make)(struct crender *r, void *ctx,
						  cvalue *vals),
			     void *ctx, char **out, size_t *len)
{
	struct crender r = { 0 };
	ferry_status st = push_scope(&r);
	cvalue *made = NULL;

	if (!st && make) {
		made = ferry_chat_alloc(&r, (size_t)(n_vals + 1) * sizeof(cvalue));
		st = made ? make(&r, ctx, made) : NOMEM(&r);
	}
	for (int k = 0; !st && k < n_vals; k++)
		st = set_var(&r, names[k], strlen(names[k]), made[k]);
	if (!st)
		st = exec(&r, t->root);
	if (!st && !r.out)
		st = emit(&r, "", 0);
	while (r.blocks) {
		struct arena_block *b = r.blocks->next;

		free(r.blocks);
		r.blocks = b;
	}
	free(r.scopes);
	if (st) {
		free(r.out);
		return st;
	}
	*out = r.out;
	*len = r.n_out;
	return FERRY_OK;
}
