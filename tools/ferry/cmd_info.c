/* ferry info: what this build and machine offer. */
#include "calib_cache.h"
#include "cli_args.h"
#include "commands.h"
#include "ferry/backend.h"
#include "ferry/comm.h"
#include "ferry/platform.h"

#include <stdio.h>
#include <string.h>

/* The cached calibration of this machine and backend, or why there is none. */
static void print_calibration(ferry_backend_t be)
{
	ferry_calibration_t c;
	char path[4200] = "";

	if (calib_cache_load(be, &c, path, sizeof(path)) != FERRY_OK) {
		printf("        calibration: none usable (%s)\n", ferry_last_error());
		return;
	}
	printf("        calibration (%s):\n", path);
	calib_print(stdout, c, "          ");
	ferry_calibration_free(c);
}

/* Which collectives engines are built in, for runs on many processes. */
static void print_collectives(void)
{
	static const char *const engines[2][3] = {
		{ "mpi", "MPI", "apt-get install libopenmpi-dev, then rebuild" },
		{ "nccl", "NCCL", "needs the CUDA backend and nccl.h, libnccl under the CUDA installation" },
	};
	char v[128];

	printf("collectives:");
	for (int i = 0; i < 2; i++) {
		if (ferry_comm_built_in(engines[i][0]))
			printf("%s %s built in (%s)", i ? "," : "", engines[i][1],
			       ferry_comm_engine_version(engines[i][0], v, sizeof(v)));
		else
			printf("%s %s not built in (%s)", i ? "," : "", engines[i][1], engines[i][2]);
	}
	printf("\n");
}

static int unexpected(const char *cmd, const char *arg, void *ctx)
{
	(void)ctx;
	fprintf(stderr, "ferry %s: unexpected argument '%s'\n", cmd, arg);
	return 2;
}

int cmd_info(int argc, char **argv)
{
	static const struct cli_group none[] = { { NULL } }; /* info takes no flags */
	int rc = ferry_cli_parse(&(struct cli_command){ .cmd = "info", .groups = none, .arg = unexpected }, argc, argv);

	if (rc == CLI_HELP) {
		printf("usage: ferry info\n\nPrints the backends compiled in and whether each "
		       "can run here, the devices, the BLAS kernels and threads, the collectives\n"
		       "engines built in (MPI, NCCL: for mpirun -np N ferry train), and each\n"
		       "device's cached calibration (ferry calibrate), or why there is none.\n");
		return 0;
	}
	if (rc)
		return rc;
	printf("ferry %s\n", FERRY_VERSION_STRING);
	printf("cpu: %s (%d cores, %s)\n", ferry_cpu_name(), ferry_cpu_count(), ferry_cpu_features());
	printf("blas: OpenBLAS, core %s, %s\n", ferry_blas_corename(), ferry_blas_core_origin());
	printf("threads: %d\n", ferry_get_threads());
	print_collectives();
	{
		struct ferry_memory_limit ml;
		char a[FERRY_SIZE_CHARS], b[FERRY_SIZE_CHARS];

		ferry_memory_limit(&ml);
		printf("pinned host memory: a run pins at most --pinned-limit, by default %s (half of %s, "
		       "%s); `ferry plan` shows a run's pinned and pageable bytes\n",
		       ferry_format_size(ml.bytes / 2, a), ml.bound, ferry_format_size(ml.bytes, b));
	}
	printf("backends:\n");
	for (int i = 0; i < ferry_backend_count(); i++) {
		const char *name = ferry_backend_name_at(i);
		ferry_backend_t be;

		if (ferry_backend_probe(name) != FERRY_OK) {
			printf("  %-5s unavailable: %s\n", name, ferry_last_error());
			continue;
		}
		if (ferry_backend_open(name, NULL, &be) != FERRY_OK) {
			printf("  %-5s failed to open: %s\n", name, ferry_last_error());
			continue;
		}
		struct ferry_backend_caps caps = ferry_backend_caps(be);

		printf("  %-5s %s\n", name, ferry_backend_description(be));
		printf("        async %s, events %s, pinned host memory %s\n", caps.async ? "yes" : "no",
		       caps.events ? "yes" : "no", caps.host_pinned ? "yes" : "no");
		print_calibration(be);
		ferry_backend_close(be);
	}
	calib_print_all(stdout);
	return 0;
}
