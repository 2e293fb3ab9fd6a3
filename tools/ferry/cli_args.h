/* Flag values for the CLI: strict parsing, errors that name the flag. */
#ifndef FERRY_TOOLS_CLI_ARGS_H
#define FERRY_TOOLS_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* Each returns 0 on success; on failure prints "ferry <cmd>: ..." and
 * returns -1.  `i` indexes the flag in argv; the value is argv[i+1]. */
int arg_value(const char *cmd, int argc, char **argv, int i, const char **out);
int arg_int(const char *cmd, int argc, char **argv, int i, int *out);
int arg_u64(const char *cmd, int argc, char **argv, int i, uint64_t *out);
int arg_float(const char *cmd, int argc, char **argv, int i, float *out);
/* Bytes with an optional K/M/G/T suffix (powers of 1024). */
int arg_size(const char *cmd, int argc, char **argv, int i, size_t *out);

/* Prints "ferry <cmd>: <ferry_last_error()>" and returns 1. */
int cli_fail(const char *cmd);
/* Prints a usage error and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
