/*
 * The NVMe tier's file I/O against a plain sequential read and write of
 * the same file system, measured in the same run over the same bytes:
 *
 *   bench_nvme_tier [--dir DIR] [--size MiB] [--rounds R]
 *
 * Defaults: the current directory, 1024 MiB, 3 rounds.  Each round times,
 * in turn: plain O_DIRECT pwrite of the size in 8 MiB blocks (one request
 * at a time) into a preallocated file, then plain O_DIRECT pread of it
 * back; the tier's ferry_nvme_write and ferry_nvme_read of the same size
 * from and into an ordinary buffer (its copies through the staging buffers
 * included) in the run's tier file, with io_uring and then with
 * pread/pwrite (FERRY_NVME_IO=pread).  Figures: GB/s (1e9 bytes/s), medians
 * over the rounds, and the tier's over plain (target at least 0.8).
 * Where the file system refuses O_DIRECT the plain side goes through the
 * page cache and says so.
 */
#include "tier/nvme_file.h"
#include "core/error.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (8u << 20)
#define MAX_ROUNDS 15

struct args {
	const char *dir;
	size_t size;
	int rounds;
};

static int usage(int rc)
{
	printf("usage: bench_nvme_tier [--dir DIR] [--size MiB] [--rounds R]\n\n"
	       "NVMe tier file I/O (io_uring and pread/pwrite) against plain sequential O_DIRECT\n"
	       "I/O of the same file system in the same run (defaults: ., 1024 MiB, 3 rounds).\n");
	return rc;
}

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){ ".", (size_t)1024 << 20, 3 };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return usage(0);
		if (i + 1 >= argc)
			return usage(2);
		if (!strcmp(argv[i], "--dir"))
			a->dir = argv[++i];
		else if (!strcmp(argv[i], "--size"))
			a->size = (size_t)atol(argv[++i]) << 20;
		else if (!strcmp(argv[i], "--rounds"))
			a->rounds = atoi(argv[++i]);
		else
			return usage(2);
	}
	if (a->size < BLOCK || a->rounds < 1 || a->rounds > MAX_ROUNDS) {
		fprintf(stderr, "bench_nvme_tier: --size at least 8 (MiB), --rounds 1 to %d\n", MAX_ROUNDS);
		return 2;
	}
	a->size = a->size / BLOCK * BLOCK;
	return -1;
}

static void die(const char *what)
{
	fprintf(stderr, "bench_nvme_tier: %s: %s\n", what, errno ? strerror(errno) : ferry_last_error());
	exit(1);
}

/* Plain sequential I/O of size bytes in BLOCK requests; seconds. */
static double plain_io(int fd, char *block, size_t size, bool write)
{
	double t0 = now_s();

	for (size_t off = 0; off < size; off += BLOCK) {
		ssize_t r = write ? pwrite(fd, block, BLOCK, (off_t)off) : pread(fd, block, BLOCK, (off_t)off);

		if (r != (ssize_t)BLOCK)
			die(write ? "plain write" : "plain read");
	}
	return now_s() - t0;
}

static double tier_io(struct ferry_nvme_file *f, char *buf, size_t size, bool write)
{
	double t0 = now_s();

	if ((write ? ferry_nvme_write(f, 0, buf, size) : ferry_nvme_read(f, 0, buf, size)) != FERRY_OK)
		die(write ? "tier write" : "tier read");
	return now_s() - t0;
}

int main(int argc, char **argv)
{
	struct args a;
	int rc = parse(argc, argv, &a), fd;
	char path[1024], *block, *buf;
	bool direct = true;
	struct ferry_nvme_file *f[2];
	double t[6][MAX_ROUNDS];
	static const char *const names[6] = { "plain write", "plain read", "tier write (io_uring)",
					      "tier read (io_uring)", "tier write (pread/pwrite)",
					      "tier read (pread/pwrite)" };

	if (rc >= 0)
		return rc;
	snprintf(path, sizeof(path), "%s/bench_nvme_plain.XXXXXX", a.dir);
	if ((fd = mkstemp(path)) < 0)
		die(path);
	close(fd);
	if ((fd = open(path, O_RDWR | O_DIRECT)) < 0) {
		direct = false;
		fd = open(path, O_RDWR);
	}
	unlink(path);
	block = aligned_alloc(4096, BLOCK);
	buf = malloc(a.size);
	if (fd < 0 || !block || !buf || posix_fallocate(fd, 0, (off_t)a.size) != 0)
		die("plain file");
	memset(block, 0x3c, BLOCK);
	memset(buf, 0x5a, a.size);
	unsetenv("FERRY_NVME_IO");
	if (ferry_nvme_file_create(a.dir, &f[0]) || ferry_nvme_file_reserve(f[0], a.size))
		die("tier file");
	setenv("FERRY_NVME_IO", "pread", 1);
	if (ferry_nvme_file_create(a.dir, &f[1]) || ferry_nvme_file_reserve(f[1], a.size))
		die("tier file");
	for (int r = 0; r < a.rounds; r++) {
		t[0][r] = plain_io(fd, block, a.size, true);
		t[1][r] = plain_io(fd, block, a.size, false);
		for (int k = 0; k < 2; k++) {
			t[2 + 2 * k][r] = tier_io(f[k], buf, a.size, true);
			t[3 + 2 * k][r] = tier_io(f[k], buf, a.size, false);
		}
	}
	printf("%s: %zu MiB, %d rounds, plain I/O %s in %u MiB requests\n", a.dir, a.size >> 20, a.rounds,
	       direct ? "O_DIRECT" : "through the page cache (O_DIRECT refused)", BLOCK >> 20);
	printf("tier file: %s\n", ferry_nvme_file_mode(f[0]));
	for (int i = 0; i < 6; i++) {
		double gbs = a.size / median(t[i], a.rounds) / 1e9, base = a.size / median(t[i % 2], a.rounds) / 1e9;

		printf("  %-28s %7.2f GB/s", names[i], gbs);
		if (i >= 2)
			printf("   %.2f of plain", gbs / base);
		printf("\n");
	}
	ferry_nvme_file_close(f[0]);
	ferry_nvme_file_close(f[1]);
	close(fd);
	free(block);
	free(buf);
	return 0;
}
