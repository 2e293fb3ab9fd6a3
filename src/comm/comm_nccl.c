/*
 * The NCCL engine: collectives on device buffers, queued on the caller's
 * CUDA stream (a schedule's comm stream), or on a stream of the
 * communicator's own that the call waits for when the caller names none
 * (FERRY_HAVE_NCCL builds only).
 *
 * Made over a host communicator, as llm.c makes its: rank 0 draws the
 * unique id and the host communicator broadcasts it.  NCCL refuses two
 * ranks on one device; such ranks use the MPI engine instead.
 */
#include "comm/comm_impl.h"
#include "comm/comm_pick.h"
#include "core/error.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

/* What the stream's host function marks begun: a collective of c. */
struct nccl_mark {
	struct ferry_comm *c;
	const char *what;
};

enum { MARK_ALL_REDUCE, MARK_REDUCE_SCATTER, MARK_ALL_GATHER, MARK_BROADCAST, MARKS };

struct nccl_ctx {
	ncclComm_t comm;
	cudaStream_t own;
	struct nccl_mark marks[MARKS];
	bool aborted; /* by the timeout: never destroyed after */
};

static struct nccl_ctx *ctx_of(const struct ferry_comm *c)
{
	return c->ctx;
}

static ncclDataType_t nccl_type(enum ferry_comm_dtype t)
{
	switch (t) {
	case FERRY_COMM_F32: return ncclFloat32;
	case FERRY_COMM_F64: return ncclFloat64;
	case FERRY_COMM_I32: return ncclInt32;
	case FERRY_COMM_BYTE: return ncclUint8;
	}
	return ncclUint8;
}

static ncclRedOp_t nccl_op(enum ferry_comm_op op)
{
	switch (op) {
	case FERRY_COMM_SUM: return ncclSum;
	case FERRY_COMM_AVG: return ncclAvg;
	case FERRY_COMM_MAX: return ncclMax;
	case FERRY_COMM_MIN: return ncclMin;
	}
	return ncclSum;
}

static ferry_status nccl_failed(ncclResult_t r, const char *what)
{
	return r == ncclSuccess ? FERRY_OK : ferry_error(FERRY_ERR_BACKEND, "NCCL %s: %s", what, ncclGetErrorString(r));
}

static ferry_status cuda_failed(cudaError_t e, const char *what)
{
	return e == cudaSuccess ? FERRY_OK : ferry_error(FERRY_ERR_BACKEND, "NCCL %s: %s", what, cudaGetErrorString(e));
}

/* The caller's stream, or the own one (then waited for by finish). */
static cudaStream_t stream_of(const struct ferry_comm *c, void *stream)
{
	return stream ? (cudaStream_t)stream : ctx_of(c)->own;
}

static void CUDART_CB mark_begin(void *arg)
{
	const struct nccl_mark *m = arg;

	ferry_comm_watch_begin(m->c, m->what);
}

static void CUDART_CB mark_end(void *arg)
{
	ferry_comm_watch_end(arg);
}

/* NCCL has no timeout of its own and returns once a collective is
 * queued: a watched communicator's collective is timed on the stream, from
 * when the stream reaches it to when it is done there. */
static ferry_status mark(struct ferry_comm *c, void *stream, int which)
{
	struct nccl_mark *m = &ctx_of(c)->marks[which];

	if (!c->watch)
		return FERRY_OK;
	m->c = c;
	return cuda_failed(cudaLaunchHostFunc(stream_of(c, stream), mark_begin, m), "timing");
}

static ferry_status finish(struct ferry_comm *c, void *stream, ncclResult_t r, const char *what)
{
	ferry_status st = nccl_failed(r, what), e;

	/* ended even when NCCL refused it: its begin is queued */
	if (c->watch && (e = cuda_failed(cudaLaunchHostFunc(stream_of(c, stream), mark_end, c), "timing")) && !st)
		st = e;
	if (!st && !stream)
		st = cuda_failed(cudaStreamSynchronize(ctx_of(c)->own), what);
	return st;
}

static ferry_status nccl_all_reduce(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t,
				    enum ferry_comm_op op, void *stream)
{
	ferry_status st = mark(c, stream, MARK_ALL_REDUCE);

	return st ? st : finish(c, stream, ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), ctx_of(c)->comm,
					       stream_of(c, stream)), "all-reduce");
}

static ferry_status nccl_reduce_scatter(struct ferry_comm *c, const void *send, void *recv, size_t count,
					enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	ferry_status st = mark(c, stream, MARK_REDUCE_SCATTER);

	return st ? st : finish(c, stream, ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), ctx_of(c)->comm,
						   stream_of(c, stream)), "reduce-scatter");
}

static ferry_status nccl_all_gather(struct ferry_comm *c, const void *send, void *recv, size_t count,
				    enum ferry_comm_dtype t, void *stream)
{
	ferry_status st = mark(c, stream, MARK_ALL_GATHER);

	return st ? st : finish(c, stream, ncclAllGather(send, recv, count, nccl_type(t), ctx_of(c)->comm, stream_of(c, stream)),
		      "all-gather");
}

/* Uneven slices: one reduce (or broadcast) per rank's slice, rooted at
 * that rank, in one group. */
static ferry_status nccl_reduce_scatter_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
					  enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	const size_t esz = ferry_comm_dtype_size(t);
	ferry_status st = mark(c, stream, MARK_REDUCE_SCATTER);
	size_t displ = 0;
	ncclResult_t r;

	if (st)
		return st;
	r = ncclGroupStart();
	for (int k = 0; k < c->size && r == ncclSuccess; displ += counts[k++])
		if (counts[k])
			r = ncclReduce((const char *)send + displ * esz, k == c->rank ? recv : NULL, counts[k],
				       nccl_type(t), nccl_op(op), k, ctx_of(c)->comm, stream_of(c, stream));
	if (r == ncclSuccess)
		r = ncclGroupEnd();
	else
		(void)ncclGroupEnd();
	return finish(c, stream, r, "reduce-scatter");
}

static ferry_status nccl_all_gather_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
				      enum ferry_comm_dtype t, void *stream)
{
	const size_t esz = ferry_comm_dtype_size(t);
	ferry_status st = mark(c, stream, MARK_ALL_GATHER);
	size_t displ = 0;
	ncclResult_t r;

	if (st)
		return st;
	r = ncclGroupStart();
	for (int k = 0; k < c->size && r == ncclSuccess; displ += counts[k++])
		if (counts[k])
			r = ncclBroadcast(k == c->rank ? send : (const char *)recv + displ * esz,
					  (char *)recv + displ * esz, counts[k], nccl_type(t), k, ctx_of(c)->comm,
					  stream_of(c, stream));
	if (r == ncclSuccess)
		r = ncclGroupEnd();
	else
		(void)ncclGroupEnd();
	return finish(c, stream, r, "all-gather");
}

static ferry_status nccl_broadcast(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t, int root,
				   void *stream)
{
	ferry_status st = mark(c, stream, MARK_BROADCAST);

	return st ? st : finish(c, stream, ncclBroadcast(buf, buf, count, nccl_type(t), root, ctx_of(c)->comm,
					       stream_of(c, stream)), "broadcast");
}

static ferry_status nccl_barrier(struct ferry_comm *c)
{
	return ferry_comm_barrier(c->host);
}

/* Ends the collectives under way (a peer that stopped never finishes
 * them); once. */
static void nccl_cancel(struct ferry_comm *c)
{
	if (c->ctx && !ctx_of(c)->aborted) {
		ctx_of(c)->aborted = true;
		ncclCommAbort(ctx_of(c)->comm);
	}
}

static void nccl_abort(struct ferry_comm *c, int code)
{
	nccl_cancel(c);
	ferry_comm_abort(c->host, code);
}

static void nccl_free(struct ferry_comm *c)
{
	struct nccl_ctx *x = c->ctx;

	if (!x)
		return;
	if (!x->aborted) /* an aborted one's resources went with the abort */
		ncclCommDestroy(x->comm);
	cudaStreamDestroy(x->own);
	ferry_free(x);
}

static ferry_status new_ctx(struct ferry_comm *c)
{
	static const char *const names[MARKS] = { "all-reduce", "reduce-scatter", "all-gather", "broadcast" };
	struct nccl_ctx *x = ferry_calloc(1, sizeof(*x));
	ferry_status st;

	if (!x)
		return ferry_error(FERRY_ERR_NOMEM, "NCCL communicator: out of host memory");
	for (int k = 0; k < MARKS; k++)
		x->marks[k].what = names[k];
	if ((st = cuda_failed(cudaStreamCreateWithFlags(&x->own, cudaStreamNonBlocking), "stream"))) {
		ferry_free(x);
		return st;
	}
	c->ctx = x;
	return FERRY_OK;
}

static ferry_status nccl_dup(struct ferry_comm *c, struct ferry_comm *out)
{
	ferry_status st = new_ctx(out);

	if (!st && (st = nccl_failed(ncclCommSplit(ctx_of(c)->comm, 0, c->rank, &ctx_of(out)->comm, NULL), "split"))) {
		cudaStreamDestroy(ctx_of(out)->own);
		ferry_free(out->ctx);
		out->ctx = NULL;
	}
	return st;
}

static const struct ferry_comm_iface nccl_iface = {
	.version = FERRY_COMM_IFACE_VERSION,
	.name = "nccl",
	.device_buffers = true,
	.all_reduce = nccl_all_reduce,
	.reduce_scatter = nccl_reduce_scatter,
	.all_gather = nccl_all_gather,
	.reduce_scatter_v = nccl_reduce_scatter_v,
	.all_gather_v = nccl_all_gather_v,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.dup = nccl_dup,
	.abort = nccl_abort,
	.free = nccl_free,
	.times_itself = true,
	.cancel = nccl_cancel,
};

ferry_status ferry_comm_nccl_open(struct ferry_comm *base, int device, struct ferry_comm *c)
{
	ncclUniqueId id;
	int n = 0;
	ferry_status st;

	if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
		device %= n; /* a rank's index on its machine, as the backend takes it */
	st = cuda_failed(cudaSetDevice(device), "device");

	if (!st && base->rank == 0)
		st = nccl_failed(ncclGetUniqueId(&id), "unique id");
	if ((st = ferry_comm_agree(base, st)) ||
	    (st = ferry_comm_broadcast(base, &id, sizeof(id), FERRY_COMM_BYTE, 0, NULL)) || (st = new_ctx(c)))
		return st;
	*c = (struct ferry_comm){ &nccl_iface, c->ctx, base->rank, base->size, base->local_rank, base->local_size,
				  base->machine, base, false, NULL, 0 };
	st = nccl_failed(ncclCommInitRank(&ctx_of(c)->comm, base->size, id, base->rank), "init");
	if (st) {
		cudaStreamDestroy(ctx_of(c)->own);
		ferry_free(c->ctx);
		c->ctx = NULL;
	}
	return st;
}

int ferry_comm_nccl_devices(void)
{
	int n = 0;

	return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

const char *ferry_comm_nccl_version(char *buf, size_t n)
{
	int v = 0;

	ncclGetVersion(&v);
	snprintf(buf, n, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	return buf;
}
