/*
 * The flag tables at work: a command's argv checked against its groups
 * (unknown flags refused with the nearest known ones, "--flag=value"
 * split), each flag parsed as its entry says, and the tables' flag lines
 * printed for --help.  The tables themselves live with what they set:
 * model_flags.c, tier_flags.c and each command's cmd_*.c.
 */
#include "cli_args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether a command takes flag f of group g (g->only). */
static bool takes(const struct cli_group *g, const struct cli_flag *f)
{
	if (!g->only)
		return true;
	for (const char *const *n = g->only; *n; n++)
		if (!strcmp(*n, f->name))
			return true;
	return false;
}

/* The flag named name[0..len) among the groups (*in: its group), else NULL. */
static const struct cli_flag *find_flag(const struct cli_group *groups, const char *name, size_t len,
					const struct cli_group **in)
{
	for (const struct cli_group *g = groups; g->flags; g++)
		for (const struct cli_flag *f = g->flags; f->name; f++)
			if (strlen(f->name) == len && !strncmp(f->name, name, len) && takes(g, f)) {
				*in = g;
				return f;
			}
	return NULL;
}

static bool is_help(const char *a, size_t len)
{
	return (len == 6 && !strncmp(a, "--help", 6)) || (len == 2 && !strncmp(a, "-h", 2));
}

/* Optimal string alignment distance (insertions, deletions, substitutions,
 * transpositions of neighbours) of two short strings. */
static int edit_distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];

	if (la >= 64 || lb >= 64)
		return 1000;
	for (int i = 0; i <= la; i++)
		d[i][0] = i;
	for (int j = 0; j <= lb; j++)
		d[0][j] = j;
	for (int i = 1; i <= la; i++)
		for (int j = 1; j <= lb; j++) {
			int cost = a[i - 1] != b[j - 1], v = d[i - 1][j - 1] + cost;

			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

/* How far a known flag is from what was typed (both without leading dashes
 * and any "=value"): the edit distance when it is small for the word's
 * length, else 100 when one contains the other (--warm, --lr-warmup), else
 * -1 (not near). */
static int nearness(const char *typed, const char *known)
{
	int d = edit_distance(typed, known), len = (int)strlen(known);

	if (d <= 1 + len / 4)
		return d;
	if (strlen(typed) >= 3 && len >= 3 && (strstr(known, typed) || strstr(typed, known)))
		return 100;
	return -1;
}

/* The known flags nearest to an unknown one, as "; did you mean --x?" or
 * "; did you mean --x, --y or --z?" (empty when none is near) into buf. */
void ferry_cli_suggest(const struct cli_group *groups, const char *unknown, char *buf, size_t n)
{
	const char *pick[3];
	char typed[64];
	int best = -1, count = 0;
	size_t used;

	snprintf(typed, sizeof(typed), "%s", unknown + strspn(unknown, "-"));
	typed[strcspn(typed, "=")] = 0;
	for (char *p = typed; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	for (int pass = 0; pass < 2; pass++)
		for (const struct cli_group *g = groups; g->flags; g++)
			for (const struct cli_flag *f = g->flags; f->name; f++) {
				int d = takes(g, f) ? nearness(typed, f->name + strspn(f->name, "-")) : -1;

				if (d < 0)
					continue;
				if (pass == 0 && (best < 0 || d < best))
					best = d; /* the first pass finds the nearest ... */
				else if (pass == 1 && d == best && count < 3)
					pick[count++] = f->name; /* ... the second lists them */
			}
	buf[0] = 0;
	if (!count)
		return;
	used = (size_t)snprintf(buf, n, "; did you mean %s", pick[0]);
	for (int k = 1; k < count && used < n; k++)
		used += (size_t)snprintf(buf + used, n - used, "%s%s", k == count - 1 ? " or " : ", ", pick[k]);
	if (used < n)
		snprintf(buf + used, n - used, "?");
}

static int unknown_flag(const struct cli_command *c, const char *a)
{
	char hint[160];

	ferry_cli_suggest(c->groups, a, hint, sizeof(hint));
	return ferry_cli_usage_error(c->cmd, "unknown flag '%s'%s", a, hint);
}

/* One flag at argv[*i] into out[*n...]: split at '=', checked against the
 * command's flags; its value (if any) is copied too and *i moved past it. */
static int normalize_flag(const struct cli_command *c, int argc, char **argv, int *i, char **out, int *n)
{
	const char *a = argv[*i], *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
	size_t len = eq ? (size_t)(eq - a) : strlen(a);
	const struct cli_group *g;
	const struct cli_flag *f = is_help(a, len) ? NULL : find_flag(c->groups, a, len, &g);

	if (!f && !is_help(a, len))
		return unknown_flag(c, a);
	if (!eq) {
		out[(*n)++] = argv[*i];
		if (f && f->value && *i + 1 < argc && (!f->optional || strncmp(argv[*i + 1], "--", 2) != 0))
			out[(*n)++] = argv[++*i];
		return 0;
	}
	if (!f || !f->value)
		return ferry_cli_usage_error(c->cmd, "%.*s takes no value, got '%s'", (int)len, a, a);
	out[(*n)++] = (char *)f->name;
	out[(*n)++] = (char *)(eq + 1);
	return 0;
}

/* argv rewritten into a new array (*argv_out, to free): "--a=b" as two
 * arguments, after "--" (c->files) every argument as it is; 0, or the exit
 * code after a message. */
static int normalize(const struct cli_command *c, int argc, char **argv, int *argc_out, char ***argv_out)
{
	/* "--a=b" becomes two arguments: at most twice as many */
	char **out = malloc(((size_t)argc * 2 + 1) * sizeof(*out));
	int n = 0;

	if (!out) {
		ferry_cli_error(c->cmd, "out of memory");
		return 1;
	}
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (i == 0 || a[0] != '-' || a[1] == 0) { /* the command, a file, "-" */
			out[n++] = argv[i];
		} else if (c->files && !strcmp(a, "--")) {
			while (i < argc)
				out[n++] = argv[i++];
		} else if (normalize_flag(c, argc, argv, &i, out, &n)) {
			free(out);
			return 2;
		}
	}
	out[n] = NULL;
	*argc_out = n;
	*argv_out = out;
	return 0;
}

static int range_error(const char *cmd, const struct cli_flag *f, int v)
{
	char msg[200];

	snprintf(msg, sizeof(msg), f->range, v);
	if (f->usage)
		return ferry_cli_usage_error(cmd, "%s", msg);
	ferry_cli_error(cmd, "%s", msg);
	return 2;
}

/* Flag f at argv[i] (and its value) into its group's dst: the arguments
 * taken (1 or 2), or -1 after a message. */
static int take(const char *cmd, const struct cli_group *g, const struct cli_flag *f, int argc, char **argv, int i)
{
	void *at = CLI_AT(f, g->dst);
	int r = -1;

	switch (f->type) {
	case CLI_STRING: r = ferry_cli_arg_value(cmd, argc, argv, i, (const char **)at); break;
	case CLI_INT:
		r = ferry_cli_arg_int(cmd, argc, argv, i, (int *)at);
		if (!r && f->range && (*(int *)at < f->min || *(int *)at > f->max))
			r = range_error(cmd, f, *(int *)at);
		break;
	case CLI_U64: r = ferry_cli_arg_u64(cmd, argc, argv, i, (uint64_t *)at); break;
	case CLI_FLOAT: r = ferry_cli_arg_float(cmd, argc, argv, i, (float *)at); break;
	case CLI_SIZE: r = ferry_cli_arg_size(cmd, argc, argv, i, (size_t *)at); break;
	case CLI_RATE: r = ferry_cli_arg_rate(cmd, argc, argv, i, (double *)at); break;
	case CLI_ON_OFF: r = ferry_cli_arg_on_off(cmd, argc, argv, i, (bool *)at); break;
	case CLI_THREADS: r = ferry_cli_arg_threads(cmd, argc, argv, i, (int *)at); break;
	case CLI_TRUE: *(bool *)at = true; return 1;
	case CLI_ONE: *(int *)at = 1; return 1;
	case CLI_CUSTOM: return f->parse(f, cmd, argc, argv, i, g->dst);
	}
	return r ? -1 : 2;
}

/* An argument that is no flag nor a flag's value: when it looks like a
 * path, the shell most likely expanded an unquoted glob (--data with
 * data/<star>.bin gives --data data/a.bin data/b.bin ...); say so, naming the
 * flag before it when that one takes a glob. */
static int stray(const char *cmd, const char *arg, const struct cli_flag *last, const char *what)
{
	bool path = strchr(arg, '/') || strchr(arg, '*') || access(arg, F_OK) == 0;

	if (path && last && last->value && !strcmp(last->value, "GLOB"))
		return ferry_cli_usage_error(cmd, "%s '%s' after %s: the shell expanded an unquoted glob into "
					     "several files; quote it: %s 'PATTERN'", what, arg, last->name, last->name);
	if (path)
		return ferry_cli_usage_error(cmd, "%s '%s': a path, as an unquoted glob the shell expanded "
					     "gives; quote globs ('data/*.bin')", what, arg);
	return ferry_cli_usage_error(cmd, "%s '%s'", what, arg);
}

int ferry_cli_unexpected(const char *cmd, const char *arg, void *ctx)
{
	(void)ctx;
	return stray(cmd, arg, NULL, "unexpected argument");
}

/* The normalized argv into the groups' options, in order; as ferry_cli_parse. */
static int walk(const struct cli_command *c, int argc, char **argv)
{
	const struct cli_flag *last = NULL; /* the flag before, for stray() */

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct cli_group *g = NULL;
		const struct cli_flag *f = NULL;
		int r;

		if (c->files && !strcmp(a, "--")) { /* it and the rest to c->arg */
			for (; i < argc; i++)
				if ((r = c->arg(c->cmd, argv[i], c->ctx)) != 0)
					return r;
			break;
		}
		if (is_help(a, strlen(a)))
			return CLI_HELP;
		if (a[0] == '-' && a[1])
			f = find_flag(c->groups, a, strlen(a), &g);
		if (!f) {
			r = c->arg ? c->arg(c->cmd, a, c->ctx) : stray(c->cmd, a, last, "unexpected argument");
			if (r)
				return r;
			continue;
		}
		if ((r = take(c->cmd, g, f, argc, argv, i)) < 0)
			return 2;
		if (g->given)
			*g->given |= f->given;
		i += r - 1;
		last = f;
	}
	return 0;
}

int ferry_cli_parse(const struct cli_command *c, int argc, char **argv)
{
	char **args;
	int n, rc = normalize(c, argc, argv, &n, &args);

	if (rc)
		return rc;
	rc = walk(c, n, args);
	free(args);
	return rc;
}

/* "  --name VALUE" of f and of the flags joined to it into head; its length. */
static int help_head(const struct cli_flag *f, char *head, size_t size)
{
	size_t n = 0;

	for (const struct cli_flag *j = f; j->name && (j == f || j->join); j++)
		if (n < size)
			n += (size_t)snprintf(head + n, size - n, "%s%s%s%s", j == f ? "  " : " ", j->name,
					      j->value ? " " : "", j->value ? j->value : "");
	return n < size ? (int)n : (int)size - 1;
}

void ferry_cli_help(FILE *out, const struct cli_flag *flags, int col)
{
	for (const struct cli_flag *f = flags; f->name; f++) {
		char head[200];
		const char *h = f->help_fn ? f->help_fn() : f->help, *first = h;
		int n;

		if (f->section)
			fprintf(out, "%s\n", f->section);
		if (!h || f->join)
			continue;
		n = help_head(f, head, sizeof(head));
		fputs(head, out);
		if (*h == '\n')
			n = -1; /* the help starts on the next line */
		fprintf(out, "%*s", n < 0 ? 0 : n < col ? col - n : 2, "");
		for (h += n < 0; *h;) {
			size_t len = strcspn(h, "\n");

			if (n < 0 || h != first)
				fprintf(out, "\n%*s", col, "");
			n = 0;
			fwrite(h, 1, len, out);
			h += len + (h[len] == '\n');
		}
		fputc('\n', out);
	}
}
