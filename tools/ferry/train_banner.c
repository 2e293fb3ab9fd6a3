/*
 * What ferry train says before step 1: the banner (model, placement, memory,
 * schedule, a resume's notes), the peak its MFU is measured against, and a
 * warning when pinned host memory ran short.
 */
#include "train_cli.h"
#include "calib_cache.h"
#include "tier_flags.h"
#include "cli_args.h"
#include "ferry/cost.h"
#include "ferry/place.h"
#include "ferry/platform.h"
#include "ferry/policy.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* An sgemm measured now below this fraction of the calibrated rate: the
 * machine is busy. */
#define TRAIN_BUSY_FRACTION 0.5

/* Once, before step 1: host buffers that copies use but that are not
 * pinned (past --pinned-limit, or pinning failed) make those copies slower. */
void train_banner_warn_pageable(ferry_trainer_t tr)
{
	struct ferry_host_memory h;
	char a[FERRY_SIZE_CHARS], b[FERRY_SIZE_CHARS], c[FERRY_SIZE_CHARS];

	ferry_model_host_memory(ferry_trainer_model(tr), &h);
	if (h.pin_failed)
		fprintf(stderr, "ferry train: warning: pinning %s of host memory failed; it is pageable, copies "
				"to and from it are slower\n", ferry_format_size(h.pinned_bytes + h.pageable_bytes, a));
	else if (h.over_limit)
		fprintf(stderr, "ferry train: warning: %s of host buffers pinned (--pinned-limit %s), the other %s "
				"pageable: copies to and from them are slower\n", ferry_format_size(h.pinned_bytes, a),
			ferry_format_size(h.limit, b), ferry_format_size(h.pageable_bytes, c));
}

/* A resumed run's placement, and whose it is. */
static void print_resume_place(ferry_trainer_t tr)
{
	const char *saved = ferry_trainer_saved_place(tr);
	char now[FERRY_PLACE_CHARS];

	ferry_train_place_of(&run_opts(tr)->exec, now, sizeof(now));
	if (!(run_opts(tr)->given & FERRY_GIVEN_PLACE) && saved[0])
		printf("placement: %s (the saved run's)\n", now);
	else if (!saved[0])
		printf("placement: %s (the saved run's is not recorded: its state is older; %s)\n", now,
		       run_opts(tr)->given & FERRY_GIVEN_PLACE ? "as the flags give" : "the defaults");
	else
		printf("placement: %s (as the flags give%s)\n", now, strcmp(now, saved) ? "; the saved run's differs"
										   : ", the saved run's too");
}

static void print_resume_note(ferry_trainer_t tr)
{
	const struct ferry_train_opts *o = run_opts(tr);
	int steps, warmup, at = ferry_trainer_step_count(tr);
	float lr, frac;
	char over[FERRY_PLACE_CHARS * 2 + 1024];

	printf("resumed at step %d", at);
	if (ferry_trainer_resume_overrides(tr, over, sizeof(over)) > 0)
		printf("; given, unlike the saved run: %s", over);
	printf("\n");
	print_resume_place(tr);
	if (ferry_trainer_resumed_schedule(tr, &steps, &warmup, &lr, &frac) &&
	    (steps != o->steps || warmup != o->warmup || lr != o->lr || frac != o->final_lr_frac))
		fprintf(stderr, "ferry train: note: the saved run followed a schedule of %d steps "
				"(warmup %d, lr %.2e, final %.2f); from step %d this run follows %d steps "
				"(warmup %d, lr %.2e, final %.2f), so the learning rate changes to %.2e\n",
			steps, warmup, lr, frac, at, o->steps, o->warmup, o->lr, o->final_lr_frac,
			ferry_train_lr(o, at));
}

/* On the CPU, the peak MFU is against: the better of the sgemm rate of
 * this machine's calibration (ferry calibrate), if any, and a 1024^3 sgemm
 * measured now.  Either can read low, and MFU then high: one measured now
 * under load, or a calibration taken on a busier machine or of small
 * products; a peak is the best rate seen, so a step faster than it becomes
 * the peak (train_report.c).  A rate now far
 * below the calibrated one says the machine is busy. */
static void set_cpu_peak(ferry_trainer_t tr, struct train_report *r)
{
	ferry_calibration_t calib = NULL;
	struct ferry_calib_summary s = { .matmul_flops = 0 };
	char path[4200] = "";
	double now = ferry_cpu_sgemm_flops(1024);

	if (calib_cache_load(ferry_trainer_backend(tr), &calib, path, sizeof(path)) == FERRY_OK) {
		ferry_calibration_summary(calib, &s);
		ferry_calibration_free(calib);
	}
	if (!(s.matmul_flops > now)) {
		r->peak_flops = now;
		r->peak_what = "an sgemm measured now";
		printf("MFU: %.2f GFLOP per step (the model's) against %.1f GFLOP/s, a 1024^3 sgemm on %d threads "
		       "measured now (", r->step_flops / 1e9, r->peak_flops / 1e9, ferry_get_threads());
		if (s.matmul_flops > 0)
			printf("above the calibrated rate %.1f GFLOP/s: smaller products, or a busier machine then; ",
			       s.matmul_flops / 1e9);
		else
			printf("no calibration of this machine; ");
		printf("--peak-flops sets it)\n");
		return;
	}
	r->peak_flops = s.matmul_flops;
	r->peak_what = "the calibrated sgemm rate";
	printf("MFU: %.2f GFLOP per step (the model's) against the calibrated sgemm rate %.1f GFLOP/s "
	       "(ferry calibrate's, on %d threads; --peak-flops sets it)\n", r->step_flops / 1e9,
	       r->peak_flops / 1e9, ferry_get_threads());
	if (now < TRAIN_BUSY_FRACTION * s.matmul_flops)
		fprintf(stderr, "ferry train: warning: a 1024^3 sgemm runs at %.1f GFLOP/s now, %.0f%% of the "
				"calibrated %.1f GFLOP/s: the machine looks busy, so steps run slower than they could\n",
			now / 1e9, 100 * now / s.matmul_flops, s.matmul_flops / 1e9);
}

/* What MFU is measured against: --peak-flops, else on the CPU the
 * calibrated or a measured sgemm rate; on a GPU nothing (the line shows no
 * MFU). */
void train_banner_set_peak(ferry_trainer_t tr, const struct train_cli *c, struct train_report *r)
{
	const char *be = ferry_backend_name(ferry_trainer_backend(tr));

	r->step_flops = ferry_model_step_flops(ferry_trainer_model(tr), r->B, r->T); /* r->B: the rows of all micro-batches */
	r->peak_flops = c->peak_flops;
	r->peak_what = "--peak-flops";
	r->raise_peak = !strcmp(be, "cpu"); /* no CPU's peak is known, only rates seen */
	if (r->peak_flops > 0) {
		printf("MFU: %.2f GFLOP per step (the model's) against --peak-flops %.4g GFLOP/s\n",
		       r->step_flops / 1e9, r->peak_flops / 1e9);
	} else if (!strcmp(be, "cpu")) {
		set_cpu_peak(tr, r);
	} else {
		printf("MFU: not shown; give the device's peak with --peak-flops (e.g. 989T, an H100's dense bf16)\n");
	}
}

/* "warmup 50, cosine to 0.10" and the like, into buf. */
static const char *schedule_words(const struct ferry_train_opts *o, char *buf, size_t n)
{
	int k = o->lr_schedule >= 0 && o->lr_schedule <= FERRY_LR_WSD ? o->lr_schedule : 0;
	int w = snprintf(buf, n, "warmup %d, %s", o->warmup, train_lr_kinds[k]);

	if (w < 0 || (size_t)w >= n || k == FERRY_LR_CONSTANT)
		return buf;
	if (k == FERRY_LR_WSD)
		w += snprintf(buf + w, n - (size_t)w, " over the last %g", (double)o->decay_frac);
	if ((size_t)w >= n)
		return buf;
	if (o->min_lr > 0)
		snprintf(buf + w, n - (size_t)w, " to %.2e", o->min_lr);
	else
		snprintf(buf + w, n - (size_t)w, " to %.2f", o->final_lr_frac);
	return buf;
}

void train_banner_print(ferry_trainer_t tr, const struct train_cli *c)
{
	char sched[128];
	ferry_model_t m = ferry_trainer_model(tr);
	const struct ferry_model_config *cfg = ferry_model_config(m);
	const struct ferry_plan *p = ferry_trainer_plan(tr);
	const struct ferry_train_opts *o = run_opts(tr);

	printf("model: %s, %d layers, %d channels, %d heads", cfg->arch, cfg->layers, cfg->channels, cfg->heads);
	if (cfg->kv_heads != cfg->heads)
		printf(" (%d key/value)", cfg->kv_heads);
	printf(", MLP %d, vocab %d (padded %d), max seq %d%s: %.2fM parameters\n", cfg->ffn, cfg->vocab,
	       cfg->padded_vocab, cfg->max_seq, cfg->tie_embeddings > 0 ? ", tied head" : "",
	       ferry_model_num_params(m) / 1e6);
	printf("batch %d x %d tokens %s", o->B * c->ranks.size, o->T, o->shuffle ? "shuffled" : "in order");
	if (c->ranks.size > 1)
		printf(" (%d ranks of %d rows, %s)", c->ranks.size, o->B, ferry_comm_engine(c->ranks.comm));
	if (o->grad_accum > 1)
		printf(" x %d micro-batches a step (%d rows)", o->grad_accum, o->grad_accum * o->B * c->ranks.size);
	printf(", %d steps, lr %.2e (%s), backend %s (%s)\n", o->steps, o->lr, schedule_words(o, sched, sizeof(sched)),
	       ferry_backend_name(ferry_trainer_backend(tr)), ferry_backend_description(ferry_trainer_backend(tr)));
	if (ferry_comm_in_use(c->ranks.comm))
		printf("collectives: %s\n", ferry_trainer_comm_engine(tr));
	ranks_print_cores(&c->ranks);
	/* a --warmup given past the run (the default 50 is no choice of the user's) */
	if ((c->o.given & FERRY_GIVEN_WARMUP) && o->warmup > o->steps && o->steps > 0)
		fprintf(stderr, "ferry train: warning: --warmup %d exceeds --steps %d: the learning rate only "
				"rises, to %.2e at the last step, not --lr %.2e\n", o->warmup, o->steps,
			ferry_train_lr(o, o->steps - 1), o->lr);
	printf("policy %s: device %.1f MiB (activations kept %.1f MiB), host %.1f MiB offloaded, "
	       "%d of %d layer ops recomputed\n", p->policy, p->mem.peak_bytes / 1048576.0,
	       stack_bytes(p) / 1048576.0, p->mem.host_total_bytes / 1048576.0, p->n_recompute_ops, p->n_ops);
	if (o->val_data && c->val_every)
		printf("validation: every %d step%s and at the end, %d batches of %s\n", c->val_every,
		       c->val_every == 1 ? "" : "s", c->val_batches, o->val_data);
	else if (o->val_data)
		printf("validation: at the end, %d batches of %s\n", c->val_batches, o->val_data);
	ferry_cli_tier_flags_print_placement(stdout, o);
	if (o->resume)
		print_resume_note(tr);
}
