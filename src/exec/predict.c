/*
 * ferry_model_predict: the cost model on a model's prepared schedule.  The
 * step's programs come from a dry build (no device), each task's duration
 * from the calibration, and the simulation (plan/cost_model.h) replays
 * them as ferry_model_step_submit, _finish and ferry_model_sync submit
 * them: zeroing, forward, backward, gradient norm, the host's
 * synchronisation, the update.  The peak is the memory plan's.
 */
#include "exec/model_internal.h"
#include "plan/calibration.h"
#include "plan/cost_model.h"
#include "plan/trace.h"
#include "core/error.h"

#include <string.h>

/* Each task's duration, the programs' tasks one after the other; a
 * compute-stream task also takes the stream's calibrated gap before it. */
static double *durations(const struct ferry_calibration *c, const struct ferry_program *const *p, int n,
			 int compute, int *estimated)
{
	int total = 0, k = 0;
	double *d;

	for (int i = 0; i < n; i++)
		total += p[i]->n;
	if (!(d = ferry_calloc((size_t)total + 1, sizeof(double))))
		return NULL;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < p[i]->n; j++) {
			bool est = false;

			d[k] = ferry_calib_task_seconds(c, &p[i]->t[j], &est);
			if (p[i]->t[j].stream == compute && ferry_trace_timed_kind(p[i]->t[j].kind))
				d[k] += c->task_gap_s;
			k++;
			*estimated += est;
		}
	return d;
}

static ferry_status simulate(ferry_model_t m, const struct ferry_calibration *c, int B, int T,
			     struct ferry_prediction *out)
{
	struct ferry_prog_key keys[FERRY_STEP_PROGRAMS];
	const struct ferry_program *p[FERRY_STEP_PROGRAMS];
	struct ferry_sim_params prm = { .both_slowdown = ferry_calib_both_slowdown(c) };
	struct ferry_sim_result r;
	ferry_status st = FERRY_OK;
	double *d;

	ferry_model_step_keys(B, T, keys);
	for (int i = 0; i < FERRY_STEP_PROGRAMS && !st; i++)
		st = ferry_model_program(m, &keys[i], &p[i]);
	if (st)
		return st;
	prm.shared_copy_engine = prm.both_slowdown >= 1.9;
	prm.copy_compute_slowdown = c->copy_compute_slowdown;
	if (!(d = durations(c, p, FERRY_STEP_PROGRAMS, m->compute, &out->estimated_ops)))
		return ferry_error(FERRY_ERR_NOMEM, "predict: out of host memory");
	st = ferry_sim_run(p, FERRY_STEP_PROGRAMS, 3, m->compute, d, &prm, &r);
	ferry_free(d);
	if (st)
		return st;
	out->step_s = r.step_s + c->step_host_s; /* the host's own work, outside the tasks */
	out->exposed_copy_s = r.exposed_copy_s;
	out->compute_s = r.busy_s[m->compute];
	out->copy_s = r.copy_s;
	out->host_s = m->tt.ix.opt_cpu ? r.busy_s[m->opt_cpu_stream] : 0;
	out->n_tasks = r.n_tasks;
	return FERRY_OK;
}

ferry_status ferry_model_predict(const struct ferry_model_config *cfg, int B, int T,
				 const struct ferry_exec_opts *opts, ferry_calibration_t c,
				 struct ferry_prediction *out)
{
	struct ferry_plan plan;
	ferry_model_t m;
	ferry_status st;

	memset(out, 0, sizeof(*out));
	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "predict: no calibration");
	if ((st = ferry_model_build(NULL, cfg, B, T, opts, &m)))
		return st;
	/* the plan ferry_model_plan makes, from the same table */
	if (!(st = ferry_tensor_table_plan(&m->tt, &plan))) {
		out->device_peak_bytes = plan.mem.peak_bytes;
		for (int k = 0; k < FERRY_TK_COUNT; k++)
			out->host_bytes += plan.mem.host_kind_bytes[k];
		st = simulate(m, c, B, T, out);
	}
	ferry_model_free(m);
	return st;
}
