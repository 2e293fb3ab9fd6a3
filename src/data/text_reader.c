/*
 * A corpus file's bytes, decompressed on the fly when its name ends in .gz
 * (zlib's gzread, which also reads a plain file and concatenated members)
 * or .zst (libzstd's streaming decompressor over fread; frames one after
 * the other are read on).  Errors name the file.
 */
#include "data/text_reader.h"
#include "core/error.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

enum kind { PLAIN, GZIP, ZSTD };

struct ferry_text_reader {
	enum kind kind;
	const char *path;
	FILE *f;	/* PLAIN, ZSTD */
	gzFile gz;	/* GZIP */
	ZSTD_DStream *zs;
	void *in;	/* ZSTD: compressed input */
	ZSTD_inBuffer zin;
	size_t in_cap;
	size_t zrc;	/* ZSTD: the last call's hint; 0 between frames */
};

static int ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

int ferry_text_name_is(const char *path, const char *suffix)
{
	size_t n = strlen(path);

	if (ends_with(path, n, ".gz"))
		n -= 3;
	else if (ends_with(path, n, ".zst"))
		n -= 4;
	return ends_with(path, n, suffix);
}

ferry_status ferry_text_reader_open(const char *path,
				    struct ferry_text_reader **out)
{
	struct ferry_text_reader *r = ferry_calloc(1, sizeof(*r));
	size_t n = strlen(path);

	*out = NULL;
	if (!r)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
	r->path = path;
	r->kind = ends_with(path, n, ".gz") ? GZIP :
		  ends_with(path, n, ".zst") ? ZSTD : PLAIN;
	if (r->kind == GZIP)
		r->gz = gzopen(path, "rb");
	else
		r->f = fopen(path, "rb");
	if (!r->gz && !r->f) {
		ferry_status st = ferry_error(FERRY_ERR_IO, "%s: cannot open: %s",
					      path, strerror(errno));

		ferry_text_reader_close(r);
		return st;
	}
	if (r->kind == ZSTD) {
		r->in_cap = ZSTD_DStreamInSize();
		r->in = ferry_malloc(r->in_cap);
		r->zs = ZSTD_createDStream();
		if (!r->in || !r->zs) {
			ferry_text_reader_close(r);
			return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
		}
		r->zin = (ZSTD_inBuffer){ r->in, 0, 0 };
	}
	*out = r;
	return FERRY_OK;
}

static ferry_status read_zstd(struct ferry_text_reader *r, void *buf,
			      size_t n, size_t *got)
{
	ZSTD_outBuffer zout = { buf, n, 0 };

	while (zout.pos == 0) {
		size_t rc;

		if (r->zin.pos == r->zin.size) {
			r->zin.size = fread(r->in, 1, r->in_cap, r->f);
			r->zin.pos = 0;
			if (r->zin.size == 0)
				break;
		}
		rc = ZSTD_decompressStream(r->zs, &zout, &r->zin);
		if (ZSTD_isError(rc))
			return ferry_error(FERRY_ERR_FORMAT, "%s: zstd: %s",
					   r->path, ZSTD_getErrorName(rc));
		r->zrc = rc;
	}
	/* the end of the file inside a frame: a copy cut short */
	if (zout.pos == 0 && r->zrc != 0 && !ferror(r->f))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: zstd: the file ends inside a frame (truncated?)", r->path);
	if (ferror(r->f))
		return ferry_error(FERRY_ERR_IO, "%s: read error: %s", r->path,
				   strerror(errno));
	*got = zout.pos;
	return FERRY_OK;
}

ferry_status ferry_text_reader_read(struct ferry_text_reader *r, void *buf,
				    size_t n, size_t *got)
{
	*got = 0;
	if (r->kind == ZSTD)
		return read_zstd(r, buf, n, got);
	if (r->kind == GZIP) {
		int k = gzread(r->gz, buf, (unsigned)(n > (1u << 30) ? (1u << 30) : n));
		int errnum;
		const char *msg;

		/* a cut-short file reads to its end with the error only set
		 * (Z_BUF_ERROR, "unexpected end of file") */
		msg = gzerror(r->gz, &errnum);
		if (errnum == Z_BUF_ERROR)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: gzip: the file ends inside the stream (truncated?)", r->path);
		if (k < 0 || errnum != Z_OK)
			return ferry_error(FERRY_ERR_FORMAT, "%s: gzip: %s", r->path, msg);
		*got = (size_t)k;
		return FERRY_OK;
	}
	*got = fread(buf, 1, n, r->f);
	if (*got == 0 && ferror(r->f))
		return ferry_error(FERRY_ERR_IO, "%s: read error: %s", r->path,
				   strerror(errno));
	return FERRY_OK;
}

void ferry_text_reader_close(struct ferry_text_reader *r)
{
	if (!r)
		return;
	if (r->gz)
		gzclose(r->gz);
	if (r->f)
		fclose(r->f);
	ZSTD_freeDStream(r->zs);
	ferry_free(r->in);
	ferry_free(r);
}

ferry_status ferry_jsonl_text(const char *path, long lineno, bool unended, const char *line,
			      size_t n, const char *field, json_t **rec,
			      const char **text, size_t *len)
{
	json_error_t err;
	json_t *t;

	*rec = NULL;
	if (lineno == 1 && n >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) {
		line += 3; /* a BOM some editors write: not part of the record */
		n -= 3;
	}
	while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	if (n == 0)
		return FERRY_OK; /* blank lines are no records */
	*rec = json_loadb(line, n, JSON_ALLOW_NUL, &err);
	if (!*rec)
		return ferry_error(FERRY_ERR_FORMAT, "%s:%ld: not JSON: %s%s", path,
				   lineno, err.text,
				   unended ? " (the file ends in this line, with no newline: is it cut short?)" : "");
	t = json_object_get(*rec, field);
	if (!json_is_string(t)) {
		json_decref(*rec);
		*rec = NULL;
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s:%ld: no string field \"%s\" (--text-field names it)",
				   path, lineno, field);
	}
	*text = json_string_value(t);
	*len = json_string_length(t);
	return FERRY_OK;
}
