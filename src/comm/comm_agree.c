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
		return st;
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
