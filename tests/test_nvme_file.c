/*
 * The NVMe tier's file: bytes written at any offset and length read back
 * the same, through io_uring and through the pread/pwrite fallback, on a
 * file system with O_DIRECT and on tmpfs (without it); neighbouring ranges
 * keep each other's bytes (read-modify-write of shared blocks); the file is
 * removed at close; a reservation larger than the disk fails cleanly.
 */
#include "test_util.h"
#include "tier/nvme_file.h"
#include "core/error.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#define TMPFS_MAGIC_ 0x01021994

static int files_in(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

static void fill_random(unsigned char *p, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (unsigned char)(*seed >> 56);
	}
}

/* Writes ranges at awkward offsets, keeps a reference copy, reads all back. */
static void round_trip(const char *dir, const char *io)
{
	enum { SIZE = 5 << 20 };
	static const size_t ranges[][2] = {
		{ 0, 4096 }, { 4096, 100 }, { 4196, 3996 }, { 9000, 1 }, { 9001, 2u << 20 },
		{ (2u << 20) + 9001, 13 }, { 3u << 20, (2u << 20) - 7 }, { 12345, 777 },
	};
	unsigned char *ref = TALLOC(unsigned char, SIZE), *buf = TALLOC(unsigned char, SIZE);
	struct ferry_nvme_file *f;
	uint64_t seed = 42;
	int before = files_in(dir, "ferry-tier-");

	setenv("FERRY_NVME_IO", io, 1);
	CHECK(ferry_nvme_file_create(dir, &f) == FERRY_OK, "create in %s: %s", dir, ferry_last_error());
	if (test_failed())
		return;
	printf("%s, FERRY_NVME_IO=%s: %s\n", dir, io, ferry_nvme_file_mode(f));
	CHECK(strstr(io, "pread") ? !ferry_nvme_file_uring(f) : true, "pread forced, but io_uring used");
	CHECK(strstr(io, "nodirect") ? !ferry_nvme_file_direct(f) : true, "nodirect, but O_DIRECT used");
	CHECK(files_in(dir, "ferry-tier-") == before + 1, "the file is there while open");
	CHECK(ferry_nvme_file_reserve(f, SIZE) == FERRY_OK, "reserve: %s", ferry_last_error());
	CHECK(ferry_nvme_write(f, SIZE - 10, buf, 11) != FERRY_OK, "a write past the end is refused");
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		fill_random(buf, ranges[i][1], &seed);
		memcpy(ref + ranges[i][0], buf, ranges[i][1]);
		CHECK(ferry_nvme_write(f, ranges[i][0], buf, ranges[i][1]) == FERRY_OK, "write %zu: %s", i,
		      ferry_last_error());
	}
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		/* the last writer of each byte wins: compare with the reference */
		memset(buf, 0xee, ranges[i][1]);
		CHECK(ferry_nvme_read(f, ranges[i][0], buf, ranges[i][1]) == FERRY_OK, "read %zu: %s", i,
		      ferry_last_error());
		CHECK(!memcmp(buf, ref + ranges[i][0], ranges[i][1]), "range %zu (%zu bytes at %zu) read back differs",
		      i, ranges[i][1], ranges[i][0]);
	}
	ferry_nvme_file_close(f);
	CHECK(files_in(dir, "ferry-tier-") == before, "the file is removed at close");
	free(ref);
	free(buf);
}

static void errors(const char *dir)
{
	struct ferry_nvme_file *f;
	struct statvfs sv;

	CHECK(ferry_nvme_file_create("/nonexistent/ferry", &f) == FERRY_ERR_IO, "a missing directory");
	CHECK(strstr(ferry_last_error(), "/nonexistent/ferry") != NULL, "message names it: %s", ferry_last_error());
	if (ferry_nvme_file_create(dir, &f) != FERRY_OK || statvfs(dir, &sv) != 0)
		return;
	/* more than the file system has free: refused at reservation */
	CHECK(ferry_nvme_file_reserve(f, (uint64_t)sv.f_bavail * sv.f_frsize * 2 + (1ull << 30)) == FERRY_ERR_IO,
	      "a reservation larger than the disk");
	CHECK(strstr(ferry_last_error(), "free there") != NULL, "says what is free: %s", ferry_last_error());
	/* an error on a stream's thread is kept, first one wins, and returned */
	CHECK(ferry_nvme_file_status(f) == FERRY_OK, "no error yet");
	ferry_nvme_file_keep(f, FERRY_OK);
	CHECK(ferry_nvme_file_status(f) == FERRY_OK, "FERRY_OK keeps nothing");
	ferry_nvme_file_keep(f, ferry_error(FERRY_ERR_IO, "first failure"));
	ferry_nvme_file_keep(f, ferry_error(FERRY_ERR_INVALID, "second failure"));
	ferry_error(FERRY_OK, "%s", "");
	CHECK(ferry_nvme_file_status(f) == FERRY_ERR_IO && strstr(ferry_last_error(), "first failure"),
	      "the first error comes back: %s", ferry_last_error());
	ferry_nvme_file_close(f);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	struct statfs sf;

	if (!tmp)
		tmp = "/tmp";
	round_trip(tmp, "auto");
	round_trip(tmp, "pread");
	round_trip(tmp, "nodirect");
	round_trip(tmp, "pread,nodirect");
	/* tmpfs: O_DIRECT only from Linux 6.6 on; either way the bytes come back */
	if (statfs("/dev/shm", &sf) == 0 && (unsigned long)sf.f_type == TMPFS_MAGIC_)
		round_trip("/dev/shm", "auto");
	errors(tmp);
	return test_exit_code();
}
