/*
 * The chat-template parser: tokens into a tree, Jinja's grammar for the
 * subset chat templates use.  Anything else (macro, call, include, raw,
 * an unknown filter or test, ...) is refused here, by name and line, so a
 * template is wholly accepted or wholly refused before any rendering.
 */
#include "chat/chat_impl.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	struct ctemplate *t;
	size_t at;
};

static void *palloc(struct ctemplate *t, size_t n)
{
	void *p;

	if (t->n_allocs == t->cap_allocs) {
		size_t cap = t->cap_allocs ? 2 * t->cap_allocs : 256;
		void **a = realloc(t->allocs, cap * sizeof(*a));

		if (!a)
			return NULL;
		t->allocs = a;
		t->cap_allocs = cap;
	}
	p = calloc(1, n ? n : 1);
	if (p)
		t->allocs[t->n_allocs++] = p;
	return p;
}

static const struct ctoken *peek(struct parser *p)
{
	return &p->t->toks.t[p->at];
}

static const struct ctoken *next(struct parser *p)
{
	const struct ctoken *tk = &p->t->toks.t[p->at];

	if (tk->kind != CT_EOF)
		p->at++;
	return tk;
}

static bool is_op(const struct ctoken *tk, const char *op)
{
	return tk->kind == CT_OP && tk->n == strlen(op) && !memcmp(tk->p, op, tk->n);
}

static bool is_name(const struct ctoken *tk, const char *name)
{
	return tk->kind == CT_NAME && tk->n == strlen(name) && !memcmp(tk->p, name, tk->n);
}

static ferry_status fail(const struct ctoken *tk, const char *what)
{
	if (tk->kind == CT_EOF)
		return ferry_error(FERRY_ERR_FORMAT, "chat template line %d: %s, at the end of the template",
				   tk->line, what);
	return ferry_error(FERRY_ERR_FORMAT, "chat template line %d: %s, at '%.*s'", tk->line,
			   what, tk->kind == CT_TEXT || tk->kind == CT_STRING || tk->kind == CT_NAME ||
					 tk->kind == CT_OP || tk->kind == CT_INT || tk->kind == CT_FLOAT
				 ? (int)(tk->n > 40 ? 40 : tk->n) : 2,
			   tk->kind == CT_VAR_END ? "}}" : tk->kind == CT_BLOCK_END ? "%}" :
			   tk->kind == CT_VAR_BEGIN ? "{{" : tk->kind == CT_BLOCK_BEGIN ? "{%" : tk->p);
}

static ferry_status expect_op(struct parser *p, const char *op)
{
	char what[32];

	if (is_op(peek(p), op)) {
		next(p);
		return FERRY_OK;
	}
	snprintf(what, sizeof(what), "expected '%s'", op);
	return fail(peek(p), what);
}

static struct cnode_s *node(struct parser *p, enum cnode kind, int line)
{
	struct cnode_s *n = palloc(p->t, sizeof(*n));

	if (n) {
		n->kind = kind;
		n->line = line;
	}
	return n;
}

/* Appends kid to n->kid (arrays grow by palloc copies: the parse is small). */
static ferry_status add_kid(struct parser *p, struct cnode_s *n, struct cnode_s *kid)
{
	struct cnode_s **k = palloc(p->t, (size_t)(n->n_kid + 1) * sizeof(*k));

	if (!k)
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	if (n->n_kid)
		memcpy(k, n->kid, (size_t)n->n_kid * sizeof(*k));
	k[n->n_kid++] = kid;
	n->kid = k;
	return FERRY_OK;
}

static ferry_status add_kw(struct parser *p, struct cnode_s *n, const char *name,
			   size_t len, struct cnode_s *v)
{
	const char **kw = palloc(p->t, (size_t)(n->n_kw + 1) * sizeof(*kw));
	struct cnode_s **kwv = palloc(p->t, (size_t)(n->n_kw + 1) * sizeof(*kwv));
	char *s = palloc(p->t, len + 1);

	if (!kw || !kwv || !s)
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	memcpy(s, name, len);
	if (n->n_kw) {
		memcpy(kw, n->kw, (size_t)n->n_kw * sizeof(*kw));
		memcpy(kwv, n->kwv, (size_t)n->n_kw * sizeof(*kwv));
	}
	kw[n->n_kw] = s;
	kwv[n->n_kw++] = v;
	n->kw = kw;
	n->kwv = kwv;
	return FERRY_OK;
}

#define NOMEM(x) do { if (!(x)) return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory"); } while (0)
#define TRY(x) do { ferry_status st_ = (x); if (st_) return st_; } while (0)

static ferry_status parse_expr(struct parser *p, struct cnode_s **out);
static ferry_status parse_or(struct parser *p, struct cnode_s **out);
static ferry_status parse_unary(struct parser *p, bool with_filter, struct cnode_s **out);

/* `(a, b=c)`: the arguments of a call, filter or test into n. */
static ferry_status parse_args(struct parser *p, struct cnode_s *n)
{
	TRY(expect_op(p, "("));
	while (!is_op(peek(p), ")")) {
		struct cnode_s *v;

		if (peek(p)->kind == CT_NAME && is_op(&p->t->toks.t[p->at + 1], "=")) {
			const struct ctoken *name = next(p);

			next(p);
			TRY(parse_expr(p, &v));
			TRY(add_kw(p, n, name->p, name->n, v));
		} else {
			TRY(parse_expr(p, &v));
			TRY(add_kid(p, n, v));
		}
		if (!is_op(peek(p), ","))
			break;
		next(p);
	}
	return expect_op(p, ")");
}

static ferry_status parse_list_or_dict(struct parser *p, bool dict, struct cnode_s **out)
{
	const struct ctoken *open = next(p);
	struct cnode_s *n = node(p, dict ? N_DICT : N_LIST, open->line);

	NOMEM(n);
	while (!is_op(peek(p), dict ? "}" : "]")) {
		struct cnode_s *v;

		TRY(parse_expr(p, &v));
		TRY(add_kid(p, n, v));
		if (dict) {
			TRY(expect_op(p, ":"));
			TRY(parse_expr(p, &v));
			TRY(add_kid(p, n, v));
		}
		if (!is_op(peek(p), ","))
			break;
		next(p);
	}
	TRY(expect_op(p, dict ? "}" : "]"));
	*out = n;
	return FERRY_OK;
}

static ferry_status parse_primary(struct parser *p, struct cnode_s **out)
{
	const struct ctoken *tk = peek(p);
	struct cnode_s *n = NULL;

	if (tk->kind == CT_STRING) {
		n = node(p, N_CONST_STR, tk->line);
		NOMEM(n);
		/* adjacent literals join, as in Python */
		size_t len = 0;
		for (size_t k = p->at; p->t->toks.t[k].kind == CT_STRING; k++)
			len += p->t->toks.t[k].n;
		char *s = palloc(p->t, len + 1);
		NOMEM(s);
		n->s = s;
		while (peek(p)->kind == CT_STRING) {
			tk = next(p);
			memcpy(s + n->sn, tk->p, tk->n);
			n->sn += tk->n;
		}
	} else if (tk->kind == CT_INT || tk->kind == CT_FLOAT) {
		next(p);
		n = node(p, tk->kind == CT_INT ? N_CONST_INT : N_CONST_FLOAT, tk->line);
		NOMEM(n);
		n->i = tk->i;
		n->f = tk->f;
	} else if (tk->kind == CT_NAME) {
		next(p);
		if (is_name(tk, "true") || is_name(tk, "True") || is_name(tk, "false") ||
		    is_name(tk, "False")) {
			n = node(p, N_CONST_BOOL, tk->line);
			NOMEM(n);
			n->i = tk->p[0] == 't' || tk->p[0] == 'T';
		} else if (is_name(tk, "none") || is_name(tk, "None")) {
			n = node(p, N_CONST_NONE, tk->line);
			NOMEM(n);
		} else {
			n = node(p, N_NAME, tk->line);
			NOMEM(n);
			n->s = tk->p;
			n->sn = tk->n;
		}
	} else if (is_op(tk, "(")) {
		next(p);
		TRY(parse_expr(p, &n));
		if (is_op(peek(p), ","))
			return fail(peek(p), "tuples are outside the subset ferry interprets");
		TRY(expect_op(p, ")"));
	} else if (is_op(tk, "[") || is_op(tk, "{")) {
		TRY(parse_list_or_dict(p, is_op(tk, "{"), &n));
	} else {
		return fail(tk, "expected a value");
	}
	*out = n;
	return FERRY_OK;
}

/* x[a], x[a:b:c] */
static ferry_status parse_subscript(struct parser *p, struct cnode_s *obj, struct cnode_s **out)
{
	const struct ctoken *open = next(p);
	struct cnode_s *parts[3] = { NULL, NULL, NULL };
	int k = 0;
	bool slice = false;

	for (;;) {
		if (!is_op(peek(p), ":") && !is_op(peek(p), "]"))
			TRY(parse_expr(p, &parts[k]));
		if (!is_op(peek(p), ":") || k == 2)
			break;
		next(p);
		slice = true;
		k++;
	}
	TRY(expect_op(p, "]"));
	struct cnode_s *n = node(p, slice ? N_SLICE : N_INDEX, open->line);

	NOMEM(n);
	TRY(add_kid(p, n, obj));
	for (int j = 0; j < (slice ? 3 : 1); j++)
		TRY(add_kid(p, n, parts[j]));
	if (!slice && !parts[0])
		return fail(open, "an empty subscript");
	*out = n;
	return FERRY_OK;
}

static ferry_status parse_postfix(struct parser *p, struct cnode_s **io)
{
	for (;;) {
		const struct ctoken *tk = peek(p);

		if (is_op(tk, ".")) {
			next(p);
			const struct ctoken *name = next(p);
			struct cnode_s *n = node(p, N_ATTR, name->line);

			NOMEM(n);
			if (name->kind != CT_NAME && name->kind != CT_INT)
				return fail(name, "expected an attribute name");
			n->s = name->p;
			n->sn = name->n;
			TRY(add_kid(p, n, *io));
			*io = n;
		} else if (is_op(tk, "[")) {
			TRY(parse_subscript(p, *io, io));
		} else if (is_op(tk, "(")) {
			struct cnode_s *n = node(p, N_CALL, tk->line);

			NOMEM(n);
			TRY(add_kid(p, n, *io));
			TRY(parse_args(p, n));
			*io = n;
		} else {
			return FERRY_OK;
		}
	}
}

/* `| name(args)` and `is [not] name [arg]` after a value. */
static ferry_status parse_filters(struct parser *p, struct cnode_s **io)
{
	for (;;) {
		const struct ctoken *tk = peek(p);
		bool test = is_name(tk, "is");

		if (!test && !is_op(tk, "|"))
			return FERRY_OK;
		next(p);
		struct cnode_s *n = node(p, test ? N_TEST : N_FILTER, tk->line);

		NOMEM(n);
		if (test && is_name(peek(p), "not")) {
			next(p);
			n->negate = true;
		}
		const struct ctoken *name = next(p);

		if (name->kind != CT_NAME && !(test && (is_name(name, "none") || is_name(name, "true"))))
			return fail(name, test ? "expected a test name" : "expected a filter name");
		if (test ? !ferry_chat_known_test(name->p, name->n)
			 : !ferry_chat_known_filter(name->p, name->n))
			return ferry_error(FERRY_ERR_UNSUPPORTED,
					   "chat template line %d: the %s '%.*s' is outside the subset ferry interprets",
					   name->line, test ? "test" : "filter", (int)name->n, name->p);
		n->s = name->p;
		n->sn = name->n;
		TRY(add_kid(p, n, *io));
		if (is_op(peek(p), "(")) {
			TRY(parse_args(p, n));
		} else if (test) {
			const struct ctoken *a = peek(p);

			/* `is equalto 3`, `is sameas x`: one argument, no parentheses */
			if (a->kind == CT_STRING || a->kind == CT_INT || a->kind == CT_FLOAT ||
			    (a->kind == CT_NAME && !is_name(a, "and") && !is_name(a, "or") &&
			     !is_name(a, "else") && !is_name(a, "if") && !is_name(a, "in") &&
			     !is_name(a, "is") && !is_name(a, "not"))) {
				struct cnode_s *v;

				TRY(parse_primary(p, &v));
				TRY(parse_postfix(p, &v));
				TRY(add_kid(p, n, v));
			}
		}
		*io = n;
	}
}

static ferry_status parse_unary(struct parser *p, bool with_filter, struct cnode_s **out)
{
	const struct ctoken *tk = peek(p);

	if (is_op(tk, "-") || is_op(tk, "+")) {
		next(p);
		struct cnode_s *n = node(p, N_UNARY, tk->line), *v;

		NOMEM(n);
		n->s = tk->p;
		n->sn = 1;
		TRY(parse_unary(p, false, &v));
		TRY(add_kid(p, n, v));
		*out = n;
	} else {
		TRY(parse_primary(p, out));
	}
	TRY(parse_postfix(p, out));
	return with_filter ? parse_filters(p, out) : FERRY_OK;
}

static ferry_status binary(struct parser *p, const struct ctoken *op, struct cnode_s *a,
			   struct cnode_s *b, struct cnode_s **out)
{
	struct cnode_s *n = node(p, N_BINARY, op->line);

	NOMEM(n);
	n->s = op->p;
	n->sn = op->n;
	TRY(add_kid(p, n, a));
	TRY(add_kid(p, n, b));
	*out = n;
	return FERRY_OK;
}

static ferry_status parse_pow(struct parser *p, struct cnode_s **out)
{
	TRY(parse_unary(p, true, out));
	while (is_op(peek(p), "**")) {
		const struct ctoken *op = next(p);
		struct cnode_s *b;

		TRY(parse_unary(p, true, &b));
		TRY(binary(p, op, *out, b, out));
	}
	return FERRY_OK;
}

static ferry_status parse_mul(struct parser *p, struct cnode_s **out)
{
	TRY(parse_pow(p, out));
	while (is_op(peek(p), "*") || is_op(peek(p), "/") || is_op(peek(p), "//") ||
	       is_op(peek(p), "%")) {
		const struct ctoken *op = next(p);
		struct cnode_s *b;

		TRY(parse_pow(p, &b));
		TRY(binary(p, op, *out, b, out));
	}
	return FERRY_OK;
}

static ferry_status parse_concat(struct parser *p, struct cnode_s **out)
{
	TRY(parse_mul(p, out));
	while (is_op(peek(p), "~")) {
		const struct ctoken *op = next(p);
		struct cnode_s *b;

		TRY(parse_mul(p, &b));
		TRY(binary(p, op, *out, b, out));
	}
	return FERRY_OK;
}

static ferry_status parse_add(struct parser *p, struct cnode_s **out)
{
	TRY(parse_concat(p, out));
	while (is_op(peek(p), "+") || is_op(peek(p), "-")) {
		const struct ctoken *op = next(p);
		struct cnode_s *b;

		TRY(parse_concat(p, &b));
		TRY(binary(p, op, *out, b, out));
	}
	return FERRY_OK;
}

static ferry_status parse_compare(struct parser *p, struct cnode_s **out)
{
	TRY(parse_add(p, out));
	for (;;) {
		const struct ctoken *op = peek(p);
		bool neg = false;

		if (is_name(op, "not") && is_name(&p->t->toks.t[p->at + 1], "in")) {
			next(p);
			neg = true;
			op = peek(p);
		} else if (!is_op(op, "==") && !is_op(op, "!=") && !is_op(op, "<") &&
			   !is_op(op, "<=") && !is_op(op, ">") && !is_op(op, ">=") &&
			   !is_name(op, "in")) {
			return FERRY_OK;
		}
		next(p);
		struct cnode_s *b;

		TRY(parse_add(p, &b));
		TRY(binary(p, op, *out, b, out));
		(*out)->negate = neg;
	}
}

static ferry_status parse_not(struct parser *p, struct cnode_s **out)
{
	if (is_name(peek(p), "not")) {
		const struct ctoken *tk = next(p);
		struct cnode_s *n = node(p, N_NOT, tk->line), *v;

		NOMEM(n);
		TRY(parse_not(p, &v));
		TRY(add_kid(p, n, v));
		*out = n;
		return FERRY_OK;
	}
	return parse_compare(p, out);
}

/* operand (word operand)*, left-associative: `and`, `or` */
static ferry_status parse_left(struct parser *p, struct cnode_s **out, const char *word, enum cnode kind,
			       ferry_status (*operand)(struct parser *, struct cnode_s **))
{
	TRY(operand(p, out));
	while (is_name(peek(p), word)) {
		const struct ctoken *tk = next(p);
		struct cnode_s *n = node(p, kind, tk->line), *b;

		NOMEM(n);
		TRY(operand(p, &b));
		TRY(add_kid(p, n, *out));
		TRY(add_kid(p, n, b));
		*out = n;
	}
	return FERRY_OK;
}

static ferry_status parse_and(struct parser *p, struct cnode_s **out)
{
	return parse_left(p, out, "and", N_AND, parse_not);
}

static ferry_status parse_or(struct parser *p, struct cnode_s **out)
{
	return parse_left(p, out, "or", N_OR, parse_and);
}

/* `a if c else b` (no else: undefined) */
static ferry_status parse_expr(struct parser *p, struct cnode_s **out)
{
	TRY(parse_or(p, out));
	while (is_name(peek(p), "if")) {
		const struct ctoken *tk = next(p);
		struct cnode_s *n = node(p, N_COND, tk->line), *c, *e = NULL;

		NOMEM(n);
		TRY(parse_or(p, &c));
		if (is_name(peek(p), "else")) {
			next(p);
			TRY(parse_expr(p, &e));
		}
		TRY(add_kid(p, n, c));
		TRY(add_kid(p, n, *out));
		TRY(add_kid(p, n, e));
		*out = n;
	}
	return FERRY_OK;
}

/* ---- statements ---- */

static ferry_status parse_body(struct parser *p, const char *const *stops, struct cnode_s **out);

static ferry_status block_end(struct parser *p)
{
	if (peek(p)->kind != CT_BLOCK_END)
		return fail(peek(p), "expected the end of the tag (%})");
	next(p);
	return FERRY_OK;
}

/* After `{% name`, at the stop word's name. */
static const struct ctoken *stop_word(struct parser *p)
{
	return &p->t->toks.t[p->at + 1];
}

static ferry_status parse_if(struct parser *p, int line, struct cnode_s **out)
{
	static const char *const stops[] = { "elif", "else", "endif", NULL };
	struct cnode_s *n = node(p, N_IF, line), *c;

	NOMEM(n);
	TRY(parse_expr(p, &c));
	TRY(add_kid(p, n, c));
	TRY(block_end(p));
	TRY(parse_body(p, stops, &n->body));
	next(p); /* {% */
	const struct ctoken *w = next(p);

	if (is_name(w, "elif")) {
		TRY(parse_if(p, w->line, &n->else_));
	} else {
		if (is_name(w, "else")) {
			static const char *const end[] = { "endif", NULL };

			TRY(block_end(p));
			TRY(parse_body(p, end, &n->else_));
			next(p);
			next(p);
		}
		TRY(block_end(p));
	}
	*out = n;
	return FERRY_OK;
}

static ferry_status parse_for(struct parser *p, int line, struct cnode_s **out)
{
	static const char *const stops[] = { "else", "endfor", NULL };
	struct cnode_s *n = node(p, N_FOR, line), *it, *cond = NULL;
	const char **vars = palloc(p->t, 8 * sizeof(*vars));

	NOMEM(n);
	NOMEM(vars);
	n->vars = vars;
	for (;;) {
		const struct ctoken *v = next(p);
		char *s;

		if (v->kind != CT_NAME || n->n_vars == 8)
			return fail(v, "expected a loop variable");
		s = palloc(p->t, v->n + 1);
		NOMEM(s);
		memcpy(s, v->p, v->n);
		vars[n->n_vars++] = s;
		if (!is_op(peek(p), ","))
			break;
		next(p);
	}
	if (!is_name(peek(p), "in"))
		return fail(peek(p), "expected 'in'");
	next(p);
	TRY(parse_or(p, &it));
	if (is_name(peek(p), "if")) {
		next(p);
		TRY(parse_or(p, &cond));
	}
	if (is_name(peek(p), "recursive"))
		return fail(peek(p), "recursive loops are outside the subset ferry interprets");
	TRY(add_kid(p, n, it));
	TRY(add_kid(p, n, cond));
	TRY(block_end(p));
	TRY(parse_body(p, stops, &n->body));
	next(p);
	if (is_name(next(p), "else")) {
		static const char *const end[] = { "endfor", NULL };

		TRY(block_end(p));
		TRY(parse_body(p, end, &n->else_));
		next(p);
		next(p);
	}
	TRY(block_end(p));
	*out = n;
	return FERRY_OK;
}

static ferry_status parse_set(struct parser *p, int line, struct cnode_s **out)
{
	const struct ctoken *name = next(p);
	struct cnode_s *n, *v;

	if (name->kind != CT_NAME)
		return fail(name, "expected a name to set");
	if (is_op(peek(p), ".")) {
		next(p);
		const struct ctoken *attr = next(p);

		if (attr->kind != CT_NAME)
			return fail(attr, "expected an attribute name");
		n = node(p, N_SET_ATTR, line);
		NOMEM(n);
		n->s = attr->p;
		n->sn = attr->n;
		struct cnode_s *obj = node(p, N_NAME, line);

		NOMEM(obj);
		obj->s = name->p;
		obj->sn = name->n;
		TRY(add_kid(p, n, obj));
	} else {
		n = node(p, N_SET, line);
		NOMEM(n);
		n->s = name->p;
		n->sn = name->n;
		if (is_op(peek(p), ","))
			return fail(peek(p), "setting several names at once is outside the subset ferry interprets");
	}
	if (peek(p)->kind == CT_BLOCK_END)
		return fail(peek(p), "a set block ({% set x %}...{% endset %}) is outside the subset ferry interprets");
	TRY(expect_op(p, "="));
	TRY(parse_expr(p, &v));
	TRY(add_kid(p, n, v));
	TRY(block_end(p));
	*out = n;
	return FERRY_OK;
}

static bool in_list(const struct ctoken *tk, const char *const *names)
{
	for (; names && *names; names++)
		if (is_name(tk, *names))
			return true;
	return false;
}

static ferry_status parse_stmt(struct parser *p, struct cnode_s **out)
{
	const struct ctoken *w = next(p);
	int line = w->line;

	if (is_name(w, "if"))
		return parse_if(p, line, out);
	if (is_name(w, "for"))
		return parse_for(p, line, out);
	if (is_name(w, "set"))
		return parse_set(p, line, out);
	if (is_name(w, "break") || is_name(w, "continue")) {
		*out = node(p, is_name(w, "break") ? N_BREAK : N_CONTINUE, line);
		NOMEM(*out);
		return block_end(p);
	}
	if (is_name(w, "generation")) { /* transformers' assistant-mask tag: its body */
		static const char *const end[] = { "endgeneration", NULL };

		TRY(block_end(p));
		TRY(parse_body(p, end, out));
		next(p);
		next(p);
		return block_end(p);
	}
	if (w->kind == CT_NAME)
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "chat template line %d: '%.*s' is outside the subset ferry interprets",
				   line, (int)w->n, w->p);
	return fail(w, "expected a statement");
}

static ferry_status parse_body(struct parser *p, const char *const *stops, struct cnode_s **out)
{
	struct cnode_s *body = node(p, N_BODY, peek(p)->line);

	NOMEM(body);
	for (;;) {
		const struct ctoken *tk = peek(p);
		struct cnode_s *n = NULL;

		if (tk->kind == CT_EOF) {
			if (stops)
				return ferry_error(FERRY_ERR_FORMAT,
						   "chat template: the block opened before line %d is not closed ({%% %s %%} missing)",
						   body->line, stops[0]);
			break;
		}
		if (tk->kind == CT_TEXT) {
			next(p);
			n = node(p, N_TEXT, tk->line);
			NOMEM(n);
			n->s = tk->p;
			n->sn = tk->n;
		} else if (tk->kind == CT_VAR_BEGIN) {
			next(p);
			n = node(p, N_OUTPUT, tk->line);
			NOMEM(n);
			struct cnode_s *v;

			TRY(parse_expr(p, &v));
			TRY(add_kid(p, n, v));
			if (peek(p)->kind != CT_VAR_END)
				return fail(peek(p), "expected the end of the output tag (}})");
			next(p);
		} else if (tk->kind == CT_BLOCK_BEGIN) {
			if (in_list(stop_word(p), stops))
				break;
			const struct ctoken *w = stop_word(p);

			if (w->kind == CT_NAME && w->n > 3 && (!memcmp(w->p, "end", 3) ||
							       is_name(w, "elif") || is_name(w, "else")))
				return fail(w, "a tag that closes nothing open here");
			next(p);
			TRY(parse_stmt(p, &n));
		} else {
			return fail(tk, "unexpected");
		}
		TRY(add_kid(p, body, n));
	}
	*out = body;
	return FERRY_OK;
}

ferry_status ferry_chat_parse(struct ctemplate *t)
{
	struct parser p = { .t = t };

	return parse_body(&p, NULL, &t->root);
}

void ferry_chat_tree_free(struct ctemplate *t)
{
	for (size_t i = 0; i < t->n_allocs; i++)
		free(t->allocs[i]);
	free(t->allocs);
	t->allocs = NULL;
	t->n_allocs = t->cap_allocs = 0;
	t->root = NULL;
}
