/*
 * The CUDA backend.
 *
 * Device memory: one cudaMalloc of the arena's capacity (--device-mem, or
 * what the device has free less a reserve for the CUDA context, cuBLAS and
 * the kernels' workspace), carved by memory/arena.c exactly as the planner
 * assumes.  Host buffers: cudaHostAlloc (pinned); if pinning fails,
 * cudaHostRegister of ordinary memory, and if that fails too, pageable
 * memory, with the reason kept for `ferry info`.  Streams are non-blocking
 * CUDA streams, events CUDA events without timing.  Every CUDA call is
 * checked and a failure becomes FERRY_ERR_BACKEND with cudaGetErrorString.
 */
#include "backend/backend_impl.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE_BYTES ((size_t)64 << 20)
#define CONTEXT_RESERVE ((size_t)512 << 20)

enum host_kind { HOST_PINNED, HOST_REGISTERED, HOST_PAGEABLE };

struct host_block {
	void *p;
	enum host_kind kind;
	struct host_block *next;
};

struct cuda_backend {
	int device;
	struct cudaDeviceProp prop;
	size_t total_mem;
	struct ferry_cuda_ops *ops;
	struct host_block *host;   /* live host allocations, to free each its way */
	enum host_kind host_kind;  /* the kind tried first (FERRY_CUDA_HOST_MEMORY) */
	char host_note[160];       /* how host memory is being allocated */
	struct op_timer *timers;   /* profiling: ops timed, not yet read */
	int n_timers, cap_timers, n_pending;
};

/* Profiling (ferry_backend_opts.profile): a pair of timing events around
 * each op, read back at the next host synchronisation. */
struct op_timer {
	cudaEvent_t start, end;
	int kind;
	bool backward;
	double flops;
};

static void free_timers(struct cuda_backend *cb);
static int host_kind_from_env(void);

static ferry_status cuda_fail(cudaError_t e, const char *what)
{
	cudaGetLastError(); /* a non-sticky error must not be blamed on the next launch */
	return ferry_error(FERRY_ERR_BACKEND, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* An event and whether it was ever recorded: cudaEventQuery says "done"
 * for a never-recorded event, the interface says not. */
struct cuda_event {
	cudaEvent_t e;
	bool recorded;
};

#define CHECK_CUDA(call, what)                          \
	do {                                            \
		cudaError_t e_ = (call);                \
		if (e_ != cudaSuccess)                  \
			return cuda_fail(e_, what);     \
	} while (0)

/* The device in words, with how host memory is being allocated (rebuilt
 * when pinning falls back, so `ferry info` and the trainer's banner say so). */
static void describe(struct ferry_backend *be)
{
	struct cuda_backend *cb = be->ctx;

	snprintf(be->description, sizeof(be->description),
		 "CUDA: %.64s, %d SMs, sm_%d%d, %.1f GiB, device arena %.2f GiB, host memory %.90s", cb->prop.name,
		 cb->prop.multiProcessorCount, cb->prop.major, cb->prop.minor, cb->total_mem / 1073741824.0,
		 be->arena.capacity / 1073741824.0, cb->host_note);
}

static ferry_status cuda_probe(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "no usable GPU: %s", cudaGetErrorString(e));
	if (n == 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "no CUDA device found");
	return FERRY_OK;
}

/* A rank's index on its machine names its GPU modulo the GPUs it sees. */
static int visible_device(int index)
{
	int n = 1;

	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? index % n : index;
}

static ferry_status cuda_open(struct ferry_backend *be, const struct ferry_backend_opts *opts)
{
	struct cuda_backend *cb;
	struct cudaDeviceProp prop;
	size_t free_b = 0, total_b = 0, cap;
	char err[256];
	ferry_status st;
	void *base = NULL;
	cudaError_t e;

	if ((st = cuda_probe()))
		return st;
	cb = ferry_calloc(1, sizeof(*cb));
	if (!cb)
		return ferry_error(FERRY_ERR_NOMEM, "cuda backend: out of host memory");
	cb->device = visible_device(opts->device_index);
	snprintf(cb->host_note, sizeof(cb->host_note), "pinned (cudaHostAlloc)");
	if (host_kind_from_env() < 0) {
		ferry_free(cb);
		return ferry_error(FERRY_ERR_INVALID, "FERRY_CUDA_HOST_MEMORY='%s': pinned, registered or pageable",
				   getenv("FERRY_CUDA_HOST_MEMORY"));
	}
	cb->host_kind = (enum host_kind)host_kind_from_env();
	if ((e = cudaSetDevice(cb->device)) != cudaSuccess ||
	    (e = cudaGetDeviceProperties(&prop, cb->device)) != cudaSuccess ||
	    (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
		st = cuda_fail(e, "opening the device");
		goto out_free;
	}
	if (ferry_cuda_ops_create(&cb->ops, WORKSPACE_BYTES, err, sizeof(err))) {
		st = ferry_error(FERRY_ERR_BACKEND, "cuda: %s", err);
		goto out_free;
	}
	cap = opts->device_mem;
	if (!cap)
		cap = free_b > CONTEXT_RESERVE + WORKSPACE_BYTES ? free_b - CONTEXT_RESERVE - WORKSPACE_BYTES : 0;
	if ((st = ferry_arena_init(&be->arena, cap, FERRY_BUFFER_ALIGN, 4096)))
		goto out_ops;
	if (be->arena.capacity && (e = cudaMalloc(&base, be->arena.capacity)) != cudaSuccess) {
		cudaGetLastError(); /* not to be reported by the next launch as its own */
		st = ferry_error(FERRY_ERR_DEVICE_MEM, "cuda: cannot allocate a %zu-byte device arena (%.2f GiB): %s; "
				 "the device has %.2f GiB, %.2f GiB free (--device-mem asks for less; by default "
				 "ferry takes what is free less %.2f GiB for CUDA)", be->arena.capacity,
				 be->arena.capacity / 1073741824.0, cudaGetErrorString(e), total_b / 1073741824.0,
				 free_b / 1073741824.0, (CONTEXT_RESERVE + WORKSPACE_BYTES) / 1073741824.0);
		goto out_arena;
	}
	{	/* can host memory be pinned here?  `ferry info` says */
		void *probe = NULL;

		if ((e = cudaHostAlloc(&probe, (size_t)1 << 20, cudaHostAllocDefault)) == cudaSuccess) {
			cudaFreeHost(probe);
		} else {
			cudaGetLastError();
			snprintf(cb->host_note, sizeof(cb->host_note),
				 "not pinned (cudaHostAlloc: %s): falls back to registered or pageable memory",
				 cudaGetErrorString(e));
		}
	}
	be->ctx = cb;
	be->device_base = base;
	be->caps = (struct ferry_backend_caps){
		.async = true, .events = true, .host_pinned = true, .unified = false,
		.compute_units = prop.multiProcessorCount, .act_dtype = FERRY_BF16,
		.max_head_size = 256, /* the attention kernels keep a head in a warp's registers */
	};
	cb->prop = prop;
	cb->total_mem = total_b;
	describe(be);
	return FERRY_OK;

out_arena:
	ferry_arena_release(&be->arena);
out_ops:
	ferry_cuda_ops_free(cb->ops);
out_free:
	ferry_free(cb);
	return st;
}

static void cuda_close(struct ferry_backend *be)
{
	struct cuda_backend *cb = be->ctx;

	cudaDeviceSynchronize();
	while (cb->host) { /* host buffers the caller did not free */
		struct host_block *b = cb->host;

		be->iface->host_free(be, b->p);
	}
	cudaFree(be->device_base);
	free_timers(cb);
	ferry_cuda_ops_free(cb->ops);
	ferry_arena_release(&be->arena);
	ferry_free(cb);
}

/* FERRY_CUDA_HOST_MEMORY=registered|pageable starts host allocations at
 * that fallback (the tests use it; so can a machine short of pinned
 * memory); unset or "pinned": cudaHostAlloc first.  -1: not understood. */
static int host_kind_from_env(void)
{
	const char *v = getenv("FERRY_CUDA_HOST_MEMORY");

	if (!v || !*v || !strcmp(v, "pinned"))
		return HOST_PINNED;
	if (!strcmp(v, "registered"))
		return HOST_REGISTERED;
	if (!strcmp(v, "pageable"))
		return HOST_PAGEABLE;
	return -1;
}

static ferry_status cuda_host_alloc(struct ferry_backend *be, size_t size, void **out)
{
	struct cuda_backend *cb = be->ctx;
	struct host_block *b = ferry_malloc(sizeof(*b));
	cudaError_t e = cudaErrorMemoryAllocation;

	if (!b)
		return ferry_error(FERRY_ERR_NOMEM, "cuda host buffer: out of host memory");
	b->kind = HOST_PINNED;
	if (cb->host_kind == HOST_PINNED)
		e = cudaHostAlloc(&b->p, size ? size : 1, cudaHostAllocDefault);
	if (e != cudaSuccess) {
		/* pinning failed: try ordinary memory registered with CUDA, then
		 * plain pageable memory (copies get slower, but still work) */
		cudaGetLastError();
		b->p = ferry_aligned_alloc(4096, size ? size : 1);
		if (!b->p) {
			ferry_free(b);
			return ferry_error(FERRY_ERR_NOMEM, "cannot allocate %zu bytes of host memory", size);
		}
		if (cb->host_kind != HOST_PAGEABLE &&
		    cudaHostRegister(b->p, size ? size : 1, cudaHostRegisterDefault) == cudaSuccess) {
			b->kind = HOST_REGISTERED;
			snprintf(cb->host_note, sizeof(cb->host_note), "registered (%s)",
				 cb->host_kind == HOST_PINNED ? cudaGetErrorString(e) : "FERRY_CUDA_HOST_MEMORY");
		} else {
			cudaGetLastError();
			b->kind = HOST_PAGEABLE;
			be->caps.host_pinned = false;
			snprintf(cb->host_note, sizeof(cb->host_note),
				 "pageable (%s): copies will not overlap fully",
				 cb->host_kind == HOST_PAGEABLE ? "FERRY_CUDA_HOST_MEMORY" :
				 cb->host_kind == HOST_PINNED ? cudaGetErrorString(e) : "registering failed");
		}
		describe(be);
	}
	b->next = cb->host;
	cb->host = b;
	*out = b->p;
	return FERRY_OK;
}

static void cuda_host_free(struct ferry_backend *be, void *p)
{
	struct cuda_backend *cb = be->ctx;
	struct host_block **pp = &cb->host;

	while (*pp && (*pp)->p != p)
		pp = &(*pp)->next;
	if (!*pp)
		return; /* not ours: a caller bug; never free what we did not allocate */
	struct host_block *b = *pp;

	*pp = b->next;
	switch (b->kind) {
	case HOST_PINNED: cudaFreeHost(b->p); break;
	case HOST_REGISTERED: cudaHostUnregister(b->p); ferry_free(b->p); break;
	case HOST_PAGEABLE: ferry_free(b->p); break;
	}
	ferry_free(b);
}

/* Host tiers' memory (NUMA-bound by mbind, then touched): registered so
 * copies to and from it are DMA, as from cudaHostAlloc's.  A failure is an
 * error: tier memory that silently stayed pageable would hide a slowdown. */
static ferry_status cuda_host_register(struct ferry_backend *be, void *p, size_t size)
{
	cudaError_t e;

	(void)be;
	e = cudaHostRegister(p, size, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return ferry_error(FERRY_ERR_BACKEND, "cudaHostRegister of %zu bytes of tier memory: %s", size,
				   cudaGetErrorString(e));
	}
	return FERRY_OK;
}

static void cuda_host_unregister(struct ferry_backend *be, void *p)
{
	(void)be;
	cudaHostUnregister(p);
}

static ferry_status cuda_stream_create(struct ferry_backend *be, struct ferry_stream *s)
{
	cudaStream_t cs;

	(void)be;
	CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "creating a stream");
	s->ctx = cs;
	return FERRY_OK;
}

static void cuda_stream_destroy(struct ferry_stream *s)
{
	cudaStreamSynchronize((cudaStream_t)s->ctx);
	cudaStreamDestroy((cudaStream_t)s->ctx);
}

/* Adds the times of the ops timed so far to the backend's table; called
 * after a host synchronisation, when their events have completed. */
static void read_timers(struct ferry_backend *be)
{
	struct cuda_backend *cb = be->ctx;
	int done = 0;

	for (int i = 0; i < cb->n_pending; i++) {
		struct op_timer *t = &cb->timers[i];
		struct ferry_op_timing *tm = &be->timing[t->kind][t->backward];
		float ms = 0;

		if (cudaEventQuery(t->end) != cudaSuccess) { /* on a stream not yet waited for */
			cudaGetLastError();
			cb->timers[done] = *t;
			cb->timers[i] = (struct op_timer){ 0 };
			done++;
			continue;
		}
		cudaEventElapsedTime(&ms, t->start, t->end);
		tm->seconds += ms * 1e-3;
		tm->flops += t->flops;
		tm->calls++;
	}
	cudaGetLastError();
	cb->n_pending = done;
}

static void free_timers(struct cuda_backend *cb)
{
	for (int i = 0; i < cb->n_timers; i++) {
		cudaEventDestroy(cb->timers[i].start);
		cudaEventDestroy(cb->timers[i].end);
	}
	ferry_free(cb->timers);
}

/* The next free pair of timing events (created on first use). */
static struct op_timer *take_timer(struct cuda_backend *cb)
{
	if (cb->n_pending == cb->cap_timers) {
		int cap = cb->cap_timers ? 2 * cb->cap_timers : 1024;
		struct op_timer *t = ferry_calloc((size_t)cap, sizeof(*t));

		if (!t)
			return NULL;
		if (cb->n_timers)
			memcpy(t, cb->timers, sizeof(*t) * (size_t)cb->n_timers);
		ferry_free(cb->timers);
		cb->timers = t;
		cb->cap_timers = cap;
	}
	if (cb->n_pending == cb->n_timers) {
		struct op_timer *t = &cb->timers[cb->n_timers];

		if (cudaEventCreate(&t->start) != cudaSuccess || cudaEventCreate(&t->end) != cudaSuccess) {
			cudaGetLastError();
			return NULL;
		}
		cb->n_timers++;
	}
	return &cb->timers[cb->n_pending++];
}

static ferry_status cuda_stream_synchronize(struct ferry_stream *s)
{
	CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)s->ctx), "stream synchronize");
	if (s->be->profile)
		read_timers(s->be);
	return FERRY_OK;
}

static ferry_status cuda_stream_wait_event(struct ferry_stream *s, struct ferry_event *ev)
{
	struct cuda_event *ce = ev->ctx;

	CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)s->ctx, ce->e, 0), "stream wait event");
	return FERRY_OK;
}

static ferry_status cuda_event_create(struct ferry_backend *be, struct ferry_event *ev)
{
	struct cuda_event *ce = ferry_calloc(1, sizeof(*ce));
	cudaError_t e;

	(void)be;
	if (!ce)
		return ferry_error(FERRY_ERR_NOMEM, "event: out of host memory");
	e = cudaEventCreateWithFlags(&ce->e, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		ferry_free(ce);
		return cuda_fail(e, "creating an event");
	}
	ev->ctx = ce;
	return FERRY_OK;
}

static ferry_status cuda_event_create_timed(struct ferry_backend *be, struct ferry_event *ev)
{
	struct cuda_event *ce = ferry_calloc(1, sizeof(*ce));
	cudaError_t e;

	(void)be;
	if (!ce)
		return ferry_error(FERRY_ERR_NOMEM, "event: out of host memory");
	if ((e = cudaEventCreate(&ce->e)) != cudaSuccess) {
		ferry_free(ce);
		return cuda_fail(e, "creating a timed event");
	}
	ev->ctx = ce;
	return FERRY_OK;
}

static ferry_status cuda_event_elapsed(struct ferry_event *from, struct ferry_event *to, double *seconds)
{
	struct cuda_event *a = from->ctx, *b = to->ctx;
	float ms = 0;

	if (!a->recorded || !b->recorded)
		return ferry_error(FERRY_ERR_INVALID, "event_elapsed: an event never recorded");
	CHECK_CUDA(cudaEventElapsedTime(&ms, a->e, b->e), "event elapsed time");
	*seconds = ms * 1e-3;
	return FERRY_OK;
}

static void cuda_event_destroy(struct ferry_event *ev)
{
	struct cuda_event *ce = ev->ctx;

	cudaEventDestroy(ce->e);
	ferry_free(ce);
}

static ferry_status cuda_event_record(struct ferry_event *ev, struct ferry_stream *s)
{
	struct cuda_event *ce = ev->ctx;

	CHECK_CUDA(cudaEventRecord(ce->e, (cudaStream_t)s->ctx), "event record");
	ce->recorded = true;
	return FERRY_OK;
}

static ferry_status cuda_event_synchronize(struct ferry_event *ev)
{
	struct cuda_event *ce = ev->ctx;

	CHECK_CUDA(cudaEventSynchronize(ce->e), "event synchronize");
	if (ev->be->profile)
		read_timers(ev->be);
	return FERRY_OK;
}

static bool cuda_event_done(struct ferry_event *ev)
{
	struct cuda_event *ce = ev->ctx;
	cudaError_t e;

	if (!ce->recorded)
		return false;
	e = cudaEventQuery(ce->e);
	if (e != cudaSuccess)
		cudaGetLastError(); /* not ready, or an error the next sync reports */
	return e == cudaSuccess;
}

static ferry_status cuda_memcpy_async(struct ferry_stream *s, void *dst, const void *src, size_t size,
				      enum ferry_copy_kind kind)
{
	enum cudaMemcpyKind k = kind == FERRY_COPY_H2D ? cudaMemcpyHostToDevice :
				kind == FERRY_COPY_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;

	CHECK_CUDA(cudaMemcpyAsync(dst, src, size, k, (cudaStream_t)s->ctx), "memcpy");
	return FERRY_OK;
}

static ferry_status cuda_host_fn(struct ferry_stream *s, void (*fn)(void *), void *arg)
{
	CHECK_CUDA(cudaLaunchHostFunc((cudaStream_t)s->ctx, fn, arg), "host function");
	return FERRY_OK;
}

static void *cuda_stream_native(struct ferry_stream *s)
{
	return s->ctx;
}

static ferry_status cuda_memset_zero_async(struct ferry_stream *s, void *dst, size_t size)
{
	CHECK_CUDA(cudaMemsetAsync(dst, 0, size, (cudaStream_t)s->ctx), "memset");
	return FERRY_OK;
}

static ferry_status cuda_run_op(struct ferry_stream *s, const struct ferry_op_call *call)
{
	struct cuda_backend *cb = s->be->ctx;
	struct op_timer *t = s->be->profile ? take_timer(cb) : NULL;
	char err[256];

	if (t) {
		t->kind = call->kind;
		t->backward = call->backward;
		t->flops = ferry_op_flops(call);
		cudaEventRecord(t->start, (cudaStream_t)s->ctx);
	}
	if (ferry_cuda_run_op(cb->ops, (cudaStream_t)s->ctx, call, err, sizeof(err)))
		return ferry_error(FERRY_ERR_BACKEND, "cuda: %s", err);
	if (t)
		cudaEventRecord(t->end, (cudaStream_t)s->ctx);
	return FERRY_OK;
}

const struct ferry_backend_iface ferry_cuda_backend_iface = {
	.version = FERRY_BACKEND_IFACE_VERSION,
	.name = "cuda",
	.probe = cuda_probe,
	.open = cuda_open,
	.close = cuda_close,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_synchronize = cuda_stream_synchronize,
	.stream_wait_event = cuda_stream_wait_event,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_synchronize = cuda_event_synchronize,
	.event_done = cuda_event_done,
	.memcpy_async = cuda_memcpy_async,
	.memset_zero_async = cuda_memset_zero_async,
	.host_fn = cuda_host_fn,
	.stream_native = cuda_stream_native,
	.run_op = cuda_run_op,
	.op_scratch = ferry_cuda_op_scratch,
	.op_unsupported = ferry_cuda_op_unsupported,
	.event_create_timed = cuda_event_create_timed,
	.event_elapsed = cuda_event_elapsed,
};
