/*
 * ZeRO-1 with AdamW on host threads (adam=host:cpu:shard(N), --zero 1
 * with --offload-optimizer cpu): the host of rank r keeps elements
 * [r*S, (r+1)*S) of the parameter array's master weights, moments and
 * gradients (S = n / N rounded up, the last slice padded), and the
 * device the compute copy and the gradients whole.  cpu_update.c copies
 * down, updates (on the rank's own threads) and uploads only the pieces
 * of each parameter in the slice; then every rank's slice of the compute
 * copy is all-gathered here, in place on the comm stream, before the next
 * forward.  AdamW is elementwise and the averaged gradients, the norm and
 * the clipping scale are the same on every rank, so the weights have the
 * bits of --zero 0.  Setting and reading the parameters goes through
 * whole arrays as without the split (reading them is a collective).
 *
 * ZeRO-3 on the host (adam=host:cpu:shard(N,params), --zero 3 with
 * --offload-optimizer cpu, FSDP2's CPU offload): the device keeps only
 * the rank's slice of the compute copy (in the kernels' type: bf16 the
 * bits the CPU AdamW rounds to, fp32 the master's) and
 * ZeRO-3's ring (zero_params.c) all-gathers each layer from it ahead of
 * use; the gradients come down from ZeRO-2's slice; each piece updated
 * goes up into the device's slice, and after the update only the
 * unstacked parameters are gathered whole.  With --offload-params too
 * the host's slice (fp32 the master's, bf16 the update's bf16 result) is
 * the one the layers are gathered from (staged up part by part,
 * zero_params.c): only the unstacked parameters' updated parts go up,
 * into their whole copy.
 *
 * Streamed (adam=host:stream:shard(N), with ",grads" ZeRO-2, with
 * ",params" ZeRO-3) the host keeps the rank's slice of the master weights
 * and moments only; the pieces in it pass through the device's optimizer
 * ring (emit_update_streamed in build.c), where AdamW reads the gradients
 * from the device as the host threads' copies would (whole, or ZeRO-2's
 * slice) and writes the weights where their upload would (the compute
 * copy, or ZeRO-3's slice); then the same gather.
 *
 * ZeRO-1 with --offload-params (adam=host:cpu:shard(N) with
 * layers.weights=host:stream): the weight ring reads the parameters
 * whole from the host, so the host keeps them (and their bf16 copy)
 * whole, padded to N slices, and the gradients whole (averaged in place
 * as without the split); only the moments are the rank's slice.  The
 * rank's threads update the slice's pieces in the whole arrays, which
 * are then all-gathered in place on the host, and the unstacked
 * parameters' device copy uploaded from them.  Streamed
 * (adam=host:stream:shard(N) with layers.weights=host:stream) the same
 * host arrays, the slice's pieces passing through the optimizer ring
 * (the gradients from the whole host array, ZeRO-2's from the host
 * slice), written back into the whole arrays before the same gather;
 * ZeRO-3 streamed writes its pieces back into the host slice the gathers
 * stage from (in bf16 the layers' pieces of the bf16 slice beside the
 * master, AdamW's result copied down from the ring; the unstacked ones'
 * go into their whole device copy, so that part of the host slice is not
 * read).
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

bool ferry_zero_host_split(const struct ferry_model *m)
{
	return m->tt.ix.shard_numel && ferry_table_place(&m->tt, FERRY_GROUP_ADAM)->home == FERRY_HOME_HOST;
}

static bool split(const struct ferry_model *m)
{
	return ferry_zero_host_split(m);
}

/* This rank's first element of the parameter array (a dry build's: rank 0's). */
static size_t slice_start(const struct ferry_model *m)
{
	return m->comm ? (size_t)ferry_comm_rank(m->comm) * m->tt.ix.shard_numel : 0;
}

static size_t param_offset(const struct ferry_model *m, int q)
{
	struct ferry_param_info pi;

	return ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK ? pi.offset : 0;
}

bool ferry_zero_host_piece(const struct ferry_model *m, int q, size_t *off, size_t *n)
{
	const size_t base = param_offset(m, q), lo = slice_start(m), hi = lo + m->tt.ix.shard_numel;
	size_t a = base + *off, b = base + *off + *n;

	if (!split(m))
		return *n > 0;
	a = a > lo ? a : lo;
	b = b < hi ? b : hi;
	if (a >= b)
		return false;
	*off = a - base;
	*n = b - a;
	return true;
}

size_t ferry_zero_host_index(const struct ferry_model *m, int q, size_t off)
{
	return split(m) ? param_offset(m, q) + off - slice_start(m) : off;
}

void *ferry_zero_host_at(ferry_model_t m, const int *whole, int slice, int q, size_t off, size_t elem)
{
	if (slice < 0) /* whole on every rank (unsplit; split, the weights --offload-params streams) */
		return ferry_at(ferry_entry(m, whole[q]), off * elem);
	return ferry_at(ferry_entry(m, slice), ferry_zero_host_index(m, q, off) * elem);
}

/* --offload-params: every rank's slice of the host's parameters (and of
 * the bf16 copy the rings load) to every rank, in place; then the
 * unstacked parameters' device copy uploaded whole from them, and the next
 * forward's loads (on h2d) and ops wait for it. */
static void gather_streamed(ferry_model_t m, struct ferry_program *p)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	char label[56];

	ferry_emit_all_gather(p, m->comm_stream, m->host_comm, m->mem.host[ix->params_buffer],
			      ix->shard_numel * sizeof(float), &m->comm_status, "gather params");
	if (ix->host_copy_buffer >= 0)
		ferry_emit_all_gather(p, m->comm_stream, m->host_comm, m->mem.host[ix->host_copy_buffer],
				      ix->shard_numel * m->asz, &m->comm_status, "gather compute copy");
	ferry_emit_record(p, m->comm_stream, m->zero_gathered, -1);
	ferry_emit_wait(p, m->opt_h2d, m->zero_gathered, -1);
	for (int q = 0; q < m->md->n_params; q++) {
		if (ix->copy[q] < 0)
			continue;
		snprintf(label, sizeof(label), "weights: %.40s", m->tt.e[ix->param[q]].name);
		ferry_emit_copy(p, m->opt_h2d, ferry_entry(m, ix->copy[q]),
				ferry_entry(m, ix->host_copy[q] >= 0 ? ix->host_copy[q] : ix->param[q]),
				m->tt.e[ix->copy[q]].bytes, FERRY_COPY_H2D, -1, label);
	}
	ferry_emit_record(p, m->opt_h2d, m->opt_uploaded, -1);
	ferry_emit_wait(p, m->compute, m->opt_uploaded, -1);
}

bool ferry_zero_host_updated(const struct ferry_model *m, int q, struct ferry_param_info *pi)
{
	return ferry_model_param_info(&m->cfg, q, pi) == FERRY_OK &&
	       (m->tt.ix.param[q] >= 0 || (m->tt.ix.param_slice >= 0 && pi->present));
}

void *ferry_zero_host_device_grad(ferry_model_t m, int q, size_t off)
{
	const struct ferry_table_index *ix = &m->tt.ix;

	if (ix->grad_slice >= 0) /* ZeRO-2 */
		return ferry_at(ferry_entry(m, ix->grad_slice), ferry_zero_host_index(m, q, off) * sizeof(float));
	return ferry_at(ferry_entry(m, ix->grad[q]), off * sizeof(float));
}

void *ferry_zero_host_device_copy(ferry_model_t m, int q, size_t off)
{
	const struct ferry_table_index *ix = &m->tt.ix;

	if (ix->param_slice >= 0 && ix->param_stage < 0) /* ZeRO-3 (its slice on the host: the unstacked whole copy) */
		return ferry_at(ferry_entry(m, ix->param_slice), ferry_zero_host_index(m, q, off) * m->asz);
	return ferry_at(ferry_entry(m, ix->copy[q]), off * m->asz);
}

void ferry_zero_host_gather(ferry_model_t m, struct ferry_program *p)
{
	ferry_emit_record(p, m->compute, m->zero_updated, -1); /* after every update and upload */
	ferry_emit_wait(p, m->comm_stream, m->zero_updated, -1);
	if (ferry_layers_streamed(m)) { /* (no device copy to gather) */
		gather_streamed(m, p);
		return;
	}
	if (m->tt.ix.param_slice >= 0) { /* ZeRO-3: the unstacked whole (or in the edges' ring); the layers in theirs */
		ferry_zero_params_gather_unstacked(m, p);
	} else {
		ferry_buffer_t copy = m->mem.dev[m->tt.ix.copy_buffer];

		ferry_emit_all_gather(p, m->comm_stream, m->comm, copy ? ferry_buffer_ptr(copy) : NULL,
				      m->tt.ix.shard_numel * m->asz, &m->comm_status, "gather compute copy");
	}
	ferry_emit_record(p, m->comm_stream, m->zero_gathered, -1);
	ferry_emit_wait(p, m->compute, m->zero_gathered, -1);
}

/* The compute copy the kernels read, whole, from the whole parameters:
 * fp32 as they are, bf16 rounded as the CPU AdamW rounds. */
static ferry_status upload_whole(ferry_model_t m, const float *params)
{
	const size_t n = m->tt.n_params;
	void *bits;
	ferry_status st;

	if (m->act == FERRY_F32)
		return ferry_model_buffer_write(m, m->tt.ix.copy_buffer, params, n * sizeof(float));
	if (!(bits = ferry_calloc(n, m->asz)))
		return ferry_error(FERRY_ERR_NOMEM, "parameters: out of host memory");
	ferry_zero_compute_bits(m->act, bits, params, n);
	st = ferry_model_buffer_write(m, m->tt.ix.copy_buffer, bits, n * m->asz);
	ferry_free(bits);
	return st;
}

/* The padding past n (the last rank's) is never updated nor read. */
ferry_status ferry_zero_host_set_params(ferry_model_t m, const float *params)
{
	const size_t S = m->tt.ix.shard_numel, lo = slice_start(m), n = m->tt.n_params;
	const size_t have = lo < n ? (n - lo < S ? n - lo : S) : 0;
	ferry_status st = ferry_model_buffer_write(m, m->tt.ix.params_buffer, params + lo, have * sizeof(float));

	if (st)
		return st;
	/* ZeRO-3: the device's slice (if any) and unstacked parameters (the kernels' type) */
	return m->tt.ix.param_slice >= 0 ? ferry_zero_set_params(m, params) : upload_whole(m, params);
}

ferry_status ferry_zero_host_get_params(ferry_model_t m, float *params)
{
	const size_t S = m->tt.ix.shard_numel, N = m->comm ? (size_t)ferry_comm_size(m->comm) : 1;
	float *all = ferry_calloc(N * S, sizeof(float)), *mine = all ? all + slice_start(m) : NULL;
	ferry_status st = all ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "parameters: out of host memory");

	if (!st && !(st = ferry_model_buffer_read(m, m->tt.ix.params_buffer, mine, S * sizeof(float))) && m->comm)
		st = ferry_comm_all_gather(ferry_comm_host(m->comm), mine, all, S, FERRY_COMM_F32, NULL);
	if (!st)
		memcpy(params, all, m->tt.n_params * sizeof(float));
	ferry_free(all);
	return st;
}
