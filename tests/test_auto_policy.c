/*
 * --policy auto (ferry_policy_auto) on a small GPT-2, calibrated on the
 * CPU backend, under device capacities from roomy to too small:
 *  - what it picks fits: its plan, made again independently, is within the
 *    capacity; below the least any placement needs it refuses;
 *  - it is never predicted slower than the best preset that fits (each
 *    preset predicted again here), and its own prediction is reproducible;
 *  - with copies made very slow it offloads nothing; with copies free it
 *    offloads where memory is tight (recomputation costs time, free copies
 *    do not);
 *  - tiles of tokens (MLP, loss) are one more choice: below the least any
 *    untiled placement needs it tiles, and fits; tiles given are kept;
 *  - on host tiers of a simulated topology (a node with CPUs, one without:
 *    CXL), it also chooses each kind's tier: with ample DRAM the streamed
 *    state stays in DRAM (the default would put it on CXL, slower); with
 *    DRAM too small for AdamW's state it spills to CXL and the placement
 *    fits; it is never predicted slower than the default placement; with
 *    no tier large enough it refuses, saying why.
 */
#include "ferry/cost.h"
#include "ferry/model.h"
#include "ferry/policy.h"
#include "cost/calibration.h"
#include "test_util.h"

#include <stdlib.h>
#include <unistd.h>

static struct ferry_model_config cfg = { .arch = "gpt2", .max_seq = 64, .vocab = 257, .layers = 8, .heads = 2,
					 .channels = 32 };
static const int B = 4, T = 32;

static size_t peak_tiled(const char *policy, int mlp_tile, int loss_tile)
{
	struct ferry_exec_opts o = { .policy = policy, .mlp_tile = mlp_tile, .loss_tile = loss_tile };
	struct ferry_plan plan;

	if (ferry_model_plan(&cfg, B, T, &o, &plan) != FERRY_OK)
		return 0;
	return plan.mem.peak_bytes;
}

static size_t peak_of(const char *policy)
{
	return peak_tiled(policy, 0, 0);
}

/* The best prediction over the presets that fit (0: none fits). */
static double best_preset(ferry_calibration_t c, size_t cap)
{
	double best = 0;

	for (int i = 0; i < ferry_policy_preset_count(); i++) {
		struct ferry_exec_opts o = { .policy = ferry_policy_preset_name(i) };
		struct ferry_prediction p;

		if (ferry_model_predict(&cfg, B, T, &o, c, &p) == FERRY_OK && p.device_peak_bytes <= cap &&
		    (best == 0 || p.step_s < best))
			best = p.step_s;
	}
	return best;
}

static int offloaded(const struct ferry_auto_result *r)
{
	int n = 0;

	for (int i = 0; i < r->n; i++)
		n += r->c[i].needed && r->c[i].place == FERRY_PLACE_OFFLOAD;
	return n;
}

static void fits_and_beats_presets(ferry_calibration_t c, size_t cap)
{
	static struct ferry_auto_result r;
	struct ferry_exec_opts o = { 0 };
	struct ferry_prediction again;
	double best = best_preset(c, cap);

	CHECK(ferry_policy_auto(&cfg, B, T, &o, cap, 0, c, &r) == FERRY_OK, "cap %zu: %s", cap, ferry_last_error());
	CHECK(r.fits && peak_tiled(r.policy, r.mlp_tile, r.loss_tile) > 0 &&
	      peak_tiled(r.policy, r.mlp_tile, r.loss_tile) <= cap, "cap %zu: %s needs %zu", cap, r.policy,
	      peak_tiled(r.policy, r.mlp_tile, r.loss_tile));
	CHECK(best > 0 && r.pred.step_s <= best * 1.03, "cap %zu: auto %g s, best preset %g s", cap, r.pred.step_s, best);
	o.policy = r.policy, o.mlp_tile = r.mlp_tile, o.loss_tile = r.loss_tile;
	CHECK(ferry_model_predict(&cfg, B, T, &o, c, &again) == FERRY_OK && again.step_s == r.pred.step_s,
	      "cap %zu: the prediction of %s again: %g, was %g", cap, r.policy, again.step_s, r.pred.step_s);
	CHECK(r.evaluations > r.n_presets, "cap %zu: searched beyond the presets (%d)", cap, r.evaluations);
}

static void scale_copies(struct ferry_calibration *c, double f)
{
	for (int i = 0; i < c->n_copy; i++) {
		c->copy[i].d2h_s *= f, c->copy[i].h2d_s *= f;
		c->copy[i].d2h_both_s *= f, c->copy[i].h2d_both_s *= f;
	}
}

/* Host tiers on a simulated topology: node 0 with CPUs and dram_free
 * bytes free, node 1 without CPUs (CXL) with cxl_free. */
static ferry_host_tiers_t tiers(enum ferry_optim_place optimizer, unsigned long long dram_free,
				unsigned long long cxl_free)
{
	char path[] = "/tmp/ferry-auto-topology-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	struct ferry_host_tiers_opts o = { .topology_file = path };
	ferry_host_tiers_t h = NULL;

	ferry_optim_host_use(optimizer, &o.cpu_kinds, &o.copied_kinds);

	if (!f)
		return NULL;
	fprintf(f, "node 0 cpus 2 mem 64G free %llu\nnode 1 cpus 0 mem 64G free %llu\n", dram_free, cxl_free);
	fclose(f);
	if (ferry_host_tiers_create(&o, &h) != FERRY_OK)
		fprintf(stderr, "tiers: %s\n", ferry_last_error());
	unlink(path);
	return h;
}

/* The host bytes of each kind for optimizer placement `place`. */
static void kind_bytes(enum ferry_optim_place place, unsigned long long out[FERRY_HOST_KINDS])
{
	struct ferry_exec_opts o = { .policy = "everything_saveable", .optimizer = place };
	struct ferry_plan plan;

	size_t bytes[FERRY_HOST_KINDS];

	memset(out, 0, sizeof(unsigned long long) * FERRY_HOST_KINDS);
	if (ferry_model_plan(&cfg, B, T, &o, &plan) == FERRY_OK) {
		ferry_plan_host_kinds(&plan, bytes);
		for (int k = 0; k < FERRY_HOST_KINDS; k++)
			out[k] = bytes[k];
	}
}

static const char *chosen(const struct ferry_auto_result *r, enum ferry_host_kind k)
{
	const struct ferry_auto_tier_kind *kd = &r->tiers.kind[k];

	return kd->chosen >= 0 ? kd->opt[kd->chosen].name : "(none)";
}

/* The choice as the tiers now place it: predicted again, fits. */
static void placed_fits(ferry_calibration_t c, ferry_host_tiers_t h, const struct ferry_auto_result *r)
{
	struct ferry_exec_opts o = { .policy = r->policy, .optimizer = r->optimizer,
				     .offload_params = r->offload_params, .host_tiers = h };
	struct ferry_prediction p;

	CHECK(ferry_model_predict(&cfg, B, T, &o, c, &p) == FERRY_OK && p.host_fits, "the choice fits its tiers: %s",
	      ferry_last_error());
	CHECK(fabs(p.step_s - r->pred.step_s) <= 1e-9 * r->pred.step_s, "predicted again %g, was %g", p.step_s,
	      r->pred.step_s);
	CHECK(!r->tiers.default_fits || r->pred.step_s <= r->tiers.default_s, "never slower than the default: %g > %g",
	      r->pred.step_s, r->tiers.default_s);
}

static void host_tiers(ferry_calibration_t c)
{
	static struct ferry_auto_result r;
	unsigned long long stream[FERRY_HOST_KINDS], cpu[FERRY_HOST_KINDS];
	struct ferry_exec_opts o = { .optimizer = FERRY_OPTIM_STREAM };
	ferry_host_tiers_t h;

	kind_bytes(FERRY_OPTIM_STREAM, stream);
	kind_bytes(FERRY_OPTIM_CPU, cpu);
	CHECK(stream[FERRY_HOST_OPTIMIZER] > 0 && cpu[FERRY_HOST_OPTIMIZER] > 0, "state on the host");
	/* ample DRAM: the streamed state stays there (the default: CXL) */
	o.host_tiers = h = tiers(FERRY_OPTIM_STREAM, 1ull << 32, 1ull << 32);
	CHECK(h && ferry_policy_auto(&cfg, B, T, &o, 0, 0, c, &r) == FERRY_OK, "ample: %s", ferry_last_error());
	CHECK(r.tiers.active && !strcmp(chosen(&r, FERRY_HOST_OPTIMIZER), "dram") &&
	      !strcmp(chosen(&r, FERRY_HOST_PARAMS), "dram"), "ample DRAM keeps the state there: %s", r.tiers.spec);
	CHECK(r.tiers.default_fits && r.pred.step_s < r.tiers.default_s, "faster than the default on CXL: %g vs %g",
	      r.pred.step_s, r.tiers.default_s);
	placed_fits(c, h, &r);
	ferry_host_tiers_free(h);
	/* DRAM holds the weights and gradients but not AdamW's moments: they
	 * spill to CXL, and the placement fits */
	o.optimizer = FERRY_OPTIM_CPU;
	o.host_tiers = h = tiers(FERRY_OPTIM_CPU, cpu[FERRY_HOST_PARAMS] + cpu[FERRY_HOST_GRADS] + 65536, 1ull << 32);
	CHECK(h && ferry_policy_auto(&cfg, B, T, &o, 0, 0, c, &r) == FERRY_OK, "small DRAM: %s", ferry_last_error());
	CHECK(!strcmp(chosen(&r, FERRY_HOST_OPTIMIZER), "cxl"), "the moments spill to CXL: %s", r.tiers.spec);
	placed_fits(c, h, &r);
	/* the state search too picks a placement that fits its tiers */
	CHECK(ferry_policy_auto_state(&cfg, B, T, &o, 0, 0, c, &r) == FERRY_OK && r.tiers.active,
	      "state search on tiers: %s", ferry_last_error());
	placed_fits(c, h, &r);
	ferry_host_tiers_free(h);
	/* nothing holds the moments: refused, saying so */
	o.host_tiers = h = tiers(FERRY_OPTIM_CPU, 65536, 65536);
	CHECK(h && ferry_policy_auto(&cfg, B, T, &o, 0, 0, c, &r) != FERRY_OK &&
	      strstr(ferry_last_error(), "host tiers") != NULL, "no tier holds it: %s", ferry_last_error());
	ferry_host_tiers_free(h);
}

/* Tiles as a choice: tiles given (one tile of every row here) are kept;
 * at the least memory the search reaches it tiles, below what the same
 * placement needs untiled, and its choice fits. */
static void tiles(ferry_calibration_t c)
{
	static struct ferry_auto_result r, last;
	struct ferry_exec_opts given = { .mlp_tile = B * T, .loss_tile = B * T }, o = { 0 };
	size_t cap = peak_of("nothing_saveable");

	CHECK(ferry_policy_auto(&cfg, B, T, &given, cap, 0, c, &r) == FERRY_OK && r.mlp_tile == B * T &&
	      r.loss_tile == B * T, "tiles given are kept: %d, %d", r.mlp_tile, r.loss_tile);
	for (int k = 0; k < 32 && ferry_policy_auto(&cfg, B, T, &o, cap, 0, c, &r) == FERRY_OK; k++) {
		last = r;
		cap = r.pred.device_peak_bytes - 1;
	}
	CHECK(last.fits && (last.mlp_tile || last.loss_tile) &&
	      last.pred.device_peak_bytes == peak_tiled(last.policy, last.mlp_tile, last.loss_tile) &&
	      last.pred.device_peak_bytes < peak_of(last.policy), "the least reached (%zu bytes) tiles (%d, %d), below "
	      "%zu untiled", last.pred.device_peak_bytes, last.mlp_tile, last.loss_tile, peak_of(last.policy));
	printf("tiles: the least auto reaches is %zu bytes, %s with the MLP %s and the loss %s (untiled: %zu)\n",
	       last.pred.device_peak_bytes, last.policy, last.mlp_tile ? "tiled" : "untiled",
	       last.loss_tile ? "tiled" : "untiled", peak_of(last.policy));
}

int main(void)
{
	struct ferry_exec_opts cal_opts = { .policy = "nothing_saveable" };
	static struct ferry_auto_result r;
	struct ferry_exec_opts o = { 0 };
	ferry_backend_t be;
	ferry_calibration_t c;
	size_t lo, hi, mid;

	if (ferry_model_config_complete(&cfg) ||
	    ferry_backend_open("cpu", &(struct ferry_backend_opts){ .threads = 1 }, &be) ||
	    ferry_calibrate(be, &cfg, B, T, &cal_opts, 1, NULL, &c)) {
		fprintf(stderr, "setup: %s\n", ferry_last_error());
		return 1;
	}
	ferry_backend_close(be);
	lo = peak_of("nothing_saveable");
	hi = peak_of("everything_saveable");
	mid = (lo + hi) / 2;
	CHECK(lo > 0 && hi > lo, "peaks %zu %zu", lo, hi);
	fits_and_beats_presets(c, hi * 2);
	fits_and_beats_presets(c, hi);
	fits_and_beats_presets(c, mid);
	fits_and_beats_presets(c, lo);
	CHECK(ferry_policy_auto(&cfg, B, T, &o, lo / 2, 0, c, &r) == FERRY_ERR_DEVICE_MEM,
	      "half the least is refused: %s", r.policy);
	CHECK(strstr(ferry_last_error(), "no placement fits") != NULL, "says why: %s", ferry_last_error());

	/* below the least any activation placement needs with everything on
	 * the device, moving AdamW's state (and the weights) off it fits */
	{
		static struct ferry_auto_result rs;
		struct ferry_exec_opts so = { 0 };
		struct ferry_plan plan;
		size_t cap = lo - 1;

		/* (offloading can go below nothing_saveable's peak) */
		for (int k = 0; k < 32 && ferry_policy_auto(&cfg, B, T, &o, cap, 0, c, &r) == FERRY_OK; k++)
			cap = r.pred.device_peak_bytes - 1;
		CHECK(ferry_policy_auto(&cfg, B, T, &o, cap, 0, c, &r) == FERRY_ERR_DEVICE_MEM, "below the device-only "
		      "least %zu", cap);
		CHECK(ferry_policy_auto_state(&cfg, B, T, &o, cap, 0, c, &rs) == FERRY_OK && rs.n_states == 5 &&
		      (rs.optimizer != FERRY_OPTIM_DEVICE || rs.offload_params),
		      "state search under %zu: %s", cap, ferry_last_error());
		so.policy = rs.policy, so.optimizer = rs.optimizer, so.offload_params = rs.offload_params;
		so.mlp_tile = rs.mlp_tile, so.loss_tile = rs.loss_tile;
		CHECK(ferry_model_plan(&cfg, B, T, &so, &plan) == FERRY_OK && plan.mem.peak_bytes <= cap,
		      "its plan fits: %zu of %zu", plan.mem.peak_bytes, cap);
		CHECK(ferry_policy_auto_state(&cfg, B, T, &o, hi, 0, c, &rs) == FERRY_OK &&
		      ferry_policy_auto(&cfg, B, T, &o, hi, 0, c, &r) == FERRY_OK && rs.pred.step_s <= r.pred.step_s,
		      "with the state placements too, never predicted slower: %g vs %g", rs.pred.step_s, r.pred.step_s);
	}
	tiles(c);
	host_tiers(c);
	scale_copies(c, 1e5);
	CHECK(ferry_policy_auto(&cfg, B, T, &o, mid, 0, c, &r) == FERRY_OK && offloaded(&r) == 0,
	      "slow copies: nothing offloaded, got %s", r.policy);
	scale_copies(c, 1e-9);
	CHECK(ferry_policy_auto(&cfg, B, T, &o, mid, 0, c, &r) == FERRY_OK && offloaded(&r) > 0,
	      "free copies: something offloaded, got %s", r.policy);
	ferry_calibration_free(c);
	return test_exit_code();
}
