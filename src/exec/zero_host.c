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
 * unstacked parameters are gathered whole.
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "core/error.h"

#include <string.h>

/* base + bytes, or NULL in a dry build. */
static void *at(void *base, size_t bytes)
{
	return base ? (char *)base + bytes : NULL;
}

static bool split(const struct ferry_model *m)
{
	return m->tt.ix.host_param_slice >= 0;
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
	return at(ferry_tensor_ptr(&m->tt, &m->mem, split(m) ? slice : whole[q]), ferry_zero_host_index(m, q, off) * elem);
}

void ferry_zero_host_gather(ferry_model_t m, struct ferry_program *p)
{
	ferry_buffer_t copy = m->mem.dev[m->tt.ix.copy_buffer];

	ferry_emit_record(p, m->compute, m->zero_updated, -1); /* after every update and upload */
	ferry_emit_wait(p, m->comm_stream, m->zero_updated, -1);
	if (m->tt.ix.param_slice >= 0) /* ZeRO-3: the unstacked whole; the layers in their ring */
		ferry_zero_params_gather_unstacked(m, p);
	else
		ferry_emit_all_gather(p, m->comm_stream, m->comm, copy ? ferry_buffer_ptr(copy) : NULL,
				      m->tt.ix.shard_numel * m->asz, &m->comm_status, "gather compute copy");
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
	/* ZeRO-3: the device's slice and unstacked parameters (the kernels' type) */
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
