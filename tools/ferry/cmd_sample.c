/* ferry sample: text from a checkpoint, after a prompt. */
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "generate.h"
#include "interrupt.h"
#include "sample_chat.h"
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/platform.h"
#include "ferry/train.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const CMD = "sample";

struct sample_cli {
	const char *ckpt, *prompt, *prompt_tokens, *tokenizer, *backend;
	char hf_tokenizer[4096]; /* the checkpoint's own tokenizer (checkpoint_tokenizer) */
	struct ferry_backend_opts bo;
	struct ferry_sample_opts so;
	int tokens, context;
	uint64_t seed;
	bool chat;
	struct sample_chat sc;
};

#define AT(field) offsetof(struct sample_cli, field)
static const struct cli_flag sample_flags[] = {
	{ .name = "--checkpoint", .value = "PATH", .type = CLI_STRING, .at = AT(ckpt) },
	{ .name = "--prompt", .value = "TEXT", .type = CLI_STRING, .at = AT(prompt),
	  .help = "the text to continue, as the start of a document, as\n"
	  "`ferry data` starts one (after an end-of-text token, or\n"
	  "Llama's BOS); encoded by the tokenizer (bytes without one)" },
	{ .name = "--prompt-tokens", .value = "IDS", .type = CLI_STRING, .at = AT(prompt_tokens),
	  .help = "the prompt as token ids, e.g. 15496,11,995, used as given\n"
	  "(llm.c's tokenizer file decodes but cannot encode: with it\n"
	  "take the ids from the model's own tokenizer)\n"
	  "(neither: start from the end-of-text token)" },
	{ .name = "--chat", .type = CLI_TRUE, .at = AT(chat),
	  .help = "a conversation rendered by the tokenizer's chat template\n"
	  "with its generation prompt (--prompt: the user's turn);\n"
	  "prints the assistant's reply, stopping at the end-of-turn\n"
	  "token (generation_config.json's eos_token_id, else\n"
	  "tokenizer_config.json's eos_token)" },
	{ .name = "--system", .value = "TEXT", .type = CLI_STRING, .at = AT(sc.system),
	  .help = "with --chat: a system message before the user's turn" },
	{ .name = "--messages", .value = "FILE", .type = CLI_STRING, .at = AT(sc.messages),
	  .help = "with --chat: the conversation so far, a JSON list of\n"
	  "{\"role\", \"content\"} messages (instead of --system,\n--prompt)" },
	{ .name = "--tokens", .value = "N", .type = CLI_INT, .at = AT(tokens),
	  .help = "tokens to draw (default 256)" },
	{ .name = "--temperature", .value = "T", .type = CLI_FLOAT, .at = AT(so.temperature),
	  .help = "1 (default) draws from the model's probabilities; below 1\n"
	  "sharper, above 1 flatter; 0 always takes the most\n"
	  "probable token" },
	{ .name = "--top-k", .value = "K", .type = CLI_INT, .at = AT(so.top_k),
	  .help = "draw among the K most probable tokens only (default 0: all)" },
	{ .name = "--seed", .value = "S", .type = CLI_U64, .at = AT(seed),
	  .help = "the draws' seed (default 1337): same seed, same text" },
	{ .name = "--context", .value = "N", .type = CLI_INT, .at = AT(context),
	  .help = "tokens the model sees, the last N (default: the sequence\n"
	  "length it was trained at, from its training state when\n"
	  "there is one, else its maximum: positions it never\n"
	  "trained on make gibberish)" },
	{ .name = "--tokenizer", .value = "PATH", .type = CLI_STRING, .at = AT(tokenizer),
	  .help = "a Hugging Face tokenizer.json (or a directory with one),\n"
	  "or llm.c's tokenizer file (gpt2_tokenizer.bin); default: the\n"
	  "one the checkpoint carries (its directory's tokenizer.json,\n"
	  "an llm.c FILE's FILE.tokenizer), else bytes" },
	{ .name = "--backend", .value = "NAME", .type = CLI_STRING, .at = AT(backend),
	  .help = "auto (default: $FERRY_BACKEND, else cuda if a GPU is found,\n"
	  "else cpu), cpu or cuda" },
	{ .name = "--threads", .value = "N", .type = CLI_THREADS, .at = AT(bo.threads),
	  .help = "CPU threads (default: all cores)" },
	{ .name = "--device-mem", .value = "SIZE", .type = CLI_SIZE, .at = AT(bo.device_mem),
	  .help = "device memory capacity, e.g. 2G (default: all)" },
	{ NULL },
};
#undef AT

static void usage(void)
{
	printf("usage: ferry sample --checkpoint PATH [--prompt TEXT | --prompt-tokens IDS] [--tokens N]\n"
	       "       ferry sample --checkpoint PATH --chat [--system TEXT] [--prompt TEXT | --messages FILE]\n"
	       "                    [--temperature T] [--top-k K] [--seed S] [--context N]\n"
	       "                    [--tokenizer PATH]\n"
	       "                    [--backend NAME] [--threads N] [--device-mem SIZE]\n"
	       "\n"
	       "Prints the prompt, then N tokens drawn from the model one after the other, on\n"
	       "standard output as they come (Ctrl-C stops).  PATH is what `ferry train --save`\n"
	       "wrote or any checkpoint `ferry eval` reads (an llm.c GPT-2 file, a Hugging Face\n"
	       "Llama directory).\n"
	       "\n");
	ferry_cli_help(stdout, sample_flags, 24);
	printf("\n"
	       "  ferry sample --checkpoint model.bin --prompt 'The ' --tokens 200 --temperature 0.8\n");
}

/* 1 after --help, 2 after a usage error, else 0. */
static int parse(int argc, char **argv, struct sample_cli *c)
{
	const struct cli_group groups[] = { { sample_flags, c, NULL, NULL }, { NULL } };
	int rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups }, argc, argv);

	if (rc == CLI_HELP)
		usage();
	if (rc)
		return rc == CLI_HELP ? 1 : rc;
	if (!c->ckpt)
		return ferry_cli_usage_error(CMD, "--checkpoint is required");
	if (c->prompt && c->prompt_tokens)
		return ferry_cli_usage_error(CMD, "--prompt and --prompt-tokens are exclusive");
	if ((c->sc.system || c->sc.messages) && !c->chat)
		return ferry_cli_usage_error(CMD, "--system and --messages go with --chat");
	if (c->chat && (c->prompt_tokens || (c->sc.messages && (c->prompt || c->sc.system))))
		return ferry_cli_usage_error(CMD, "--chat takes --messages FILE or --system/--prompt, not --prompt-tokens");
	c->sc.prompt = c->prompt;
	if (c->tokens < 0 || c->tokens > 1000000)
		return ferry_cli_usage_error(CMD, "--tokens %d: between 0 and 1000000", c->tokens);
	if (!(c->so.temperature >= 0))
		return ferry_cli_usage_error(CMD, "--temperature must not be negative");
	if (c->so.top_k < 0)
		return ferry_cli_usage_error(CMD, "--top-k must not be negative (0: all tokens)");
	if (c->context < 0)
		return ferry_cli_usage_error(CMD, "--context must be positive");
	return 0;
}

/* "12,5,7" into ids[]; returns the count, or -1 after a message. */
static int parse_ids(const char *s, int vocab, int32_t *ids, int cap)
{
	int n = 0;

	while (*s) {
		char *end;
		long v;

		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || end == s || (*end && *end != ',') || v < 0 || v >= vocab || n >= cap) {
			fprintf(stderr, "ferry sample: --prompt-tokens: token %d ('%.*s') is not an id below the "
				"model's vocabulary of %d\n", n + 1, (int)strcspn(s, ","), s, vocab);
			return -1;
		}
		ids[n++] = (int32_t)v;
		s = *end ? end + 1 : end;
	}
	return n;
}

/* A Hugging Face tokenizer's prompt, started as ferry data starts a
 * document: the post-processor's tokens (Llama's BOS) when it adds some,
 * else the end-of-text token (GPT-2's).  Returns the count, or -1. */
static int encode_prompt(struct sample_cli *c, ferry_tokenizer_t tok, int vocab, int32_t *seq, int cap)
{
	struct ferry_token_buf start = { 0 }, b = { 0 };
	const char *text = c->prompt ? c->prompt : "";
	int n = -1;

	if (ferry_tokenizer_encode(tok, "", 0, FERRY_TOK_ADD_SPECIAL, &start) != FERRY_OK ||
	    ferry_tokenizer_encode(tok, text, strlen(text), 0, &b) != FERRY_OK) {
		ferry_cli_fail(CMD);
		goto out;
	}
	if (start.n == 0 && ferry_tokenizer_eot(tok) >= 0)
		seq[start.n++] = ferry_tokenizer_eot(tok); /* start.ids stays NULL */
	else if (start.n)
		memcpy(seq, start.ids, start.n * sizeof(int32_t));
	if (start.n + b.n > (size_t)cap) {
		fprintf(stderr, "ferry sample: --prompt is too long\n");
		goto out;
	}
	memcpy(seq + start.n, b.ids, b.n * sizeof(int32_t));
	n = (int)(start.n + b.n);
	for (int i = 0; i < n; i++)
		if (seq[i] >= vocab) {
			fprintf(stderr, "ferry sample: --prompt: token %d of the tokenizer is outside the model's "
				"vocabulary of %d\n", seq[i], vocab);
			n = -1;
			break;
		}
out:
	ferry_token_buf_free(&start);
	ferry_token_buf_free(&b);
	return n;
}

/* The prompt as tokens into seq (room for cap): the ids given, or the
 * start of a document and the text's tokens (its bytes for a byte-level
 * model), or the start alone.  Returns the count, or -1 after a message. */
static int prompt_tokens(struct sample_cli *c, ferry_tokenizer_t tok, int vocab, int32_t *seq, int cap)
{
	int eot = ferry_tokenizer_eot(tok), n = 0;

	if (c->prompt_tokens)
		return parse_ids(c->prompt_tokens, vocab, seq, cap);
	if (c->tokenizer && ferry_tokenizer_can_encode(tok))
		return encode_prompt(c, tok, vocab, seq, cap);
	seq[n++] = eot < vocab ? eot : 0;
	if (!c->prompt)
		return n;
	if (c->tokenizer) {
		fprintf(stderr, "ferry sample: --prompt needs a byte-level model: %s (llm.c's tokenizer file) holds "
			"each token's bytes but not the merge rules that encoding text needs; give the prompt "
			"as ids with --prompt-tokens\n", c->tokenizer);
		return -1;
	}
	for (const unsigned char *p = (const unsigned char *)c->prompt; *p; p++) {
		if (*p >= vocab) {
			fprintf(stderr, "ferry sample: --prompt: byte 0x%02x is outside the model's vocabulary of %d "
				"(not a byte-level model: give --prompt-tokens)\n", *p, vocab);
			return -1;
		}
		seq[n++] = *p;
	}
	return n;
}

/* How many tokens the model sees: --context, else the sequence length of
 * the run that saved it (its training state says, when next to it), else
 * its maximum; never more than its maximum.  *why says which. */
static int context_len(const struct sample_cli *c, const struct ferry_model_config *cfg, const char **why)
{
	static struct ferry_train_state st;
	char sp[4096];
	int n = cfg->max_seq;

	*why = "the model's maximum";
	if (c->context) {
		n = c->context;
		*why = "--context";
	} else if (ferry_checkpoint_state_path(c->ckpt, ferry_checkpoint_is_hf(c->ckpt), sp, sizeof(sp)) == FERRY_OK &&
		   access(sp, F_OK) == 0 && ferry_state_read_info(sp, &st) == FERRY_OK && st.T > 0) {
		n = st.T;
		*why = "the sequence length it was trained at";
	}
	return n < cfg->max_seq ? n : cfg->max_seq;
}

/* The checkpoint's model on a backend, seeing up to T tokens. */
static int load(const struct sample_cli *c, int T, ferry_backend_t *be, ferry_model_t *m)
{
	struct ferry_model_config cfg;
	const char *backend = c->backend;
	float *params = NULL;
	int rc = 1;

	if (!strcmp(backend, "auto"))
		backend = ferry_cli_auto_backend();
	if (ferry_checkpoint_any_read_config(c->ckpt, &cfg) != FERRY_OK ||
	    ferry_backend_open(backend, &c->bo, be) != FERRY_OK ||
	    ferry_model_create(*be, &cfg, 1, T, NULL, m) != FERRY_OK)
		return ferry_cli_fail(CMD);
	params = malloc(ferry_model_num_params(*m) * sizeof(float));
	if (!params)
		fprintf(stderr, "ferry sample: out of memory for %zu parameters\n", ferry_model_num_params(*m));
	else if (ferry_checkpoint_any_read(c->ckpt, &cfg, params, ferry_model_num_params(*m)) != FERRY_OK ||
		 ferry_model_set_params(*m, params) != FERRY_OK)
		ferry_cli_fail(CMD);
	else
		rc = 0;
	free(params);
	return rc;
}

/* The prompt into seq (allocated), checked against the model; the
 * tokenizer that prints them. */
static int prepare(struct sample_cli *c, const struct ferry_model_config *cfg, ferry_tokenizer_t *tok,
		   int32_t **seq, int *len)
{
	size_t cap = (c->prompt ? strlen(c->prompt) : 0) + (c->prompt_tokens ? strlen(c->prompt_tokens) : 0) + 1 +
		     (size_t)c->tokens + 64;
	const char *path = c->tokenizer;

	/* the tokenizer the checkpoint carries (ferry train --save), unless
	 * --tokenizer says */
	if (!path && checkpoint_tokenizer(c->ckpt, c->hf_tokenizer, sizeof(c->hf_tokenizer)))
		path = c->tokenizer = c->hf_tokenizer;
	if (ferry_tokenizer_open(path, tok) != FERRY_OK)
		return ferry_cli_fail(CMD);
	if (!path && cfg->vocab > FERRY_BYTE_VOCAB) {
		fprintf(stderr, "ferry sample: the model's vocabulary has %d tokens, not bytes (%d): give "
			"--tokenizer PATH (a tokenizer.json, or llm.c's gpt2_tokenizer.bin) to print them\n",
			cfg->vocab, FERRY_BYTE_VOCAB);
		return 1;
	}
	if (c->chat)
		return sample_chat_prompt(&c->sc, path, *tok, cfg->vocab, c->tokens, seq, len);
	*seq = malloc(cap * sizeof(int32_t));
	if (!*seq) {
		fprintf(stderr, "ferry sample: out of memory\n");
		return 1;
	}
	*len = prompt_tokens(c, *tok, cfg->vocab, *seq, (int)cap);
	if (*len < 0)
		return 2;
	if (*len == 0) {
		fprintf(stderr, "ferry sample: --prompt-tokens is empty\n");
		return 2;
	}
	return 0;
}

/* Prompt and continuation on stdout; what was asked for on stderr. */
static int run(const struct sample_cli *c, ferry_model_t m, ferry_tokenizer_t tok, int32_t *seq, int len,
	       int context, const char *why)
{
	const struct ferry_model_config *cfg = ferry_model_config(m);
	uint64_t rng = c->seed;
	int rc, start = len;
	char k[16] = "all", window[160];

	if (c->so.top_k)
		snprintf(k, sizeof(k), "%d", c->so.top_k);
	/* the window: what this sample needs when that is less than the limit */
	if (ferry_model_max_seq_len(m) < context)
		snprintf(window, sizeof(window), "%d (what the prompt and tokens need; at most %d: %s)",
			 ferry_model_max_seq_len(m), context, why);
	else
		snprintf(window, sizeof(window), "%d (%s)", context, why);
	fprintf(stderr, "ferry sample: %s: %s, %d layers, %d channels, vocab %d; %d tokens after a prompt of %d, "
		"temperature %.2f, top-k %s, seed %llu, context %s\n", c->ckpt, cfg->arch, cfg->layers,
		cfg->channels, cfg->vocab, c->tokens, len, c->so.temperature, k, (unsigned long long)c->seed,
		window);
	if (c->prompt && !c->prompt_tokens && !c->chat) /* as given: a token's print may differ (SentencePiece's space) */
		fputs(c->prompt, stdout);
	for (int i = c->prompt_tokens ? 0 : len; i < len; i++)
		generate_print_token(tok, seq[i], stdout);
	fflush(stdout);
	interrupt_install();
	interrupt_defer();
	if (c->chat) {
		bool stopped;

		rc = generate_until(CMD, m, tok, seq, &len, c->tokens, &c->so, &rng, c->sc.stop, c->sc.n_stop,
				    &stopped, stdout);
		if (!rc && stopped)
			fprintf(stderr, "ferry sample: the reply ended at token %d after %d tokens (the end of the "
				"turn: %s)\n", seq[len - 1], len - start - 1, c->sc.stop_from);
		else if (!rc && !interrupt_signal())
			fprintf(stderr, "ferry sample: the reply did not end within %d tokens%s\n", c->tokens,
				c->sc.n_stop ? "" : " (no end-of-turn token known: no generation_config.json "
				"eos_token_id nor tokenizer_config.json eos_token)");
	} else {
		rc = generate(CMD, m, tok, seq, &len, c->tokens, &c->so, &rng, stdout);
	}
	interrupt_restore();
	printf("\n");
	if (!rc && interrupt_signal()) {
		fprintf(stderr, "ferry sample: stopped by %s after %d of %d tokens\n",
			interrupt_name(interrupt_signal()), len - start, c->tokens);
		return 128 + interrupt_signal();
	}
	return rc;
}

int cmd_sample(int argc, char **argv)
{
	struct sample_cli c = { .backend = "auto", .so = { 1.0f, 0 }, .tokens = 256, .seed = 1337 };
	struct ferry_model_config cfg;
	ferry_tokenizer_t tok = NULL;
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	int32_t *seq = NULL;
	int rc, len = 0, context;
	const char *why;

	rc = parse(argc, argv, &c);
	if (rc)
		return rc == 1 ? 0 : rc;
	ferry_set_threads(c.bo.threads);
	if (ferry_checkpoint_any_read_config(c.ckpt, &cfg) != FERRY_OK)
		return ferry_cli_fail(CMD);
	context = context_len(&c, &cfg, &why);
	rc = prepare(&c, &cfg, &tok, &seq, &len);
	if (!rc)
		rc = load(&c, len + c.tokens < context ? len + c.tokens : context, &be, &m);
	if (!rc)
		rc = run(&c, m, tok, seq, len, context, why);
	free(seq);
	ferry_tokenizer_free(tok);
	ferry_model_free(m);
	ferry_backend_close(be);
	return rc;
}
