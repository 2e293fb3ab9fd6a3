/* The BLAS-core decision: generic cores on capable CPUs are replaced,
 * good cores and old CPUs are left alone; and what ferry info reports.
 * Thread counts are capped at FERRY_THREADS_PER_CORE per core (100000 OpenMP
 * threads took 45 s to start and then died inside libgomp); the sgemm rate
 * that serves as a peak for model FLOP utilisation is measured. */
#include "ferry/backend.h"
#include "ferry/platform.h"
#include "test_util.h"

#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[512];

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Writes text to root/rel, making its directories. */
static void put(const char *rel, const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		mkdir(path, 0755);
		*p = '/';
	}
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

/* A cgroup's limit binds its children, in v1 and v2 alike; "max" and v1's
 * huge "unlimited" are no limit; no cgroup files, no limit. */
static void test_cgroup_limit(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");

	snprintf(root, sizeof(root), "%s/platform_cgroup.%d", tmp ? tmp : "/tmp", (int)getpid());
	CHECK(mkdir(root, 0755) == 0, "mkdir %s", root);
	CHECK(ferry_cgroup_memory_limit(root) == FERRY_NO_LIMIT, "no files: no limit");
	put("proc/self/cgroup", "0::/user.slice/run.scope\n");
	put("sys/fs/cgroup/user.slice/run.scope/memory.max", "max\n");
	CHECK(ferry_cgroup_memory_limit(root) == FERRY_NO_LIMIT, "v2 max: no limit");
	put("sys/fs/cgroup/user.slice/memory.max", "1610612736\n");
	CHECK(ferry_cgroup_memory_limit(root) == 1610612736ull, "v2: the parent's 1.5 GiB binds");
	put("sys/fs/cgroup/user.slice/run.scope/memory.max", "1073741824\n");
	CHECK(ferry_cgroup_memory_limit(root) == 1073741824ull, "v2: the child's own 1 GiB");
	put("proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n");
	put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
	CHECK(ferry_cgroup_memory_limit(root) == 9223372036854771712ull, "v1 unlimited: no real limit");
	put("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "2147483648\n");
	CHECK(ferry_cgroup_memory_limit(root) == 2147483648ull, "v1: the parent's 2 GiB binds");
	put("sys/fs/cgroup/memory.max", "1000000000\n");
	CHECK(ferry_cgroup_memory_limit(root) == 1000000000ull, "v2 root of a namespace: its limit");
	nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Under `ulimit -v`, the CPU backend's default arena fits what the limit
 * leaves (3/4 of it, beyond the libraries' headroom) instead of failing to
 * reserve all of RAM; the
 * description says so.  In a child: the limit is for good. */
static void test_ulimit_arena(void)
{
	struct ferry_memory_limit lim;
	pid_t pid;
	int status = 0;

	ferry_memory_limit(&lim);
	CHECK(lim.bytes > 0 && lim.bytes <= lim.physical && lim.bound, "a limit: %s", lim.bound);
	pid = fork();
	if (pid == 0) {
		struct ferry_backend_opts bo = { .threads = 1 };
		struct rlimit rl;
		ferry_backend_t be = NULL;
		FILE *f = fopen("/proc/self/statm", "r");
		unsigned long long pages = 0;
		int bad = 0;

		if (!f || fscanf(f, "%llu", &pages) != 1)
			_exit(2);
		fclose(f);
		/* 1 GiB beyond what is mapped now */
		rl.rlim_cur = rl.rlim_max = pages * (unsigned long long)sysconf(_SC_PAGESIZE) + (1ull << 30);
		if (setrlimit(RLIMIT_AS, &rl) != 0)
			_exit(3);
		ferry_memory_limit(&lim);
		bad |= strcmp(lim.bound, "ulimit -v") != 0 || lim.bytes > (1ull << 30) || lim.bytes < (1ull << 29);
		if (ferry_backend_open("cpu", &bo, &be) != FERRY_OK) {
			fprintf(stderr, "open under ulimit -v: %s\n", ferry_last_error());
			_exit(4);
		}
		bad |= ferry_backend_mem_capacity(be) > (lim.bytes - ferry_library_headroom(1)) / 4 * 3 ||
		       !strstr(ferry_backend_description(be), "that ulimit -v leaves beyond") ||
		       !strstr(ferry_backend_mem_note(be), "3/4 of the");
		printf("under ulimit -v: %s\n", ferry_backend_description(be));
		fflush(stdout);
		ferry_backend_close(be);
		_exit(bad ? 5 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "under ulimit -v: exit %d", WEXITSTATUS(status));
}
#endif

int main(void)
{
	/* first: the child forks before any OpenMP team exists.  (Not under
	 * the sanitizers: their shadow memory needs terabytes of address
	 * space, which no such limit allows.) */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	test_ulimit_arena();
#endif
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
	test_cgroup_limit();
	return test_exit_code();
}
