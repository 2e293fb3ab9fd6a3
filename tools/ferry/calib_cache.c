/* The calibration cache from the command line: where it is, what it says. */
#include "calib_cache.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

ferry_status calib_cache_load(ferry_backend_t be, ferry_calibration_t *out, char *path, size_t path_n)
{
	char fp[512];
	ferry_status st;

	*out = NULL;
	if ((st = ferry_machine_fingerprint(be, fp, sizeof(fp))) ||
	    (st = ferry_calibration_cache_path(fp, path, path_n)))
		return st;
	return ferry_calibration_load(path, fp, out);
}

static double gbps(double bps)
{
	return bps / 1e9;
}

static const char *how(bool measured)
{
	return measured ? "measured" : "default";
}

/* Each host tier's figures, measured or the default. */
static void print_tiers(FILE *f, const struct ferry_calib_summary *s, const char *indent)
{
	fprintf(f, "%shost tier cxl: copies at %.2f (%s), the CPU AdamW at %.2f (%s) of DRAM's speed%s\n", indent,
		s->cxl_copy_factor, how(s->cxl_copy_measured), s->cxl_adamw_factor, how(s->cxl_adamw_measured),
		s->n_cxl_nodes > 1 ? " (the slowest node)" : s->n_cxl_nodes ? "" : "; no CPU-less node measured");
	for (int i = 0; i < s->n_cxl_nodes; i++)
		fprintf(f, "%s  node %d: copies at %.2f, the CPU AdamW at %.2f (measured)\n", indent,
			s->cxl_node[i].node, s->cxl_node[i].copy_factor, s->cxl_node[i].adamw_factor);
	fprintf(f, "%shost tier nvme: reads %.2f GB/s (%s), writes %.2f GB/s (%s)", indent, gbps(s->nvme_read_Bps),
		how(s->nvme_read_measured), gbps(s->nvme_write_Bps), how(s->nvme_write_measured));
	if (s->nvme_dir[0])
		fprintf(f, " in %s (%s)\n", s->nvme_dir, s->nvme_mode);
	else
		fprintf(f, "; ferry calibrate --nvme-dir DIR measures them\n");
}

/* "6.23 GB/s", or "not measured" for 0. */
static const char *rate(double bps, char *buf, size_t n)
{
	if (bps > 0)
		snprintf(buf, n, "%.2f GB/s", gbps(bps));
	else
		snprintf(buf, n, "not measured");
	return buf;
}

bool calib_busy(ferry_calibration_t c, char *why, size_t n)
{
	struct ferry_calib_summary s;
	int w = 0;

	ferry_calibration_summary(c, &s);
	why[0] = 0;
	if (s.op_spread > CALIB_BUSY_SPREAD)
		w = snprintf(why, n, "calls of one op varied by %.0f%%", s.op_spread * 100);
	if (s.others_cpu > CALIB_BUSY_OTHERS && w >= 0 && (size_t)w < n)
		snprintf(why + w, n - (size_t)w, "%sother processes took %.0f%% of the CPUs' time", w ? ", " : "",
			 s.others_cpu * 100);
	return why[0] != 0;
}

/* Each kind of collective over each number of ranks: its smallest and
 * largest size measured. */
static void print_collectives(FILE *f, const struct ferry_calib_summary *s, const char *indent)
{
	char small[FERRY_SIZE_CHARS], big[FERRY_SIZE_CHARS];

	for (int i = 0; i < s->n_coll; i++)
		fprintf(f, "%s%s over %d ranks (%s), %d sizes: %s in %.1f us .. %s in %.2f ms (%.2f GB/s)\n", indent,
			s->coll[i].kind, s->coll[i].ranks, s->coll[i].engine, s->coll[i].sizes,
			ferry_format_size(s->coll[i].small_bytes, small), s->coll[i].small_s * 1e6,
			ferry_format_size(s->coll[i].big_bytes, big), s->coll[i].big_s * 1e3,
			gbps((double)s->coll[i].big_bytes / s->coll[i].big_s));
	for (int i = 0; i < s->n_comm_step; i++) {
		double idle = s->comm_step[i].in_step_idle > 0 ? s->comm_step[i].in_step_idle : s->comm_step[i].in_step;

		fprintf(f, "%sinside data-parallel steps over %d ranks (%s): the collectives take %.1fx their time "
			   "alone beside compute (%.1fx with the compute stream idle), compute ops beside them %.2fx "
			   "theirs, the ranks ahead wait %.1f ms for the last\n",
			indent, s->comm_step[i].ranks, s->comm_step[i].engine, s->comm_step[i].in_step, idle,
			s->comm_step[i].compute_slowdown, 1e3 * s->comm_step[i].skew_s);
	}
}

void calib_print(FILE *f, ferry_calibration_t c, const char *indent)
{
	char zero[32], d2d[32], busy[160];
	struct ferry_calib_summary s;
	char when[64], size[FERRY_SIZE_CHARS];
	time_t t;

	ferry_calibration_summary(c, &s);
	t = (time_t)s.created;
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&t));
	fprintf(f, "%smachine: %s\n", indent, s.fingerprint);
	fprintf(f, "%smeasured: %s by ferry %s; %d op shapes, %d transfer sizes\n", indent, when, s.version,
		s.n_op_shapes, s.n_copy_sizes);
	fprintf(f, "%smatrix products: %.1f GFLOP/s; other ops: %.1f GFLOP/s (memory-bound)\n", indent,
		s.matmul_flops / 1e9, s.other_flops / 1e9);
	if (s.n_copy_sizes)
		fprintf(f, "%scopies of %s: device-to-host %.2f GB/s, host-to-device %.2f GB/s alone; "
			   "%.2f and %.2f GB/s both at once%s\n", indent, ferry_format_size(s.copy_bytes, size),
			gbps(s.d2h_Bps), gbps(s.h2d_Bps), gbps(s.d2h_both_Bps), gbps(s.h2d_both_Bps),
			s.shared_copy_engine ? " (one engine for both)" : "");
	/* 0: not measured (no such task in the traced steps), not infinitely slow */
	fprintf(f, "%sdevice zeroing %s, device copies %s, CPU AdamW %.1f M floats/s\n", indent,
		rate(s.zero_Bps, zero, sizeof(zero)), rate(s.d2d_Bps, d2d, sizeof(d2d)), s.adamw_floats_per_s / 1e6);
	if (s.copy_compute_slowdown > 0)
		fprintf(f, "%scompute ops beside copies take %.2fx as long\n", indent, s.copy_compute_slowdown);
	fprintf(f, "%soutside the ops: %.1f us of compute-stream gap a task, %.2f ms of host work a step\n",
		indent, s.task_gap_s * 1e6, s.step_host_s * 1e3);
	if (s.in_step_factor > 0)
		fprintf(f, "%sinside whole steps the ops take %.2fx their fastest traced call\n", indent,
			s.in_step_factor);
	fprintf(f, "%scalls of one op at one shape vary by %.0f%% (interquartile range over median)", indent,
		s.op_spread * 100);
	if (s.others_cpu > 0) /* 0: none, or too short a run to tell */
		fprintf(f, "; other processes took %.0f%% of the CPUs' time", s.others_cpu * 100);
	fprintf(f, "\n");
	if (calib_busy(c, busy, sizeof(busy)))
		fprintf(f, "%sthe machine looked busy (%s): calibrate again when it is quiet\n", indent, busy);
	print_tiers(f, &s, indent);
	print_collectives(f, &s, indent);
}

void calib_print_all(FILE *f)
{
	char path[4200], dir[4200], *slash;
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (ferry_calibration_cache_path("", path, sizeof(path)) != FERRY_OK)
		return;
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')))
		*slash = 0;
	if (!(d = opendir(dir))) {
		fprintf(f, "calibrations: none in %s (ferry calibrate makes one)\n", dir);
		return;
	}
	fprintf(f, "calibrations in %s:\n", dir);
	while ((e = readdir(d))) {
		ferry_calibration_t c;

		size_t len = strlen(e->d_name);

		/* calibration-<hash>.json, not its .lock */
		if (strncmp(e->d_name, "calibration-", 12) || len < 5 || strcmp(e->d_name + len - 5, ".json") ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path))
			continue;
		n++;
		fprintf(f, "  %s:\n", e->d_name);
		if (ferry_calibration_load(path, NULL, &c) != FERRY_OK) {
			fprintf(f, "    refused: %s\n", ferry_last_error());
			continue;
		}
		calib_print(f, c, "    ");
		ferry_calibration_free(c);
	}
	closedir(d);
	if (!n)
		fprintf(f, "  none (ferry calibrate makes one)\n");
}
