/*
 * Data parallel: each rank's weight gradients averaged over the ranks
 * before anything reads them, by all-reduces on a stream of their own
 * ("comm"), so they overlap the backward of the layers still to come.
 *
 * Every rank runs the same schedule on its own rows of the global batch
 * (train/trainer.c), so its gradients are the mean over its rows and
 * their average over the ranks is the gradient of the mean over all rows.
 * The reduction happens where the gradients stay for the rest of the step:
 *  - layers.weights on the device: in the device gradient buffer, each
 *    layer's as soon as its backward is done, then the unstacked
 *    parameters' (embeddings, head, final norm) after the whole backward;
 *    the compute stream waits for the last one, so the norm and the update
 *    read averages, and the copies of AdamW on host threads wait for
 *    their layer's;
 *  - layers.weights=host:stream: in the host gradient array, each layer's
 *    once the layers' ring has sent its gradients out (weight_ring.c),
 *    the unstacked ones once every gradient is on the host (with
 *    edges.weights=host:stream, sent out by the edges' ring); the host
 *    norm waits for them.  Where the collectives run on device memory
 *    (NCCL, which cannot reach the host's; MPI through the staging
 *    buffer, the same schedule), before that instead, on the device, as
 *    FSDP2 and DeepSpeed do: a layer's in its ring slot before the ring
 *    sends them out (the d2h stream waits), the unstacked ones in their
 *    device arrays before their copies (ferry_dp_on_device).  The same
 *    values are averaged in the same order, so the bits are the host's.
 * ZeRO-2 (a split gradient array) reduce-scatters them instead, at the
 * same points (zero_grads.c).
 * With MPI on device memory (CUDA) each collective goes through a pinned
 * host buffer (sched/comm_stage.c), on the comm stream as NCCL's.
 * ZeRO-1's parameter gather, ZeRO-2's gradients in host slots,
 * their norm's block sums and --offload-embeddings' averages stay in host
 * memory: with NCCL on the same stream through the options' host_comm
 * (MPI over the same ranks), in the same order on every rank.
 * A speculative early update of a layer waits for that layer's average.
 * The norm is then the global gradient's on every rank, every rank clips
 * by the same scale and updates identical parameters identically: they
 * stay equal without a broadcast.  Each backward averages, so with
 * --grad-accum the accumulated sum is averaged once per micro-batch (the
 * same mean: the earlier micro-batches' part is equal on every rank); with
 * the weights streamed the next backward starts from that average on the
 * host (build.c), as it would from the device buffer.
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "sched/comm_stage.h"
#include "comm/comm_pick.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

void ferry_dp_add_streams(struct ferry_model *m)
{
	m->comm_stream = ferry_sched_stream(&m->res, "comm");
	m->dp_ready = ferry_sched_event(&m->res, "gradients to average");
	m->dp_reduced = ferry_sched_event(&m->res, "a layer's gradients averaged");
	m->dp_all = ferry_sched_event(&m->res, "every gradient averaged");
	if (!m->tt.ix.shard_numel)
		return;
	m->zero_updated = ferry_sched_event(&m->res, "this rank's slices updated");
	m->zero_gathered = ferry_sched_event(&m->res, "every rank's slices gathered");
	if (m->tt.ix.grad_ring >= 0)
		ferry_zero_grads_add_events(m);
}

ferry_status ferry_shard_check(const struct ferry_place *adam, int ranks)
{
	const char *home = adam->home == FERRY_HOME_DEVICE ? "device"
			   : adam->update == FERRY_UPDATE_HOST ? "host:cpu" : "host:stream";

	if (adam->shard > 1 && adam->shard != ranks)
		return ferry_error(FERRY_ERR_INVALID, "adam=%s:shard(%d%s) splits AdamW's state over %d ranks; this "
				   "run has %d", home, adam->shard, adam->shard_params ? ",params"
				   : adam->shard_grads ? ",grads" : "", adam->shard, ranks);
	return FERRY_OK;
}

/* With the weights streamed, what averages gradients in the host's
 * arrays, in words (NULL: nothing, each on the device before its copy). */
static const char *host_averages(const struct ferry_model *m)
{
	if (m->ring[FERRY_GROUP_EDGE_WEIGHTS].ring)
		return "edges.weights=host:stream (--offload-embeddings: the edges' gradients averaged on the host)";
	if (m->tt.ix.grad_ring >= 0)
		return "ZeRO-2 (the gradients reduce-scattered from host slots)";
	return NULL;
}

/* ... and what else runs collectives on host memory. */
static const char *host_collectives(const struct ferry_model *m)
{
	const char *what = host_averages(m);

	return what || !ferry_zero_host_split(m) ? what : "ZeRO-1 (the parameters all-gathered on the host)";
}

bool ferry_dp_on_device(const struct ferry_model *m)
{
	return m->comm && ferry_layers_streamed(m) && (ferry_comm_device_buffers(m->comm) || m->stage) && !host_averages(m);
}

ferry_status ferry_dp_check(const struct ferry_model *m)
{
	const char *what;
	ferry_status st;

	if (m->be && (st = ferry_shard_check(ferry_table_place(&m->tt, FERRY_GROUP_ADAM),
					     m->comm ? ferry_comm_size(m->comm) : 1)))
		return st;
	if (!m->be || !m->comm)
		return FERRY_OK;
	if (!ferry_layers_streamed(m) || !ferry_comm_device_buffers(m->comm) || m->host_comm != m->comm)
		return FERRY_OK;
	if ((what = host_collectives(m)))
		return ferry_error(FERRY_ERR_INVALID, "layers.weights=host:stream on several ranks with %s runs "
				   "collectives on host memory, which %s cannot reach: the options name no "
				   "communicator on host memory (host_comm)", what, ferry_comm_engine(m->comm));
	return FERRY_OK;
}

/* Whether host-memory collectives run on arena memory the host cannot
 * address (or are asked to, to test the path on the CPU). */
static ferry_status staged(const struct ferry_model *m, bool *yes)
{
	*yes = m->be && m->comm && !ferry_comm_device_buffers(m->comm);
	return *yes && ferry_backend_caps(m->be).unified ? ferry_comm_stage_forced(yes) : FERRY_OK;
}

ferry_status ferry_dp_stage_planned(const struct ferry_exec_opts *o, int ranks, size_t *bytes)
{
	const bool device = o->backend && strcmp(o->backend, "cpu");
	bool yes = ranks > 1 && device && !ferry_comm_pick_planned_nccl();
	ferry_status st = ranks > 1 ? ferry_comm_engine_check() : FERRY_OK;

	*bytes = 0;
	if (!st && ranks > 1 && !device)
		st = ferry_comm_stage_forced(&yes);
	return st || !yes ? st : ferry_comm_stage_bytes(bytes);
}

ferry_status ferry_dp_stage_create(struct ferry_model *m)
{
	ferry_status st;
	bool yes;

	if ((st = staged(m, &yes)) || !yes)
		return st;
	if ((st = ferry_comm_stage_create(m->be, &m->stage)))
		return st;
	m->rt.stage = m->stage;
	m->mem.host_bytes += m->stage->bytes;
	return FERRY_OK;
}

/* Parameter q's gradient elements [off, off + n) averaged on the comm stream. */
static void average(struct ferry_model *m, struct ferry_program *p, int q, size_t off, size_t n, int layer)
{
	char label[56];

	snprintf(label, sizeof(label), "average grad: %.40s", m->tt.e[m->tt.ix.param[q]].name);
	ferry_emit_all_reduce(p, m->comm_stream, ferry_layers_streamed(m) ? m->host_comm : m->comm,
			      ferry_at(ferry_entry(m, m->tt.ix.grad[q]), off * sizeof(float)), n,
			      &m->comm_status, layer, label);
}

/* The stacked (layers: true) or unstacked parameters' gradients of layer l
 * (-1: all of an unstacked one). */
static void average_params(struct ferry_model *m, struct ferry_program *p, bool layers, int l)
{
	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (m->tt.ix.param[q] < 0 || ferry_model_param_info(&m->cfg, q, &pi) != FERRY_OK ||
		    (pi.layers != 0) != layers)
			continue;
		if (layers)
			average(m, p, q, (size_t)l * pi.layer_numel, pi.layer_numel, l);
		else
			average(m, p, q, 0, pi.numel, -1);
	}
}

/* Layer l's gradients, once complete where they stay (when the weights
 * stream: after the layers' ring's copies out, queued on d2h before the
 * layer hook runs). */
static void layer_average(struct ferry_model *m, struct ferry_program *p, int l)
{
	ferry_emit_record(p, ferry_layers_streamed(m) ? m->opt_d2h : m->compute, m->dp_ready, l);
	ferry_emit_wait(p, m->comm_stream, m->dp_ready, l);
	average_params(m, p, true, l);
	ferry_emit_record(p, m->comm_stream, m->dp_reduced, l);
}

/* Layer l's gradients in their ring slot, or (l = -1) the unstacked
 * parameters' in their device arrays, averaged on the comm stream. */
static void average_on_device(struct ferry_model *m, struct ferry_program *p, int l)
{
	const struct ferry_weight_rings *r = &m->ring[FERRY_GROUP_LAYER_WEIGHTS];
	char label[56];

	for (int i = 0; l >= 0 && i < r->n; i++) {
		snprintf(label, sizeof(label), "average grad: %.40s", r->s[i].name);
		ferry_emit_all_reduce(p, m->comm_stream, m->comm, ferry_weight_ring_dev_grad(r, i, l), r->s[i].numel,
				      &m->comm_status, l, label);
	}
	for (int q = 0; l < 0 && q < m->md->n_params; q++) {
		const int d = m->tt.ix.dev_grad[q];

		if (d < 0)
			continue;
		snprintf(label, sizeof(label), "average grad: %.40s", m->tt.e[m->tt.ix.param[q]].name);
		ferry_emit_all_reduce(p, m->comm_stream, m->comm, ferry_entry(m, d), m->tt.e[d].bytes / sizeof(float),
				      &m->comm_status, -1, label);
	}
}

void ferry_dp_grads_written(void *model, struct ferry_program *p, int l)
{
	struct ferry_model *m = model;

	if (!ferry_dp_on_device(m))
		return;
	ferry_emit_record(p, m->compute, m->dp_ready, l);
	ferry_emit_wait(p, m->comm_stream, m->dp_ready, l);
	average_on_device(m, p, l);
	ferry_emit_record(p, m->comm_stream, m->dp_reduced, l);
	ferry_emit_wait(p, m->opt_d2h, m->dp_reduced, l);
}

void ferry_dp_after_layer(void *model, struct ferry_program *p, int l)
{
	struct ferry_model *m = model;

	if (m->tt.ix.grad_ring >= 0)
		ferry_zero_grads_after_layer(m, p, l);
	else if (m->comm && !ferry_dp_on_device(m))
		layer_average(m, p, l);
	if (ferry_table_host_update(&m->tt))
		ferry_cpu_update_after_layer(m, p, l);
}

void ferry_dp_after_backward(struct ferry_model *m, struct ferry_program *p)
{
	if (m->tt.ix.grad_ring >= 0) {
		ferry_zero_grads_after_backward(m, p);
		return;
	}
	if (!m->comm)
		return;
	if (ferry_dp_on_device(m)) { /* averaged before their copies, the last of them on d2h */
		ferry_emit_record(p, m->opt_d2h, m->dp_all, -1);
		return;
	}
	if (ferry_layers_streamed(m)) {
		ferry_emit_wait(p, m->comm_stream, m->all_grads_home, -1);
	} else {
		ferry_emit_record(p, m->compute, m->dp_ready, -1);
		ferry_emit_wait(p, m->comm_stream, m->dp_ready, -1);
	}
	average_params(m, p, false, -1);
	ferry_emit_record(p, m->comm_stream, m->dp_all, -1);
	if (!ferry_layers_streamed(m))
		ferry_emit_wait(p, m->compute, m->dp_all, -1);
}
