/*
 * The backend interface: a device with its memory, streams, events and
 * asynchronous copies (the shape of ggml-backend and of CUDA's runtime).
 *
 * Device memory is one arena per device, opened with a capacity; buffers are
 * carved from it and the arena counts live bytes and their high-water mark.
 * Host buffers are host memory suited to fast copies (pinned on CUDA).
 * Work submitted to a stream runs in submission order, asynchronously to the
 * caller; work on different streams may overlap.  An event recorded on a
 * stream completes when everything submitted to that stream before it has
 * run; a stream told to wait for an event runs nothing submitted after the
 * wait until then.
 *
 * The CPU backend implements all of it for real: device memory is an arena
 * in host RAM, every stream is a worker thread with a FIFO queue, events are
 * condition-variable synchronisation.
 */
#ifndef FERRY_BACKEND_H
#define FERRY_BACKEND_H

#include <stdbool.h>
#include "ferry/ferry.h"
#include "ferry/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_backend *ferry_backend_t;
typedef struct ferry_buffer *ferry_buffer_t;
typedef struct ferry_stream *ferry_stream_t;
typedef struct ferry_event *ferry_event_t;

/* Element types on a device: activations and the weights the kernels read
 * are fp32 on the CPU backend, bf16 on CUDA (mixed precision); master
 * weights, optimizer state, gradients of weights and statistics are fp32
 * everywhere. */
enum ferry_dtype {
	FERRY_F32 = 0,
	FERRY_BF16 = 1,
};
size_t ferry_dtype_size(enum ferry_dtype t);
const char *ferry_dtype_name(enum ferry_dtype t);

/* ---- backends and devices -------------------------------------------------- */

struct ferry_backend_caps {
	bool async;         /* streams run asynchronously to the caller */
	bool events;        /* events synchronise streams */
	bool host_pinned;   /* host buffers are page-locked for DMA */
	bool unified;       /* device memory is host-addressable (CPU) */
	int compute_units;  /* threads (CPU) or SMs (GPU) */
	enum ferry_dtype act_dtype; /* activations and compute weights */
	int max_head_size;  /* largest attention head (C / NH) it runs; 0 = any */
};

struct ferry_backend_opts {
	size_t device_mem;  /* arena capacity in bytes; 0 = all the device has */
	int threads;        /* CPU compute threads; 0 = all cores */
	int device_index;   /* GPU ordinal, modulo the GPUs visible (a rank
			       passes its rank on the machine) */
	bool profile;       /* time every op (ferry_backend_op_stats) */
};

/* Names of the backends compiled in, and whether each can open now. */
int ferry_backend_count(void);
const char *ferry_backend_name_at(int i);
/* FERRY_OK if the named backend can open a device here; otherwise the error
 * says why (no GPU, no driver, not compiled in). */
ferry_status ferry_backend_probe(const char *name) FERRY_MUST_CHECK;
/* The activation type a backend computes in, known without opening it
 * (for plans made before step 1); F32 for unknown names. */
enum ferry_dtype ferry_backend_act_dtype(const char *name);

ferry_status ferry_backend_open(const char *name,
				const struct ferry_backend_opts *opts,
				ferry_backend_t *out) FERRY_MUST_CHECK;
/* Waits for every stream, then frees the arena and everything in it. */
void ferry_backend_close(ferry_backend_t be);

const char *ferry_backend_name(ferry_backend_t be);
/* The device in words ("CPU: 2 threads, AMD EPYC"). */
const char *ferry_backend_description(ferry_backend_t be);
struct ferry_backend_caps ferry_backend_caps(ferry_backend_t be);

/* Device arena accounting. */
size_t ferry_backend_mem_capacity(ferry_backend_t be);
/* Why the arena's capacity is less than the device has, when the backend
 * chose it so (the CPU backend under a cgroup limit or `ulimit -v`: "3/4 of
 * ulimit -v, 1.5 GiB"); "" otherwise. */
const char *ferry_backend_mem_note(ferry_backend_t be);
size_t ferry_backend_mem_live(ferry_backend_t be);
/* Whether p points into the arena (device memory; host memory on CPU). */
bool ferry_backend_in_arena(ferry_backend_t be, const void *p);
size_t ferry_backend_mem_peak(ferry_backend_t be);
void ferry_backend_mem_reset_peak(ferry_backend_t be);

/* How many times the host has waited for a stream or an event
 * (ferry_stream_synchronize, ferry_event_synchronize) since open: a
 * training step costs one. */
long ferry_backend_host_syncs(ferry_backend_t be);

/* Per op kind and direction: calls, seconds and FLOPs since the backend
 * was opened with .profile (or since the last reset).  The CPU backend
 * times its ops; the CUDA backend does not yet (no entries).  Returns the number of
 * entries written (kinds that ran). */
struct ferry_op_stats {
	const char *name;
	bool backward;
	long calls;
	double seconds, flops;
};
int ferry_backend_op_stats(ferry_backend_t be, struct ferry_op_stats *out, int max);
void ferry_backend_op_stats_reset(ferry_backend_t be);

/* ---- device buffers ------------------------------------------------------------
 * Carved from the arena, aligned to 256 bytes.  FERRY_ERR_DEVICE_MEM when the
 * arena cannot hold it (the message says how many bytes were asked, live and
 * free).  ferry_buffer_ptr() is the device address (host-addressable on CPU). */
ferry_status ferry_buffer_alloc(ferry_backend_t be, size_t size,
				ferry_buffer_t *out) FERRY_MUST_CHECK;
void ferry_buffer_free(ferry_buffer_t buf);
void *ferry_buffer_ptr(ferry_buffer_t buf);
size_t ferry_buffer_size(ferry_buffer_t buf);

/* ---- host buffers ---------------------------------------------------------------
 * Host memory for copies to and from the device; freed with
 * ferry_host_free. */
ferry_status ferry_host_alloc(ferry_backend_t be, size_t size, void **out)
	FERRY_MUST_CHECK;
void ferry_host_free(ferry_backend_t be, void *p);

/* ---- streams ----------------------------------------------------------------------- */
ferry_status ferry_stream_create(ferry_backend_t be, const char *name,
				 ferry_stream_t *out) FERRY_MUST_CHECK;
/* Waits for the stream's work, then destroys it. */
void ferry_stream_free(ferry_stream_t s);
/* Blocks until all work submitted to s has run.  Returns the first error any
 * of that work reported (sticky until then). */
ferry_status ferry_stream_synchronize(ferry_stream_t s) FERRY_MUST_CHECK;
ferry_status ferry_stream_wait_event(ferry_stream_t s, ferry_event_t ev)
	FERRY_MUST_CHECK;

/* ---- events ------------------------------------------------------------------------- */
ferry_status ferry_event_create(ferry_backend_t be, ferry_event_t *out)
	FERRY_MUST_CHECK;
void ferry_event_free(ferry_event_t ev);
ferry_status ferry_event_record(ferry_event_t ev, ferry_stream_t s)
	FERRY_MUST_CHECK;
ferry_status ferry_event_synchronize(ferry_event_t ev) FERRY_MUST_CHECK;
/* Whether the last recorded work has run (false if never recorded). */
bool ferry_event_done(ferry_event_t ev);
/* An event whose completion time can be read with ferry_event_elapsed (for
 * traces; plain events may cost less where a backend times nothing). */
ferry_status ferry_event_create_timed(ferry_backend_t be, ferry_event_t *out)
	FERRY_MUST_CHECK;
/* Seconds from the completion of `from` to that of `to` (negative if `to`
 * completed first); both timed, recorded and complete. */
ferry_status ferry_event_elapsed(ferry_event_t from, ferry_event_t to, double *seconds)
	FERRY_MUST_CHECK;

/* ---- copies -------------------------------------------------------------------------
 * Asynchronous copy of size bytes on stream s.  dst and src are device
 * addresses (ferry_buffer_ptr + offset) or host addresses as kind says.  The
 * memory must stay valid until the copy has run. */
enum ferry_copy_kind {
	FERRY_COPY_H2D,
	FERRY_COPY_D2H,
	FERRY_COPY_D2D,
};
ferry_status ferry_memcpy_async(ferry_stream_t s, void *dst, const void *src,
				size_t size, enum ferry_copy_kind kind)
	FERRY_MUST_CHECK;
/* Runs fn(arg) on a host thread when stream s reaches it, in stream order
 * (CUDA: cudaLaunchHostFunc).  fn must not call ferry or CUDA; arg must stay
 * valid until it has run. */
ferry_status ferry_stream_host_fn(ferry_stream_t s, void (*fn)(void *arg), void *arg) FERRY_MUST_CHECK;
/* The runtime's own handle of s (CUDA: its cudaStream_t), for libraries
 * that queue work on it (NCCL); NULL where there is none (CPU). */
void *ferry_stream_native(ferry_stream_t s);

/* Sets size bytes of device memory to zero, on stream s. */
ferry_status ferry_memset_zero_async(ferry_stream_t s, void *dst, size_t size)
	FERRY_MUST_CHECK;

/* Host memory of kind on its host tier (page-aligned, zeroed), registered
 * for DMA by be (NULL: not registered); ferry_host_tiers_release frees it. */
ferry_status ferry_host_tiers_alloc(ferry_host_tiers_t h, ferry_backend_t be, enum ferry_host_kind kind,
				    size_t bytes, void **out) FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
