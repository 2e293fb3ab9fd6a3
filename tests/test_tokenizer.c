/*
 * Hugging Face tokenizer.json files written here by hand: pre-tokenization
 * and merges on the hard cases (contractions, digits, whitespace runs,
 * emoji, CJK, combining marks, special tokens inside text), round trips of
 * arbitrary bytes, bad files, each refused with a message naming the
 * problem, and the cache of encoded pieces: the same ids on many threads,
 * filled in any order, and past full.  test_tokenizer_ref.c checks against Hugging Face's own library.
 */
#include "ferry/tokenizer.h"
#include "test_util.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>

static char dir[4096];

/* GPT-2's byte -> character, UTF-8 into out. */
static void byte_char(unsigned b, char out[3])
{
	unsigned cp = b < 33 ? 256 + b : b < 127 ? b : b < 161 ? 256 + 33 + (b - 127) :
		      b == 173 ? 256 + 67 : b;

	memset(out, 0, 3);
	if (cp < 0x80) {
		out[0] = (char)cp;
	} else {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
	}
}

/* Writes root (stolen) as dir/name.json; returns the path. */
static const char *save(json_t *root, const char *name)
{
	static char path[8192];

	snprintf(path, sizeof(path), "%s/%s.json", dir, name);
	if (json_dump_file(root, path, JSON_COMPACT)) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	json_decref(root);
	return path;
}

/* Adds the merge "a b" and the token a+b to the vocab. */
static void merge(json_t *vocab, json_t *merges, const char *a, const char *b)
{
	char ab[256];

	snprintf(ab, sizeof(ab), "%s%s", a, b);
	if (!json_object_get(vocab, ab))
		json_object_set_new(vocab, ab, json_integer((json_int_t)json_object_size(vocab)));
	json_array_append_new(merges, json_pack("[ss]", a, b));
}

static json_t *added(int id, const char *content, bool special, bool lstrip,
		     bool single_word)
{
	return json_pack("{si,ss,sb,sb,sb,sb,sb}", "id", id, "content", content,
			 "special", special, "lstrip", lstrip, "rstrip", false,
			 "single_word", single_word, "normalized", !special);
}

/* GPT-2-style: ByteLevel with its regex; a few merges across the places
 * the regex splits, so a wrong split shows as a merge that happens. */
static const char *byte_level_file(void)
{
	json_t *vocab = json_object(), *merges = json_array();
	char c[3];

	for (unsigned b = 0; b < 256; b++) {
		byte_char(b, c);
		json_object_set_new(vocab, c, json_integer(b));
	}
	merge(vocab, merges, "'", "s");		/* 256 */
	merge(vocab, merges, "d", "'");		/* 257: never, "d" | "'s" */
	merge(vocab, merges, "a", "1");		/* 258: never, "a" | "1" */
	merge(vocab, merges, "\xc4\xa0", "\xc4\xa0"); /* 259 "ĠĠ" */
	merge(vocab, merges, "\xc4\xa0", "b");	/* 260 "Ġb" */
	merge(vocab, merges, "1", "2");		/* 261 */
	merge(vocab, merges, "\xc2\xa9", "t");	/* 262: "©t", é's 2nd byte + t */
	json_object_set_new(vocab, "<|endoftext|>", json_integer(263));
	return save(json_pack("{s:[o,o],s:n,s:{ss,sb,sb},s:{ss},s:n,s:{ss,so,so}}",
			      "added_tokens", added(263, "<|endoftext|>", true, false, false),
			      added(264, "<mask>", false, true, true),
			      "normalizer",
			      "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", false,
			      "use_regex", true,
			      "decoder", "type", "ByteLevel", "post_processor",
			      "model", "type", "BPE", "vocab", vocab, "merges", merges),
		    "byte_level");
}

struct enc_case {
	const char *text;
	int ids[16];
	int n;
};

static void check_encodes(ferry_tokenizer_t tok, const struct enc_case *c,
			  int n)
{
	for (int i = 0; i < n; i++) {
		struct ferry_token_buf b = { 0 };
		bool same;

		CHECK(!ferry_tokenizer_encode(tok, c[i].text, strlen(c[i].text), 0, &b),
		      "encode '%s': %s", c[i].text, ferry_last_error());
		same = b.n == (size_t)c[i].n;
		for (int k = 0; same && k < c[i].n; k++)
			same = b.ids[k] == c[i].ids[k];
		CHECK(same, "'%s': %zu ids (first %d), want %d", c[i].text, b.n,
		      b.n ? b.ids[0] : -1, c[i].n);
		ferry_token_buf_free(&b);
	}
}

/* decode(encode(x)) == x on n random byte strings (invalid UTF-8 too)
 * without '▁' (which decodes to a space, as in HF); with lead, x less
 * its first space when it starts with one (a Metaspace decoder drops the
 * '▁' of the first token, as HF's does). */
static void check_round_trips(ferry_tokenizer_t tok, const char *what, int n, bool lead)
{
	uint64_t s = 23;

	for (int i = 0; i < n; i++) {
		unsigned char text[64];
		struct ferry_token_buf b = { 0 };
		size_t len = 0, got_len = 0, skip;
		char *got = NULL;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		len = (size_t)(s >> 58);
		for (size_t k = 0; k < len; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			/* bytes, ASCII, and pieces of multibyte characters */
			text[k] = (unsigned char)((s >> 60) < 8 ? 'a' + (s >> 40) % 26 :
						  (s >> 60) < 11 ? ' ' : (s >> 33));
		}
		if (len >= 3 && memmem(text, len, "\xe2\x96\x81", 3))
			continue;
		skip = lead && len && text[0] == ' ';
		CHECK(!ferry_tokenizer_encode(tok, (char *)text, len, 0, &b) &&
		      !ferry_tokenizer_decode_ids(tok, b.ids, b.n, false, &got, &got_len) &&
		      got_len == len - skip && !memcmp(got, text + skip, len - skip),
		      "%s: round trip %d of %zu bytes gave %zu", what, i, len, got_len);
		ferry_tokenizer_text_free(got);
		ferry_token_buf_free(&b);
	}
}

static void test_byte_level(void)
{
	static const struct enc_case cases[] = {
		{ "d's", { 'd', 256 }, 2 },			/* contraction split off */
		{ "a1", { 'a', '1' }, 2 },			/* letters | digits */
		{ "a 12", { 'a', ' ', 261 }, 3 },		/* "a" | " 12", 1 2 merge */
		{ "a   b", { 'a', 259, 260 }, 3 },		/* \s+(?!\S), then " b" */
		{ "x<|endoftext|>y", { 'x', 263, 'y' }, 3 },	/* special inside text */
		{ "t\xc3\xa9t", { 't', 0xc3, 262 }, 3 },	/* é's bytes merge */
		{ "a <mask>b", { 'a', ' ', '<', 'm', 'a', 's', 'k', '>', 'b' }, 9 },
								/* single_word: b touches */
		{ "a <mask> b", { 'a', 264, 260 }, 3 },		/* lstrip takes the space */
		{ "\xf0\x9f\x99\x82", { 0xf0, 0x9f, 0x99, 0x82 }, 4 }, /* emoji: 4 bytes */
	};
	ferry_tokenizer_t tok = NULL;

	CHECK(!ferry_tokenizer_open(byte_level_file(), &tok), "%s", ferry_last_error());
	if (!tok)
		return;
	CHECK(ferry_tokenizer_vocab(tok) == 265, "vocab %d", ferry_tokenizer_vocab(tok));
	CHECK(ferry_tokenizer_eos(tok) == 263, "eos %d", ferry_tokenizer_eos(tok));
	check_encodes(tok, cases, (int)(sizeof(cases) / sizeof(cases[0])));
	check_round_trips(tok, "byte-level", 2000, false);
	ferry_tokenizer_free(tok);
}

/* Llama-2-style: '▁' normalizer, byte fallback, <s> template, the
 * Replace/ByteFallback/Fuse/Strip decoders. */
static const char *sentencepiece_file(void)
{
	json_t *vocab = json_object(), *merges = json_array();
	const char *U = "\xe2\x96\x81";
	char name[8];

	json_object_set_new(vocab, "<unk>", json_integer(0));
	json_object_set_new(vocab, "<s>", json_integer(1));
	json_object_set_new(vocab, "</s>", json_integer(2));
	for (int b = 0; b < 256; b++) {
		snprintf(name, sizeof(name), "<0x%02X>", b);
		json_object_set_new(vocab, name, json_integer(3 + b));
	}
	json_object_set_new(vocab, U, json_integer(259));
	for (char c = 'a'; c <= 'z'; c++)
		json_object_set_new(vocab, (char[2]){ c, 0 }, json_integer(260 + c - 'a'));
	json_object_set_new(vocab, "\xe6\x97\xa5", json_integer(286)); /* 日 */
	json_object_set_new(vocab, "\xe6\x9c\xac", json_integer(287)); /* 本 */
	merge(vocab, merges, U, "a");	/* 288 */
	merge(vocab, merges, "a", "b");	/* 289 */
	return save(json_pack("{s:[o,o,o],s:{ss,s:[{ss,ss},{ss,s:{ss},ss}]},s:n,"
			      "s:{ss,s:[{ss,s:{ss},ss},{ss},{ss},{ss,ss,si,si}]},"
			      "s:{ss,s:[{s:{ss,si}},{s:{ss,si}}],s:{s:{ss,s:[i],s:[s]}}},"
			      "s:{ss,so,so,ss,sb,sb}}",
			      "added_tokens", added(0, "<unk>", true, false, false),
			      added(1, "<s>", true, false, false), added(2, "</s>", true, false, false),
			      "normalizer", "type", "Sequence", "normalizers", "type", "Prepend",
			      "prepend", U, "type", "Replace", "pattern", "String", " ", "content", U,
			      "pre_tokenizer",
			      "decoder", "type", "Sequence", "decoders", "type", "Replace", "pattern",
			      "String", U, "content", " ", "type", "ByteFallback", "type", "Fuse",
			      "type", "Strip", "content", " ", "start", 1, "stop", 0,
			      "post_processor", "type", "TemplateProcessing", "single",
			      "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id", "A",
			      "type_id", 0, "special_tokens", "<s>", "id", "<s>", "ids", 1, "tokens",
			      "<s>",
			      "model", "type", "BPE", "vocab", vocab, "merges", merges, "unk_token",
			      "<unk>", "byte_fallback", true, "fuse_unk", true),
		    "sentencepiece");
}

static void test_sentencepiece(void)
{
	static const struct enc_case cases[] = {
		{ "ab", { 288, 261 }, 2 },		/* ▁a first (rank 0), then no ▁a+b */
		{ "ba", { 259, 261, 260 }, 3 },
		{ "\xe6\x97\xa5\xe6\x9c\xac", { 259, 286, 287 }, 3 },	/* CJK */
		{ "\xc3\xa9", { 259, 3 + 0xc3, 3 + 0xa9 }, 3 },	/* é: byte fallback */
		{ "a</s>b", { 288, 2, 259, 261 }, 4 },	/* each span gets its '▁' */
		{ "a b", { 288, 259, 261 }, 3 },
	};
	struct ferry_token_buf b = { 0 };
	ferry_tokenizer_t tok = NULL;
	char *text = NULL;
	size_t len = 0;

	CHECK(!ferry_tokenizer_open(sentencepiece_file(), &tok), "%s", ferry_last_error());
	if (!tok)
		return;
	check_encodes(tok, cases, (int)(sizeof(cases) / sizeof(cases[0])));
	CHECK(!ferry_tokenizer_encode(tok, "ab", 2, FERRY_TOK_ADD_SPECIAL, &b) &&
	      b.n == 3 && b.ids[0] == 1, "BOS from the template");
	CHECK(ferry_tokenizer_bos(tok) == 1 && ferry_tokenizer_eos(tok) == 2, "bos %d eos %d",
	      ferry_tokenizer_bos(tok), ferry_tokenizer_eos(tok));
	CHECK(!ferry_tokenizer_decode_ids(tok, b.ids, b.n, true, &text, &len) &&
	      !strcmp(text, "ab"), "decode skips <s> and strips the space: '%s'", text);
	ferry_tokenizer_text_free(text);
	CHECK(!ferry_tokenizer_decode_ids(tok, b.ids, b.n, false, &text, &len) &&
	      !strcmp(text, "<s> ab"), "decode keeps <s>: '%s'", text);
	ferry_tokenizer_text_free(text);
	ferry_token_buf_free(&b);
	check_round_trips(tok, "sentencepiece", 2000, false);
	ferry_tokenizer_free(tok);
}

/* Mistral-style: the sentencepiece file's vocab with a Metaspace
 * pre-tokenizer and decoder (prepend_scheme first) for the normalizer and
 * the Replace/Strip decoders: a leading space does not come back
 * (docs/data.md says what round-trips). */
static void test_metaspace(void)
{
	json_t *root = json_load_file(sentencepiece_file(), 0, NULL);
	json_t *ms = json_pack("{ss,ss,ss,sb}", "type", "Metaspace", "replacement", "\xe2\x96\x81",
			       "prepend_scheme", "first", "split", true);
	ferry_tokenizer_t tok = NULL;

	json_object_set_new(root, "normalizer", json_null());
	json_object_set(root, "pre_tokenizer", ms);
	json_object_set_new(root, "decoder", json_pack("{ss,s:[o,{ss},{ss}]}", "type", "Sequence",
							"decoders", ms, "type", "ByteFallback",
							"type", "Fuse"));
	CHECK(!ferry_tokenizer_open(save(root, "metaspace"), &tok), "%s", ferry_last_error());
	if (tok)
		check_round_trips(tok, "metaspace", 2000, true);
	ferry_tokenizer_free(tok);
}

/* NFC through utf8proc: "e" + U+0301 is "é"; NFKC: "ﬁ" is "fi". */
static void test_normalizers(void)
{
	const char *forms[] = { "NFC", "NFKC" };
	/* ASCII around: the combining acute composes with the e before it */
	const char *pairs[][2] = { { "cafe\xcc\x81 ok", "caf\xc3\xa9 ok" },
				   { "a\xef\xac\x81 b", "afi b" } };

	for (int f = 0; f < 2; f++) {
		json_t *vocab = json_object();
		ferry_tokenizer_t tok = NULL;
		struct ferry_token_buf a = { 0 }, b = { 0 };
		char c[3];

		for (unsigned k = 0; k < 256; k++) {
			byte_char(k, c);
			json_object_set_new(vocab, c, json_integer(k));
		}
		CHECK(!ferry_tokenizer_open(save(json_pack("{s:{ss},s:{ss,sb},s:{ss},s:{ss,so,s:[]}}",
							   "normalizer", "type", forms[f],
							   "pre_tokenizer", "type", "ByteLevel",
							   "add_prefix_space", false, "decoder",
							   "type", "ByteLevel", "model", "type",
							   "BPE", "vocab", vocab, "merges"),
						 forms[f]), &tok),
		      "%s: %s", forms[f], ferry_last_error());
		CHECK(tok && !ferry_tokenizer_encode(tok, pairs[f][0], strlen(pairs[f][0]), 0, &a) &&
		      !ferry_tokenizer_encode(tok, pairs[f][1], strlen(pairs[f][1]), 0, &b) &&
		      a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof(int32_t)),
		      "%s: '%s' and '%s' differ (%zu, %zu ids)", forms[f], pairs[f][0],
		      pairs[f][1], a.n, b.n);
		ferry_token_buf_free(&a);
		ferry_token_buf_free(&b);
		ferry_tokenizer_free(tok);
	}
}

struct bad_case {
	const char *json;
	ferry_status status;
	const char *says;
};

#define MODEL(x) "{\"model\":{\"type\":\"BPE\"," x "}}"
#define TAIL(x) "\"model\":{\"type\":\"BPE\"," x "}}"
#define AB "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[]"

static const struct bad_case bad[] = {
	{ "not json", FERRY_ERR_FORMAT, "line 1" },
	{ "{\"model\": {\"type\": \"BPE\"", FERRY_ERR_FORMAT, "line 1" },
	{ "[]", FERRY_ERR_FORMAT, "not an object" },
	{ "{}", FERRY_ERR_FORMAT, "no \"model\"" },
	{ "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", FERRY_ERR_UNSUPPORTED, "WordPiece" },
	/* no "type" (older files): named by their fields, as HF reads them */
	{ "{\"model\":{\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
	  "\"max_input_chars_per_word\":100,\"vocab\":{\"a\":0}}}", FERRY_ERR_UNSUPPORTED,
	  "model type WordPiece is not supported" },
	{ "{\"model\":{\"vocab\":[[\"a\",-1.0]]}}", FERRY_ERR_UNSUPPORTED,
	  "model type Unigram is not supported" },
	{ "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},"
	  "{\"type\":\"ByteLevel\"}]}," TAIL(AB), FERRY_ERR_UNSUPPORTED, "more than one ByteLevel" },
	{ MODEL("\"merges\":[]"), FERRY_ERR_FORMAT, "model.vocab is missing" },
	{ MODEL("\"vocab\":{\"a\":0}"), FERRY_ERR_FORMAT, "model.merges is missing" },
	{ MODEL("\"vocab\":{\"a\":0},\"merges\":[[\"a\",\"b\"]]"), FERRY_ERR_FORMAT,
	  "'b' is not in the vocab" },
	{ MODEL("\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]"), FERRY_ERR_FORMAT,
	  "'ab' is not in the vocab" },
	{ MODEL("\"vocab\":{\"a\":0},\"merges\":[\"a\"]"), FERRY_ERR_FORMAT, "not two tokens" },
	{ MODEL("\"vocab\":{\"a\":0},\"merges\":[7]"), FERRY_ERR_FORMAT, "model.merges[0]" },
	{ MODEL("\"vocab\":{\"a\":2147483647},\"merges\":[]"), FERRY_ERR_FORMAT, "out of range" },
	{ MODEL("\"vocab\":{\"a\":-1},\"merges\":[]"), FERRY_ERR_FORMAT, "out of range" },
	{ MODEL("\"vocab\":{\"a\":\"x\"},\"merges\":[]"), FERRY_ERR_FORMAT, "another type" },
	{ MODEL("\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]"), FERRY_ERR_FORMAT, "given to both" },
	{ MODEL(AB ",\"dropout\":0.1"), FERRY_ERR_UNSUPPORTED, "dropout" },
	{ MODEL(AB ",\"unk_token\":\"<unk>\""), FERRY_ERR_FORMAT, "unk_token" },
	{ MODEL(AB ",\"continuing_subword_prefix\":\"##\""), FERRY_ERR_UNSUPPORTED,
	  "continuing_subword_prefix" },
	{ "{\"normalizer\":{\"type\":\"BertNormalizer\"}," TAIL(AB), FERRY_ERR_UNSUPPORTED,
	  "normalizer BertNormalizer" },
	{ "{\"pre_tokenizer\":{\"type\":\"Whitespace\"}," TAIL(AB), FERRY_ERR_UNSUPPORTED,
	  "pre_tokenizer Whitespace" },
	{ "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
	  "\"behavior\":\"Isolated\"}," TAIL(AB), FERRY_ERR_UNSUPPORTED, "regex '('" },
	{ "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
	  "\"behavior\":\"Sideways\"}," TAIL(AB), FERRY_ERR_FORMAT, "behavior Sideways" },
	{ "{\"decoder\":{\"type\":\"WordPiece\"}," TAIL(AB), FERRY_ERR_UNSUPPORTED,
	  "decoder WordPiece" },
	{ "{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
	  "{\"id\":\"<s>\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[99]}}}," TAIL(AB),
	  FERRY_ERR_FORMAT, "id 99 is not in the vocabulary" },
	{ "{\"added_tokens\":[{\"id\":5}]," TAIL(AB), FERRY_ERR_FORMAT, "added_tokens[0]" },
	{ "{\"added_tokens\":[{\"id\":99999999,\"content\":\"x\"}]," TAIL(AB),
	  FERRY_ERR_FORMAT, "added_tokens[0]" },
};

static void test_bad_files(void)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char path[8192];
		ferry_tokenizer_t tok = NULL;
		ferry_status st;
		FILE *f;

		snprintf(path, sizeof(path), "%s/bad%zu.json", dir, i);
		f = fopen(path, "w");
		fputs(bad[i].json, f);
		fclose(f);
		st = ferry_tokenizer_open(path, &tok);
		CHECK(st == bad[i].status && strstr(ferry_last_error(), bad[i].says) &&
		      strstr(ferry_last_error(), path),
		      "bad file %zu: status %d, '%s'; want %d and '%s'", i, st,
		      ferry_last_error(), bad[i].status, bad[i].says);
		CHECK(!tok, "bad file %zu gave a tokenizer", i);
		ferry_tokenizer_free(tok);
	}
}

/* Every allocation of loading fails once, in turn: each is an out-of-memory
 * error with no tokenizer (and, under the sanitizers, no leak). */
static void test_alloc_failures(const char *path)
{
	int failures = 0;

	for (long n = 0; n < 100000; n++) {
		ferry_tokenizer_t tok = NULL;
		ferry_status st;

		ferry_fault_fail_after(n);
		st = ferry_tokenizer_open(path, &tok);
		ferry_fault_fail_after(-1);
		ferry_tokenizer_free(tok);
		if (st == FERRY_OK)
			break;
		failures++;
		CHECK(st == FERRY_ERR_NOMEM && !tok, "allocation %ld failing gave %d: %s", n, st,
		      ferry_last_error());
	}
	CHECK(failures > 10, "only %d allocations while loading", failures);
}

/* Documents whose pieces are mostly distinct: more than the cache of
 * encoded pieces holds (bpe_cache.c: 131072), some frequent, some special
 * tokens, emoji and whitespace runs between. */
#define CACHE_DOCS 48
#define CACHE_WORDS 5000

struct cache_docs {
	ferry_tokenizer_t tok;
	char *text[CACHE_DOCS];
	size_t len[CACHE_DOCS];
	struct ferry_token_buf ids[CACHE_DOCS];
	int from, step, failed; /* encode_docs: from, from + step, ... */
};

static void make_cache_docs(struct cache_docs *c)
{
	static const char *const seps[] = { " ", " ", " ", "  ", "\n", "'s ", " 12 ", " \xf0\x9f\x99\x82 ",
					    "<|endoftext|>" };
	static const char *const common[] = { "the", "and", "b", "bb", "d" };
	uint64_t s = 7;

	c->from = 0;
	c->step = 1;
	for (int d = 0; d < CACHE_DOCS; d++) {
		char *p = c->text[d] = malloc(CACHE_WORDS * 24);

		for (int w = 0; w < CACHE_WORDS; w++) {
			int n = 0;

			s = s * 6364136223846793005ull + 1442695040888963407ull;
			if ((s >> 60) < 4)
				p += sprintf(p, "%s", common[(s >> 40) % 5]);
			else
				n = 3 + (int)((s >> 40) % 8);
			p += sprintf(p, "%s", seps[(s >> 50) % 9]);
			for (int k = 0; k < n; k++) {
				s = s * 6364136223846793005ull + 1442695040888963407ull;
				*p++ = (char)('a' + (s >> 40) % 26);
			}
		}
		c->len[d] = (size_t)(p - c->text[d]);
	}
}

static void *encode_docs(void *arg)
{
	struct cache_docs *c = arg;

	for (int d = c->from; d >= 0 && d < CACHE_DOCS; d += c->step)
		if (ferry_tokenizer_encode(c->tok, c->text[d], c->len[d], 0, &c->ids[d]))
			c->failed++;
	return NULL;
}

/* c's documents on n threads, each taking every n-th. */
static void encode_threads(struct cache_docs *c, int n)
{
	struct cache_docs share[4];
	pthread_t th[4];

	for (int k = 0; k < n; k++) {
		share[k] = *c;
		share[k].from = k;
		share[k].step = n;
		CHECK(!pthread_create(&th[k], NULL, encode_docs, &share[k]), "thread %d", k);
	}
	for (int k = 0; k < n; k++) {
		pthread_join(th[k], NULL);
		c->failed += share[k].failed;
		for (int d = k; d < CACHE_DOCS; d += n)
			c->ids[d] = share[k].ids[d];
	}
}

/* Four threads at once, then again one thread with the cache full, then a
 * new tokenizer in reverse order: the same ids each time, and they decode
 * to the text. */
static void test_cache(void)
{
	static struct cache_docs run[3];

	make_cache_docs(&run[0]);
	run[1] = run[2] = run[0];
	CHECK(!ferry_tokenizer_open(byte_level_file(), &run[0].tok), "%s", ferry_last_error());
	CHECK(!ferry_tokenizer_open(byte_level_file(), &run[2].tok), "%s", ferry_last_error());
	if (!run[0].tok || !run[2].tok)
		return;
	run[1].tok = run[0].tok;
	encode_threads(&run[0], 4);
	encode_docs(&run[1]);
	run[2].from = CACHE_DOCS - 1;
	run[2].step = -1;
	encode_docs(&run[2]);
	for (int d = 0; d < CACHE_DOCS; d++) {
		const struct ferry_token_buf *a = &run[0].ids[d];
		char *text = NULL;
		size_t len = 0;

		for (int r = 1; r < 3; r++)
			CHECK(run[r].ids[d].n == a->n && !memcmp(run[r].ids[d].ids, a->ids, a->n * 4),
			      "document %d: run %d gives other ids", d, r);
		CHECK(!ferry_tokenizer_decode_ids(run[0].tok, a->ids, a->n, false, &text, &len) &&
		      len == run[0].len[d] && !memcmp(text, run[0].text[d], len),
		      "document %d does not round-trip", d);
		ferry_tokenizer_text_free(text);
	}
	CHECK(!run[0].failed && !run[1].failed && !run[2].failed, "encoding failed");
	for (int d = 0; d < CACHE_DOCS; d++) {
		for (int r = 0; r < 3; r++)
			ferry_token_buf_free(&run[r].ids[d]);
		free(run[0].text[d]);
	}
	ferry_tokenizer_free(run[0].tok);
	ferry_tokenizer_free(run[2].tok);
}

/* Without unk or byte fallback an unknown character is dropped: a piece of
 * no ids, cached as such (no copy from the empty id list). */
static void test_nothing_known(void)
{
	ferry_tokenizer_t tok = NULL;
	struct ferry_token_buf b = { 0 };

	CHECK(!ferry_tokenizer_open(save(json_pack("{s:{ss,s:{si},s:[]}}", "model", "type", "BPE",
						   "vocab", "a", 0, "merges"), "nothing_known"), &tok),
	      "open: %s", ferry_last_error());
	CHECK(tok && !ferry_tokenizer_encode(tok, "z", 1, 0, &b) && b.n == 0,
	      "'z' gives %zu ids: %s", b.n, ferry_last_error());
	ferry_token_buf_free(&b);
	ferry_tokenizer_free(tok);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");

	snprintf(dir, sizeof(dir), "%s/tokenizer_files", tmp ? tmp : "/tmp");
	if (mkdir(dir, 0777) && errno != EEXIST) {
		fprintf(stderr, "cannot create %s\n", dir);
		return 1;
	}
	test_byte_level();
	test_sentencepiece();
	test_metaspace();
	test_normalizers();
	test_bad_files();
	test_nothing_known();
	test_cache();
	test_alloc_failures(sentencepiece_file());
	return test_exit_code();
}
