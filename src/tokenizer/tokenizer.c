/*
 * The tokenizer handle (include/ferry/tokenizer.h): byte-level, llm.c's
 * tokenizer file, or a Hugging Face tokenizer.json (hf_*.c).  All three
 * keep each token's bytes back to back for printing tokens one by one; a
 * Hugging Face one also holds what encodes and decodes whole texts.
 */
#include "ferry/tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"
#include "core/file_header.h"

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOK_MAGIC 20240328

/* Version 2 added the EOT id to the header. */
static const int32_t tok_versions[] = { 1, 2 };
static const struct ferry_file_format tok_format = {
	.kind = "llm.c tokenizer",
	.header = "tokenizer",
	.magic = TOK_MAGIC,
	.versions = tok_versions,
	.n_versions = sizeof(tok_versions) / sizeof(tok_versions[0]),
};

struct ferry_tokenizer {
	int vocab;
	int eot;
	char *bytes;   /* all token bytes back to back */
	size_t *start; /* token i is bytes[start[i] .. start[i+1]) */
	struct ferry_hf_tokenizer *hf; /* a tokenizer.json, else NULL */
};

static ferry_status open_bytes(struct ferry_tokenizer *t)
{
	int i;

	t->vocab = FERRY_BYTE_VOCAB;
	t->eot = FERRY_BYTE_EOT;
	t->bytes = ferry_malloc(256);
	t->start = ferry_malloc((FERRY_BYTE_VOCAB + 1) * sizeof(size_t));
	if (!t->bytes || !t->start)
		return ferry_error(FERRY_ERR_NOMEM,
				   "out of memory for the byte-level tokenizer");
	for (i = 0; i < 256; i++) {
		t->bytes[i] = (char)i;
		t->start[i] = (size_t)i;
	}
	t->start[256] = 256; /* EOT has no bytes */
	t->start[257] = 256;
	return FERRY_OK;
}

static ferry_status open_file(struct ferry_tokenizer *t, const char *path)
{
	int32_t hdr[FERRY_FILE_HEADER_INTS];
	ferry_status st = FERRY_OK;
	size_t body, at, w;
	int64_t size = 0;
	int fd, i;

	st = ferry_file_header_open(path, &tok_format, hdr, &fd, &size);
	if (st)
		return st;
	body = (size_t)(size - FERRY_FILE_HEADER_BYTES);
	t->vocab = hdr[2];
	/* Version 1 predates the EOT field; it was only written for GPT-2,
	 * whose EOT is the last token (50256). */
	t->eot = hdr[1] == 2 ? hdr[3] : hdr[2] - 1;
	if (t->vocab <= 0) {
		st = ferry_error(FERRY_ERR_FORMAT, "%s: bad vocab size %d", path,
				 t->vocab);
		goto out;
	}
	if (t->eot < 0 || t->eot >= t->vocab) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: EOT id %d outside the vocab of %d", path,
				 t->eot, t->vocab);
		goto out;
	}
	/* Every token takes at least its length byte. */
	if ((size_t)t->vocab > body) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: truncated: %d tokens need at least %d bytes after the header, file has %zu",
				 path, t->vocab, t->vocab, body);
		goto out;
	}
	t->bytes = ferry_malloc(body);
	t->start = ferry_malloc(((size_t)t->vocab + 1) * sizeof(size_t));
	if (!t->bytes || !t->start) {
		st = ferry_error(FERRY_ERR_NOMEM,
				 "%s: out of memory for %d tokens", path, t->vocab);
		goto out;
	}
	if (ferry_file_read_full(fd, t->bytes, body) != (ssize_t)body) {
		st = ferry_error(FERRY_ERR_IO, "%s: error reading tokens", path);
		goto out;
	}
	/* Strip the length bytes in place: token bytes move left. */
	for (i = 0, at = 0, w = 0; i < t->vocab; i++) {
		size_t len;

		if (at >= body) {
			st = ferry_error(FERRY_ERR_FORMAT,
					 "%s: truncated: token %d of %d is missing",
					 path, i, t->vocab);
			goto out;
		}
		len = (unsigned char)t->bytes[at++];
		if (len > body - at) {
			st = ferry_error(FERRY_ERR_FORMAT,
					 "%s: truncated: token %d needs %zu bytes, %zu left",
					 path, i, len, body - at);
			goto out;
		}
		memmove(t->bytes + w, t->bytes + at, len);
		t->start[i] = w;
		w += len;
		at += len;
	}
	t->start[t->vocab] = w;
	if (at != body)
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: %zu trailing bytes after %d tokens", path,
				 body - at, t->vocab);
out:
	close(fd);
	return st;
}

/* A directory, a .json or a file that starts as JSON does: Hugging
 * Face's. */
static bool is_hf(const char *path)
{
	size_t n = strlen(path);
	struct stat sb;
	char c = 0;
	int fd;

	if ((stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ||
	    (n >= 5 && !strcmp(path + n - 5, ".json")))
		return true;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	while (read(fd, &c, 1) == 1 && (c == ' ' || c == '\n' || c == '\r' || c == '\t'))
		;
	close(fd);
	return c == '{';
}

/* Every token's bytes as printed one by one, for ferry_tokenizer_decode. */
static ferry_status hf_token_table(struct ferry_tokenizer *t)
{
	struct tok_str all = { 0 }, one = { 0 };
	ferry_status st = FERRY_OK;

	t->start = ferry_malloc(((size_t)t->vocab + 1) * sizeof(size_t));
	if (!t->start)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %d tokens",
				   t->vocab);
	for (int32_t id = 0; id < t->vocab && !st; id++) {
		bool known = (id < t->hf->bpe.n_ids && t->hf->bpe.token[id]) ||
			     t->hf->added_of_id[id] >= 0;

		t->start[id] = all.n;
		one.n = 0;
		if (known && !t->hf->is_special[id])
			st = ferry_tok_decode_chain(t->hf, &id, 1, false, false, &one);
		if (!st)
			st = ferry_tok_str_add(&all, one.p, one.n);
	}
	t->start[t->vocab] = all.n;
	ferry_tok_str_free(&one);
	if (!st) {
		t->bytes = ferry_malloc(all.n + 1);
		if (t->bytes)
			memcpy(t->bytes, all.p, all.n + 1);
		else
			st = ferry_error(FERRY_ERR_NOMEM, "out of memory for tokens");
	}
	ferry_tok_str_free(&all);
	return st;
}

/* A tokenizer.json, or a directory with one (and maybe
 * tokenizer_config.json, which names BOS and EOS). */
static ferry_status open_hf(struct ferry_tokenizer *t, const char *path)
{
	char json[PATH_MAX], config[PATH_MAX], dir[PATH_MAX];
	struct stat sb;
	const char *slash;
	ferry_status st;

	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		snprintf(dir, sizeof(dir), "%s", path);
		if (snprintf(json, sizeof(json), "%s/tokenizer.json", path) >= (int)sizeof(json))
			return ferry_error(FERRY_ERR_INVALID, "%s: path too long", path);
		if (access(json, R_OK) != 0)
			return ferry_error(FERRY_ERR_IO,
					   "%s: no tokenizer.json in the directory", path);
	} else {
		slash = strrchr(path, '/');
		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
			 slash ? path : ".");
		snprintf(json, sizeof(json), "%s", path);
	}
	snprintf(config, sizeof(config), "%.*s/tokenizer_config.json",
		 (int)(sizeof(config) - 32), dir);
	t->hf = ferry_calloc(1, sizeof(*t->hf));
	if (!t->hf)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a tokenizer");
	st = ferry_tok_hf_load_json(t->hf, json, access(config, R_OK) ? NULL : config);
	if (st)
		return st;
	t->vocab = t->hf->n_ids;
	t->eot = t->hf->eos;
	return hf_token_table(t);
}

ferry_status ferry_tokenizer_open(const char *path, ferry_tokenizer_t *out)
{
	struct ferry_tokenizer *t;
	ferry_status st;

	if (!out)
		return ferry_error(FERRY_ERR_INVALID, "tokenizer output is NULL");
	*out = NULL;
	t = ferry_calloc(1, sizeof(*t));
	if (!t)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a tokenizer");
	st = !path ? open_bytes(t) : is_hf(path) ? open_hf(t, path) :
		     open_file(t, path);
	if (st) {
		ferry_tokenizer_free(t);
		return st;
	}
	*out = t;
	return FERRY_OK;
}

void ferry_tokenizer_free(ferry_tokenizer_t t)
{
	if (!t)
		return;
	ferry_free(t->bytes);
	ferry_free(t->start);
	if (t->hf)
		ferry_tok_hf_free(t->hf);
	ferry_free(t->hf);
	ferry_free(t);
}

const char *ferry_tokenizer_decode(ferry_tokenizer_t t, int id, int *len)
{
	if (len)
		*len = 0;
	if (!t || id < 0 || id >= t->vocab || id == t->eot ||
	    (t->hf && t->hf->is_special[id]))
		return NULL;
	if (len)
		*len = (int)(t->start[id + 1] - t->start[id]);
	return t->bytes + t->start[id];
}

int ferry_tokenizer_eot(ferry_tokenizer_t t)
{
	return t ? t->eot : -1;
}

int ferry_tokenizer_vocab(ferry_tokenizer_t t)
{
	return t ? t->vocab : 0;
}

bool ferry_tokenizer_can_encode(ferry_tokenizer_t t)
{
	return t && (t->hf || (t->vocab == FERRY_BYTE_VOCAB &&
			      t->eot == FERRY_BYTE_EOT));
}

int ferry_tokenizer_bos(ferry_tokenizer_t t)
{
	return t && t->hf ? t->hf->bos : -1;
}

int ferry_tokenizer_eos(ferry_tokenizer_t t)
{
	return t && t->hf ? t->hf->eos : -1;
}

int ferry_tokenizer_token_id(ferry_tokenizer_t t, const char *token)
{
	return t && t->hf && token ? ferry_tok_hf_token_id(t->hf, token) : -1;
}

ferry_status ferry_tokenizer_encode(ferry_tokenizer_t t, const char *text,
				    size_t len, unsigned flags,
				    struct ferry_token_buf *out)
{
	ferry_status st = FERRY_OK;

	if (!t || !out || (!text && len))
		return ferry_error(FERRY_ERR_INVALID,
				   "tokenizer encode: NULL tokenizer, text or output");
	if (t->hf)
		return ferry_tok_hf_encode(t->hf, text, len,
				     flags & FERRY_TOK_ADD_SPECIAL, out);
	if (!ferry_tokenizer_can_encode(t))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "llm.c's tokenizer file holds each token's bytes but not the merge rules that encoding text needs");
	if (flags & FERRY_TOK_ADD_SPECIAL)
		st = ferry_tok_ids_push(out, FERRY_BYTE_EOT);
	for (size_t i = 0; i < len && !st; i++)
		st = ferry_tok_ids_push(out, (unsigned char)text[i]);
	return st;
}

/* Byte-level and llm.c's files: the tokens' bytes back to back. */
static ferry_status concat_tokens(ferry_tokenizer_t t, const int32_t *ids,
				  size_t n, bool skip_special,
				  struct tok_str *out)
{
	ferry_status st = ferry_tok_str_add(out, "", 0);

	for (size_t i = 0; i < n && !st; i++) {
		int len;
		const char *p = ferry_tokenizer_decode(t, ids[i], &len);

		if (ids[i] == t->eot && skip_special)
			continue;
		if (!p && ids[i] != t->eot)
			return ferry_error(FERRY_ERR_INVALID,
					   "token id %d is not in the tokenizer's vocabulary of %d",
					   ids[i], t->vocab);
		st = ferry_tok_str_add(out, p, (size_t)len);
	}
	return st;
}

ferry_status ferry_tokenizer_decode_ids(ferry_tokenizer_t t,
					const int32_t *ids, size_t n,
					bool skip_special, char **out,
					size_t *len)
{
	struct tok_str s = { 0 };
	ferry_status st;

	if (!t || !out || (!ids && n))
		return ferry_error(FERRY_ERR_INVALID,
				   "tokenizer decode: NULL tokenizer, ids or output");
	*out = NULL;
	st = t->hf ? ferry_tok_decode_chain(t->hf, ids, n, skip_special, true, &s) :
		     concat_tokens(t, ids, n, skip_special, &s);
	if (st) {
		ferry_tok_str_free(&s);
		return st;
	}
	if (len)
		*len = s.n;
	*out = s.p;
	return FERRY_OK;
}

void ferry_tokenizer_text_free(char *text)
{
	free(text);
}
