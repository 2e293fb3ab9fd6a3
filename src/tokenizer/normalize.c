/*
 * Normalizers of a Hugging Face tokenizer.json: Unicode forms (NFC, NFD,
 * NFKC, NFKD, through utf8proc), Lowercase, Prepend and Replace, in the
 * file's order.
 *
 * Text that is not UTF-8 is normalized run by run: each maximal valid run
 * goes through utf8proc, the bytes between runs are kept as they are (HF
 * only sees valid strings; this keeps any bytes encodable).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Length of the valid UTF-8 prefix of s. */
static size_t valid_prefix(const char *s, size_t n)
{
	size_t at = 0;

	while (at < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k;

		if (!(s[at] & 0x80)) { /* ASCII, most text: no call */
			at++;
			continue;
		}
		k = utf8proc_iterate((const utf8proc_uint8_t *)s + at,
				     (utf8proc_ssize_t)(n - at), &cp);
		if (k <= 0)
			break;
		at += (size_t)k;
	}
	return at;
}

static ferry_status form_map(const char *s, size_t n, utf8proc_option_t o,
			     struct tok_str *out)
{
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t k;
	ferry_status st;

	k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
			 o | UTF8PROC_STABLE);
	if (k < 0)
		return ferry_error(FERRY_ERR_INVALID, "normalizing text: %s",
				   utf8proc_errmsg(k));
	st = ferry_tok_str_add(out, dst, (size_t)k);
	free(dst);
	return st;
}

static ferry_status lower_run(const char *s, size_t n, struct tok_str *out)
{
	for (size_t at = 0; at < n;) {
		utf8proc_int32_t cp;
		utf8proc_uint8_t u[4];
		utf8proc_ssize_t k;
		ferry_status st;

		at += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)s + at,
					       (utf8proc_ssize_t)(n - at), &cp);
		k = utf8proc_encode_char(utf8proc_tolower(cp), u);
		st = ferry_tok_str_add(out, u, (size_t)k);
		if (st)
			return st;
	}
	return FERRY_OK;
}

/* A Unicode form over valid UTF-8.  The forms leave ASCII as it is, and an
 * ASCII character cuts the text: it is a starter (nothing is reordered
 * across it) and never the second of a composition.  So ASCII runs are
 * copied and only each stretch of other characters, with the ASCII one
 * before it (a combining mark may compose with it), goes through
 * utf8proc. */
static ferry_status form_run(const char *s, size_t n, utf8proc_option_t o,
			     struct tok_str *out)
{
	ferry_status st = FERRY_OK;

	for (size_t at = 0, end; at < n && !st; at = end) {
		size_t k = at;

		while (k < n && !(s[k] & 0x80))
			k++;
		if (k == n)
			return ferry_tok_str_add(out, s + at, n - at);
		if (k > at + 1) {
			st = ferry_tok_str_add(out, s + at, k - 1 - at);
			at = k - 1;
		}
		for (end = k; end < n && (s[end] & 0x80); end++)
			;
		st = st ? st : form_map(s + at, end - at, o, out);
	}
	return st;
}

/* A Unicode form or Lowercase over s, keeping bytes that are not UTF-8. */
static ferry_status unicode_step(const struct tok_norm *nm, const char *s,
				 size_t n, struct tok_str *out)
{
	utf8proc_option_t o = 0;
	ferry_status st = FERRY_OK;

	if (nm->kind == NORM_NFC || nm->kind == NORM_NFKC)
		o = UTF8PROC_COMPOSE;
	else
		o = UTF8PROC_DECOMPOSE;
	if (nm->kind == NORM_NFKC || nm->kind == NORM_NFKD)
		o |= UTF8PROC_COMPAT;
	for (size_t at = 0; at < n && !st;) {
		size_t v = valid_prefix(s + at, n - at);

		if (v && nm->kind == NORM_LOWERCASE)
			st = lower_run(s + at, v, out);
		else if (v)
			st = form_run(s + at, v, o, out);
		else
			st = ferry_tok_str_add(out, s + at, 1);
		at += v ? v : 1;
	}
	return st;
}

static ferry_status replace_regex(const struct tok_norm *nm, const char *s,
				  size_t n, struct tok_str *out)
{
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	size_t at = 0, prev = 0, cl = strlen(nm->content);
	ferry_status st = FERRY_OK;

	if (!md)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a regex match");
	while (at <= n && !st) {
		int rc = pcre2_match(nm->regex, (PCRE2_SPTR)s, n, at, 0, md, NULL);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			st = ferry_tok_match_error("normalizer Replace", nm->pattern, rc);
			break;
		}
		if (ov[0] == ov[1]) {
			at = ov[1] + 1;
			continue;
		}
		st = ferry_tok_str_add(out, s + prev, ov[0] - prev);
		if (!st)
			st = ferry_tok_str_add(out, nm->content, cl);
		prev = at = ov[1];
	}
	if (!st)
		st = ferry_tok_str_add(out, s + prev, n - prev);
	pcre2_match_data_free(md);
	return st;
}

static ferry_status replace_string(const struct tok_norm *nm, const char *s,
				   size_t n, struct tok_str *out)
{
	size_t pl = strlen(nm->pattern), cl = strlen(nm->content), prev = 0;
	ferry_status st = FERRY_OK;

	for (size_t i = 0; pl && i + pl <= n && !st;) {
		if (memcmp(s + i, nm->pattern, pl)) {
			i++;
			continue;
		}
		st = ferry_tok_str_add(out, s + prev, i - prev);
		if (!st)
			st = ferry_tok_str_add(out, nm->content, cl);
		i += pl;
		prev = i;
	}
	return st ? st : ferry_tok_str_add(out, s + prev, n - prev);
}

static ferry_status norm_step(const struct tok_norm *nm, const char *s,
			      size_t n, struct tok_str *out)
{
	ferry_status st;

	out->n = 0;
	switch (nm->kind) {
	case NORM_PREPEND:
		if (n == 0)
			return ferry_tok_str_add(out, s, 0);
		st = ferry_tok_str_add(out, nm->content, strlen(nm->content));
		return st ? st : ferry_tok_str_add(out, s, n);
	case NORM_REPLACE:
		return nm->regex ? replace_regex(nm, s, n, out) :
				   replace_string(nm, s, n, out);
	default:
		return unicode_step(nm, s, n, out);
	}
}

ferry_status ferry_tok_normalize(const struct ferry_hf_tokenizer *t, const char *s,
			   size_t n, struct tok_str *out)
{
	struct tok_str tmp = { 0 };
	ferry_status st;

	out->n = 0;
	st = ferry_tok_str_add(out, s, n);
	for (int i = 0; i < t->n_norm && !st; i++) {
		struct tok_str swap;

		st = norm_step(&t->norm[i], out->p, out->n, &tmp);
		swap = *out;
		*out = tmp;
		tmp = swap;
	}
	ferry_tok_str_free(&tmp);
	return st;
}
