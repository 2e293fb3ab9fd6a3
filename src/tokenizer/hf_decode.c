/*
 * Decoding with a Hugging Face tokenizer: the ids' token strings (an added
 * token's content, else the vocab's) go through the decoders in order, each
 * turning a list of strings into another, as HF's decode_chain does, and the
 * last list is joined.
 *
 * Where HF makes text of bytes that are not UTF-8 (ByteLevel, ByteFallback)
 * it puts U+FFFD; here the bytes stay, so decoding inverts encoding on any
 * input.  On UTF-8 the two agree.
 */
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* A list of strings, back to back in one buffer. */
struct strs {
	struct tok_str buf;
	size_t *off, *len;
	int n, cap;
};

static ferry_status strs_add(struct strs *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 64;
		size_t *off = realloc(l->off, cap * sizeof(*off));
		size_t *len = off ? realloc(l->len, cap * sizeof(*len)) : NULL;

		if (off)
			l->off = off;
		if (!len)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory decoding %d tokens", cap);
		l->len = len;
		l->cap = cap;
	}
	l->off[l->n] = l->buf.n;
	l->len[l->n++] = n;
	return ferry_tok_str_add(&l->buf, s, n);
}

/* Extends the last string of l by s. */
static ferry_status strs_append(struct strs *l, const char *s, size_t n)
{
	l->len[l->n - 1] += n;
	return ferry_tok_str_add(&l->buf, s, n);
}

static void strs_free(struct strs *l)
{
	ferry_tok_str_free(&l->buf);
	free(l->off);
	free(l->len);
}

/* GPT-2's character -> byte (-1: not one of the 256). */
static int char_byte(unsigned cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) ||
	    (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp >= 256 && cp < 256 + 33)
		return (int)cp - 256;
	if (cp >= 256 + 33 && cp < 256 + 67)
		return (int)cp - 256 - 33 + 127;
	return cp == 256 + 67 ? 173 : -1;
}

/* HF keeps a token as it is when one of its characters is not in the map. */
static ferry_status dec_byte_level(const char *s, size_t n, struct strs *out)
{
	char stack[256], *b = n <= sizeof(stack) ? stack : malloc(n);
	size_t k = 0, at = 0;
	ferry_status st;

	if (!b)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory decoding");
	while (at < n) {
		unsigned char c = (unsigned char)s[at];
		unsigned cp = c;
		int byte;

		if (c >= 0xc0 && c < 0xe0 && at + 1 < n) {
			cp = ((c & 0x1fu) << 6) | ((unsigned char)s[at + 1] & 0x3fu);
			at++;
		} else if (c >= 0x80) {
			break;
		}
		at++;
		byte = char_byte(cp);
		if (byte < 0)
			break;
		b[k++] = (char)byte;
	}
	st = at == n ? strs_append(out, b, k) : strs_append(out, s, n);
	if (b != stack)
		free(b);
	return st;
}

static int hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static ferry_status replace_all(const char *s, size_t n, const char *pat,
				const char *with, struct strs *out)
{
	size_t pl = strlen(pat), wl = strlen(with), prev = 0;
	ferry_status st = strs_add(out, s, 0);

	for (size_t i = 0; pl && i + pl <= n && !st;) {
		if (memcmp(s + i, pat, pl)) {
			i++;
			continue;
		}
		st = strs_append(out, s + prev, i - prev);
		if (!st)
			st = strs_append(out, with, wl);
		i += pl;
		prev = i;
	}
	return st ? st : strs_append(out, s + prev, n - prev);
}

/* Strip: up to start copies of content off the front, stop off the end. */
static ferry_status dec_strip(const struct tok_dec *d, const char *s,
			      size_t n, struct strs *out)
{
	size_t cl = strlen(d->content);

	for (int k = 0; cl && k < d->start && n >= cl && !memcmp(s, d->content, cl); k++) {
		s += cl;
		n -= cl;
	}
	for (int k = 0; cl && k < d->stop && n >= cl &&
			!memcmp(s + n - cl, d->content, cl); k++)
		n -= cl;
	return strs_add(out, s, n);
}

static ferry_status dec_one(const struct tok_dec *d, int i, bool whole,
			    const char *s, size_t n, struct strs *out)
{
	ferry_status st;

	switch (d->kind) {
	case DEC_BYTELEVEL: /* HF's joins all into one string */
		st = out->n ? FERRY_OK : strs_add(out, s, 0);
		return st ? st : dec_byte_level(s, n, out);
	case DEC_FUSE:
		return out->n ? strs_append(out, s, n) : strs_add(out, s, n);
	case DEC_REPLACE:
		return replace_all(s, n, d->pattern, d->content, out);
	case DEC_BYTEFALLBACK:
		if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
		    hex(s[3]) >= 0 && hex(s[4]) >= 0) {
			char b = (char)(hex(s[3]) * 16 + hex(s[4]));

			return strs_add(out, &b, 1);
		}
		return strs_add(out, s, n);
	case DEC_STRIP:
		return whole ? dec_strip(d, s, n, out) : strs_add(out, s, n);
	case DEC_METASPACE: /* HF drops every '▁' of the first token */
		return replace_all(s, n, d->pattern,
				   i == 0 && whole && d->start ? "" : " ", out);
	}
	return FERRY_OK;
}

static const char *token_of(const struct ferry_hf_tokenizer *t, int id,
			    size_t *n)
{
	int a = t->added_of_id[id];

	if (a >= 0) {
		*n = t->added[a].len;
		return t->added[a].content;
	}
	*n = t->bpe.token_len[id];
	return t->bpe.token[id];
}

ferry_status ferry_tok_decode_chain(const struct ferry_hf_tokenizer *t,
			      const int32_t *ids, size_t n, bool skip_special,
			      bool whole, struct tok_str *out)
{
	struct strs a = { 0 }, b = { 0 }, swap;
	ferry_status st = FERRY_OK;

	for (size_t i = 0; i < n && !st; i++) {
		const char *s;
		size_t len;

		if (ids[i] < 0 || ids[i] >= t->n_ids ||
		    ((ids[i] >= t->bpe.n_ids || !t->bpe.token[ids[i]]) &&
		     t->added_of_id[ids[i]] < 0))
			st = ferry_error(FERRY_ERR_INVALID,
					 "token id %d is not in the tokenizer's vocabulary",
					 ids[i]);
		else if (!(skip_special && t->is_special[ids[i]])) {
			s = token_of(t, ids[i], &len);
			st = strs_add(&a, s, len);
		}
	}
	for (int k = 0; k < t->n_dec && !st; k++) {
		b.buf.n = 0;
		b.n = 0;
		for (int i = 0; i < a.n && !st; i++)
			st = dec_one(&t->dec[k], i, whole, a.buf.p + a.off[i],
				     a.len[i], &b);
		swap = a;
		a = b;
		b = swap;
	}
	out->n = 0;
	st = st ? st : ferry_tok_str_add(out, "", 0);
	for (int i = 0; i < a.n && !st; i++)
		st = ferry_tok_str_add(out, a.buf.p + a.off[i], a.len[i]);
	strs_free(&a);
	strs_free(&b);
	return st;
}
