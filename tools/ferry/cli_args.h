/* Flag values for the CLI: strict parsing, errors that name the flag. */
#ifndef FERRY_TOOLS_CLI_ARGS_H
#define FERRY_TOOLS_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns 0 on success; on failure prints "ferry <cmd>: ..." and
 * returns -1.  `i` indexes the flag in argv; the value is argv[i+1]. */
int arg_value(const char *cmd, int argc, char **argv, int i, const char **out);
int arg_int(const char *cmd, int argc, char **argv, int i, int *out);
int arg_u64(const char *cmd, int argc, char **argv, int i, uint64_t *out);
int arg_float(const char *cmd, int argc, char **argv, int i, float *out);
/* "on" or "off". */
int arg_on_off(const char *cmd, int argc, char **argv, int i, bool *out);
/* A memory size with a unit: K, M, G or T (powers of 1024), optionally
 * followed by "i", "iB" or "B" ("512M", "1.5GiB").  A number without a unit
 * and sizes below 1 MiB are refused: "--device-mem 80" never means 80
 * bytes. */
int arg_size(const char *cmd, int argc, char **argv, int i, size_t *out);
/* A thread count: 0 (all cores) up to CLI_THREADS_PER_CORE times the
 * machine's cores; more is refused, naming the cores (tens of thousands of
 * OpenMP threads take minutes to create and then fail inside libgomp). */
#define CLI_THREADS_PER_CORE 4
int arg_threads(const char *cmd, int argc, char **argv, int i, int *out);
/* A rate with an optional SI suffix (k, M, G, T, P = powers of 1000), e.g.
 * "150G" or "1.5e11"; positive. */
int arg_rate(const char *cmd, int argc, char **argv, int i, double *out);

/* Prints "ferry <cmd>: <ferry_last_error()>" and returns 1. */
int cli_fail(const char *cmd);
/* Prints a usage error and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the flags each command accepts -------------------------------------
 * main() checks a command's argv against its list before the command sees
 * it: "--flag=value" becomes "--flag" "value", and an unknown flag is refused
 * with the nearest known ones ("did you mean --val-every?").  The commands'
 * parsers then see only known flags, each value in its own argument. */
enum cli_flag_kind {
	CLI_SWITCH,         /* no value: --tied-head */
	CLI_VALUE,          /* one value: --steps 10, --steps=10 */
	CLI_OPTIONAL_VALUE, /* a value unless the next argument starts with
			       "--" (ferry plan --json [FILE]) */
};

struct cli_flag {
	const char *name;
	enum cli_flag_kind kind;
};

struct cli_spec {
	const char *cmd;
	const struct cli_flag *const *lists; /* NULL-terminated; each list
						ends with { NULL } */
	bool files;                          /* takes FILE arguments; after
						"--" every argument is one */
};

/* The spec of a command (NULL for an unknown command). */
const struct cli_spec *cli_spec_find(const char *cmd);

/* Rewrites argv as described above into a new array (*argv_out, to free
 * with free(); its strings point into argv or into it).  Returns 0, or
 * prints a usage error and returns 2. */
int cli_normalize(const struct cli_spec *spec, int argc, char **argv, int *argc_out,
		  char ***argv_out);
/* The known flags nearest to an unknown one, as " did you mean --x?" or
 * " did you mean --x, --y or --z?" (empty when none is near) into buf. */
void cli_suggest(const struct cli_spec *spec, const char *unknown, char *buf, size_t n);

#endif
