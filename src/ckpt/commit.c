/*
 * The commit protocol of checkpoints: a model and its training state saved
 * as one commit, recovery of a commit a killed process left half done, stale
 * temporaries (the checks of a save path are save_checks.c).  The protocol
 * and its recovery rule are described in include/ferry/checkpoint.h.
 */
#include "ckpt/commit.h"
#include "ferry/hf_checkpoint.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- fault hook and messages ----------------------------------------------------- */

static atomic_long write_fault = -1;

void ferry_fault_fail_write_after(long n)
{
	atomic_store(&write_fault, n < 0 ? -1 : n);
}

bool ferry_ckpt_fault(void)
{
	long c = atomic_load(&write_fault);

	while (c >= 0) {
		if (atomic_compare_exchange_weak(&write_fault, &c, c - 1)) {
			if (c != 0)
				return false;
			errno = ENOSPC;
			return true;
		}
	}
	return false;
}

const char *ferry_ckpt_short(const char *path, char buf[FERRY_CKPT_SHORT])
{
	size_t n = strlen(path), head = 48, tail = FERRY_CKPT_SHORT - 48 - 4;

	if (n < FERRY_CKPT_SHORT)
		return path;
	snprintf(buf, FERRY_CKPT_SHORT, "%.*s...%s", (int)head, path, path + n - tail);
	return buf;
}

/* ---- names ---------------------------------------------------------------------------- */


void ferry_ckpt_names_free(struct ferry_ckpt_names *nm)
{
	ferry_free(nm->path);
	ferry_free(nm->parent);
	ferry_free(nm->state);
	ferry_free(nm->tmp);
	ferry_free(nm->state_tmp);
	ferry_free(nm->old);
	ferry_free(nm->tok);
	ferry_free(nm->tok_tmp);
	memset(nm, 0, sizeof(*nm));
}

char *ferry_ckpt_with_suffix(const char *path, const char *suffix, long pid)
{
	size_t n = strlen(path) + strlen(suffix) + 24;
	char *s = ferry_malloc(n);

	if (s && pid)
		snprintf(s, n, "%s%s.%ld", path, suffix, pid);
	else if (s)
		snprintf(s, n, "%s%s", path, suffix);
	return s;
}

ferry_status ferry_ckpt_names_make(const char *path, bool strip, struct ferry_ckpt_names *nm)
{
	size_t len = strlen(path);
	const char *slash;
	long pid = (long)getpid();

	memset(nm, 0, sizeof(*nm));
	while (strip && len > 1 && path[len - 1] == '/')
		len--;
	nm->path = ferry_malloc(len + 1);
	if (nm->path) {
		memcpy(nm->path, path, len);
		nm->path[len] = 0;
		slash = strrchr(nm->path, '/');
		nm->base = slash ? slash + 1 : nm->path;
		nm->parent = ferry_malloc(len + 2);
		if (nm->parent && !slash)
			snprintf(nm->parent, 2, ".");
		else if (nm->parent)
			snprintf(nm->parent, len + 2, "%.*s", slash == nm->path ? 1 : (int)(slash - nm->path),
				 nm->path);
		nm->state = ferry_ckpt_with_suffix(nm->path, ".state", 0);
		nm->tmp = ferry_ckpt_with_suffix(nm->path, ".tmp", pid);
		nm->state_tmp = ferry_ckpt_with_suffix(nm->path, ".state.tmp", pid);
		nm->old = ferry_ckpt_with_suffix(nm->path, ".old", pid);
		nm->tok = ferry_ckpt_with_suffix(nm->path, FERRY_CKPT_TOKENIZER_SUFFIX, 0);
		nm->tok_tmp = ferry_ckpt_with_suffix(nm->path, FERRY_CKPT_TOKENIZER_SUFFIX ".tmp", pid);
	}
	if (nm->path && nm->parent && nm->state && nm->tmp && nm->state_tmp && nm->old && nm->tok && nm->tok_tmp)
		return FERRY_OK;
	ferry_ckpt_names_free(nm);
	return ferry_error(FERRY_ERR_NOMEM, "save path: out of host memory");
}

const char *ferry_ckpt_shorten(struct ferry_ckpt_names *nm, int k, const char *path)
{
	return ferry_ckpt_short(path, nm->sb[k]);
}

/* ---- locking, syncing, removing ------------------------------------------------------- */

/* An exclusive flock() of dir, or -1 where it cannot be had (best effort:
 * a file system without locks still saves, without the guard). */
static int lock_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

static void unlock_dir(int fd)
{
	if (fd >= 0)
		close(fd); /* releases the lock */
}

static void sync_path(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes a file or a whole tree; best effort. */
static void remove_tree(const char *path)
{
	struct stat sb;

	if (lstat(path, &sb) != 0)
		return;
	if (!S_ISDIR(sb.st_mode))
		unlink(path);
	else
		nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- stale temporaries ------------------------------------------------------------------- */

enum tmp_kind { TMP_MODEL, TMP_STATE, TMP_OLD };

struct tmp_entry {
	char *path;
	enum tmp_kind kind;
	long pid;
	bool dir;
	bool used; /* renamed into place by recovery */
};

struct tmp_list {
	struct tmp_entry *e;
	int n, cap;
};

static void tmp_list_free(struct tmp_list *l)
{
	for (int i = 0; i < l->n; i++)
		ferry_free(l->e[i].path);
	ferry_free(l->e);
	memset(l, 0, sizeof(*l));
}

/* rest: what follows "<base>." in a directory entry's name. */
static bool parse_tmp(const char *rest, enum tmp_kind *kind, long *pid)
{
	static const struct { const char *s; enum tmp_kind k; } forms[] = {
		{ "state.tmp", TMP_STATE }, { "tmp", TMP_MODEL }, { "old", TMP_OLD },
	};

	for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
		size_t len = strlen(forms[f].s), digits;
		const char *t = rest + len;

		if (strncmp(rest, forms[f].s, len) != 0)
			continue;
		*kind = forms[f].k;
		if (*t != '.')
			continue;
		digits = strspn(t + 1, "0123456789");
		if (digits < 1 || digits > 10 || t[1 + digits] || t[1] == '0')
			continue;
		*pid = strtol(t + 1, NULL, 10);
		return true;
	}
	return false;
}

/* Whether a temporary of process pid is stale: a dead process's, or this
 * process's own (it is not writing one now). */
static bool pid_stale(long pid)
{
	if (pid <= 0 || pid > INT_MAX || pid == (long)getpid())
		return true;
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static ferry_status tmp_add(struct tmp_list *l, const char *parent, const char *name, enum tmp_kind kind,
			    long pid)
{
	size_t n = strlen(parent) + strlen(name) + 2;
	struct tmp_entry *e;
	struct stat sb;

	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 8;
		struct tmp_entry *grown = ferry_calloc((size_t)cap, sizeof(*grown));

		if (!grown)
			return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", parent);
		if (l->n)
			memcpy(grown, l->e, (size_t)l->n * sizeof(*grown));
		ferry_free(l->e);
		l->e = grown;
		l->cap = cap;
	}
	e = &l->e[l->n];
	e->path = ferry_malloc(n);
	if (!e->path)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", parent);
	snprintf(e->path, n, "%s/%s", parent, name);
	e->kind = kind;
	e->pid = pid;
	e->dir = lstat(e->path, &sb) == 0 && S_ISDIR(sb.st_mode);
	e->used = false;
	l->n++;
	return FERRY_OK;
}

/* The stale temporaries of nm->base in its directory. */
static ferry_status scan_stale(const struct ferry_ckpt_names *nm, struct tmp_list *l)
{
	size_t blen = strlen(nm->base);
	ferry_status st = FERRY_OK;
	struct dirent *d;
	DIR *dp;

	memset(l, 0, sizeof(*l));
	dp = opendir(nm->parent);
	if (!dp)
		return FERRY_OK; /* nothing can be listed, so nothing is cleaned */
	while (!st && (d = readdir(dp))) {
		enum tmp_kind kind;
		long pid;

		if (strncmp(d->d_name, nm->base, blen) != 0 || d->d_name[blen] != '.' ||
		    !parse_tmp(d->d_name + blen + 1, &kind, &pid) || !pid_stale(pid))
			continue;
		st = tmp_add(l, nm->parent, d->d_name, kind, pid);
	}
	closedir(dp);
	if (st)
		tmp_list_free(l);
	return st;
}

static int find_tmp(const struct tmp_list *l, enum tmp_kind kind, long pid, bool dir)
{
	for (int i = 0; i < l->n; i++)
		if (l->e[i].kind == kind && l->e[i].pid == pid && l->e[i].dir == dir)
			return i;
	return -1;
}

/* ---- recovery ------------------------------------------------------------------------ */

/* A directory swap stopped between its two renames (DIR missing): the new
 * directory if the old one was moved aside beside it, else the old one. */
static ferry_status recover_dir(struct ferry_ckpt_names *nm, struct tmp_list *l, bool *changed)
{
	struct stat sb;

	if (lstat(nm->path, &sb) == 0 || errno != ENOENT)
		return FERRY_OK;
	for (int i = 0; i < l->n; i++) {
		int j;
		struct tmp_entry *from;

		if (l->e[i].kind != TMP_OLD || !l->e[i].dir)
			continue;
		j = find_tmp(l, TMP_MODEL, l->e[i].pid, true);
		from = j >= 0 ? &l->e[j] : &l->e[i];
		if (rename(from->path, nm->path) != 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot restore the checkpoint from %s: %s",
					   ferry_ckpt_shorten(nm, 0, nm->path), ferry_ckpt_shorten(nm, 1, from->path), strerror(errno));
		from->used = true;
		*changed = true;
		return FERRY_OK;
	}
	return FERRY_OK;
}

/* llm.c: a state left as a temporary after its model was renamed into
 * place (its model temporary is gone) completes the pair when it verifies
 * and its parameter hash is the model's. */
static ferry_status recover_state(struct ferry_ckpt_names *nm, struct tmp_list *l, bool *changed)
{
	uint64_t hm, hs;
	ferry_status st;
	bool any = false;

	for (int i = 0; i < l->n; i++)
		any |= l->e[i].kind == TMP_STATE && !l->e[i].dir && find_tmp(l, TMP_MODEL, l->e[i].pid, false) < 0;
	if (!any)
		return FERRY_OK;
	st = ferry_ckpt_model_hash(nm->path, &hm);
	if (st)
		return st;
	if (ferry_ckpt_state_hash(nm->state, &hs) == FERRY_OK && hs == hm)
		return FERRY_OK; /* the pair is whole: the temporaries are leftovers */
	for (int i = 0; i < l->n; i++) {
		struct tmp_entry *e = &l->e[i];

		if (e->kind != TMP_STATE || e->dir || find_tmp(l, TMP_MODEL, e->pid, false) >= 0 ||
		    ferry_ckpt_state_verify(e->path, &hs) != FERRY_OK || hs != hm)
			continue;
		if (rename(e->path, nm->state) != 0)
			return ferry_error(FERRY_ERR_IO, "%s completes the last save of %s but cannot be renamed "
					   "over its state file: %s", ferry_ckpt_shorten(nm, 0, e->path), ferry_ckpt_shorten(nm, 1, nm->path),
					   strerror(errno));
		e->used = true;
		*changed = true;
		return FERRY_OK;
	}
	return FERRY_OK;
}

/* Recovers, then removes every stale temporary recovery did not use.
 * Called with the parent directory locked. */
static ferry_status recover_locked(struct ferry_ckpt_names *nm)
{
	struct tmp_list l;
	struct stat sb;
	bool changed = false;
	ferry_status st = scan_stale(nm, &l);

	if (st || !l.n)
		return st;
	st = recover_dir(nm, &l, &changed);
	if (!st && lstat(nm->path, &sb) == 0 && S_ISREG(sb.st_mode))
		st = recover_state(nm, &l, &changed);
	for (int i = 0; !st && i < l.n; i++) {
		if (!l.e[i].used) {
			remove_tree(l.e[i].path);
			changed = true;
		}
	}
	if (changed)
		sync_path(nm->parent);
	tmp_list_free(&l);
	return st;
}

ferry_status ferry_checkpoint_recover(const char *path)
{
	struct ferry_ckpt_names nm;
	struct stat sb;
	char *dir = NULL;
	ferry_status st;
	int fd;

	if (!path || !*path)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint recovery: no path");
	/* a file inside a Hugging Face directory: the directory */
	if (ferry_checkpoint_is_hf(path) && stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
		const char *slash = strrchr(path, '/');

		dir = ferry_malloc(strlen(path) + 2);
		if (!dir)
			return ferry_error(FERRY_ERR_NOMEM, "checkpoint recovery: out of host memory");
		if (slash)
			snprintf(dir, strlen(path) + 2, "%.*s", slash == path ? 1 : (int)(slash - path), path);
		else
			snprintf(dir, 2, ".");
	}
	st = ferry_ckpt_names_make(dir ? dir : path, true, &nm);
	ferry_free(dir);
	if (st)
		return st;
	fd = lock_dir(nm.parent);
	st = recover_locked(&nm);
	unlock_dir(fd);
	ferry_ckpt_names_free(&nm);
	return st;
}

/* ---- saving: llm.c FILE + FILE.state ---------------------------------------------------------- */

/* The run's tokenizer (tok: NULL none) as nm->tok_tmp, beside the model's
 * temporaries, renamed over path.tokenizer after them. */
static ferry_status write_tokenizer(struct ferry_ckpt_names *nm, const char *tok)
{
	const char *slash = strrchr(nm->tok_tmp, '/');

	if (!tok)
		return FERRY_OK;
	return ferry_ckpt_carry_tokenizer(tok, false, nm->parent, slash ? slash + 1 : nm->tok_tmp);
}

static ferry_status save_llmc(struct ferry_ckpt_names *nm, const struct ferry_model_config *cfg, const float *params,
			      const struct ferry_train_state *st, const float *m, const float *v, size_t n,
			      const char *tok)
{
	ferry_status rc = ferry_ckpt_write_model(nm->tmp, cfg, params);
	int fd;

	if (!rc && st)
		rc = ferry_ckpt_write_state(nm->state_tmp, st, m, v, n);
	if (!rc)
		rc = write_tokenizer(nm, tok);
	if (rc) {
		unlink(nm->tmp);
		unlink(nm->state_tmp);
		unlink(nm->tok_tmp);
		return rc;
	}
	fd = lock_dir(nm->parent);
	if (rename(nm->tmp, nm->path) != 0) {
		rc = ferry_error(FERRY_ERR_IO, "%s: cannot rename the new model into place: %s (the previous "
				 "checkpoint is unchanged)", ferry_ckpt_shorten(nm, 0, nm->path), strerror(errno));
		unlink(nm->tmp);
		unlink(nm->state_tmp);
		unlink(nm->tok_tmp);
	} else if (st && rename(nm->state_tmp, nm->state) != 0) {
		rc = ferry_error(FERRY_ERR_IO, "%s: the model is saved but its state stays in %s: %s (a resume "
				 "or the next save completes the pair)", ferry_ckpt_shorten(nm, 0, nm->path),
				 ferry_ckpt_shorten(nm, 1, nm->state_tmp), strerror(errno));
		unlink(nm->tok_tmp);
	} else if (tok && rename(nm->tok_tmp, nm->tok) != 0) {
		rc = ferry_error(FERRY_ERR_IO, "%s: the model and its state are saved but not its tokenizer (%s): %s",
				 ferry_ckpt_shorten(nm, 0, nm->path), ferry_ckpt_shorten(nm, 1, nm->tok), strerror(errno));
		unlink(nm->tok_tmp);
	}
	if (!rc) {
		sync_path(nm->parent);
		/* committed: removing stale temporaries is best effort */
		(void)recover_locked(nm);
	}
	unlock_dir(fd);
	return rc;
}

/* ---- saving: a Hugging Face directory, swapped whole --------------------------------------- */

/* A temporary of some writer: "*.tmp", "*.tmp.<digits>". */
static bool tmp_name(const char *name)
{
	const char *t = strstr(name, ".tmp");

	while (t && strstr(t + 1, ".tmp"))
		t = strstr(t + 1, ".tmp");
	return t && (!t[4] || (t[4] == '.' && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)));
}

/* transformers' shard names: model-00001-of-00003.safetensors */
static bool shard_name(const char *name)
{
	size_t a, b;

	if (strncmp(name, "model-", 6) != 0)
		return false;
	a = strspn(name + 6, "0123456789");
	if (!a || strncmp(name + 6 + a, "-of-", 4) != 0)
		return false;
	b = strspn(name + 10 + a, "0123456789");
	return b && !strcmp(name + 10 + a + b, ".safetensors");
}

/* Entries of the old directory the new checkpoint replaces (not kept): its
 * configuration and weights (single or sharded), the state when a new one
 * is written, and any writer's temporaries.  Everything else stays. */
static bool replaced(const char *name, bool with_state)
{
	return !strcmp(name, FERRY_HF_CONFIG_NAME) || !strcmp(name, FERRY_HF_WEIGHTS_NAME) ||
	       !strcmp(name, FERRY_HF_INDEX_NAME) || shard_name(name) ||
	       (with_state && !strcmp(name, FERRY_HF_STATE_NAME)) || tmp_name(name);
}

struct keep_ctx {
	struct ferry_ckpt_names *nm;
	bool with_state;
};

static ferry_status keep_tree(struct keep_ctx *c, int sfd, int dfd, int depth);

static ferry_status keep_subdir(struct keep_ctx *c, int sfd, int dfd, const char *name, mode_t mode, int depth)
{
	ferry_status st;
	int s2, d2;

	if (depth >= FERRY_CKPT_MAX_DEPTH)
		return ferry_error(FERRY_ERR_INVALID, "%s: directories nested deeper than %d: cannot keep %s",
				   ferry_ckpt_shorten(c->nm, 0, c->nm->path), FERRY_CKPT_MAX_DEPTH, name);
	if (ferry_ckpt_fault() || mkdirat(dfd, name, 0700) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot keep its subdirectory %s: %s", ferry_ckpt_shorten(c->nm, 0, c->nm->path),
				   name, strerror(errno));
	s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	d2 = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s2 < 0 || d2 < 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot open its subdirectory %s: %s", ferry_ckpt_shorten(c->nm, 0, c->nm->path),
				 name, strerror(errno));
	else
		st = keep_tree(c, s2, d2, depth + 1);
	if (d2 >= 0) {
		fchmod(d2, mode & 07777);
		close(d2);
	}
	if (s2 >= 0)
		close(s2);
	return st;
}

/* Hard-links every entry of sfd that the new checkpoint does not replace
 * into dfd (subdirectories recreated, their files linked). */
static ferry_status keep_tree(struct keep_ctx *c, int sfd, int dfd, int depth)
{
	struct dirent *e;
	DIR *dp;
	ferry_status st = ferry_ckpt_list_fd(c->nm, sfd, &dp);

	if (st)
		return st;
	while (!st && (e = readdir(dp))) {
		struct stat sb;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    (depth == 0 && replaced(e->d_name, c->with_state)))
			continue;
		if (fstatat(sfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			st = ferry_error(FERRY_ERR_IO, "%s: cannot stat %s: %s", ferry_ckpt_shorten(c->nm, 0, c->nm->path), e->d_name,
					 strerror(errno));
		else if (S_ISDIR(sb.st_mode))
			st = keep_subdir(c, sfd, dfd, e->d_name, sb.st_mode, depth);
		else if (ferry_ckpt_fault() || linkat(sfd, e->d_name, dfd, e->d_name, 0) != 0)
			st = ferry_error(FERRY_ERR_IO, "%s: cannot keep %s in the new checkpoint (a hard link): %s",
					 ferry_ckpt_shorten(c->nm, 0, c->nm->path), e->d_name, strerror(errno));
	}
	closedir(dp);
	return st;
}

static ferry_status keep_others(struct ferry_ckpt_names *nm, bool with_state)
{
	struct keep_ctx c = { nm, with_state };
	int sfd = open(nm->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int dfd = open(nm->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ferry_status st;

	if (sfd < 0 || dfd < 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", ferry_ckpt_shorten(nm, 0, sfd < 0 ? nm->path : nm->tmp),
				 strerror(errno));
	else
		st = keep_tree(&c, sfd, dfd, 0);
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	return st;
}

static bool is_dir(const char *path)
{
	struct stat sb;

	return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* DIR.tmp.<pid>/ written completely and fsynced. */
static ferry_status write_dir(struct ferry_ckpt_names *nm, const struct stat *old, const struct ferry_model_config *cfg,
			      const float *params, const struct ferry_train_state *st, const float *m,
			      const float *v, size_t n, const struct ferry_hf_source *src)
{
	ferry_status rc = FERRY_OK;
	int fd;

	remove_tree(nm->tmp); /* this process's own leftover */
	if (ferry_ckpt_fault() || mkdir(nm->tmp, 0777) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot create the checkpoint directory (as %s): %s",
				   ferry_ckpt_shorten(nm, 0, nm->path), ferry_ckpt_shorten(nm, 1, nm->tmp), strerror(errno));
	if (old)
		rc = keep_others(nm, st != NULL);
	if (!rc)
		rc = ferry_ckpt_hf_carry(src->dir, nm->path, nm->tmp);
	if (!rc) /* the run's own tokenizer over the source's */
		rc = is_dir(src->tokenizer) ? ferry_ckpt_hf_carry(src->tokenizer, nm->path, nm->tmp)
					    : ferry_ckpt_carry_tokenizer(src->tokenizer, true, nm->tmp, "tokenizer.json");
	if (!rc)
		rc = ferry_ckpt_hf_write_files(nm->tmp, cfg, params, src);
	if (!rc && st) {
		char *sp = ferry_ckpt_with_suffix(nm->tmp, "/" FERRY_HF_STATE_NAME, 0);

		rc = sp ? ferry_ckpt_write_state(sp, st, m, v, n) :
			  ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", ferry_ckpt_shorten(nm, 0, nm->path));
		ferry_free(sp);
	}
	if (!rc && old)
		chmod(nm->tmp, old->st_mode & 07777);
	fd = rc ? -1 : open(nm->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!rc && (fd < 0 || ferry_ckpt_fault() || fsync(fd) != 0))
		rc = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", ferry_ckpt_shorten(nm, 0, nm->tmp), strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Makes DIR.tmp.<pid> the checkpoint; the old one, if any, is left as
 * DIR.tmp.<pid> (exchanged) or DIR.old.<pid>, for the cleanup. */
static ferry_status swap_in(struct ferry_ckpt_names *nm, bool exists)
{
	if (!exists) {
		if (rename(nm->tmp, nm->path) == 0)
			return FERRY_OK;
	} else if (renameat2(AT_FDCWD, nm->tmp, AT_FDCWD, nm->path, RENAME_EXCHANGE) == 0) {
		return FERRY_OK;
	} else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
		/* no atomic exchange here: two renames, which recovery finishes */
		if (rename(nm->path, nm->old) == 0) {
			int e;

			if (rename(nm->tmp, nm->path) == 0)
				return FERRY_OK;
			e = errno;
			rename(nm->old, nm->path);
			errno = e;
		}
	}
	return ferry_error(FERRY_ERR_IO, "%s: cannot move the new checkpoint into place: %s (the previous "
			   "checkpoint is unchanged)", ferry_ckpt_shorten(nm, 0, nm->path), strerror(errno));
}

static ferry_status save_hf(struct ferry_ckpt_names *nm, const struct ferry_model_config *cfg, const float *params,
			    const struct ferry_train_state *st, const float *m, const float *v, size_t n,
			    const struct ferry_hf_source *src)
{
	struct stat old;
	bool exists = lstat(nm->path, &old) == 0;
	ferry_status rc = write_dir(nm, exists ? &old : NULL, cfg, params, st, m, v, n, src);
	int fd;

	if (rc) {
		remove_tree(nm->tmp);
		return rc;
	}
	fd = lock_dir(nm->parent);
	rc = swap_in(nm, exists);
	if (!rc) {
		sync_path(nm->parent);
		/* committed: the old directory goes, then other stale ones, best
		 * effort */
		remove_tree(nm->tmp);
		remove_tree(nm->old);
		(void)recover_locked(nm);
	} else {
		remove_tree(nm->tmp);
	}
	unlock_dir(fd);
	return rc;
}

/* ---- saving ------------------------------------------------------------------------------- */

/* The arguments, the path and the values checked before anything is
 * written; *c: cfg completed. */
static ferry_status check_save(const char *path, const struct ferry_model_config *cfg, const float *params,
			       const struct ferry_train_state *st, const float *m, const float *v, size_t n_params,
			       struct ferry_model_config *c)
{
	ferry_status rc;

	if (!path || !cfg || !params || (st && (!m || !v)))
		return ferry_error(FERRY_ERR_INVALID, "checkpoint save: NULL path, config, parameters or moments");
	*c = *cfg;
	if (ferry_model_config_complete(c) != FERRY_OK) {
		char why[384];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_INVALID, "checkpoint save: invalid model config: %s", why);
	}
	if (st && n_params != ferry_model_config_num_params(c))
		return ferry_error(FERRY_ERR_INVALID, "checkpoint save: %zu moments for a model of %zu parameters",
				   n_params, ferry_model_config_num_params(c));
	rc = ferry_checkpoint_check_save_path(path, c);
	/* a diverged model is refused before anything is written */
	if (!rc)
		rc = ferry_ckpt_check_finite(path, c, params, ferry_model_config_num_params(c), FERRY_ERR_INVALID,
					     "not saved: ");
	return rc;
}

/* The weights as BF16 holds them, into *out (allocated), and the state
 * with their hash into *out_st: what a resume reads back.  A value too
 * large for BF16 is refused. */
static ferry_status round_bf16(const char *path, const struct ferry_model_config *c, const float *params,
			       const struct ferry_train_state *st, float **out, struct ferry_train_state **out_st)
{
	const size_t n = ferry_model_config_num_params(c);
	float *r = ferry_malloc(n * sizeof(float) + 1);
	struct ferry_train_state *s = st ? ferry_malloc(sizeof(*s)) : NULL;
	ferry_status rc = r && (s || !st) ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", path);

	for (size_t i = 0; !rc && i < n; i++)
		r[i] = ferry_st_bf16_to_f32(ferry_st_f32_to_bf16(params[i]));
	if (!rc)
		rc = ferry_ckpt_check_finite(path, c, r, n, FERRY_ERR_INVALID, "not saved in bf16 (too large for it): ");
	if (!rc && s) {
		*s = *st;
		s->params_hash = ferry_params_hash(r, n);
	}
	if (rc) {
		ferry_free(r);
		ferry_free(s);
		r = NULL, s = NULL;
	}
	*out = r;
	*out_st = s;
	return rc;
}

ferry_status ferry_checkpoint_save_as(const char *path, const struct ferry_model_config *cfg,
				      const float *params, const struct ferry_train_state *st, const float *m,
				      const float *v, size_t n_params, const struct ferry_save_opts *so)
{
	struct ferry_model_config c;
	struct ferry_hf_source src = { 0 };
	struct ferry_train_state *st16 = NULL;
	float *p16 = NULL;
	struct ferry_ckpt_names nm;
	bool hf;
	ferry_status rc = check_save(path, cfg, params, st, m, v, n_params, &c);

	if (rc)
		return rc;
	hf = ferry_checkpoint_model_is_hf(&c);
	if (!hf && so && so->dtype == FERRY_SAVE_BF16)
		return ferry_error(FERRY_ERR_INVALID, "%s: not saved: an llm.c model file holds fp32 weights only "
				   "(bf16 is for Hugging Face directories)", path);
	rc = hf ? ferry_ckpt_hf_source(so, &src) : FERRY_OK;
	if (!rc && src.bf16 && !(rc = round_bf16(path, &c, params, st, &p16, &st16)))
		params = p16, st = st ? st16 : NULL;
	if (!rc)
		rc = ferry_ckpt_names_make(path, hf, &nm);
	if (rc) {
		ferry_ckpt_hf_source_free(&src);
		return rc;
	}
	/* finish or clear what a killed save left, freeing its space first */
	if (ferry_checkpoint_recover(nm.path) == FERRY_ERR_NOMEM)
		rc = FERRY_ERR_NOMEM;
	else if (hf)
		rc = save_hf(&nm, &c, params, st, m, v, n_params, &src);
	else
		rc = save_llmc(&nm, &c, params, st, m, v, n_params, so ? so->tokenizer : NULL);
	ferry_ckpt_names_free(&nm);
	ferry_ckpt_hf_source_free(&src);
	ferry_free(p16);
	ferry_free(st16);
	return rc;
}

ferry_status ferry_checkpoint_save(const char *path, const struct ferry_model_config *cfg,
				   const float *params, const struct ferry_train_state *st,
				   const float *m, const float *v, size_t n_params)
{
	return ferry_checkpoint_save_as(path, cfg, params, st, m, v, n_params, NULL);
}
