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

int ferry_cli_arg_value(const char *cmd, int argc, char **argv, int i, const char **out)
{
	if (i + 1 >= argc) {
		ferry_cli_error(cmd, "%s needs a value", argv[i]);
		return -1;
	}
	*out = argv[i + 1];
	return 0;
}

/* The message for a flag's value that is not what it takes; -1. */
static int expects(const char *cmd, const char *flag, const char *what, const char *got)
{
	ferry_cli_error(cmd, "%s expects %s, got '%s'", flag, what, got);
	return -1;
}

int ferry_cli_arg_int(const char *cmd, int argc, char **argv, int i, int *out)
{
	const char *s;
	char *end;
	long v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
		return expects(cmd, argv[i], "an integer", s);
	*out = (int)v;
	return 0;
}

int ferry_cli_arg_u64(const char *cmd, int argc, char **argv, int i, uint64_t *out)
{
	const char *s;
	char *end;
	unsigned long long v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return expects(cmd, argv[i], "a non-negative integer", s);
	*out = v;
	return 0;
}

int ferry_cli_arg_float(const char *cmd, int argc, char **argv, int i, float *out)
{
	const char *s;
	char *end;
	double v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || !isfinite((float)v))
		return expects(cmd, argv[i], "a number that fits a float", s);
	*out = (float)v;
	return 0;
}

int ferry_cli_arg_on_off(const char *cmd, int argc, char **argv, int i, bool *out)
{
	const char *s;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	if (strcmp(s, "on") && strcmp(s, "off"))
		return expects(cmd, argv[i], "on or off", s);
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

int ferry_cli_arg_size(const char *cmd, int argc, char **argv, int i, size_t *out)
{
	const char *s;
	char *end;
	double v, mult;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || !(v > 0))
		return expects(cmd, argv[i], "a positive size like 512M or 2G", s);
	mult = size_unit(end);
	if (!mult) {
		ferry_cli_error(cmd, "%s %s: %s; write e.g. %gM or %gG (K, M, G, T: powers of 1024)", argv[i], s,
			  *end ? "unknown unit" : "a size needs a unit", v, v);
		return -1;
	}
	if (v * mult > 1e18) {
		ferry_cli_error(cmd, "%s %s: too large", argv[i], s);
		return -1;
	}
	if (v * mult < 1048576.0) {
		ferry_cli_error(cmd, "%s %s: at least 1M (no model fits in less)", argv[i], s);
		return -1;
	}
	/* whole KiB: a multiple of every alignment a device arena rounds to */
	*out = (size_t)(v * mult) / 1024 * 1024;
	return 0;
}

int ferry_cli_arg_threads(const char *cmd, int argc, char **argv, int i, int *out)
{
	int cores = ferry_cpu_count(), max = CLI_THREADS_PER_CORE * cores;

	if (ferry_cli_arg_int(cmd, argc, argv, i, out))
		return -1;
	if (*out < 0) {
		ferry_cli_error(cmd, "%s must not be negative (0: all cores)", argv[i]);
		return -1;
	}
	if (*out > max) {
		ferry_cli_error(cmd, "%s %d: this machine has %d core%s; at most %d threads (%d per core; 0 uses every core)",
			  argv[i], *out, cores, cores == 1 ? "" : "s", max, CLI_THREADS_PER_CORE);
		return -1;
	}
	return 0;
}

int ferry_cli_arg_rate(const char *cmd, int argc, char **argv, int i, double *out)
{
	static const char si[] = "kMGTP";
	const char *s, *at;
	char *end;
	double v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (*end && !end[1] && (at = strchr(si, *end == 'K' ? 'k' : *end))) {
		for (const char *p = si; p <= at; p++)
			v *= 1000.0;
		end++;
	}
	if (errno || end == s || *end || !isfinite(v) || !(v > 0))
		return expects(cmd, argv[i], "a positive rate like 150G or 1.5e11", s);
	*out = v;
	return 0;
}

const char *ferry_cli_program = "ferry";

static void vmessage(const char *cmd, const char *fmt, va_list ap)
{
	if (ferry_cli_program)
		fprintf(stderr, "%s ", ferry_cli_program);
	fprintf(stderr, "%s: ", cmd);
	vfprintf(stderr, fmt, ap);
}

void ferry_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(cmd, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

int ferry_cli_fail(const char *cmd)
{
	ferry_cli_error(cmd, "%s", ferry_last_error());
	return 1;
}

int ferry_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(cmd, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see %s%s%s --help)\n", ferry_cli_program ? ferry_cli_program : "", ferry_cli_program ? " " : "", cmd);
	return 2;
}
