/*
 * Communicators: opening the right engine for how the process was
 * started, argument checks, and dispatch to the engine (comm_impl.h).
 *
 * MPI is initialised only when a launcher started the process (its
 * environment names a rank): a plain `ferry train` then runs alone
 * without MPI's start-up, and so do the sanitizer builds' tests.
 */
#include "comm/comm_impl.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

size_t ferry_comm_dtype_size(enum ferry_comm_dtype t)
{
	switch (t) {
	case FERRY_COMM_F32: return 4;
	case FERRY_COMM_F64: return 8;
	case FERRY_COMM_I32: return 4;
	case FERRY_COMM_BYTE: return 1;
	}
	return 0;
}

bool ferry_comm_built_in(const char *engine)
{
#ifdef FERRY_HAVE_MPI
	if (!strcmp(engine, "mpi"))
		return true;
#endif
#ifdef FERRY_HAVE_NCCL
	if (!strcmp(engine, "nccl"))
		return true;
#endif
	(void)engine;
	return false;
}

const char *ferry_comm_engine_version(const char *engine, char *buf, size_t n)
{
	if (n)
		buf[0] = 0;
#ifdef FERRY_HAVE_MPI
	if (!strcmp(engine, "mpi"))
		return ferry_comm_mpi_version(buf, n);
#endif
#ifdef FERRY_HAVE_NCCL
	if (!strcmp(engine, "nccl"))
		return ferry_comm_nccl_version(buf, n);
#endif
	(void)engine;
	return buf;
}

/* The job's size as the launcher's environment says (Open MPI, PMI of
 * MPICH and Slurm, a Slurm step), 0 when none says. */
static int launched_size(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++) {
		const char *v = getenv(vars[i]);

		if (v && atoi(v) > 0 && (i < 2 || getenv("SLURM_STEP_ID")))
			return atoi(v);
	}
	return getenv("PMIX_RANK") ? 2 : 0; /* PMIx names the rank only: several */
}

bool ferry_comm_launched(void)
{
	return launched_size() > 1 || getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK");
}

static ferry_status new_comm(struct ferry_comm **out)
{
	*out = ferry_calloc(1, sizeof(**out));
	if (!*out)
		return ferry_error(FERRY_ERR_NOMEM, "communicator: out of host memory");
	(*out)->host = *out;
	return FERRY_OK;
}

ferry_status ferry_comm_open_single(ferry_comm_t *out)
{
	ferry_status st = new_comm(out);

	if (st)
		return st;
	**out = (struct ferry_comm){ &ferry_comm_single_iface, NULL, 0, 1, 0, 1, 0, *out, false, NULL, 0 };
	return FERRY_OK;
}

ferry_status ferry_comm_open(ferry_comm_t *out)
{
	int want = launched_size();
	ferry_status st;

	*out = NULL;
	if (!ferry_comm_launched())
		return ferry_comm_open_single(out);
#ifdef FERRY_HAVE_MPI
	if ((st = new_comm(out)) || (st = ferry_comm_mpi_open(*out))) {
		ferry_free(*out);
		*out = NULL;
		return st;
	}
	if (want > 1 && (*out)->size == 1 && getenv("SLURM_STEP_ID")) {
		ferry_comm_free(*out);
		*out = NULL;
		return ferry_error(FERRY_ERR_UNSUPPORTED, "srun started %d tasks, but MPI sees each alone (no PMI): "
				   "run srun --mpi=pmix (or pmi2), or mpirun", want);
	}
	return FERRY_OK;
#else
	(void)st;
	if (want <= 1)
		return ferry_comm_open_single(out);
	return ferry_error(FERRY_ERR_UNSUPPORTED, "started as one of %d ranks by an MPI launcher, but this ferry "
			   "was built without MPI (apt-get install libopenmpi-dev, then rebuild)", want);
#endif
}

ferry_status ferry_comm_open_nccl(ferry_comm_t base, int device, ferry_comm_t *out)
{
	ferry_status st;

	*out = NULL;
	if (!base)
		return ferry_error(FERRY_ERR_INVALID, "nccl: no base communicator");
#ifdef FERRY_HAVE_NCCL
	if ((st = new_comm(out)))
		return st;
	(*out)->host = base->host;
	if ((st = ferry_comm_nccl_open(base->host, device, *out))) {
		ferry_free(*out);
		*out = NULL;
		return st;
	}
	ferry_comm_watch_join(*out, base->host); /* its device collectives too */
	return FERRY_OK;
#else
	(void)st;
	(void)device;
	return ferry_error(FERRY_ERR_UNSUPPORTED, "this ferry was built without NCCL");
#endif
}

ferry_status ferry_comm_dup(ferry_comm_t c, ferry_comm_t *out)
{
	ferry_status st = new_comm(out);

	if (st)
		return st;
	**out = *c;
	(*out)->ctx = NULL;
	(*out)->host = c->host == c ? *out : c->host;
	(*out)->error_shared = false;
	if (c->iface->dup && (st = c->iface->dup(c, *out))) {
		ferry_free(*out);
		*out = NULL;
		return st;
	}
	ferry_comm_watch_attach(*out); /* a watched one's duplicate is watched */
	return FERRY_OK;
}

void ferry_comm_free(ferry_comm_t c)
{
	if (!c)
		return;
	ferry_comm_watch_detach(c);
	if (c->iface->free)
		c->iface->free(c);
	ferry_free(c);
}

int ferry_comm_rank(ferry_comm_t c) { return c->rank; }
int ferry_comm_size(ferry_comm_t c) { return c->size; }
int ferry_comm_local_rank(ferry_comm_t c) { return c->local_rank; }
int ferry_comm_local_size(ferry_comm_t c) { return c->local_size; }
int ferry_comm_machine(ferry_comm_t c) { return c->machine; }
ferry_comm_t ferry_comm_host(ferry_comm_t c) { return c->host; }
const char *ferry_comm_engine(ferry_comm_t c) { return c->iface->name; }
bool ferry_comm_device_buffers(ferry_comm_t c) { return c->iface->device_buffers; }

/* st = call, a collective of c, timed by c's watch (comm_watch.c), or by
 * the engine on its stream (times_itself: NCCL's return once queued). */
#define WATCHED(c, what, call)                                                                                 \
	((c)->iface->times_itself ? (st = (call))                                                              \
				  : (ferry_comm_watch_begin(c, what), st = (call), ferry_comm_watch_end(c), st))

/* Arguments every collective shares. */
static ferry_status check(ferry_comm_t c, const void *buf, enum ferry_comm_dtype t, const char *what)
{
	if (!c || !buf)
		return ferry_error(FERRY_ERR_INVALID, "%s: NULL communicator or buffer", what);
	if (!ferry_comm_dtype_size(t))
		return ferry_error(FERRY_ERR_INVALID, "%s: unknown element type %d", what, (int)t);
	return FERRY_OK;
}

ferry_status ferry_comm_all_reduce(ferry_comm_t c, void *buf, size_t count, enum ferry_comm_dtype t,
				   enum ferry_comm_op op, void *stream)
{
	ferry_status st = check(c, buf, t, "all-reduce");

	if (!st && op == FERRY_COMM_AVG && t != FERRY_COMM_F32 && t != FERRY_COMM_F64)
		st = ferry_error(FERRY_ERR_INVALID, "all-reduce: an average of integers");
	return st || !count ? st : WATCHED(c, "all-reduce", c->iface->all_reduce(c, buf, count, t, op, stream));
}

ferry_status ferry_comm_reduce_scatter(ferry_comm_t c, const void *send, void *recv, size_t count,
				       enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	ferry_status st = check(c, send, t, "reduce-scatter");

	if (!st && !recv)
		st = ferry_error(FERRY_ERR_INVALID, "reduce-scatter: NULL buffer");
	if (!st && op == FERRY_COMM_AVG && t != FERRY_COMM_F32 && t != FERRY_COMM_F64)
		st = ferry_error(FERRY_ERR_INVALID, "reduce-scatter: an average of integers");
	return st || !count ? st
			    : WATCHED(c, "reduce-scatter", c->iface->reduce_scatter(c, send, recv, count, t, op, stream));
}

ferry_status ferry_comm_all_gather(ferry_comm_t c, const void *send, void *recv, size_t count,
				   enum ferry_comm_dtype t, void *stream)
{
	ferry_status st = check(c, send, t, "all-gather");

	if (!st && !recv)
		st = ferry_error(FERRY_ERR_INVALID, "all-gather: NULL buffer");
	return st || !count ? st : WATCHED(c, "all-gather", c->iface->all_gather(c, send, recv, count, t, stream));
}

/* The elements of every rank's slice together. */
static size_t total_count(const struct ferry_comm *c, const size_t *counts)
{
	size_t n = 0;

	for (int r = 0; r < c->size; r++)
		n += counts[r];
	return n;
}

ferry_status ferry_comm_reduce_scatter_v(ferry_comm_t c, const void *send, void *recv, const size_t *counts,
					 enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	ferry_status st = check(c, send, t, "reduce-scatter");

	if (!st && !counts)
		st = ferry_error(FERRY_ERR_INVALID, "reduce-scatter: NULL counts");
	if (!st && !recv && counts[c->rank])
		st = ferry_error(FERRY_ERR_INVALID, "reduce-scatter: NULL buffer");
	if (!st && op == FERRY_COMM_AVG && t != FERRY_COMM_F32 && t != FERRY_COMM_F64)
		st = ferry_error(FERRY_ERR_INVALID, "reduce-scatter: an average of integers");
	return st || !total_count(c, counts)
		       ? st
		       : WATCHED(c, "reduce-scatter", c->iface->reduce_scatter_v(c, send, recv, counts, t, op, stream));
}

ferry_status ferry_comm_all_gather_v(ferry_comm_t c, const void *send, void *recv, const size_t *counts,
				     enum ferry_comm_dtype t, void *stream)
{
	ferry_status st = check(c, recv, t, "all-gather");

	if (!st && !counts)
		st = ferry_error(FERRY_ERR_INVALID, "all-gather: NULL counts");
	if (!st && !send && counts[c->rank])
		st = ferry_error(FERRY_ERR_INVALID, "all-gather: NULL buffer");
	return st || !total_count(c, counts) ? st
					     : WATCHED(c, "all-gather", c->iface->all_gather_v(c, send, recv, counts, t, stream));
}

ferry_status ferry_comm_broadcast(ferry_comm_t c, void *buf, size_t count, enum ferry_comm_dtype t, int root,
				  void *stream)
{
	ferry_status st = check(c, buf, t, "broadcast");

	if (!st && (root < 0 || root >= c->size))
		st = ferry_error(FERRY_ERR_INVALID, "broadcast: root %d outside ranks 0 to %d", root, c->size - 1);
	return st || !count ? st : WATCHED(c, "broadcast", c->iface->broadcast(c, buf, count, t, root, stream));
}

ferry_status ferry_comm_barrier(ferry_comm_t c)
{
	ferry_status st;

	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "barrier: NULL communicator");
	return WATCHED(c->host, "barrier", c->host->iface->barrier(c->host));
}

void ferry_comm_abort(ferry_comm_t c, int code)
{
	if (c)
		ferry_comm_watch_bye(c);
	if (c && c->iface->abort)
		c->iface->abort(c, code);
}
