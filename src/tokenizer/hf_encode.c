/*
 * Encoding with a Hugging Face tokenizer: added tokens first, as HF's
 * AddedVocabulary does, then normalizers, pre-tokenizers and BPE on the
 * text between them, then the post-processor's template.
 *
 * Added tokens are found leftmost-longest (HF uses an Aho-Corasick automaton
 * with that rule): those whose normalized flag is off in the raw text, the
 * others in each normalized span between those.  A single_word token
 * counts only with no word character on either side; lstrip and rstrip
 * take the whitespace beside it into the token.
 */
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

/* The character ending at s[end) (-1 when none or not UTF-8); *len its
 * length in bytes (1 when not UTF-8). */
static int32_t char_before(const char *s, size_t end, size_t *len)
{
	size_t at = end;
	utf8proc_int32_t cp = -1;

	*len = 1;
	while (at > 0 && end - at < 4) {
		at--;
		if (((unsigned char)s[at] & 0xc0) != 0x80)
			break;
	}
	if (at == end ||
	    utf8proc_iterate((const utf8proc_uint8_t *)s + at,
			     (utf8proc_ssize_t)(end - at), &cp) != (utf8proc_ssize_t)(end - at))
		return -1;
	*len = end - at;
	return cp;
}

static int32_t char_at(const char *s, size_t n, size_t at, size_t *len)
{
	utf8proc_int32_t cp = -1;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + at,
					      (utf8proc_ssize_t)(n - at), &cp);

	*len = k > 0 ? (size_t)k : 1;
	return k > 0 ? cp : -1;
}

static bool is_space(int32_t c)
{
	utf8proc_category_t k;

	if (c < 0)
		return false;
	if ((c >= 9 && c <= 13) || c == 0x85)
		return true;
	k = utf8proc_category(c);
	return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL ||
	       k == UTF8PROC_CATEGORY_ZP;
}

static bool is_word(int32_t c)
{
	utf8proc_category_t k;

	if (c < 0)
		return false;
	if (c == '_')
		return true;
	k = utf8proc_category(c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The longest added token of the class at s[at) (-1: none). */
static int longest_at(const struct ferry_hf_tokenizer *t, const char *s,
		      size_t n, size_t at, bool normalized)
{
	int best = -1;

	for (int i = 0; i < t->n_added; i++) {
		const struct tok_added *a = &t->added[i];

		if (a->normalized != normalized || !a->match_len || a->match_len > n - at ||
		    (best >= 0 && a->match_len <= t->added[best].match_len) ||
		    memcmp(s + at, a->match, a->match_len))
			continue;
		best = i;
	}
	return best;
}

struct added_match {
	size_t s, e; /* the span the token takes, stripped space included */
	int which;   /* index in t->added */
};

/* The next added token of the class at or after from; false: none. */
static bool next_added(const struct ferry_hf_tokenizer *t, const char *s,
		       size_t n, size_t from, bool normalized,
		       struct added_match *m)
{
	int one = t->added_one_first[normalized];

	for (size_t at = from; at < n;) {
		const struct tok_added *a;
		size_t e, cl;
		int i;

		if (one >= 0 && one < 256 && s[at] != (char)one) {
			const char *p = memchr(s + at, one, n - at); /* the common case */

			if (!p)
				return false;
			at = (size_t)(p - s);
		}
		if (!t->added_first[normalized][(unsigned char)s[at]]) {
			at++;
			continue;
		}
		i = longest_at(t, s, n, at, normalized);
		if (i < 0) {
			at++;
			continue;
		}
		a = &t->added[i];
		e = at + a->match_len;
		if (a->single_word && (is_word(char_before(s, at, &cl)) ||
				       (e < n && is_word(char_at(s, n, e, &cl))))) {
			at = e; /* the matcher moves past a match it drops */
			continue;
		}
		m->s = at;
		m->e = e;
		m->which = i;
		while (a->lstrip && m->s > from &&
		       is_space(char_before(s, m->s, &cl)) && m->s - cl >= from)
			m->s -= cl;
		while (a->rstrip && m->e < n && is_space(char_at(s, n, m->e, &cl)))
			m->e += cl;
		return true;
	}
	return false;
}

/* A span between raw added tokens: normalized, then split on the
 * normalized ones; at_start: it starts the input. */
static ferry_status encode_span(const struct ferry_hf_tokenizer *t,
				const char *s, size_t n, bool at_start,
				struct ferry_token_buf *out)
{
	struct tok_str norm = { 0 };
	struct added_match m;
	ferry_status st;
	size_t from = 0;

	st = ferry_tok_normalize(t, s, n, &norm);
	while (!st && next_added(t, norm.p, norm.n, from, true, &m)) {
		if (m.s > from)
			st = ferry_tok_pretok_encode(t, norm.p + from, m.s - from,
					       at_start && from == 0, out);
		if (!st)
			st = ferry_tok_ids_push(out, t->added[m.which].id);
		from = m.e;
	}
	if (!st && from < norm.n)
		st = ferry_tok_pretok_encode(t, norm.p + from, norm.n - from,
				       at_start && from == 0, out);
	ferry_tok_str_free(&norm);
	return st;
}

ferry_status ferry_tok_hf_encode(const struct ferry_hf_tokenizer *t, const char *s,
			   size_t n, bool add_special,
			   struct ferry_token_buf *out)
{
	struct added_match m;
	ferry_status st = FERRY_OK;
	size_t from = 0;

	for (int i = 0; add_special && i < t->n_post_before && !st; i++)
		st = ferry_tok_ids_push(out, t->post_before[i]);
	while (!st && next_added(t, s, n, from, false, &m)) {
		if (m.s > from)
			st = encode_span(t, s + from, m.s - from, from == 0, out);
		if (!st)
			st = ferry_tok_ids_push(out, t->added[m.which].id);
		from = m.e;
	}
	if (!st && from < n)
		st = encode_span(t, s + from, n - from, from == 0, out);
	for (int i = 0; add_special && i < t->n_post_after && !st; i++)
		st = ferry_tok_ids_push(out, t->post_after[i]);
	if (st == FERRY_ERR_INVALID) { /* a regex's match failed: whose */
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", ferry_last_error());
		st = ferry_error(st, "tokenizer %s: %s", t->path, msg);
	}
	return st;
}
