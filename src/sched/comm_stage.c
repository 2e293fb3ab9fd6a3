/*
 * Collectives on device memory through a pinned host buffer, for an
 * engine on host memory (MPI) with a backend whose memory the host cannot
 * address (CUDA).  Each piece of a collective's buffer is copied into the
 * staging buffer on the task's stream, the submitting thread waits for
 * that copy (so for everything queued on the stream before it), runs the
 * collective on the host copy, queues the copy back and waits for it, so
 * the buffer is free for the next piece, on any stream.  Pieces of at
 * most the staging buffer keep the host memory small whatever the model.
 * The submitting thread waits: the work submitted after a staged
 * collective does not overlap it (NCCL's collectives do).
 */
#include "sched/comm_stage.h"
#include "sched/schedule.h"
#include "ferry/comm.h"
#include "core/error.h"

#include <stdlib.h>

size_t ferry_comm_stage_bytes(void)
{
	const char *v = getenv("FERRY_COMM_STAGE_BYTES");
	long long n = v ? atoll(v) : 0;

	return n <= 0 ? FERRY_COMM_STAGE_DEFAULT : n < 64 ? 64 : (size_t)n;
}

bool ferry_comm_stage_forced(void)
{
	const char *v = getenv("FERRY_COMM_STAGE");

	return v && atoi(v) > 0;
}

ferry_status ferry_comm_stage_create(ferry_backend_t be, struct ferry_comm_stage **out)
{
	struct ferry_comm_stage *g = ferry_calloc(1, sizeof(*g));
	ferry_status st;

	*out = NULL;
	if (!g)
		return ferry_error(FERRY_ERR_NOMEM, "collectives' staging: out of host memory");
	g->be = be;
	g->bytes = ferry_comm_stage_bytes();
	if ((st = ferry_host_alloc(be, g->bytes, &g->buf))) {
		ferry_free(g);
		return st;
	}
	*out = g;
	return FERRY_OK;
}

void ferry_comm_stage_free(struct ferry_comm_stage *g)
{
	if (!g)
		return;
	ferry_host_free(g->be, g->buf);
	ferry_free(g);
}

/* The device bytes at dev to the staging buffer, waited for. */
static ferry_status copy_out(ferry_stream_t s, void *host, const void *dev, size_t bytes)
{
	ferry_status st = ferry_memcpy_async(s, host, dev, bytes, FERRY_COPY_D2H);

	return st ? st : ferry_stream_synchronize(s);
}

/* An all-reduce of the `size`-byte elements at dev, piece by piece. */
static ferry_status reduce(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s,
			   enum ferry_comm_dtype type, enum ferry_comm_op op, size_t size)
{
	const size_t piece = g->bytes / size * size;
	char *dev = t->dst;
	ferry_status st = FERRY_OK;

	for (size_t k = 0; k < t->bytes && !st; k += piece) {
		size_t n = t->bytes - k < piece ? t->bytes - k : piece;

		if (!(st = copy_out(s, g->buf, dev + k, n)) &&
		    !(st = ferry_comm_all_reduce(t->comm, g->buf, n / size, type, op, NULL)) &&
		    !(st = ferry_memcpy_async(s, dev + k, g->buf, n, FERRY_COPY_H2D)))
			st = ferry_stream_synchronize(s);
	}
	return st;
}

/* Every rank's t->bytes at dst + rank * t->bytes to every rank: piece k of
 * each rank's block gathered side by side in the staging buffer, the
 * others' copied back to their blocks. */
static ferry_status gather(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s)
{
	const size_t N = (size_t)ferry_comm_size(t->comm), me = (size_t)ferry_comm_rank(t->comm);
	const size_t piece = g->bytes / N;
	char *dev = t->dst, *host = g->buf;
	ferry_status st = FERRY_OK;

	if (!piece)
		return ferry_error(FERRY_ERR_INVALID, "collectives' staging: %zu bytes for %zu ranks", g->bytes, N);
	for (size_t k = 0; k < t->bytes && !st; k += piece) {
		size_t n = t->bytes - k < piece ? t->bytes - k : piece;

		st = copy_out(s, host + me * n, dev + me * t->bytes + k, n);
		if (!st)
			st = ferry_comm_all_gather(t->comm, host + me * n, host, n, FERRY_COMM_BYTE, NULL);
		for (size_t r = 0; r < N && !st; r++)
			if (r != me)
				st = ferry_memcpy_async(s, dev + r * t->bytes + k, host + r * n, n, FERRY_COPY_H2D);
		if (!st)
			st = ferry_stream_synchronize(s);
	}
	return st;
}

ferry_status ferry_comm_stage_run(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s)
{
	switch (t->comm_job) {
	case FERRY_COMM_JOB_AVERAGE: return reduce(g, t, s, FERRY_COMM_F32, FERRY_COMM_AVG, sizeof(float));
	case FERRY_COMM_JOB_SUM_F64: return reduce(g, t, s, FERRY_COMM_F64, FERRY_COMM_SUM, sizeof(double));
	case FERRY_COMM_JOB_GATHER: return gather(g, t, s);
	case FERRY_COMM_JOB_SCATTER:
	case FERRY_COMM_JOB_COLLECT: break;
	}
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s through host staging (ZeRO-2 and 3 with MPI on a device "
			   "backend): not yet", t->label);
}
