/*
 * The CPU backend: the reference implementation of the backend interface.
 *
 * Device memory is one anonymous mmap of the arena's capacity (reserved, not
 * committed: pages are touched only when used), carved by memory/arena.c.
 * Its default capacity is the machine's RAM, or 3/4 of a cgroup limit or of
 * the address space `ulimit -v` leaves beyond the libraries' headroom
 * (ferry_library_headroom) when that is less (the other quarter for host
 * buffers), so that a plan too big for the limit is refused up front
 * instead of being OOM-killed, or BLAS spinning on a refused buffer.
 * Each stream is a worker thread draining a bounded FIFO of tasks (ops,
 * copies, event records and waits), so a copy on one stream really runs
 * while an op runs on another.  Events carry two counters: how many times
 * they were recorded (host side, at submission) and which record has
 * completed (worker side); waiting means "until the record current at the
 * time of the wait has completed", which is CUDA's semantics.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/clock.h"
#include "core/error.h"

#include "ferry/platform.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#define QUEUE_CAPACITY 1024

enum task_type { TASK_OP, TASK_COPY, TASK_MEMSET, TASK_RECORD, TASK_WAIT, TASK_HOST, TASK_STOP };

struct cpu_event {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t recorded;  /* records submitted */
	uint64_t completed; /* highest record that has run */
	double t_done;      /* when it ran (CLOCK_MONOTONIC seconds), for traces */
};

struct task {
	enum task_type type;
	union {
		struct ferry_op_call op;
		struct { void *dst; const void *src; size_t size; } copy;
		struct { void (*fn)(void *); void *arg; } host;
		struct { struct cpu_event *ev; uint64_t ticket; } event;
	} u;
};

struct cpu_stream {
	struct ferry_backend *be;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t not_empty, not_full, idle;
	struct task *queue;
	unsigned head, count;   /* ring buffer */
	uint64_t submitted, finished;
	int threads;
};

struct cpu_backend {
	size_t map_size;
	int threads;
	pthread_mutex_t timing_lock; /* the op timing table is per backend */
};

static void event_wait_ticket(struct cpu_event *ev, uint64_t ticket)
{
	pthread_mutex_lock(&ev->lock);
	while (ev->completed < ticket)
		pthread_cond_wait(&ev->cond, &ev->lock);
	pthread_mutex_unlock(&ev->lock);
}

/* Runs an op, timing it when the backend profiles (the table is shared by
 * the backend's streams, hence the lock; only taken when profiling). */
static void run_op(struct cpu_stream *cs, const struct ferry_op_call *op)
{
	struct ferry_op_timing *tm;
	double t0;

	if (!cs->be->profile) {
		ferry_cpu_run_op(op);
		return;
	}
	t0 = ferry_now_s();
	ferry_cpu_run_op(op);
	t0 = ferry_now_s() - t0;
	pthread_mutex_lock(&((struct cpu_backend *)cs->be->ctx)->timing_lock);
	tm = &cs->be->timing[op->kind][op->backward];
	tm->seconds += t0;
	tm->flops += ferry_op_flops(op);
	tm->calls++;
	pthread_mutex_unlock(&((struct cpu_backend *)cs->be->ctx)->timing_lock);
}

static void run_task(struct cpu_stream *cs, struct task *t)
{
	switch (t->type) {
	case TASK_OP:
		run_op(cs, &t->u.op);
		break;
	case TASK_COPY:
		memcpy(t->u.copy.dst, t->u.copy.src, t->u.copy.size);
		break;
	case TASK_MEMSET:
		memset(t->u.copy.dst, 0, t->u.copy.size);
		break;
	case TASK_RECORD: {
		struct cpu_event *ev = t->u.event.ev;

		const double now = ferry_now_s();

		pthread_mutex_lock(&ev->lock);
		if (t->u.event.ticket > ev->completed) {
			ev->completed = t->u.event.ticket;
			ev->t_done = now;
		}
		pthread_cond_broadcast(&ev->cond);
		pthread_mutex_unlock(&ev->lock);
		break;
	}
	case TASK_WAIT:
		event_wait_ticket(t->u.event.ev, t->u.event.ticket);
		break;
	case TASK_HOST:
		t->u.host.fn(t->u.host.arg);
		break;
	case TASK_STOP:
		break;
	}
}

static void *stream_main(void *arg)
{
	struct cpu_stream *cs = arg;
	struct task t;

	/* OpenMP's thread count is per thread; set it for this worker's teams. */
	omp_set_num_threads(cs->threads);
	for (;;) {
		pthread_mutex_lock(&cs->lock);
		while (cs->count == 0)
			pthread_cond_wait(&cs->not_empty, &cs->lock);
		t = cs->queue[cs->head]; /* a copy: the slot is free from here on */
		cs->head = (cs->head + 1) % QUEUE_CAPACITY;
		cs->count--;
		pthread_cond_signal(&cs->not_full);
		pthread_mutex_unlock(&cs->lock);

		run_task(cs, &t);

		pthread_mutex_lock(&cs->lock);
		cs->finished++;
		if (cs->finished == cs->submitted)
			pthread_cond_broadcast(&cs->idle);
		pthread_mutex_unlock(&cs->lock);
		if (t.type == TASK_STOP)
			return NULL;
	}
}

static void submit(struct ferry_stream *s, const struct task *t)
{
	struct cpu_stream *cs = s->ctx;

	pthread_mutex_lock(&cs->lock);
	while (cs->count == QUEUE_CAPACITY)
		pthread_cond_wait(&cs->not_full, &cs->lock);
	cs->queue[(cs->head + cs->count) % QUEUE_CAPACITY] = *t;
	cs->count++;
	cs->submitted++;
	pthread_cond_signal(&cs->not_empty);
	pthread_mutex_unlock(&cs->lock);
}

/* The arena's capacity, and why into note: --device-mem, or without it
 * the machine's RAM, 3/4 of a cgroup limit, or 3/4 of what `ulimit -v`
 * leaves beyond the libraries' headroom.  Under `ulimit -v` a capacity that
 * leaves the libraries less than their headroom is refused: OpenBLAS would
 * spin forever on the allocation it is refused. */
static ferry_status arena_capacity(size_t device_mem, int threads, size_t *cap, char *note, size_t n)
{
	struct ferry_memory_limit lim;
	char a[FERRY_SIZE_CHARS], b[FERRY_SIZE_CHARS], c[FERRY_SIZE_CHARS], d[FERRY_SIZE_CHARS];
	uint64_t room = ferry_library_headroom(threads), v;
	bool ulimit;
	uint64_t beyond;

	ferry_memory_limit(&lim);
	ulimit = lim.address_space != FERRY_NO_LIMIT;
	beyond = ulimit && lim.address_space > room ? lim.address_space - room : 0;

	if (ulimit && beyond < ((uint64_t)16 << 20))
		return ferry_error(FERRY_ERR_NOMEM, "cpu backend: ulimit -v leaves %s, not enough for a device arena "
				   "beside the %s that BLAS and %d threads map; raise ulimit -v",
				   ferry_format_size(lim.address_space, a), ferry_format_size(room, b), threads);
	if (device_mem && ulimit && device_mem > beyond)
		return ferry_error(FERRY_ERR_NOMEM, "cpu backend: --device-mem %s and the %s that BLAS and %d threads "
				   "map do not fit the %s that ulimit -v leaves; give a --device-mem of at most %s",
				   ferry_format_size(device_mem, a), ferry_format_size(room, b), threads,
				   ferry_format_size(lim.address_space, c), ferry_format_size(beyond, d));
	v = device_mem ? device_mem : lim.bytes;
	if (!device_mem && ulimit && beyond < lim.bytes) {
		v = beyond / 4 * 3;
		snprintf(note, n, "3/4 of the %s that ulimit -v leaves beyond %s for BLAS and threads",
			 ferry_format_size(beyond, a), ferry_format_size(room, b));
	} else if (!device_mem && lim.bytes < lim.physical) {
		v = lim.bytes / 4 * 3;
		snprintf(note, n, "3/4 of the cgroup memory limit of %s", ferry_format_size(lim.bytes, a));
	}
	*cap = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
	return FERRY_OK;
}

static ferry_status cpu_probe(void)
{
	return FERRY_OK;
}

static ferry_status cpu_open(struct ferry_backend *be, const struct ferry_backend_opts *opts)
{
	struct cpu_backend *cb;
	int threads = opts->threads > 0 ? opts->threads : omp_get_max_threads();
	char size[32];
	ferry_status st;
	size_t cap = 0;
	void *base;

	st = arena_capacity(opts->device_mem, threads, &cap, be->mem_note, sizeof(be->mem_note));
	if (st)
		return st;
	cb = ferry_calloc(1, sizeof(*cb));
	if (!cb)
		return ferry_error(FERRY_ERR_NOMEM, "cpu backend: out of host memory");
	st = ferry_arena_init(&be->arena, cap, FERRY_BUFFER_ALIGN, 4096);
	if (st)
		goto out_free;
	cb->map_size = be->arena.capacity ? be->arena.capacity : FERRY_BUFFER_ALIGN;
	base = mmap(NULL, cb->map_size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		st = ferry_error(FERRY_ERR_NOMEM, "cpu backend: cannot reserve a %s device arena: %s; give a smaller "
				 "--device-mem", ferry_format_size(cb->map_size, size), strerror(errno));
		goto out_arena;
	}
	cb->threads = threads;
	pthread_mutex_init(&cb->timing_lock, NULL);
	be->ctx = cb;
	be->device_base = base;
	be->caps = (struct ferry_backend_caps){
		.async = true, .events = true, .host_pinned = false, .unified = true,
		.compute_units = threads, .act_dtype = FERRY_F32,
	};
	snprintf(be->description, sizeof(be->description), "CPU: %d threads, device arena %s%s%s%s", threads,
		 ferry_format_size(be->arena.capacity, size), be->mem_note[0] ? " (" : "", be->mem_note,
		 be->mem_note[0] ? ")" : "");
	return FERRY_OK;

out_arena:
	ferry_arena_release(&be->arena);
out_free:
	ferry_free(cb);
	return st;
}

static void cpu_close(struct ferry_backend *be)
{
	struct cpu_backend *cb = be->ctx;

	munmap(be->device_base, cb->map_size);
	pthread_mutex_destroy(&cb->timing_lock);
	ferry_arena_release(&be->arena);
	ferry_free(cb);
}

static ferry_status cpu_host_alloc(struct ferry_backend *be, size_t size, void **out)
{
	char sz[FERRY_SIZE_CHARS];

	(void)be;
	*out = ferry_aligned_alloc(FERRY_BUFFER_ALIGN, size);
	if (!*out)
		return ferry_error(FERRY_ERR_NOMEM, "cannot allocate %s of host memory (%zu bytes)",
				   ferry_format_size(size, sz), size);
	return FERRY_OK;
}

static void cpu_host_free(struct ferry_backend *be, void *p)
{
	(void)be;
	ferry_free(p);
}

/* Frees a stream whose thread is not running (any more). */
static void stream_release(struct cpu_stream *cs)
{
	pthread_mutex_destroy(&cs->lock);
	pthread_cond_destroy(&cs->not_empty);
	pthread_cond_destroy(&cs->not_full);
	pthread_cond_destroy(&cs->idle);
	ferry_free(cs->queue);
	ferry_free(cs);
}

static ferry_status cpu_stream_create(struct ferry_backend *be, struct ferry_stream *s)
{
	struct cpu_backend *cb = be->ctx;
	struct cpu_stream *cs;

	cs = ferry_calloc(1, sizeof(*cs));
	if (!cs)
		goto nomem;
	cs->queue = ferry_calloc(QUEUE_CAPACITY, sizeof(*cs->queue));
	if (!cs->queue)
		goto nomem_free;
	cs->threads = cb->threads;
	cs->be = be;
	pthread_mutex_init(&cs->lock, NULL);
	pthread_cond_init(&cs->not_empty, NULL);
	pthread_cond_init(&cs->not_full, NULL);
	pthread_cond_init(&cs->idle, NULL);
	if (pthread_create(&cs->thread, NULL, stream_main, cs) != 0) {
		stream_release(cs);
		return ferry_error(FERRY_ERR_BACKEND, "stream %s: cannot start its thread", s->name);
	}
	s->ctx = cs;
	return FERRY_OK;

nomem_free:
	ferry_free(cs);
nomem:
	return ferry_error(FERRY_ERR_NOMEM, "stream %s: out of host memory", s->name);
}

static ferry_status cpu_stream_synchronize(struct ferry_stream *s)
{
	struct cpu_stream *cs = s->ctx;

	pthread_mutex_lock(&cs->lock);
	while (cs->finished != cs->submitted)
		pthread_cond_wait(&cs->idle, &cs->lock);
	pthread_mutex_unlock(&cs->lock);
	return FERRY_OK;
}

static void cpu_stream_destroy(struct ferry_stream *s)
{
	struct cpu_stream *cs = s->ctx;
	struct task stop = { .type = TASK_STOP };

	submit(s, &stop);
	pthread_join(cs->thread, NULL);
	stream_release(cs);
}

static ferry_status cpu_event_create(struct ferry_backend *be, struct ferry_event *ev)
{
	struct cpu_event *ce = ferry_calloc(1, sizeof(*ce));

	(void)be;
	if (!ce)
		return ferry_error(FERRY_ERR_NOMEM, "event: out of host memory");
	pthread_mutex_init(&ce->lock, NULL);
	pthread_cond_init(&ce->cond, NULL);
	ev->ctx = ce;
	return FERRY_OK;
}

static void cpu_event_destroy(struct ferry_event *ev)
{
	struct cpu_event *ce = ev->ctx;

	pthread_mutex_destroy(&ce->lock);
	pthread_cond_destroy(&ce->cond);
	ferry_free(ce);
}

static ferry_status cpu_event_record(struct ferry_event *ev, struct ferry_stream *s)
{
	struct cpu_event *ce = ev->ctx;
	struct task t = { .type = TASK_RECORD };

	pthread_mutex_lock(&ce->lock);
	t.u.event.ticket = ++ce->recorded;
	pthread_mutex_unlock(&ce->lock);
	t.u.event.ev = ce;
	submit(s, &t);
	return FERRY_OK;
}

static uint64_t current_ticket(struct cpu_event *ce)
{
	uint64_t ticket;

	pthread_mutex_lock(&ce->lock);
	ticket = ce->recorded;
	pthread_mutex_unlock(&ce->lock);
	return ticket;
}

static ferry_status cpu_stream_wait_event(struct ferry_stream *s, struct ferry_event *ev)
{
	struct cpu_event *ce = ev->ctx;
	struct task t = { .type = TASK_WAIT };

	t.u.event.ticket = current_ticket(ce);
	if (t.u.event.ticket == 0)
		return FERRY_OK; /* never recorded: nothing to wait for (as CUDA) */
	t.u.event.ev = ce;
	submit(s, &t);
	return FERRY_OK;
}

static ferry_status cpu_event_elapsed(struct ferry_event *from, struct ferry_event *to, double *seconds)
{
	struct cpu_event *a = from->ctx, *b = to->ctx;
	bool done;

	pthread_mutex_lock(&a->lock);
	pthread_mutex_lock(&b->lock);
	done = a->recorded && b->recorded && a->completed == a->recorded && b->completed == b->recorded;
	*seconds = b->t_done - a->t_done;
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&a->lock);
	return done ? FERRY_OK : ferry_error(FERRY_ERR_INVALID, "event_elapsed: an event not recorded or not complete");
}

static ferry_status cpu_event_synchronize(struct ferry_event *ev)
{
	struct cpu_event *ce = ev->ctx;

	event_wait_ticket(ce, current_ticket(ce));
	return FERRY_OK;
}

static bool cpu_event_done(struct ferry_event *ev)
{
	struct cpu_event *ce = ev->ctx;
	bool done;

	pthread_mutex_lock(&ce->lock);
	done = ce->recorded > 0 && ce->completed >= ce->recorded;
	pthread_mutex_unlock(&ce->lock);
	return done;
}

static ferry_status cpu_memcpy_async(struct ferry_stream *s, void *dst, const void *src,
				     size_t size, enum ferry_copy_kind kind)
{
	struct task t = { .type = TASK_COPY };

	(void)kind; /* one address space on the CPU */
	t.u.copy.dst = dst;
	t.u.copy.src = src;
	t.u.copy.size = size;
	submit(s, &t);
	return FERRY_OK;
}

static ferry_status cpu_memset_zero_async(struct ferry_stream *s, void *dst, size_t size)
{
	struct task t = { .type = TASK_MEMSET };

	t.u.copy.dst = dst;
	t.u.copy.size = size;
	submit(s, &t);
	return FERRY_OK;
}

static ferry_status cpu_host_fn(struct ferry_stream *s, void (*fn)(void *), void *arg)
{
	struct task t = { .type = TASK_HOST };

	t.u.host.fn = fn;
	t.u.host.arg = arg;
	submit(s, &t);
	return FERRY_OK;
}

static ferry_status cpu_run_op(struct ferry_stream *s, const struct ferry_op_call *call)
{
	struct task t = { .type = TASK_OP };

	t.u.op = *call;
	submit(s, &t);
	return FERRY_OK;
}

const struct ferry_backend_iface ferry_cpu_backend_iface = {
	.version = FERRY_BACKEND_IFACE_VERSION,
	.name = "cpu",
	.probe = cpu_probe,
	.open = cpu_open,
	.close = cpu_close,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.stream_create = cpu_stream_create,
	.stream_destroy = cpu_stream_destroy,
	.stream_synchronize = cpu_stream_synchronize,
	.stream_wait_event = cpu_stream_wait_event,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.event_synchronize = cpu_event_synchronize,
	.event_done = cpu_event_done,
	.event_elapsed = cpu_event_elapsed, /* every event is timed */
	.memcpy_async = cpu_memcpy_async,
	.memset_zero_async = cpu_memset_zero_async,
	.host_fn = cpu_host_fn,
	.run_op = cpu_run_op,
};
