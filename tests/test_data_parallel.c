/*
 * Data parallel (issue 22 item 3), at the library's level.
 *
 * Alone (ctest): the loader's parts (ferry_loader_set_part): N loaders of
 * the same global batch, each reading its part, give together the rows
 * one loader reads, in order and shuffled, moving together; a bad token
 * only in one part fails that part only.
 *
 * Under mpirun (tests/cli/data_parallel.sh, 2 and 4 ranks), each rank
 * also: trains a few steps and checks after each that every rank's
 * parameters hash the same (all-gathered here, independent of the
 * trainer's own check); puts one wrong value into the last rank's
 * parameters and sees the save refused on every rank, naming that rank,
 * with no file written; and reads a shard whose bad token is in rank 1's
 * rows only, which stops every rank at its first step with rank 1's
 * message.
 */
#include "ferry/checkpoint.h"
#include "ferry/comm.h"
#include "ferry/data.h"
#include "ferry/train.h"
#include "scratch_util.h"
#include "test_util.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB 13

/* N loaders' parts of batches of G = N*B rows against one loader's whole
 * batches, batch after batch. */
static void check_parts(int N, int B, int T, bool shuffle)
{
	const int G = N * B, batches = 7;
	ferry_loader_t whole, part[4];
	int32_t *wi = TALLOC(int32_t, G * T), *wt = TALLOC(int32_t, G * T), *pi = TALLOC(int32_t, B * T),
		*pt = TALLOC(int32_t, B * T);
	int bad = 0;

	CHECK(ferry_loader_open(path_in("data_*.bin"), G, T, VOCAB, &whole) == FERRY_OK, "%s", ferry_last_error());
	for (int r = 0; r < N; r++) {
		CHECK(ferry_loader_open(path_in("data_*.bin"), G, T, VOCAB, &part[r]) == FERRY_OK &&
		      ferry_loader_set_part(part[r], G, r * B, B) == FERRY_OK, "%s", ferry_last_error());
		CHECK(!shuffle || ferry_loader_shuffle(part[r], 5) == FERRY_OK, "shuffle");
	}
	CHECK(!shuffle || ferry_loader_shuffle(whole, 5) == FERRY_OK, "shuffle");
	for (int k = 0; k < batches; k++) {
		int64_t ws, wo, ps, po;

		CHECK(ferry_loader_next(whole, wi, wt) == FERRY_OK, "%s", ferry_last_error());
		ferry_loader_position(whole, &ws, &wo);
		for (int r = 0; r < N; r++) {
			CHECK(ferry_loader_next(part[r], pi, pt) == FERRY_OK, "%s", ferry_last_error());
			bad += memcmp(pi, wi + r * B * T, sizeof(int32_t) * B * T) != 0 ||
			       memcmp(pt, wt + r * B * T, sizeof(int32_t) * B * T) != 0;
			ferry_loader_position(part[r], &ps, &po);
			bad += ps != ws || po != wo || ferry_loader_epoch(part[r]) != ferry_loader_epoch(whole);
		}
	}
	CHECK(!bad, "%d ranks of %d rows, %s: %d parts differ from the whole batch's rows or position", N, B,
	      shuffle ? "shuffled" : "in order", bad);
	for (int r = 0; r < N; r++)
		ferry_loader_free(part[r]);
	ferry_loader_free(whole);
	free(wi), free(wt), free(pi), free(pt);
}

static void check_part_args(void)
{
	ferry_loader_t l;

	CHECK(ferry_loader_open(path_in("data_*.bin"), 6, 4, VOCAB, &l) == FERRY_OK, "%s", ferry_last_error());
	CHECK(ferry_loader_set_part(l, 4, 0, 2) == FERRY_ERR_INVALID, "a group that does not divide the batch");
	CHECK(ferry_loader_set_part(l, 3, 2, 2) == FERRY_ERR_INVALID, "a part past its group");
	CHECK(ferry_loader_set_part(l, 3, 1, 2) == FERRY_OK, "%s", ferry_last_error());
	ferry_loader_free(l);
}

static struct ferry_train_opts tiny_opts(ferry_comm_t comm, const char *data)
{
	struct ferry_train_opts o;

	ferry_train_opts_default(&o);
	o.model = (struct ferry_model_config){ .max_seq = 16, .vocab = VOCAB, .padded_vocab = 16,
					      .layers = 2, .heads = 2, .channels = 16 };
	o.data = path_in(data);
	o.B = 2;
	o.T = 8;
	o.steps = 20;
	o.lr = 1e-2f;
	o.threads = 1;
	o.comm = comm;
	return o;
}

/* This rank's parameters' hash, and whether every rank's is the same. */
static bool params_agree(ferry_comm_t c, ferry_trainer_t tr)
{
	ferry_model_t m = ferry_trainer_model(tr);
	size_t n = ferry_model_num_params(m);
	float *p = TALLOC(float, n);
	uint64_t h, all[64];
	bool same = true;

	CHECK(ferry_model_get_params(m, p) == FERRY_OK, "%s", ferry_last_error());
	h = ferry_params_hash(p, n);
	CHECK(ferry_comm_all_gather(c, &h, all, sizeof(h), FERRY_COMM_BYTE, NULL) == FERRY_OK, "%s", ferry_last_error());
	for (int r = 1; r < ferry_comm_size(c); r++)
		same &= all[r] == all[0];
	free(p);
	return same;
}

/* Steps keep every rank's parameters equal; a rank whose parameters were
 * made to differ stops the save on every rank. */
static void check_training(ferry_comm_t c)
{
	struct ferry_train_opts o = tiny_opts(c, "data_*.bin");
	int r = ferry_comm_rank(c), N = ferry_comm_size(c);
	struct ferry_step_metrics m;
	ferry_trainer_t tr;
	char want[64];

	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	if (!tr)
		return;
	for (int s = 0; s < 4; s++) {
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step: %s", ferry_last_error());
		CHECK(params_agree(c, tr), "rank %d: after step %d the ranks' parameters differ", r, s + 1);
	}
	if (r == N - 1) { /* one value off by one ulp */
		ferry_model_t mod = ferry_trainer_model(tr);
		float *p = TALLOC(float, ferry_model_num_params(mod));

		CHECK(ferry_model_get_params(mod, p) == FERRY_OK, "get");
		p[7] = nextafterf(p[7], 1.0f);
		CHECK(ferry_model_set_params(mod, p) == FERRY_OK, "set");
		free(p);
	}
	CHECK(ferry_trainer_save(tr, path_in("never.bin")) == FERRY_ERR_INVALID, "rank %d: saved", r);
	snprintf(want, sizeof(want), "rank %d's parameters differ", N - 1);
	CHECK(strstr(ferry_last_error(), want) && ferry_comm_error_shared(c), "rank %d: '%s'", r, ferry_last_error());
	CHECK(access(path_in("never.bin"), F_OK) != 0, "nothing written");
	ferry_trainer_free(tr);
}

/* A bad token in rank 1's rows of the first batch only: every rank reads
 * the shards' largest id before step 1 and refuses, with one message. */
static void check_bad_input(ferry_comm_t c)
{
	struct ferry_train_opts o = tiny_opts(c, "bad.bin");
	ferry_trainer_t tr = NULL;
	ferry_status st;

	o.shuffle = false;
	st = ferry_trainer_create(&o, &tr);
	CHECK(st == FERRY_ERR_INVALID && !tr && strstr(ferry_last_error(), "bad.bin holds token id 13, past the "
								       "model's vocabulary of 13"),
	      "rank %d: status %d, '%s'", ferry_comm_rank(c), st, ferry_last_error());
	ferry_trainer_free(tr);
}

static void make_data(ferry_comm_t c)
{
	uint16_t tok[3000];

	for (int i = 0; i < 3000; i++)
		tok[i] = (uint16_t)((i * 7 + i / 3) % VOCAB);
	if (ferry_comm_rank(c) == 0) {
		write_shard(path_in("data_0.bin"), tok, 1500);
		write_shard(path_in("data_1.bin"), tok + 1500, 900);
		tok[2 * 8 + 3] = VOCAB; /* rank 1's first row, batches of 2 x 8 per rank */
		write_shard(path_in("bad.bin"), tok, 1000);
	}
	CHECK(ferry_comm_barrier(c) == FERRY_OK, "barrier");
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

int main(void)
{
	ferry_comm_t c;

	CHECK(ferry_comm_open(&c) == FERRY_OK, "%s", ferry_last_error());
	if (!c)
		return test_exit_code();
	snprintf(dir, sizeof(dir), "%s/ferry_dp_XXXXXX", getenv("FERRY_TEST_TMP") ? getenv("FERRY_TEST_TMP") : "/tmp");
	if (ferry_comm_rank(c) == 0 && !mkdtemp(dir))
		perror("mkdtemp");
	CHECK(ferry_comm_broadcast(c, dir, sizeof(dir), FERRY_COMM_BYTE, 0, NULL) == FERRY_OK, "broadcast");
	make_data(c);
	if (ferry_comm_size(c) == 1) {
		for (int N = 1; N <= 4; N++)
			for (int sh = 0; sh < 2; sh++)
				check_parts(N, 3, 8, sh);
		check_part_args();
	} else {
		printf("rank %d of %d\n", ferry_comm_rank(c), ferry_comm_size(c));
		check_training(c);
		check_bad_input(c);
	}
	CHECK(ferry_comm_barrier(c) == FERRY_OK, "barrier");
	if (ferry_comm_rank(c) == 0)
		nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	ferry_comm_free(c);
	return test_exit_code();
}
