/* The prepared schedule of a training step, described for people and
 * tools (ferry plan --schedule), from a dry build: no device needed. */
#include "exec/model_internal.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static void describe(const struct ferry_model *m, const struct ferry_program *p, const struct ferry_task *t,
		     struct ferry_sched_task_info *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->program, sizeof(out->program), "%.*s", FERRY_SCHED_NAME_CHARS - 1, p->name);
	snprintf(out->stream, sizeof(out->stream), "%s", m->res.stream_name[t->stream]);
	out->layer = t->layer;
	if (t->kind == FERRY_TASK_OP) {
		snprintf(out->kind, sizeof(out->kind), "op %s%s", ferry_op_info(t->call.kind)->name,
			 t->call.backward ? " bwd" : "");
		out->flops = ferry_op_flops(&t->call);
	} else {
		snprintf(out->kind, sizeof(out->kind), "%s", ferry_task_kind_name(t->kind));
	}
	if (t->kind == FERRY_TASK_RECORD || t->kind == FERRY_TASK_WAIT)
		snprintf(out->what, sizeof(out->what), "%s", m->res.event_name[t->event]);
	else
		snprintf(out->what, sizeof(out->what), "%s", t->label);
	if (t->kind == FERRY_TASK_COPY || t->kind == FERRY_TASK_ZERO || t->kind == FERRY_TASK_COMM)
		out->bytes = t->bytes;
}

ferry_status ferry_model_schedule(const struct ferry_model_config *cfg, int B, int T,
				  const struct ferry_exec_opts *opts, struct ferry_schedule_info *out)
{
	/* the step as ferry_model_step_submit and _finish run it */
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	const struct ferry_program *p[FERRY_STEP_PROGRAMS];
	ferry_model_t m;
	ferry_status st;
	int n = 0;

	memset(out, 0, sizeof(*out));
	ferry_model_step_keys(B, T, keys);
	if ((st = ferry_model_build(NULL, cfg, B, T, opts, &m)))
		return st;
	for (int i = 0; i < FERRY_STEP_PROGRAMS && !st; i++)
		if (!(st = ferry_model_program(m, &keys[i], &p[i])))
			n += p[i]->n;
	if (!st && !(out->tasks = ferry_calloc((size_t)n, sizeof(*out->tasks))))
		st = ferry_error(FERRY_ERR_NOMEM, "schedule: out of host memory");
	for (int i = 0; i < FERRY_STEP_PROGRAMS && !st; i++) {
		for (int k = 0; k < p[i]->n; k++)
			describe(m, p[i], &p[i]->t[k], &out->tasks[out->n_tasks++]);
		if (keys[i].kind == FERRY_PROG_NORM)
			out->sync_after = out->n_tasks; /* the loss and the norm reach the host */
	}
	out->host_syncs = 1;
	out->n_streams = m->res.n_streams;
	out->n_events = m->res.n_events;
	for (int s = 0; s < m->res.n_streams && s < FERRY_SCHED_MAX_STREAMS; s++)
		snprintf(out->streams[s], sizeof(out->streams[s]), "%s", m->res.stream_name[s]);
	ferry_model_free(m);
	if (st)
		ferry_schedule_info_free(out);
	return st;
}

void ferry_schedule_info_free(struct ferry_schedule_info *info)
{
	ferry_free(info->tasks);
	memset(info, 0, sizeof(*info));
}
