/*
 * Where each token's text lies in the input (ferry_tokenizer_encode_offsets):
 * the tokens' own bytes, as ferry_tokenizer_decode prints them (a special
 * token: its content), are matched against the input front to back.
 * Whitespace an added token's lstrip/rstrip swallowed joins that token;
 * a leading space a Metaspace or Prepend normalizer added is no input
 * byte, so the token holding it starts where its other bytes do.  A
 * tokenizer whose normalizer changes the text otherwise (lowercasing, NFKC
 * that rewrites characters) cannot say this and is refused.
 */
#include "ferry/tokenizer.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool starts_at(const char *text, size_t len, size_t at, const char *p, size_t n)
{
	return at + n <= len && !memcmp(text + at, p, n);
}

/* The bytes of token id: printed (ordinary) or its content (special). */
static ferry_status token_bytes(ferry_tokenizer_t tok, int32_t id, char **own, const char **p,
				size_t *n)
{
	int len = 0;

	*own = NULL;
	*p = ferry_tokenizer_decode(tok, id, &len);
	*n = (size_t)len;
	if (*p)
		return FERRY_OK;
	ferry_status st = ferry_tokenizer_decode_ids(tok, &id, 1, false, own, n);

	*p = *own;
	return st;
}

/* A token of no input bytes (a Metaspace or Prepend normalizer's '▁'
 * before a space another token holds) covers what its neighbour does, as
 * `tokenizers` aligns an added character with the input character it
 * stands before: the previous token's bytes when that token ends here,
 * else the next character. */
static void zero_width(struct ferry_token_span *sp, size_t i, const char *text, size_t len)
{
	size_t at = sp[i].start, n = at < len ? 1 : 0;

	if (i > 0 && sp[i - 1].end == at) {
		sp[i] = sp[i - 1];
		return;
	}
	while (at + n < len && ((unsigned char)text[at + n] & 0xC0) == 0x80)
		n++;
	sp[i].end = at + n;
}

ferry_status ferry_tokenizer_encode_offsets(ferry_tokenizer_t tok, const char *text, size_t len,
					    struct ferry_token_buf *out,
					    struct ferry_token_span **spans)
{
	size_t first = out->n, at = 0;
	ferry_status st = ferry_tokenizer_encode(tok, text, len, 0, out);
	struct ferry_token_span *sp;

	*spans = NULL;
	if (st)
		return st;
	sp = calloc(out->n - first + 1, sizeof(*sp));
	if (!sp)
		return ferry_error(FERRY_ERR_NOMEM, "token offsets: out of memory");
	for (size_t i = first; i < out->n && !st; i++) {
		struct ferry_token_span *s = &sp[i - first];
		const char *p;
		size_t n, skip = at;
		char *own;

		st = token_bytes(tok, out->ids[i], &own, &p, &n);
		if (st)
			break;
		while (skip < len && is_space(text[skip]) && !starts_at(text, len, at, p, n) &&
		       !(n && p[0] == ' ' && starts_at(text, len, at, p + 1, n - 1)))
			skip++;
		if (skip > at && !starts_at(text, len, skip, p, n))
			skip = at; /* the whitespace was not swallowed */
		if (starts_at(text, len, skip, p, n)) {
			s->start = at;
			s->end = skip + n;
		} else if (n && p[0] == ' ' && starts_at(text, len, at, p + 1, n - 1)) {
			s->start = at;
			s->end = at + n - 1;
		} else {
			st = ferry_error(FERRY_ERR_UNSUPPORTED,
					 "token offsets: token %zu (id %d) does not spell the input at byte %zu (its normalizer changes the text)",
					 i - first, out->ids[i], at);
		}
		free(own);
		at = s->end;
		if (!st && s->start == s->end) /* all its bytes added: as tokenizers aligns them */
			zero_width(sp, i - first, text, len);
	}
	/* whitespace an rstrip swallowed at the very end */
	if (!st && at < len && out->n > first) {
		while (at < len && is_space(text[at]))
			at++;
		sp[out->n - first - 1].end = at;
	}
	if (!st && at != len)
		st = ferry_error(FERRY_ERR_UNSUPPORTED,
				 "token offsets: the tokens spell %zu of the input's %zu bytes", at, len);
	if (st) {
		free(sp);
		return st;
	}
	*spans = sp;
	return FERRY_OK;
}
