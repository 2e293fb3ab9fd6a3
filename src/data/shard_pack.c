/*
 * Version-3 shards into rows of whole documents (include/ferry/data.h):
 * the greedy packing at open, and one row's inputs, targets and positions.
 *
 * A row is always a contiguous span of its shard: documents are packed in
 * order, and a document cut to T tokens fills its row alone, so the next
 * one starts a new row.
 */
#include "data/shard_pack.h"
#include "core/error.h"
#include "core/file_header.h"
#include "ferry/data.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define HEADER_BYTES ((off_t)FERRY_FILE_HEADER_BYTES)
#define SCAN_CHUNK ((size_t)1 << 20)

static ferry_status pread_full(int fd, void *buf, size_t n, off_t at, const char *path)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, at + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ferry_error(FERRY_ERR_IO, "%s: error reading at byte %lld: %s", path,
					   (long long)(at + (off_t)got), strerror(errno));
		if (r == 0)
			return ferry_error(FERRY_ERR_FORMAT, "%s: file shrank: nothing at byte %lld (checked at open)",
					   path, (long long)(at + (off_t)got));
		got += (size_t)r;
	}
	return FERRY_OK;
}

static ferry_status push_row(struct ferry_pack *p, int shard, int64_t start, int64_t len)
{
	if (p->n_rows == p->cap) {
		int64_t cap = p->cap ? 2 * p->cap : 1024;
		struct ferry_pack_row *r = ferry_malloc((size_t)cap * sizeof(*r));

		if (!r)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for %lld rows of packed documents",
					   (long long)cap);
		if (p->n_rows)
			memcpy(r, p->rows, (size_t)p->n_rows * sizeof(*r));
		ferry_free(p->rows);
		p->rows = r;
		p->cap = cap;
	}
	p->rows[p->n_rows++] = (struct ferry_pack_row){ start, shard, (int32_t)len };
	return FERRY_OK;
}

/* The packing's state in one shard: the row being filled. */
struct packer {
	struct ferry_pack *p;
	const char *path;
	int shard, T;
	bool truncate;
	int64_t row_start, row_len, docs;
};

static ferry_status close_row(struct packer *k)
{
	ferry_status st = k->row_len ? push_row(k->p, k->shard, k->row_start, k->row_len) : FERRY_OK;

	k->row_len = 0;
	return st;
}

/* Document number k->docs, tokens [start, start + n): into the current row
 * when it fits, else the next. */
static ferry_status add_doc(struct packer *k, int64_t start, int64_t n)
{
	ferry_status st;

	k->docs++;
	if (n > k->T) {
		if (!k->truncate)
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: document %lld (tokens %lld..%lld) has %lld tokens, more than the "
					   "sequence length %d: give --truncate to cut such documents to their first "
					   "%d tokens, or a longer --seq", k->path, (long long)k->docs,
					   (long long)start, (long long)(start + n - 1), (long long)n, k->T, k->T);
		if ((st = close_row(k)))
			return st;
		return push_row(k->p, k->shard, start, k->T);
	}
	if (k->row_len && k->row_len + n <= k->T) {
		k->row_len += n;
		return FERRY_OK;
	}
	if ((st = close_row(k)))
		return st;
	k->row_start = start;
	k->row_len = n;
	return FERRY_OK;
}

ferry_status ferry_pack_scan(struct ferry_pack *p, const char *path, int shard, int64_t tokens, int T,
			     bool truncate)
{
	struct packer k = { p, path, shard, T, truncate, 0, 0, 0 };
	uint8_t *buf = tokens ? ferry_malloc(SCAN_CHUNK) : NULL;
	ferry_status st = FERRY_OK;
	int64_t doc = 0;
	int fd = -1;

	if (!tokens)
		return FERRY_OK;
	if (!buf)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory reading its token flags", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	for (int64_t at = 0; at < tokens && !st; at += (int64_t)SCAN_CHUNK) {
		size_t n = tokens - at < (int64_t)SCAN_CHUNK ? (size_t)(tokens - at) : SCAN_CHUNK;

		if ((st = pread_full(fd, buf, n, HEADER_BYTES + (off_t)tokens * 4 + (off_t)at, path)))
			break;
		for (size_t i = 0; i < n && !st; i++) {
			int64_t t = at + (int64_t)i;

			if (buf[i] & ~(FERRY_TOKEN_TARGET | FERRY_TOKEN_DOC_START))
				st = ferry_error(FERRY_ERR_FORMAT,
						 "%s: token %lld has flags 0x%02x: only bits 0 (target) and 1 "
						 "(document start) may be set", path, (long long)t, buf[i]);
			else if (t == 0 && !(buf[i] & FERRY_TOKEN_DOC_START))
				st = ferry_error(FERRY_ERR_FORMAT,
						 "%s: its first token does not start a document (flags 0x%02x): a "
						 "version-3 shard starts with a document", path, buf[i]);
			else if (t > 0 && (buf[i] & FERRY_TOKEN_DOC_START)) {
				st = add_doc(&k, doc, t - doc);
				doc = t;
			}
		}
	}
	if (!st)
		st = add_doc(&k, doc, tokens - doc);
	if (!st)
		st = close_row(&k);
out:
	if (fd >= 0)
		close(fd);
	ferry_free(buf);
	return st;
}

ferry_status ferry_pack_read(const struct ferry_pack_row *row, int fd, const char *path, int64_t shard_tokens,
			     int T, int vocab, uint32_t *ids, uint8_t *flags, int32_t *in, int32_t *tg, int32_t *pos)
{
	const int n = row ? row->len : 0;
	ferry_status st;
	int32_t p = 0;

	if (n && ((st = pread_full(fd, ids, (size_t)n * 4, HEADER_BYTES + (off_t)row->start * 4, path)) ||
		  (st = pread_full(fd, flags, (size_t)n, HEADER_BYTES + (off_t)shard_tokens * 4 + (off_t)row->start,
				   path))))
		return st;
	for (int t = 0; t < n; t++) {
		if (ids[t] >= (uint32_t)vocab)
			return ferry_error(FERRY_ERR_FORMAT, "%s: token %u at index %lld is >= vocab %d", path, ids[t],
					   (long long)(row->start + t), vocab);
		p = t == 0 || (flags[t] & FERRY_TOKEN_DOC_START) ? 0 : p + 1;
		in[t] = (int32_t)ids[t];
		pos[t] = p;
	}
	for (int t = 0; t < n; t++) {
		bool next_counts = t + 1 < n && (flags[t + 1] & (FERRY_TOKEN_DOC_START | FERRY_TOKEN_TARGET)) ==
							FERRY_TOKEN_TARGET;

		tg[t] = next_counts ? in[t + 1] : -1;
	}
	for (int t = n; t < T; t++) { /* padding: a document of one token each, never a target */
		in[t] = 0;
		tg[t] = -1;
		pos[t] = 0;
	}
	return FERRY_OK;
}

void ferry_pack_free(struct ferry_pack *p)
{
	ferry_free(p->rows);
	memset(p, 0, sizeof(*p));
}
