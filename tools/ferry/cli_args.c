#include "cli_args.h"
#include "ferry/ferry.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

int arg_size(const char *cmd, int argc, char **argv, int i, size_t *out)
{
	const char *s;
	char *end;
	double v, mult = 1;

	if (arg_value(cmd, argc, argv, i, &s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (errno || end == s || *end || !(v > 0) || v * mult > 1e18 || v * mult < 1) {
		fprintf(stderr, "ferry %s: %s expects a positive size like 512M or 2G, got '%s'\n",
			cmd, argv[i], s);
		return -1;
	}
	*out = (size_t)(v * mult);
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
