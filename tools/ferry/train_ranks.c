/* ferry train on many ranks: printing, stopping together, failing alone
 * (train_ranks.h). */
#include "train_ranks.h"
#include "cli_args.h"
#include "ferry/platform.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* All but rank 0 write standard output to /dev/null, and standard error
 * to a file in memory (msg_fd): its last line is the message of a
 * failure the CLI met itself, which rank 0 then prints (ranks_agree_rc;
 * ferry_last_error would be a stale one).  err_fd keeps their own stderr. */
static void silence(struct ranks *r)
{
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	fflush(stdout);
	fflush(stderr);
	r->err_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (null < 0 || r->err_fd < 0)
		return; /* then it prints like rank 0 */
	r->msg_fd = memfd_create("ferry-stderr", MFD_CLOEXEC);
	dup2(null, STDOUT_FILENO);
	dup2(r->msg_fd >= 0 ? r->msg_fd : null, STDERR_FILENO);
	close(null);
}

/* The last line this rank wrote to its standard error since the last
 * call, without "ferry CMD: ", into buf; NULL when none. */
static const char *own_message(const struct ranks *r, char *buf, size_t n)
{
	char prefix[64];
	off_t end = r->msg_fd >= 0 ? lseek(r->msg_fd, 0, SEEK_END) : -1;
	off_t from = end > (off_t)n - 1 ? end - (off_t)n + 1 : 0;
	ssize_t got = end > 0 ? pread(r->msg_fd, buf, (size_t)(end - from), from) : -1;
	char *line;

	if (got <= 0)
		return NULL;
	buf[got] = 0;
	while (got > 0 && buf[got - 1] == '\n')
		buf[--got] = 0;
	line = strrchr(buf, '\n') ? strrchr(buf, '\n') + 1 : buf;
	if (ftruncate(r->msg_fd, 0) == 0) /* the next failure's line alone */
		lseek(r->msg_fd, 0, SEEK_SET);
	snprintf(prefix, sizeof(prefix), "ferry %s: ", r->cmd);
	if (!strncmp(line, prefix, strlen(prefix)))
		line += strlen(prefix);
	return *line ? line : NULL;
}

int ranks_open(const char *cmd, struct ranks *r)
{
	memset(r, 0, sizeof(*r));
	r->err_fd = STDERR_FILENO;
	r->msg_fd = -1;
	r->cmd = cmd;
	if (ferry_comm_open(&r->comm) != FERRY_OK)
		return ferry_cli_fail(cmd);
	r->rank = ferry_comm_rank(r->comm);
	r->size = ferry_comm_size(r->comm);
	r->local_size = ferry_comm_local_size(r->comm);
	if (r->rank != 0)
		silence(r);
	if (r->size > 1 && ferry_rank_cores_bind(r->comm, &r->cores) != FERRY_OK)
		dprintf(r->err_fd, "ferry %s: rank %d: warning: runs on CPUs %s unbound: %s\n", cmd, r->rank,
			r->cores.list, ferry_last_error());
	return 0;
}

/* On the watchdog's thread: the first waiting rank prints, all end.  (A
 * rank whose process is gone says so, no timeout involved.) */
static void timed_out(void *arg, ferry_status st)
{
	struct ranks *r = arg;
	const char *e = ferry_last_error();
	char why[64] = "";

	(void)st;
	if (!strstr(e, "ended without a word"))
		snprintf(why, sizeof(why), " (--comm-timeout %g)", r->timeout);
	dprintf(r->err_fd, "ferry %s: %s%s: stopping every rank\n", r->cmd, e, why);
	ferry_comm_abort(r->comm, 1);
}

int ranks_watch(struct ranks *r, double seconds)
{
	r->timeout = seconds;
	if (ferry_comm_set_timeout(r->comm, seconds, timed_out, r) != FERRY_OK)
		return ranks_fail(r->cmd, r);
	return 0;
}

void ranks_close(struct ranks *r)
{
	ferry_comm_free(r->comm);
	if (r->err_fd > STDERR_FILENO)
		close(r->err_fd);
	if (r->msg_fd >= 0)
		close(r->msg_fd);
	r->comm = NULL;
}

int ranks_threads(const struct ranks *r, int threads)
{
	return threads ? threads : r->cores.threads > 1 ? r->cores.threads : 1;
}

void ranks_print_cores(const struct ranks *r)
{
	const struct ferry_rank_cores *k = &r->cores;
	char node[24] = "";

	if (r->size < 2)
		return;
	if (k->node >= 0)
		snprintf(node, sizeof(node), ", node %d", k->node);
	if (k->bound)
		printf("cores: %d ranks of this machine shared one CPU mask; ferry bound each to its part "
		       "(rank 0: CPUs %s%s)\n", k->sharing, k->list, node);
	else if (k->sharing == 1 && k->cpus == k->threads)
		printf("cores: each rank keeps the CPUs its launcher bound it to (rank 0: CPUs %s%s)\n", k->list,
		       node);
	else
		printf("cores: rank 0 runs on CPUs %s%s, shared with other ranks (fewer CPUs than ranks, or "
		       "overlapping masks): unbound\n", k->list, node);
}

int ranks_fail(const char *cmd, const struct ranks *r)
{
	if (r->size <= 1 || ferry_comm_error_shared(r->comm))
		return ferry_cli_fail(cmd);
	dprintf(r->err_fd, "ferry %s: rank %d: %s\n", cmd, r->rank, ferry_last_error());
	ferry_comm_abort(r->comm, 1);
	return 1;
}

int ranks_agree_rc(const char *cmd, const struct ranks *r, int rc)
{
	char msg[512];
	const char *mine = NULL;
	int worst = rc;

	if (r->size <= 1)
		return rc;
	if (rc && r->rank != 0 && !(mine = own_message(r, msg, sizeof(msg))))
		mine = "failed, saying nothing";
	if (ferry_comm_agree_message(r->comm, rc ? FERRY_ERR_INVALID : FERRY_OK, mine) == FERRY_OK)
		return 0;
	if (rc == 0 && r->rank == 0)
		ferry_cli_fail(cmd);
	if (ferry_comm_all_reduce(r->comm, &worst, 1, FERRY_COMM_I32, FERRY_COMM_MAX, NULL) != FERRY_OK)
		return 1;
	return worst ? worst : 1;
}

int ranks_agree_stop(const struct ranks *r, int why)
{
	if (r->size > 1 && ferry_comm_all_reduce(r->comm, &why, 1, FERRY_COMM_I32, FERRY_COMM_MIN, NULL) != FERRY_OK)
		return ranks_fail("train", r);
	return why;
}

int ranks_gather(const char *cmd, const struct ranks *r, const size_t *mine, size_t n, size_t *all)
{
	memcpy(all + (size_t)r->rank * n, mine, n * sizeof(size_t));
	if (r->size > 1 && ferry_comm_all_gather(r->comm, all + (size_t)r->rank * n, all, n * sizeof(size_t),
						 FERRY_COMM_BYTE, NULL) != FERRY_OK)
		return ranks_fail(cmd, r);
	return 0;
}

const char *ranks_path(const struct ranks *r, const char *path, char *buf, size_t n)
{
	const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');

	if (r->size <= 1)
		return path;
	if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : path))
		dot = path + strlen(path);
	snprintf(buf, n, "%.*s.rank%d%s", (int)(dot - path), path, r->rank, dot);
	return buf;
}
