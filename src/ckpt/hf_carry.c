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

/* The open file in (from) as name in dfd (to), replacing one of that name,
 * fsynced. */
static ferry_status copy_into(int in, const char *from, int dfd, const char *name, const char *to)
{
	ferry_status st;
	int out;

	if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT) /* one kept from the old directory */
		return ferry_error(FERRY_ERR_IO, "%s: cannot replace it: %s", to, strerror(errno));
	if ((out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot create it: %s", to, strerror(errno));
	st = copy_bytes(in, out, from, to);
	if (!st && (ferry_ckpt_fault() || fsync(out) != 0))
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", to, strerror(errno));
	close(out);
	return st;
}

/* name in sfd, opened for reading: -1 with errno ENOENT when it is not
 * there, else -1 after an error (not a regular file included). */
static int open_source(int sfd, const char *name, const char *from, ferry_status *st)
{
	struct stat sb;
	int in = openat(sfd, name, O_RDONLY | O_CLOEXEC);

	*st = FERRY_OK;
	if (in >= 0 && fstat(in, &sb) == 0 && S_ISREG(sb.st_mode))
		return in;
	if (in < 0 && errno == ENOENT)
		return -1; /* the source has no such file */
	*st = ferry_error(FERRY_ERR_IO, "%s: cannot carry it into the new checkpoint: %s", from,
			  in < 0 ? strerror(errno) : "not a regular file");
	if (in >= 0)
		close(in);
	return -1;
}

/* sfd's name into dfd (which may hold a file of that name already). */
static ferry_status carry_one(int sfd, int dfd, const char *name, const char *src_dir, const char *tmp)
{
	char from[4200], to[4200];
	ferry_status st;
	int in;

	snprintf(from, sizeof(from), "%s/%s", src_dir, name);
	snprintf(to, sizeof(to), "%s/%s", tmp, name);
	in = open_source(sfd, name, from, &st);
	if (in < 0)
		return st;
	st = copy_into(in, from, dfd, name, to);
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

/* Whether the open file is a tokenizer.json (JSON: '{' first), not llm.c's
 * binary tokenizer file; the offset is put back. */
static bool is_json(int fd)
{
	char c = 0;

	while (read(fd, &c, 1) == 1 && (c == ' ' || c == '\n' || c == '\r' || c == '\t'))
		;
	return lseek(fd, 0, SEEK_SET) == 0 && c == '{';
}

ferry_status ferry_ckpt_carry_tokenizer(const char *tok, bool json_only, const char *dir, const char *name)
{
	char to[4200];
	struct stat sb;
	ferry_status st;
	int in, dfd;

	if (!tok)
		return FERRY_OK;
	if (stat(tok, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a directory: its tokenizer.json */
		snprintf(to, sizeof(to), "%s/tokenizer.json", tok);
		return ferry_ckpt_carry_tokenizer(to, json_only, dir, name);
	}
	in = open_source(AT_FDCWD, tok, tok, &st);
	if (in < 0)
		return st ? st : ferry_error(FERRY_ERR_IO, "%s: cannot carry the tokenizer into the new checkpoint: "
					     "%s", tok, strerror(ENOENT));
	snprintf(to, sizeof(to), "%s/%s", dir, name);
	dfd = json_only && !is_json(in) ? -2 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd == -1)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot open it: %s", dir, strerror(errno));
	else if (dfd >= 0) /* -2: llm.c's file, which a Hugging Face directory has no name for */
		st = copy_into(in, tok, dfd, name, to);
	if (dfd >= 0)
		close(dfd);
	close(in);
	return st;
}
