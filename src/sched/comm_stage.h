/*
 * Collectives on device memory through a pinned host buffer (comm_stage.c):
 * MPI with a backend whose memory the host cannot address (CUDA), as two
 * ranks on one GPU need, which NCCL refuses.
 */
#ifndef FERRY_SCHED_COMM_STAGE_H
#define FERRY_SCHED_COMM_STAGE_H

#include "ferry/backend.h"

struct ferry_task;

struct ferry_comm_stage {
	ferry_backend_t be;
	void *buf; /* pinned (ferry_host_alloc) */
	size_t bytes;
};

/* One piece of a staged collective: the elements [at, at + n) of its
 * task's (a GATHER's: bytes of each rank's block), what a host function
 * runs the collective on once the piece is in the buffer. */
struct ferry_stage_piece {
	const struct ferry_comm_stage *g;
	const struct ferry_task *t;
	size_t at, n;
};

/* The staging buffer's size: FERRY_COMM_STAGE_BYTES when set (a size of
 * at least 64 bytes, as 4096, 64K or 8M; tests make it small to cut
 * collectives into many pieces), else FERRY_COMM_STAGE_DEFAULT.
 * Collectives larger than it go through it in pieces, so the host memory
 * stays this whatever the model.  FERRY_ERR_INVALID, naming the variable
 * and the form it takes, for anything else. */
#define FERRY_COMM_STAGE_DEFAULT ((size_t)8 << 20)
#define FERRY_COMM_STAGE_MIN 64
ferry_status ferry_comm_stage_bytes(size_t *out) FERRY_MUST_CHECK;
/* Whether FERRY_COMM_STAGE=1 asks to stage on a backend that needs none
 * (the CPU's: the staging path tested without a GPU); unset, empty or 0:
 * not.  FERRY_ERR_INVALID, naming the variable, for anything else. */
ferry_status ferry_comm_stage_forced(bool *out) FERRY_MUST_CHECK;

ferry_status ferry_comm_stage_create(ferry_backend_t be, struct ferry_comm_stage **out) FERRY_MUST_CHECK;
void ferry_comm_stage_free(struct ferry_comm_stage *g);

/* COMM task t (its buffers in the arena), queued on stream s piece by
 * piece: the copy into the buffer, the collective on a host function,
 * the copy back.  Returns once queued; a failing collective is kept in
 * t's comm_status, as for a collective on host memory.  Every staged
 * task must go on the same stream (the buffer is reused in its order). */
ferry_status ferry_comm_stage_run(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s)
	FERRY_MUST_CHECK;

#endif
