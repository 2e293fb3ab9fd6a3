/*
 * Internal: the vtable a collectives engine implements (ferry/comm.h),
 * in the shape of the backends' (SQLite's sqlite3_vfs): comm.c owns the
 * handles, checks arguments and dispatches; an engine may assume them
 * checked.  Ops that take a stream get the caller's native one (NULL
 * unless the engine works on device buffers).
 */
#ifndef FERRY_COMM_IMPL_H
#define FERRY_COMM_IMPL_H

#include "ferry/comm.h"

#define FERRY_COMM_IFACE_VERSION 3

struct ferry_comm_iface {
	int version;
	const char *name;        /* "single", "mpi", "nccl" */
	bool device_buffers;
	ferry_status (*all_reduce)(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t,
				   enum ferry_comm_op op, void *stream);
	ferry_status (*reduce_scatter)(struct ferry_comm *c, const void *send, void *recv, size_t count,
				       enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream);
	ferry_status (*all_gather)(struct ferry_comm *c, const void *send, void *recv, size_t count,
				   enum ferry_comm_dtype t, void *stream);
	/* uneven slices (counts: one per rank) */
	ferry_status (*reduce_scatter_v)(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
					 enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream);
	ferry_status (*all_gather_v)(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
				     enum ferry_comm_dtype t, void *stream);
	ferry_status (*broadcast)(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t, int root,
				  void *stream);
	ferry_status (*barrier)(struct ferry_comm *c);
	/* a communicator over the same ranks into *out's ctx */
	ferry_status (*dup)(struct ferry_comm *c, struct ferry_comm *out);
	void (*abort)(struct ferry_comm *c, int code);
	void (*free)(struct ferry_comm *c);
	/* The collective timeout's messages (comm_watch.c), on a duplicate of
	 * their own: n ints to rank `to`, sent without waiting for it (a
	 * rank that hangs never receives); and the next n ints that came with
	 * `tag`, if any, without waiting (their sender in *from).  NULL where
	 * nothing is watched (single: one rank). */
	ferry_status (*send_ints)(struct ferry_comm *c, int to, int tag, const int *msg, int n);
	bool (*recv_ints)(struct ferry_comm *c, int tag, int *msg, int n, int *from);
	/* Device collectives return once queued: the engine times them on
	 * its stream itself (watch_begin and _end as the stream reaches
	 * them), not comm.c around the call.  NULL: comm.c times the call. */
	bool times_itself;
	/* Ends c's collectives under way, from the watchdog's thread, when
	 * one timed out (NCCL has no timeout of its own: ncclCommAbort);
	 * NULL where the job's abort ends them. */
	void (*cancel)(struct ferry_comm *c);
};

struct comm_watch;

struct ferry_comm {
	const struct ferry_comm_iface *iface;
	void *ctx;                /* the engine's own state */
	int rank, size, local_rank, local_size;
	int machine;              /* the lowest rank on this rank's machine */
	struct ferry_comm *host;  /* host-side collectives: itself, or an nccl
				     communicator's base */
	bool error_shared;        /* the last agree returned an error */
	struct comm_watch *watch; /* the collective timeout's, or NULL */
	int watch_slot;           /* this communicator's place in it */
};

size_t ferry_comm_dtype_size(enum ferry_comm_dtype t);

/* The collective timeout (comm_watch.c): a duplicate of a watched
 * communicator is watched too (attach), until freed (detach); each
 * collective runs between begin and end, what it is named by `what`. */
void ferry_comm_watch_attach(struct ferry_comm *c);
void ferry_comm_watch_detach(struct ferry_comm *c);
void ferry_comm_watch_begin(struct ferry_comm *c, const char *what);
void ferry_comm_watch_end(struct ferry_comm *c);
/* This rank ends the job on purpose (an abort after its message): the
 * other ranks' watchdogs are told, so that none reports it as lost. */
void ferry_comm_watch_bye(struct ferry_comm *c);
/* c, made over base (an nccl communicator), watched by base's watch. */
void ferry_comm_watch_join(struct ferry_comm *c, struct ferry_comm *base);

/* The engines (comm_single.c, comm_mpi.c, comm_nccl.c), each filling *c
 * (iface, ctx, ranks). */
extern const struct ferry_comm_iface ferry_comm_single_iface;
ferry_status ferry_comm_mpi_open(struct ferry_comm *c);
ferry_status ferry_comm_nccl_open(struct ferry_comm *base, int device, struct ferry_comm *c);
const char *ferry_comm_mpi_version(char *buf, size_t n);
const char *ferry_comm_nccl_version(char *buf, size_t n);

#endif
