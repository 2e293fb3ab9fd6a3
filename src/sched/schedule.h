/*
 * Internal: a training step as a prepared schedule.
 *
 * Before step 1 the executor compiles each thing a step does (the training
 * step, a loss-only forward) into a program: a list of tasks in submission
 * order, each on a named stream (compute, device-to-host, host-to-device):
 * run an op, copy, zero memory, record or wait for an event, mark "layer l's
 * weight gradients are complete".  Every task is labelled with its tensor
 * names and layer, so `ferry plan --schedule` can print it, a trace can
 * record it and a cost model can simulate it.  Every step replays the
 * program; only values that change per step (learning rate, step number)
 * are patched in at submission.
 *
 * Streams and events are indices into the schedule's resources, shared by
 * all its programs; a runtime maps them onto a backend's streams and events.
 * A program built without a backend (a dry build, for printing) has NULL
 * addresses; it is never replayed.
 */
#ifndef FERRY_SCHED_SCHEDULE_H
#define FERRY_SCHED_SCHEDULE_H

#include "ferry/backend.h"
#include "ferry/plan.h"
#include "ops/op.h"

enum ferry_task_kind {
	FERRY_TASK_OP,         /* run call (forward or backward) */
	FERRY_TASK_COPY,       /* copy bytes from src to dst */
	FERRY_TASK_ZERO,       /* zero bytes at dst */
	FERRY_TASK_RECORD,     /* record event */
	FERRY_TASK_WAIT,       /* the stream waits for event */
	FERRY_TASK_GRADS_DONE, /* marker: layer's weight gradients are complete */
	FERRY_TASK_HOST,       /* AdamW (optim/cpu_adamw.h) or a sum of squares
				  (call) on host memory, by a host thread in the
				  stream's order */
	FERRY_TASK_FILE,       /* host memory to or from the NVMe tier's file
				  (D2H: write src there, H2D: read into dst), by
				  a host thread in the stream's order */
	FERRY_TASK_COMM,       /* a collective over comm's ranks (which one:
				  comm_job): a host thread in the stream's order
				  runs it, or, for a communicator on device
				  buffers, the stream itself */
};

/* Values a replay fills in (per step). */
enum ferry_task_patch {
	FERRY_PATCH_NONE,
	FERRY_PATCH_ADAMW, /* call.scalar[0..5] and call.step from the optimizer */
	FERRY_PATCH_ADAMW_UNCLIPPED, /* the same with grad_scale 1: a speculative
					update, before the norm is known */
};

/* What a HOST task does. */
enum ferry_host_job {
	FERRY_HOST_ADAMW,       /* the fused CPU AdamW; din[0..2]: NULL, or undo
				   copies of param, m, v made first */
	FERRY_HOST_SUM_SQUARES, /* *result = sum of in[0][0..n)^2 */
	FERRY_HOST_RESTORE,     /* param, m, v (out[0], out[1]) = the undo copies
				   din[0..2]; param_copy (bf16) rounded again */
	FERRY_HOST_SUM_SQUARES_PARTS, /* result[0..FERRY_CPU_SUM_BLOCKS) = the block
				   sums of squares of an n-element array's
				   blocks starting in [offset, offset + slice),
				   in[0] holding its elements from offset
				   (ferry_cpu_sum_squares_parts) */
	FERRY_HOST_SUM_PARTS,   /* *out[0] (a double) = those block sums, in[0],
				   added in order */
};

/* What a COMM task does.  Slices: an array of the parameter array's
 * layout split over the ranks, rank r holding elements
 * [r * slice, (r + 1) * slice), fp32 (gradients) or of the kernels' type
 * (ZeRO-3's compute copy: elem bytes an element). */
enum ferry_comm_job {
	FERRY_COMM_JOB_AVERAGE, /* the fp32 array at dst (bytes / 4) averaged in place */
	FERRY_COMM_JOB_GATHER,  /* every rank's `bytes` at dst + rank * bytes to every rank */
	FERRY_COMM_JOB_SCATTER, /* fp32 elements [offset, offset + bytes / 4), whole at
				   src on every rank: their average over the
				   ranks into the slices (dst: where this rank's
				   starts), each rank its part (ZeRO-2's gradients) */
	FERRY_COMM_JOB_COLLECT, /* elements [offset, offset + bytes / elem) from
				   the ranks' slices (src: where this rank's
				   starts) whole into dst on every rank
				   (ZeRO-2's gradients when a micro-batch adds
				   to them, ZeRO-3's weights) */
	FERRY_COMM_JOB_SUM_F64, /* the doubles at dst (bytes / 8) summed in place */
};

struct ferry_task {
	enum ferry_task_kind kind;
	enum ferry_task_patch patch;
	int stream;
	int event;              /* RECORD, WAIT */
	int layer;              /* -1: not a layer's */
	char label[FERRY_SCHED_LABEL_CHARS]; /* what it works on: "query_proj", "adamw: wte" */
	struct ferry_op_call call;
	enum ferry_host_job host_job;
	struct ferry_op_call *host; /* HOST: the call as patched for this step
				       (made at its first submission, freed with
				       the program); the host thread reads it
				       when it runs (after the previous step's
				       has run).  A pointer: tasks stay small,
				       and a dry build copies tens of thousands */
	void *dst;
	const void *src;
	size_t bytes;
	enum ferry_copy_kind copy_kind;
	struct ferry_nvme_file *file; /* FILE: the file, and where in it */
	uint64_t file_offset;
	struct ferry_comm *comm;      /* COMM: the ranks, and where a failure on */
	ferry_status *comm_status;    /* a host thread is kept (the first) */
	enum ferry_comm_job comm_job;
	unsigned elem;          /* COMM slices: bytes an element */
	size_t offset, slice;   /* COMM slices, HOST block sums: elements */
	struct ferry_stage_piece *pieces; /* COMM through host staging: its
				   pieces (sched/comm_stage.h), made at its
				   first submission, freed with the program */
	bool src_part;          /* COMM collect: src is this rank's part itself,
				   not where its slice starts */
};

struct ferry_program {
	char name[32];
	int n, cap;
	struct ferry_task *t;
	bool failed;            /* out of memory while building: refused at replay */
};

struct ferry_sched_resources {
	int n_streams;
	char stream_name[FERRY_SCHED_MAX_STREAMS][FERRY_SCHED_NAME_CHARS];
	int n_events, events_cap;
	char (*event_name)[40];
	bool failed;
};

/* ---- building ------------------------------------------------------------------ */

/* base + bytes: an address inside a buffer, NULL in a dry build. */
static inline void *ferry_at(const void *base, size_t bytes)
{
	return base ? (char *)base + bytes : NULL;
}

int ferry_sched_stream(struct ferry_sched_resources *r, const char *name);
/* A new event's index (-1 out of memory: r->failed is set). */
int ferry_sched_event(struct ferry_sched_resources *r, const char *name);
void ferry_sched_resources_release(struct ferry_sched_resources *r);

void ferry_program_init(struct ferry_program *p, const char *name);
void ferry_program_release(struct ferry_program *p);
/* Appends a task (copied); returns it, or NULL when out of memory (then
 * p->failed is set and the program is refused at replay). */
struct ferry_task *ferry_program_add(struct ferry_program *p, const struct ferry_task *t);

void ferry_emit_op(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
		   const char *label);
void ferry_emit_copy(struct ferry_program *p, int stream, void *dst, const void *src, size_t bytes,
		     enum ferry_copy_kind kind, int layer, const char *label);
void ferry_emit_zero(struct ferry_program *p, int stream, void *dst, size_t bytes, int layer,
		     const char *label);
void ferry_emit_record(struct ferry_program *p, int stream, int event, int layer);
void ferry_emit_wait(struct ferry_program *p, int stream, int event, int layer);
void ferry_emit_grads_done(struct ferry_program *p, int stream, int layer);
/* AdamW on host memory (call: param, out[0] m, out[1] v, in[0] grad,
 * param_copy NULL or bf16 bits of the result), patched per step. */
void ferry_emit_host_adamw(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
			   const char *label);

/* bytes between host memory (dst or src, by kind) and file at offset. */
void ferry_emit_file(struct ferry_program *p, int stream, struct ferry_nvme_file *file, uint64_t offset,
		     void *dst, const void *src, size_t bytes, enum ferry_copy_kind kind, int layer,
		     const char *label);
/* Puts back what a speculative host AdamW (c: its call, din[0..2] its
 * undo copies) changed. */
void ferry_emit_host_restore(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
			     const char *label);
/* *result = the sum of x[0..n)^2 over host memory, by a host thread in the
 * stream's order (the CPU kernel's blocked sum: the CPU backend's bits). */
void ferry_emit_host_sum_squares(struct ferry_program *p, int stream, const float *x, long n, double *result,
				 const char *label);

/* The n floats at buf averaged over comm's ranks in place (a gradient's
 * all-reduce); a failure is kept in *status for the caller to read after
 * the stream has drained. */
void ferry_emit_all_reduce(struct ferry_program *p, int stream, struct ferry_comm *comm, float *buf, size_t n,
			   ferry_status *status, int layer, const char *label);

/* Every rank's `bytes` at buf + rank * bytes to every rank, in place
 * (ZeRO-1's updated slices); a failure as for an all-reduce. */
void ferry_emit_all_gather(struct ferry_program *p, int stream, struct ferry_comm *comm, void *buf, size_t bytes,
			   ferry_status *status, const char *label);

/* ZeRO-2: elements [offset, offset + n) of the gradient array, whole at
 * src on every rank, averaged over the ranks into their slices of `slice`
 * elements (dst: where this rank's starts), each rank its part; a
 * failure as for an all-reduce. */
void ferry_emit_reduce_scatter_slices(struct ferry_program *p, int stream, struct ferry_comm *comm, float *dst,
				      const float *src, size_t offset, size_t n, size_t slice, ferry_status *status,
				      int layer, const char *label);
/* The reverse, for elements of elem bytes (fp32 gradients, or weights in
 * the kernels' type): elements [offset, offset + n) from the ranks'
 * slices (src: where this rank's starts) whole into dst on every rank. */
void ferry_emit_all_gather_slices(struct ferry_program *p, int stream, struct ferry_comm *comm, void *dst,
				  const void *src, size_t offset, size_t n, size_t elem, size_t slice,
				  ferry_status *status, int layer, const char *label);
/* The same, this rank's part of [offset, offset + n) at `part` itself (a
 * staged copy of it, or its place in dst: then in place). */
void ferry_emit_all_gather_part(struct ferry_program *p, int stream, struct ferry_comm *comm, void *dst,
				const void *part, size_t offset, size_t n, size_t elem, size_t slice, ferry_status *status,
				int layer, const char *label);
/* The n doubles at buf summed over comm's ranks in place. */
void ferry_emit_sum_f64(struct ferry_program *p, int stream, struct ferry_comm *comm, double *buf, size_t n,
			ferry_status *status, const char *label);
/* On host memory, by a host thread in the stream's order: parts = the
 * block sums of squares of an n-element array's blocks that start in
 * [lo, hi), x holding its elements from lo (the CPU kernel's blocks);
 * then *result = parts added in order. */
void ferry_emit_host_sum_squares_parts(struct ferry_program *p, int stream, const float *x, long n, size_t lo,
				       size_t hi, double *parts, const char *label);
void ferry_emit_host_sum_parts(struct ferry_program *p, int stream, const double *parts, double *result,
			       const char *label);

/* ---- running ------------------------------------------------------------------- */

/* A COMM task's collective on its buffers, queued on `stream` (the
 * engine's native one; NULL: done on return). */
ferry_status ferry_comm_task_call(const struct ferry_task *t, void *stream) FERRY_MUST_CHECK;
/* A failure of t's collective on a host thread, kept in its comm_status
 * (the first) for the caller to read after the stream has drained. */
void ferry_comm_task_keep(const struct ferry_task *t, ferry_status st);
/* The elements of [a, b) in rank r's slice (of `slice` elements from
 * r * slice): how many, and in *from where they start in it. */
size_t ferry_slice_part(size_t a, size_t b, size_t slice, int r, size_t *from);
/* Elements [a, a + n) of an array split over comm's ranks in slices of
 * `slice` elements: whole at `whole` on every rank, each rank's part
 * averaged over the ranks into `mine` (scatter: fp32), or every rank's
 * part from its `mine` into `whole` (gather: elements of elem bytes);
 * mine: where this rank's part is, NULL when it has none. */
ferry_status ferry_comm_slices(struct ferry_comm *comm, bool scatter, size_t a, size_t n, size_t slice, size_t elem,
			       void *whole, void *mine, void *stream) FERRY_MUST_CHECK;

/* A schedule's streams and events on a backend. */
struct ferry_sched_runtime {
	ferry_backend_t be;
	int n_streams, n_events;
	ferry_stream_t stream[FERRY_SCHED_MAX_STREAMS];
	ferry_event_t *event;
	/* where COMM tasks on arena memory go through host memory (MPI on a
	 * device backend: sched/comm_stage.h); NULL: none staged */
	const struct ferry_comm_stage *stage;
};

ferry_status ferry_sched_runtime_create(ferry_backend_t be, const struct ferry_sched_resources *r,
					struct ferry_sched_runtime *rt) FERRY_MUST_CHECK;
void ferry_sched_runtime_free(struct ferry_sched_runtime *rt);

/* Per-step values patched into AdamW tasks at submission: scalar[0..3] =
 * lr, betas, eps; scalar[4] (the task's decay flag, 1 or 0) times
 * weight_decay; scalar[5] = grad_scale (global-norm clipping); step. */
struct ferry_step_values {
	float lr, beta1, beta2, eps, weight_decay, grad_scale;
	int step;
};

/* Submits every task of p in order (asynchronously: nothing waits for the
 * device).  values may be NULL when p has no patched task. */
ferry_status ferry_program_submit(const struct ferry_program *p, const struct ferry_sched_runtime *rt,
				  const struct ferry_step_values *values) FERRY_MUST_CHECK;
/* The same, adding each task to the trace tr when it is on (sched/trace.h;
 * NULL: none). */
struct ferry_sched_trace;
ferry_status ferry_program_submit_traced(const struct ferry_program *p, const struct ferry_sched_runtime *rt,
					 const struct ferry_step_values *values, struct ferry_sched_trace *tr)
	FERRY_MUST_CHECK;

/* ---- reading ------------------------------------------------------------------- */

const char *ferry_task_kind_name(enum ferry_task_kind k);
/* Tasks of p on stream s; host synchronisations p implies are none: the
 * caller synchronises once, after the program. */
int ferry_program_count(const struct ferry_program *p, int stream);

#endif
