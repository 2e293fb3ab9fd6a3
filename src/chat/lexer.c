/*
 * The chat-template lexer: text, {{ }}, {% %} and {# #} with Jinja's
 * whitespace control as transformers renders chat templates:
 * trim_blocks (the first newline after a block or comment tag goes),
 * lstrip_blocks (spaces and tabs from a line's start to a block or comment
 * tag go, unless the tag opens with `+`), `-` on either side of any tag
 * strips all whitespace on that side, and one newline that ends the
 * template goes (keep_trailing_newline off).
 */
#include "chat/chat_impl.h"
#include "core/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static ferry_status push(struct ctokens *t, struct ctoken tk)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		struct ctoken *p = realloc(t->t, cap * sizeof(*p));

		if (!p)
			return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
		t->t = p;
		t->cap = cap;
	}
	t->t[t->n++] = tk;
	return FERRY_OK;
}

static int count_lines(const char *s, size_t n)
{
	int k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static const char *const OPS[] = {
	"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
	">", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 63));
		return 2;
	}
	o[0] = (char)(0xE0 | cp >> 12);
	o[1] = (char)(0x80 | ((cp >> 6) & 63));
	o[2] = (char)(0x80 | (cp & 63));
	return 3;
}

/* A quoted literal at s[*i] into strs (Python escapes). */
static ferry_status lex_string(const char *s, size_t n, size_t *i, int line,
			       char *strs, size_t *used, struct ctoken *tk)
{
	char q = s[(*i)++];
	size_t start = *used;

	while (*i < n && s[*i] != q) {
		char c = s[(*i)++];

		if (c == '\\' && *i < n) {
			char e = s[(*i)++];
			unsigned cp = 0;

			switch (e) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case '0': c = '\0'; break;
			case '\\': case '\'': case '"': c = e; break;
			case 'u':
				for (int k = 0; k < 4 && *i < n && hexval(s[*i]) >= 0; k++)
					cp = cp * 16 + (unsigned)hexval(s[(*i)++]);
				*used += put_utf8(strs + *used, cp);
				continue;
			default:
				strs[(*used)++] = '\\';
				c = e;
			}
		}
		strs[(*used)++] = c;
	}
	if (*i >= n)
		return ferry_error(FERRY_ERR_FORMAT,
				   "chat template line %d: a string is not closed", line);
	(*i)++;
	tk->kind = CT_STRING;
	tk->i = (long long)start; /* fixed up to a pointer at the end */
	tk->n = *used - start;
	return FERRY_OK;
}

static void lex_number(const char *s, size_t n, size_t *i, struct ctoken *tk)
{
	size_t a = *i;
	bool flt = false;

	while (*i < n && (isdigit((unsigned char)s[*i]) || s[*i] == '_'))
		(*i)++;
	if (*i + 1 < n && s[*i] == '.' && isdigit((unsigned char)s[*i + 1])) {
		flt = true;
		for ((*i)++; *i < n && isdigit((unsigned char)s[*i]); (*i)++)
			;
	}
	if (*i < n && (s[*i] == 'e' || s[*i] == 'E')) {
		size_t j = *i + 1;

		if (j < n && (s[j] == '+' || s[j] == '-'))
			j++;
		if (j < n && isdigit((unsigned char)s[j])) {
			flt = true;
			for (*i = j; *i < n && isdigit((unsigned char)s[*i]); (*i)++)
				;
		}
	}
	char buf[64];
	size_t k = 0;

	for (size_t j = a; j < *i && k < sizeof(buf) - 1; j++)
		if (s[j] != '_')
			buf[k++] = s[j];
	buf[k] = 0;
	tk->kind = flt ? CT_FLOAT : CT_INT;
	tk->p = s + a;
	tk->n = *i - a;
	tk->i = strtoll(buf, NULL, 10);
	tk->f = strtod(buf, NULL);
}

/* The tokens of one tag's inside, from *i to its closing `}}` or `%}`
 * (`-` before it: *strip_after). */
static ferry_status lex_tag(const char *s, size_t n, size_t *i, int *line,
			    bool block, struct ctokens *out, char *strs,
			    size_t *used, bool *strip_after)
{
	char close = block ? '%' : '}';
	int depth = 0;

	for (;;) {
		struct ctoken tk = { .line = *line };

		while (*i < n && is_ws(s[*i]))
			*line += s[(*i)++] == '\n';
		tk.line = *line;
		if (*i >= n)
			return ferry_error(FERRY_ERR_FORMAT,
					   "chat template line %d: a %s tag is not closed",
					   *line, block ? "{%" : "{{");
		if (depth == 0 && s[*i] == '-' && *i + 2 < n + 0 &&
		    s[*i + 1] == close && s[*i + 2] == '}') {
			*i += 3;
			*strip_after = true;
			return FERRY_OK;
		}
		if (depth == 0 && *i + 1 < n && s[*i] == close && s[*i + 1] == '}') {
			*i += 2;
			*strip_after = false;
			return FERRY_OK;
		}
		char c = s[*i];
		ferry_status st;

		if (c == '"' || c == '\'') {
			st = lex_string(s, n, i, *line, strs, used, &tk);
			if (st)
				return st;
		} else if (isdigit((unsigned char)c)) {
			lex_number(s, n, i, &tk);
		} else if (isalpha((unsigned char)c) || c == '_') {
			size_t a = *i;

			while (*i < n && (isalnum((unsigned char)s[*i]) || s[*i] == '_'))
				(*i)++;
			tk.kind = CT_NAME;
			tk.p = s + a;
			tk.n = *i - a;
		} else {
			size_t k;

			for (k = 0; k < sizeof(OPS) / sizeof(OPS[0]); k++) {
				size_t l = strlen(OPS[k]);

				if (*i + l <= n && !memcmp(s + *i, OPS[k], l))
					break;
			}
			if (k == sizeof(OPS) / sizeof(OPS[0]))
				return ferry_error(FERRY_ERR_FORMAT,
						   "chat template line %d: unexpected character '%c'",
						   *line, c);
			tk.kind = CT_OP;
			tk.p = s + *i;
			tk.n = strlen(OPS[k]);
			*i += tk.n;
			if (tk.n == 1 && (c == '(' || c == '[' || c == '{'))
				depth++;
			if (tk.n == 1 && (c == ')' || c == ']' || c == '}') && depth > 0)
				depth--;
		}
		st = push(out, tk);
		if (st)
			return st;
	}
}

/* Text s[a..b) as a token, lstripped/rstripped as the tags around say. */
static ferry_status text_token(struct ctokens *out, const char *s, size_t a,
			       size_t b, int line)
{
	struct ctoken tk = { .kind = CT_TEXT, .line = line, .p = s + a, .n = b - a };

	return b > a ? push(out, tk) : FERRY_OK;
}

/* Where the text s[a..b) ends once a tag at b strips before it. */
static size_t strip_before(const char *s, size_t a, size_t b, bool minus,
			   bool lstrip)
{
	if (minus) {
		while (b > a && is_ws(s[b - 1]))
			b--;
		return b;
	}
	if (lstrip) {
		size_t j = b;

		while (j > 0 && (s[j - 1] == ' ' || s[j - 1] == '\t'))
			j--;
		if ((j == 0 || s[j - 1] == '\n') && j >= a)
			return j;
	}
	return b;
}

/* Past a comment's end from s[*i]; *strip_after: it ended with `-#}`. */
static ferry_status skip_comment(const char *s, size_t n, size_t *i, int *line, bool *strip_after)
{
	for (size_t j = *i; j + 1 < n; j++)
		if (s[j] == '#' && s[j + 1] == '}') {
			*strip_after = j > *i && s[j - 1] == '-';
			*line += count_lines(s + *i, j - *i);
			*i = j + 2;
			return FERRY_OK;
		}
	return ferry_error(FERRY_ERR_FORMAT, "chat template line %d: a {# comment is not closed", *line);
}

ferry_status ferry_chat_lex(const char *s, size_t n, struct ctokens *out)
{
	size_t i = 0, used = 0;
	int line = 1;
	bool skip_ws = false, skip_nl = false;
	ferry_status st = FERRY_OK;

	memset(out, 0, sizeof(*out));
	out->strs = malloc(n + 1);
	if (!out->strs)
		return ferry_error(FERRY_ERR_NOMEM, "chat template: out of memory");
	if (n && s[n - 1] == '\n') /* keep_trailing_newline off */
		n--;
	while (i < n && !st) {
		size_t a = i, b;

		if (skip_ws)
			while (a < n && is_ws(s[a]))
				a++;
		else if (skip_nl && a < n && s[a] == '\n')
			a++;
		else if (skip_nl && a + 1 < n && s[a] == '\r' && s[a + 1] == '\n')
			a += 2;
		line += count_lines(s + i, a - i);
		for (b = a; b + 1 < n; b++)
			if (s[b] == '{' && (s[b + 1] == '{' || s[b + 1] == '%' || s[b + 1] == '#'))
				break;
		if (b + 1 >= n) {
			st = text_token(out, s, a, n, line);
			break;
		}
		char kind = s[b + 1];
		bool minus = b + 2 < n && s[b + 2] == '-';
		bool plus = b + 2 < n && s[b + 2] == '+';
		size_t e = strip_before(s, a, b, minus, kind != '{' && !plus);

		st = text_token(out, s, a, e, line);
		line += count_lines(s + a, b - a);
		i = b + 2 + (minus || plus);
		if (st)
			break;
		if (kind == '#') {
			st = skip_comment(s, n, &i, &line, &skip_ws);
			skip_nl = !skip_ws;
			continue;
		}
		struct ctoken open = { .kind = kind == '{' ? CT_VAR_BEGIN : CT_BLOCK_BEGIN,
				       .line = line };

		st = push(out, open);
		if (!st)
			st = lex_tag(s, n, &i, &line, kind == '%', out, out->strs,
				     &used, &skip_ws);
		if (!st) {
			struct ctoken close = { .kind = kind == '{' ? CT_VAR_END : CT_BLOCK_END,
						.line = line };

			st = push(out, close);
		}
		skip_nl = kind == '%' && !skip_ws;
	}
	if (!st) {
		struct ctoken eof = { .kind = CT_EOF, .line = line };

		st = push(out, eof);
	}
	for (size_t k = 0; !st && k < out->n; k++)
		if (out->t[k].kind == CT_STRING)
			out->t[k].p = out->strs + out->t[k].i;
	if (st)
		ferry_chat_tokens_free(out);
	return st;
}

void ferry_chat_tokens_free(struct ctokens *t)
{
	free(t->t);
	free(t->strs);
	memset(t, 0, sizeof(*t));
}
