/*
 * Internal: what the layers above the backends (the executor, the offload
 * engine, the planner) need of them beyond the public backend.h, without
 * the implementations' vtable: running one op on a stream (ferry_op_call
 * is internal) and the arena's alignment, which plans round sizes to.
 */
#ifndef FERRY_BACKEND_RUN_OP_H
#define FERRY_BACKEND_RUN_OP_H

#include "ferry/backend.h"
#include "ops/op.h"

/* Every device buffer starts at, and is sized in, multiples of this. */
#define FERRY_BUFFER_ALIGN 256

/* FERRY_OK when the named backend is compiled into this build (it may
 * still have no device here), else why not; no device is opened. */
ferry_status ferry_backend_compiled_in(const char *backend);

/* Bytes of scratch the named backend's kernels need for a call (0 for an
 * unknown backend or one that needs none); no device is opened. */
size_t ferry_backend_op_scratch(const char *backend, const struct ferry_op_call *call);

/* What of a call the named backend's kernels do not compute ("attention
 * soft-capping"), or NULL (also for an unknown backend); no device is
 * opened. */
const char *ferry_backend_op_unsupported(const char *backend, const struct ferry_op_call *call);

/* Runs one op on the stream, asynchronously. */
ferry_status ferry_stream_run_op(ferry_stream_t s, const struct ferry_op_call *call) FERRY_MUST_CHECK;

#endif
