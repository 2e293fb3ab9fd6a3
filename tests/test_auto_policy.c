/*
 * --policy auto (ferry_policy_auto) on a small GPT-2, calibrated on the
 * CPU backend, under device capacities from roomy to too small:
 *  - what it picks fits: its plan, made again independently, is within the
 *    capacity; below the least any placement needs it refuses;
 *  - it is never predicted slower than the best preset that fits (each
 *    preset predicted again here), and its own prediction is reproducible;
 *  - with copies made very slow it offloads nothing; with copies free it
 *    offloads where memory is tight (recomputation costs time, free copies
 *    do not).
 */
#include "ferry/cost.h"
#include "ferry/policy.h"
#include "plan/calibration.h"
#include "test_util.h"

static struct ferry_model_config cfg = { .arch = "gpt2", .max_seq = 64, .vocab = 257, .layers = 8, .heads = 2,
					 .channels = 32 };
static const int B = 4, T = 32;

static size_t peak_of(const char *policy)
{
	struct ferry_exec_opts o = { .policy = policy };
	struct ferry_plan plan;

	if (ferry_model_plan(&cfg, B, T, &o, &plan) != FERRY_OK)
		return 0;
	return plan.mem.peak_bytes;
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
	CHECK(r.fits && peak_of(r.policy) > 0 && peak_of(r.policy) <= cap, "cap %zu: %s needs %zu", cap, r.policy,
	      peak_of(r.policy));
	CHECK(best > 0 && r.pred.step_s <= best * 1.03, "cap %zu: auto %g s, best preset %g s", cap, r.pred.step_s, best);
	o.policy = r.policy;
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

		CHECK(ferry_policy_auto_state(&cfg, B, T, &o, lo - 1, 0, c, &rs) == FERRY_OK && rs.n_states == 5 &&
		      (rs.optimizer != FERRY_OPTIM_DEVICE || rs.offload_params),
		      "state search under %zu: %s", lo - 1, ferry_last_error());
		so.policy = rs.policy, so.optimizer = rs.optimizer, so.offload_params = rs.offload_params;
		CHECK(ferry_model_plan(&cfg, B, T, &so, &plan) == FERRY_OK && plan.mem.peak_bytes <= lo - 1,
		      "its plan fits: %zu of %zu", plan.mem.peak_bytes, lo - 1);
		CHECK(ferry_policy_auto_state(&cfg, B, T, &o, hi, 0, c, &rs) == FERRY_OK &&
		      ferry_policy_auto(&cfg, B, T, &o, hi, 0, c, &r) == FERRY_OK && rs.pred.step_s <= r.pred.step_s,
		      "with the state placements too, never predicted slower: %g vs %g", rs.pred.step_s, r.pred.step_s);
	}
	scale_copies(c, 1e5);
	CHECK(ferry_policy_auto(&cfg, B, T, &o, mid, 0, c, &r) == FERRY_OK && offloaded(&r) == 0,
	      "slow copies: nothing offloaded, got %s", r.policy);
	scale_copies(c, 1e-9);
	CHECK(ferry_policy_auto(&cfg, B, T, &o, mid, 0, c, &r) == FERRY_OK && offloaded(&r) > 0,
	      "free copies: something offloaded, got %s", r.policy);
	ferry_calibration_free(c);
	return test_exit_code();
}
