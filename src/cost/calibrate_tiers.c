/*
 * The host tiers' speeds for a calibration (cost/tier_rates.c takes them):
 *
 *  - each CPU-less (CXL) node against local DRAM (the nodes with CPUs) in
 *    the same run: host<->device copies at the model's transfer sizes, and
 *    the CPU AdamW over the model's parameter count, on memory bound to the
 *    node and on memory bound to DRAM, mapped as the tiers map it; each
 *    node's factor is DRAM's time over the node's (copies: both directions
 *    alone, over every size);
 *  - the NVMe tier: writes, then reads, of the model's transfer sizes
 *    through the tier's own file I/O (nvme_file.c), in a file of at most
 *    NVME_BUDGET bytes that is unlinked as soon as it is open, so nothing is
 *    left in the directory even if calibration is killed; each size's
 *    fastest round, and the rate of one transfer of each size (the bytes
 *    over the seconds), as a layer offloads one tensor of each name.
 */
#include "cost/calibrate_tiers.h"
#include "optim/cpu_adamw.h"
#include "backend/host_tier_memory.h"
#include "tier/host_tiers_internal.h"
#include "tier/nvme_file.h"
#include "core/clock.h"
#include "core/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Copies and file transfers larger than this run at its rate (the NVMe
 * tier moves 1 MiB chunks, 8 in flight; copies are bandwidth-bound long
 * before), so tiers are measured at most at this size. */
#define TIER_MAX_XFER ((size_t)64 << 20)
/* Bytes written (and read back) to the NVMe tier in one round. */
#define NVME_BUDGET ((size_t)256 << 20)
#define NVME_MAX_COUNT 256

long ferry_calib_adamw_floats(const struct ferry_model_config *cfg)
{
	size_t np = ferry_model_config_num_params(cfg);

	return np < (1u << 20) ? 1L << 20 : np > (16u << 20) ? 16L << 20 : (long)np;
}

ferry_status ferry_calib_time_adamw(float *buf, long n, int repeats, double *best)
{
	struct ferry_cpu_adamw_args a = { .n = n, .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					  .weight_decay = 0.1f, .grad_scale = 1, .step = 1 };
	ferry_status st = FERRY_OK;

	*best = 0;
	a.param = buf, a.m = buf + n, a.v = buf + 2 * n, a.grad = buf + 3 * n;
	for (int r = 0; r <= repeats && !st; r++) { /* the first: a warm-up */
		double t0 = ferry_now_s(), s;

		st = ferry_cpu_adamw_step(&a);
		s = ferry_now_s() - t0;
		if (r > 0 && (*best == 0 || s < *best))
			*best = s;
	}
	return st;
}

/* The sizes a tier is measured at: each of sizes, at most TIER_MAX_XFER,
 * once. */
static int tier_sizes(const size_t *sizes, int n, size_t *out)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		k = ferry_calib_add_size(out, k, FERRY_CALIB_MAX_SIZES,
					 sizes[i] < TIER_MAX_XFER ? sizes[i] : TIER_MAX_XFER);
	return k;
}

/* Seconds of copies (each size once each way, alone) and of the CPU
 * AdamW, on memory of one tier. */
struct tier_time {
	double copy_s, adamw_s;
};

static size_t adamw_bytes(long adamw_n)
{
	return 4 * (size_t)adamw_n * sizeof(float);
}

/* Copies of each size and the CPU AdamW on memory bound to tier t. */
static ferry_status time_tier(ferry_backend_t be, const struct ferry_topology *topo, const struct ferry_tier *t,
			      const size_t *sizes, int n, long adamw_n, int repeats, struct tier_time *out)
{
	size_t bytes = ferry_calib_copy_host_bytes(sizes, n);
	struct ferry_calib_copy cp[FERRY_CALIB_MAX_SIZES];
	void *host = NULL, *opt = NULL;
	ferry_status st = ferry_tier_map(topo, t, be, bytes, &host);

	memset(out, 0, sizeof(*out));
	if (!st)
		st = ferry_calib_time_copies(be, host, sizes, n, repeats, cp);
	ferry_tier_unmap(be, host, bytes);
	for (int i = 0; i < n && !st; i++)
		out->copy_s += cp[i].d2h_s + cp[i].h2d_s;
	if (!st)
		st = ferry_tier_map(topo, t, NULL, adamw_bytes(adamw_n), &opt);
	if (!st)
		st = ferry_calib_time_adamw(opt, adamw_n, repeats, &out->adamw_s);
	ferry_tier_unmap(NULL, opt, adamw_bytes(adamw_n));
	return st;
}

/* Whether node nd is a CPU-less node with room for the measurement
 * (binding more than a node has would wake the OOM killer). */
static bool measurable(const struct ferry_numa_node *nd, size_t need)
{
	return nd->cpus == 0 && nd->capacity > 0 && nd->free > need + need / 4;
}

/* Each node's factors into c, the slowest node's as the tier-wide ones
 * (what a node the calibration did not see gets); c keeps its earlier
 * figures when none was measured. */
static void keep_cxl(struct ferry_calibration *c, const struct ferry_calib_cxl *x, int n)
{
	if (!n)
		return;
	c->n_cxl = n;
	for (int i = 0; i < n; i++) {
		c->cxl[i] = x[i];
		if (!i || x[i].copy < c->cxl_copy_factor)
			c->cxl_copy_factor = x[i].copy;
		if (!i || x[i].adamw < c->cxl_adamw_factor)
			c->cxl_adamw_factor = x[i].adamw;
	}
}

ferry_status ferry_calib_measure_cxl(ferry_backend_t be, ferry_host_tiers_t h, const size_t *sizes, int n,
				     long adamw_n, int repeats, struct ferry_calibration *c)
{
	const struct ferry_topology *topo = &h->topo;
	size_t sz[FERRY_CALIB_MAX_SIZES], need;
	struct ferry_calib_cxl got[FERRY_CALIB_MAX_CXL];
	struct ferry_tier dram, node;
	struct tier_time d, x;
	int k = tier_sizes(sizes, n, sz), n_got = 0, todo = 0;
	ferry_status st;

	need = ferry_calib_copy_host_bytes(sz, k);
	need = need > adamw_bytes(adamw_n) ? need : adamw_bytes(adamw_n);
	for (int i = 0; i < topo->n; i++)
		todo += measurable(&topo->node[i], need);
	if (!todo || !k)
		return FERRY_OK;
	if ((st = ferry_tier_resolve(h, "dram", &dram)) || (st = time_tier(be, topo, &dram, sz, k, adamw_n, repeats, &d)))
		return st;
	for (int i = 0; i < topo->n && n_got < FERRY_CALIB_MAX_CXL; i++) {
		char name[32];

		if (!measurable(&topo->node[i], need))
			continue;
		snprintf(name, sizeof(name), "node:%d", topo->node[i].id);
		if ((st = ferry_tier_resolve(h, name, &node)) ||
		    (st = time_tier(be, topo, &node, sz, k, adamw_n, repeats, &x)))
			return st;
		if (x.copy_s > 0 && x.adamw_s > 0 && d.copy_s > 0 && d.adamw_s > 0)
			got[n_got++] = (struct ferry_calib_cxl){ topo->node[i].id, d.copy_s / x.copy_s,
								 d.adamw_s / x.adamw_s };
	}
	keep_cxl(c, got, n_got);
	return FERRY_OK;
}

/* One round: each size written count[i] times one after the other, then
 * read back; each size's seconds a transfer in each direction, where
 * faster than an earlier round's, into best[dir][i]. */
static ferry_status nvme_round(struct ferry_nvme_file *f, char *buf, const size_t *sz, const int *count, int k,
			       double best[2][FERRY_CALIB_MAX_SIZES])
{
	ferry_status st = FERRY_OK;

	for (int dir = 0; dir < 2; dir++)
		for (int i = 0; i < k && !st; i++) {
			size_t stride = (sz[i] + FERRY_NVME_ALIGN - 1) / FERRY_NVME_ALIGN * FERRY_NVME_ALIGN;
			double t0 = ferry_now_s(), s;

			for (int j = 0; j < count[i] && !st; j++)
				st = dir ? ferry_nvme_read(f, (uint64_t)j * stride, buf, sz[i])
					 : ferry_nvme_write(f, (uint64_t)j * stride, buf, sz[i]);
			s = (ferry_now_s() - t0) / count[i];
			if (!st && (best[dir][i] == 0 || s < best[dir][i]))
				best[dir][i] = s;
		}
	return st;
}

/* The directory as an absolute path where it resolves (what info shows). */
static void keep_dir(const char *dir, struct ferry_calibration *c)
{
	char real[PATH_MAX];
	const char *p = realpath(dir, real) ? real : dir;
	size_t n = strlen(p) < sizeof(c->nvme_dir) ? strlen(p) : sizeof(c->nvme_dir) - 1;

	memcpy(c->nvme_dir, p, n);
	c->nvme_dir[n] = '\0';
}

ferry_status ferry_calib_measure_nvme(const char *dir, const size_t *sizes, int n, int repeats,
				      struct ferry_calibration *c)
{
	size_t sz[FERRY_CALIB_MAX_SIZES], max = 0;
	int k = tier_sizes(sizes, n, sz), count[FERRY_CALIB_MAX_SIZES];
	uint64_t file = 0;
	struct ferry_nvme_file *f = NULL;
	char *buf = NULL;
	double best[2][FERRY_CALIB_MAX_SIZES] = { { 0 } }, bytes = 0, secs[2] = { 0, 0 };
	ferry_status st;

	for (int i = 0; i < k; i++) {
		size_t each = NVME_BUDGET / (size_t)k / sz[i];
		uint64_t stride = (sz[i] + FERRY_NVME_ALIGN - 1) / FERRY_NVME_ALIGN * FERRY_NVME_ALIGN;

		count[i] = each < 1 ? 1 : each > NVME_MAX_COUNT ? NVME_MAX_COUNT : (int)each;
		file = stride * (uint64_t)count[i] > file ? stride * (uint64_t)count[i] : file;
		max = sz[i] > max ? sz[i] : max;
	}
	if (!k)
		return FERRY_OK;
	if (!(buf = ferry_aligned_alloc(FERRY_NVME_ALIGN, max)))
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	memset(buf, 1, max);
	st = ferry_nvme_file_create(dir, &f);
	if (!st) /* out of the directory now; its blocks go at close */
		unlink(ferry_nvme_file_path(f));
	if (!st)
		st = ferry_nvme_file_reserve(f, file);
	for (int r = 0; r < repeats && r < 3 && !st; r++)
		st = nvme_round(f, buf, sz, count, k, best);
	/* one transfer of each size, as a layer offloads one of each name */
	for (int i = 0; i < k; i++)
		bytes += (double)sz[i], secs[0] += best[0][i], secs[1] += best[1][i];
	if (!st && secs[0] > 0 && secs[1] > 0) {
		c->nvme_write_Bps = bytes / secs[0], c->nvme_read_Bps = bytes / secs[1];
		keep_dir(dir, c);
		snprintf(c->nvme_mode, sizeof(c->nvme_mode), "%s", ferry_nvme_file_mode(f));
	}
	ferry_nvme_file_close(f);
	ferry_free(buf);
	return st;
}

ferry_status ferry_calib_measure_tiers(ferry_backend_t be, ferry_host_tiers_t h, const size_t *sizes, int n,
				       long adamw_n, int repeats, struct ferry_calibration *c)
{
	ferry_status st = FERRY_OK;

	/* a simulated topology's nodes do not exist: its memory is not bound,
	 * so a figure for them would be DRAM's */
	if (!h->topo.simulated)
		st = ferry_calib_measure_cxl(be, h, sizes, n, adamw_n, repeats, c);
	if (!st && h->nvme_dir[0]) {
		ferry_status nv = ferry_calib_measure_nvme(h->nvme_dir, sizes, n, repeats, c);

		/* a full or failing directory costs the NVMe figures only: the
		 * others stand, and so do the NVMe tier's earlier ones (or the
		 * defaults); c->nvme_error says why */
		if (nv == FERRY_ERR_IO)
			snprintf(c->nvme_error, sizeof(c->nvme_error), "%s", ferry_last_error());
		else
			st = nv;
	}
	return st;
}
