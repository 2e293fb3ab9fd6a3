/*
 * Internal: the vtable a backend implements (SQLite's sqlite3_vfs shape).
 * backend.c owns the handles and the arena bookkeeping and dispatches;
 * implementations may assume non-NULL handles of their own kind.
 */
#ifndef FERRY_BACKEND_IMPL_H
#define FERRY_BACKEND_IMPL_H

#include "ferry/backend.h"
#include "backend/run_op.h"
#include "memory/arena.h"
#include "ops/op.h"

#define FERRY_BACKEND_IFACE_VERSION 1

struct ferry_backend_iface {
	int version;
	const char *name;
	/* FERRY_OK if a device can be opened (error message says why not) */
	ferry_status (*probe)(void);
	ferry_status (*open)(struct ferry_backend *be, const struct ferry_backend_opts *opts);
	void (*close)(struct ferry_backend *be);

	ferry_status (*host_alloc)(struct ferry_backend *be, size_t size, void **out);
	void (*host_free)(struct ferry_backend *be, void *p);

	ferry_status (*stream_create)(struct ferry_backend *be, struct ferry_stream *s);
	void (*stream_destroy)(struct ferry_stream *s);
	ferry_status (*stream_synchronize)(struct ferry_stream *s);
	ferry_status (*stream_wait_event)(struct ferry_stream *s, struct ferry_event *ev);

	ferry_status (*event_create)(struct ferry_backend *be, struct ferry_event *ev);
	void (*event_destroy)(struct ferry_event *ev);
	ferry_status (*event_record)(struct ferry_event *ev, struct ferry_stream *s);
	ferry_status (*event_synchronize)(struct ferry_event *ev);
	bool (*event_done)(struct ferry_event *ev);

	ferry_status (*memcpy_async)(struct ferry_stream *s, void *dst, const void *src,
				     size_t size, enum ferry_copy_kind kind);
	ferry_status (*memset_zero_async)(struct ferry_stream *s, void *dst, size_t size);
	/* runs one op on the stream, asynchronously */
	ferry_status (*run_op)(struct ferry_stream *s, const struct ferry_op_call *call);
	/* optional: bytes of scratch the kernels of a call need (a pure
	 * function of its sizes: planning calls it with no device open) */
	size_t (*op_scratch)(const struct ferry_op_call *call);
	/* optional: what of a call its kernels do not compute ("attention
	 * soft-capping"), or NULL when they do (a pure function of the call,
	 * as op_scratch) */
	const char *(*op_unsupported)(const struct ferry_op_call *call);
	/* runs fn(arg) on the host in stream order */
	ferry_status (*host_fn)(struct ferry_stream *s, void (*fn)(void *), void *arg);
	/* optional: an event that can be timed (NULL: event_create's are) */
	ferry_status (*event_create_timed)(struct ferry_backend *be, struct ferry_event *ev);
	/* optional: seconds between two completed timed events */
	ferry_status (*event_elapsed)(struct ferry_event *from, struct ferry_event *to, double *seconds);
	/* optional: registers host memory allocated elsewhere (a host tier's
	 * NUMA-bound pages) for DMA, and undoes it (CUDA: cudaHostRegister) */
	ferry_status (*host_register)(struct ferry_backend *be, void *p, size_t size);
	void (*host_unregister)(struct ferry_backend *be, void *p);
	/* optional: the runtime's handle of a stream (ferry_stream_native) */
	void *(*stream_native)(struct ferry_stream *s);
};

/* Op timings, filled by backends that profile (indexed [kind][backward]). */
struct ferry_op_timing {
	long calls;
	double seconds, flops;
};

struct ferry_backend {
	const struct ferry_backend_iface *iface;
	bool profile;
	struct ferry_op_timing timing[FERRY_OP_COUNT][2];
	struct ferry_arena arena;
	char *device_base;   /* address of arena offset 0 */
	struct ferry_backend_caps caps;
	char description[256];
	void *ctx;           /* the implementation's own state */
	long host_syncs;     /* times the host waited for a stream or event */
	char mem_note[128];  /* why the arena is smaller than the device, when
				the backend chose so ("" otherwise) */
};

struct ferry_buffer {
	struct ferry_backend *be;
	size_t offset, size;
};

struct ferry_stream {
	struct ferry_backend *be;
	char name[32];
	void *ctx;
};

struct ferry_event {
	struct ferry_backend *be;
	void *ctx;
};


extern const struct ferry_backend_iface ferry_cpu_backend_iface;
#ifdef FERRY_HAVE_CUDA
extern const struct ferry_backend_iface ferry_cuda_backend_iface;
#endif

#endif
