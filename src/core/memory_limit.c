/*
 * How much memory this process may use (see ferry/platform.h).
 *
 * Three limits, the least wins: physical RAM (sysconf); the cgroup's, from
 * /proc/self/cgroup's path of this process, read at that cgroup and at
 * every one above it (a limit set on a parent applies to its children) in
 * the v2 hierarchy (memory.max, "max" meaning none) and the v1 memory
 * controller's (memory.limit_in_bytes); and the address space RLIMIT_AS
 * leaves (ulimit -v) beyond what is mapped already (/proc/self/statm),
 * since a reservation counts there whether or not its pages are touched.
 * ferry_library_headroom is what the libraries map later: the arena sized
 * from `ulimit -v` leaves them that.
 */
#include "ferry/platform.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The number in a limit file; FERRY_NO_LIMIT for "max", a missing or
 * unreadable file. */
static uint64_t read_limit(const char *path)
{
	char buf[64];
	unsigned long long v;
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return FERRY_NO_LIMIT;
	ok = fgets(buf, sizeof(buf), f) && sscanf(buf, "%llu", &v) == 1;
	fclose(f);
	return ok ? (uint64_t)v : FERRY_NO_LIMIT;
}

/* The least limit in file `name` of cgroup `path` (below mount) and its
 * ancestors up to the mount's root. */
static uint64_t hierarchy_limit(const char *mount, const char *path, const char *name)
{
	char dir[PATH_MAX], file[PATH_MAX + 32];
	uint64_t least = FERRY_NO_LIMIT;

	if (snprintf(dir, sizeof(dir), "%s%s", mount, path) >= (int)sizeof(dir))
		return least;
	for (;;) {
		char *slash = strrchr(dir, '/');
		uint64_t v;

		snprintf(file, sizeof(file), "%s/%s", dir, name);
		v = read_limit(file);
		least = v < least ? v : least;
		/* up one level, until the mount point itself was read */
		if (strlen(dir) <= strlen(mount) || !slash)
			return least;
		*slash = 0;
	}
}

uint64_t ferry_cgroup_memory_limit(const char *root)
{
	char path[PATH_MAX], mount[PATH_MAX], line[PATH_MAX + 64];
	uint64_t least = FERRY_NO_LIMIT;
	FILE *f;

	snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
	f = fopen(path, "r");
	if (!f)
		return least;
	/* "0::/user.slice/x" (v2) or "4:memory:/docker/x" (v1) */
	while (fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;
		uint64_t v = FERRY_NO_LIMIT;

		if (!cg)
			continue;
		*ctl++ = 0;
		*cg++ = 0;
		cg[strcspn(cg, "\n")] = 0;
		if (*cg != '/')
			continue;
		if (!strcmp(line, "0") && !*ctl) {
			snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup", root);
			v = hierarchy_limit(mount, strcmp(cg, "/") ? cg : "", "memory.max");
		} else if (strstr(ctl, "memory")) {
			snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/memory", root);
			v = hierarchy_limit(mount, strcmp(cg, "/") ? cg : "", "memory.limit_in_bytes");
		}
		least = v < least ? v : least;
	}
	fclose(f);
	return least;
}

/* RLIMIT_AS less the bytes mapped now; FERRY_NO_LIMIT when unlimited. */
static uint64_t address_space_left(void)
{
	struct rlimit rl;
	unsigned long long pages = 0;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t mapped;
	FILE *f;

	if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return FERRY_NO_LIMIT;
	f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%llu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	mapped = (uint64_t)pages * (uint64_t)(page > 0 ? page : 4096);
	return (uint64_t)rl.rlim_cur > mapped ? (uint64_t)rl.rlim_cur - mapped : 0;
}

void ferry_memory_limit(struct ferry_memory_limit *out)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

	out->physical = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : (uint64_t)1 << 32;
	out->cgroup = ferry_cgroup_memory_limit("");
	out->address_space = address_space_left();
	out->bytes = out->physical;
	out->bound = "physical memory";
	if (out->cgroup < out->bytes) {
		out->bytes = out->cgroup;
		out->bound = "the cgroup memory limit";
	}
	if (out->address_space < out->bytes) {
		out->bytes = out->address_space;
		out->bound = "ulimit -v";
	}
}

uint64_t ferry_library_headroom(int threads)
{
	const uint64_t mib = (uint64_t)1 << 20;

	/* three stream threads beside the compute threads, each a malloc arena;
	 * 128 MiB for stacks, late-loaded code and host buffers of small runs */
	return 128 * mib + (uint64_t)(threads > 0 ? threads : 1) * (128 + 64) * mib + 3 * 64 * mib;
}
