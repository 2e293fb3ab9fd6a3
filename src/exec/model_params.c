/*
 * A model's parameters and optimizer state: random initialisation, and
 * reading and writing them (and the gradients) wherever the placement put
 * them, keeping the compute copy and the host's copies in step.
 */
#include "exec/model_internal.h"
#include "core/error.h"
#include "core/host_fill.h"
#include "backend/run_op.h"
#include "sched/tier_copy.h"
#include "tier/nvme_tier.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* splitmix64 -> uniform -> Box-Muller: deterministic normal samples.  The
 * k-th draw of a stream is a function of seed + k * SPLITMIX_STEP alone, so
 * threads can start anywhere in it and give the one-thread bits. */
#define SPLITMIX_STEP 0x9E3779B97F4A7C15ull

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += SPLITMIX_STEP);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* x's n values, two draws a pair: pieces of even length on every thread
 * (an 8B model's draws took two minutes on one) */
static void fill_normal(float *x, size_t n, double std, uint64_t *s)
{
	const size_t piece = (size_t)1 << 16;
	const long pieces = (long)((n + piece - 1) / piece);
	const uint64_t s0 = *s;

#pragma omp parallel for schedule(static) if (pieces > 1)
	for (long k = 0; k < pieces; k++) {
		const size_t lo = (size_t)k * piece, hi = n - lo < piece ? n : lo + piece;
		uint64_t sk = s0 + lo * SPLITMIX_STEP; /* lo draws before element lo */

		for (size_t i = lo; i < hi; i += 2) {
			double r = sqrt(-2.0 * log(uniform01(&sk))), a = 2.0 * M_PI * uniform01(&sk);

			x[i] = (float)(std * r * cos(a));
			if (i + 1 < n)
				x[i + 1] = (float)(std * r * sin(a));
		}
	}
	*s = s0 + ((n + 1) & ~(size_t)1) * SPLITMIX_STEP;
}

/* Parameter p's initial values, drawing normals from one stream in
 * declaration order. */
static void init_param(const struct ferry_model *m, int p, const struct ferry_param_info *pi, float *x,
		       uint64_t *s)
{
	const struct ferry_param_decl *pd = &m->md->params[p];

	switch (pd->init) {
	case FERRY_INIT_NORMAL: fill_normal(x, pi->numel, 0.02, s); break;
	case FERRY_INIT_NORMAL_RESID: fill_normal(x, pi->numel, 0.02 / sqrt(2.0 * m->cfg.layers), s); break;
	case FERRY_INIT_ONE:
		for (size_t i = 0; i < pi->numel; i++)
			x[i] = 1.0f;
		break;
	case FERRY_INIT_ZERO: memset(x, 0, pi->numel * sizeof(float)); break;
	}
	/* the padding rows of an embedding never see a token: keep them zero */
	if (pd->zero_pad_rows && pi->ndim == 2) {
		size_t first = (size_t)m->cfg.vocab * (size_t)pi->shape[1];

		memset(x + first, 0, (pi->numel - first) * sizeof(float));
	}
}

/* The master weights when they are this process's whole array in plain
 * host memory (AdamW's state on the host, no ZeRO slice, no NVMe file):
 * the draws go straight there, since a second n_params-float buffer (32 GB
 * for an 8B model) may not fit beside the host state.  NULL otherwise. */
static float *host_master(const struct ferry_model *m)
{
	const int b = m->tt.ix.params_buffer;
	uint64_t off;

	if (m->tt.ix.host_param_slice >= 0 || m->tt.ix.param_slice >= 0 || !ferry_model_buffer_on_host(m, b) ||
	    ferry_host_tiers_nvme_at(m->tt.host_tiers, ferry_model_buffer_ptr(m, b), &off))
		return NULL;
	return ferry_model_buffer_ptr(m, b);
}

static ferry_status refresh_copy(ferry_model_t m);

/* bytes of the master hashed at a time, read through host memory where it
 * is not there: the same pieces wherever it lives, so the same hash */
#define HASH_CHUNK ((size_t)64 << 20)
#define HASH_INIT 0xcbf29ce484222325ull

/* n bytes of host memory hashed as ferry_model_params_hash hashes the
 * master: in HASH_CHUNK pieces, chained */
static uint64_t params_hash_of(const void *p, size_t n)
{
	uint64_t h = HASH_INIT;

	for (size_t at = 0; at < n; at += HASH_CHUNK)
		h = ferry_host_hash(h, (const char *)p + at, n - at < HASH_CHUNK ? n - at : HASH_CHUNK);
	return h;
}

/* After the whole master array is written: the copy the kernels read */
static ferry_status params_written(ferry_model_t m)
{
	if (m->tt.ix.copy_buffer >= 0 || ferry_layers_streamed(m))
		return refresh_copy(m);
	return FERRY_OK;
}

ferry_status ferry_model_init_random(ferry_model_t m, uint64_t seed)
{
	float *master = host_master(m), *host = master;
	ferry_status st = master ? ferry_model_sync_all(m) : ferry_host_alloc(m->be, m->tt.n_params * sizeof(float),
			(void **)&host);
	uint64_t s = seed;

	for (int p = 0; p < m->md->n_params && !st; p++) {
		struct ferry_param_info pi;

		if (!(st = ferry_model_param_info(&m->cfg, p, &pi)) && pi.present)
			init_param(m, p, &pi, host + pi.offset, &s);
	}
	if (master)
		return st ? st : params_written(m);
	if (!st)
		st = ferry_model_set_params(m, host);
	ferry_host_free(m->be, host);
	return st;
}

ferry_status ferry_model_copy_sync(ferry_model_t m, void *dst, const void *src, size_t n, enum ferry_copy_kind kind)
{
	ferry_status st = ferry_memcpy_async(ferry_model_compute_stream(m), dst, src, n, kind);

	return st ? st : ferry_stream_synchronize(ferry_model_compute_stream(m));
}

/* Waits for every stream: host buffers that copies write are then final. */
ferry_status ferry_model_sync_all(ferry_model_t m)
{
	ferry_status st = FERRY_OK;

	for (int i = 0; i < m->rt.n_streams && !st; i++)
		st = ferry_stream_synchronize(m->rt.stream[i]);
	return st;
}

/* n bytes of table buffer b to or from host memory: a device buffer
 * through a copy, a host one directly once the streams have drained. */
ferry_status ferry_model_buffer_read(ferry_model_t m, int b, void *dst, size_t n)
{
	ferry_status st;

	if (!ferry_model_buffer_on_host(m, b))
		return ferry_model_copy_sync(m, dst, ferry_model_buffer_ptr(m, b), n, FERRY_COPY_D2H);
	if (!(st = ferry_model_sync_all(m)) && !ferry_host_tiers_file_io(m->tt.host_tiers, ferry_model_buffer_ptr(m, b),
			dst, n, false, &st))
		ferry_host_copy(dst, ferry_model_buffer_ptr(m, b), n);
	return st;
}

ferry_status ferry_model_buffer_write(ferry_model_t m, int b, const void *src, size_t n)
{
	ferry_status st;

	if (!ferry_model_buffer_on_host(m, b))
		return ferry_model_copy_sync(m, ferry_model_buffer_ptr(m, b), src, n, FERRY_COPY_H2D);
	if (!(st = ferry_model_sync_all(m)) &&
	    !ferry_host_tiers_file_io(m->tt.host_tiers, ferry_model_buffer_ptr(m, b), (void *)src, n, true, &st))
		ferry_host_copy(ferry_model_buffer_ptr(m, b), src, n);
	return st;
}

/* The host's bf16 copy of the master, rounded as the CPU AdamW rounds,
 * on every thread (8B parameters took seconds on one) */
static void host_bf16_bits(uint16_t *bits, const float *master, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= ((size_t)1 << 22))
	for (long i = 0; i < (long)n; i++)
		bits[i] = ferry_st_f32_to_bf16(master[i]);
}

/* With AdamW on host threads: the compute copy uploaded from the host
 * master (fp32), or from its bf16 bits made here. */
static ferry_status upload_copy(ferry_model_t m)
{
	const float *master = ferry_model_buffer_ptr(m, m->tt.ix.params_buffer);
	const void *src = master;
	ferry_status st;

	if (m->tt.ix.host_copy_buffer >= 0) { /* the kernels read bf16 */
		uint16_t *bits = ferry_model_buffer_ptr(m, m->tt.ix.host_copy_buffer);

		host_bf16_bits(bits, master, m->tt.n_params);
		src = bits;
	}
	st = ferry_memcpy_async(ferry_model_compute_stream(m), ferry_model_buffer_ptr(m, m->tt.ix.copy_buffer), src,
			m->tt.n_params * m->asz,
				FERRY_COPY_H2D);
	return st ? st : ferry_stream_synchronize(ferry_model_compute_stream(m));
}

/* --offload-params: the host's bf16 copy the rings are filled from (none
 * in fp32: they read the master), and the unstacked parameters' device
 * copy, uploaded from it. */
static ferry_status refresh_offloaded(ferry_model_t m)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	const float *master = ferry_model_buffer_ptr(m, ix->params_buffer);
	ferry_status st = FERRY_OK;

	if (ix->host_copy_buffer >= 0) {
		host_bf16_bits(ferry_model_buffer_ptr(m, ix->host_copy_buffer), master, m->tt.n_params);
	}
	for (int q = 0; q < m->md->n_params && !st; q++)
		if (ix->copy[q] >= 0)
			st = ferry_memcpy_async(ferry_model_compute_stream(m), ferry_entry(m, ix->copy[q]),
						ferry_entry(m, ix->host_copy[q] >= 0 ? ix->host_copy[q] : ix->param[q]),
						m->tt.e[ix->copy[q]].bytes, FERRY_COPY_H2D);
	return st ? st : ferry_stream_synchronize(ferry_model_compute_stream(m));
}

/* The compute copy from the master weights: a cast on the device, through
 * the optimizer ring's first slot when the master weights are on the host. */
static ferry_status refresh_copy(ferry_model_t m)
{
	if (ferry_layers_streamed(m))
		return refresh_offloaded(m);
	if (ferry_table_host_update(&m->tt))
		return upload_copy(m);
	const size_t total = m->tt.n_params, chunk = ferry_model_buffer_on_host(m,
			m->tt.ix.params_buffer) ? m->tt.ix.opt_chunk : total;
	const float *master = ferry_model_buffer_ptr(m, m->tt.ix.params_buffer);
	char *copy = ferry_model_buffer_ptr(m, m->tt.ix.copy_buffer);
	ferry_status st = FERRY_OK;

	for (size_t off = 0; off < total && !st; off += chunk) {
		struct ferry_op_call c = { .kind = FERRY_OP_CAST, .n = (long)(total - off < chunk ? total - off : chunk) };

		c.out[0] = copy + off * m->asz;
		c.in[0] = master + off;
		if (ferry_model_buffer_on_host(m, m->tt.ix.params_buffer)) {
			c.in[0] = ferry_entry(m, m->tt.ix.opt_ring);
			if (!ferry_host_tiers_upload(m->tt.host_tiers, ferry_model_compute_stream(m), (void *)c.in[0], master + off,
						     (size_t)c.n * sizeof(float), &st))
				st = ferry_memcpy_async(ferry_model_compute_stream(m), (void *)c.in[0], master + off,
							(size_t)c.n * sizeof(float), FERRY_COPY_H2D);
		}
		if (!st)
			st = ferry_stream_run_op(ferry_model_compute_stream(m), &c);
	}
	return st ? st : ferry_stream_synchronize(ferry_model_compute_stream(m));
}

ferry_status ferry_model_set_params(ferry_model_t m, const float *params)
{
	m->set_hash_valid = false;
	if (m->tt.ix.host_param_slice >= 0 || m->tt.ix.param_slice >= 0) { /* kept: the slice cannot tell */
		m->set_hash = params_hash_of(params, m->tt.n_params * sizeof(float));
		m->set_hash_valid = true;
	}
	if (m->tt.ix.host_param_slice >= 0) /* this rank's slice of the master weights */
		return ferry_zero_host_set_params(m, params);
	if (m->tt.ix.param_slice >= 0) /* ZeRO-3: this rank's slice */
		return ferry_zero_set_params(m, params);
	ferry_status st = ferry_model_buffer_write(m, m->tt.ix.params_buffer, params, m->tt.n_params * sizeof(float));

	return st ? st : params_written(m);
}

ferry_status ferry_model_get_params(ferry_model_t m, float *params)
{
	if (m->tt.ix.host_param_slice >= 0) /* every rank's slice: a collective */
		return ferry_zero_host_get_params(m, params);
	if (m->tt.ix.param_slice >= 0) /* every rank's slice: a collective */
		return ferry_zero_get_params(m, params);
	return ferry_model_buffer_read(m, m->tt.ix.params_buffer, params, m->tt.n_params * sizeof(float));
}


ferry_status ferry_model_params_hash(ferry_model_t m, uint64_t *hash, bool *whole)
{
	const int b = m->tt.ix.params_buffer;
	const size_t n = m->tt.n_params * sizeof(float);
	char *master = ferry_model_buffer_ptr(m, b);
	const bool device = !ferry_model_buffer_on_host(m, b);
	uint64_t off, h = HASH_INIT;
	const bool file = !device && ferry_host_tiers_nvme_at(m->tt.host_tiers, master, &off);
	void *buf = NULL;
	ferry_status st;

	*hash = 0;
	*whole = m->tt.ix.host_param_slice < 0 && m->tt.ix.param_slice < 0;
	if (!*whole) {
		*whole = m->set_hash_valid;
		*hash = *whole ? m->set_hash : 0;
		return FERRY_OK;
	}
	if ((st = ferry_model_sync_all(m)) ||
	    ((device || file) && (st = ferry_host_alloc(m->be, n < HASH_CHUNK ? n : HASH_CHUNK, &buf))))
		return st;
	for (size_t at = 0; at < n && !st; at += HASH_CHUNK) {
		const size_t len = n - at < HASH_CHUNK ? n - at : HASH_CHUNK;

		if (device)
			st = ferry_model_copy_sync(m, buf, master + at, len, FERRY_COPY_D2H);
		else if (file)
			ferry_host_tiers_file_io(m->tt.host_tiers, master + at, buf, len, false, &st);
		if (!st)
			h = ferry_host_hash(h, buf ? buf : master + at, len);
	}
	ferry_host_free(m->be, buf);
	*hash = st ? 0 : h;
	return st;
}

ferry_status ferry_model_get_grads(ferry_model_t m, float *grads)
{
	if (m->tt.ix.grad_ring >= 0)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "the gradients are split over the ranks (--zero 2): each "
				   "holds its slice, no rank the whole");
	return ferry_model_buffer_read(m, m->tt.ix.grads_buffer, grads, m->tt.n_params * sizeof(float));
}

ferry_status ferry_model_set_opt_state(ferry_model_t m, const float *mom, const float *var)
{
	size_t n = m->tt.n_params * sizeof(float);

	if (m->tt.ix.shard_numel) /* this rank's slice of each */
		return ferry_zero_set_opt_state(m, mom, var);
	ferry_status st = ferry_model_buffer_write(m, m->tt.ix.mom_buffer, mom, n);

	return st ? st : ferry_model_buffer_write(m, m->tt.ix.var_buffer, var, n);
}

/* Table buffer b's n_params floats readable in place: in host memory,
 * not an NVMe file's, the streams drained.  NULL otherwise. */
static float *in_place(ferry_model_t m, int b)
{
	uint64_t off;
	void *p;

	if (b < 0 || !ferry_model_buffer_on_host(m, b))
		return NULL;
	p = ferry_model_buffer_ptr(m, b);
	if (!p || (m->tt.host_tiers && ferry_host_tiers_nvme_at(m->tt.host_tiers, p, &off)))
		return NULL;
	return ferry_model_sync_all(m) == FERRY_OK ? p : NULL;
}

const float *ferry_model_params_in_place(ferry_model_t m)
{
	if (m->tt.ix.host_param_slice >= 0 || m->tt.ix.param_slice >= 0) /* split over the ranks */
		return NULL;
	return in_place(m, m->tt.ix.params_buffer);
}

bool ferry_model_opt_state_in_place(ferry_model_t m, float **mom, float **var)
{
	if (m->tt.ix.shard_numel) /* split over the ranks */
		return false;
	*mom = in_place(m, m->tt.ix.mom_buffer);
	*var = *mom ? in_place(m, m->tt.ix.var_buffer) : NULL;
	return *mom && *var;
}

ferry_status ferry_model_get_opt_state(ferry_model_t m, float *mom, float *var)
{
	size_t n = m->tt.n_params * sizeof(float);

	if (m->tt.ix.shard_numel) /* every rank's slice: a collective */
		return ferry_zero_get_opt_state(m, mom, var);
	ferry_status st = ferry_model_buffer_read(m, m->tt.ix.mom_buffer, mom, n);

	return st ? st : ferry_model_buffer_read(m, m->tt.ix.var_buffer, var, n);
}
