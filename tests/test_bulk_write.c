/* core/bulk_write.c: the file holds exactly the bytes appended, in order,
 * whatever the pieces' sizes and alignment, past the page cache (O_DIRECT)
 * where the file system allows it and plainly where it refuses; a failed
 * write is reported, not lost. */
#include "core/bulk_write.h"
#include "test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* A pattern no misplaced or repeated block reproduces. */
static unsigned char byte_at(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

/* Writes total bytes to path in pieces of the given sizes (cycled), half
 * through ferry_bulk_append and half filled in place, and checks the file. */
static void write_and_check(const char *path, size_t total, const size_t *pieces, int n_pieces, int want_direct)
{
	unsigned char *src = TALLOC(unsigned char, total), *back = TALLOC(unsigned char, total + 1);
	struct ferry_bulk_file *b;
	size_t at = 0;
	int fd, k = 0;
	struct stat s;

	for (size_t i = 0; i < total; i++)
		src[i] = byte_at(i);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "%s: cannot create", path);
	CHECK(ferry_bulk_begin(fd, path, &b) == FERRY_OK, "%s: begin", path);
	if (want_direct >= 0)
		CHECK(ferry_bulk_direct(b) == want_direct, "%s: direct %d, expected %d", path, ferry_bulk_direct(b),
		      want_direct);
	while (at < total) {
		size_t n = pieces[k % n_pieces] < total - at ? pieces[k % n_pieces] : total - at;

		if (k++ % 2) {
			CHECK(ferry_bulk_append(b, src + at, n) == FERRY_OK, "append");
		} else { /* in place, as the safetensors converter fills it */
			size_t room;
			unsigned char *d = ferry_bulk_space(b, &room);

			n = n < room ? n : room;
			CHECK(room > 0, "space");
			memcpy(d, src + at, n);
			CHECK(ferry_bulk_commit(b, n) == FERRY_OK, "commit");
		}
		at += n;
	}
	CHECK(ferry_bulk_end(b) == FERRY_OK, "%s: end", path);
	close(fd);
	CHECK(stat(path, &s) == 0 && (size_t)s.st_size == total, "%s: size %lld, expected %zu", path,
	      (long long)s.st_size, total);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && read(fd, back, total + 1) == (ssize_t)total, "%s: read back", path);
	CHECK(memcmp(src, back, total) == 0, "%s: contents differ", path);
	close(fd);
	unlink(path);
	free(src);
	free(back);
}

int main(void)
{
	char dir[] = "/var/tmp/test_bulk_write.XXXXXX", path[128];
	static const size_t odd[] = { 1, 1023, 4096, 3, (size_t)5 << 20, 17 };
	static const size_t big[] = { (size_t)40 << 20 };
	static const size_t whole[] = { (size_t)16 << 20 };
	struct ferry_bulk_file *b;
	int fd;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof(path), "%s/f", dir);
	/* on a disk's file system: past the page cache (-1: whatever it allows) */
	write_and_check(path, 0, odd, 6, -1);
	write_and_check(path, 1, odd, 6, -1);
	write_and_check(path, 4096, odd, 6, -1);
	write_and_check(path, ((size_t)37 << 20) + 123, odd, 6, -1);
	write_and_check(path, ((size_t)100 << 20) + 5, big, 1, -1);
	write_and_check(path, (size_t)32 << 20, whole, 1, -1);
	/* memory's file system (older kernels' tmpfs refuses O_DIRECT: written plainly) */
	if (access("/dev/shm", W_OK) == 0)
		write_and_check("/dev/shm/ferry_test_bulk_write", ((size_t)21 << 20) + 7, odd, 6, -1);
	/* a write that fails (a read-only descriptor) is reported at the end */
	snprintf(path, sizeof(path), "%s/ro", dir);
	close(open(path, O_WRONLY | O_CREAT, 0644));
	fd = open(path, O_RDONLY);
	CHECK(ferry_bulk_begin(fd, path, &b) == FERRY_OK, "begin (read-only)");
	CHECK(ferry_bulk_append(b, "abc", 3) == FERRY_OK, "append (buffered)");
	CHECK(ferry_bulk_end(b) == FERRY_ERR_IO, "a failed write is an error");
	CHECK(strstr(ferry_last_error(), "error writing") != NULL, "said: %s", ferry_last_error());
	close(fd);
	unlink(path);
	rmdir(dir);
	return test_exit_code();
}
