#include "ferry/platform.h"
#include "core/clock.h"

#include <cblas.h>
#include <stdbool.h>
#include <strings.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Declared by OpenBLAS but not in every cblas.h. */
char *openblas_get_corename(void);
void openblas_set_num_threads(int n);

const char *ferry_blas_corename(void)
{
	const char *name = openblas_get_corename();

	return name ? name : "unknown";
}

static bool cpu_has_avx512(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

static bool cpu_has_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* OpenBLAS cores that use neither AVX2 nor AVX-512 kernels. */
static bool is_generic_core(const char *core)
{
	static const char *const slow[] = {
		"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Barcelona",
		"Opteron", "Opteron_SSE3", "Katmai", "Coppermine", "Northwood", "Banias",
		"Sandybridge", "Bulldozer", "Piledriver", "Nano", "generic", "unknown",
	};

	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++)
		if (strcasecmp(core, slow[i]) == 0)
			return true;
	return false;
}

const char *ferry_blas_core_for(const char *detected, bool avx512, bool avx2_fma)
{
	if (!is_generic_core(detected))
		return NULL;
	if (avx512)
		return "SkylakeX";
	if (avx2_fma)
		return "Haswell";
	return NULL;
}

const char *ferry_blas_better_core(void)
{
	return ferry_blas_core_for(ferry_blas_corename(), cpu_has_avx512(), cpu_has_avx2());
}

void ferry_blas_relaunch_if_slow(char **argv)
{
	const char *better;

	if (getenv("OPENBLAS_CORETYPE") || getenv("FERRY_BLAS_RELAUNCHED"))
		return;
	better = ferry_blas_better_core();
	if (!better)
		return;
	setenv("FERRY_BLAS_RELAUNCHED", ferry_blas_corename(), 1);
	setenv("OPENBLAS_CORETYPE", better, 1);
	execv("/proc/self/exe", argv);
	/* exec failed: carry on with the slow kernels rather than not at all */
	unsetenv("OPENBLAS_CORETYPE");
	unsetenv("FERRY_BLAS_RELAUNCHED");
}

const char *ferry_blas_core_origin(void)
{
	static char buf[128];
	const char *was = getenv("FERRY_BLAS_RELAUNCHED");

	if (was) {
		snprintf(buf, sizeof(buf), "forced by ferry (OpenBLAS detected %s)", was);
		return buf;
	}
	if (getenv("OPENBLAS_CORETYPE"))
		return "set by OPENBLAS_CORETYPE";
	return "detected by OpenBLAS";
}

int ferry_max_threads(void)
{
	return FERRY_THREADS_PER_CORE * omp_get_num_procs();
}

void ferry_set_threads(int n)
{
	if (n <= 0)
		n = omp_get_num_procs();
	if (n > ferry_max_threads())
		n = ferry_max_threads();
	omp_set_num_threads(n);
	openblas_set_num_threads(n);
}

int ferry_get_threads(void)
{
	return omp_get_max_threads();
}

int ferry_cpu_count(void)
{
	int given = ferry_cpu_count_given();

	return given > 0 ? given : omp_get_num_procs();
}

const char *ferry_cpu_name(void)
{
	static char name[128];
	char line[256];
	FILE *f;

	if (name[0])
		return name;
	snprintf(name, sizeof(name), "unknown CPU");
	f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return name;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			colon += 2;
			colon[strcspn(colon, "\n")] = 0;
			snprintf(name, sizeof(name), "%s", colon);
			break;
		}
	}
	fclose(f);
	return name;
}

const char *ferry_cpu_features(void)
{
	return cpu_has_avx512() ? "avx512" : cpu_has_avx2() ? "avx2+fma" : "sse";
}

double ferry_cpu_sgemm_flops(int n)
{
	size_t nn = (size_t)(n > 0 ? n : 1) * (size_t)(n > 0 ? n : 1);
	float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)), *c = malloc(nn * sizeof(float));
	double best = 0;

	if (n >= 1 && a && b && c) {
		for (size_t i = 0; i < nn; i++) {
			a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
			b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
		}
		for (int r = 0; r < 4; r++) {
			double t = ferry_now_s();

			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
			t = ferry_now_s() - t;
			if (r > 0 && t > 0 && 2.0 * n * n * (double)n / t > best)
				best = 2.0 * n * n * (double)n / t;
		}
	}
	free(a);
	free(b);
	free(c);
	return best;
}
