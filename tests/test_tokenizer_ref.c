/*
 * ferry's tokenizer.json against Hugging Face's own `tokenizers`, an
 * independent reference: tests/tokenizer/make_reference.py trains seven small
 * BPE tokenizers (GPT-2-, Llama-3-, Qwen- and RoBERTa-like byte-level,
 * Llama-2-, Mistral- and Gemma-like SentencePiece with byte fallback), saves
 * them and the ids
 * `tokenizers` gives ~430 strings (contractions, digits, whitespace runs,
 * emoji, CJK, combining marks, added and special tokens inside text); every
 * string must encode to the same ids, with and without the post-processor's
 * special tokens, and decode to the same text, in the test environment's
 * python ($FERRY_TORCH_PYTHON, else the repository's .venv-torch, else
 * python3).  Skipped (77) where that has no Python tokenizers.
 */
#include "ferry/tokenizer.h"
#include "test_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const names[] = { "gpt2", "llama3", "roberta", "llama2", "mistral", "qwen", "gemma" };

static bool same_ids(const struct ferry_token_buf *b, json_t *ids)
{
	if (b->n != json_array_size(ids))
		return false;
	for (size_t i = 0; i < b->n; i++)
		if (b->ids[i] != json_integer_value(json_array_get(ids, i)))
			return false;
	return true;
}

static void check_case(ferry_tokenizer_t tok, const char *name, json_t *c)
{
	const char *text = json_string_value(json_object_get(c, "text"));
	const char *want = json_string_value(json_object_get(c, "decoded"));
	struct ferry_token_buf plain = { 0 }, special = { 0 };
	char *got = NULL;
	size_t len = 0;

	CHECK(!ferry_tokenizer_encode(tok, text, strlen(text), 0, &plain),
	      "%s: encode '%s': %s", name, text, ferry_last_error());
	CHECK(same_ids(&plain, json_object_get(c, "ids")),
	      "%s: '%s' encodes to %zu ids, not as tokenizers does", name, text,
	      plain.n);
	CHECK(!ferry_tokenizer_encode(tok, text, strlen(text),
				      FERRY_TOK_ADD_SPECIAL, &special),
	      "%s: encode '%s'", name, text);
	CHECK(same_ids(&special, json_object_get(c, "ids_special")),
	      "%s: '%s' with special tokens differs", name, text);
	CHECK(!ferry_tokenizer_decode_ids(tok, plain.ids, plain.n, true, &got, &len),
	      "%s: decode: %s", name, ferry_last_error());
	CHECK(got && len == strlen(want) && !memcmp(got, want, len),
	      "%s: '%s' decodes to '%s', tokenizers to '%s'", name, text,
	      got ? got : "(null)", want);
	ferry_tokenizer_text_free(got);
	ferry_token_buf_free(&plain);
	ferry_token_buf_free(&special);
}

static void check_one(const char *dir, const char *name)
{
	char path[8192 + 64], line[1 << 16];
	ferry_tokenizer_t tok = NULL;
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (ferry_tokenizer_open(path, &tok)) {
		CHECK(0, "%s: %s", name, ferry_last_error());
		return;
	}
	snprintf(path, sizeof(path), "%s/%s/cases.jsonl", dir, name);
	f = fopen(path, "r");
	CHECK(f, "%s: no cases", path);
	while (f && fgets(line, sizeof(line), f)) {
		json_t *c = json_loads(line, 0, NULL);

		CHECK(c, "%s: bad line", path);
		if (c)
			check_case(tok, name, c);
		json_decref(c);
		n++;
	}
	if (f)
		fclose(f);
	printf("%s: %d strings\n", name, n);
	ferry_tokenizer_free(tok);
}

/* The test environment's python (scripts/torch_deps.sh's venv, or
 * $FERRY_TORCH_PYTHON), not the system's, which lacks tokenizers. */
static const char *ref_python(void)
{
	const char *env = getenv("FERRY_TORCH_PYTHON");

	if (env && *env)
		return env;
	return access(FERRY_TOKREF_VENV, X_OK) == 0 ? FERRY_TOKREF_VENV : "python3";
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	char dir[4096], cmd[8192];
	int rc;

	snprintf(dir, sizeof(dir), "%s/tokenizer_ref", tmp ? tmp : "/tmp");
	snprintf(cmd, sizeof(cmd), "%s %s %s", ref_python(), FERRY_TOKREF_SCRIPT, dir);
	rc = system(cmd);
	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77 ||
	    WEXITSTATUS(rc) == 127) {
		printf("skipped: %s has no Python tokenizers (bash scripts/torch_deps.sh makes .venv-torch; or set "
		       "FERRY_TORCH_PYTHON)\n", ref_python());
		return 77;
	}
	CHECK(WEXITSTATUS(rc) == 0, "%s failed", cmd);
	for (size_t i = 0; !test_failed() && i < sizeof(names) / sizeof(names[0]); i++)
		check_one(dir, names[i]);
	return test_exit_code();
}
