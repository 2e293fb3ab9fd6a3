/* ferry train on many ranks: one run on every rank (train_agree.h). */
#include "train_agree.h"
#include "ferry/hf_checkpoint.h"

#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAMPLE_BLOCK 4096 /* bytes hashed at each place of a file */
#define SAMPLES 16        /* places between its first and last block */

/* A rank's own: its files, its machine's resources and layout, what rank
 * 0 alone does.  A rank may be given others than rank 0's. */
static const char *const per_rank[] = { "--trace", "--json", "--threads", "--comm-timeout", "--peak-flops",
					"--sample", "--sample-temperature", "--tokenizer", "--device-mem",
					"--pinned-limit", "--host-mem", "--host-tier", "--topology", "--nvme-dir",
					NULL };
/* Inputs, compared by their files; --save by being given (rank 0 writes). */
static const char *const by_files[] = { "--data", "--val-data", "--checkpoint", "--resume", "--save", NULL };

static bool listed(const char *const *names, const char *name)
{
	for (; *names; names++)
		if (!strcmp(*names, name))
			return true;
	return false;
}

/* The text being made: lines, growing. */
struct text {
	char *buf;
	size_t len, cap;
	bool failed; /* out of memory */
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || t->failed)
		return;
	if (t->len + (size_t)n + 1 > t->cap) {
		size_t cap = 2 * (t->len + (size_t)n + 1);
		char *b = realloc(t->buf, cap);

		if (!b) {
			t->failed = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	t->len += (size_t)n;
}

/* FNV-1a, 64 bits, of n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

/* A hash of a file of `size` bytes, cheap for shards of GBs: its first
 * block (the header, whose token count tells most files apart), its last,
 * and SAMPLES blocks evenly between; a different file, or another version
 * of one, differs there.  0 when it cannot be read. */
static uint64_t file_hash(const char *path, off_t size)
{
	unsigned char block[SAMPLE_BLOCK];
	uint64_t h = 0xcbf29ce484222325ULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	for (int k = 0; k <= SAMPLES + 1; k++) {
		off_t at = k == SAMPLES + 1 ? size - SAMPLE_BLOCK : (off_t)((double)size * k / (SAMPLES + 1));
		ssize_t got = pread(fd, block, sizeof(block), at > 0 ? at : 0);

		if (got > 0)
			h = fnv(h, block, (size_t)got);
	}
	close(fd);
	return h;
}

/* The regular files a pattern names, as lines "FLAG file K of N=SIZE
 * bytes, hash H"; their number. */
static size_t add_files(struct text *t, const char *flag, const char *pattern)
{
	glob_t g;
	size_t n = 0, k = 0;
	struct stat st;

	if (glob(pattern, 0, NULL, &g) != 0) {
		add(t, "%s files=0\n", flag);
		return 0;
	}
	for (size_t i = 0; i < g.gl_pathc; i++)
		n += stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode);
	add(t, "%s files=%zu\n", flag, n);
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode))
			add(t, "%s file %zu of %zu=%lld bytes, hash %016" PRIx64 "\n", flag, ++k, n,
			    (long long)st.st_size, file_hash(g.gl_pathv[i], st.st_size));
	globfree(&g);
	return n;
}

/* An input flag's files: a glob of shards (none is this rank's failure,
 * in the loader's words, into failed), or a checkpoint: a Hugging Face
 * directory's files, or an llm.c file and its state. */
static void add_input(struct text *t, const char *flag, const char *path, char *failed, size_t n)
{
	char pattern[4200], state[4200];
	bool hf;

	add(t, "%s=%s\n", flag, path ? "given" : "none");
	if (!path || !strcmp(flag, "--save"))
		return;
	if (strcmp(flag, "--checkpoint") && strcmp(flag, "--resume")) {
		if (!add_files(t, flag, path) && !*failed)
			snprintf(failed, n, "no files match '%s'", path);
		return;
	}
	hf = ferry_checkpoint_is_hf(path);
	snprintf(pattern, sizeof(pattern), hf ? "%s/*" : "%s", path);
	/* none: this rank's failure, as the trainer would say it */
	if (!add_files(t, flag, pattern) && !*failed)
		snprintf(failed, n, "%s: cannot open: No such file or directory", path);
	if (!hf && ferry_checkpoint_state_path(path, false, state, sizeof(state)) == FERRY_OK && access(state, F_OK) == 0)
		add_files(t, flag, state);
}

/* A custom flag's value as argv gives it last ("given" for a switch),
 * NULL when not given: its parser's effects have no one type. */
static const char *given_value(const struct cli_flag *f, int argc, char **argv)
{
	const char *v = NULL;
	size_t len = strlen(f->name);

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], f->name, len) && argv[i][len] == '=')
			v = argv[i] + len + 1;
		else if (!strcmp(argv[i], f->name))
			v = f->value && i + 1 < argc && (!f->optional || strncmp(argv[i + 1], "--", 2)) ? argv[i + 1]
												: "given";
	}
	return v;
}

/* The shortest text of x that reads back as x ("0.1", not 0.100000001). */
static const char *float_text(float x, char *buf, size_t n)
{
	for (int digits = 6; digits < 9; digits++) {
		snprintf(buf, n, "%.*g", digits, (double)x);
		if (strtof(buf, NULL) == x)
			return buf;
	}
	snprintf(buf, n, "%.9g", (double)x);
	return buf;
}

/* Flag f's value in dst as text, the same for the same value however
 * written ("3e-3", "0.003"), into buf. */
static const char *flag_value(const struct cli_flag *f, const void *dst, int argc, char **argv, char *buf, size_t n)
{
	const void *at = CLI_AT(f, dst);
	const char *v;

	switch (f->type) {
	case CLI_STRING: v = *(const char *const *)at; return v ? v : "none";
	case CLI_INT:
	case CLI_THREADS:
	case CLI_ONE: snprintf(buf, n, "%d", *(const int *)at); return buf;
	case CLI_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)at); return buf;
	case CLI_FLOAT: return float_text(*(const float *)at, buf, n);
	case CLI_SIZE: snprintf(buf, n, "%zu", *(const size_t *)at); return buf;
	case CLI_RATE: snprintf(buf, n, "%.17g", *(const double *)at); return buf;
	case CLI_ON_OFF:
	case CLI_TRUE: return *(const bool *)at ? "on" : "off";
	case CLI_CUSTOM: v = given_value(f, argc, argv); return v ? v : "default";
	}
	return "?";
}

/* Every flag of the groups but a rank's own, as lines; into failed, a
 * failure of this rank's own (no data). */
static void add_flags(struct text *t, const struct cli_group *groups, int argc, char **argv, bool resume,
		      unsigned given, char *failed, size_t n)
{
	char value[64];

	for (const struct cli_group *g = groups; g->flags; g++)
		for (const struct cli_flag *f = g->flags; f->name; f++) {
			if (listed(per_rank, f->name))
				continue;
			if (listed(by_files, f->name))
				add_input(t, f->name, *(const char *const *)CLI_AT(f, g->dst), failed, n);
			else if (resume && f->given && !(given & f->given))
				add(t, "%s=the saved run's\n", f->name);
			else
				add(t, "%s=%s\n", f->name, flag_value(f, g->dst, argc, argv, value, sizeof(value)));
		}
}

int ranks_agree_run(const struct ranks *r, const struct cli_group *groups, int argc, char **argv, bool resume,
		    unsigned given)
{
	struct text t = { NULL, 0, 0, false };
	char failed[512] = "";
	ferry_status st;

	if (r->size <= 1)
		return 0;
	add_flags(&t, groups, argc, argv, resume, given, failed, sizeof(failed));
	if (t.failed && !*failed)
		snprintf(failed, sizeof(failed), "out of host memory listing the run's flags");
	st = ferry_comm_same_lines(r->comm, t.failed ? "" : t.buf ? t.buf : "", *failed ? failed : NULL);
	free(t.buf);
	return st ? ferry_cli_fail(r->cmd) : 0;
}
