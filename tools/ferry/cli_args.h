/* Flag values for the CLI: strict parsing, errors that name the flag. */
#ifndef FERRY_TOOLS_CLI_ARGS_H
#define FERRY_TOOLS_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What messages start with: "ferry <cmd>: " ("ferry"); NULL: "<cmd>: "
 * (the benchmarks, which share the model flags). */
extern const char *ferry_cli_program;
/* Prints "ferry <cmd>: ", the message and a newline on stderr. */
void ferry_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Each returns 0 on success; on failure prints "ferry <cmd>: ..." and
 * returns -1.  `i` indexes the flag in argv; the value is argv[i+1]. */
int ferry_cli_arg_value(const char *cmd, int argc, char **argv, int i, const char **out);
int ferry_cli_arg_int(const char *cmd, int argc, char **argv, int i, int *out);
int ferry_cli_arg_u64(const char *cmd, int argc, char **argv, int i, uint64_t *out);
int ferry_cli_arg_float(const char *cmd, int argc, char **argv, int i, float *out);
/* "on" or "off". */
int ferry_cli_arg_on_off(const char *cmd, int argc, char **argv, int i, bool *out);
/* A memory size with a unit: K, M, G or T (powers of 1024), optionally
 * followed by "i", "iB" or "B" ("512M", "1.5GiB").  A number without a unit
 * and sizes below 1 MiB are refused: "--device-mem 80" never means 80
 * bytes. */
int ferry_cli_arg_size(const char *cmd, int argc, char **argv, int i, size_t *out);
/* A thread count: 0 (all cores) up to CLI_THREADS_PER_CORE times the
 * machine's cores; more is refused, naming the cores (tens of thousands of
 * OpenMP threads take minutes to create and then fail inside libgomp). */
#define CLI_THREADS_PER_CORE 4
int ferry_cli_arg_threads(const char *cmd, int argc, char **argv, int i, int *out);
/* A rate with an optional SI suffix (k, M, G, T, P = powers of 1000), e.g.
 * "150G" or "1.5e11"; positive. */
int ferry_cli_arg_rate(const char *cmd, int argc, char **argv, int i, double *out);

/* Prints "ferry <cmd>: <ferry_last_error()>" and returns 1. */
int ferry_cli_fail(const char *cmd);
/* Prints a usage error and returns 2. */
int ferry_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the flags each command accepts -------------------------------------
 * One table per group of flags (the model's, the host tiers', each
 * command's own) is all there is of a flag: its name, its value, its help
 * and how it is parsed.  ferry_cli_parse() checks a command's argv against its
 * tables ("--flag=value" becomes "--flag" "value"; an unknown flag is
 * refused with the nearest known ones, "did you mean --val-every?"), then
 * walks argv parsing each flag as its entry says; ferry_cli_help() prints the
 * tables' flag lines for --help. */
enum cli_type {
	CLI_STRING,  /* const char *: the value as given */
	CLI_INT,     /* int (ferry_cli_arg_int); within [min, max] when range is set */
	CLI_U64,     /* uint64_t (ferry_cli_arg_u64) */
	CLI_FLOAT,   /* float (ferry_cli_arg_float) */
	CLI_SIZE,    /* size_t with a unit (ferry_cli_arg_size) */
	CLI_RATE,    /* double with an SI suffix (ferry_cli_arg_rate) */
	CLI_ON_OFF,  /* bool (ferry_cli_arg_on_off) */
	CLI_THREADS, /* int (ferry_cli_arg_threads) */
	CLI_TRUE,    /* a switch: bool set to true */
	CLI_ONE,     /* a switch: int set to 1 */
	CLI_CUSTOM,  /* parse() */
};

struct cli_flag;

/* A CLI_CUSTOM flag's parser: argv[i] (and its value), flag f, into dst;
 * returns the arguments it took (1 or 2), or -1 after a message. */
typedef int cli_parse_fn(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst);

/* Where a group's flags go, for a parse. */
struct cli_group {
	const struct cli_flag *flags; /* the table, ending with { NULL } */
	void *dst;                    /* the struct its entries' offsets are in */
	unsigned *given;              /* each parsed flag's given bits are ORed
					 in (NULL: not kept) */
	const char *const *only;      /* NULL, or the names of the table's
					 flags this command takes (ending with
					 NULL): the others are unknown to it */
};

struct cli_flag {
	const char *name;    /* "--layers" */
	const char *value;   /* the value's name in the help ("N"); NULL: a
				switch, no value */
	enum cli_type type;
	size_t at;           /* offsetof the option in the group's dst */
	const char *help;    /* the help, lines separated by "\n" (a first
				"\n": it starts below the flag); NULL: the
				flag has no line of its own (the command's
				text names it) */
	const char *(*help_fn)(void); /* instead of help: made when printed, for
					 lists that come from a table */
	const char *section; /* a heading printed before its line, or NULL */
	bool join;           /* named on the line of the flag before it
				("--batch B --seq T") */
	bool optional;       /* the value may be left out: taken unless the
				next argument starts with "--" */
	unsigned given;      /* ORed into the group's *given when parsed */
	/* CLI_INT: the range, and the message (a format given the value) a
	 * value outside it gets; a usage error (" (see ferry CMD --help)")
	 * when usage is set */
	int min, max;
	const char *range;
	bool usage;
	cli_parse_fn *parse; /* CLI_CUSTOM */
};

/* A flag's option in dst: (type *)CLI_AT(f, dst). */
#define CLI_AT(f, dst) ((char *)(dst) + (f)->at)

/* What ferry_cli_parse does with an argument that is not a known flag (a file,
 * a policy): 0 to go on, else the exit code after a message. */
typedef int (*cli_arg_fn)(const char *cmd, const char *arg, void *ctx);

/* A cli_arg_fn for commands that take no arguments but flags: "unexpected
 * argument 'ARG'", a usage error. */
int ferry_cli_unexpected(const char *cmd, const char *arg, void *ctx);

struct cli_command {
	const char *cmd;             /* "train" */
	const struct cli_group *groups; /* ending with { NULL } */
	bool files;                  /* "--" and every argument after it go to
					arg, flags or not */
	cli_arg_fn arg;              /* NULL: "unknown flag 'ARG'" */
	void *ctx;                   /* arg's */
};

/* argv (argv[0] the command) into the groups' options: 0; CLI_HELP at
 * --help or -h (nothing after it parsed: the caller prints the help); else
 * the exit code after a message (2 for a usage error). */
#define CLI_HELP (-1)
int ferry_cli_parse(const struct cli_command *c, int argc, char **argv);
/* The names of the groups' flags nearest to an unknown one, as "; did you
 * mean --x?" or "; did you mean --x, --y or --z?" (empty when none is
 * near) into buf; leading dashes are ignored (commands are matched too). */
void ferry_cli_suggest(const struct cli_group *groups, const char *unknown, char *buf, size_t n);

/* The flag lines of a table: "  --name VALUE" and the help at column col
 * (two spaces further when the name is longer), each section's heading
 * first. */
void ferry_cli_help(FILE *out, const struct cli_flag *flags, int col);

#endif
