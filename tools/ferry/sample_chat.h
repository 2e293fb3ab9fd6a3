/* ferry sample --chat: the conversation rendered by the tokenizer
 * directory's chat template with the generation prompt, and the tokens
 * that end the reply. */
#ifndef FERRY_TOOLS_SAMPLE_CHAT_H
#define FERRY_TOOLS_SAMPLE_CHAT_H

#include <stdint.h>
#include "ferry/tokenizer.h"

struct sample_chat {
	const char *system, *prompt, *messages; /* --system, --prompt, --messages FILE */
	int32_t stop[16];                        /* the end-of-turn ids */
	int n_stop;
	const char *stop_from;                   /* where they came from */
};

/* The prompt's ids into *seq (malloc'd with room for extra more), *len
 * their count, and sc's stop ids.  0, or 1 after a message. */
int sample_chat_prompt(struct sample_chat *sc, const char *tok_path, ferry_tokenizer_t tok, int vocab,
		       int extra, int32_t **seq, int *len);

#endif
