/*
 * The checks of a save path before step 1: a destination that can be
 * written and swapped, names within the system's limits, a directory whose
 * other files can be kept, and no output that is one of the run's inputs.
 */
#include "ckpt/commit.h"
#include "ferry/hf_checkpoint.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- checking a save path ----------------------------------------------------------------- */

static ferry_status check_not_special(struct ferry_ckpt_names *nm, const char *path, const char *what)
{
	struct stat sb;

	if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode))
		return FERRY_OK;
	if (S_ISLNK(sb.st_mode))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s%s is a symbolic link: a save would replace the link, not write to its "
				   "target; save to the target's own path", ferry_ckpt_shorten(nm, 0, path), what);
	if (S_ISDIR(sb.st_mode))
		return ferry_error(FERRY_ERR_INVALID, "%s%s is a directory: a GPT-2 is saved as an llm.c model file",
				   ferry_ckpt_shorten(nm, 0, path), what);
	return ferry_error(FERRY_ERR_INVALID,
			   "%s%s is not a regular file (a device, FIFO or socket): refusing to replace it",
			   ferry_ckpt_shorten(nm, 0, path), what);
}

/* title: the model's, for a Hugging Face save (hf). */
static ferry_status check_dest(struct ferry_ckpt_names *nm, bool hf, const char *title)
{
	struct stat sb;

	if (!hf) {
		ferry_status st = check_not_special(nm, nm->path, "");

		return st ? st : check_not_special(nm, nm->state, " (the state file of the save)");
	}
	if (lstat(nm->path, &sb) != 0)
		return FERRY_OK;
	if (S_ISLNK(sb.st_mode))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s is a symbolic link: a %s's save replaces its directory as a whole; "
				   "save to the directory's own path", ferry_ckpt_shorten(nm, 0, nm->path), title);
	if (!S_ISDIR(sb.st_mode))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s exists and is not a directory: a %s is saved as a Hugging Face "
				   "checkpoint directory (config.json + model.safetensors)", ferry_ckpt_shorten(nm, 0, nm->path),
				   title);
	return FERRY_OK;
}

/* name and its last component within the system's limits. */
static ferry_status check_length(struct ferry_ckpt_names *nm, const char *name)
{
	const char *slash = strrchr(name, '/');
	size_t len = strlen(name), last = strlen(slash ? slash + 1 : name);

	if (len > PATH_MAX - 1)
		return ferry_error(FERRY_ERR_INVALID,
				   "save path too long: %s is %zu bytes, and the save needs %zu-byte names beside "
				   "it (%s), over the system's limit of %d bytes for a path",
				   ferry_ckpt_shorten(nm, 0, nm->path), strlen(nm->path), len, ferry_ckpt_shorten(nm, 1, name + strlen(nm->path)),
				   PATH_MAX - 1);
	if (last > NAME_MAX)
		return ferry_error(FERRY_ERR_INVALID,
				   "save path's name too long: %s ends in a %zu-byte name, and the save needs "
				   "%zu-byte names beside it (%s), over the system's limit of %d bytes for a name",
				   ferry_ckpt_shorten(nm, 0, nm->path), strlen(nm->base), last, ferry_ckpt_shorten(nm, 1, name + strlen(nm->path)),
				   NAME_MAX);
	return FERRY_OK;
}

static ferry_status check_lengths(struct ferry_ckpt_names *nm, bool hf)
{
	ferry_status st = check_length(nm, hf ? nm->old : nm->state_tmp);
	char *inner;

	if (st || !hf)
		return st;
	/* the weights' own temporary inside the new directory */
	inner = ferry_ckpt_with_suffix(nm->tmp, "/" FERRY_HF_WEIGHTS_NAME ".tmp", (long)getpid());
	if (!inner)
		return ferry_error(FERRY_ERR_NOMEM, "save path: out of host memory");
	st = check_length(nm, inner);
	ferry_free(inner);
	return st;
}

/* Creates and removes the longest temporary the save makes. */
static ferry_status probe(struct ferry_ckpt_names *nm, bool hf)
{
	int fd;

	if (hf) {
		if (mkdir(nm->tmp, 0700) == 0)
			rmdir(nm->tmp);
		else if (errno != EEXIST)
			return ferry_error(FERRY_ERR_IO, "%s: cannot create the checkpoint directory (as %s): %s",
					   ferry_ckpt_shorten(nm, 0, nm->path), ferry_ckpt_shorten(nm, 1, nm->tmp), strerror(errno));
		return FERRY_OK;
	}
	fd = open(nm->state_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(nm->state_tmp);
	} else if (errno != EEXIST) {
		return ferry_error(FERRY_ERR_IO, "%s: cannot save there: creating %s: %s", ferry_ckpt_shorten(nm, 0, nm->path),
				   ferry_ckpt_shorten(nm, 1, nm->state_tmp), strerror(errno));
	}
	return FERRY_OK;
}

/* *dp lists the directory fd, through a duplicate: fd stays the caller's. */
ferry_status ferry_ckpt_list_fd(struct ferry_ckpt_names *nm, int fd, DIR **dp)
{
	int dup_fd = dup(fd);

	*dp = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (*dp)
		return FERRY_OK;
	if (dup_fd >= 0)
		close(dup_fd);
	return ferry_error(FERRY_ERR_IO, "%s: cannot list it: %s", ferry_ckpt_shorten(nm, 0, nm->path), strerror(errno));
}

/* What a save into an existing directory keeps (keep_tree below) can be
 * kept: every entry readable, subdirectories nested at most FERRY_CKPT_MAX_DEPTH deep
 * and on the directory's filesystem (kept by hard links).  Checked before
 * step 1, not found at the save after hours of training. */
static ferry_status check_kept(struct ferry_ckpt_names *nm, int fd, dev_t dev, int depth)
{
	struct dirent *e;
	DIR *dp;
	ferry_status st = ferry_ckpt_list_fd(nm, fd, &dp);

	if (st)
		return st;
	while (!st && (e = readdir(dp))) {
		struct stat sb;
		int sub;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			st = ferry_error(FERRY_ERR_IO, "%s: cannot stat %s: %s", ferry_ckpt_shorten(nm, 0, nm->path), e->d_name,
					 strerror(errno));
		else if (sb.st_dev != dev)
			st = ferry_error(FERRY_ERR_INVALID, "%s: %s is on another filesystem: a save keeps the "
					 "directory's other files by hard links; save elsewhere", ferry_ckpt_shorten(nm, 0, nm->path),
					 e->d_name);
		else if (S_ISDIR(sb.st_mode) && depth >= FERRY_CKPT_MAX_DEPTH)
			st = ferry_error(FERRY_ERR_INVALID, "%s: directories nested deeper than %d: a save could not "
					 "keep %s; save elsewhere", ferry_ckpt_shorten(nm, 0, nm->path), FERRY_CKPT_MAX_DEPTH, e->d_name);
		else if (S_ISDIR(sb.st_mode)) {
			sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			st = sub < 0 ? ferry_error(FERRY_ERR_IO, "%s: cannot open its subdirectory %s: %s",
						   ferry_ckpt_shorten(nm, 0, nm->path), e->d_name, strerror(errno)) :
				       check_kept(nm, sub, dev, depth + 1);
			if (sub >= 0)
				close(sub);
		}
	}
	closedir(dp);
	return st;
}

static ferry_status check_existing_dir(struct ferry_ckpt_names *nm)
{
	struct stat sb;
	int fd = open(nm->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ferry_status st;

	if (fd < 0)
		return FERRY_OK; /* not there (check_dest said what else) */
	st = fstat(fd, &sb) != 0 ? ferry_error(FERRY_ERR_IO, "%s: %s", ferry_ckpt_shorten(nm, 0, nm->path), strerror(errno)) :
				   check_kept(nm, fd, sb.st_dev, 0);
	close(fd);
	return st;
}

ferry_status ferry_checkpoint_check_save_path(const char *path, const struct ferry_model_config *cfg)
{
	struct ferry_ckpt_names nm;
	bool hf;
	ferry_status st;

	if (!path || !cfg)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint write: NULL path or config");
	if (!*path)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint write: empty save path");
	hf = ferry_checkpoint_model_is_hf(cfg);
	st = ferry_ckpt_names_make(path, hf, &nm);
	if (st)
		return st;
	st = check_dest(&nm, hf, ferry_model_title(cfg->arch));
	if (!st && hf)
		st = check_existing_dir(&nm);
	if (!st)
		st = check_lengths(&nm, hf);
	if (!st)
		st = probe(&nm, hf);
	ferry_ckpt_names_free(&nm);
	return st;
}

/* ---- outputs that are inputs --------------------------------------------------------------- */

/* The real path a file not there yet would have: its directory's, plus
 * its name; NULL when the directory cannot be resolved. */
static char *real_of_new(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = NULL, *rd, *out = NULL;

	if (slash) {
		dir = ferry_malloc((size_t)(slash - path) + 2);
		if (!dir)
			return NULL;
		snprintf(dir, (size_t)(slash - path) + 2, "%.*s", slash == path ? 1 : (int)(slash - path), path);
	}
	rd = realpath(dir ? dir : ".", NULL);
	if (rd) {
		size_t n = strlen(rd) + strlen(slash ? slash + 1 : path) + 2;

		out = ferry_malloc(n);
		if (out)
			snprintf(out, n, "%s/%s", rd, slash ? slash + 1 : path);
	}
	free(rd);
	ferry_free(dir);
	return out;
}

static bool same_file(const char *out, const struct stat *in, const char *in_real)
{
	struct stat sb;
	char *r;
	bool same;

	if (stat(out, &sb) == 0)
		return sb.st_dev == in->st_dev && sb.st_ino == in->st_ino;
	if (!in_real)
		return false;
	r = real_of_new(out);
	same = r && !strcmp(r, in_real);
	ferry_free(r);
	return same;
}

ferry_status ferry_ckpt_check_not_input(const char *path, bool hf, const char *input, const char *what)
{
	static const char *const hf_files[] = { FERRY_HF_CONFIG_NAME, FERRY_HF_WEIGHTS_NAME, FERRY_HF_INDEX_NAME,
						FERRY_HF_STATE_NAME };
	struct ferry_ckpt_names nm;
	struct stat in;
	char *in_real;
	ferry_status st;

	if (!path || !input || stat(input, &in) != 0)
		return FERRY_OK;
	st = ferry_ckpt_names_make(path, hf, &nm);
	if (st)
		return st;
	in_real = realpath(input, NULL);
	for (int i = 0; !st && i < (hf ? 4 : 2); i++) {
		const char *file = i ? nm.state : nm.path;
		char *out = NULL;

		if (hf) {
			size_t len = strlen(nm.path) + strlen(hf_files[i]) + 2;

			out = ferry_malloc(len);
			if (!out) {
				st = ferry_error(FERRY_ERR_NOMEM, "save path: out of host memory");
				break;
			}
			snprintf(out, len, "%s/%s", nm.path, hf_files[i]);
			file = out;
		}
		if (same_file(file, &in, in_real))
			st = ferry_error(FERRY_ERR_INVALID, "saving to %s would replace %s, a %s: choose another save path",
					 ferry_ckpt_shorten(&nm, 0, nm.path), ferry_ckpt_shorten(&nm, 1, input), what);
		ferry_free(out);
	}
	free(in_real);
	ferry_ckpt_names_free(&nm);
	return st;
}
