/*
 * Collectives over the ranks of an MPI launch, MPI's own calls beside
 * ferry's (src/comm/comm_mpi.c), at the sizes a data-parallel step uses:
 * the fastest and the median call after a barrier, the slowest rank's.
 *
 *   mpirun --oversubscribe -np 2 build/bench_collectives [REPEATS]
 *
 * Written for the reduce-scatter that took 7.8 ms at 3 KiB in a
 * calibration, 1.7 us as an all-reduce (bench/results/
 * 2026-11-26_cpu_data_parallel_model.md has the figures and the cause).
 */
#include "bench_util.h"
#include "ferry/comm.h"

#define USAGE "usage: mpirun -np N bench_collectives [REPEATS (1..64, default 20)], N >= 2\n"

static bool asks_help(int argc, char **argv)
{
	return argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
}

#if __has_include(<mpi.h>)
#include <mpi.h>

enum row { MPI_AR, MPI_RSB, MPI_RSV, FERRY_AR, FERRY_RS, FERRY_RSV, ROWS };
static const char *const row_name[ROWS] = { "MPI_Allreduce", "MPI_Reduce_scatter_block",
					    "MPI_Reduce_scatter (uneven)", "ferry_comm_all_reduce",
					    "ferry_comm_reduce_scatter", "ferry_comm_reduce_scatter_v (uneven)" };

/* Counts a rank each, the first rank one more, the last one fewer. */
static void uneven(int *n, size_t *z, int ranks, size_t per)
{
	for (int r = 0; r < ranks; r++)
		n[r] = (int)per, z[r] = per;
	n[0]++, z[0]++, n[ranks - 1]--, z[ranks - 1]--;
}

static ferry_status one_call(ferry_comm_t c, enum row k, float *a, float *b, size_t n)
{
	int ranks = ferry_comm_size(c), ni[64];
	size_t per = n / (size_t)ranks, nz[64];

	uneven(ni, nz, ranks, per);
	switch (k) {
	case MPI_AR: return MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ? FERRY_ERR_IO : 0;
	case MPI_RSB: return MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ? FERRY_ERR_IO : 0;
	case MPI_RSV: return MPI_Reduce_scatter(a, b, ni, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ? FERRY_ERR_IO : 0;
	case FERRY_AR: return ferry_comm_all_reduce(c, a, n, FERRY_COMM_F32, FERRY_COMM_SUM, NULL);
	case FERRY_RS: return ferry_comm_reduce_scatter(c, a, b, per, FERRY_COMM_F32, FERRY_COMM_SUM, NULL);
	default: return ferry_comm_reduce_scatter_v(c, a, b, nz, FERRY_COMM_F32, FERRY_COMM_SUM, NULL);
	}
}

/* One row at one size: a first call, then `reps` timed, each after a barrier. */
static void time_row(ferry_comm_t c, enum row k, float *a, float *b, size_t bytes, int reps)
{
	double t[64], v[3], m[3];
	ferry_status st = one_call(c, k, a, b, bytes / sizeof(float));

	for (int r = 0; r < reps && !st; r++) {
		double t0;

		MPI_Barrier(MPI_COMM_WORLD);
		t0 = now_s();
		st = one_call(c, k, a, b, bytes / sizeof(float));
		t[r] = now_s() - t0;
	}
	qsort(t, (size_t)reps, sizeof(*t), bench_cmp_double);
	v[0] = t[0], v[1] = t[reps / 2], v[2] = st ? 1 : 0;
	MPI_Reduce(v, m, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (ferry_comm_rank(c) == 0)
		printf("| %s | %zu | %.1f | %.1f |%s\n", row_name[k], bytes, 1e6 * m[0], 1e6 * m[1],
		       m[2] ? " failed" : "");
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 3 << 10, 64 << 10, 1 << 20, 9 << 20, 64 << 20 };
	int repeats = argc > 1 ? atoi(argv[1]) : 20;
	ferry_comm_t c;
	float *a, *b;

	if (asks_help(argc, argv)) {
		printf(USAGE);
		return 0;
	}
	a = malloc((64 << 20) + 64), b = malloc((64 << 20) + 64);
	if (!a || !b || repeats < 1 || repeats > 64 || ferry_comm_open(&c) || ferry_comm_size(c) < 2) {
		fprintf(stderr, USAGE);
		return 1;
	}
	for (size_t i = 0; i < (64u << 20) / sizeof(float); i++)
		a[i] = (float)(i % 1000) * 1e-3f;
	if (ferry_comm_rank(c) == 0)
		printf("%d ranks, OMPI_MCA_mpi_yield_when_idle=%s\n\n| call | bytes | fastest (us) | median (us) |\n"
		       "|---|---:|---:|---:|\n", ferry_comm_size(c), getenv("OMPI_MCA_mpi_yield_when_idle") ?
		       getenv("OMPI_MCA_mpi_yield_when_idle") : "(unset)");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++)
		for (int k = 0; k < ROWS; k++)
			time_row(c, (enum row)k, a, b, sizes[s], sizes[s] >= (8u << 20) && repeats > 5 ? 5 : repeats);
	ferry_comm_free(c);
	free(a), free(b);
	return 0;
}
#else
int main(int argc, char **argv)
{
	if (asks_help(argc, argv)) {
		printf(USAGE);
		return 0;
	}
	fprintf(stderr, "bench_collectives: ferry was built without MPI\n");
	return 77;
}
#endif
