/*
 * Traces of a training step (ferry_model_trace_begin/_end), read back as
 * the JSON Perfetto reads:
 *  - one named track per stream, and on each exactly the ops, copies and
 *    zeroings the prepared schedule puts there (ferry_model_schedule), by
 *    tensor name and layer;
 *  - the order the schedule's events impose: each host-to-device copy of an
 *    offloaded tensor starts after its device-to-host copy ended;
 *  - copies run beside the step, not after it: a first-layer device-to-host
 *    copy ends before compute's last slice starts;
 *  - compute overlaps copies wherever the schedule lets it, shown without
 *    relying on the machine's timing: with the device-to-host stream held
 *    back (a 1 s host task queued on it first), compute runs the forward
 *    of every layer whose offload slot is fresh before any copy starts,
 *    and the first layer that reuses a slot waits for that slot's copy;
 *  - counters: the device arena's live bytes and the host bytes are the
 *    memory plan's; the offloaded activations held on the host never go
 *    below zero, peak at the bytes the schedule's forward copies out, and
 *    end at what its backward does not bring back;
 *  - the training itself is unchanged by tracing (same loss bits), and a
 *    trace to a path that cannot be written is refused, leaving nothing.
 */
#include "ferry/model.h"
#include "exec/model_internal.h" /* the model's streams, to hold one back */
#include "test_util.h"

#include <jansson.h>
#include <string.h>
#include <unistd.h>

static const struct ferry_model_config cfg = { .max_seq = 32, .vocab = 97, .layers = 4, .heads = 2,
					      .channels = 64 };
enum { B = 2, T = 32 };
static const char *const policy = "qkv_proj_offloaded";

static void batch(int32_t *in, int32_t *tg)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 13 + i / 7) % cfg.vocab;
		tg[i] = (in[i] * 5 + 3) % cfg.vocab;
	}
}

static void hold_back(void *arg)
{
	(void)arg;
	usleep(1000 * 1000);
}

/* Queues hold_back on the model's device-to-host stream. */
static void hold_back_copies(ferry_model_t m)
{
	int d2h = -1;

	for (int i = 0; i < m->res.n_streams; i++)
		d2h = strcmp(m->res.stream_name[i], "d2h") ? d2h : i;
	CHECK(d2h >= 0 && ferry_stream_host_fn(m->rt.stream[d2h], hold_back, NULL) == FERRY_OK,
	      "the device-to-host stream held back: %s", ferry_last_error());
}

/* Two steps (the second traced to path when given, its copies out held
 * back 1 s when held); the last loss. */
static float train(const char *path, bool held)
{
	struct ferry_adamw opt = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f };
	struct ferry_exec_opts o = { .policy = policy };
	ferry_backend_t be;
	ferry_model_t m;
	int32_t in[B * T], tg[B * T];
	float loss = 0, norm;

	batch(in, tg);
	/* held: compute on one thread, so that no OpenMP barrier waits a time
	 * slice for a descheduled team mate on a busy machine (8 ms an op,
	 * measured, while two compilers ran) */
	CHECK(ferry_backend_open("cpu", &(struct ferry_backend_opts){ .threads = held ? 1 : 0 }, &be) == FERRY_OK,
	      "open");
	CHECK(ferry_model_create(be, &cfg, B, T, &o, &m) == FERRY_OK, "create: %s", ferry_last_error());
	CHECK(ferry_model_init_random(m, 3) == FERRY_OK, "init");
	for (int s = 1; s <= 2; s++) {
		if (s == 2 && path)
			CHECK(ferry_model_trace_begin(m) == FERRY_OK, "trace begin: %s", ferry_last_error());
		if (s == 2 && held)
			hold_back_copies(m);
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &loss, &norm) == FERRY_OK,
		      "step: %s", ferry_last_error());
		if (s == 2 && path)
			CHECK(ferry_model_trace_end(m, path) == FERRY_OK, "trace end: %s", ferry_last_error());
	}
	CHECK(ferry_model_sync(m) == FERRY_OK, "sync");
	ferry_model_free(m);
	ferry_backend_close(be);
	return loss;
}

struct slice {
	char stream[16], name[56];
	int layer;
	double ts, end;
};

/* The trace's slices, their streams named from the thread_name records. */
static int read_trace(const char *path, struct slice *out, int max)
{
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err), *ev, *e;
	char names[8][16] = { { 0 } };
	size_t i;
	int n = 0;

	CHECK(root != NULL, "trace %s parses: %s (line %d)", path, err.text, err.line);
	if (!root)
		return 0;
	ev = json_object_get(root, "traceEvents");
	CHECK(json_is_array(ev), "traceEvents is an array");
	json_array_foreach(ev, i, e) {
		const char *ph = json_string_value(json_object_get(e, "ph"));
		int tid = (int)json_integer_value(json_object_get(e, "tid"));

		if (ph && !strcmp(ph, "M") && !strcmp(json_string_value(json_object_get(e, "name")), "thread_name") &&
		    tid >= 0 && tid < 8)
			snprintf(names[tid], sizeof(names[tid]), "%s",
				 json_string_value(json_object_get(json_object_get(e, "args"), "name")));
	}
	json_array_foreach(ev, i, e) {
		const char *ph = json_string_value(json_object_get(e, "ph"));
		int tid = (int)json_integer_value(json_object_get(e, "tid"));

		if (!ph || strcmp(ph, "X") || n >= max)
			continue;
		CHECK(tid >= 0 && tid < 8 && names[tid][0], "slice on a named track (tid %d)", tid);
		snprintf(out[n].stream, sizeof(out[n].stream), "%s", tid >= 0 && tid < 8 ? names[tid] : "?");
		snprintf(out[n].name, sizeof(out[n].name), "%s", json_string_value(json_object_get(e, "name")));
		out[n].layer = (int)json_integer_value(json_object_get(json_object_get(e, "args"), "layer"));
		out[n].ts = json_number_value(json_object_get(e, "ts"));
		out[n].end = out[n].ts + json_number_value(json_object_get(e, "dur"));
		CHECK(json_number_value(json_object_get(e, "dur")) >= 0 && out[n].ts >= 0, "%s: times >= 0",
		      out[n].name);
		n++;
	}
	json_decref(root);
	return n;
}

struct counters {
	double device, host, held_max, held_last, held_min;
	int n_held;
};

/* The counter tracks ("C" events) of the trace. */
static void read_counters(const char *path, struct counters *c)
{
	json_t *root = json_load_file(path, 0, NULL), *ev, *e;
	size_t i;

	memset(c, 0, sizeof(*c));
	c->device = c->host = -1;
	if (!root)
		return;
	ev = json_object_get(root, "traceEvents");
	json_array_foreach(ev, i, e) {
		const char *ph = json_string_value(json_object_get(e, "ph")), *name;
		json_t *args = json_object_get(e, "args");

		if (!ph || strcmp(ph, "C"))
			continue;
		name = json_string_value(json_object_get(e, "name"));
		if (!strcmp(name, "device memory"))
			c->device = json_number_value(json_object_get(args, "live bytes"));
		else if (!strcmp(name, "host memory (tier 0: DRAM)"))
			c->host = json_number_value(json_object_get(args, "bytes"));
		else if (!strcmp(name, "offloaded activations on the host")) {
			double v = json_number_value(json_object_get(args, "bytes"));

			c->held_last = v;
			c->held_max = v > c->held_max ? v : c->held_max;
			c->held_min = v < c->held_min ? v : c->held_min;
			c->n_held++;
		}
	}
	json_decref(root);
}

static void check_counters(const char *path)
{
	struct ferry_exec_opts o = { .policy = policy };
	struct ferry_schedule_info info;
	struct ferry_plan plan;
	struct counters c;
	double out = 0, back = 0, host = 0;

	read_counters(path, &c);
	CHECK(ferry_model_plan(&cfg, B, T, &o, &plan) == FERRY_OK && ferry_model_schedule(&cfg, B, T, &o, &info) == FERRY_OK,
	      "plan and schedule");
	for (int k = 0; k < FERRY_TK_COUNT; k++)
		host += (double)plan.mem.host_kind_bytes[k];
	for (int i = 0; i < info.n_tasks; i++) {
		const struct ferry_sched_task_info *t = &info.tasks[i];

		if (!strcmp(t->kind, "copy") && !strcmp(t->program, "forward") && !strcmp(t->stream, "d2h"))
			out += (double)t->bytes;
		if (!strcmp(t->kind, "copy") && !strcmp(t->program, "backward") && !strcmp(t->stream, "h2d"))
			back += (double)t->bytes;
	}
	CHECK(c.device == (double)plan.mem.peak_bytes, "device counter %.0f, the plan's peak %zu", c.device,
	      plan.mem.peak_bytes);
	CHECK(c.host == host && host > 0, "host counter %.0f, the plan's host bytes %.0f", c.host, host);
	CHECK(c.n_held > 2 && c.held_min == 0 && c.held_max == out && out > 0,
	      "held on the host: %d values, least %.0f, most %.0f; the forward copies out %.0f", c.n_held, c.held_min,
	      c.held_max, out);
	CHECK(c.held_last == out - back, "held at the end %.0f, out %.0f less back %.0f", c.held_last, out, back);
	printf("  counters: device %.0f bytes, host %.0f bytes, offloaded activations up to %.0f bytes\n", c.device,
	       c.host, c.held_max);
	ferry_schedule_info_free(&info);
}

static bool traced_kind(const char *kind)
{
	return !strncmp(kind, "op", 2) || !strcmp(kind, "copy") || !strcmp(kind, "zero");
}

/* Every op, copy and zero of the schedule is a slice on its stream, once. */
static void check_tasks(struct slice *sl, int n)
{
	struct ferry_exec_opts o = { .policy = policy };
	struct ferry_schedule_info info;
	int expected = 0;
	bool *used = calloc((size_t)n, sizeof(bool));

	CHECK(ferry_model_schedule(&cfg, B, T, &o, &info) == FERRY_OK, "schedule");
	for (int i = 0; i < info.n_tasks; i++) {
		const struct ferry_sched_task_info *t = &info.tasks[i];
		int found = -1;

		if (!traced_kind(t->kind))
			continue;
		expected++;
		for (int j = 0; j < n && found < 0; j++)
			if (!used[j] && !strcmp(sl[j].stream, t->stream) && !strcmp(sl[j].name, t->what) &&
			    sl[j].layer == t->layer)
				found = j;
		CHECK(found >= 0, "task %d (%s %s '%s' layer %d) is in the trace", i, t->stream, t->kind, t->what,
		      t->layer);
		if (found >= 0)
			used[found] = true;
	}
	CHECK(n == expected, "the trace has %d slices, the schedule %d tasks to time", n, expected);
	printf("  %d slices, one for each of the schedule's %d ops, copies and zeroings\n", n, expected);
	ferry_schedule_info_free(&info);
	free(used);
}

/* Host-to-device copies after their device-to-host copies; a first-layer
 * offload done before compute's last slice. */
static void check_order(const struct slice *sl, int n)
{
	double compute_last = 0, first_offload_end = -1;
	int h2d = 0;

	for (int i = 0; i < n; i++) {
		if (!strcmp(sl[i].stream, "compute") && sl[i].ts > compute_last)
			compute_last = sl[i].ts;
		if (!strcmp(sl[i].stream, "d2h") && sl[i].layer == 0 && first_offload_end < 0)
			first_offload_end = sl[i].end;
	}
	for (int i = 0; i < n; i++) {
		if (strcmp(sl[i].stream, "h2d"))
			continue;
		h2d++;
		for (int j = 0; j < n; j++)
			if (!strcmp(sl[j].stream, "d2h") && !strcmp(sl[j].name, sl[i].name) && sl[j].layer == sl[i].layer)
				CHECK(sl[j].end <= sl[i].ts, "%s layer %d: back to the device (%.1f us) after out (%.1f us)",
				      sl[i].name, sl[i].layer, sl[i].ts, sl[j].end);
	}
	CHECK(h2d > 0, "the trace has host-to-device copies");
	CHECK(first_offload_end >= 0 && first_offload_end < compute_last,
	      "a first-layer offload (ended %.1f us) is done before compute's last slice (at %.1f us)", first_offload_end,
	      compute_last);
}

/* With copies held back: the forward of layers 0 .. ring-1 (fresh slots)
 * is done before the first copy starts; layer `ring`'s first slice waits
 * for the copy out of the slot it reuses (layer 0's). */
static void check_overlap(const struct slice *sl, int n)
{
	struct ferry_exec_opts o = { .policy = policy };
	struct ferry_plan plan;
	double first_copy = -1, slot_free = -1, reuse_start = -1;
	int ahead = 0, per_layer = 0;

	CHECK(ferry_model_plan(&cfg, B, T, &o, &plan) == FERRY_OK && plan.ring_slots < cfg.layers, "a ring to reuse");
	for (int i = 0; i < n; i++)
		if (!strcmp(sl[i].stream, "d2h")) {
			first_copy = first_copy < 0 || sl[i].ts < first_copy ? sl[i].ts : first_copy;
			if (sl[i].layer == 0 && !strcmp(sl[i].name, "query_proj"))
				slot_free = sl[i].end;
		}
	for (int i = 0; i < n; i++) {
		if (strcmp(sl[i].stream, "compute"))
			continue;
		per_layer += sl[i].layer == 0;
		ahead += sl[i].layer == plan.ring_slots - 1 && sl[i].end <= first_copy;
		if (sl[i].layer == plan.ring_slots && !strcmp(sl[i].name, "query_proj") && reuse_start < 0)
			reuse_start = sl[i].ts;
	}
	CHECK(first_copy > 0 && ahead >= plan.n_ops && per_layer > plan.n_ops,
	      "compute ran layer %d's forward (%d slices of %d ops) before the held-back copies started",
	      plan.ring_slots - 1, ahead, plan.n_ops);
	CHECK(slot_free > 0 && reuse_start >= slot_free,
	      "layer %d's query_proj (%.1f us) waits for layer 0's to be copied out of its slot (%.1f us)",
	      plan.ring_slots, reuse_start, slot_free);
}

int main(void)
{
	const char *base = getenv("FERRY_TEST_TMP");
	char dir[512], path[600], bad[600];
	struct slice *sl = calloc(4096, sizeof(*sl));
	int n;

	snprintf(dir, sizeof(dir), "%s/ferry_trace.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir) || !sl) {
		perror("scratch directory");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/step.json", dir);
	CHECK(train(path, false) == train(NULL, false), "tracing leaves the training's bits alone");
	n = read_trace(path, sl, 4096);
	check_tasks(sl, n);
	check_order(sl, n);
	check_counters(path);
	train(path, true);
	n = read_trace(path, sl, 4096);
	check_overlap(sl, n);

	/* a trace that cannot be written: an error, and no file left */
	snprintf(bad, sizeof(bad), "%s/no such dir/step.json", dir);
	{
		ferry_backend_t be;
		ferry_model_t m;
		struct ferry_exec_opts o = { .policy = policy };

		CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK &&
			      ferry_model_create(be, &cfg, B, T, &o, &m) == FERRY_OK, "create");
		CHECK(ferry_model_trace_end(m, path) == FERRY_ERR_INVALID, "trace_end without trace_begin is refused");
		CHECK(ferry_model_trace_begin(m) == FERRY_OK && ferry_model_trace_end(m, bad) == FERRY_ERR_IO,
		      "an unwritable trace path is an I/O error: %s", ferry_last_error());
		ferry_model_free(m);
		ferry_backend_close(be);
	}
	free(sl);
	if (!getenv("FERRY_KEEP_TRACE"))
		unlink(path);
	if (!getenv("FERRY_KEEP_TRACE"))
		CHECK(rmdir(dir) == 0, "nothing else was left in %s", dir);
	return test_exit_code();
}
