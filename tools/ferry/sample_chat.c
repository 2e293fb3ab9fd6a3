/* ferry sample --chat (sample_chat.h). */
#include "sample_chat.h"
#include "ferry/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s as a JSON string literal into out (room for 6 * strlen(s) + 3). */
static void json_quote(const char *s, char *out)
{
	*out++ = '"';
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			*out++ = '\\';
			*out++ = (char)c;
		} else if (c < 0x20) {
			out += sprintf(out, "\\u%04x", c);
		} else {
			*out++ = (char)c;
		}
	}
	*out++ = '"';
	*out = 0;
}

/* The messages as JSON text (malloc'd): the file's, or --system and --prompt. */
static char *messages_json(const struct sample_chat *sc)
{
	size_t n = 64 + 6 * ((sc->system ? strlen(sc->system) : 0) + (sc->prompt ? strlen(sc->prompt) : 0));
	char *out, *p;

	if (sc->messages) {
		FILE *f = fopen(sc->messages, "rb");
		long len;

		if (!f) {
			fprintf(stderr, "ferry sample: --messages %s: cannot open\n", sc->messages);
			return NULL;
		}
		fseek(f, 0, SEEK_END);
		len = ftell(f);
		fseek(f, 0, SEEK_SET);
		out = len >= 0 ? calloc(1, (size_t)len + 1) : NULL;
		if (out && fread(out, 1, (size_t)len, f) != (size_t)len) {
			free(out);
			out = NULL;
		}
		fclose(f);
		if (!out)
			fprintf(stderr, "ferry sample: --messages %s: cannot read\n", sc->messages);
		return out;
	}
	out = p = malloc(n);
	if (!out)
		return NULL;
	p += sprintf(p, "[");
	if (sc->system) {
		p += sprintf(p, "{\"role\": \"system\", \"content\": ");
		json_quote(sc->system, p);
		p += strlen(p);
		p += sprintf(p, "}, ");
	}
	p += sprintf(p, "{\"role\": \"user\", \"content\": ");
	json_quote(sc->prompt ? sc->prompt : "", p);
	p += strlen(p);
	sprintf(p, "}]");
	return out;
}

int sample_chat_prompt(struct sample_chat *sc, const char *tok_path, ferry_tokenizer_t tok, int vocab,
		       int extra, int32_t **seq, int *len)
{
	struct ferry_token_buf b = { 0 };
	ferry_chat_t chat = NULL;
	char *msgs = NULL, *text = NULL;
	size_t n;
	int rc = 1;

	if (!tok_path || !ferry_tokenizer_can_encode(tok)) {
		fprintf(stderr, "ferry sample: --chat needs a Hugging Face tokenizer directory with a chat template "
			"(--tokenizer DIR, or the checkpoint's own)\n");
		return 1;
	}
	if (ferry_chat_open(tok_path, &chat) != FERRY_OK) {
		fprintf(stderr, "ferry sample: --chat: %s\n", ferry_last_error());
		return 1;
	}
	msgs = messages_json(sc);
	if (!msgs)
		goto out;
	if (ferry_chat_render(chat, msgs, -1, true, &text, &n) != FERRY_OK ||
	    ferry_tokenizer_encode(tok, text, n, 0, &b) != FERRY_OK) {
		fprintf(stderr, "ferry sample: --chat: %s%s%s\n", sc->messages ? sc->messages : "", sc->messages ? ": " : "", ferry_last_error());
		goto out;
	}
	for (size_t i = 0; i < b.n; i++)
		if (b.ids[i] >= vocab) {
			fprintf(stderr, "ferry sample: --chat: token %d of the tokenizer is outside the model's "
				"vocabulary of %d\n", b.ids[i], vocab);
			goto out;
		}
	sc->n_stop = ferry_chat_stop_ids(chat, tok, sc->stop, 16, &sc->stop_from);
	*seq = malloc((b.n + (size_t)extra + 1) * sizeof(int32_t));
	if (!*seq) {
		fprintf(stderr, "ferry sample: out of memory\n");
		goto out;
	}
	memcpy(*seq, b.ids, b.n * sizeof(int32_t));
	*len = (int)b.n;
	rc = 0;
out:
	ferry_token_buf_free(&b);
	free(text);
	free(msgs);
	ferry_chat_free(chat);
	return rc;
}
