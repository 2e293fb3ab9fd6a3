/*
 * The host platform: CPU, threads, and which BLAS kernels are in use.
 *
 * Debian 12's OpenBLAS (0.3.21) identifies some recent Xeons under a
 * hypervisor as "Prescott" and then runs sgemm with SSE3 kernels, about 5x
 * slower.  OpenBLAS picks its kernels when it is loaded, from
 * OPENBLAS_CORETYPE if set, so the fix has to happen before that: a program
 * calls ferry_blas_relaunch_if_slow(argv) first thing in main(), which
 * re-executes the program once with OPENBLAS_CORETYPE set to the core the
 * CPU's features call for.
 */
#ifndef FERRY_PLATFORM_H
#define FERRY_PLATFORM_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OpenBLAS's name for the kernels it uses ("Haswell", "SkylakeX", ...). */
const char *ferry_blas_corename(void);
/* The core OpenBLAS should use on this CPU if its own choice is a slow
 * generic one; NULL when its choice is fine. */
const char *ferry_blas_better_core(void);
/* The same decision for a given detected core and CPU features (a pure
 * function, for tests): "SkylakeX" with AVX-512, "Haswell" with AVX2+FMA,
 * NULL when `detected` is not a generic core or the CPU has neither. */
const char *ferry_blas_core_for(const char *detected, bool avx512, bool avx2_fma);
/* Re-executes the program with OPENBLAS_CORETYPE set when
 * ferry_blas_better_core() says so (at most once: the relaunched process
 * sees FERRY_BLAS_RELAUNCHED).  Returns only when no relaunch happened. */
void ferry_blas_relaunch_if_slow(char **argv);
/* How the BLAS core was chosen: "detected by OpenBLAS", "forced by ferry
 * (was Prescott)", "set by OPENBLAS_CORETYPE". */
const char *ferry_blas_core_origin(void);

/* Threads for ferry's kernels and for BLAS; n <= 0 means all cores, and
 * more than ferry_max_threads() means that many (an OpenMP team of tens of
 * thousands of threads takes minutes to start and then fails). */
void ferry_set_threads(int n);
/* FERRY_THREADS_PER_CORE times the cores. */
#define FERRY_THREADS_PER_CORE 4
int ferry_max_threads(void);
int ferry_get_threads(void);
/* The CPUs the process was given (a rank's before ferry bound it to its
 * part: rank_cores.c), so what it reports, and a calibration's
 * fingerprint, do not change with the binding. */
int ferry_cpu_count(void);
/* CPU masks: bit c of word c / 64 is CPU c, for CPUs below FERRY_MAX_CPUS. */
#define FERRY_MAX_CPUS 1024
#define FERRY_CPU_WORDS (FERRY_MAX_CPUS / 64)
/* The CPUs this thread may run on, and their number. */
int ferry_cpu_mask(uint64_t mask[FERRY_CPU_WORDS]);
/* ferry_cpu_count's figure once the process has been bound (0 before). */
int ferry_cpu_count_given(void);
/* Binds every thread of the process, and those it starts later, to mask. */
ferry_status ferry_cpu_bind_process(const uint64_t mask[FERRY_CPU_WORDS]) FERRY_MUST_CHECK;
/* The single-precision matrix-product rate this process gets from BLAS on
 * its current threads, in FLOP/s: the best of three n x n x n sgemms after
 * a warm-up one (n = 1024 takes about 0.1 s at 100 GFLOP/s); 0 when n < 1
 * or memory runs out.  A peak to set a model's FLOP rate against. */
double ferry_cpu_sgemm_flops(int n);
/* "AMD EPYC 7B13" or "unknown CPU"; SIMD features as a short string. */
const char *ferry_cpu_name(void);
const char *ferry_cpu_features(void);

/* ---- memory this process may use --------------------------------------------
 * The CPU backend's device arena is host memory: by default it takes what
 * the machine has, unless a cgroup limit (a container, systemd's
 * MemoryMax) or `ulimit -v` allows less, where touching more would get the
 * run OOM-killed or its reservation refused. */
#define FERRY_NO_LIMIT UINT64_MAX

struct ferry_memory_limit {
	uint64_t bytes;        /* the least of the three */
	const char *bound;     /* which one: "physical memory", "the cgroup
				  memory limit" or "ulimit -v" */
	uint64_t physical;     /* the machine's RAM */
	uint64_t cgroup;       /* ferry_cgroup_memory_limit(""), or FERRY_NO_LIMIT */
	uint64_t address_space; /* RLIMIT_AS less what the process has
				   mapped, or FERRY_NO_LIMIT */
};
void ferry_memory_limit(struct ferry_memory_limit *out);
/* The address space the libraries map after start-up, for a process that
 * runs `threads` compute threads: OpenBLAS a 128 MiB buffer per thread in
 * a matrix product (and, refused one under `ulimit -v`, it retries forever
 * at full CPU), glibc up to 64 MiB per thread's malloc arena, thread
 * stacks, code loaded later.  What `ulimit -v` leaves must keep this much
 * beyond the device arena. */
uint64_t ferry_library_headroom(int threads);
/* The memory limit of this process's cgroup, read from the files under
 * root ("" for the system's own; tests pass a directory that holds
 * proc/self/cgroup and sys/fs/cgroup/...): the least memory.max (cgroup
 * v2) or memory.limit_in_bytes (v1) of its cgroup and every cgroup above
 * it; FERRY_NO_LIMIT when none is set or none can be read. */
uint64_t ferry_cgroup_memory_limit(const char *root);

#ifdef __cplusplus
}
#endif
#endif
