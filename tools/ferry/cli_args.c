#include "cli_args.h"
#include "ferry/ferry.h"
#include "ferry/platform.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int arg_value(const char *cmd, int argc, char **argv, int i, const char **out)
{
	if (i + 1 >= argc) {
		fprintf(stderr, "ferry %s: %s needs a value\n", cmd, argv[i]);
		return -1;
	}
	*out = argv[i + 1];
	return 0;
}

int arg_int(const char *cmd, int argc, char **argv, int i, int *out)
{
	const char *s;
	char *end;
	long v;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < -2147483647L || v > 2147483647L) {
		fprintf(stderr, "ferry %s: %s expects an integer, got '%s'\n", cmd, argv[i], s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int arg_u64(const char *cmd, int argc, char **argv, int i, uint64_t *out)
{
	const char *s;
	char *end;
	unsigned long long v;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-') {
		fprintf(stderr, "ferry %s: %s expects a non-negative integer, got '%s'\n", cmd, argv[i], s);
		return -1;
	}
	*out = v;
	return 0;
}

int arg_float(const char *cmd, int argc, char **argv, int i, float *out)
{
	const char *s;
	char *end;
	double v;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || !isfinite((float)v)) {
		fprintf(stderr, "ferry %s: %s expects a number that fits a float, got '%s'\n", cmd, argv[i], s);
		return -1;
	}
	*out = (float)v;
	return 0;
}

int arg_on_off(const char *cmd, int argc, char **argv, int i, bool *out)
{
	const char *s;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	if (strcmp(s, "on") && strcmp(s, "off")) {
		fprintf(stderr, "ferry %s: %s expects on or off, got '%s'\n", cmd, argv[i], s);
		return -1;
	}
	*out = !strcmp(s, "on");
	return 0;
}

/* The unit after a size's number: its multiplier, or 0 when there is
 * none or it is not one of K, M, G, T with an optional i, iB or B. */
static double size_unit(const char *u)
{
	static const char units[] = "kmgt";
	const char *at = *u ? strchr(units, tolower((unsigned char)*u)) : NULL;
	double mult = 1024.0;

	if (!at)
		return 0;
	for (const char *p = units; p < at; p++)
		mult *= 1024.0;
	u++;
	if (!strcmp(u, "") || !strcmp(u, "i") || !strcmp(u, "iB") || !strcmp(u, "B") || !strcmp(u, "b"))
		return mult;
	return 0;
}

int arg_size(const char *cmd, int argc, char **argv, int i, size_t *out)
{
	const char *s;
	char *end;
	double v, mult;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || !(v > 0)) {
		fprintf(stderr, "ferry %s: %s expects a positive size like 512M or 2G, got '%s'\n",
			cmd, argv[i], s);
		return -1;
	}
	mult = size_unit(end);
	if (!mult) {
		fprintf(stderr, "ferry %s: %s %s: %s; write e.g. %gM or %gG (K, M, G, T: powers of 1024)\n",
			cmd, argv[i], s, *end ? "unknown unit" : "a size needs a unit", v, v);
		return -1;
	}
	if (v * mult > 1e18) {
		fprintf(stderr, "ferry %s: %s %s: too large\n", cmd, argv[i], s);
		return -1;
	}
	if (v * mult < 1048576.0) {
		fprintf(stderr, "ferry %s: %s %s: at least 1M (no model fits in less)\n", cmd, argv[i], s);
		return -1;
	}
	/* whole KiB: a multiple of every alignment a device arena rounds to */
	*out = (size_t)(v * mult) / 1024 * 1024;
	return 0;
}

int arg_threads(const char *cmd, int argc, char **argv, int i, int *out)
{
	int cores = ferry_cpu_count(), max = CLI_THREADS_PER_CORE * cores;

	if (arg_int(cmd, argc, argv, i, out))
		return -1;
	if (*out < 0) {
		fprintf(stderr, "ferry %s: %s must not be negative (0: all cores)\n", cmd, argv[i]);
		return -1;
	}
	if (*out > max) {
		fprintf(stderr, "ferry %s: %s %d: this machine has %d core%s; at most %d threads "
			"(%d per core; 0 uses every core)\n", cmd, argv[i], *out, cores, cores == 1 ? "" : "s",
			max, CLI_THREADS_PER_CORE);
		return -1;
	}
	return 0;
}

int arg_rate(const char *cmd, int argc, char **argv, int i, double *out)
{
	static const char si[] = "kMGTP";
	const char *s, *at;
	char *end;
	double v;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (*end && !end[1] && (at = strchr(si, *end == 'K' ? 'k' : *end))) {
		for (const char *p = si; p <= at; p++)
			v *= 1000.0;
		end++;
	}
	if (errno || end == s || *end || !isfinite(v) || !(v > 0)) {
		fprintf(stderr, "ferry %s: %s expects a positive rate like 150G or 1.5e11, got '%s'\n",
			cmd, argv[i], s);
		return -1;
	}
	*out = v;
	return 0;
}

int cli_fail(const char *cmd)
{
	fprintf(stderr, "ferry %s: %s\n", cmd, ferry_last_error());
	return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ferry %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see ferry %s --help)\n", cmd);
	return 2;
}

/* ---- flags known per command ---------------------------------------------- */

static const struct cli_flag *find_flag(const struct cli_spec *spec, const char *name, size_t len)
{
	static const struct cli_flag help[] = { { "--help", CLI_SWITCH }, { "-h", CLI_SWITCH } };

	for (size_t k = 0; k < 2; k++)
		if (strlen(help[k].name) == len && !strncmp(help[k].name, name, len))
			return &help[k];
	for (const struct cli_flag *const *l = spec->lists; *l; l++)
		for (const struct cli_flag *f = *l; f->name; f++)
			if (strlen(f->name) == len && !strncmp(f->name, name, len))
				return f;
	return NULL;
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

void cli_suggest(const struct cli_spec *spec, const char *unknown, char *buf, size_t n)
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
		for (const struct cli_flag *const *l = spec->lists; *l; l++)
			for (const struct cli_flag *f = *l; f->name; f++) {
				int d = nearness(typed, f->name + strspn(f->name, "-"));

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

static int unknown_flag(const struct cli_spec *spec, const char *a)
{
	char hint[160];

	cli_suggest(spec, a, hint, sizeof(hint));
	return cli_usage_error(spec->cmd, "unknown flag '%s'%s", a, hint);
}

/* One flag at argv[*i] into out[*n...]: split at '=', checked against the
 * spec; its value (if any) is copied too and *i moved past it. */
static int normalize_flag(const struct cli_spec *spec, int argc, char **argv, int *i, char **out, int *n)
{
	const char *a = argv[*i], *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
	size_t len = eq ? (size_t)(eq - a) : strlen(a);
	const struct cli_flag *f = find_flag(spec, a, len);

	if (!f)
		return unknown_flag(spec, a);
	if (!eq) {
		out[(*n)++] = argv[*i];
		if ((f->kind == CLI_VALUE && *i + 1 < argc) ||
		    (f->kind == CLI_OPTIONAL_VALUE && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0))
			out[(*n)++] = argv[++*i];
		return 0;
	}
	if (f->kind == CLI_SWITCH)
		return cli_usage_error(spec->cmd, "%s takes no value, got '%s'", f->name, a);
	out[(*n)++] = (char *)f->name;
	out[(*n)++] = (char *)(eq + 1);
	return 0;
}

int cli_normalize(const struct cli_spec *spec, int argc, char **argv, int *argc_out, char ***argv_out)
{
	/* "--a=b" becomes two arguments: at most twice as many */
	char **out = malloc(((size_t)argc * 2 + 1) * sizeof(*out));
	int n = 0;

	if (!out) {
		fprintf(stderr, "ferry %s: out of memory\n", spec->cmd);
		return 1;
	}
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (i == 0 || a[0] != '-' || a[1] == 0) { /* the command, a file, "-" */
			out[n++] = argv[i];
		} else if (spec->files && !strcmp(a, "--")) {
			while (i < argc)
				out[n++] = argv[i++];
		} else if (normalize_flag(spec, argc, argv, &i, out, &n)) {
			free(out);
			return 2;
		}
	}
	out[n] = NULL;
	*argc_out = n;
	*argv_out = out;
	return 0;
}
