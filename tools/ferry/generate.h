/* Text generation for `ferry sample` and the sample at the end of `ferry
 * train`: tokens streamed to a FILE as they are drawn. */
#ifndef FERRY_TOOLS_GENERATE_H
#define FERRY_TOOLS_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "ferry/data.h"
#include "ferry/train.h"

/* Writes token id as text: its bytes, "\n<|endoftext|>\n" for the EOT, or
 * "<id>" for an id the tokenizer does not know. */
void generate_print_token(ferry_tokenizer_t tok, int id, FILE *out);

/* Draws n tokens after seq[0..*len) (seq has room for *len + n), printing
 * each as it comes, and stops early, between two tokens, after SIGINT or
 * SIGTERM when interrupt_install() and interrupt_defer() are in effect.  Returns 0 (*len is the
 * new length), or 1 after printing "ferry <cmd>: ..." for a failure. */
int generate(const char *cmd, ferry_model_t m, ferry_tokenizer_t tok, int32_t *seq, int *len, int n,
	     const struct ferry_sample_opts *o, uint64_t *rng, FILE *out);

/* As generate, but stops before printing a token of stop[0..n_stop) (the
 * end of a chat turn); *stopped: whether one came.  Prints the reply only. */
int generate_until(const char *cmd, ferry_model_t m, ferry_tokenizer_t tok, int32_t *seq, int *len, int n,
		   const struct ferry_sample_opts *o, uint64_t *rng, const int32_t *stop, int n_stop,
		   bool *stopped, FILE *out);

/* The tokenizer that travels with a checkpoint, into buf when it has one:
 * a Hugging Face directory's tokenizer.json (the directory of its
 * config.json or weights), an llm.c FILE's FILE.tokenizer. */
bool checkpoint_tokenizer(const char *ckpt, char *buf, size_t n);

#endif
