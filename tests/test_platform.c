/* The BLAS-core decision: generic cores on capable CPUs are replaced,
 * good cores and old CPUs are left alone; and what ferry info reports. */
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
	return test_exit_code();
}
