/* Internal: rendering messages already parsed by jansson (ferry data). */
#ifndef FERRY_CHAT_JSON_H
#define FERRY_CHAT_JSON_H

#include "ferry/chat.h"

struct json_t;

/* The first n messages of the JSON array messages (ferry_chat_render). */
ferry_status ferry_chat_render_json(ferry_chat_t chat, struct json_t *messages,
				    size_t n, bool add_generation_prompt,
				    char **out, size_t *len) FERRY_MUST_CHECK;

#endif
