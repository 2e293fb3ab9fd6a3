/*
 * The collectives interface (ferry/comm.h): run alone it checks the
 * one-process engine; run by mpirun (tests/cli/comm_mpi.sh, 2 and 4
 * ranks) it checks MPI's collectives against values each rank computes
 * on its own from the ranks' known contributions (all-gather in place
 * too), agreement on an error only one rank saw and on one every rank
 * saw, two threads each on a communicator of its own, and the collective
 * timeout naming a rank that is late; and the pick of a device
 * backend's engine by FERRY_COMM_ENGINE.
 */
#include "ferry/comm.h"
#include "comm/comm_pick.h"
#include "core/error.h"
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* Rank r's contribution at i: (r + 1) * (i + 1), exact in float. */
static float part(int r, size_t i)
{
	return (float)((r + 1) * (int)(i + 1));
}

static void check_all_reduce(ferry_comm_t c, int n)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c);
	float *x = TALLOC(float, n), *y = TALLOC(float, n);
	int bad = 0;

	for (int i = 0; i < n; i++)
		x[i] = y[i] = part(r, i);
	CHECK(ferry_comm_all_reduce(c, x, n, FERRY_COMM_F32, FERRY_COMM_SUM, NULL) == FERRY_OK, "%s",
	      ferry_last_error());
	CHECK(ferry_comm_all_reduce(c, y, n, FERRY_COMM_F32, FERRY_COMM_AVG, NULL) == FERRY_OK, "%s",
	      ferry_last_error());
	for (int i = 0; i < n; i++) {
		double sum = (double)(i + 1) * N * (N + 1) / 2;

		bad += x[i] != (float)sum || y[i] != (float)(sum / N);
	}
	CHECK(!bad, "all-reduce of %d floats over %d ranks: %d wrong (x[0] %g, avg %g)", n, N, bad, x[0], y[0]);
	free(x);
	free(y);
}

static void check_max_and_ints(ferry_comm_t c)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c), v[2] = { r, -r };
	double d = r + 0.5;

	CHECK(ferry_comm_all_reduce(c, v, 1, FERRY_COMM_I32, FERRY_COMM_MAX, NULL) == FERRY_OK &&
	      ferry_comm_all_reduce(c, v + 1, 1, FERRY_COMM_I32, FERRY_COMM_MIN, NULL) == FERRY_OK && v[0] == N - 1 &&
	      v[1] == 1 - N, "max %d, min %d over %d ranks", v[0], v[1], N);
	CHECK(ferry_comm_all_reduce(c, &d, 1, FERRY_COMM_F64, FERRY_COMM_MAX, NULL) == FERRY_OK && d == N - 0.5,
	      "double max %g", d);
	CHECK(ferry_comm_all_reduce(c, v, 1, FERRY_COMM_I32, FERRY_COMM_AVG, NULL) == FERRY_ERR_INVALID,
	      "an average of integers is refused");
}

/* Reduce-scatter then all-gather: every rank ends with every block's sum. */
static void check_scatter_gather(ferry_comm_t c, int per)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c), bad = 0;
	float *send = TALLOC(float, (size_t)N * per), *mine = TALLOC(float, per), *all = TALLOC(float, (size_t)N * per);

	for (int i = 0; i < N * per; i++)
		send[i] = part(r, (size_t)i);
	CHECK(ferry_comm_reduce_scatter(c, send, mine, per, FERRY_COMM_F32, FERRY_COMM_SUM, NULL) == FERRY_OK, "%s",
	      ferry_last_error());
	for (int i = 0; i < per; i++)
		bad += mine[i] != (float)((double)(r * per + i + 1) * N * (N + 1) / 2);
	CHECK(!bad, "rank %d's block of the reduce-scatter: %d wrong", r, bad);
	CHECK(ferry_comm_all_gather(c, mine, all, per, FERRY_COMM_F32, NULL) == FERRY_OK, "%s", ferry_last_error());
	bad = 0;
	for (int i = 0; i < N * per; i++)
		bad += all[i] != (float)((double)(i + 1) * N * (N + 1) / 2);
	CHECK(!bad, "all-gather of the blocks: %d wrong", bad);
	/* in place: each rank's block already at its place in the whole */
	memset(all, 0, sizeof(float) * N * per);
	memcpy(all + r * per, mine, sizeof(float) * per);
	CHECK(ferry_comm_all_gather(c, all + r * per, all, per, FERRY_COMM_F32, NULL) == FERRY_OK, "%s",
	      ferry_last_error());
	bad = 0;
	for (int i = 0; i < N * per; i++)
		bad += all[i] != (float)((double)(i + 1) * N * (N + 1) / 2);
	CHECK(!bad, "all-gather in place: %d wrong", bad);
	free(send);
	free(mine);
	free(all);
}

/* Uneven slices: rank r holds r + 1 elements of the whole (rank 0 also
 * none at all in a second round); reduce-scatter (averaged) then
 * all-gather, in place, gives every rank the whole average. */
static void check_uneven(ferry_comm_t c, bool empty0)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c), bad = 0;
	size_t *counts = TALLOC(size_t, N), total = 0, mine = 0;

	for (int k = 0; k < N; k++) {
		counts[k] = empty0 && k == 0 ? 0 : (size_t)k + 1;
		mine = k < r ? mine + counts[k] : mine; /* where this rank's starts */
		total += counts[k];
	}
	float *send = TALLOC(float, total), *all = TALLOC(float, total);

	for (size_t i = 0; i < total; i++)
		send[i] = part(r, i);
	memset(all, 0, sizeof(float) * total);
	CHECK(ferry_comm_reduce_scatter_v(c, send, counts[r] ? all + mine : NULL, counts, FERRY_COMM_F32, FERRY_COMM_AVG,
					  NULL) == FERRY_OK, "%s", ferry_last_error());
	for (size_t i = mine; i < mine + counts[r]; i++)
		bad += all[i] != (float)((double)(i + 1) * (N + 1) / 2);
	CHECK(!bad, "rank %d's uneven slice of the average: %d wrong", r, bad);
	CHECK(ferry_comm_all_gather_v(c, counts[r] ? all + mine : NULL, all, counts, FERRY_COMM_F32, NULL) == FERRY_OK,
	      "%s", ferry_last_error());
	bad = 0;
	for (size_t i = 0; i < total; i++)
		bad += all[i] != (float)((double)(i + 1) * (N + 1) / 2);
	CHECK(!bad, "uneven all-gather in place: %d wrong", bad);
	free(send);
	free(all);
	free(counts);
}

static void check_broadcast(ferry_comm_t c)
{
	int N = ferry_comm_size(c), root = N - 1;
	char msg[24];

	snprintf(msg, sizeof(msg), "from %d", ferry_comm_rank(c));
	CHECK(ferry_comm_broadcast(c, msg, sizeof(msg), FERRY_COMM_BYTE, root, NULL) == FERRY_OK, "%s",
	      ferry_last_error());
	char want[24];
	snprintf(want, sizeof(want), "from %d", root);
	CHECK(!strcmp(msg, want), "broadcast from rank %d gave '%s'", root, msg);
	CHECK(ferry_comm_broadcast(c, msg, 1, FERRY_COMM_BYTE, N, NULL) == FERRY_ERR_INVALID, "a root past the ranks");
}

/* The last rank fails alone: every rank gets its status and message. */
static void check_agree(ferry_comm_t c)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c);
	ferry_status st = FERRY_OK;
	char want[64];

	CHECK(ferry_comm_agree(c, FERRY_OK) == FERRY_OK && !ferry_comm_error_shared(c), "all ranks fine");
	if (r == N - 1)
		st = ferry_error(FERRY_ERR_IO, "shard 3 is missing");
	else
		(void)ferry_error(FERRY_ERR_INVALID, "another message");
	st = ferry_comm_agree(c, st);
	CHECK(st == FERRY_ERR_IO && ferry_comm_error_shared(c), "rank %d: agreed status %d", r, st);
	snprintf(want, sizeof(want), N > 1 ? "rank %d: shard 3 is missing" : "shard 3 is missing", N - 1);
	CHECK(!strcmp(ferry_last_error(), want), "rank %d's message: '%s', not '%s'", r, ferry_last_error(), want);
	CHECK(ferry_comm_agree(c, FERRY_OK) == FERRY_OK && !ferry_comm_error_shared(c), "fine again");
	/* every rank failed: rank 0's message, no rank named */
	st = ferry_error(FERRY_ERR_INVALID, "bad flag on rank %d", r);
	CHECK(ferry_comm_agree(c, st) == FERRY_ERR_INVALID && !strcmp(ferry_last_error(), "bad flag on rank 0"),
	      "rank %d: every rank failed: '%s'", r, ferry_last_error());
}

/* A message given by the caller (not ferry_last_error's); every rank's
 * lines rank 0's, then the last rank's --steps different, then a line
 * missing there: the first difference, naming that rank. */
static void check_same_lines(ferry_comm_t c)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c);
	char want[96], text[96];

	(void)ferry_error(FERRY_ERR_INVALID, "a stale message");
	snprintf(want, sizeof(want), N > 1 ? "rank %d: cannot write t.json" : "cannot write t.json", N - 1);
	CHECK(ferry_comm_agree_message(c, r == N - 1 ? FERRY_ERR_INVALID : FERRY_OK, r == N - 1 ? "cannot write t.json"
											 : NULL) == FERRY_ERR_INVALID &&
		      !strcmp(ferry_last_error(), want),
	      "rank %d: a given message: '%s'", r, ferry_last_error());
	CHECK(ferry_comm_same_lines(c, "--lr=0.1\n--steps=10\n", NULL) == FERRY_OK, "the same lines");
	snprintf(text, sizeof(text), "--lr=0.1\n--steps=%d\n", r == N - 1 && N > 1 ? 5 : 10);
	snprintf(want, sizeof(want), "rank %d: --steps is 5, rank 0 has 10", N - 1);
	CHECK(N == 1 || (ferry_comm_same_lines(c, text, NULL) == FERRY_ERR_INVALID && !strcmp(ferry_last_error(), want)),
	      "rank %d: different lines: '%s'", r, ferry_last_error());
	snprintf(want, sizeof(want), "rank %d: it has no line where rank 0 has --steps=10", N - 1);
	CHECK(N == 1 || (ferry_comm_same_lines(c, r == N - 1 ? "--lr=0.1\n" : "--lr=0.1\n--steps=10\n", NULL) ==
			 FERRY_ERR_INVALID && !strcmp(ferry_last_error(), want)),
	      "rank %d: a line missing: '%s'", r, ferry_last_error());
	snprintf(want, sizeof(want), N > 1 ? "rank %d: no files match 'x'" : "no files match 'x'", N - 1);
	CHECK(ferry_comm_same_lines(c, "a=1\n", r == N - 1 ? "no files match 'x'" : NULL) == FERRY_ERR_INVALID &&
		      !strcmp(ferry_last_error(), want),
	      "rank %d: its own failure: '%s'", r, ferry_last_error());
}

struct thread_arg {
	ferry_comm_t c;
	int n;
};

static void *other_thread(void *p)
{
	struct thread_arg *a = p;

	for (int k = 0; k < 20; k++)
		check_all_reduce(a->c, a->n);
	return NULL;
}

/* A communicator of its own on a second thread, collectives on both at once. */
static void check_threads(ferry_comm_t c)
{
	struct thread_arg a = { NULL, 1000 };
	pthread_t t;

	CHECK(ferry_comm_dup(c, &a.c) == FERRY_OK, "%s", ferry_last_error());
	if (!a.c)
		return;
	CHECK(ferry_comm_size(a.c) == ferry_comm_size(c) && ferry_comm_rank(a.c) == ferry_comm_rank(c), "same ranks");
	pthread_create(&t, NULL, other_thread, &a);
	for (int k = 0; k < 20; k++)
		check_scatter_gather(c, 100);
	pthread_join(t, NULL);
	ferry_comm_free(a.c);
}

static atomic_int fired; /* the timeout's status, 0: not called */
static char fired_msg[512];

static void on_timeout(void *arg, ferry_status st)
{
	(void)arg;
	snprintf(fired_msg, sizeof(fired_msg), "%s", ferry_last_error());
	atomic_store(&fired, st);
}

/* A timeout of 0.3 s watches c and a duplicate made after it (slot 1):
 * the last rank sleeps 1.5 s outside any collective while the others
 * wait in an all-reduce on the duplicate; rank 0 is told the last rank
 * did not arrive (alive: its watchdog answered), the others wait out
 * their grace; the all-reduce completes when the last rank comes. */
static void check_timeout(ferry_comm_t c)
{
	int r = ferry_comm_rank(c), N = ferry_comm_size(c), x = 1;
	ferry_comm_t d = NULL;
	char want[64];

	CHECK(ferry_comm_set_timeout(c, -1, on_timeout, NULL) == FERRY_ERR_INVALID, "a negative timeout refused");
	CHECK(ferry_comm_set_timeout(c, 0.3, NULL, NULL) == FERRY_ERR_INVALID, "a timeout calling nothing refused");
	CHECK(ferry_comm_set_timeout(c, 0.3, on_timeout, NULL) == FERRY_OK && ferry_comm_dup(c, &d) == FERRY_OK, "%s",
	      ferry_last_error());
	if (!d)
		return;
	if (N > 1 && r == N - 1)
		nanosleep(&(struct timespec){ 1, 500000000 }, NULL);
	CHECK(ferry_comm_all_reduce(d, &x, 1, FERRY_COMM_I32, FERRY_COMM_SUM, NULL) == FERRY_OK && x == N,
	      "the late rank's all-reduce: %d", x);
	snprintf(want, sizeof(want), "rank %d did not arrive; rank 0 waited ", N - 1);
	if (N > 1 && r == 0) {
		CHECK(atomic_load(&fired) == FERRY_ERR_IO && strstr(fired_msg, want) == fired_msg &&
		      strstr(fired_msg, "(all-reduce) of communicator 1"), "rank 0 told: status %d, '%s'",
		      atomic_load(&fired), fired_msg);
		printf("the timeout on rank 0: %s\n", fired_msg);
	} else {
		CHECK(!atomic_load(&fired), "rank %d not told first: '%s'", r, fired_msg);
	}
	ferry_comm_free(d);
}

/* FERRY_COMM_ENGINE's pick (comm_pick.c): mpi stages, nccl asks for
 * NCCL (refused where it is not built in), anything else is refused
 * naming it; auto takes NCCL only with a GPU for each rank here. */
static void check_pick(ferry_comm_t c)
{
	bool nccl = true, built = ferry_comm_built_in("nccl");
	char why[160];

	setenv("FERRY_COMM_ENGINE", "mpi", 1);
	CHECK(ferry_comm_pick(c, &nccl, why, sizeof(why)) == FERRY_OK && !nccl && strstr(why, "staging"),
	      "mpi: %s", why);
	CHECK(!ferry_comm_pick_planned_nccl(), "mpi planned");
	setenv("FERRY_COMM_ENGINE", "nccl", 1);
	CHECK((ferry_comm_pick(c, &nccl, why, sizeof(why)) == FERRY_OK) == built && nccl == built, "nccl: %s",
	      built ? why : ferry_last_error());
	CHECK(ferry_comm_pick_planned_nccl() == built, "nccl planned");
	setenv("FERRY_COMM_ENGINE", "gloo", 1);
	CHECK(ferry_comm_pick(c, &nccl, why, sizeof(why)) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "FERRY_COMM_ENGINE=gloo: nccl, mpi or auto"), "%s", ferry_last_error());
	unsetenv("FERRY_COMM_ENGINE");
	CHECK(ferry_comm_pick(c, &nccl, why, sizeof(why)) == FERRY_OK &&
	      nccl == (built && ferry_comm_nccl_devices() >= ferry_comm_local_size(c)) &&
	      strstr(why, nccl ? "NCCL: built in" : "MPI through pinned host staging"), "auto: %s", why);
}

int main(void)
{
	ferry_comm_t c;

	CHECK(ferry_comm_open(&c) == FERRY_OK, "%s", ferry_last_error());
	if (!c)
		return test_exit_code();
	printf("rank %d of %d (%s), local %d of %d\n", ferry_comm_rank(c), ferry_comm_size(c), ferry_comm_engine(c),
	       ferry_comm_local_rank(c), ferry_comm_local_size(c));
	CHECK(ferry_comm_launched() == !strcmp(ferry_comm_engine(c), "mpi"), "launched by mpirun: the MPI engine");
	CHECK(ferry_comm_local_rank(c) < ferry_comm_local_size(c) && ferry_comm_local_size(c) <= ferry_comm_size(c),
	      "local ranks");
	check_all_reduce(c, 1);
	check_all_reduce(c, 100000);
	check_max_and_ints(c);
	check_scatter_gather(c, 7);
	check_uneven(c, false);
	check_uneven(c, true);
	check_broadcast(c);
	check_agree(c);
	check_same_lines(c);
	check_threads(c);
	check_timeout(c);
	check_pick(c);
	CHECK(ferry_comm_barrier(c) == FERRY_OK, "%s", ferry_last_error());
	ferry_comm_free(c);
	return test_exit_code();
}
