#include "generate.h"
#include "cli_args.h"
#include "interrupt.h"
#include "ferry/checkpoint.h"
#include "ferry/hf_checkpoint.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void generate_print_token(ferry_tokenizer_t tok, int id, FILE *out)
{
	int n;
	const char *s = ferry_tokenizer_decode(tok, id, &n);

	if (s)
		fwrite(s, 1, (size_t)n, out);
	else if (id == ferry_tokenizer_eot(tok))
		fputs("\n<|endoftext|>\n", out);
	else
		fprintf(out, "<%d>", id);
}

int generate(const char *cmd, ferry_model_t m, ferry_tokenizer_t tok, int32_t *seq, int *len, int n,
	     const struct ferry_sample_opts *o, uint64_t *rng, FILE *out)
{
	/* one token per call: each is a forward pass anyway (no KV cache), and
	 * the text appears as it is made */
	for (int i = 0; i < n && !interrupt_poll(); i++) {
		if (ferry_model_sample(m, seq, len, *len + 1, 1, o, rng) != FERRY_OK)
			return ferry_cli_fail(cmd);
		generate_print_token(tok, seq[*len - 1], out);
		fflush(out);
	}
	return 0;
}

int generate_until(const char *cmd, ferry_model_t m, ferry_tokenizer_t tok, int32_t *seq, int *len, int n,
		   const struct ferry_sample_opts *o, uint64_t *rng, const int32_t *stop, int n_stop,
		   bool *stopped, FILE *out)
{
	*stopped = false;
	for (int i = 0; i < n && !interrupt_poll(); i++) {
		if (ferry_model_sample(m, seq, len, *len + 1, 1, o, rng) != FERRY_OK)
			return ferry_cli_fail(cmd);
		for (int k = 0; k < n_stop; k++)
			if (seq[*len - 1] == stop[k]) {
				*stopped = true;
				return 0;
			}
		generate_print_token(tok, seq[*len - 1], out);
		fflush(out);
	}
	return 0;
}

bool checkpoint_tokenizer(const char *ckpt, char *buf, size_t n)
{
	struct stat sb;
	const char *slash = strrchr(ckpt, '/');
	bool dir = stat(ckpt, &sb) == 0 && S_ISDIR(sb.st_mode);
	int len = dir ? (int)strlen(ckpt) : slash ? (int)(slash - ckpt) : 1;
	int w = !ferry_checkpoint_is_hf(ckpt) ? snprintf(buf, n, "%s" FERRY_CKPT_TOKENIZER_SUFFIX, ckpt)
					       : snprintf(buf, n, "%.*s/tokenizer.json", len, dir || slash ? ckpt : ".");

	return w >= 0 && (size_t)w < n && access(buf, R_OK) == 0;
}
