/*
 * ZeRO-1 (adam=device:shard(N), --zero 1): AdamW's moments split over the
 * ranks.  Rank r keeps elements [r*S, (r+1)*S) of the parameter array's
 * moments (S = n / N rounded up, the last slice padded) and updates those
 * elements of the parameters from the averaged gradients, which every rank
 * holds whole (dp_reduce.c); then every rank's slice of the parameters
 * (and of their compute copy) is all-gathered on the comm stream, in
 * place in arrays padded to N slices, before the next forward.  AdamW is
 * elementwise and the gradients, the norm and the clipping scale are the
 * same on every rank, so the parameters have the bits of every rank
 * updating them whole (--zero 0), with 1/N of the moments' memory.  The
 * master weights stay whole: on the CPU they are the weights the kernels
 * read.
 */
#include "exec/model_internal.h"
#include "ferry/comm.h"
#include "ferry/safetensors.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static void *buffer_base(const struct ferry_model *m, int b)
{
	return b >= 0 && m->mem.dev[b] ? ferry_buffer_ptr(m->mem.dev[b]) : NULL;
}

/* This rank's first element of the parameter array (a dry build's: rank 0's). */
static size_t slice_start(const struct ferry_model *m)
{
	return m->comm ? (size_t)ferry_comm_rank(m->comm) * m->tt.ix.shard_numel : 0;
}

/* AdamW of parameter q's elements in this rank's slice [lo, hi). */
static void update_piece(ferry_model_t m, struct ferry_program *p, int q, const struct ferry_param_info *pi,
			 size_t lo, size_t hi)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	size_t a = pi->offset > lo ? pi->offset : lo, b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
	struct ferry_op_call c = { .kind = FERRY_OP_ADAMW };
	char label[56];

	if (a >= b)
		return;
	c.param = ix->param_slice >= 0 ? ferry_at(ferry_entry(m, ix->param_slice), (a - lo) * sizeof(float)) /* ZeRO-3 */
				       : ferry_at(ferry_entry(m, ix->param[q]), (a - pi->offset) * sizeof(float));
	c.param_copy = ix->copy_slice >= 0 && ix->copy_slice != ix->param_slice /* ZeRO-3, bf16: the slice gathered */
			       ? ferry_at(ferry_entry(m, ix->copy_slice), (a - lo) * m->asz)
			       : ferry_at(ferry_entry(m, ix->copy[q]), (a - pi->offset) * m->asz);
	c.out[0] = ferry_at(ferry_entry(m, ix->mom_slice), (a - lo) * sizeof(float));
	c.out[1] = ferry_at(ferry_entry(m, ix->var_slice), (a - lo) * sizeof(float));
	c.in[0] = ix->grad_slice >= 0 ? ferry_at(ferry_entry(m, ix->grad_slice), (a - lo) * sizeof(float)) /* ZeRO-2 */
				      : ferry_at(ferry_entry(m, ix->grad[q]), (a - pi->offset) * sizeof(float));
	c.n = (long)(b - a);
	c.scalar[4] = m->md->params[q].decay ? 1.0f : 0.0f;
	snprintf(label, sizeof(label), "adamw %.40s (slice)", pi->name);
	ferry_emit_op(p, m->compute, &c, -1, label);
	if (!p->failed)
		p->t[p->n - 1].patch = FERRY_PATCH_ADAMW;
}

void ferry_emit_update_sharded(ferry_model_t m, struct ferry_program *p)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	const size_t S = ix->shard_numel, lo = slice_start(m);

	for (int q = 0; q < m->md->n_params; q++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK && pi.present)
			update_piece(m, p, q, &pi, lo, lo + S);
	}
	/* every rank's updated slice to every rank, before the next forward */
	ferry_emit_record(p, m->compute, m->zero_updated, -1);
	ferry_emit_wait(p, m->comm_stream, m->zero_updated, -1);
	if (ix->param_slice >= 0) /* ZeRO-3: the unstacked whole; the layers in their ring */
		ferry_zero_params_gather_unstacked(m, p);
	else
		ferry_emit_all_gather(p, m->comm_stream, m->comm, buffer_base(m, ix->params_buffer), S * sizeof(float),
				      &m->comm_status, "gather params");
	if (ix->copy_buffer >= 0 && ix->param_slice < 0)
		ferry_emit_all_gather(p, m->comm_stream, m->comm, buffer_base(m, ix->copy_buffer), S * m->asz,
				      &m->comm_status, "gather compute copy");
	ferry_emit_record(p, m->comm_stream, m->zero_gathered, -1);
	ferry_emit_wait(p, m->compute, m->zero_gathered, -1);
}

void ferry_zero_compute_bits(enum ferry_dtype t, void *dst, const float *src, size_t n)
{
	if (t == FERRY_F32) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	for (size_t i = 0; i < n; i++)
		((uint16_t *)dst)[i] = ferry_st_f32_to_bf16(src[i]); /* as the CPU AdamW rounds */
}

/* This rank's slice of whole (n floats; the padding past n 0) into
 * buffer b, in type t. */
static ferry_status write_slice(ferry_model_t m, int b, enum ferry_dtype t, const float *whole)
{
	const size_t S = m->tt.ix.shard_numel, lo = slice_start(m), n = m->tt.n_params;
	const size_t have = lo < n ? (n - lo < S ? n - lo : S) : 0;
	char *slice = ferry_calloc(S, ferry_dtype_size(t));
	ferry_status st = slice ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "slices: out of host memory");

	if (!st) {
		ferry_zero_compute_bits(t, slice, whole + lo, have);
		st = ferry_model_buffer_write(m, b, slice, S * ferry_dtype_size(t));
	}
	ferry_free(slice);
	return st;
}

/* Every rank's slice in buffer b, whole (n floats), on every rank: a
 * collective. */
static ferry_status read_whole(ferry_model_t m, int b, float *whole)
{
	const size_t S = m->tt.ix.shard_numel, N = (size_t)ferry_comm_size(m->comm);
	float *all = ferry_calloc(N * S, sizeof(float)), *mine = all ? all + (size_t)ferry_comm_rank(m->comm) * S : NULL;
	ferry_comm_t host = ferry_comm_host(m->comm); /* its collectives on host memory */
	ferry_status st = all ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "slices: out of host memory");

	if (!st && !(st = ferry_model_buffer_read(m, b, mine, S * sizeof(float))) &&
	    !(st = ferry_comm_all_gather(host, mine, all, S, FERRY_COMM_F32, NULL)))
		memcpy(whole, all, m->tt.n_params * sizeof(float));
	ferry_free(all);
	return st;
}

ferry_status ferry_zero_set_opt_state(ferry_model_t m, const float *mom, const float *var)
{
	ferry_status st = write_slice(m, m->tt.ix.mom_buffer, FERRY_F32, mom);

	return st ? st : write_slice(m, m->tt.ix.var_buffer, FERRY_F32, var);
}

ferry_status ferry_zero_get_opt_state(ferry_model_t m, float *mom, float *var)
{
	ferry_status st = read_whole(m, m->tt.ix.mom_buffer, mom);

	return st ? st : read_whole(m, m->tt.ix.var_buffer, var);
}

/* An entry's slice: the first of its buffer. */
static ferry_status write_entry_slice(ferry_model_t m, int i, const float *whole)
{
	return write_slice(m, m->tt.e[i].buffer, m->tt.e[i].dtype, whole);
}

/* ZeRO-3: this rank's slice (the device's: with AdamW on host threads
 * the compute slice; none when the slice is the host's master, which the
 * caller wrote) and, apart, its compute copy's (on the host beside that
 * master: the bf16 slice the layers are gathered from), and the unstacked
 * parameters whole in the kernels' type (the copy buffer holds them in
 * array order, each where its entry is). */
ferry_status ferry_zero_set_params(ferry_model_t m, const float *params)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	size_t bytes = ix->copy_buffer >= 0 ? m->tt.buffers[ix->copy_buffer].bytes : 0; /* none: the edges gathered */
	char *edges = ferry_calloc(bytes ? bytes : 1, 1);
	ferry_status st = edges ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "parameters: out of host memory");

	if (!st && ix->param_stage < 0)
		st = write_entry_slice(m, ix->param_slice, params);
	if (!st && ix->copy_slice != ix->param_slice)
		st = write_entry_slice(m, ix->copy_slice, params);
	for (int q = 0; q < m->md->n_params && !st; q++) {
		struct ferry_param_info pi;

		if (ix->copy[q] >= 0 && (st = ferry_model_param_info(&m->cfg, q, &pi)) == FERRY_OK)
			ferry_zero_compute_bits(m->act, edges + m->tt.e[ix->copy[q]].offset, params + pi.offset, pi.numel);
	}
	if (!st && ix->copy_buffer >= 0)
		st = ferry_model_buffer_write(m, ix->copy_buffer, edges, bytes);
	ferry_free(edges);
	return st;
}

ferry_status ferry_zero_get_params(ferry_model_t m, float *params)
{
	return read_whole(m, m->tt.e[m->tt.ix.param_slice].buffer, params);
}
