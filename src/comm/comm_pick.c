/*
 * Which engine runs a device backend's collectives: FERRY_COMM_ENGINE
 * (nccl, mpi, auto), auto picking NCCL when it is built in and each rank
 * on a machine has a GPU of its own (NCCL refuses two ranks on one), else
 * MPI through pinned host staging.
 */
#include "comm/comm_pick.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FERRY_HAVE_NCCL
int ferry_comm_nccl_devices(void) { return 0; }
#endif

/* auto: NCCL where it can run. */
static bool pick_auto(ferry_comm_t c, char *why, size_t n)
{
	int gpus = ferry_comm_nccl_devices(), here = ferry_comm_local_size(c);

	if (!ferry_comm_built_in("nccl"))
		snprintf(why, n, "MPI through pinned host staging: this ferry was built without NCCL");
	else if (gpus < 1)
		snprintf(why, n, "MPI through pinned host staging: NCCL sees no GPU");
	else if (gpus < here)
		snprintf(why, n, "MPI through pinned host staging: %d ranks on this machine share %d GPU%s, "
			 "which NCCL refuses", here, gpus, gpus == 1 ? "" : "s");
	else
		snprintf(why, n, "NCCL: built in, and each of this machine's %d ranks has a GPU of its own", here);
	return ferry_comm_built_in("nccl") && gpus >= here;
}

ferry_status ferry_comm_engine_check(void)
{
	const char *v = getenv("FERRY_COMM_ENGINE");

	if (!ferry_comm_engine_named())
		return FERRY_OK;
	if (strcmp(v, "nccl") && strcmp(v, "mpi"))
		return ferry_error(FERRY_ERR_INVALID, "FERRY_COMM_ENGINE=%s: nccl, mpi or auto", v);
	if (!ferry_comm_built_in(v))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "FERRY_COMM_ENGINE=%s, but this ferry was built without %s", v,
				   strcmp(v, "mpi") ? "NCCL" : "MPI");
	return FERRY_OK;
}

ferry_status ferry_comm_pick(ferry_comm_t c, bool *nccl, char *why, size_t n)
{
	const char *v = getenv("FERRY_COMM_ENGINE");
	ferry_status st;

	*nccl = false;
	if (!ferry_comm_engine_named()) {
		*nccl = pick_auto(c, why, n);
		return FERRY_OK;
	}
	if ((st = ferry_comm_engine_check()))
		return st;
	if (!strcmp(v, "mpi")) {
		snprintf(why, n, "MPI through pinned host staging: FERRY_COMM_ENGINE=mpi");
		return FERRY_OK;
	}
	*nccl = true;
	snprintf(why, n, "NCCL: FERRY_COMM_ENGINE=nccl");
	return FERRY_OK;
}

bool ferry_comm_engine_named(void)
{
	const char *v = getenv("FERRY_COMM_ENGINE");

	return v && *v && strcmp(v, "auto"); /* a name not understood too: ferry_comm_engine_check refuses it */
}

bool ferry_comm_in_use(ferry_comm_t c)
{
	return c && (ferry_comm_size(c) > 1 || ferry_comm_engine_named());
}

bool ferry_comm_pick_planned_nccl(void)
{
	const char *v = getenv("FERRY_COMM_ENGINE");

	return ferry_comm_built_in("nccl") && !(v && !strcmp(v, "mpi"));
}
