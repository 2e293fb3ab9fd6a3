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

/* The staging buffer's size: FERRY_COMM_STAGE_BYTES when set (at least
 * 64; tests make it small to cut collectives into many pieces), else
 * FERRY_COMM_STAGE_DEFAULT.  Collectives larger than it go through it in
 * pieces, so the host memory stays this whatever the model. */
#define FERRY_COMM_STAGE_DEFAULT ((size_t)8 << 20)
size_t ferry_comm_stage_bytes(void);
/* Whether FERRY_COMM_STAGE=1 asks to stage on a backend that needs none
 * (the CPU's: the staging path tested without a GPU). */
bool ferry_comm_stage_forced(void);

ferry_status ferry_comm_stage_create(ferry_backend_t be, struct ferry_comm_stage **out) FERRY_MUST_CHECK;
void ferry_comm_stage_free(struct ferry_comm_stage *g);

/* COMM task t (its buffer in the arena), on stream s: returns when its
 * collective is done and the result copied back (queued on s, waited
 * for). */
ferry_status ferry_comm_stage_run(const struct ferry_comm_stage *g, const struct ferry_task *t, ferry_stream_t s)
	FERRY_MUST_CHECK;

#endif
