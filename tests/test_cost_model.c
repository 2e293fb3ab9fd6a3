/*
 * The cost model's simulation on hand-built schedules whose step times are
 * worked out by hand below: a copy hidden under compute, a copy exposed, the
 * two directions on separate engines (with and without slowing each other)
 * and on one shared engine, the host's synchronisation inside the step, and
 * a wait on an event not yet recorded.  Then a calibration built by hand:
 * task durations looked up in it (an op at its shape, another shape of the
 * kind from its FLOP rate, copies scaled from the nearest size), and its
 * file read back, refused for another machine.
 */
#include "cost/calibration.h"
#include "cost/cost_model.h"
#include "test_util.h"

#include <libgen.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>

enum { C = 0, D2H = 1, H2D = 2 };

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

struct hand {
	struct ferry_program p[2];
	double dur[64];
	int n; /* tasks so far, both programs */
};

static void op(struct hand *h, int prog, int stream, double d)
{
	struct ferry_op_call c;

	memset(&c, 0, sizeof(c));
	ferry_emit_op(&h->p[prog], stream, &c, -1, "op");
	h->dur[h->n++] = d;
}

static void copy(struct hand *h, int prog, int stream, enum ferry_copy_kind k, double d)
{
	ferry_emit_copy(&h->p[prog], stream, NULL, NULL, 1024, k, -1, "copy");
	h->dur[h->n++] = d;
}

static void record(struct hand *h, int prog, int stream, int ev)
{
	ferry_emit_record(&h->p[prog], stream, ev, -1);
	h->dur[h->n++] = 123; /* ignored */
}

static void wait(struct hand *h, int prog, int stream, int ev)
{
	ferry_emit_wait(&h->p[prog], stream, ev, -1);
	h->dur[h->n++] = 456; /* ignored */
}

static void hand_init(struct hand *h)
{
	memset(h, 0, sizeof(*h));
	ferry_program_init(&h->p[0], "first");
	ferry_program_init(&h->p[1], "second");
}

static void hand_release(struct hand *h)
{
	ferry_program_release(&h->p[0]);
	ferry_program_release(&h->p[1]);
}

static struct ferry_sim_result sim(struct hand *h, int n_progs, int sync_after, struct ferry_sim_params prm)
{
	const struct ferry_program *pp[2] = { &h->p[0], &h->p[1] };
	struct ferry_sim_result r;
	ferry_status st = ferry_sim_run(pp, n_progs, sync_after, C, h->dur, &prm, &r);

	CHECK(st == FERRY_OK, "simulation failed: %s", ferry_last_error());
	return r;
}

/* f1 (2); its output copied out (copy_s) while f2 (4) runs; f3 (1) waits
 * for the copy.  Copy 3: ends at 5, before f2 at 6, hidden: step 7.
 * Copy 6: ends at 8, compute waits 6..8: 2 exposed, step 9. */
static void offload_overlap(double copy_s, double step, double exposed)
{
	struct hand h;
	struct ferry_sim_result r;

	hand_init(&h);
	op(&h, 0, C, 2);
	record(&h, 0, C, 0);
	wait(&h, 0, D2H, 0);
	copy(&h, 0, D2H, FERRY_COPY_D2H, copy_s);
	record(&h, 0, D2H, 1);
	op(&h, 0, C, 4);
	wait(&h, 0, C, 1);
	op(&h, 0, C, 1);
	r = sim(&h, 1, -1, (struct ferry_sim_params){ .both_slowdown = 1 });
	CHECK(NEAR(r.step_s, step), "copy %g: step %g, want %g", copy_s, r.step_s, step);
	CHECK(NEAR(r.exposed_copy_s, exposed), "copy %g: exposed %g, want %g", copy_s, r.exposed_copy_s, exposed);
	CHECK(NEAR(r.busy_s[C], 7) && NEAR(r.busy_s[D2H], copy_s), "busy %g %g", r.busy_s[C], r.busy_s[D2H]);
	CHECK(NEAR(r.copy_s, copy_s), "copy time %g", r.copy_s);
	CHECK(r.n_tasks == 8, "%d tasks", r.n_tasks);
	hand_release(&h);
}

/* A copy out (d2h_s) and one in (h2d_s) submitted at time 0 on their
 * streams; compute waits for the one in, then runs an op of 1. */
static struct ferry_sim_result two_directions(double d2h_s, double h2d_s, struct ferry_sim_params prm)
{
	struct hand h;
	struct ferry_sim_result r;

	hand_init(&h);
	copy(&h, 0, D2H, FERRY_COPY_D2H, d2h_s);
	copy(&h, 0, H2D, FERRY_COPY_H2D, h2d_s);
	record(&h, 0, H2D, 0);
	wait(&h, 0, C, 0);
	op(&h, 0, C, 1);
	r = sim(&h, 1, -1, prm);
	hand_release(&h);
	return r;
}

static void engines(void)
{
	struct ferry_sim_result r;

	/* separate engines, no interference: both end at 3; compute waits 3 */
	r = two_directions(3, 3, (struct ferry_sim_params){ .both_slowdown = 1 });
	CHECK(NEAR(r.step_s, 4) && NEAR(r.exposed_copy_s, 3), "separate: step %g exposed %g", r.step_s,
	      r.exposed_copy_s);
	/* each at 2/3 speed while both run: both end at 4.5 */
	r = two_directions(3, 3, (struct ferry_sim_params){ .both_slowdown = 1.5 });
	CHECK(NEAR(r.step_s, 5.5) && NEAR(r.exposed_copy_s, 4.5), "slowed: step %g exposed %g", r.step_s,
	      r.exposed_copy_s);
	/* half speed together: the one out ends at 6 (3 of work), the one in
	 * has 3 left, alone from then: ends at 9 */
	r = two_directions(3, 6, (struct ferry_sim_params){ .both_slowdown = 2 });
	CHECK(NEAR(r.step_s, 10) && NEAR(r.exposed_copy_s, 9), "uneven: step %g exposed %g", r.step_s,
	      r.exposed_copy_s);
	/* one engine: the copy out (submitted first) 0..3, the one in 3..6 */
	r = two_directions(3, 3, (struct ferry_sim_params){ .shared_copy_engine = true, .both_slowdown = 2 });
	CHECK(NEAR(r.step_s, 7) && NEAR(r.exposed_copy_s, 6), "shared: step %g exposed %g", r.step_s,
	      r.exposed_copy_s);
	CHECK(NEAR(r.copy_s, 6), "shared: copy time %g", r.copy_s);
}

/* A compute op of 4 beside a copy of 2, compute at half speed while it
 * runs: 1 of work done by 2, the other 3 alone: ends at 5. */
static void shared_cores(void)
{
	struct hand h;
	struct ferry_sim_result r;

	hand_init(&h);
	op(&h, 0, C, 4);
	copy(&h, 0, D2H, FERRY_COPY_D2H, 2);
	r = sim(&h, 1, -1, (struct ferry_sim_params){ .both_slowdown = 1, .copy_compute_slowdown = 2 });
	CHECK(NEAR(r.step_s, 5) && NEAR(r.busy_s[C], 5) && NEAR(r.busy_s[D2H], 2), "shared cores: step %g, busy %g %g",
	      r.step_s, r.busy_s[C], r.busy_s[D2H]);
	r = sim(&h, 1, -1, (struct ferry_sim_params){ .both_slowdown = 1, .copy_compute_slowdown = 1 });
	CHECK(NEAR(r.step_s, 4), "separate cores: step %g", r.step_s);
	hand_release(&h);
}

/* Program 1: compute 2, an unrelated copy out of copy_s; the host
 * synchronises on compute (at 2, plus 0.5 to resubmit); program 2: compute
 * 1 from 2.5 to 3.5. */
static void host_sync(double copy_s, double step)
{
	struct hand h;
	struct ferry_sim_result r;

	hand_init(&h);
	op(&h, 0, C, 2);
	copy(&h, 0, D2H, FERRY_COPY_D2H, copy_s);
	op(&h, 1, C, 1);
	r = sim(&h, 2, 0, (struct ferry_sim_params){ .both_slowdown = 1, .sync_s = 0.5 });
	CHECK(NEAR(r.step_s, step), "sync, copy %g: step %g, want %g", copy_s, r.step_s, step);
	CHECK(NEAR(r.busy_s[C], 3), "sync: compute busy %g", r.busy_s[C]);
	hand_release(&h);
}

/* A wait on an event no task recorded before it does not wait (as CUDA);
 * the record after it is for later waits. */
static void wait_before_record(void)
{
	struct hand h;
	struct ferry_sim_result r;

	hand_init(&h);
	copy(&h, 0, H2D, FERRY_COPY_H2D, 5);
	wait(&h, 0, C, 0);
	op(&h, 0, C, 1);
	record(&h, 0, H2D, 0);
	r = sim(&h, 1, -1, (struct ferry_sim_params){ .both_slowdown = 1 });
	CHECK(NEAR(r.step_s, 5) && NEAR(r.exposed_copy_s, 0), "step %g exposed %g", r.step_s, r.exposed_copy_s);
	hand_release(&h);
}

static struct ferry_op_call matmul(int B, int T, int C, int OC)
{
	struct ferry_op_call c;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_MATMUL;
	c.B = B, c.T = T, c.C = C, c.OC = OC;
	return c;
}

static struct ferry_calibration *hand_calibration(void)
{
	struct ferry_calibration *c = ferry_calib_new();
	struct ferry_op_call k = matmul(2, 8, 16, 32);
	struct ferry_calib_op e = { .kind = FERRY_OP_MATMUL, .B = 2, .T = 8, .C = 16, .OC = 32, .seconds = 0.5 };

	e.flops = ferry_op_flops(&k);
	CHECK(ferry_calib_add_op(c, &e) == FERRY_OK, "add op");
	ferry_calib_add_copy(c, &(struct ferry_calib_copy){ 1000, 1e-3, 2e-3, 3e-3, 3e-3 });
	ferry_calib_add_copy(c, &(struct ferry_calib_copy){ 100000, 0.1, 0.1, 0.15, 0.15 });
	c->zero_Bps = 1e6;
	c->adamw_floats_per_s = 1e3;
	snprintf(c->fingerprint, sizeof(c->fingerprint), "cpu=test;backend=none");
	return c;
}

static void lookups(void)
{
	struct ferry_calibration *c = hand_calibration();
	struct ferry_task t;
	bool est = false;

	memset(&t, 0, sizeof(t));
	t.kind = FERRY_TASK_OP;
	t.call = matmul(2, 8, 16, 32);
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 0.5) && !est, "the op at its shape");
	t.call = matmul(4, 8, 16, 32); /* twice the FLOPs */
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 1.0) && est, "another shape: from the FLOP rate");
	t.kind = FERRY_TASK_COPY;
	t.copy_kind = FERRY_COPY_H2D;
	t.bytes = 2000; /* nearest 1000: 2e-3 each, twice the bytes */
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 4e-3), "copy scaled from the nearest size");
	CHECK(NEAR(ferry_calib_copy_seconds(c, 50000, FERRY_COPY_D2H, true), 0.075), "both at once, 100000's");
	/* ratios 3, 1.5, 1.5, 1.5: median 1.5 */
	CHECK(NEAR(ferry_calib_both_slowdown(c), 1.5), "slowdown %g", ferry_calib_both_slowdown(c));
	t.kind = FERRY_TASK_ZERO;
	t.bytes = 500000;
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 0.5), "zeroing at its bandwidth");
	t.kind = FERRY_TASK_HOST;
	t.call.n = 3000;
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 3), "host AdamW at its rate");
	/* the in-step factor scales what the traced slices measured (ops,
	 * zeroing), not the separately measured copies and AdamW */
	c->in_step_factor = 1.25;
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 3), "host AdamW unscaled");
	t.kind = FERRY_TASK_ZERO;
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 0.625), "zeroing scaled");
	t.kind = FERRY_TASK_OP;
	t.call = matmul(2, 8, 16, 32);
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 0.625), "the op scaled");
	t.kind = FERRY_TASK_COPY;
	t.bytes = 2000;
	CHECK(NEAR(ferry_calib_task_seconds(c, &t, &est), 4e-3), "host copies unscaled");
	ferry_calibration_free(c);
}

static void file_round_trip(void)
{
	struct ferry_calibration *c = hand_calibration(), *back = NULL;
	const char *dir = getenv("FERRY_TEST_TMP");
	char path[512];
	struct ferry_op_call k = matmul(2, 8, 16, 32);

	snprintf(path, sizeof(path), "%s/calib_%d/sub/c.json", dir ? dir : "/tmp", (int)getpid());
	c->task_gap_s = 2.5e-5;
	c->step_host_s = 1.25e-3;
	c->in_step_factor = 1.0625;
	CHECK(ferry_calibration_save(c, path) == FERRY_OK, "save: %s", ferry_last_error());
	CHECK(ferry_calibration_load(path, "cpu=test;backend=none", &back) == FERRY_OK, "load: %s", ferry_last_error());
	if (back) {
		CHECK(back->n_ops == 1 && ferry_calib_find(back, &k) && NEAR(ferry_calib_find(back, &k)->seconds, 0.5),
		      "ops read back");
		CHECK(back->n_copy == 2 && NEAR(back->copy[1].d2h_both_s, 0.15) && NEAR(back->adamw_floats_per_s, 1e3),
		      "copies and rates read back");
		CHECK(NEAR(back->task_gap_s, 2.5e-5) && NEAR(back->step_host_s, 1.25e-3) &&
			      NEAR(back->in_step_factor, 1.0625),
		      "the gap per task, the host's time per step and the in-step factor read back");
	}
	ferry_calibration_free(back);
	CHECK(ferry_calibration_load(path, "cpu=other;backend=none", &back) == FERRY_ERR_FORMAT && !back,
	      "another machine's calibration is refused");
	CHECK(strstr(ferry_last_error(), "another machine") != NULL, "says why: %s", ferry_last_error());
	unlink(path);
	rmdir(dirname(path)); /* sub/, then calib_PID/: the save made both */
	rmdir(dirname(path));
	ferry_calibration_free(c);
}

int main(void)
{
	lookups();
	file_round_trip();
	offload_overlap(3, 7, 0);
	offload_overlap(6, 9, 2);
	engines();
	host_sync(5, 5);
	host_sync(1, 3.5);
	wait_before_record();
	shared_cores();
	return test_exit_code();
}
