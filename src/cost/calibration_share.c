/*
 * One calibration for every rank: rank 0's, sent as its cache file's
 * text, so that ranks on machines of their own (whose caches differ)
 * predict alike and --policy auto chooses alike on each.
 */
#include "cost/calibration.h"
#include "core/error.h"
#include "ferry/comm.h"

#include <stdlib.h>
#include <string.h>

ferry_status ferry_calibration_share(ferry_comm_t comm, ferry_calibration_t *c)
{
	bool root = ferry_comm_rank(comm) == 0;
	char *text = root && *c ? ferry_calib_to_text(*c) : NULL;
	long long n = text ? (long long)strlen(text) + 1 : 0;
	ferry_status st;

	if (ferry_comm_size(comm) < 2) {
		free(text);
		return FERRY_OK;
	}
	if ((st = ferry_comm_broadcast(comm, &n, sizeof(n), FERRY_COMM_BYTE, 0, NULL))) {
		free(text);
		return st;
	}
	if (!n)
		return ferry_error(FERRY_ERR_INVALID, "rank 0 has no calibration to share");
	if (!root && !(text = malloc((size_t)n)))
		st = ferry_error(FERRY_ERR_NOMEM, "calibration: out of host memory");
	/* every rank takes part in the broadcast (a failed malloc as well) */
	if (!(st = ferry_comm_agree(comm, st)))
		st = ferry_comm_broadcast(comm, text, (size_t)n, FERRY_COMM_BYTE, 0, NULL);
	if (!st && !root) {
		ferry_calibration_t mine = NULL;

		text[n - 1] = 0;
		if (!(st = ferry_calib_from_text(text, "of rank 0", &mine))) {
			ferry_calibration_free(*c);
			*c = mine;
		}
	}
	free(text);
	return st;
}
