/*
 * Token -> bytes, for printing samples: byte-level, or llm.c's tokenizer
 * file (see include/ferry/data.h for its layout).
 */
#include "ferry/data.h"
#include "core/error.h"
#include "core/file_header.h"

#include <stdint.h>
#include <string.h>
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
	st = path ? open_file(t, path) : open_bytes(t);
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
	ferry_free(t);
}

const char *ferry_tokenizer_decode(ferry_tokenizer_t t, int id, int *len)
{
	if (len)
		*len = 0;
	if (!t || id < 0 || id >= t->vocab || id == t->eot)
		return NULL;
	if (len)
		*len = (int)(t->start[id + 1] - t->start[id]);
	return t->bytes + t->start[id];
}

int ferry_tokenizer_eot(ferry_tokenizer_t t)
{
	return t ? t->eot : -1;
}
