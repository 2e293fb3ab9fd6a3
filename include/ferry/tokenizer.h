/*
 * Tokenizers: text -> token ids -> text.
 *
 * One handle, three kinds, by what ferry_tokenizer_open is given:
 *  - NULL: byte-level.  Ids 0..255 are bytes, FERRY_BYTE_EOT (256) starts
 *    every document; vocabulary FERRY_BYTE_VOCAB = 257.
 *  - llm.c's tokenizer file (gpt2_tokenizer.bin: 256 int32 header, [0]
 *    20240328, [1] version 1 or 2, [2] vocab size, [3] EOT id (version 2);
 *    then per token a uint8 length and that many bytes): decodes only.
 *  - a Hugging Face tokenizer.json, or a directory holding one: encodes and
 *    decodes as the `tokenizers` library does (BPE models: byte-level with
 *    regex splits, as GPT-2, Llama 3 and Qwen 2; SentencePiece-style with
 *    Metaspace or a '▁' normalizer and <0xNN> byte fallback, as Llama 2 and
 *    Mistral; added and special tokens; the post-processor's template).
 *    A file asking for something else (a WordPiece model, an unknown
 *    normalizer) is refused with FERRY_ERR_UNSUPPORTED naming it.  The
 *    file's truncation and padding are ignored: ferry encodes whole texts.
 *    Decoding gives the exact bytes where HF would put U+FFFD for bytes
 *    that are not UTF-8, so decode(encode(x)) == x on any bytes for a
 *    byte-level or byte-fallback tokenizer.
 *
 * A tokenizer is read-only once open: any number of threads may encode and
 * decode with one handle at the same time.
 */
#ifndef FERRY_TOKENIZER_H
#define FERRY_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_BYTE_EOT 256
#define FERRY_BYTE_VOCAB 257

typedef struct ferry_tokenizer *ferry_tokenizer_t;

/* path: NULL (byte-level), an llm.c tokenizer file, a tokenizer.json or a
 * directory with one (its tokenizer_config.json, when there, names the BOS
 * and EOS tokens). */
ferry_status ferry_tokenizer_open(const char *path, ferry_tokenizer_t *out)
	FERRY_MUST_CHECK;
void ferry_tokenizer_free(ferry_tokenizer_t tok);

/* One past the largest id the tokenizer knows. */
int ferry_tokenizer_vocab(ferry_tokenizer_t tok);
/* Whether ferry_tokenizer_encode works (not for llm.c's files). */
bool ferry_tokenizer_can_encode(ferry_tokenizer_t tok);

/* The bytes of one token (not NUL-terminated) and their count, as they
 * print when tokens are printed one by one (a SentencePiece '▁' is a space,
 * <0x0A> is "\n"); NULL, 0 for ids it does not know and for special tokens
 * (EOT).  Version-1 llm.c files have no EOT field: the EOT is taken to be
 * the last token (GPT-2's 50256). */
const char *ferry_tokenizer_decode(ferry_tokenizer_t tok, int id, int *len);

/* The token that separates documents when nothing else does: byte-level
 * FERRY_BYTE_EOT, llm.c's EOT, a Hugging Face tokenizer's EOS (-1: none). */
int ferry_tokenizer_eot(ferry_tokenizer_t tok);
/* BOS and EOS of a Hugging Face tokenizer (tokenizer_config.json's, else
 * the post-processor's template's, else well-known names such as <s> and
 * <|endoftext|>); -1 when unknown. */
int ferry_tokenizer_bos(ferry_tokenizer_t tok);
int ferry_tokenizer_eos(ferry_tokenizer_t tok);

/* A growing array of ids, owned by the caller; start it zeroed. */
struct ferry_token_buf {
	int32_t *ids;
	size_t n, cap;
};
void ferry_token_buf_free(struct ferry_token_buf *buf);

/* Encode flags. */
#define FERRY_TOK_ADD_SPECIAL 1u /* the post-processor's BOS/EOS (HF's
				    add_special_tokens=True) */

/* Appends the ids of len bytes of text (any bytes; NUL is a byte too).
 * FERRY_ERR_UNSUPPORTED for a tokenizer that cannot encode. */
ferry_status ferry_tokenizer_encode(ferry_tokenizer_t tok, const char *text,
				    size_t len, unsigned flags,
				    struct ferry_token_buf *out)
	FERRY_MUST_CHECK;

/* Where a token's text lies in the input: bytes [start, end). */
struct ferry_token_span {
	size_t start, end;
};

/* ferry_tokenizer_encode without special tokens, and where each appended
 * token's text lies in text (*spans: one per token appended, malloc'd,
 * free()): tokens are back to back and cover the input; whitespace an
 * added token's lstrip or rstrip takes belongs to it, and the space a
 * Metaspace or Prepend normalizer adds belongs to no input byte (a token
 * of it alone covers the previous token's bytes when adjacent, else the
 * next character, as `tokenizers` aligns it).  A
 * normalizer that rewrites the text otherwise (lowercasing, NFKC changes)
 * is FERRY_ERR_UNSUPPORTED. */
ferry_status ferry_tokenizer_encode_offsets(ferry_tokenizer_t tok, const char *text,
					    size_t len, struct ferry_token_buf *out,
					    struct ferry_token_span **spans)
	FERRY_MUST_CHECK;

/* Decodes n ids into *out (allocated, NUL-terminated; free with
 * ferry_tokenizer_text_free), *len its length without the NUL.
 * skip_special leaves special tokens out (HF's skip_special_tokens).  An
 * id the tokenizer does not know is FERRY_ERR_INVALID. */
ferry_status ferry_tokenizer_decode_ids(ferry_tokenizer_t tok,
					const int32_t *ids, size_t n,
					bool skip_special, char **out,
					size_t *len) FERRY_MUST_CHECK;
void ferry_tokenizer_text_free(char *text);

/* The id of a token's string (an added token's content or a vocab entry),
 * -1 when absent or not a Hugging Face tokenizer. */
int ferry_tokenizer_token_id(ferry_tokenizer_t tok, const char *token);

/* ---- training a byte-level BPE tokenizer (GPT-2 style) --------------------
 * The corpus is pre-tokenized as GPT-2's ByteLevel pre-tokenizer does (its
 * regex, through PCRE2, on the raw bytes; the special tokens cut out of the
 * text first, as Hugging Face splits added tokens), the distinct pieces
 * ("words") counted on many threads.  Ids: the special tokens first, in the
 * order given, then the 256 bytes (ByteLevel's alphabet, byte order), then
 * one per merge.  Each merge joins the adjacent pair of tokens that occurs
 * most often over the corpus (each word weighted by its count); among equal
 * counts the pair whose left id, then right id, is smallest.  Training stops
 * at vocab ids or when every word is one token.  The result does not depend
 * on the thread count.  Written as a Hugging Face tokenizer.json (BPE model,
 * ByteLevel pre-tokenizer, post-processor and decoder, the special tokens
 * as added tokens) that `tokenizers` and ferry_tokenizer_open load. */
struct ferry_bpe_train_opts {
	int vocab;			/* ids in all: specials + 256 + merges */
	const char *const *special;	/* n_special strings, may be 0 */
	int n_special;
	int threads;			/* counting threads; 0: OpenMP's default */
	const char *text_field;		/* JSON Lines inputs; NULL: "text" */
};

struct ferry_bpe_train_stats {
	long long bytes;	/* of text read */
	long long words;	/* pre-tokenized pieces */
	long long distinct;	/* distinct pieces */
	int vocab;		/* ids written */
	int merges;
};

/* Trains on the files at paths (plain text: one document per file; JSON
 * Lines, .jsonl or .json: one per record's text field; either may be .gz or
 * .zst, as ferry_data_from_text reads them) and writes out_path atomically.
 * vocab below n_special + 256: FERRY_ERR_INVALID.  stats may be NULL. */
ferry_status ferry_tokenizer_train(const char *const *paths, int n_paths,
				   const struct ferry_bpe_train_opts *opts,
				   const char *out_path,
				   struct ferry_bpe_train_stats *stats)
	FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
