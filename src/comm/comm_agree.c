/*
 * Agreeing on an error: each rank brings its own status, and all leave
 * with the lowest failing rank's, message included, so every rank stops
 * at the same point and the job prints one message, not one per rank; it
 * names the rank unless every rank failed.
 */
#include "comm/comm_impl.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

#define AGREE_CHARS 512 /* as ferry_last_error's */

ferry_status ferry_comm_agree(ferry_comm_t c, ferry_status st)
{
	return ferry_comm_agree_message(c, st, NULL);
}

ferry_status ferry_comm_agree_message(ferry_comm_t c, ferry_status st, const char *mine)
{
	struct ferry_comm *h;
	int first, failed, status = st;
	char msg[AGREE_CHARS];
	ferry_status e;

	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "agree: NULL communicator");
	h = c->host;
	c->error_shared = st != FERRY_OK;
	if (h->size == 1)
		return st && mine ? ferry_error(st, "%s", mine) : st;
	first = st ? h->rank : h->size;
	if ((e = ferry_comm_all_reduce(h, &first, 1, FERRY_COMM_I32, FERRY_COMM_MIN, NULL)))
		return e;
	c->error_shared = first < h->size;
	if (!c->error_shared)
		return FERRY_OK;
	failed = st != FERRY_OK; /* all failed: rank 0's message, no rank named */
	if ((e = ferry_comm_all_reduce(h, &failed, 1, FERRY_COMM_I32, FERRY_COMM_SUM, NULL)))
		return e;
	snprintf(msg, sizeof(msg), "%s", h->rank != first ? "" : mine ? mine : ferry_last_error());
	if ((e = ferry_comm_broadcast(h, &status, 1, FERRY_COMM_I32, first, NULL)) ||
	    (e = ferry_comm_broadcast(h, msg, sizeof(msg), FERRY_COMM_BYTE, first, NULL)))
		return e;
	msg[sizeof(msg) - 1] = 0;
	if (failed == h->size)
		return ferry_error(status, "%s", msg);
	return ferry_error(status, "rank %d: %s", first, msg);
}

bool ferry_comm_error_shared(ferry_comm_t c)
{
	return c && c->error_shared;
}

/* Line i of text (its length in *len), or NULL past the last. */
static const char *line_at(const char *text, int i, size_t *len)
{
	for (; i > 0 && text; i--)
		text = strchr(text, '\n') ? strchr(text, '\n') + 1 : NULL;
	if (!text || !*text)
		return NULL;
	*len = strcspn(text, "\n");
	return text;
}

/* How this rank's line differs from rank 0's: "KEY is MINE, rank 0 has
 * THEIRS" when the keys (before '=') are one, into msg. */
static void describe_lines(const char *mine, size_t n, const char *theirs, size_t m, char *msg, size_t size)
{
	const char *eq = mine ? memchr(mine, '=', n) : NULL;
	size_t key = eq ? (size_t)(eq - mine) : 0;

	if (eq && theirs && m > key && !memcmp(mine, theirs, key + 1))
		snprintf(msg, size, "%.*s is %.*s, rank 0 has %.*s", (int)key, mine, (int)(n - key - 1), eq + 1,
			 (int)(m - key - 1), theirs + key + 1);
	else
		snprintf(msg, size, "it has %.*s where rank 0 has %.*s", mine ? (int)n : 7, mine ? mine : "no line",
			 theirs ? (int)m : 7, theirs ? theirs : "no line");
}

/* The first line where text differs from rank 0's (ref), described into
 * msg; false when none does. */
static bool first_difference(const char *text, const char *ref, char *msg, size_t size)
{
	for (int i = 0;; i++) {
		size_t n = 0, m = 0;
		const char *a = line_at(text, i, &n), *b = line_at(ref, i, &m);

		if (!a && !b)
			return false;
		if (!a || !b || n != m || memcmp(a, b, n)) {
			describe_lines(a, n, b, m, msg, size);
			return true;
		}
	}
}

ferry_status ferry_comm_same_lines(ferry_comm_t c, const char *text, const char *failed)
{
	unsigned long long len = text ? strlen(text) : 0;
	char *ref = NULL, msg[AGREE_CHARS];
	ferry_status st;

	if (!c || !text)
		return ferry_error(FERRY_ERR_INVALID, "same lines: NULL communicator or text");
	if (c->host->size == 1)
		return failed ? ferry_error(FERRY_ERR_INVALID, "%s", failed) : FERRY_OK;
	if ((st = ferry_comm_broadcast(c->host, &len, sizeof(len), FERRY_COMM_BYTE, 0, NULL)))
		return st;
	ref = ferry_calloc(1, (size_t)len + 1);
	st = ref ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "same lines: out of host memory");
	if ((st = ferry_comm_agree(c, st))) /* every rank has the room, or none goes on */
		goto out;
	if (c->host->rank == 0)
		memcpy(ref, text, (size_t)len);
	if ((st = ferry_comm_broadcast(c->host, ref, (size_t)len, FERRY_COMM_BYTE, 0, NULL)))
		goto out;
	if (!failed && first_difference(text, ref, msg, sizeof(msg)))
		failed = msg;
	st = ferry_comm_agree_message(c, failed ? FERRY_ERR_INVALID : FERRY_OK, failed);
out:
	ferry_free(ref);
	return st;
}
