/* Prepared schedules: building programs of tasks, and replaying them. */
#include "sched/schedule.h"
#include "sched/trace.h"
#include "sched/comm_stage.h"
#include "ferry/comm.h"
#include "optim/cpu_adamw.h"
#include "ops/cpu/kernels.h"
#include "backend/run_op.h"
#include "tier/nvme_file.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ferry_sched_stream(struct ferry_sched_resources *r, const char *name)
{
	for (int i = 0; i < r->n_streams; i++)
		if (!strcmp(r->stream_name[i], name))
			return i;
	if (r->n_streams == FERRY_SCHED_MAX_STREAMS) {
		r->failed = true;
		return -1;
	}
	snprintf(r->stream_name[r->n_streams], sizeof(r->stream_name[0]), "%s", name);
	return r->n_streams++;
}

int ferry_sched_event(struct ferry_sched_resources *r, const char *name)
{
	if (r->n_events == r->events_cap) {
		int cap = r->events_cap ? 2 * r->events_cap : 16;
		char (*n)[40] = ferry_calloc((size_t)cap, sizeof(*n));

		if (!n) {
			r->failed = true;
			return -1;
		}
		if (r->event_name)
			memcpy(n, r->event_name, (size_t)r->n_events * sizeof(*n));
		ferry_free(r->event_name);
		r->event_name = n;
		r->events_cap = cap;
	}
	snprintf(r->event_name[r->n_events], sizeof(r->event_name[0]), "%.39s", name);
	return r->n_events++;
}

void ferry_sched_resources_release(struct ferry_sched_resources *r)
{
	ferry_free(r->event_name);
	memset(r, 0, sizeof(*r));
}

void ferry_program_init(struct ferry_program *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
}

void ferry_program_release(struct ferry_program *p)
{
	for (int i = 0; i < p->n; i++) {
		ferry_free(p->t[i].host);
		ferry_free(p->t[i].pieces);
	}
	ferry_free(p->t);
	p->t = NULL;
	p->n = p->cap = 0;
}

struct ferry_task *ferry_program_add(struct ferry_program *p, const struct ferry_task *t)
{
	if (p->failed)
		return NULL;
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 256;
		struct ferry_task *n = ferry_malloc((size_t)cap * sizeof(*n));

		if (!n) {
			p->failed = true;
			return NULL;
		}
		if (p->t)
			memcpy(n, p->t, (size_t)p->n * sizeof(*n));
		ferry_free(p->t);
		p->t = n;
		p->cap = cap;
	}
	p->t[p->n] = *t;
	return &p->t[p->n++];
}

static struct ferry_task task(enum ferry_task_kind kind, int stream, int layer, const char *label)
{
	struct ferry_task t;

	memset(&t, 0, sizeof(t));
	t.kind = kind;
	t.stream = stream;
	t.layer = layer;
	t.event = -1;
	if (label)
		snprintf(t.label, sizeof(t.label), "%.55s", label);
	return t;
}

void ferry_emit_op(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
		   const char *label)
{
	struct ferry_task t = task(FERRY_TASK_OP, stream, layer, label);

	t.call = *c;
	ferry_program_add(p, &t);
}

void ferry_emit_copy(struct ferry_program *p, int stream, void *dst, const void *src, size_t bytes,
		     enum ferry_copy_kind kind, int layer, const char *label)
{
	struct ferry_task t = task(FERRY_TASK_COPY, stream, layer, label);

	t.dst = dst;
	t.src = src;
	t.bytes = bytes;
	t.copy_kind = kind;
	ferry_program_add(p, &t);
}

void ferry_emit_zero(struct ferry_program *p, int stream, void *dst, size_t bytes, int layer,
		     const char *label)
{
	struct ferry_task t = task(FERRY_TASK_ZERO, stream, layer, label);

	t.dst = dst;
	t.bytes = bytes;
	ferry_program_add(p, &t);
}

void ferry_emit_record(struct ferry_program *p, int stream, int event, int layer)
{
	struct ferry_task t = task(FERRY_TASK_RECORD, stream, layer, NULL);

	t.event = event;
	ferry_program_add(p, &t);
}

void ferry_emit_wait(struct ferry_program *p, int stream, int event, int layer)
{
	struct ferry_task t = task(FERRY_TASK_WAIT, stream, layer, NULL);

	t.event = event;
	ferry_program_add(p, &t);
}

void ferry_emit_grads_done(struct ferry_program *p, int stream, int layer)
{
	struct ferry_task t = task(FERRY_TASK_GRADS_DONE, stream, layer, "weight gradients complete");

	ferry_program_add(p, &t);
}

void ferry_emit_host_adamw(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
			   const char *label)
{
	struct ferry_task t = task(FERRY_TASK_HOST, stream, layer, label);

	t.call = *c;
	t.patch = FERRY_PATCH_ADAMW;
	ferry_program_add(p, &t);
}

void ferry_emit_file(struct ferry_program *p, int stream, struct ferry_nvme_file *file, uint64_t offset,
		     void *dst, const void *src, size_t bytes, enum ferry_copy_kind kind, int layer,
		     const char *label)
{
	struct ferry_task t = task(FERRY_TASK_FILE, stream, layer, label);

	t.file = file;
	t.file_offset = offset;
	t.dst = dst;
	t.src = src;
	t.bytes = bytes;
	t.copy_kind = kind;
	ferry_program_add(p, &t);
}

void ferry_emit_host_restore(struct ferry_program *p, int stream, const struct ferry_op_call *c, int layer,
			     const char *label)
{
	struct ferry_task t = task(FERRY_TASK_HOST, stream, layer, label);

	t.call = *c;
	t.host_job = FERRY_HOST_RESTORE;
	ferry_program_add(p, &t);
}

/* A HOST task summing: in[0] (n elements) into result. */
static struct ferry_task sum_task(enum ferry_host_job job, int stream, const void *x, long n, double *result,
				  const char *label)
{
	struct ferry_task t = task(FERRY_TASK_HOST, stream, -1, label);

	t.host_job = job;
	t.call.kind = job == FERRY_HOST_SUM_PARTS ? FERRY_OP_SUM : FERRY_OP_SUM_SQUARES;
	t.call.in[0] = x;
	t.call.n = n;
	t.call.result = result;
	return t;
}

void ferry_emit_host_sum_squares(struct ferry_program *p, int stream, const float *x, long n, double *result,
				 const char *label)
{
	struct ferry_task t = sum_task(FERRY_HOST_SUM_SQUARES, stream, x, n, result, label);

	ferry_program_add(p, &t);
}

void ferry_emit_host_sum_squares_parts(struct ferry_program *p, int stream, const float *x, long n, size_t lo,
				       size_t hi, double *parts, const char *label)
{
	struct ferry_task t = sum_task(FERRY_HOST_SUM_SQUARES_PARTS, stream, x, n, parts, label);

	t.offset = lo;
	t.slice = hi - lo;
	ferry_program_add(p, &t);
}

void ferry_emit_host_sum_parts(struct ferry_program *p, int stream, const double *parts, double *result,
			       const char *label)
{
	struct ferry_task t = sum_task(FERRY_HOST_SUM_PARTS, stream, parts, FERRY_CPU_SUM_BLOCKS, result, label);

	ferry_program_add(p, &t);
}

/* A COMM task: what job says, on `bytes` at buf. */
static struct ferry_task comm_task(int stream, struct ferry_comm *comm, void *buf, size_t bytes,
				   enum ferry_comm_job job, ferry_status *status, int layer, const char *label)
{
	struct ferry_task t = task(FERRY_TASK_COMM, stream, layer, label);

	t.comm = comm;
	t.comm_status = status;
	t.comm_job = job;
	t.dst = buf;
	t.bytes = bytes;
	return t;
}

void ferry_emit_all_reduce(struct ferry_program *p, int stream, struct ferry_comm *comm, float *buf, size_t n,
			   ferry_status *status, int layer, const char *label)
{
	struct ferry_task t = comm_task(stream, comm, buf, n * sizeof(float), FERRY_COMM_JOB_AVERAGE, status, layer,
					label);

	ferry_program_add(p, &t);
}

void ferry_emit_all_gather(struct ferry_program *p, int stream, struct ferry_comm *comm, void *buf, size_t bytes,
			   ferry_status *status, const char *label)
{
	struct ferry_task t = comm_task(stream, comm, buf, bytes, FERRY_COMM_JOB_GATHER, status, -1, label);

	ferry_program_add(p, &t);
}

/* A COMM task moving elements [offset, offset + n) of elem bytes between
 * whole arrays and the ranks' slices of `slice` elements. */
static void slices_task(struct ferry_program *p, enum ferry_comm_job job, int stream, struct ferry_comm *comm,
			void *dst, const void *src, size_t offset, size_t n, size_t elem, size_t slice,
			ferry_status *status, int layer, const char *label)
{
	struct ferry_task t = comm_task(stream, comm, dst, n * elem, job, status, layer, label);

	t.src = src;
	t.elem = (unsigned)elem;
	t.offset = offset;
	t.slice = slice;
	ferry_program_add(p, &t);
}

void ferry_emit_reduce_scatter_slices(struct ferry_program *p, int stream, struct ferry_comm *comm, float *dst,
				      const float *src, size_t offset, size_t n, size_t slice, ferry_status *status,
				      int layer, const char *label)
{
	slices_task(p, FERRY_COMM_JOB_SCATTER, stream, comm, dst, src, offset, n, sizeof(float), slice, status, layer,
		    label);
}

void ferry_emit_all_gather_slices(struct ferry_program *p, int stream, struct ferry_comm *comm, void *dst,
				  const void *src, size_t offset, size_t n, size_t elem, size_t slice,
				  ferry_status *status, int layer, const char *label)
{
	slices_task(p, FERRY_COMM_JOB_COLLECT, stream, comm, dst, src, offset, n, elem, slice, status, layer, label);
}

void ferry_emit_all_gather_part(struct ferry_program *p, int stream, struct ferry_comm *comm, void *dst,
				const void *part, size_t offset, size_t n, size_t elem, size_t slice, ferry_status *status,
				int layer, const char *label)
{
	ferry_emit_all_gather_slices(p, stream, comm, dst, part, offset, n, elem, slice, status, layer, label);
	if (!p->failed)
		p->t[p->n - 1].src_part = true;
}

void ferry_emit_sum_f64(struct ferry_program *p, int stream, struct ferry_comm *comm, double *buf, size_t n,
			ferry_status *status, const char *label)
{
	struct ferry_task t = comm_task(stream, comm, buf, n * sizeof(double), FERRY_COMM_JOB_SUM_F64, status, -1,
					label);

	ferry_program_add(p, &t);
}

ferry_status ferry_sched_runtime_create(ferry_backend_t be, const struct ferry_sched_resources *r,
					struct ferry_sched_runtime *rt)
{
	ferry_status st = FERRY_OK;

	memset(rt, 0, sizeof(*rt));
	rt->be = be;
	if (r->failed)
		return ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory while building");
	if (r->n_events) {
		rt->event = ferry_calloc((size_t)r->n_events, sizeof(ferry_event_t));
		if (!rt->event)
			return ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory");
	}
	for (int i = 0; i < r->n_streams && !st; i++, rt->n_streams++)
		st = ferry_stream_create(be, r->stream_name[i], &rt->stream[i]);
	for (int i = 0; i < r->n_events && !st; i++, rt->n_events++)
		st = ferry_event_create(be, &rt->event[i]);
	if (st)
		ferry_sched_runtime_free(rt);
	return st;
}

void ferry_sched_runtime_free(struct ferry_sched_runtime *rt)
{
	/* streams drain before they go, so no task still uses an event */
	for (int i = 0; i < rt->n_streams; i++)
		ferry_stream_free(rt->stream[i]);
	for (int i = 0; i < rt->n_events; i++)
		ferry_event_free(rt->event[i]);
	ferry_free(rt->event);
	memset(rt, 0, sizeof(*rt));
}

/* t's call with this step's optimizer values. */
static struct ferry_op_call patched(const struct ferry_task *t, const struct ferry_step_values *v)
{
	struct ferry_op_call c = t->call;

	c.scalar[0] = v->lr;
	c.scalar[1] = v->beta1;
	c.scalar[2] = v->beta2;
	c.scalar[3] = v->eps;
	c.scalar[4] = t->call.scalar[4] * v->weight_decay;
	c.scalar[5] = t->patch == FERRY_PATCH_ADAMW_UNCLIPPED ? 1.0f : v->grad_scale;
	c.step = v->step;
	return c;
}

static ferry_status submit_op(const struct ferry_task *t, const struct ferry_sched_runtime *rt,
			      const struct ferry_step_values *v)
{
	struct ferry_op_call c;

	if (t->patch == FERRY_PATCH_NONE)
		return ferry_stream_run_op(rt->stream[t->stream], &t->call);
	if (!v)
		return ferry_error(FERRY_ERR_INVALID, "schedule: task '%s' needs per-step values", t->label);
	c = patched(t, v);
	return ferry_stream_run_op(rt->stream[t->stream], &c);
}

/* A host task: AdamW (the fused CPU kernel) or the sum of squares (the
 * CPU backend's kernel, so the CPU backend's norm has the same bits) on
 * host memory. */
static void run_host_task(void *arg)
{
	const struct ferry_task *t = arg;
	const struct ferry_op_call *c = t->host;

	if (t->host_job == FERRY_HOST_SUM_SQUARES) {
		*c->result = ferry_cpu_sum_squares(c->in[0], c->n);
		return;
	}
	if (t->host_job == FERRY_HOST_SUM_SQUARES_PARTS) {
		ferry_cpu_sum_squares_parts(c->in[0], c->n, (long)t->offset, (long)(t->offset + t->slice), c->result);
		return;
	}
	if (t->host_job == FERRY_HOST_SUM_PARTS) {
		*c->result = ferry_cpu_sum_parts(c->in[0]);
		return;
	}
	struct ferry_cpu_adamw_args a = {
		.param = c->param, .m = c->out[0], .v = c->out[1], .grad = c->in[0], .param_bf16 = c->param_copy,
		.save_param = c->din[0], .save_m = c->din[1], .save_v = c->din[2],
		.n = c->n, .lr = c->scalar[0], .beta1 = c->scalar[1], .beta2 = c->scalar[2], .eps = c->scalar[3],
		.weight_decay = c->scalar[4], .grad_scale = c->scalar[5], .step = c->step,
	};

	/* the arguments and the path were checked when the model was made */
	if ((t->host_job == FERRY_HOST_RESTORE ? ferry_cpu_adamw_restore(&a) : ferry_cpu_adamw_step(&a)) != FERRY_OK)
		abort(); /* unreachable: nothing to report it to on this thread */
}

/* Patches the host task in place (the previous step's has run: the step's
 * forward waited for its weights) and queues it. */
static ferry_status submit_host(const struct ferry_task *t, const struct ferry_sched_runtime *rt,
				const struct ferry_step_values *v)
{
	struct ferry_task *w = (struct ferry_task *)t;

	if (t->patch != FERRY_PATCH_NONE && !v)
		return ferry_error(FERRY_ERR_INVALID, "schedule: task '%s' needs per-step values", t->label);
	if (!w->host && !(w->host = ferry_malloc(sizeof(*w->host))))
		return ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory");
	*w->host = t->patch == FERRY_PATCH_NONE ? t->call : patched(t, v);
	return ferry_stream_host_fn(rt->stream[t->stream], run_host_task, w);
}

/* On the stream's host thread: an I/O error is kept by the file and
 * reported after the step (ferry_nvme_file_status). */
static void run_file_io(void *arg)
{
	const struct ferry_task *t = arg;

	if (t->copy_kind == FERRY_COPY_D2H)
		ferry_nvme_file_keep(t->file, ferry_nvme_write(t->file, t->file_offset, t->src, t->bytes));
	else
		ferry_nvme_file_keep(t->file, ferry_nvme_read(t->file, t->file_offset, t->dst, t->bytes));
}

size_t ferry_slice_part(size_t a, size_t b, size_t S, int r, size_t *from)
{
	size_t lo = (size_t)r * S, s = a > lo ? a : lo, e = b < lo + S ? b : lo + S;

	*from = s - lo;
	return e > s ? e - s : 0;
}

ferry_status ferry_comm_slices(struct ferry_comm *comm, bool scatter, size_t a, size_t n, size_t slice, size_t elem,
			       void *whole, void *mine, void *stream)
{
	const int N = ferry_comm_size(comm);
	const bool words = elem % sizeof(float) == 0;
	size_t *counts = ferry_calloc((size_t)N, sizeof(size_t)), from = 0;
	ferry_status st;

	if (!counts)
		return ferry_error(FERRY_ERR_NOMEM, "slices: out of host memory");
	for (int r = 0; r < N; r++)
		counts[r] = ferry_slice_part(a, a + n, slice, r, &from);
	if (scatter) {
		st = ferry_comm_reduce_scatter_v(comm, whole, mine, counts, FERRY_COMM_F32, FERRY_COMM_AVG, stream);
	} else {
		for (int r = 0; r < N; r++) /* as fp32 words when whole ones, else as bytes */
			counts[r] *= words ? elem / sizeof(float) : elem;
		st = ferry_comm_all_gather_v(comm, mine, whole, counts, words ? FERRY_COMM_F32 : FERRY_COMM_BYTE, stream);
	}
	ferry_free(counts);
	return st;
}

/* Elements [t->offset, + n) split at the slices' bounds: each rank's part
 * averaged into where it falls in that rank's slice (scatter, fp32: dst is
 * where this rank's starts), or gathered from there (collect, elements of
 * t->elem bytes: src) whole. */
static ferry_status slices_call(const struct ferry_task *t, bool scatter, void *stream)
{
	const size_t es = scatter ? sizeof(float) : t->elem, n = t->bytes / es;
	char *slice = scatter ? t->dst : (void *)t->src, *whole = scatter ? (void *)t->src : t->dst; /* src: read */
	size_t from = 0;
	bool mine = ferry_slice_part(t->offset, t->offset + n, t->slice, ferry_comm_rank(t->comm), &from) > 0;

	if (mine && !scatter && t->src_part) /* src is this rank's part itself */
		from = 0;
	return ferry_comm_slices(t->comm, scatter, t->offset, n, t->slice, es, whole, mine ? slice + from * es : NULL,
				 stream);
}

ferry_status ferry_comm_task_call(const struct ferry_task *t, void *stream)
{
	char *buf = t->dst;

	switch (t->comm_job) {
	case FERRY_COMM_JOB_GATHER:
		return ferry_comm_all_gather(t->comm, buf + (size_t)ferry_comm_rank(t->comm) * t->bytes, buf, t->bytes,
					     FERRY_COMM_BYTE, stream);
	case FERRY_COMM_JOB_SCATTER: return slices_call(t, true, stream);
	case FERRY_COMM_JOB_COLLECT: return slices_call(t, false, stream);
	case FERRY_COMM_JOB_SUM_F64:
		return ferry_comm_all_reduce(t->comm, buf, t->bytes / sizeof(double), FERRY_COMM_F64, FERRY_COMM_SUM,
					     stream);
	case FERRY_COMM_JOB_AVERAGE: break;
	}
	return ferry_comm_all_reduce(t->comm, buf, t->bytes / sizeof(float), FERRY_COMM_F32, FERRY_COMM_AVG, stream);
}

void ferry_comm_task_keep(const struct ferry_task *t, ferry_status st)
{
	if (st && t->comm_status && !*t->comm_status)
		*t->comm_status = st;
}

/* On the stream's host thread. */
static void run_comm(void *arg)
{
	const struct ferry_task *t = arg;

	ferry_comm_task_keep(t, ferry_comm_task_call(t, NULL));
}

/* A communicator on device buffers queues on the stream itself (NCCL on
 * a CUDA stream); one on host buffers runs on the stream's host thread,
 * through the staging buffer where the runtime has one and the buffer is
 * the arena's. */
static ferry_status submit_comm(const struct ferry_task *t, ferry_stream_t s, const struct ferry_sched_runtime *rt)
{
	if (ferry_comm_device_buffers(t->comm))
		return ferry_comm_task_call(t, ferry_stream_native(s));
	if (rt->stage && ferry_backend_in_arena(rt->be, t->dst))
		return ferry_comm_stage_run(rt->stage, t, s);
	return ferry_stream_host_fn(s, run_comm, (void *)t);
}

ferry_status ferry_program_submit(const struct ferry_program *p, const struct ferry_sched_runtime *rt,
				  const struct ferry_step_values *v)
{
	return ferry_program_submit_traced(p, rt, v, NULL);
}

ferry_status ferry_program_submit_traced(const struct ferry_program *p, const struct ferry_sched_runtime *rt,
					 const struct ferry_step_values *v, struct ferry_sched_trace *tr)
{
	ferry_status st = FERRY_OK;

	if (p->failed)
		return ferry_error(FERRY_ERR_NOMEM, "schedule %s: out of host memory while building", p->name);
	for (int i = 0; i < p->n && !st; i++) {
		const struct ferry_task *t = &p->t[i];
		ferry_stream_t s = rt->stream[t->stream];

		if ((st = ferry_trace_task(tr, p, t, s, false)))
			break;
		switch (t->kind) {
		case FERRY_TASK_OP: st = submit_op(t, rt, v); break;
		case FERRY_TASK_COPY: st = ferry_memcpy_async(s, t->dst, t->src, t->bytes, t->copy_kind); break;
		case FERRY_TASK_ZERO: st = ferry_memset_zero_async(s, t->dst, t->bytes); break;
		case FERRY_TASK_RECORD: st = ferry_event_record(rt->event[t->event], s); break;
		case FERRY_TASK_WAIT: st = ferry_stream_wait_event(s, rt->event[t->event]); break;
		case FERRY_TASK_GRADS_DONE: break; /* a marker for traces and the planner */
		case FERRY_TASK_HOST: st = submit_host(t, rt, v); break;
		case FERRY_TASK_FILE: st = ferry_stream_host_fn(s, run_file_io, (void *)t); break;
		case FERRY_TASK_COMM: st = submit_comm(t, s, rt); break;
		}
		if (!st)
			st = ferry_trace_task(tr, p, t, s, true);
	}
	return st;
}

const char *ferry_task_kind_name(enum ferry_task_kind k)
{
	switch (k) {
	case FERRY_TASK_OP: return "op";
	case FERRY_TASK_COPY: return "copy";
	case FERRY_TASK_ZERO: return "zero";
	case FERRY_TASK_RECORD: return "record";
	case FERRY_TASK_WAIT: return "wait";
	case FERRY_TASK_GRADS_DONE: return "grads done";
	case FERRY_TASK_HOST: return "host";
	case FERRY_TASK_FILE: return "file";
	case FERRY_TASK_COMM: return "collective";
	}
	return "?";
}

int ferry_program_count(const struct ferry_program *p, int stream)
{
	int n = 0;

	for (int i = 0; i < p->n; i++)
		n += p->t[i].stream == stream;
	return n;
}
