/*
 * ferry_tokenizer_encode_offsets without a reference library: on a
 * byte-level BPE trained here (special tokens inside the text, non-ASCII,
 * newline runs) the tokens are the plain encode's, their spans tile the
 * input back to back, and each span's bytes are the token's own (a special
 * token's content).  tests/cli/chat_template.sh checks the offsets against
 * `tokenizers`' through the masks they make, SentencePiece-style included.
 */
#include "ferry/tokenizer.h"
#include "test_util.h"

#include <unistd.h>

static char dir[4096];

static const char *CORPUS =
	"<|im_start|>user\nGrüße, 東京 and the café<|im_end|>\n<|im_start|>assistant\n"
	"the quick brown fox 🚀 jumps\n\n\tover the lazy dog<|im_end|>\n";

static void check_text(ferry_tokenizer_t tok, const char *text)
{
	struct ferry_token_buf plain = { 0 }, ids = { 0 };
	struct ferry_token_span *sp = NULL;
	size_t len = strlen(text), at = 0;

	CHECK(ferry_tokenizer_encode(tok, text, len, 0, &plain) == FERRY_OK, "%s", ferry_last_error());
	CHECK(ferry_tokenizer_encode_offsets(tok, text, len, &ids, &sp) == FERRY_OK, "%s", ferry_last_error());
	CHECK(sp && ids.n == plain.n && !memcmp(ids.ids, plain.ids, ids.n * sizeof(int32_t)),
	      "the ids are the plain encode's (%zu vs %zu)", ids.n, plain.n);
	for (size_t i = 0; sp && i < ids.n; i++) {
		char *one = NULL;
		size_t n = 0;
		int32_t id = ids.ids[i];

		CHECK(sp[i].start == at && sp[i].end > sp[i].start, "token %zu: [%zu, %zu) after %zu", i,
		      sp[i].start, sp[i].end, at);
		CHECK(ferry_tokenizer_decode_ids(tok, &id, 1, false, &one, &n) == FERRY_OK, "%s", ferry_last_error());
		CHECK(one && n == sp[i].end - sp[i].start && !memcmp(text + sp[i].start, one, n),
		      "token %zu (id %d): its span holds '%.*s', it is '%s'", i, id, (int)(sp[i].end - sp[i].start),
		      text + sp[i].start, one ? one : "");
		ferry_tokenizer_text_free(one);
		at = sp[i].end;
	}
	CHECK(at == len, "the spans cover %zu of %zu bytes", at, len);
	free(sp);
	ferry_token_buf_free(&plain);
	ferry_token_buf_free(&ids);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	const char *special[] = { "<|im_start|>", "<|im_end|>" };
	struct ferry_bpe_train_opts o = { .vocab = 330, .special = special, .n_special = 2, .threads = 1 };
	char corpus[4200], json[4200];
	ferry_tokenizer_t tok = NULL;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s", tmp ? tmp : "/tmp");
	snprintf(corpus, sizeof(corpus), "%s/offsets_corpus.%d.txt", dir, (int)getpid());
	snprintf(json, sizeof(json), "%s/offsets_tok.%d.json", dir, (int)getpid());
	f = fopen(corpus, "w");
	CHECK(f != NULL, "cannot write %s", corpus);
	if (!f)
		return test_exit_code();
	for (int i = 0; i < 20; i++)
		fputs(CORPUS, f);
	fclose(f);
	const char *paths[] = { corpus };

	CHECK(ferry_tokenizer_train(paths, 1, &o, json, NULL) == FERRY_OK, "%s", ferry_last_error());
	CHECK(ferry_tokenizer_open(json, &tok) == FERRY_OK, "%s", ferry_last_error());
	if (tok) {
		check_text(tok, CORPUS);
		check_text(tok, "<|im_start|><|im_end|>  x\n\n");
		check_text(tok, "ü\xe6\x9d\xb1 new words the café");
	}
	ferry_tokenizer_free(tok);
	remove(corpus);
	remove(json);
	return test_exit_code();
}
