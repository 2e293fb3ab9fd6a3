/*
 * The tokenizer travels with the model: a Hugging Face save copies the
 * tokenizer files of the directory the model was loaded from into its new
 * directory, inside the commit (include/ferry/checkpoint.h), so that
 * `ferry sample --prompt`, `ferry data` and transformers find them there.
 * Copies, not hard links: the source is another checkpoint, whose files
 * may be replaced or edited later.
 */
#include "ckpt/commit.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const CARRIED[] = {
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
	"tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt",
};

const char *ferry_hf_carried_file(int i)
{
	return i >= 0 && i < (int)(sizeof(CARRIED) / sizeof(CARRIED[0])) ? CARRIED[i] : NULL;
}

/* in's bytes into out. */
static ferry_status copy_bytes(int in, int out, const char *from, const char *to)
{
	char buf[65536];
	ssize_t r;

	while ((r = read(in, buf, sizeof(buf))) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot read it: %s", from, strerror(errno));
		for (ssize_t w, done = 0; done < r; done += w) {
			w = ferry_ckpt_fault() ? -1 : write(out, buf + done, (size_t)(r - done));
			if (w < 0 && errno == EINTR)
				w = 0;
			else if (w < 0)
				return ferry_error(FERRY_ERR_IO, "%s: cannot write it: %s", to, strerror(errno));
		}
	}
	return FERRY_OK;
}

/* sfd's name into dfd (which may hold a file of that name already). */
static ferry_status carry_one(int sfd, int dfd, const char *name, const char *src_dir, const char *tmp)
{
	char from[4200], to[4200];
	struct stat sb;
	ferry_status st;
	int in, out;

	snprintf(from, sizeof(from), "%s/%s", src_dir, name);
	snprintf(to, sizeof(to), "%s/%s", tmp, name);
	in = openat(sfd, name, O_RDONLY | O_CLOEXEC);
	if (in < 0 && errno == ENOENT)
		return FERRY_OK; /* the source has no such file */
	if (in < 0 || fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot carry it into the new checkpoint: %s", from,
				 in < 0 ? strerror(errno) : "not a regular file");
		if (in >= 0)
			close(in);
		return st;
	}
	if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT) /* one kept from the old directory */
		st = ferry_error(FERRY_ERR_IO, "%s: cannot replace it: %s", to, strerror(errno));
	else if ((out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot create it: %s", to, strerror(errno));
	else {
		st = copy_bytes(in, out, from, to);
		if (!st && (ferry_ckpt_fault() || fsync(out) != 0))
			st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", to, strerror(errno));
		close(out);
	}
	close(in);
	return st;
}

static bool same_dir(const char *a, const char *b)
{
	struct stat x, y;

	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

ferry_status ferry_ckpt_hf_carry(const char *src_dir, const char *dest, const char *tmp)
{
	ferry_status st = FERRY_OK;
	int sfd, dfd;

	if (!src_dir || same_dir(src_dir, dest))
		return FERRY_OK;
	sfd = open(src_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return errno == ENOENT ? FERRY_OK : /* gone since: nothing to carry */
			       ferry_error(FERRY_ERR_IO, "%s: cannot open it: %s", src_dir, strerror(errno));
	dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot open it: %s", tmp, strerror(errno));
	for (size_t i = 0; !st && i < sizeof(CARRIED) / sizeof(CARRIED[0]); i++)
		st = carry_one(sfd, dfd, CARRIED[i], src_dir, tmp);
	if (dfd >= 0)
		close(dfd);
	close(sfd);
	return st;
}
