/* ferry data: text files -> token shards for training (byte-level, or
 * with a Hugging Face tokenizer). */
#include "cli_args.h"
#include "commands.h"
#include "interrupt.h"
#include "ferry/data.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FORTUNE_DIR "/usr/share/games/fortunes"
#define LICENSE_DIR "/usr/share/common-licenses"

/* What ferry data was asked for: the options, the files. */
struct data_args {
	struct ferry_data_opts opts;
	unsigned sep_given;  /* given bits: 1 --doc-sep, 2 --out */
	const char *tokenizer;
	const char **args;   /* the files */
	int n_args;
	bool rest;           /* after "--": every argument a file */
	bool demo;           /* --demo: the demo corpus, asked for by name */
	bool chat;           /* --chat: conversations, version-3 shards */
	bool render;         /* --render: print each conversation's rendering */
	bool gen_prompt;     /* --generation-prompt: renderings end with it */
};

static cli_parse_fn set_string, set_val_fraction, set_shard_tokens;

#define AT(field) offsetof(struct data_args, field)
static const struct cli_flag data_flags[] = {
	{ .name = "--out", .value = "PREFIX", .type = CLI_CUSTOM, .at = AT(opts.out_prefix),
	  .help = "output prefix, needed with FILEs (the demo corpus's\nis data/demo); its directory is created if needed",
	  .parse = set_string, .given = 2 },
	{ .name = "--demo", .type = CLI_TRUE, .at = AT(demo),
	  .help = "the demo corpus (below) with --out or --tokenizer,\nwhich otherwise need FILEs" },
	{ .name = "--tokenizer", .value = "PATH", .type = CLI_CUSTOM, .at = AT(tokenizer),
	  .help = "a Hugging Face tokenizer.json or a model directory\nwith one: documents start as the model expects\n"
		  "(Llama: BOS; GPT-2: <|endoftext|> before each);\nuint32 shards past 65536 ids.  Default: byte-level\n"
		  "(every byte a token)",
	  .parse = set_string },
	{ .name = "--text-field", .value = "NAME", .type = CLI_CUSTOM, .at = AT(opts.text_field),
	  .help = "the JSON Lines field holding the text (default text)", .parse = set_string },
	{ .name = "--threads", .value = "N", .type = CLI_THREADS, .at = AT(opts.threads),
	  .help = "encoding threads (default 0: all cores); the same\nshards for any N" },
	{ .name = "--doc-sep", .value = "LINE", .type = CLI_CUSTOM, .at = AT(opts.doc_sep),
	  .help = "a line equal to LINE separates documents (default:\none document per file)",
	  .parse = set_string,
	  .given = 1 },
	{ .name = "--val-fraction", .value = "F", .type = CLI_CUSTOM, .at = 0,
	  .help = "every round(1/F)-th document goes to val (default\n0.05; 0 for no val split)",
	  .parse = set_val_fraction },
	{ .name = "--chat", .type = CLI_TRUE, .at = AT(chat),
	  .help = "FILEs are JSON Lines conversations ({\"messages\": [...]}\nor {\"prompt\", \"completion\"}): rendered by\n"
		  "--tokenizer's chat template, targets the assistant's\ntokens only (shard version 3, docs/data.md)" },
	{ .name = "--render", .type = CLI_TRUE, .at = AT(render),
	  .help = "with --chat: print each conversation as the template\nrenders it (each followed by a NUL byte), write\nnothing" },
	{ .name = "--generation-prompt", .type = CLI_TRUE, .at = AT(gen_prompt),
	  .help = "with --render: add_generation_prompt on" },
	{ .name = "--shard-tokens", .value = "N", .type = CLI_CUSTOM,
	  .help = "at most N tokens per shard (default 100000000)",
	  .parse = set_shard_tokens },
	{ NULL },
};
#undef AT

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ferry data [--out PREFIX] [--tokenizer PATH] [--text-field NAME]\n"
		"                  [--doc-sep LINE] [--val-fraction F] [--shard-tokens N]\n"
		"                  [--threads N] [--demo | FILE...]\n"
		"       ferry data --chat --tokenizer DIR --out PREFIX FILE...\n"
		"\n"
		"Converts text files into token shards (llm.c format, docs/data.md):\n"
		"PREFIX_train_000000.bin ... and PREFIX_val_000000.bin ...  FILEs may be\n"
		"plain text or JSON Lines (.jsonl, .json: one document per record), either\n"
		"gzip- (.gz) or Zstandard-compressed (.zst).\n"
		"\n");
	ferry_cli_help(out, data_flags, 22);
	fprintf(out,
		"\n"
		"Without FILE (and without --out and --tokenizer, or with --demo), uses\n"
		"the demo corpus: the fortune files in\n"
		FORTUNE_DIR " (Debian package \"fortunes\") with\n"
		"--doc-sep %%, or the licenses in " LICENSE_DIR " if those are\n"
		"missing.\n");
}

/* mkdir -p of the directory part of prefix ("data/demo" -> "data"). */
static int make_parent_dirs(const char *prefix)
{
	char dir[PATH_MAX];
	char *slash, *p;
	size_t len = strlen(prefix);

	if (len >= sizeof(dir)) {
		fprintf(stderr, "ferry data: output prefix is too long\n");
		return -1;
	}
	memcpy(dir, prefix, len + 1);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (p = dir + 1; ; p++) {
		char c = *p;

		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
			fprintf(stderr, "ferry data: cannot create directory %s: %s\n",
				dir, strerror(errno));
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_list(char **list, int n)
{
	int i;

	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/*
 * Regular files (not symlinks) directly in dir, sorted; with no_ext, only
 * names without a '.' (fortunes: skips the .dat indexes and .u8 links).
 * Returns the count (0 when the directory is missing or empty), -1 on error.
 */
static int list_dir(const char *dir, int no_ext, char ***out)
{
	char **list = NULL, **grown;
	int n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	*out = NULL;
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL) {
		char path[PATH_MAX];
		struct stat sb;
		int len;

		if (de->d_name[0] == '.')
			continue;
		if (no_ext && strchr(de->d_name, '.'))
			continue;
		len = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (len < 0 || (size_t)len >= sizeof(path))
			continue;
		if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			grown = realloc(list, (size_t)cap * sizeof(*list));
			if (!grown)
				goto nomem;
			list = grown;
		}
		list[n] = strdup(path);
		if (!list[n])
			goto nomem;
		n++;
	}
	closedir(d);
	if (n)
		qsort(list, (size_t)n, sizeof(*list), cmp_str);
	*out = list;
	return n;
nomem:
	closedir(d);
	free_list(list, n);
	fprintf(stderr, "ferry data: out of memory listing %s\n", dir);
	return -1;
}

static int parse_double(const char *flag, const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (errno || end == s || *end) {
		fprintf(stderr, "ferry data: %s: '%s' is not a number\n", flag, s);
		return -1;
	}
	return 0;
}

static int parse_long(const char *flag, const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	if (errno || end == s || *end) {
		fprintf(stderr, "ferry data: %s: '%s' is not an integer\n", flag,
			s);
		return -1;
	}
	return 0;
}

static void print_files(const char *prefix, const char *split, int n)
{
	int i;

	for (i = 0; i < n; i++)
		printf("  wrote %s_%s_%06d.bin\n", prefix, split, i);
}

/* The value of data's flag at argv[i] into *v: 0, or -1 after a message. */
static int data_value(int argc, char **argv, int i, const char **v)
{
	if (i + 1 >= argc) {
		fprintf(stderr, "ferry data: %s needs a value\n", argv[i]);
		fprintf(stderr, "try 'ferry data --help'\n");
		return -1;
	}
	*v = argv[i + 1];
	return 0;
}

static int set_string(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	(void)cmd;
	return data_value(argc, argv, i, (const char **)CLI_AT(f, dst)) ? -1 : 2;
}

static int set_val_fraction(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_data_opts *opts = &((struct data_args *)dst)->opts;
	const char *value;

	(void)f, (void)cmd;
	if (data_value(argc, argv, i, &value) || parse_double(argv[i], value, &opts->val_fraction))
		return -1;
	if (!(opts->val_fraction >= 0.0 && opts->val_fraction <= 1.0)) {
		fprintf(stderr, "ferry data: --val-fraction must be in [0, 1], got %s\n", value);
		return -1;
	}
	return 2;
}

static int set_shard_tokens(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_data_opts *opts = &((struct data_args *)dst)->opts;
	const char *value;

	(void)f, (void)cmd;
	if (data_value(argc, argv, i, &value) || parse_long(argv[i], value, &opts->shard_tokens))
		return -1;
	if (opts->shard_tokens <= 0 || opts->shard_tokens > INT_MAX) {
		fprintf(stderr, "ferry data: --shard-tokens must be in [1, %d], got %s\n", INT_MAX, value);
		return -1;
	}
	return 2;
}

/* A FILE (every argument after the first "--"). */
static int file_arg(const char *cmd, const char *arg, void *ctx)
{
	struct data_args *d = ctx;

	(void)cmd;
	if (!d->rest && !strcmp(arg, "--"))
		d->rest = true;
	else
		d->args[d->n_args++] = arg;
	return 0;
}

/* Flags into d->opts, files into d->args; flags and files may be mixed,
 * and after "--" everything is a file.  0, 1 after --help, or -1 after a
 * message. */
static int parse_data_args(int argc, char **argv, struct data_args *d)
{
	const struct cli_group groups[] = { { data_flags, d, &d->sep_given, NULL }, { NULL } };
	int rc = ferry_cli_parse(&(struct cli_command){ .cmd = "data", .groups = groups, .files = true, .arg = file_arg, .ctx = d }, argc, argv);

	if (rc == CLI_HELP) {
		usage(stdout);
		return 1;
	}
	if (rc)
		return -1;
	if (!*d->opts.out_prefix) {
		fprintf(stderr, "ferry data: --out must not be empty\n");
		return -1;
	}
	return 0;
}

/* The demo corpus into *demo: the fortune files (documents separated by
 * "%" unless --doc-sep was given), or else the licenses.  Returns their
 * count, or -1 after a message. */
static int demo_corpus(struct ferry_data_opts *opts, int sep_given,
		       char ***demo)
{
	int n = list_dir(FORTUNE_DIR, 1, demo);

	if (n < 0)
		return -1;
	if (n > 0) {
		if (!sep_given)
			opts->doc_sep = "%";
		printf("ferry data: demo corpus: %d fortune files in %s\n",
		       n, FORTUNE_DIR);
		return n;
	}
	n = list_dir(LICENSE_DIR, 0, demo);
	if (n < 0)
		return -1;
	if (n == 0) {
		fprintf(stderr,
			"ferry data: no FILE given and no demo corpus: neither %s nor %s has files (apt-get install fortunes)\n",
			FORTUNE_DIR, LICENSE_DIR);
		return -1;
	}
	printf("ferry data: %s not found (apt-get install fortunes); using the %d licenses in %s instead, one document per file\n",
	       FORTUNE_DIR, n, LICENSE_DIR);
	return n;
}

static void print_stats(const char *prefix, int n_files,
			const struct ferry_data_stats *stats)
{
	printf("ferry data: %ld documents from %d file%s\n", stats->documents,
	       n_files, n_files == 1 ? "" : "s");
	printf("  train: %ld tokens in %d shard%s\n", stats->train_tokens,
	       stats->train_shards, stats->train_shards == 1 ? "" : "s");
	printf("  val:   %ld tokens in %d shard%s\n", stats->val_tokens,
	       stats->val_shards, stats->val_shards == 1 ? "" : "s");
	print_files(prefix, "train", stats->train_shards);
	print_files(prefix, "val", stats->val_shards);
}

/* Every 64 MiB: small inputs stay quiet. */
static void progress(void *ctx, long documents, long long bytes)
{
	(void)ctx;
	if (bytes >= (64ll << 20))
		fprintf(stderr, "ferry data: %.1f MiB read, %ld documents\n", (double)bytes / (1 << 20),
			documents);
}

/* SIGINT, SIGTERM: the writer stops at its next buffer (interrupt.h). */
static int stop_requested(void *ctx)
{
	(void)ctx;
	return interrupt_poll();
}

/* The tokenizer of --tokenizer into opts, described; 0 or -1 after a
 * message. */
static int open_tokenizer(const char *path, struct ferry_data_opts *opts)
{
	ferry_tokenizer_t tok = NULL;
	int vocab;

	if (ferry_tokenizer_open(path, &tok) != FERRY_OK) {
		fprintf(stderr, "ferry data: --tokenizer: %s\n", ferry_last_error());
		return -1;
	}
	opts->tokenizer = tok;
	vocab = ferry_tokenizer_vocab(tok);
	printf("ferry data: tokenizer %s: %d ids (shards of %s tokens), BOS %d, EOS %d\n", path, vocab,
	       vocab > 65536 ? "uint32" : "uint16", ferry_tokenizer_bos(tok), ferry_tokenizer_eos(tok));
	return 0;
}

/* The files to read: those given, else the demo corpus (byte-level only,
 * into data/demo unless --out says otherwise).  Their count, or -1 after a
 * message. */
static int input_files(struct data_args *d, const char *const **files, char ***demo)
{
	bool out_given = d->sep_given & 2;
	int n;

	if (d->n_args && (d->demo || !out_given)) {
		fprintf(stderr, d->demo ? "ferry data: --demo reads the demo corpus, not FILEs: give one or the other\n" :
			"ferry data: FILEs need --out PREFIX (data/demo is the demo corpus's)\n");
		return -1;
	}
	*files = d->args;
	if (d->n_args)
		return d->n_args;
	/* an empty glob or variable in a script: not the demo unless asked */
	if ((out_given || d->tokenizer) && !d->demo) {
		fprintf(stderr, "ferry data: %s but no FILE to read (--demo for the demo corpus)\n",
			out_given ? "--out given" : "--tokenizer given");
		return -1;
	}
	if (d->tokenizer && !out_given) {
		fprintf(stderr, "ferry data: the demo corpus with --tokenizer needs --out PREFIX "
			"(data/demo holds its byte-level shards)\n");
		return -1;
	}
	n = demo_corpus(&d->opts, d->sep_given & 1, demo);
	*files = (const char *const *)*demo;
	return n;
}

static void print_rendering(void *ctx, const char *text, size_t len)
{
	(void)ctx;
	fwrite(text, 1, len, stdout);
	fputc('\0', stdout);
}

/* --chat: conversations through --tokenizer's template.  0 or 1 after a
 * message. */
static int data_chat(struct data_args *d, const char *const *files, int n_files)
{
	struct ferry_data_opts *opts = &d->opts;
	struct ferry_data_stats stats;
	ferry_chat_t chat = NULL;
	ferry_status st;

	if (!d->tokenizer) {
		fprintf(stderr, "ferry data: --chat needs --tokenizer DIR (the template and the tokenizer)\n");
		return 1;
	}
	if (ferry_chat_open(d->tokenizer, &chat) != FERRY_OK) {
		fprintf(stderr, "ferry data: --chat: %s\n", ferry_last_error());
		return 1;
	}
	if (d->render) {
		st = ferry_chat_each(files, n_files, chat, d->gen_prompt, print_rendering, NULL);
		ferry_chat_free(chat);
		if (st)
			fprintf(stderr, "ferry data: %s\n", ferry_last_error());
		return st ? 1 : 0;
	}
	if (ferry_tokenizer_open(d->tokenizer, &opts->tokenizer) != FERRY_OK) {
		fprintf(stderr, "ferry data: --tokenizer: %s\n", ferry_last_error());
		ferry_chat_free(chat);
		return 1;
	}
	printf("ferry data: tokenizer %s: %d ids, its chat template (shard version 3: uint32 ids, a flags byte each)\n",
	       d->tokenizer, ferry_tokenizer_vocab(opts->tokenizer));
	if (make_parent_dirs(opts->out_prefix)) {
		ferry_chat_free(chat);
		return 1;
	}
	interrupt_install();
	interrupt_defer();
	st = ferry_data_from_chat(files, n_files, opts, chat, &stats);
	interrupt_restore();
	ferry_chat_free(chat);
	if (st && interrupt_signal()) {
		fprintf(stderr, "ferry data: stopped by %s; its temporaries removed, %s's shards as they were\n",
			interrupt_name(interrupt_signal()), opts->out_prefix);
		return 128 + interrupt_signal();
	}
	if (st) {
		fprintf(stderr, "ferry data: %s (nothing written)\n", ferry_last_error());
		return 1;
	}
	printf("ferry data: %ld conversations (shard version 3: the assistant's tokens are the targets)\n",
	       stats.documents);
	print_stats(opts->out_prefix, n_files, &stats);
	return 0;
}

int cmd_data(int argc, char **argv)
{
	struct data_args d = { .opts = {
		.out_prefix = "data/demo",
		.doc_sep = NULL,
		.val_fraction = 0.05,
		.shard_tokens = 100000000,
		.progress = progress,
		.stop = stop_requested,
	} };
	struct ferry_data_opts *opts = &d.opts;
	struct ferry_data_stats stats;
	int n_files = 0, rc = 2, parsed;
	const char *const *files;
	char **demo = NULL;

	d.args = malloc((size_t)(argc > 0 ? argc : 1) * sizeof(*d.args));
	if (!d.args) {
		fprintf(stderr, "ferry data: out of memory\n");
		return 1;
	}
	parsed = parse_data_args(argc, argv, &d);
	if (parsed) {
		rc = parsed > 0 ? 0 : 2;
		goto out;
	}
	rc = 1;
	if ((d.render || d.gen_prompt) && !d.chat) {
		fprintf(stderr, "ferry data: --render and --generation-prompt go with --chat\n");
		goto out;
	}
	if (d.chat) {
		if (!d.n_args || (!(d.sep_given & 2) && !d.render)) {
			fprintf(stderr, "ferry data: --chat needs FILEs and --out PREFIX\n");
			goto out;
		}
		if ((d.sep_given & 1) || d.opts.text_field) {
			fprintf(stderr, "ferry data: --chat reads whole conversations: --doc-sep and --text-field do not apply\n");
			goto out;
		}
		rc = data_chat(&d, d.args, d.n_args);
		goto out;
	}
	n_files = input_files(&d, &files, &demo);
	if (n_files < 0 || (d.tokenizer && open_tokenizer(d.tokenizer, opts)))
		goto out;
	if (make_parent_dirs(opts->out_prefix))
		goto out;
	interrupt_install();
	interrupt_defer();
	if (ferry_data_from_text(files, n_files, opts, &stats) != FERRY_OK) {
		int sig = interrupt_signal();

		interrupt_restore();
		if (!sig) {
			fprintf(stderr, "ferry data: %s\n", ferry_last_error());
			goto out;
		}
		fprintf(stderr, "ferry data: stopped by %s; its temporaries removed, %s's shards as they were\n",
			interrupt_name(sig), opts->out_prefix);
		rc = 128 + sig;
		goto out;
	}
	interrupt_restore();
	print_stats(opts->out_prefix, n_files, &stats);
	if (opts->val_fraction > 0 && stats.val_shards == 0)
		fprintf(stderr, "ferry data: warning: no document went to validation (%ld document%s; every "
			"round(1/F)-th does): give more files, or split them with --doc-sep or JSON Lines\n",
			stats.documents, stats.documents == 1 ? "" : "s");
	rc = 0;
out:
	ferry_tokenizer_free(opts->tokenizer);
	free_list(demo, demo && n_files > 0 ? n_files : 0);
	free(d.args);
	return rc;
}
