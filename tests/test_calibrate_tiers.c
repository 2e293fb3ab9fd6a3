/*
 * The host tiers' calibration (cost/calibrate_tiers.c, cost/tier_rates.c):
 *  - tier speeds from a calibration on a simulated topology (node 0 with
 *    CPUs, nodes 1 and 2 without, node 3 without and not measured): each
 *    node at its own factors, a striped tier at its slowest share, a node
 *    the calibration did not see at the slowest node's, the defaults and
 *    `measured` false without figures, the NVMe tier at its rates;
 *  - the CXL measurement on a simulated topology (unbound memory: the
 *    factors are DRAM against DRAM, so only > 0 and finite): one entry per
 *    CPU-less node with room, the tier-wide factors the slowest node's, a
 *    node with too little free memory skipped;
 *  - ferry_calibrate with host tiers (simulated, with an NVMe directory):
 *    no CXL figure (simulated nodes do not exist), positive NVMe rates, the
 *    directory recorded and left empty; the figures survive the cache file
 *    and a later calibration without tiers; an NVMe directory that does not
 *    exist is an error;
 *  - the prediction takes the NVMe rates: slower rates, a longer step, and
 *    the file I/O counted as estimated only without calibrated rates.
 */
#include "test_util.h"
#include "cost/calibrate_tiers.h"
#include "tier/host_tiers_internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static struct ferry_model_config cfg = { .arch = "gpt2", .max_seq = 32, .vocab = 257, .layers = 2, .heads = 2,
					 .channels = 32 };
static const int B = 2, T = 16;

/* Host tiers on the simulated topology `text`, with nvme_dir (NULL: none)
 * and spec (NULL: all auto). */
static ferry_host_tiers_t tiers(const char *text, const char *nvme_dir, const char *spec)
{
	char path[300];
	FILE *f;
	struct ferry_host_tiers_opts o = { .spec = spec, .topology_file = path, .nvme_dir = nvme_dir };
	struct ferry_places stream; /* AdamW streamed: the weights and its state may live on NVMe */
	ferry_host_tiers_t h = NULL;

	ferry_places_default(&stream);
	if (ferry_places_parse("adam=host:stream", &stream) != FERRY_OK)
		return NULL;
	ferry_places_host_use(&stream, &o.cpu_kinds, &o.copied_kinds);

	snprintf(path, sizeof(path), "%s/topology.txt", dir);
	if (!(f = fopen(path, "w")))
		return NULL;
	fputs(text, f);
	fclose(f);
	if (ferry_host_tiers_create(&o, &h) != FERRY_OK)
		fprintf(stderr, "tiers: %s\n", ferry_last_error());
	return h;
}

static const char *const TOPO = "node 0 cpus 2 mem 64G\nnode 1 cpus 0 mem 64G\nnode 2 cpus 0 mem 64G\n"
				"node 3 cpus 0 mem 64G\n";

static void rate_of(const struct ferry_calibration *c, ferry_host_tiers_t h, const char *name,
		    struct ferry_tier_rate *r)
{
	struct ferry_tier t;

	CHECK(ferry_tier_resolve(h, name, &t) == FERRY_OK, "%s: %s", name, ferry_last_error());
	ferry_calib_tier_rate(c, &h->topo, &t, r);
}

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static void tier_speeds(void)
{
	ferry_host_tiers_t h = tiers(TOPO, dir, NULL);
	struct ferry_calibration *c = ferry_calib_new();
	struct ferry_tier_rate r;

	CHECK(h && c, "setup");
	if (!h || !c)
		return;
	rate_of(c, h, "node:1", &r);
	CHECK(NEAR(r.copy, FERRY_TIER_CXL_COPY) && NEAR(r.adamw, FERRY_TIER_CXL_ADAMW) && !r.measured,
	      "no figures: the defaults, not measured (%g %g %d)", r.copy, r.adamw, r.measured);
	rate_of(c, h, "nvme", &r);
	CHECK(NEAR(r.read_Bps, FERRY_TIER_NVME_READ_BPS) && !r.measured, "nvme: the default rates");
	c->cxl[0] = (struct ferry_calib_cxl){ 1, 0.8, 0.5 };
	c->cxl[1] = (struct ferry_calib_cxl){ 2, 0.4, 0.2 };
	c->n_cxl = 2, c->cxl_copy_factor = 0.4, c->cxl_adamw_factor = 0.2;
	c->nvme_read_Bps = 3e9, c->nvme_write_Bps = 1.5e9;
	rate_of(c, h, "node:1", &r);
	CHECK(NEAR(r.copy, 0.8) && NEAR(r.adamw, 0.5) && r.measured, "node 1 at its own: %g %g", r.copy, r.adamw);
	rate_of(c, h, "node:2", &r);
	CHECK(NEAR(r.copy, 0.4) && NEAR(r.adamw, 0.2) && r.measured, "node 2 at its own: %g %g", r.copy, r.adamw);
	rate_of(c, h, "node:3", &r);
	CHECK(NEAR(r.copy, 0.4) && NEAR(r.adamw, 0.2) && r.measured, "node 3, not seen: the slowest's: %g %g", r.copy,
	      r.adamw);
	/* half on each of nodes 1 and 2: as long as the slower half */
	rate_of(c, h, "interleave:1+2", &r);
	CHECK(NEAR(r.copy, 0.8) && NEAR(r.adamw, 0.4), "striped over 1 and 2: %g %g", r.copy, r.adamw);
	rate_of(c, h, "dram", &r);
	CHECK(NEAR(r.copy, 1) && NEAR(r.adamw, 1), "dram: 1");
	rate_of(c, h, "nvme", &r);
	CHECK(NEAR(r.read_Bps, 3e9) && NEAR(r.write_Bps, 1.5e9) && r.measured, "nvme at its rates");
	ferry_calibration_free(c);
	ferry_host_tiers_free(h);
}

static bool finite_pos(double x)
{
	return x > 0 && isfinite(x);
}

static void cxl_measure(ferry_backend_t be)
{
	const size_t sizes[] = { 64 << 10, 1 << 20 };
	ferry_host_tiers_t h = tiers(TOPO, NULL, NULL);
	struct ferry_calibration *c = ferry_calib_new();

	CHECK(h && c && ferry_calib_measure_cxl(be, h, sizes, 2, 1 << 20, 1, c) == FERRY_OK, "measure: %s",
	      ferry_last_error());
	CHECK(c && c->n_cxl == 3 && c->cxl[0].node == 1 && c->cxl[1].node == 2 && c->cxl[2].node == 3,
	      "one entry per CPU-less node: %d", c ? c->n_cxl : -1);
	for (int i = 0; c && i < c->n_cxl; i++) {
		CHECK(finite_pos(c->cxl[i].copy) && finite_pos(c->cxl[i].adamw), "node %d: %g %g", c->cxl[i].node,
		      c->cxl[i].copy, c->cxl[i].adamw);
		CHECK(c->cxl_copy_factor <= c->cxl[i].copy && c->cxl_adamw_factor <= c->cxl[i].adamw,
		      "the tier-wide factors are the slowest node's");
	}
	ferry_calibration_free(c);
	ferry_host_tiers_free(h);
	/* node 2 has too little free memory for the measurement: skipped */
	h = tiers("node 0 cpus 2 mem 64G\nnode 1 cpus 0 mem 64G\nnode 2 cpus 0 mem 64G free 1M\n", NULL, NULL);
	c = ferry_calib_new();
	CHECK(h && c && ferry_calib_measure_cxl(be, h, sizes, 2, 1 << 20, 1, c) == FERRY_OK && c->n_cxl == 1 &&
	      c->cxl[0].node == 1, "a node without room is skipped: %d", c ? c->n_cxl : -1);
	ferry_calibration_free(c);
	ferry_host_tiers_free(h);
}

static int entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return d ? n : -1;
}

/* ferry_calibrate with tiers, the cache file, and a later calibration. */
static ferry_calibration_t calibrate_with_tiers(ferry_backend_t be, const char *nvme)
{
	ferry_host_tiers_t h = tiers(TOPO, nvme, NULL);
	struct ferry_exec_opts o = { .policy = "nothing_saveable", .host_tiers = h };
	ferry_calibration_t c = NULL, again = NULL, back = NULL;
	char file[300];

	CHECK(h && ferry_calibrate(be, &cfg, B, T, &o, 1, NULL, &c) == FERRY_OK, "calibrate: %s", ferry_last_error());
	if (!c)
		return NULL;
	CHECK(c->n_cxl == 0 && c->cxl_copy_factor == 0 && c->cxl_adamw_factor == 0, "simulated nodes: not measured");
	CHECK(finite_pos(c->nvme_read_Bps) && finite_pos(c->nvme_write_Bps), "nvme: %g %g", c->nvme_read_Bps,
	      c->nvme_write_Bps);
	CHECK(strstr(c->nvme_dir, "nvme") && c->nvme_mode[0], "the directory and mode kept: %s (%s)", c->nvme_dir,
	      c->nvme_mode);
	CHECK(entries(nvme) == 0, "the NVMe directory is left empty: %d entries", entries(nvme));
	/* a node's figures (as a machine with CXL would have them) too */
	c->cxl[0] = (struct ferry_calib_cxl){ 1, 0.6, 0.3 };
	c->n_cxl = 1, c->cxl_copy_factor = 0.6, c->cxl_adamw_factor = 0.3;
	snprintf(file, sizeof(file), "%s/calibration.json", dir);
	CHECK(ferry_calibration_save(c, file) == FERRY_OK && ferry_calibration_load(file, c->fingerprint, &back) ==
	      FERRY_OK, "save and load: %s", ferry_last_error());
	CHECK(back && back->n_cxl == 1 && back->cxl[0].node == 1 && NEAR(back->cxl[0].copy, 0.6) &&
	      NEAR(back->cxl_adamw_factor, 0.3) && back->nvme_read_Bps == c->nvme_read_Bps &&
	      !strcmp(back->nvme_dir, c->nvme_dir) && !strcmp(back->nvme_mode, c->nvme_mode), "the cache keeps them");
	o.host_tiers = NULL;
	CHECK(ferry_calibrate(be, &cfg, B, T, &o, 1, back, &again) == FERRY_OK && again->n_cxl == 1 &&
	      NEAR(again->cxl_copy_factor, 0.6) && again->nvme_write_Bps == c->nvme_write_Bps,
	      "a calibration without tiers keeps the earlier figures: %s", ferry_last_error());
	ferry_calibration_free(again);
	ferry_calibration_free(back);
	ferry_host_tiers_free(h);
	return c;
}

/* The prediction with the NVMe tier holding the offloaded activations. */
static void predict_on_nvme(struct ferry_calibration *c, const char *nvme)
{
	ferry_host_tiers_t h = tiers(TOPO, nvme, "activations=nvme");
	struct ferry_exec_opts o = { .policy = "minimal_offloaded", .host_tiers = h };
	struct ferry_prediction fast, slow, dflt;
	double rd = c->nvme_read_Bps, wr = c->nvme_write_Bps;

	c->nvme_read_Bps = c->nvme_write_Bps = 1e12;
	CHECK(h && ferry_model_predict(&cfg, B, T, &o, c, &fast) == FERRY_OK, "predict: %s", ferry_last_error());
	c->nvme_read_Bps = c->nvme_write_Bps = 1e6;
	CHECK(ferry_model_predict(&cfg, B, T, &o, c, &slow) == FERRY_OK && slow.step_s > fast.step_s,
	      "slower NVMe, a longer step: %g vs %g", slow.step_s, fast.step_s);
	c->nvme_read_Bps = c->nvme_write_Bps = 0;
	CHECK(ferry_model_predict(&cfg, B, T, &o, c, &dflt) == FERRY_OK && dflt.estimated_ops > slow.estimated_ops,
	      "file I/O estimated only at the default rates: %d vs %d", dflt.estimated_ops, slow.estimated_ops);
	c->nvme_read_Bps = rd, c->nvme_write_Bps = wr;
	CHECK(entries(nvme) == 0, "predicting makes no file");
	ferry_host_tiers_free(h);
}

int main(void)
{
	char nvme[300], missing[300];
	ferry_backend_t be;
	ferry_calibration_t c;

	snprintf(dir, sizeof(dir), "/tmp/ferry-calib-tiers-XXXXXX");
	if (!mkdtemp(dir) || ferry_model_config_complete(&cfg) ||
	    ferry_backend_open("cpu", &(struct ferry_backend_opts){ .threads = 1 }, &be)) {
		fprintf(stderr, "setup: %s\n", ferry_last_error());
		return 1;
	}
	snprintf(nvme, sizeof(nvme), "%s/nvme", dir);
	snprintf(missing, sizeof(missing), "%s/missing", dir);
	mkdir(nvme, 0700);
	tier_speeds();
	cxl_measure(be);
	if ((c = calibrate_with_tiers(be, nvme)))
		predict_on_nvme(c, nvme);
	{
		const size_t sizes[] = { 1 << 20 };
		struct ferry_calibration *x = ferry_calib_new();

		CHECK(ferry_calib_measure_nvme(missing, sizes, 1, 1, x) != FERRY_OK && x->nvme_read_Bps == 0 &&
		      entries(missing) < 0, "a missing directory: an error, nothing made");
		ferry_calibration_free(x);
	}
	ferry_calibration_free(c);
	ferry_backend_close(be);
	{
		char cmd[400];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", dir);
	}
	return test_exit_code();
}
