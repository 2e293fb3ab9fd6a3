/*
 * Internal: the chat-template interpreter (a Jinja subset).  The lexer
 * (lexer.c) turns a template into tokens with Jinja's whitespace rules as
 * transformers sets them (trim_blocks, lstrip_blocks); the parser
 * (parser.c) builds a tree and refuses what the subset lacks, by name and
 * line, before anything renders; the evaluator (eval.c, with the values,
 * filters and methods of builtins.c) renders the tree.  Every value of a
 * render lives in one arena freed at its end.
 */
#ifndef FERRY_CHAT_IMPL_H
#define FERRY_CHAT_IMPL_H

#include "ferry/ferry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- tokens ---- */
enum ctok {
	CT_EOF, CT_TEXT, CT_VAR_BEGIN, CT_VAR_END, CT_BLOCK_BEGIN, CT_BLOCK_END,
	CT_NAME, CT_STRING, CT_INT, CT_FLOAT, CT_OP
};

struct ctoken {
	enum ctok kind;
	int line;
	const char *p;	/* name, op or text (strings: the unescaped value) */
	size_t n;
	long long i;
	double f;
};

struct ctokens {
	struct ctoken *t;
	size_t n, cap;
	char *strs;	/* unescaped string literals, back to back */
};

ferry_status ferry_chat_lex(const char *src, size_t n, struct ctokens *out)
	FERRY_MUST_CHECK;
void ferry_chat_tokens_free(struct ctokens *t);

/* ---- the tree ---- */
enum cnode {
	/* expressions */
	N_CONST_STR, N_CONST_INT, N_CONST_FLOAT, N_CONST_BOOL, N_CONST_NONE,
	N_NAME, N_ATTR, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST,
	N_LIST, N_DICT, N_UNARY, N_BINARY, N_AND, N_OR, N_NOT, N_COND,
	/* statements */
	N_TEXT, N_OUTPUT, N_BODY, N_IF, N_FOR, N_SET, N_SET_ATTR, N_BREAK,
	N_CONTINUE
};

struct cnode_s {
	enum cnode kind;
	int line;
	const char *s;		/* name, op, filter, test, text, attribute */
	size_t sn;
	long long i;
	double f;
	bool negate;		/* `is not`, `not in` */
	struct cnode_s **kid;	/* operands, arguments, statements */
	int n_kid;
	/* keyword arguments of calls and filters: names and values */
	const char **kw;
	struct cnode_s **kwv;
	int n_kw;
	/* for: the loop variables */
	const char **vars;
	int n_vars;
	/* if: kid[0] the condition, then `then`; else_ the rest.
	 * for: kid[0] the iterable, kid[1] the filter (or NULL), body, else_ */
	struct cnode_s *body, *else_;
};

struct ctemplate {
	char *src;		/* owned copy the tokens point into */
	struct ctokens toks;
	struct cnode_s *root;
	void **allocs;		/* every node and array of the tree, for freeing */
	size_t n_allocs, cap_allocs;
};

ferry_status ferry_chat_parse(struct ctemplate *t) FERRY_MUST_CHECK;
void ferry_chat_tree_free(struct ctemplate *t);

/* ---- values ---- */
enum cval {
	V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT,
	V_FUNC
};

struct cvalue;
struct cdict;
struct clist;

typedef struct cvalue {
	enum cval kind;
	bool ns;		/* a dict made by namespace(): attributes set */
	long long i;		/* bool, int */
	double f;
	const char *s;		/* str: bytes (UTF-8), not NUL-ended */
	size_t n;
	struct clist *list;
	struct cdict *dict;
	int func;		/* builtin function or method number */
	const struct cvalue *self; /* a method's object */
} cvalue;

struct clist {
	cvalue *v;
	size_t n, cap;
};

struct cdict {
	cvalue *key, *val;
	size_t n, cap;
};

/* One render's state (eval.c). */
struct crender;

void *ferry_chat_alloc(struct crender *r, size_t n);
cvalue ferry_chat_str(struct crender *r, const char *s, size_t n);
cvalue ferry_chat_cstr(const char *s);
cvalue ferry_chat_new_list(struct crender *r);
cvalue ferry_chat_new_dict(struct crender *r);
ferry_status ferry_chat_list_push(struct crender *r, struct clist *l, cvalue v)
	FERRY_MUST_CHECK;
ferry_status ferry_chat_dict_set(struct crender *r, struct cdict *d, cvalue k,
				 cvalue v) FERRY_MUST_CHECK;
const cvalue *ferry_chat_dict_get(const struct cdict *d, const char *k, size_t n);
bool ferry_chat_truthy(const cvalue *v);
bool ferry_chat_equal(const cvalue *a, const cvalue *b);
/* Python's str() of v, appended to the render's scratch string. */
ferry_status ferry_chat_to_str(struct crender *r, const cvalue *v, cvalue *out)
	FERRY_MUST_CHECK;
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none)). */
ferry_status ferry_chat_to_json(struct crender *r, const cvalue *v, int indent,
				cvalue *out) FERRY_MUST_CHECK;
ferry_status ferry_chat_fail(struct crender *r, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Filters, tests, global functions and methods (builtins.c).  Names the
 * subset knows, for the parser's refusals: */
bool ferry_chat_known_filter(const char *name, size_t n);
bool ferry_chat_known_test(const char *name, size_t n);
ferry_status ferry_chat_filter(struct crender *r, const struct cnode_s *node,
			       cvalue in, const cvalue *args, int n_args,
			       const char *const *kw, const cvalue *kwv,
			       int n_kw, cvalue *out) FERRY_MUST_CHECK;
ferry_status ferry_chat_test(struct crender *r, const struct cnode_s *node,
			     cvalue in, const cvalue *args, int n_args,
			     bool *out) FERRY_MUST_CHECK;
/* obj.name: a method bound to obj (V_FUNC), or V_UNDEF when none. */
cvalue ferry_chat_method(const cvalue *obj, const char *name, size_t n);
/* A global function by name (V_FUNC), or V_UNDEF. */
cvalue ferry_chat_global(const char *name, size_t n);
ferry_status ferry_chat_call(struct crender *r, int line, const cvalue *fn,
			     const cvalue *args, int n_args,
			     const char *const *kw, const cvalue *kwv, int n_kw,
			     cvalue *out) FERRY_MUST_CHECK;

/* Renders t with the variables names[0..n_vals), whose values make() fills
 * in (in the render's arena); *out allocated (free()), *len its bytes. */
ferry_status ferry_chat_eval(const struct ctemplate *t, const char *const *names,
			     int n_vals,
			     ferry_status (*make)(struct crender *r, void *ctx,
						  cvalue *vals),
			     void *ctx, char **out, size_t *len) FERRY_MUST_CHECK;

/* UTF-8: the number of code points in s[0..n), and the byte offset of
 * code point k. */
size_t ferry_chat_utf8_len(const char *s, size_t n);
size_t ferry_chat_utf8_at(const char *s, size_t n, size_t k);

#endif
