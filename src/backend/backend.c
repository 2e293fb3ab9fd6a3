/* Backend registry and argument checking; the work is in the implementations. */
#include "backend/backend_impl.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static const struct ferry_backend_iface *const backends[] = {
#ifdef FERRY_HAVE_CUDA
	&ferry_cuda_backend_iface,
#endif
	&ferry_cpu_backend_iface,
};
#define N_BACKENDS ((int)(sizeof(backends) / sizeof(backends[0])))

size_t ferry_dtype_size(enum ferry_dtype t)
{
	return t == FERRY_BF16 ? 2 : 4;
}

const char *ferry_dtype_name(enum ferry_dtype t)
{
	return t == FERRY_BF16 ? "bf16" : "fp32";
}

enum ferry_dtype ferry_backend_act_dtype(const char *name)
{
	return name && strcmp(name, "cuda") == 0 ? FERRY_BF16 : FERRY_F32;
}

static const struct ferry_backend_iface *iface_named(const char *name)
{
	for (int i = 0; name && i < N_BACKENDS; i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

size_t ferry_backend_op_scratch(const char *name, const struct ferry_op_call *call)
{
	const struct ferry_backend_iface *iface = iface_named(name);

	return iface && iface->op_scratch ? iface->op_scratch(call) : 0;
}

const char *ferry_backend_op_unsupported(const char *name, const struct ferry_op_call *call)
{
	const struct ferry_backend_iface *iface = iface_named(name);

	return iface && iface->op_unsupported ? iface->op_unsupported(call) : NULL;
}

int ferry_backend_count(void)
{
	return N_BACKENDS;
}

const char *ferry_backend_name_at(int i)
{
	return i >= 0 && i < N_BACKENDS ? backends[i]->name : NULL;
}

static const struct ferry_backend_iface *find_backend(const char *name)
{
	for (int i = 0; i < N_BACKENDS; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

static ferry_status unknown_backend(const char *name)
{
	char list[128] = "";

	for (int i = 0; i < N_BACKENDS; i++) {
		if (i)
			strncat(list, ", ", sizeof(list) - strlen(list) - 1);
		strncat(list, backends[i]->name, sizeof(list) - strlen(list) - 1);
	}
	if (strcmp(name, "cuda") == 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "backend 'cuda' is not compiled into this build (have: %s)", list);
	return ferry_error(FERRY_ERR_INVALID, "unknown backend '%s' (have: %s)", name, list);
}

ferry_status ferry_backend_compiled_in(const char *name)
{
	return find_backend(name) ? FERRY_OK : unknown_backend(name);
}

ferry_status ferry_backend_probe(const char *name)
{
	const struct ferry_backend_iface *iface = name ? find_backend(name) : NULL;

	if (!iface)
		return unknown_backend(name ? name : "(null)");
	return iface->probe();
}

ferry_status ferry_backend_open(const char *name, const struct ferry_backend_opts *opts,
				ferry_backend_t *out)
{
	static const struct ferry_backend_opts defaults;
	const struct ferry_backend_iface *iface;
	struct ferry_backend *be;
	ferry_status st;

	*out = NULL;
	iface = name ? find_backend(name) : NULL;
	if (!iface)
		return unknown_backend(name ? name : "(null)");
	be = ferry_calloc(1, sizeof(*be));
	if (!be)
		return ferry_error(FERRY_ERR_NOMEM, "backend %s: out of host memory", name);
	be->iface = iface;
	be->profile = opts && opts->profile;
	st = iface->open(be, opts ? opts : &defaults);
	if (st) {
		ferry_free(be);
		return st;
	}
	*out = be;
	return FERRY_OK;
}

void ferry_backend_close(ferry_backend_t be)
{
	if (!be)
		return;
	be->iface->close(be);
	ferry_free(be);
}

const char *ferry_backend_name(ferry_backend_t be) { return be->iface->name; }
const char *ferry_backend_description(ferry_backend_t be) { return be->description; }
const char *ferry_backend_mem_note(ferry_backend_t be) { return be->mem_note; }
struct ferry_backend_caps ferry_backend_caps(ferry_backend_t be) { return be->caps; }
size_t ferry_backend_mem_capacity(ferry_backend_t be) { return be->arena.capacity; }
size_t ferry_backend_mem_live(ferry_backend_t be) { return be->arena.live; }
size_t ferry_backend_mem_peak(ferry_backend_t be) { return be->arena.peak; }
void ferry_backend_mem_reset_peak(ferry_backend_t be) { be->arena.peak = be->arena.live; }

bool ferry_backend_in_arena(ferry_backend_t be, const void *p)
{
	const char *c = p;

	return c >= be->device_base && c < be->device_base + be->arena.capacity;
}

int ferry_backend_op_stats(ferry_backend_t be, struct ferry_op_stats *out, int max)
{
	int n = 0;

	for (int k = 0; k < FERRY_OP_COUNT; k++)
		for (int b = 0; b < 2; b++) {
			const struct ferry_op_timing *t = &be->timing[k][b];

			if (!t->calls || n >= max)
				continue;
			out[n++] = (struct ferry_op_stats){ ferry_op_info(k)->name, b, t->calls, t->seconds,
							    t->flops };
		}
	return n;
}

void ferry_backend_op_stats_reset(ferry_backend_t be)
{
	memset(be->timing, 0, sizeof(be->timing));
}

ferry_status ferry_buffer_alloc(ferry_backend_t be, size_t size, ferry_buffer_t *out)
{
	struct ferry_buffer *b;
	ferry_status st;

	*out = NULL;
	b = ferry_calloc(1, sizeof(*b));
	if (!b)
		return ferry_error(FERRY_ERR_NOMEM, "device buffer: out of host memory");
	st = ferry_arena_alloc(&be->arena, size, &b->offset);
	if (st) {
		ferry_free(b);
		return st;
	}
	b->be = be;
	b->size = size;
	*out = b;
	return FERRY_OK;
}

void ferry_buffer_free(ferry_buffer_t b)
{
	if (!b)
		return;
	ferry_arena_free(&b->be->arena, b->offset, b->size);
	ferry_free(b);
}

void *ferry_buffer_ptr(ferry_buffer_t b) { return b->be->device_base + b->offset; }
size_t ferry_buffer_size(ferry_buffer_t b) { return b->size; }

ferry_status ferry_host_alloc(ferry_backend_t be, size_t size, void **out)
{
	*out = NULL;
	return be->iface->host_alloc(be, size, out);
}

void ferry_host_free(ferry_backend_t be, void *p)
{
	if (p)
		be->iface->host_free(be, p);
}

ferry_status ferry_stream_create(ferry_backend_t be, const char *name, ferry_stream_t *out)
{
	struct ferry_stream *s;
	ferry_status st;

	*out = NULL;
	s = ferry_calloc(1, sizeof(*s));
	if (!s)
		return ferry_error(FERRY_ERR_NOMEM, "stream: out of host memory");
	s->be = be;
	snprintf(s->name, sizeof(s->name), "%s", name ? name : "stream");
	st = be->iface->stream_create(be, s);
	if (st) {
		ferry_free(s);
		return st;
	}
	*out = s;
	return FERRY_OK;
}

void ferry_stream_free(ferry_stream_t s)
{
	if (!s)
		return;
	s->be->iface->stream_destroy(s);
	ferry_free(s);
}

long ferry_backend_host_syncs(ferry_backend_t be)
{
	return __atomic_load_n(&be->host_syncs, __ATOMIC_RELAXED);
}

ferry_status ferry_stream_synchronize(ferry_stream_t s)
{
	__atomic_add_fetch(&s->be->host_syncs, 1, __ATOMIC_RELAXED);
	return s->be->iface->stream_synchronize(s);
}

ferry_status ferry_stream_wait_event(ferry_stream_t s, ferry_event_t ev)
{
	return s->be->iface->stream_wait_event(s, ev);
}

static ferry_status event_create(ferry_backend_t be, bool timed, ferry_event_t *out)
{
	struct ferry_event *ev;
	ferry_status st;

	*out = NULL;
	if (timed && !be->iface->event_elapsed)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s backend: events cannot be timed", be->iface->name);
	ev = ferry_calloc(1, sizeof(*ev));
	if (!ev)
		return ferry_error(FERRY_ERR_NOMEM, "event: out of host memory");
	ev->be = be;
	st = timed && be->iface->event_create_timed ? be->iface->event_create_timed(be, ev)
						    : be->iface->event_create(be, ev);
	if (st) {
		ferry_free(ev);
		return st;
	}
	*out = ev;
	return FERRY_OK;
}

ferry_status ferry_event_create(ferry_backend_t be, ferry_event_t *out)
{
	return event_create(be, false, out);
}

ferry_status ferry_event_create_timed(ferry_backend_t be, ferry_event_t *out)
{
	return event_create(be, true, out);
}

ferry_status ferry_event_elapsed(ferry_event_t from, ferry_event_t to, double *seconds)
{
	*seconds = 0;
	if (from->be != to->be)
		return ferry_error(FERRY_ERR_INVALID, "event_elapsed: events of two backends");
	if (!from->be->iface->event_elapsed)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s backend: events cannot be timed", from->be->iface->name);
	return from->be->iface->event_elapsed(from, to, seconds);
}

void ferry_event_free(ferry_event_t ev)
{
	if (!ev)
		return;
	ev->be->iface->event_destroy(ev);
	ferry_free(ev);
}

ferry_status ferry_event_record(ferry_event_t ev, ferry_stream_t s)
{
	return ev->be->iface->event_record(ev, s);
}

ferry_status ferry_event_synchronize(ferry_event_t ev)
{
	__atomic_add_fetch(&ev->be->host_syncs, 1, __ATOMIC_RELAXED);
	return ev->be->iface->event_synchronize(ev);
}

bool ferry_event_done(ferry_event_t ev)
{
	return ev->be->iface->event_done(ev);
}

void *ferry_stream_native(ferry_stream_t s)
{
	return s && s->be->iface->stream_native ? s->be->iface->stream_native(s) : NULL;
}

ferry_status ferry_stream_host_fn(ferry_stream_t s, void (*fn)(void *), void *arg)
{
	if (!fn)
		return ferry_error(FERRY_ERR_INVALID, "host_fn: no function");
	if (!s->be->iface->host_fn)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s backend: no host functions on streams",
				   s->be->iface->name);
	return s->be->iface->host_fn(s, fn, arg);
}

ferry_status ferry_memcpy_async(ferry_stream_t s, void *dst, const void *src, size_t size,
				enum ferry_copy_kind kind)
{
	if (size == 0)
		return FERRY_OK;
	if (!dst || !src)
		return ferry_error(FERRY_ERR_INVALID, "memcpy_async: NULL address");
	return s->be->iface->memcpy_async(s, dst, src, size, kind);
}

ferry_status ferry_memset_zero_async(ferry_stream_t s, void *dst, size_t size)
{
	if (size == 0)
		return FERRY_OK;
	return s->be->iface->memset_zero_async(s, dst, size);
}

ferry_status ferry_stream_run_op(ferry_stream_t s, const struct ferry_op_call *call)
{
	return s->be->iface->run_op(s, call);
}
