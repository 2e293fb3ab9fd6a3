/*
 * The MPI engine: collectives on host buffers over a communicator of
 * MPI's world (FERRY_HAVE_MPI builds only).
 *
 * MPI is initialised by the first communicator opened (with
 * MPI_THREAD_MULTIPLE: a schedule's comm stream runs collectives on its
 * own thread, on a communicator of its own, while the main thread runs
 * others) and finalised with the last one freed.  Errors keep MPI's
 * default handler on the world: a failed call or a lost peer ends the job
 * and the launcher names the rank, rather than leaving the others waiting
 * (a peer on the same machine is named by the watchdog first,
 * comm_watch.c).
 * Counts past INT_MAX are split into several calls where the layout
 * allows (all-reduce, broadcast).
 */
#include "comm/comm_impl.h"
#include "core/error.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message of a few ints on its way (send_ints): MPI reads msg until
 * the request completes. */
struct mpi_send {
	MPI_Request req;
	int msg[4];
	struct mpi_send *next;
};

struct mpi_ctx {
	MPI_Comm comm;
	struct mpi_send *sends; /* send_ints' not yet known complete */
};

static int users; /* communicators open: the last one finalises MPI */

static MPI_Comm comm_of(const struct ferry_comm *c)
{
	return ((const struct mpi_ctx *)c->ctx)->comm;
}

static MPI_Datatype mpi_type(enum ferry_comm_dtype t)
{
	switch (t) {
	case FERRY_COMM_F32: return MPI_FLOAT;
	case FERRY_COMM_F64: return MPI_DOUBLE;
	case FERRY_COMM_I32: return MPI_INT;
	case FERRY_COMM_BYTE: return MPI_BYTE;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(enum ferry_comm_op op)
{
	switch (op) {
	case FERRY_COMM_SUM:
	case FERRY_COMM_AVG: return MPI_SUM;
	case FERRY_COMM_MAX: return MPI_MAX;
	case FERRY_COMM_MIN: return MPI_MIN;
	}
	return MPI_OP_NULL;
}

static ferry_status failed(int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return FERRY_OK;
	MPI_Error_string(rc, msg, &len);
	return ferry_error(FERRY_ERR_IO, "MPI %s: %.*s", what, len, msg);
}

/* The sum divided by the ranks, in place (division, not a reciprocal:
 * the bits of x / n for any n). */
static void divide(void *buf, size_t count, enum ferry_comm_dtype t, int n)
{
	if (t == FERRY_COMM_F32)
		for (size_t i = 0; i < count; i++)
			((float *)buf)[i] /= (float)n;
	else
		for (size_t i = 0; i < count; i++)
			((double *)buf)[i] /= (double)n;
}

static ferry_status mpi_all_reduce(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t,
				   enum ferry_comm_op op, void *stream)
{
	size_t esz = ferry_comm_dtype_size(t);
	ferry_status st = FERRY_OK;

	(void)stream;
	for (size_t off = 0; off < count && !st; off += INT_MAX) {
		int n = count - off < INT_MAX ? (int)(count - off) : INT_MAX;

		st = failed(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * esz, n, mpi_type(t), mpi_op(op),
					  comm_of(c)), "all-reduce");
	}
	if (!st && op == FERRY_COMM_AVG && c->size > 1)
		divide(buf, count, t, c->size);
	return st;
}

static ferry_status too_many(size_t count, const char *what)
{
	return ferry_error(FERRY_ERR_UNSUPPORTED, "MPI %s of %zu elements per rank: at most %d", what, count,
			   INT_MAX);
}

static ferry_status mpi_reduce_scatter(struct ferry_comm *c, const void *send, void *recv, size_t count,
				       enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	ferry_status st;

	(void)stream;
	if (count > INT_MAX)
		return too_many(count, "reduce-scatter");
	st = failed(MPI_Reduce_scatter_block(send, recv, (int)count, mpi_type(t), mpi_op(op), comm_of(c)),
		    "reduce-scatter");
	if (!st && op == FERRY_COMM_AVG && c->size > 1)
		divide(recv, count, t, c->size);
	return st;
}

static ferry_status mpi_all_gather(struct ferry_comm *c, const void *send, void *recv, size_t count,
				   enum ferry_comm_dtype t, void *stream)
{
	const void *in_place = (const char *)recv + (size_t)c->rank * count * ferry_comm_dtype_size(t);

	(void)stream;
	if (count > INT_MAX)
		return too_many(count, "all-gather");
	return failed(MPI_Allgather(send == in_place ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv, (int)count,
				    mpi_type(t), comm_of(c)), "all-gather");
}

/* counts as MPI's ints and their displacements (2 * size ints, freed by
 * the caller). */
static ferry_status mpi_counts(const struct ferry_comm *c, const size_t *counts, const char *what, int **out)
{
	int *n = ferry_calloc(2 * (size_t)c->size, sizeof(int));
	size_t displ = 0;

	*out = n;
	if (!n)
		return ferry_error(FERRY_ERR_NOMEM, "MPI %s: out of host memory", what);
	for (int r = 0; r < c->size; r++) {
		if (counts[r] > INT_MAX || displ > INT_MAX)
			return too_many(counts[r] > INT_MAX ? counts[r] : displ, what);
		n[r] = (int)counts[r];
		n[c->size + r] = (int)displ;
		displ += counts[r];
	}
	return FERRY_OK;
}

static ferry_status mpi_reduce_scatter_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
					 enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	int *n;
	ferry_status st = mpi_counts(c, counts, "reduce-scatter", &n);

	(void)stream;
	if (!st)
		st = failed(MPI_Reduce_scatter(send, recv, n, mpi_type(t), mpi_op(op), comm_of(c)), "reduce-scatter");
	if (!st && op == FERRY_COMM_AVG && c->size > 1) /* as the all-reduce averages */
		divide(recv, counts[c->rank], t, c->size);
	ferry_free(n);
	return st;
}

static ferry_status mpi_all_gather_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
				     enum ferry_comm_dtype t, void *stream)
{
	int *n;
	ferry_status st = mpi_counts(c, counts, "all-gather", &n);

	(void)stream;
	if (!st) {
		const void *in_place = (const char *)recv + (size_t)n[c->size + c->rank] * ferry_comm_dtype_size(t);

		st = failed(MPI_Allgatherv(send == in_place ? MPI_IN_PLACE : send, n[c->rank], mpi_type(t), recv, n,
					   n + c->size, mpi_type(t), comm_of(c)), "all-gather");
	}
	ferry_free(n);
	return st;
}

static ferry_status mpi_broadcast(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t, int root,
				  void *stream)
{
	size_t esz = ferry_comm_dtype_size(t);
	ferry_status st = FERRY_OK;

	(void)stream;
	for (size_t off = 0; off < count && !st; off += INT_MAX) {
		int n = count - off < INT_MAX ? (int)(count - off) : INT_MAX;

		st = failed(MPI_Bcast((char *)buf + off * esz, n, mpi_type(t), root, comm_of(c)), "broadcast");
	}
	return st;
}

static ferry_status mpi_barrier(struct ferry_comm *c)
{
	return failed(MPI_Barrier(comm_of(c)), "barrier");
}

/* A duplicate of `from` (MPI_COMM_WORLD for the first) into c. */
static ferry_status take_comm(struct ferry_comm *c, MPI_Comm from)
{
	struct mpi_ctx *x = ferry_calloc(1, sizeof(*x));
	ferry_status st;

	if (!x)
		return ferry_error(FERRY_ERR_NOMEM, "MPI communicator: out of host memory");
	if ((st = failed(MPI_Comm_dup(from, &x->comm), "communicator"))) {
		ferry_free(x);
		return st;
	}
	c->ctx = x;
	users++;
	return FERRY_OK;
}

static ferry_status mpi_dup(struct ferry_comm *c, struct ferry_comm *out)
{
	return take_comm(out, comm_of(c));
}

static void mpi_abort(struct ferry_comm *c, int code)
{
	(void)c;
	MPI_Abort(MPI_COMM_WORLD, code);
}

/* Frees the sends MPI is done with; those it is not (to a rank that hangs,
 * as the job ends) are left to MPI. */
static void reap_sends(struct mpi_ctx *x)
{
	for (struct mpi_send **at = &x->sends; *at;) {
		struct mpi_send *m = *at;
		int done = 0;

		MPI_Test(&m->req, &done, MPI_STATUS_IGNORE);
		if (done) {
			*at = m->next;
			ferry_free(m);
		} else {
			at = &m->next;
		}
	}
}

static ferry_status mpi_send_ints(struct ferry_comm *c, int to, int tag, const int *msg, int n)
{
	struct mpi_ctx *x = c->ctx;
	struct mpi_send *m;

	reap_sends(x);
	if (n > 4 || !(m = ferry_calloc(1, sizeof(*m))))
		return ferry_error(FERRY_ERR_NOMEM, "MPI message: out of host memory");
	memcpy(m->msg, msg, (size_t)n * sizeof(*msg));
	if (MPI_Isend(m->msg, n, MPI_INT, to, tag, x->comm, &m->req) != MPI_SUCCESS) {
		ferry_free(m);
		return ferry_error(FERRY_ERR_IO, "MPI message to rank %d failed", to);
	}
	m->next = x->sends;
	x->sends = m;
	return FERRY_OK;
}

static bool mpi_recv_ints(struct ferry_comm *c, int tag, int *msg, int n, int *from)
{
	MPI_Status status;
	int came = 0;

	if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_of(c), &came, &status) != MPI_SUCCESS || !came)
		return false;
	*from = status.MPI_SOURCE;
	return MPI_Recv(msg, n, MPI_INT, status.MPI_SOURCE, tag, comm_of(c), MPI_STATUS_IGNORE) == MPI_SUCCESS;
}

static void mpi_free(struct ferry_comm *c)
{
	struct mpi_ctx *x = c->ctx;

	if (!x)
		return;
	for (double t0 = MPI_Wtime(); x->sends && MPI_Wtime() - t0 < 1;) /* answers on their way */
		reap_sends(x);
	MPI_Comm_free(&x->comm);
	ferry_free(x);
	if (--users == 0)
		MPI_Finalize();
}

static const struct ferry_comm_iface mpi_iface = {
	.version = FERRY_COMM_IFACE_VERSION,
	.name = "mpi",
	.all_reduce = mpi_all_reduce,
	.reduce_scatter = mpi_reduce_scatter,
	.all_gather = mpi_all_gather,
	.reduce_scatter_v = mpi_reduce_scatter_v,
	.all_gather_v = mpi_all_gather_v,
	.broadcast = mpi_broadcast,
	.barrier = mpi_barrier,
	.dup = mpi_dup,
	.abort = mpi_abort,
	.free = mpi_free,
	.send_ints = mpi_send_ints,
	.recv_ints = mpi_recv_ints,
};

/* Open MPI's ranks wait for their peers by polling, and only yield the
 * core when mpirun counts more ranks than slots.  A rank of ferry runs
 * its compute threads beside the comm stream's thread, so a collective
 * waiting for the other rank would hold a core the compute (or the other
 * rank, on a shared core, for a whole scheduler tick: 4 ms a message)
 * needs: ask for the yield unless the user chose (an MCA variable is read
 * from the environment by MPI_Init). */
static void yield_when_idle(void)
{
#ifdef OPEN_MPI
	setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
#endif
}

/* MPI with threads, once. */
static ferry_status init_mpi(void)
{
	int inited = 0, provided = 0;

	MPI_Initialized(&inited);
	if (!inited)
		yield_when_idle();
	if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
		return ferry_error(FERRY_ERR_IO, "MPI_Init_thread failed");
	if (inited)
		MPI_Query_thread(&provided);
	if (provided < MPI_THREAD_MULTIPLE)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "this MPI offers threads at level %d, not "
				   "MPI_THREAD_MULTIPLE (%d), which ferry's comm stream needs", provided,
				   MPI_THREAD_MULTIPLE);
	return FERRY_OK;
}

/* This machine's ranks: their number, and this one's among them. */
static ferry_status local_ranks(struct ferry_comm *c)
{
	MPI_Comm node;
	ferry_status st = failed(MPI_Comm_split_type(comm_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
				 "split by machine");

	if (st)
		return st;
	MPI_Comm_rank(node, &c->local_rank);
	MPI_Comm_size(node, &c->local_size);
	st = failed(MPI_Allreduce(&c->rank, &c->machine, 1, MPI_INT, MPI_MIN, node), "name the machine");
	MPI_Comm_free(&node);
	return st;
}

ferry_status ferry_comm_mpi_open(struct ferry_comm *c)
{
	ferry_status st = init_mpi();

	if (st || (st = take_comm(c, MPI_COMM_WORLD)))
		return st;
	c->iface = &mpi_iface;
	MPI_Comm_rank(comm_of(c), &c->rank);
	MPI_Comm_size(comm_of(c), &c->size);
	if ((st = local_ranks(c)))
		mpi_free(c);
	return st;
}

const char *ferry_comm_mpi_version(char *buf, size_t n)
{
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0;

	MPI_Get_library_version(v, &len);
	snprintf(buf, n, "%.*s", (int)strcspn(v, ",\n"), v);
	return buf;
}
