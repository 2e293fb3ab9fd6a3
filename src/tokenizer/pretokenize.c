/*
 * Pre-tokenizers of a Hugging Face tokenizer.json, then BPE per piece.
 *
 * A span of normalized text becomes a list of pieces, each step (Split,
 * ByteLevel, Metaspace, Digits) turning every piece into zero or more new
 * ones, as HF's PreTokenizedString does; the pieces of one step live back to
 * back in one buffer.  Splits follow HF's Pattern::find_matches and its
 * five delimiter behaviours.  Regexes are PCRE2 with UTF and UCP (so \p{L},
 * \s are Unicode's) and MATCH_INVALID_UTF: bytes that are not UTF-8 match
 * nothing and end up pieces of their own, so any bytes encode.
 *
 * ByteLevel maps every byte to a printable character, GPT-2's
 * bytes_to_unicode: 33..126, 161..172 and 174..255 stand for themselves,
 * the other 68 bytes, in order, for U+0100...U+0143.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

const char ferry_tok_gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

ferry_status ferry_tok_compile_regex(const char *pattern, size_t n, bool literal,
			       void **out)
{
	/* PCRE2_LITERAL refuses PCRE2_UCP, which a plain string needs not */
	uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF |
			(literal ? PCRE2_LITERAL : PCRE2_UCP);
	PCRE2_SIZE where;
	pcre2_code *re;
	int err;

	re = pcre2_compile((PCRE2_SPTR)pattern, n, opts, &err, &where, NULL);
	if (!re) {
		PCRE2_UCHAR msg[256];

		pcre2_get_error_message(err, msg, sizeof(msg));
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "regex '%.*s': %s at offset %zu", (int)n,
				   pattern, (const char *)msg, (size_t)where);
	}
	/* JIT is a speed-up only: without it (no JIT on this CPU) it still
	 * matches. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*out = re;
	return FERRY_OK;
}

ferry_status ferry_tok_match_error(const char *what, const char *pattern, int rc)
{
	PCRE2_UCHAR msg[256];

	pcre2_get_error_message(rc, msg, sizeof(msg));
	return ferry_error(FERRY_ERR_INVALID, "%s /%.200s/: %s (PCRE2 error %d)%s", what, pattern,
			   (const char *)msg, rc,
			   rc == PCRE2_ERROR_MATCHLIMIT ? ": the pattern backtracks too much on this text" : "");
}

void ferry_tok_free_regex(void *re)
{
	pcre2_code_free(re);
}

/* The pieces after one step: [off[i], off[i] + len[i]) of buf. */
struct pieces {
	struct tok_str buf;
	size_t *off, *len;
	int n, cap;
	bool first_at_start; /* piece 0 starts the input (Metaspace "first") */
};

/* Makes buf[off, off + n) piece p->n. */
static ferry_status piece_mark(struct pieces *p, size_t off, size_t n)
{
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 64;
		size_t *o = realloc(p->off, cap * sizeof(*o));
		size_t *len = o ? realloc(p->len, cap * sizeof(*len)) : NULL;

		if (o)
			p->off = o;
		if (!len)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory for %d pieces", cap);
		p->len = len;
		p->cap = cap;
	}
	p->off[p->n] = off;
	p->len[p->n++] = n;
	return FERRY_OK;
}

static ferry_status piece_add(struct pieces *p, const char *s, size_t n)
{
	ferry_status st;

	if (n == 0)
		return FERRY_OK; /* HF drops empty pieces */
	st = ferry_tok_str_add(&p->buf, s, n);
	return st ? st : piece_mark(p, p->buf.n - n, n);
}

static void pieces_free(struct pieces *p)
{
	ferry_tok_str_free(&p->buf);
	free(p->off);
	free(p->len);
	memset(p, 0, sizeof(*p));
}

/* A segment of a piece: matched by the pattern or not. */
struct seg {
	size_t s, e;
	bool match;
};

struct segs {
	struct seg *v;
	int n, cap;
	int rc; /* a failed match's PCRE2 code */
};

static ferry_status seg_add(struct segs *g, size_t s, size_t e, bool match)
{
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 64;
		struct seg *v = realloc(g->v, cap * sizeof(*v));

		if (!v)
			return ferry_error(FERRY_ERR_NOMEM,
					   "out of memory splitting text");
		g->v = v;
		g->cap = cap;
	}
	g->v[g->n++] = (struct seg){ s, e, match };
	return FERRY_OK;
}

/* HF's find_matches: matches and the gaps between them, in order; a
 * failed match is FERRY_ERR_INVALID with g->rc its code, named by the
 * caller, which knows the step. */
static ferry_status find_segs(const pcre2_code *re, pcre2_match_data *md,
			      const char *s, size_t n, bool invert,
			      struct segs *g)
{
	size_t prev = 0, at = 0, jit = 0;
	ferry_status st = FERRY_OK;

	/* pcre2_jit_match skips pcre2_match's checks: the same matches */
	(void)pcre2_pattern_info(re, PCRE2_INFO_JITSIZE, &jit);
	g->n = 0;
	g->rc = 0;
	while (at <= n && !st) {
		int rc = jit ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, at, 0, md, NULL) :
			       pcre2_match(re, (PCRE2_SPTR)s, n, at, 0, md, NULL);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			g->rc = rc;
			return FERRY_ERR_INVALID;
		}
		if (ov[0] == ov[1]) { /* empty: try one byte on */
			at = ov[1] + 1;
			continue;
		}
		if (prev != ov[0])
			st = seg_add(g, prev, ov[0], false);
		if (!st)
			st = seg_add(g, ov[0], ov[1], true);
		prev = at = ov[1];
	}
	if (!st && prev != n)
		st = seg_add(g, prev, n, false);
	for (int i = 0; invert && i < g->n; i++)
		g->v[i].match = !g->v[i].match;
	return st;
}

/* Folds the segments by behavior into pieces (HF's split()). */
static void fold_segs(struct segs *g, enum tok_split_behavior how)
{
	int n = 0;
	bool prev_match = false;

	if (how == SPLIT_MERGED_NEXT) /* HF folds this one right to left */
		for (int i = 0, j = g->n - 1; i < j; i++, j--) {
			struct seg t = g->v[i];

			g->v[i] = g->v[j];
			g->v[j] = t;
		}
	for (int i = 0; i < g->n; i++) {
		struct seg c = g->v[i];
		bool join = how == SPLIT_CONTIGUOUS ? c.match == prev_match :
			    (how == SPLIT_MERGED_PREV ||
			     how == SPLIT_MERGED_NEXT) && c.match && !prev_match;

		prev_match = c.match;
		if (how == SPLIT_REMOVED && c.match)
			continue;
		if (join && n) {
			if (how == SPLIT_MERGED_NEXT)
				g->v[n - 1].s = c.s;
			else
				g->v[n - 1].e = c.e;
			continue;
		}
		g->v[n++] = c;
	}
	g->n = n;
	if (how == SPLIT_MERGED_NEXT)
		for (int i = 0, j = n - 1; i < j; i++, j--) {
			struct seg t = g->v[i];

			g->v[i] = g->v[j];
			g->v[j] = t;
		}
}

static ferry_status split_into(const pcre2_code *re, pcre2_match_data *md,
			       enum tok_split_behavior how, bool invert,
			       const char *s, size_t n, struct segs *g,
			       struct pieces *out)
{
	ferry_status st = find_segs(re, md, s, n, invert, g);

	if (st)
		return st;
	fold_segs(g, how);
	for (int i = 0; i < g->n && !st; i++)
		st = piece_add(out, s + g->v[i].s, g->v[i].e - g->v[i].s);
	return st;
}

/* GPT-2's byte -> character, as UTF-8 into out (2 bytes at most). */
size_t ferry_tok_byte_char(unsigned char b, char *out)
{
	unsigned cp = b < 33 ? 256u + b : b < 127 ? b :
		      b < 161 ? 256u + 33 + (b - 127u) : b == 173 ? 256u + 67 : b;

	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	out[0] = (char)(0xc0 | (cp >> 6));
	out[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

/* s mapped by ByteLevel, as one more piece of out. */
static ferry_status add_mapped(const struct ferry_hf_tokenizer *t, const unsigned char *s,
			       size_t n, struct pieces *out)
{
	size_t from = out->buf.n;
	ferry_status st = ferry_tok_str_reserve(&out->buf, 2 * n + 1);
	char *q;

	if (st || n == 0)
		return st;
	q = out->buf.p + from;
	for (size_t k = 0; k < n; k++) { /* both bytes written, one kept or two */
		memcpy(q, t->byte_map[s[k]], 2);
		q += t->byte_map[s[k]][2];
	}
	*q = '\0';
	out->buf.n = (size_t)(q - out->buf.p);
	return piece_mark(out, from, out->buf.n - from);
}

/* ByteLevel on one piece: the prefix space, GPT-2's split, the byte map. */
static ferry_status byte_level(const struct ferry_hf_tokenizer *t,
			       const struct tok_pre *p, pcre2_match_data *md,
			       const char *s, size_t n, struct segs *g,
			       struct tok_str *tmp, struct pieces *out)
{
	ferry_status st = FERRY_OK;

	if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
		tmp->n = 0;
		st = ferry_tok_str_add(tmp, " ", 1);
		st = st ? st : ferry_tok_str_add(tmp, s, n);
		s = tmp->p;
		n = tmp->n;
	}
	if (st || !p->regex)
		return st ? st : add_mapped(t, (const unsigned char *)s, n, out);
	st = find_segs(p->regex, md, s, n, false, g);
	for (int i = 0; i < g->n && !st; i++)
		st = add_mapped(t, (const unsigned char *)s + g->v[i].s, g->v[i].e - g->v[i].s, out);
	return st;
}

/* Metaspace on one piece: ' ' -> the replacement, prepended as the scheme
 * says, then split before each replacement. */
static ferry_status metaspace(const struct tok_pre *p, const char *s,
			      size_t n, bool at_start, struct tok_str *tmp,
			      struct pieces *out)
{
	size_t rl = strlen(p->replacement), from = 0;
	ferry_status st = FERRY_OK;

	tmp->n = 0;
	for (size_t i = 0; i < n && !st; i++)
		st = s[i] == ' ' ? ferry_tok_str_add(tmp, p->replacement, rl) :
				   ferry_tok_str_add(tmp, s + i, 1);
	if (!st && (p->prepend == 2 || (p->prepend == 1 && at_start)) &&
	    (tmp->n < rl || memcmp(tmp->p, p->replacement, rl))) {
		st = ferry_tok_str_add(tmp, s, 0); /* tmp->p exists even for "" */
		if (!st)
			st = ferry_tok_str_add(tmp, p->replacement, rl);
		if (!st) {
			memmove(tmp->p + rl, tmp->p, tmp->n - rl);
			memcpy(tmp->p, p->replacement, rl);
		}
	}
	if (st || !p->split)
		return st ? st : piece_add(out, tmp->p, tmp->n);
	for (size_t i = 1; i + rl <= tmp->n && !st; i++)
		if (!memcmp(tmp->p + i, p->replacement, rl)) {
			st = piece_add(out, tmp->p + from, i - from);
			from = i;
		}
	return st ? st : piece_add(out, tmp->p + from, tmp->n - from);
}

static ferry_status run_step(const struct ferry_hf_tokenizer *t,
			     const struct tok_pre *p, pcre2_match_data *md,
			     const struct pieces *in, struct segs *g,
			     struct tok_str *tmp, struct pieces *out)
{
	ferry_status st = FERRY_OK;

	out->first_at_start = in->first_at_start;
	for (int i = 0; i < in->n && !st; i++) {
		const char *s = in->buf.p + in->off[i];
		size_t n = in->len[i];

		if (p->kind == PRE_SPLIT || p->kind == PRE_DIGITS)
			st = split_into(p->regex, md, p->behavior, p->invert, s,
					n, g, out);
		else if (p->kind == PRE_BYTELEVEL)
			st = byte_level(t, p, md, s, n, g, tmp, out);
		else
			st = metaspace(p, s, n, i == 0 && in->first_at_start,
				       tmp, out);
	}
	if (st && g->rc < 0)
		return ferry_tok_match_error(p->kind == PRE_SPLIT ? "pre_tokenizer Split" :
					     p->kind == PRE_DIGITS ? "pre_tokenizer Digits" :
					     "pre_tokenizer ByteLevel", p->pattern, g->rc);
	return st;
}

ferry_status ferry_tok_pretok_encode(const struct ferry_hf_tokenizer *t,
			       const char *s, size_t n, bool at_start,
			       struct ferry_token_buf *out)
{
	struct pieces a = { 0 }, b = { 0 };
	struct segs g = { 0 };
	struct tok_str tmp = { 0 };
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	ferry_status st = FERRY_OK;

	if (!md)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a regex match");
	a.first_at_start = at_start;
	st = piece_add(&a, s, n);
	for (int k = 0; k < t->n_pre && !st; k++) {
		struct pieces swap;

		b.buf.n = 0;
		b.n = 0;
		st = run_step(t, &t->pre[k], md, &a, &g, &tmp, &b);
		swap = a;
		a = b;
		b = swap;
	}
	if (!st)
		st = ferry_tok_bpe_pieces(&t->bpe, a.buf.p, a.off, a.len, a.n, out);
	pieces_free(&a);
	pieces_free(&b);
	free(g.v);
	ferry_tok_str_free(&tmp);
	pcre2_match_data_free(md);
	return st;
}
