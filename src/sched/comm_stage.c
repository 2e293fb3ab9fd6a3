/*
 * Collectives on device memory through a pinned host buffer, for an
 * engine on host memory (MPI) with a backend whose memory the host cannot
 * address (CUDA).  A collective goes through the buffer piece by piece,
 * each piece queued on the task's stream as three steps: the copy of its
 * bytes into the buffer, a host function that runs the collective on the
 * host copy once the stream reaches it (after that copy, so after
 * everything queued before it), and the copy of the result back.  The
 * stream's order frees the buffer for the next piece; nothing waits on
 * the thread that submits the step, so the collectives overlap the work
 * queued on other streams, as NCCL's do.  Pieces of at most the buffer
 * keep the host memory small whatever the model.  Each piece runs the
 * collective the whole buffer would (the same elements reduced the same
 * way), so staging keeps the bits.
 */
#include "sched/comm_stage.h"
#include "sched/schedule.h"
#include "ferry/comm.h"
#include "core/error.h"
#include "core/size.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

ferry_status ferry_comm_stage_bytes(size_t *out)
{
	const char *v = getenv("FERRY_COMM_STAGE_BYTES");
	uint64_t n = v && *v ? ferry_parse_size(v) : FERRY_COMM_STAGE_DEFAULT;

	*out = FERRY_COMM_STAGE_DEFAULT;
	if (n < FERRY_COMM_STAGE_MIN)
		return ferry_error(FERRY_ERR_INVALID, "FERRY_COMM_STAGE_BYTES=%s: the staging buffer's size, at least "
				   "%d bytes: a number of bytes or one with K, M or G (powers of 1024), as 4096, "
				   "64K or 8M", v, FERRY_COMM_STAGE_MIN);
	*out = (size_t)n;
	return FERRY_OK;
}

ferry_status ferry_comm_stage_forced(bool *out)
{
	const char *v = getenv("FERRY_COMM_STAGE");

	*out = v && !strcmp(v, "1");
	if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
		return ferry_error(FERRY_ERR_INVALID, "FERRY_COMM_STAGE=%s: 1 (stage the CPU backend's collectives "
				   "through a host buffer, as a GPU's without NCCL) or 0", v);
	return FERRY_OK;
}

ferry_status ferry_comm_stage_create(ferry_backend_t be, struct ferry_comm_stage **out)
{
	struct ferry_comm_stage *g = ferry_calloc(1, sizeof(*g));
	ferry_status st;

	*out = NULL;
	if (!g)
		return ferry_error(FERRY_ERR_NOMEM, "collectives' staging: out of host memory");
	g->be = be;
	if ((st = ferry_comm_stage_bytes(&g->bytes)) || (st = ferry_host_alloc(be, g->bytes, &g->buf))) {
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

/* The size of t's elements, as its pieces count them. */
static size_t elem_size(const struct ferry_task *t)
{
	switch (t->comm_job) {
	case FERRY_COMM_JOB_SUM_F64: return sizeof(double);
	case FERRY_COMM_JOB_GATHER: return 1;
	case FERRY_COMM_JOB_COLLECT: return t->elem; /* fp32, or the kernels' type */
	case FERRY_COMM_JOB_AVERAGE:
	case FERRY_COMM_JOB_SCATTER: break;
	}
	return sizeof(float);
}

/* The elements of a piece of t: what fits the buffer beside the rest a
 * collective needs there (an all-gather: every rank's piece side by side;
 * a reduce-scatter: this rank's part received after the piece). */
static size_t piece_elems(const struct ferry_comm_stage *g, const struct ferry_task *t)
{
	const size_t e = g->bytes / elem_size(t);

	if (t->comm_job == FERRY_COMM_JOB_GATHER)
		return e / (size_t)ferry_comm_size(t->comm);
	return t->comm_job == FERRY_COMM_JOB_SCATTER ? e / 2 : e;
}

/* This rank's part of a SCATTER's or COLLECT's piece: its elements, where
 * they start in its slice (*from) and in the piece (*in). */
static size_t my_part(const struct ferry_stage_piece *pc, size_t *from, size_t *in)
{
	const struct ferry_task *t = pc->t;
	const size_t a = t->offset + pc->at, me = (size_t)ferry_comm_rank(t->comm);
	const size_t n = ferry_slice_part(a, a + pc->n, t->slice, (int)me, from);

	*in = n ? me * t->slice + *from - a : 0;
	return n;
}

/* Where a COLLECT's piece finds this rank's elements that start at from
 * in its slice: src + from, or where src is this rank's part itself (a
 * staging slot: src_part) that far past the task's first element in it. */
static const char *collect_src(const struct ferry_task *t, size_t from)
{
	size_t first = 0;

	if (t->src_part)
		ferry_slice_part(t->offset, t->offset + t->bytes / t->elem, t->slice, ferry_comm_rank(t->comm), &first);
	return (const char *)t->src + (from - first) * t->elem;
}

/* The piece's bytes into the buffer, on s. */
static ferry_status piece_out(const struct ferry_stage_piece *pc, ferry_stream_t s)
{
	const struct ferry_task *t = pc->t;
	const size_t me = (size_t)ferry_comm_rank(t->comm), es = elem_size(t);
	char *host = pc->g->buf;
	size_t from, in, n;

	switch (t->comm_job) {
	case FERRY_COMM_JOB_GATHER:
		return ferry_memcpy_async(s, host + me * pc->n, (char *)t->dst + me * t->bytes + pc->at, pc->n,
					  FERRY_COPY_D2H);
	case FERRY_COMM_JOB_SCATTER:
		return ferry_memcpy_async(s, host, (const float *)t->src + pc->at, pc->n * es, FERRY_COPY_D2H);
	case FERRY_COMM_JOB_COLLECT:
		n = my_part(pc, &from, &in);
		return n ? ferry_memcpy_async(s, host + in * es, collect_src(t, from), n * es, FERRY_COPY_D2H) : FERRY_OK;
	case FERRY_COMM_JOB_AVERAGE:
	case FERRY_COMM_JOB_SUM_F64: break;
	}
	return ferry_memcpy_async(s, host, (char *)t->dst + pc->at * es, pc->n * es, FERRY_COPY_D2H);
}

/* The piece's collective on the buffer (a host function's). */
static ferry_status piece_collective(const struct ferry_stage_piece *pc)
{
	const struct ferry_task *t = pc->t;
	const size_t es = elem_size(t);
	char *host = pc->g->buf;
	struct ferry_task whole;
	size_t from, in, n;

	switch (t->comm_job) {
	case FERRY_COMM_JOB_SCATTER: /* this rank's part received after the piece */
		n = my_part(pc, &from, &in);
		return ferry_comm_slices(t->comm, true, t->offset + pc->at, pc->n, t->slice, es, host,
					 n ? host + piece_elems(pc->g, t) * es : NULL, NULL);
	case FERRY_COMM_JOB_COLLECT:
		n = my_part(pc, &from, &in);
		return ferry_comm_slices(t->comm, false, t->offset + pc->at, pc->n, t->slice, es, host,
					 n ? host + in * es : NULL, NULL);
	case FERRY_COMM_JOB_AVERAGE:
	case FERRY_COMM_JOB_GATHER:
	case FERRY_COMM_JOB_SUM_F64: break;
	}
	whole = *t; /* the task's collective, on the piece in the buffer */
	whole.dst = host;
	whole.bytes = pc->n * elem_size(t);
	return ferry_comm_task_call(&whole, NULL);
}

static void run_piece(void *arg)
{
	const struct ferry_stage_piece *pc = arg;

	ferry_comm_task_keep(pc->t, piece_collective(pc));
}

/* The piece's result from the buffer back where it goes, on s. */
static ferry_status piece_back(const struct ferry_stage_piece *pc, ferry_stream_t s)
{
	const struct ferry_task *t = pc->t;
	const size_t N = (size_t)ferry_comm_size(t->comm), me = (size_t)ferry_comm_rank(t->comm), es = elem_size(t);
	char *host = pc->g->buf;
	ferry_status st = FERRY_OK;
	size_t from, in, n;

	switch (t->comm_job) {
	case FERRY_COMM_JOB_GATHER: /* the others' pieces to their blocks */
		for (size_t r = 0; r < N && !st; r++)
			if (r != me)
				st = ferry_memcpy_async(s, (char *)t->dst + r * t->bytes + pc->at, host + r * pc->n, pc->n,
							FERRY_COPY_H2D);
		return st;
	case FERRY_COMM_JOB_SCATTER:
		n = my_part(pc, &from, &in);
		return n ? ferry_memcpy_async(s, (float *)t->dst + from, (float *)host + piece_elems(pc->g, t), n * es,
					      FERRY_COPY_H2D) : FERRY_OK;
	case FERRY_COMM_JOB_AVERAGE:
	case FERRY_COMM_JOB_COLLECT:
	case FERRY_COMM_JOB_SUM_F64: break;
	}
	return ferry_memcpy_async(s, (char *)t->dst + pc->at * es, host, pc->n * es, FERRY_COPY_H2D);
}

/* t's pieces of `per` elements of its `total`, made at its first staging
 * (the same every step; freed with its program). */
static ferry_status pieces_of(const struct ferry_comm_stage *g, const struct ferry_task *t, size_t per,
			      size_t total, struct ferry_stage_piece **out)
{
	struct ferry_task *w = (struct ferry_task *)t; /* its pieces are its own, as a host task's call */
	const size_t count = (total + per - 1) / per;

	*out = w->pieces;
	if (w->pieces) /* a later step's: as made (the last step's may still read them) */
		return FERRY_OK;
	if (!(w->pieces = ferry_calloc(count, sizeof(*w->pieces))))
		return ferry_error(FERRY_ERR_NOMEM, "collectives' staging: out of host memory");
	for (size_t j = 0; j < count; j++)
		w->pieces[j] = (struct ferry_stage_piece){ g, t, j * per, total - j * per < per ? total - j * per : per };
	*out = w->pieces;
	return FERRY_OK;
}

ferry_status ferry_comm_stage_run(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s)
{
	const size_t per = piece_elems(g, t), total = t->bytes / elem_size(t);
	struct ferry_stage_piece *pc;
	ferry_status st;

	if (!total)
		return FERRY_OK;
	if (!per)
		return ferry_error(FERRY_ERR_INVALID, "collectives' staging: %zu bytes hold no piece of '%s' on %d "
				   "ranks (FERRY_COMM_STAGE_BYTES)", g->bytes, t->label, ferry_comm_size(t->comm));
	if ((st = pieces_of(g, t, per, total, &pc)))
		return st;
	for (size_t j = 0; j * per < total && !st; j++)
		if (!(st = piece_out(&pc[j], s)) && !(st = ferry_stream_host_fn(s, run_piece, &pc[j])))
			st = piece_back(&pc[j], s);
	return st;
}
