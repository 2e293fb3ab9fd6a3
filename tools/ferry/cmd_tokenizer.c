/* ferry tokenizer train: learns a byte-level BPE (GPT-2 style) on the
 * user's text and writes a Hugging Face tokenizer.json. */
#include "cli_args.h"
#include "commands.h"
#include "ferry/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPECIAL 64

struct tok_args {
	struct ferry_bpe_train_opts opts;
	const char *out;
	const char *special[MAX_SPECIAL];
	const char **files;
	int n_files;
	bool rest;
};

static cli_parse_fn add_special;

#define AT(field) offsetof(struct tok_args, field)
static const struct cli_flag tok_flags[] = {
	{ .name = "--vocab", .value = "N", .type = CLI_INT, .at = AT(opts.vocab), .min = 257,
	  .max = 1 << 22, .range = "--vocab must be in [257, 4194304], not %d",
	  .help = "ids in all: the special tokens, the 256 bytes, the merges" },
	{ .name = "--out", .value = "PATH", .type = CLI_STRING, .at = AT(out),
	  .help = "the tokenizer.json to write (replaced atomically)" },
	{ .name = "--special", .value = "TOKEN", .type = CLI_CUSTOM, .parse = add_special,
	  .help = "a special token (repeatable; ids 0, 1, ... in order;\ndefault <|endoftext|>)" },
	{ .name = "--text-field", .value = "NAME", .type = CLI_STRING, .at = AT(opts.text_field),
	  .help = "the JSON Lines field holding the text (default text)" },
	{ .name = "--threads", .value = "N", .type = CLI_THREADS, .at = AT(opts.threads),
	  .help = "counting threads (default 0: all cores); the same\nfile for any N" },
	{ NULL },
};
#undef AT

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ferry tokenizer train --vocab N --out PATH [--special TOKEN]...\n"
		"                             [--text-field NAME] [--threads N] FILE...\n"
		"\n"
		"Learns a byte-level BPE as GPT-2's (its regex pre-tokenizer, 256 byte\n"
		"tokens, merges of the most frequent pair) on FILEs and writes a Hugging\n"
		"Face tokenizer.json for `ferry data --tokenizer` and `tokenizers`.  FILEs\n"
		"may be plain text (one document each) or JSON Lines (.jsonl, .json),\n"
		"either gzip- (.gz) or Zstandard-compressed (.zst).\n"
		"\n");
	ferry_cli_help(out, tok_flags, 22);
}

static int add_special(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct tok_args *a = dst;
	const char *v;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (a->opts.n_special == MAX_SPECIAL || !*v) {
		ferry_cli_error(cmd, "--special: %s", *v ? "too many special tokens" : "empty token");
		return -1;
	}
	a->special[a->opts.n_special++] = v;
	return 2;
}

static int file_arg(const char *cmd, const char *arg, void *ctx)
{
	struct tok_args *a = ctx;

	(void)cmd;
	if (!a->rest && !strcmp(arg, "--"))
		a->rest = true;
	else
		a->files[a->n_files++] = arg;
	return 0;
}

static int train(int argc, char **argv)
{
	static const char *const cmd = "tokenizer train";
	struct tok_args a = { 0 };
	const struct cli_group groups[] = { { tok_flags, &a, NULL, NULL }, { NULL } };
	struct ferry_bpe_train_stats stats;
	int rc;

	a.files = calloc((size_t)argc + 1, sizeof(*a.files));
	if (!a.files)
		return 1;
	rc = ferry_cli_parse(&(struct cli_command){ .cmd = cmd, .groups = groups, .files = true,
					      .arg = file_arg, .ctx = &a }, argc, argv);
	if (rc == CLI_HELP)
		usage(stdout);
	if (rc == CLI_HELP || rc) {
		free(a.files);
		return rc == CLI_HELP ? 0 : rc;
	}
	if (!a.opts.n_special)
		a.special[a.opts.n_special++] = "<|endoftext|>";
	a.opts.special = a.special;
	if (!a.opts.vocab || !a.out || !a.n_files)
		rc = ferry_cli_usage_error(cmd, "needs --vocab N, --out PATH and at least one FILE");
	else if (ferry_tokenizer_train(a.files, a.n_files, &a.opts, a.out, &stats))
		rc = ferry_cli_fail(cmd);
	else
		printf("ferry tokenizer train: %lld bytes, %lld words (%lld distinct): %d ids, %d merges -> %s\n",
		       stats.bytes, stats.words, stats.distinct, stats.vocab, stats.merges, a.out);
	free(a.files);
	return rc;
}

int cmd_tokenizer(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "train"))
		return train(argc - 1, argv + 1);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	return ferry_cli_usage_error("tokenizer", "the one subcommand is 'train' (ferry tokenizer train --help)");
}
