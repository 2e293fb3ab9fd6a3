/*
 * Chat templates: a conversation rendered as the model's template writes
 * it, the way transformers' apply_chat_template(tokenize=False) does.
 *
 * The template is Jinja; ferry interprets the subset that the chat
 * templates of Llama 3.x, Qwen 2.5/3, Mistral, Gemma 2/3 and Phi-3/4 use
 * (docs/data.md, "Conversations").  A template using anything else is
 * refused when opened (FERRY_ERR_UNSUPPORTED or FERRY_ERR_FORMAT, the
 * message naming the construct and its line); raise_exception() in a
 * template fails the render with FERRY_ERR_INVALID and its message.
 */
#ifndef FERRY_CHAT_H
#define FERRY_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry/ferry.h"
#include "ferry/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_chat *ferry_chat_t;

/* path: a tokenizer directory (or a file in one).  The template is
 * chat_template.jinja when the directory has one, else
 * tokenizer_config.json's chat_template (a string, or a list of
 * {name, template}: the one named "default"); the special tokens
 * (bos_token, eos_token, ...: strings or {"content": ...}) come from
 * tokenizer_config.json.  No template: FERRY_ERR_INVALID naming the
 * directory. */
ferry_status ferry_chat_open(const char *path, ferry_chat_t *out) FERRY_MUST_CHECK;
/* A template from its text (name: for messages), special tokens from the
 * JSON object text `specials` (may be NULL). */
ferry_status ferry_chat_open_source(const char *src, size_t n, const char *name,
				    const char *specials, ferry_chat_t *out)
	FERRY_MUST_CHECK;
void ferry_chat_free(ferry_chat_t chat);

/* Renders the first n_messages (-1: all) of messages_json (a JSON array
 * of {"role", "content", ...} objects, as text) into *out (malloc'd,
 * NUL-ended; free()), *len its bytes.  Variables: messages,
 * add_generation_prompt, tools and documents (None) and the special
 * tokens. */
ferry_status ferry_chat_render(ferry_chat_t chat, const char *messages_json,
			       long n_messages, bool add_generation_prompt,
			       char **out, size_t *len) FERRY_MUST_CHECK;

/* A special token's string from tokenizer_config.json ("eos_token"),
 * NULL when absent. */
const char *ferry_chat_special(ferry_chat_t chat, const char *name);

/* The tokens that end the assistant's turn, for sampling: the ids of
 * generation_config.json's eos_token_id (a number or a list) in the
 * template's directory, else the id in tok of tokenizer_config.json's
 * eos_token.  Up to cap into ids; returns how many (0: none known), *from
 * the file they came from. */
int ferry_chat_stop_ids(ferry_chat_t chat, ferry_tokenizer_t tok, int32_t *ids, int cap,
			const char **from);

#ifdef __cplusplus
}
#endif
#endif
