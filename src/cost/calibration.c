/*
 * Calibrations (cost/calibration.h): the tables, task durations looked up
 * in them, the machine's fingerprint, and the cache file (JSON).
 */
#include "cost/calibration.h"
#include "core/error.h"
#include "ferry/platform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ferry_calibration *ferry_calib_new(void)
{
	struct ferry_calibration *c = ferry_calloc(1, sizeof(*c));

	if (c) {
		snprintf(c->version, sizeof(c->version), "%s", FERRY_VERSION_STRING);
		c->created = (long long)time(NULL);
	}
	return c;
}

void ferry_calibration_free(ferry_calibration_t c)
{
	if (!c)
		return;
	ferry_free(c->ops);
	ferry_free(c);
}

static bool same_shape(const struct ferry_calib_op *e, const struct ferry_op_call *k)
{
	return e->kind == k->kind && e->backward == k->backward && e->B == k->B && e->T == k->T && e->C == k->C &&
	       e->NH == k->NH && e->OC == k->OC && e->V == k->V && e->Vp == k->Vp && e->NKV == k->NKV && e->n == k->n;
}

static struct ferry_op_call shape_of(const struct ferry_calib_op *op)
{
	struct ferry_op_call k;

	memset(&k, 0, sizeof(k));
	k.kind = op->kind;
	k.backward = op->backward;
	k.B = op->B, k.T = op->T, k.C = op->C, k.NH = op->NH, k.OC = op->OC;
	k.V = op->V, k.Vp = op->Vp, k.NKV = op->NKV, k.n = op->n;
	return k;
}

const struct ferry_calib_op *ferry_calib_find(const struct ferry_calibration *c, const struct ferry_op_call *call)
{
	for (int i = 0; i < c->n_ops; i++)
		if (same_shape(&c->ops[i], call))
			return &c->ops[i];
	return NULL;
}

ferry_status ferry_calib_add_op(struct ferry_calibration *c, const struct ferry_calib_op *op)
{
	struct ferry_op_call k = shape_of(op);
	struct ferry_calib_op *e = (struct ferry_calib_op *)ferry_calib_find(c, &k);

	if (e) {
		*e = *op;
		return FERRY_OK;
	}
	if (c->n_ops == c->cap_ops) {
		int cap = c->cap_ops ? 2 * c->cap_ops : 64;
		struct ferry_calib_op *n = ferry_calloc((size_t)cap, sizeof(*n));

		if (!n)
			return ferry_error(FERRY_ERR_NOMEM, "calibration: out of host memory");
		if (c->n_ops)
			memcpy(n, c->ops, (size_t)c->n_ops * sizeof(*n));
		ferry_free(c->ops);
		c->ops = n;
		c->cap_ops = cap;
	}
	c->ops[c->n_ops++] = *op;
	return FERRY_OK;
}

void ferry_calib_add_copy(struct ferry_calibration *c, const struct ferry_calib_copy *cp)
{
	for (int i = 0; i < c->n_copy; i++)
		if (c->copy[i].bytes == cp->bytes) {
			c->copy[i] = *cp;
			return;
		}
	if (c->n_copy < FERRY_CALIB_MAX_COPY)
		c->copy[c->n_copy++] = *cp;
}

/* An op's kind and direction, over every shape measured: seconds per FLOP
 * (or per call, for ops without FLOPs). */
static double kind_estimate(const struct ferry_calibration *c, const struct ferry_op_call *call)
{
	double s = 0, f = 0, want = ferry_op_flops(call);
	int calls = 0;

	for (int i = 0; i < c->n_ops; i++)
		if (c->ops[i].kind == call->kind && c->ops[i].backward == call->backward) {
			s += c->ops[i].seconds;
			f += c->ops[i].flops;
			calls++;
		}
	if (!calls)
		return 0;
	return f > 0 && want > 0 ? s / f * want : s / calls;
}

double ferry_calib_copy_seconds(const struct ferry_calibration *c, size_t bytes, enum ferry_copy_kind k, bool both)
{
	const struct ferry_calib_copy *best = NULL;
	double s;

	for (int i = 0; i < c->n_copy; i++)
		if (!best || fabs(log((double)c->copy[i].bytes / (double)bytes)) <
				     fabs(log((double)best->bytes / (double)bytes)))
			best = &c->copy[i];
	if (!best || !bytes)
		return 0;
	if (k == FERRY_COPY_D2H)
		s = both ? best->d2h_both_s : best->d2h_s;
	else
		s = both ? best->h2d_both_s : best->h2d_s;
	return s * (double)bytes / (double)best->bytes;
}

double ferry_calib_both_slowdown(const struct ferry_calibration *c)
{
	double r[2 * FERRY_CALIB_MAX_COPY];
	int n = 0;

	for (int i = 0; i < c->n_copy; i++) {
		if (c->copy[i].d2h_s > 0)
			r[n++] = c->copy[i].d2h_both_s / c->copy[i].d2h_s;
		if (c->copy[i].h2d_s > 0)
			r[n++] = c->copy[i].h2d_both_s / c->copy[i].h2d_s;
	}
	if (!n)
		return 1;
	for (int i = 1; i < n; i++) /* insertion sort: a few dozen at most */
		for (int j = i; j > 0 && r[j] < r[j - 1]; j--) {
			double x = r[j];

			r[j] = r[j - 1];
			r[j - 1] = x;
		}
	return fmax(1, n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2);
}

double ferry_calib_task_seconds(const struct ferry_calibration *c, const struct ferry_task *t, bool *estimated)
{
	/* what the traced slices measured runs slower inside a whole step */
	const double in_step = c->in_step_factor > 0 ? c->in_step_factor : 1;
	const struct ferry_calib_op *e;

	switch (t->kind) {
	case FERRY_TASK_OP:
		if ((e = ferry_calib_find(c, &t->call)))
			return in_step * e->seconds;
		*estimated = true;
		return in_step * kind_estimate(c, &t->call);
	case FERRY_TASK_COPY:
		if (t->copy_kind == FERRY_COPY_D2D)
			return c->d2d_Bps > 0 ? in_step * (double)t->bytes / c->d2d_Bps : 0;
		return ferry_calib_copy_seconds(c, t->bytes, t->copy_kind, false);
	case FERRY_TASK_ZERO:
		return c->zero_Bps > 0 ? in_step * (double)t->bytes / c->zero_Bps : 0;
	case FERRY_TASK_HOST:
		return c->adamw_floats_per_s > 0 ? (double)t->call.n / c->adamw_floats_per_s : 0;
	case FERRY_TASK_FILE:
		/* a host copy of its bytes here, which the prediction replaces by
		 * the NVMe tier's rates (auto/predict.c); estimated when those are
		 * the defaults */
		*estimated |= !(c->nvme_read_Bps > 0 && c->nvme_write_Bps > 0);
		return ferry_calib_copy_seconds(c, t->bytes, t->copy_kind, false);
	default:
		return 0;
	}
}

double ferry_calib_task_seconds_docs(const struct ferry_calibration *c, const struct ferry_task *t, int doc_tokens,
				     bool *estimated)
{
	const double s = ferry_calib_task_seconds(c, t, estimated);
	const int T = t->call.T, W = (int)t->call.scalar[0];
	int32_t *pos;
	double full, docs;

	if (t->kind != FERRY_TASK_OP || t->call.kind != FERRY_OP_ATTENTION || doc_tokens <= 0 || doc_tokens >= T)
		return s;
	/* one row of back-to-back documents (every row alike) */
	if (!(pos = ferry_calloc((size_t)T, sizeof(int32_t))))
		return s;
	for (int i = 0; i < T; i++)
		pos[i] = i % doc_tokens;
	full = ferry_op_attention_pairs(NULL, 1, T, W);
	docs = ferry_op_attention_pairs(pos, 1, T, W);
	ferry_free(pos);
	return full > 0 ? s * docs / full : s;
}

/* The host tiers' figures, measured or the defaults. */
static void tier_summary(const struct ferry_calibration *c, struct ferry_calib_summary *out)
{
	out->cxl_copy_measured = c->cxl_copy_factor > 0;
	out->cxl_adamw_measured = c->cxl_adamw_factor > 0;
	out->cxl_copy_factor = out->cxl_copy_measured ? c->cxl_copy_factor : FERRY_TIER_CXL_COPY;
	out->cxl_adamw_factor = out->cxl_adamw_measured ? c->cxl_adamw_factor : FERRY_TIER_CXL_ADAMW;
	for (int i = 0; i < c->n_cxl && out->n_cxl_nodes < (int)(sizeof(out->cxl_node) / sizeof(out->cxl_node[0]));
	     i++) {
		out->cxl_node[out->n_cxl_nodes].node = c->cxl[i].node;
		out->cxl_node[out->n_cxl_nodes].copy_factor = c->cxl[i].copy;
		out->cxl_node[out->n_cxl_nodes++].adamw_factor = c->cxl[i].adamw;
	}
	out->nvme_read_measured = c->nvme_read_Bps > 0;
	out->nvme_write_measured = c->nvme_write_Bps > 0;
	out->nvme_read_Bps = out->nvme_read_measured ? c->nvme_read_Bps : FERRY_TIER_NVME_READ_BPS;
	out->nvme_write_Bps = out->nvme_write_measured ? c->nvme_write_Bps : FERRY_TIER_NVME_WRITE_BPS;
	snprintf(out->nvme_dir, sizeof(out->nvme_dir), "%s", c->nvme_dir);
	snprintf(out->nvme_mode, sizeof(out->nvme_mode), "%s", c->nvme_mode);
	snprintf(out->nvme_error, sizeof(out->nvme_error), "%s", c->nvme_error);
}

/* The collectives, one line a kind, engine and number of ranks. */
static void coll_summary(const struct ferry_calibration *c, struct ferry_calib_summary *out)
{
	const int max = (int)(sizeof(out->coll) / sizeof(out->coll[0]));

	for (int i = 0; i < c->n_coll; i++) {
		const struct ferry_calib_coll *e = &c->coll[i];
		const char *kind = ferry_calib_coll_name(e->kind);
		int g = 0;

		while (g < out->n_coll && (strcmp(out->coll[g].kind, kind) || strcmp(out->coll[g].engine, e->engine) ||
					   out->coll[g].ranks != e->ranks))
			g++;
		if (g == max)
			continue;
		if (g == out->n_coll) {
			out->n_coll++;
			snprintf(out->coll[g].kind, sizeof(out->coll[g].kind), "%s", kind);
			snprintf(out->coll[g].engine, sizeof(out->coll[g].engine), "%s", e->engine);
			out->coll[g].ranks = e->ranks;
			out->coll[g].small_bytes = out->coll[g].big_bytes = e->bytes;
			out->coll[g].small_s = out->coll[g].big_s = e->seconds;
		}
		out->coll[g].sizes++;
		if (e->bytes < out->coll[g].small_bytes)
			out->coll[g].small_bytes = e->bytes, out->coll[g].small_s = e->seconds;
		if (e->bytes > out->coll[g].big_bytes)
			out->coll[g].big_bytes = e->bytes, out->coll[g].big_s = e->seconds;
	}
}

static void comm_step_summary(const struct ferry_calibration *c, struct ferry_calib_summary *out)
{
	for (int i = 0; i < c->n_comm_step && i < (int)(sizeof(out->comm_step) / sizeof(out->comm_step[0])); i++) {
		snprintf(out->comm_step[i].engine, sizeof(out->comm_step[i].engine), "%s", c->comm_step[i].engine);
		out->comm_step[i].ranks = c->comm_step[i].ranks;
		out->comm_step[i].in_step = c->comm_step[i].in_step;
		out->comm_step[i].in_step_idle = c->comm_step[i].in_step_idle;
		out->comm_step[i].compute_slowdown = c->comm_step[i].compute_slowdown;
		out->comm_step[i].skew_s = c->comm_step[i].skew_s;
		out->n_comm_step = i + 1;
	}
}

void ferry_calibration_summary(ferry_calibration_t c, struct ferry_calib_summary *out)
{
	const struct ferry_calib_copy *big = NULL;
	double mm_s = 0, mm_f = 0, o_s = 0, o_f = 0;

	memset(out, 0, sizeof(*out));
	snprintf(out->fingerprint, sizeof(out->fingerprint), "%s", c->fingerprint);
	snprintf(out->version, sizeof(out->version), "%s", c->version);
	out->created = c->created;
	out->n_op_shapes = c->n_ops;
	out->n_copy_sizes = c->n_copy;
	for (int i = 0; i < c->n_copy; i++)
		if (!big || c->copy[i].bytes > big->bytes)
			big = &c->copy[i];
	if (big) {
		double b = (double)big->bytes;

		out->copy_bytes = big->bytes;
		out->d2h_Bps = big->d2h_s > 0 ? b / big->d2h_s : 0;
		out->h2d_Bps = big->h2d_s > 0 ? b / big->h2d_s : 0;
		out->d2h_both_Bps = big->d2h_both_s > 0 ? b / big->d2h_both_s : 0;
		out->h2d_both_Bps = big->h2d_both_s > 0 ? b / big->h2d_both_s : 0;
	}
	out->shared_copy_engine = ferry_calib_both_slowdown(c) >= 1.9;
	for (int i = 0; i < c->n_ops; i++) {
		bool mm = c->ops[i].kind == FERRY_OP_MATMUL;

		*(mm ? &mm_s : &o_s) += c->ops[i].seconds;
		*(mm ? &mm_f : &o_f) += c->ops[i].flops;
	}
	out->matmul_flops = mm_s > 0 ? mm_f / mm_s : 0;
	out->other_flops = o_s > 0 ? o_f / o_s : 0;
	out->d2d_Bps = c->d2d_Bps;
	out->zero_Bps = c->zero_Bps;
	out->adamw_floats_per_s = c->adamw_floats_per_s;
	out->op_spread = c->op_spread;
	out->others_cpu = c->others_cpu;
	out->copy_compute_slowdown = c->copy_compute_slowdown;
	out->task_gap_s = c->task_gap_s;
	out->step_host_s = c->step_host_s;
	out->in_step_factor = c->in_step_factor;
	tier_summary(c, out);
	coll_summary(c, out);
	comm_step_summary(c, out);
}

/* ---- where it is valid, where it is kept ------------------------------------------- */

ferry_status ferry_machine_fingerprint(ferry_backend_t be, char *buf, size_t n)
{
	char dev[256];
	char *cut;
	double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);

	snprintf(dev, sizeof(dev), "%s", ferry_backend_description(be));
	if ((cut = strstr(dev, ", device arena"))) /* the arena is a choice, not the machine */
		*cut = 0;
	if ((size_t)snprintf(buf, n, "cpu=%s;cores=%d;mem=%.1fGiB;backend=%s;device=%s;ferry=%s;kernels=%d",
			     ferry_cpu_name(), ferry_cpu_count(), mem / 1073741824.0, ferry_backend_name(be), dev,
			     FERRY_VERSION_STRING, FERRY_KERNELS_REVISION) >= n)
		return ferry_error(FERRY_ERR_INVALID, "fingerprint: buffer too small");
	return FERRY_OK;
}

ferry_status ferry_calibration_cache_path(const char *fingerprint, char *buf, size_t n)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	int w;

	for (const char *p = fingerprint; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	if (xdg && xdg[0] == '/')
		w = snprintf(buf, n, "%s/ferry/calibration-%016llx.json", xdg, (unsigned long long)h);
	else if (home && home[0])
		w = snprintf(buf, n, "%s/.cache/ferry/calibration-%016llx.json", home, (unsigned long long)h);
	else
		return ferry_error(FERRY_ERR_INVALID, "calibration cache: neither XDG_CACHE_HOME nor HOME is set");
	if (w < 0 || (size_t)w >= n)
		return ferry_error(FERRY_ERR_INVALID, "calibration cache: path too long");
	return FERRY_OK;
}
