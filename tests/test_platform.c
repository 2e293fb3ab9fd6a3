/* The BLAS-core decision: generic cores on capable CPUs are replaced,
 * good cores and old CPUs are left alone; and what ferry info reports.
 * Thread counts are capped at FERRY_THREADS_PER_CORE per core (100000 OpenMP
 * threads took 45 s to start and then died inside libgomp); the sgemm rate
 * that serves as a peak for model FLOP utilisation is measured. */
#include "ferry/platform.h"
#include "test_util.h"

int main(void)
{
	CHECK(!strcmp(ferry_blas_core_for("Prescott", true, true), "SkylakeX"), "Prescott on AVX-512");
	CHECK(!strcmp(ferry_blas_core_for("Prescott", false, true), "Haswell"), "Prescott on AVX2");
	CHECK(!strcmp(ferry_blas_core_for("Nehalem", false, true), "Haswell"), "Nehalem on AVX2");
	CHECK(!strcmp(ferry_blas_core_for("Sandybridge", true, true), "SkylakeX"), "AVX-only core on AVX-512");
	CHECK(ferry_blas_core_for("Prescott", false, false) == NULL, "an old CPU keeps its core");
	CHECK(ferry_blas_core_for("Haswell", true, true) == NULL, "a good core is kept");
	CHECK(ferry_blas_core_for("Zen", false, true) == NULL, "Zen is kept");
	CHECK(ferry_blas_core_for("SkylakeX", true, true) == NULL, "SkylakeX is kept");
	CHECK(ferry_blas_core_for("Cooperlake", true, true) == NULL, "newer cores are kept");
	CHECK(strlen(ferry_blas_corename()) > 0, "a core name: %s", ferry_blas_corename());
	/* this process was not relaunched and nobody set the core */
	if (!getenv("OPENBLAS_CORETYPE"))
		CHECK(!strcmp(ferry_blas_core_origin(), "detected by OpenBLAS"), "origin: %s", ferry_blas_core_origin());
	CHECK(ferry_cpu_count() >= 1 && ferry_get_threads() >= 1, "threads");
	CHECK(ferry_max_threads() == FERRY_THREADS_PER_CORE * ferry_cpu_count(), "max threads %d", ferry_max_threads());
	ferry_set_threads(100000);
	CHECK(ferry_get_threads() == ferry_max_threads(), "100000 threads capped at %d: %d", ferry_max_threads(),
	      ferry_get_threads());
	ferry_set_threads(1);
	CHECK(ferry_get_threads() == 1, "1 thread: %d", ferry_get_threads());
	ferry_set_threads(0);
	CHECK(ferry_get_threads() == ferry_cpu_count(), "0 = all cores: %d", ferry_get_threads());
	{
		double rate = ferry_cpu_sgemm_flops(256);

		printf("sgemm 256^3: %.1f GFLOP/s on %d threads\n", rate / 1e9, ferry_get_threads());
		CHECK(rate > 1e8 && rate < 1e14, "sgemm rate %g FLOP/s", rate);
		CHECK(ferry_cpu_sgemm_flops(0) == 0, "no matrix, no rate");
	}
	return test_exit_code();
}
