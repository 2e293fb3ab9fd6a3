/*
 * Collectives in the cost model (issue 22 item 8), against times worked
 * out by hand: a calibration's collectives priced between, above and below
 * the sizes measured, and never from another number of ranks, another
 * engine or another kind; stored and read back (file and text) keyed by
 * ranks and engine with their figures inside steps, a damaged entry
 * refused; the in-step ratios of collectives beside compute and not; and
 * the simulation running a collective on a stream of its own, hidden under
 * compute or exposed, slowing compute beside it, and slowed by compute
 * beside it more than with the compute stream idle.
 * (Measuring them and pricing a 2-rank step: tests/cli/calibrate_ranks.sh,
 * under mpirun.)
 */
#include "cost/calibration.h"
#include "cost/cost_model.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEAR(a, b) (fabs((a) - (b)) < 1e-12 + 1e-9 * fabs(b))

static void add(struct ferry_calibration *c, enum ferry_calib_coll_kind k, const char *engine, int ranks,
		size_t bytes, double s)
{
	struct ferry_calib_coll e = { .kind = k, .ranks = ranks, .bytes = bytes, .seconds = s };

	snprintf(e.engine, sizeof(e.engine), "%s", engine);
	ferry_calib_add_coll(c, &e);
}

/* all-reduce over 2 MPI ranks at 1e3, 1e5 and 1e6 bytes. */
static struct ferry_calibration *hand(void)
{
	struct ferry_calibration *c = ferry_calib_new();

	snprintf(c->fingerprint, sizeof(c->fingerprint), "cpu=test;backend=none");
	add(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 1000, 1e-5);
	add(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 100000, 1e-4);
	add(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 1000000, 6e-4);
	add(c, FERRY_COLL_ALL_GATHER, "mpi", 2, 1000000, 3e-4);
	ferry_calib_add_comm_step(c, &(struct ferry_calib_comm_step){ .engine = "mpi", .ranks = 2, .in_step = 35.5,
									.in_step_idle = 1.5, .compute_slowdown = 2.25,
									.skew_s = 0.125 });
	return c;
}

static double price(const struct ferry_calibration *c, enum ferry_calib_coll_kind k, const char *engine, int ranks,
		    size_t bytes, bool *missing)
{
	*missing = false;
	return ferry_calib_coll_seconds(c, k, engine, ranks, bytes, missing);
}

static void pricing(void)
{
	struct ferry_calibration *c = hand();
	bool miss;
	double s;

	s = price(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 1000, &miss);
	CHECK(NEAR(s, 1e-5) && !miss, "a size measured: %g", s);
	/* halfway from 1e3 to 1e5 bytes: halfway from 1e-5 to 1e-4 s */
	s = price(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 50500, &miss);
	CHECK(NEAR(s, 5.5e-5) && !miss, "between two sizes: %g, want 5.5e-5", s);
	/* above 1e6: the line through the two largest, 5e-4 s per 9e5 bytes */
	s = price(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 2000000, &miss);
	CHECK(NEAR(s, 6e-4 + 1e6 * 5e-4 / 9e5) && !miss, "above the largest: %g", s);
	s = price(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 10, &miss);
	CHECK(NEAR(s, 1e-5) && !miss, "below the smallest: its latency, %g", s);
	/* one size of all-gather: above it, at its bandwidth */
	s = price(c, FERRY_COLL_ALL_GATHER, "mpi", 2, 3000000, &miss);
	CHECK(NEAR(s, 9e-4) && !miss, "one size, above it: %g, want 9e-4", s);
	s = price(c, FERRY_COLL_ALL_REDUCE, "mpi", 4, 1000, &miss);
	CHECK(s == 0 && miss, "4 ranks are not priced from 2 ranks' (%g)", s);
	s = price(c, FERRY_COLL_ALL_REDUCE, "nccl", 2, 1000, &miss);
	CHECK(s == 0 && miss, "nccl is not priced from mpi's (%g)", s);
	s = price(c, FERRY_COLL_REDUCE_SCATTER, "mpi", 2, 1000, &miss);
	CHECK(s == 0 && miss, "a reduce-scatter is not priced from all-reduces (%g)", s);
	/* a size measured again replaces the old figure */
	add(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 1000, 2e-5);
	CHECK(c->n_coll == 4 && NEAR(price(c, FERRY_COLL_ALL_REDUCE, "mpi", 2, 1000, &miss), 2e-5), "replaced");
	ferry_calibration_free(c);
}

static bool same_colls(const struct ferry_calibration *a, const struct ferry_calibration *b)
{
	const struct ferry_calib_comm_step *s = ferry_calib_comm_step_find(b, "mpi", 2);

	if (a->n_coll != b->n_coll || !s || !NEAR(s->in_step, 35.5) || !NEAR(s->in_step_idle, 1.5) ||
	    !NEAR(s->compute_slowdown, 2.25) ||
	    !NEAR(s->skew_s, 0.125) ||
	    ferry_calib_comm_step_find(b, "mpi", 4) || b->n_comm_step != 1)
		return false;
	for (int i = 0; i < a->n_coll; i++)
		if (a->coll[i].kind != b->coll[i].kind || a->coll[i].ranks != b->coll[i].ranks ||
		    a->coll[i].bytes != b->coll[i].bytes || strcmp(a->coll[i].engine, b->coll[i].engine) ||
		    !NEAR(a->coll[i].seconds, b->coll[i].seconds))
			return false;
	return true;
}

/* path's text with the first `from` replaced by `to`. */
static void edit(const char *path, const char *from, const char *to)
{
	FILE *f = fopen(path, "rb");
	char *s = calloc(1, 1 << 16), *at;
	size_t n = f ? fread(s, 1, (1 << 16) - 1, f) : 0;

	if (f)
		fclose(f);
	at = strstr(s, from);
	CHECK(n > 0 && at, "'%s' in %s", from, path);
	if (at && (f = fopen(path, "wb"))) {
		fwrite(s, 1, (size_t)(at - s), f);
		fputs(to, f);
		fputs(at + strlen(from), f);
		fclose(f);
	}
	free(s);
}

static void stored(void)
{
	struct ferry_calibration *c = hand(), *back = NULL;
	const char *dir = getenv("FERRY_TEST_TMP");
	char path[512], *text;

	snprintf(path, sizeof(path), "%s/calib_coll_%d.json", dir ? dir : "/tmp", (int)getpid());
	CHECK(ferry_calibration_save(c, path) == FERRY_OK, "save: %s", ferry_last_error());
	CHECK(ferry_calibration_load(path, c->fingerprint, &back) == FERRY_OK, "load: %s", ferry_last_error());
	CHECK(back && same_colls(c, back), "the collectives read back, keyed by kind, engine and ranks");
	ferry_calibration_free(back);
	back = NULL;
	text = ferry_calib_to_text(c);
	CHECK(text && ferry_calib_from_text(text, "test", &back) == FERRY_OK && back && same_colls(c, back),
	      "and through text (rank 0's, shared)");
	free(text);
	ferry_calibration_free(back);
	back = NULL;
	edit(path, "\"ranks\": 2", "\"ranks\": 1");
	CHECK(ferry_calibration_load(path, c->fingerprint, &back) == FERRY_ERR_FORMAT && !back,
	      "a collective over 1 rank is refused");
	CHECK(strstr(ferry_last_error(), "collectives entry") != NULL, "says which: %s", ferry_last_error());
	unlink(path);
	ferry_calibration_free(c);
}

/* Collectives of traced steps, (in step, alone, beside compute) each:
 * beside compute for at least half their slice 4 + 6 s in steps of 0.2 +
 * 0.3 alone (20x); the others 2 + 1 s of 1.5 + 0.5 (1.5x).  None beside
 * compute: both the idle ones' 1.5x; none at all: 0. */
static void ratios(void)
{
	const double r[] = { 4, 0.2, 0.9, 2, 1.5, 0, 6, 0.3, 0.5, 1, 0.5, 0.4 };
	double beside, idle;

	ferry_calib_in_step_ratios(r, 12, &beside, &idle);
	CHECK(NEAR(beside, 20.0) && NEAR(idle, 1.5), "beside %g, idle %g", beside, idle);
	ferry_calib_in_step_ratios(r + 3, 3, &beside, &idle);
	CHECK(NEAR(beside, 2 / 1.5) && NEAR(idle, 2 / 1.5), "idle only: beside %g, idle %g", beside, idle);
	ferry_calib_in_step_ratios(r, 0, &beside, &idle);
	CHECK(beside == 0 && idle == 0, "none: beside %g, idle %g", beside, idle);
}

enum { COMPUTE = 0, COMM = 3 };

/* Backward's op (2 s) makes gradients; the comm stream averages them
 * (comm_s alone) while the next op (1 s) runs; the update (1 s) waits for
 * the average.  comm 0.5: done at 2.5, hidden under 2..3, step 4.  comm 3:
 * done at 5, the compute stream waits 3..5 (2 exposed), step 6.  The
 * other ranks `skew` behind: the collective waits for them from 2, its
 * slice comm_s + skew.  The collective stretched `beside` times while
 * the compute stream runs a task, `idle` times while it runs none. */
struct comm_case {
	double comm_s, slowdown, skew, beside, idle;
	double step, exposed, slice; /* expected (slice 0: comm_s + skew) */
};

static void simulated(struct comm_case k)
{
	struct ferry_program p;
	struct ferry_op_call call;
	const struct ferry_program *pp[1] = { &p };
	double dur[16] = { 2, 0, 0, k.comm_s, 0, 1, 0, 1 }, times[16];
	double slice = k.slice > 0 ? k.slice : k.comm_s + k.skew;
	struct ferry_sim_result r;

	memset(&call, 0, sizeof(call));
	ferry_program_init(&p, "step");
	ferry_emit_op(&p, COMPUTE, &call, 0, "backward");
	ferry_emit_record(&p, COMPUTE, 0, 0);
	ferry_emit_wait(&p, COMM, 0, 0);
	ferry_emit_all_reduce(&p, COMM, NULL, NULL, 1000, NULL, 0, "average grad");
	ferry_emit_record(&p, COMM, 1, 0);
	ferry_emit_op(&p, COMPUTE, &call, -1, "backward below");
	ferry_emit_wait(&p, COMPUTE, 1, -1);
	ferry_emit_op(&p, COMPUTE, &call, -1, "update");
	CHECK(p.n == 8, "%d tasks", p.n);
	CHECK(ferry_sim_run(pp, 1, -1, COMPUTE, dur,
			    &(struct ferry_sim_params){ .both_slowdown = 1, .comm_compute_slowdown = k.slowdown,
							.comm_skew_s = k.skew, .comm_beside = k.beside,
							.comm_idle = k.idle, .times = times },
			    &r) == FERRY_OK, "simulation: %s", ferry_last_error());
	CHECK(NEAR(r.step_s, k.step), "comm %g: step %g, want %g", k.comm_s, r.step_s, k.step);
	CHECK(NEAR(r.exposed_comm_s, k.exposed) && r.exposed_copy_s == 0, "comm %g: exposed %g, want %g", k.comm_s,
	      r.exposed_comm_s, k.exposed);
	CHECK(NEAR(r.comm_s, slice) && NEAR(r.busy_s[COMM], slice), "comm time %g, want %g", r.comm_s, slice);
	/* the timeline: the collective from 2 (the backward's end), the update last */
	CHECK(NEAR(times[6], 2.0) && NEAR(times[7], 2 + slice) && NEAR(times[15], k.step),
	      "timeline: collective %g..%g, update ends %g", times[6], times[7], times[15]);
	ferry_program_release(&p);
}

int main(void)
{
	pricing();
	stored();
	ratios();
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .step = 4 });
	simulated((struct comm_case){ .comm_s = 3, .slowdown = 1, .step = 6, .exposed = 2 });
	/* the other rank 1 s behind: the average from 2 + 1 to 3.5, the
	 * update waits 3..3.5; 0.25 behind: done at 2.75, hidden */
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .skew = 1, .step = 4.5, .exposed = 0.5 });
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .skew = 0.25, .step = 4 });
	/* compute at half speed while the collective runs (2..2.5): the op
	 * below has done 0.25 of its 1 s by 2.5, ends at 3.25; step 4.25 */
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 2, .step = 4.25 });
	/* 4x beside compute, 1x idle: by 3 (the op below done) a quarter of
	 * a second's work, 0.25 of the average's 0.5 s; the rest at its own
	 * speed to 3.25: the update waits 0.25, step 4.25 (one factor 4 for
	 * all: the average 2 s, to 4, step 5) */
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .beside = 4, .idle = 1, .step = 4.25,
				      .exposed = 0.25, .slice = 1.25 });
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .beside = 4, .idle = 4, .step = 5, .exposed = 1,
				      .slice = 2 });
	/* the same at 2x idle: the rest takes 0.5, to 3.5, step 4.5 */
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .beside = 4, .idle = 2, .step = 4.5,
				      .exposed = 0.5, .slice = 1.5 });
	/* the other rank 1 s behind: nothing done while it waits (2..3), then
	 * idle: 0.5 at its own speed to 3.5, step 4.5 */
	simulated((struct comm_case){ .comm_s = 0.5, .slowdown = 1, .skew = 1, .beside = 4, .idle = 1, .step = 4.5,
				      .exposed = 0.5, .slice = 1.5 });
	return test_exit_code();
}
