/*
 * Collectives: the ranks of a run and what they do together, through one
 * small interface with three engines:
 *
 *   single  one process (no MPI built in, or not launched by an MPI
 *           launcher): every collective leaves its buffer as it is
 *   mpi     MPI (Open MPI, MPICH) on host buffers, one rank per process
 *   nccl    NCCL on device buffers, enqueued on a CUDA stream the caller
 *           names; made over an MPI communicator, which carries its
 *           unique id and every host-side collective (ferry_comm_agree,
 *           barriers)
 *
 * Buffers: host memory for single and mpi, device memory for nccl
 * (ferry_comm_device_buffers).  `stream` is the engine's native stream
 * (a cudaStream_t) for nccl, which returns once the collective is queued
 * on it; NULL everywhere else (the call returns when it is done).
 *
 * A communicator's collectives must be called in the same order on every
 * rank, from one thread at a time; two threads that each need collectives
 * use a communicator each (ferry_comm_dup).  An MPI failure or a lost rank
 * ends the job (MPI's default error handler; the launcher names the rank);
 * a rank that hangs, alive, is noticed by the collective timeout
 * (ferry_comm_set_timeout).
 */
#ifndef FERRY_COMM_H
#define FERRY_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_comm *ferry_comm_t;

enum ferry_comm_dtype {
	FERRY_COMM_F32,
	FERRY_COMM_F64,
	FERRY_COMM_I32,
	FERRY_COMM_BYTE,
};

enum ferry_comm_op {
	FERRY_COMM_SUM,
	FERRY_COMM_AVG, /* the sum divided by the number of ranks (F32, F64) */
	FERRY_COMM_MAX,
	FERRY_COMM_MIN,
};

/* Whether an engine ("mpi", "nccl") is built into this libferry, and its
 * version in words ("Open MPI v4.1.4", "NCCL 2.28.3") into buf (n bytes;
 * "" when not built in). */
bool ferry_comm_built_in(const char *engine);
const char *ferry_comm_engine_version(const char *engine, char *buf, size_t n);

/* Whether this process was started by an MPI launcher (mpirun, mpiexec,
 * srun with PMI or PMIx): its environment names a rank. */
bool ferry_comm_launched(void);

/* The ranks this process belongs to: MPI's world when MPI is built in and
 * the process was launched by an MPI launcher (MPI is initialised here,
 * with threads), else one process.  FERRY_ERR_UNSUPPORTED: launched by a
 * launcher but MPI is not built in, or srun started several tasks that MPI
 * sees as one each (no PMI: srun --mpi=pmix). */
ferry_status ferry_comm_open(ferry_comm_t *out) FERRY_MUST_CHECK;
/* One process alone. */
ferry_status ferry_comm_open_single(ferry_comm_t *out) FERRY_MUST_CHECK;
/* NCCL over base's ranks (base an MPI or single communicator, used for
 * its unique id and host-side collectives; it must outlive the new one),
 * on CUDA device `device` modulo the devices visible.  FERRY_ERR_UNSUPPORTED without NCCL built in. */
ferry_status ferry_comm_open_nccl(ferry_comm_t base, int device, ferry_comm_t *out) FERRY_MUST_CHECK;
/* Another communicator of the same engine over the same ranks, whose
 * collectives do not interleave with c's (for a second thread). */
ferry_status ferry_comm_dup(ferry_comm_t c, ferry_comm_t *out) FERRY_MUST_CHECK;
/* Frees c; MPI is finalised with the last MPI communicator. */
void ferry_comm_free(ferry_comm_t c);

int ferry_comm_rank(ferry_comm_t c);
int ferry_comm_size(ferry_comm_t c);
/* Rank among the ranks on this machine, and how many there are. */
int ferry_comm_local_rank(ferry_comm_t c);
int ferry_comm_local_size(ferry_comm_t c);
/* FERRY_COMM_ENGINE names an engine (nccl or mpi, not auto; or a name
 * the trainer then refuses): then even one rank runs its collectives
 * through it (all-reduces of one rank: the same bits as none), the way to
 * run NCCL on a machine of one GPU. */
bool ferry_comm_engine_named(void);
/* Whether a run given c runs its collectives through it: c has several
 * ranks, or an engine is named; false for NULL (one process, no engine). */
bool ferry_comm_in_use(ferry_comm_t c);

/* Which machine the rank is on: the lowest rank there (ranks on one
 * machine share memory: MPI_COMM_TYPE_SHARED). */
int ferry_comm_machine(ferry_comm_t c);
/* The communicator that runs c's collectives on host memory: c itself, or
 * an nccl communicator's base (the same ranks). */
ferry_comm_t ferry_comm_host(ferry_comm_t c);
/* "single", "mpi" or "nccl". */
const char *ferry_comm_engine(ferry_comm_t c);
bool ferry_comm_device_buffers(ferry_comm_t c);

/* In place: buf[0..count) on every rank = the op over every rank's. */
ferry_status ferry_comm_all_reduce(ferry_comm_t c, void *buf, size_t count, enum ferry_comm_dtype t,
				   enum ferry_comm_op op, void *stream) FERRY_MUST_CHECK;
/* recv[0..count) on rank r = the op over every rank's send[r*count ..
 * (r+1)*count) (send holds size*count elements). */
ferry_status ferry_comm_reduce_scatter(ferry_comm_t c, const void *send, void *recv, size_t count,
				       enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
	FERRY_MUST_CHECK;
/* Uneven slices: recv[0..counts[rank]) = the op over every rank's
 * send[displ .. displ + counts[rank]), displ the sum of counts[0..rank)
 * (send holds the sum of counts elements; recv may be NULL where this
 * rank's count is 0). */
ferry_status ferry_comm_reduce_scatter_v(ferry_comm_t c, const void *send, void *recv, const size_t *counts,
					 enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
	FERRY_MUST_CHECK;
/* recv[r*count .. (r+1)*count) on every rank = rank r's send[0..count);
 * in place when send is recv + rank*count. */
ferry_status ferry_comm_all_gather(ferry_comm_t c, const void *send, void *recv, size_t count,
				   enum ferry_comm_dtype t, void *stream) FERRY_MUST_CHECK;
/* Uneven slices: recv[displ(r) .. displ(r) + counts[r]) on every rank =
 * rank r's send[0..counts[r]), displ(r) the sum of counts[0..r); in
 * place when send is recv + displ(rank). */
ferry_status ferry_comm_all_gather_v(ferry_comm_t c, const void *send, void *recv, const size_t *counts,
				     enum ferry_comm_dtype t, void *stream) FERRY_MUST_CHECK;
/* buf[0..count) on every rank = root's. */
ferry_status ferry_comm_broadcast(ferry_comm_t c, void *buf, size_t count, enum ferry_comm_dtype t, int root,
				  void *stream) FERRY_MUST_CHECK;
ferry_status ferry_comm_barrier(ferry_comm_t c) FERRY_MUST_CHECK;

/* Every rank passes its own status; all return FERRY_OK when every one is
 * FERRY_OK, else the status and message (ferry_last_error) of the lowest
 * rank that failed, prefixed "rank R: " when some ranks did not fail.  A
 * collective (host side, also for an nccl communicator). */
ferry_status ferry_comm_agree(ferry_comm_t c, ferry_status st) FERRY_MUST_CHECK;
/* The same, with this rank's message given (msg; NULL: ferry_last_error()),
 * for a failure the caller met itself, not in the library: ferry_last_error
 * would be a stale one. */
ferry_status ferry_comm_agree_message(ferry_comm_t c, ferry_status st, const char *msg) FERRY_MUST_CHECK;
/* Whether every rank holds rank 0's text, lines of "key=value" (a run's
 * settings, say), in one exchange: rank 0's text is broadcast, each rank
 * compares it with its own, and the ranks agree (ferry_comm_agree) on
 * the outcome and `failed` (NULL, or the message of a failure the rank
 * met making its text).  All return FERRY_OK, or the same error naming
 * the lowest rank that failed or differs, and the first line that does:
 * "rank 1: --steps is 5, rank 0 has 10". */
ferry_status ferry_comm_same_lines(ferry_comm_t c, const char *text, const char *failed) FERRY_MUST_CHECK;
/* Whether the last ferry_comm_agree on c returned an error, so every rank
 * holds the same one (a caller prints it once, on rank 0). */
bool ferry_comm_error_shared(ferry_comm_t c);

/* What the collective timeout calls, on a thread of the library's own,
 * with ferry_last_error() saying which ranks did not arrive. */
typedef void (*ferry_comm_timeout_fn)(void *arg, ferry_status st);

/* The collective timeout: when a collective of c (an agreement's too), or
 * of a communicator duplicated from c later, has waited `seconds` without
 * completing, each rank that waits asks every other rank (over messages
 * of its own, which a rank's watchdog thread answers even while its main
 * thread is busy) where it is, and fn gets FERRY_ERR_IO and a message
 * naming the ranks that did not answer (stopped: the whole process) and
 * those that did not arrive (alive, their main thread elsewhere): "rank 1
 * did not answer; rank 0 waited 3.0 s in collective 412 (all-reduce) of
 * communicator 1".  The lowest rank waiting there is told at once, the
 * others 5 s later should the job still run.  fn is meant
 * to end the job (ferry_comm_abort): MPI cannot take back a collective,
 * so the waiting thread never returns on its own.  A time of waiting,
 * not of a step: a rank that computes for hours between collectives
 * fires nothing, but one that waits `seconds` for another (a save rank
 * 0 writes alone) does.  0 turns it off.  Every rank calls it (it makes a
 * communicator); nothing is watched on one rank.  NCCL's device
 * collectives are timed on their stream (from when it reaches one to
 * when it is done there), and the NCCL communicators are aborted before
 * fn is called.  The same watch calls fn (FERRY_ERR_IO) when the process
 * of a rank on this machine is gone (killed) without ending the job on
 * purpose: "rank 1 (process N on this machine) ended without a word
 * (killed: SIGKILL, the OOM killer?); rank 0 saw it". */
ferry_status ferry_comm_set_timeout(ferry_comm_t c, double seconds, ferry_comm_timeout_fn fn, void *arg)
	FERRY_MUST_CHECK;

/* Ends every rank of the job with exit code `code` (MPI_Abort); for a
 * single process it returns, and the caller exits. */
void ferry_comm_abort(ferry_comm_t c, int code);

#ifdef __cplusplus
}
#endif
#endif
