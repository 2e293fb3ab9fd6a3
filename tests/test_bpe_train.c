/*
 * ferry_tokenizer_train: the merges a hand computation gives on a tiny
 * corpus; the same file for 1, 2 and 3 threads on a generated corpus (with
 * bytes that are not UTF-8 and special tokens inside the text); the file
 * loads in ferry's reader, decode(encode(x)) == x on random bytes, and the
 * special token is one id.
 */
#include "ferry/tokenizer.h"
#include "test_util.h"

#include <jansson.h>

static char dir[4096];

static void write_file(const char *path, const char *s, size_t n)
{
	FILE *f = fopen(path, "wb");

	CHECK(f && fwrite(s, 1, n, f) == n, "write %s", path);
	if (f)
		fclose(f);
}

static char *read_all(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc((size_t)len + 1);
	*n = fread(p, 1, (size_t)len, f);
	fclose(f);
	return p;
}

/* "abab abab ab": words abab, " abab", " ab".  (a, b) 5 times first; then
 * (Ġ, ab) and (ab, ab) 2 each: Ġ's id is smaller; then (ab, ab) and
 * (Ġab, ab) once each: ab's id is smaller; last (Ġab, ab). */
static void hand_merges(void)
{
	static const char *const want[][2] = { { "a", "b" }, { "\xc4\xa0", "ab" },
					       { "ab", "ab" }, { "\xc4\xa0" "ab", "ab" } };
	const char *sp[] = { "<|endoftext|>" };
	struct ferry_bpe_train_opts o = { .vocab = 1 + 256 + 10, .special = sp, .n_special = 1,
					  .threads = 2 };
	struct ferry_bpe_train_stats s;
	char in[4200], out[4200];
	const char *paths[] = { in };
	json_t *root, *merges;

	snprintf(in, sizeof(in), "%s/hand.txt", dir);
	snprintf(out, sizeof(out), "%s/hand.json", dir);
	write_file(in, "abab abab ab", 12);
	CHECK(!ferry_tokenizer_train(paths, 1, &o, out, &s), "train: %s", ferry_last_error());
	root = json_load_file(out, 0, NULL);
	merges = json_object_get(json_object_get(root, "model"), "merges");
	CHECK(json_array_size(merges) == 4 && s.merges == 4 && s.vocab == 261,
	      "%zu merges, vocab %d", json_array_size(merges), s.vocab);
	for (size_t i = 0; i < 4 && i < json_array_size(merges); i++) {
		json_t *m = json_array_get(merges, i);

		CHECK(!strcmp(json_string_value(json_array_get(m, 0)), want[i][0]) &&
		      !strcmp(json_string_value(json_array_get(m, 1)), want[i][1]),
		      "merge %zu: '%s' '%s'", i, json_string_value(json_array_get(m, 0)),
		      json_string_value(json_array_get(m, 1)));
	}
	json_decref(root);
}

static void make_corpus(const char *path)
{
	static const char *const words[] = { "the", " of", " and", "don't", " it's", " 2024",
		" café", " 日本語", " 🙂", "\n", "  ", "\t", "<|endoftext|>", " naïve", "x_y" };
	size_t cap = 1 << 20, n = 0;
	char *s = malloc(cap + 64);
	uint64_t r = 12345;

	while (n < cap) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		if ((r >> 60) == 0)
			s[n++] = (char)(0x80 + (r >> 40) % 0x40); /* not UTF-8 */
		const char *w = words[(r >> 33) % (sizeof(words) / sizeof(words[0]))];

		memcpy(s + n, w, strlen(w));
		n += strlen(w);
	}
	write_file(path, s, n);
	free(s);
}

static void round_trip(const char *path)
{
	ferry_tokenizer_t tok = NULL;
	struct ferry_token_buf b = { 0 };
	uint64_t r = 99;

	CHECK(!ferry_tokenizer_open(path, &tok), "open: %s", ferry_last_error());
	if (!tok)
		return;
	CHECK(!ferry_tokenizer_encode(tok, "a<|endoftext|>b", 15, 0, &b) && b.n == 3 &&
	      b.ids[1] == 0, "the special token is not id 0 inside text");
	for (int k = 0; k < 500; k++) {
		char text[64], *got = NULL;
		size_t n = (size_t)(k % 60), len = 0;

		for (size_t i = 0; i < n; i++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			text[i] = k & 1 ? (char)(r >> 56) : " abe'\n1日"[(r >> 40) % 9];
		}
		b.n = 0;
		CHECK(!ferry_tokenizer_encode(tok, text, n, 0, &b), "encode: %s", ferry_last_error());
		CHECK(!ferry_tokenizer_decode_ids(tok, b.ids, b.n, false, &got, &len) &&
		      len == n && !memcmp(got, text, n), "round trip of %zu bytes", n);
		ferry_tokenizer_text_free(got);
	}
	ferry_token_buf_free(&b);
	ferry_tokenizer_free(tok);
}

static void threads_agree(void)
{
	const char *sp[] = { "<|endoftext|>", "<pad>" };
	char in[4200], out[3][4200];
	const char *paths[] = { in };
	char *first = NULL;
	size_t n0 = 0;

	snprintf(in, sizeof(in), "%s/gen.txt", dir);
	make_corpus(in);
	for (int t = 0; t < 3; t++) {
		struct ferry_bpe_train_opts o = { .vocab = 1000, .special = sp, .n_special = 2,
						  .threads = t + 1 };
		size_t n;
		char *got;

		snprintf(out[t], sizeof(out[t]), "%s/gen%d.json", dir, t + 1);
		CHECK(!ferry_tokenizer_train(paths, 1, &o, out[t], NULL), "train: %s",
		      ferry_last_error());
		got = read_all(out[t], &n);
		CHECK(got, "no %s", out[t]);
		if (t == 0) {
			first = got;
			n0 = n;
			continue;
		}
		CHECK(got && n == n0 && !memcmp(got, first, n), "%d threads differ from 1", t + 1);
		free(got);
	}
	free(first);
	round_trip(out[0]);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");

	snprintf(dir, sizeof(dir), "%s", tmp ? tmp : "/tmp");
	hand_merges();
	threads_agree();
	return test_exit_code();
}
