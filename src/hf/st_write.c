/*
 * safetensors files written atomically (st_io.h's protocol): tensors in
 * name order, converted chunk by chunk into the file's dtype.
 */
#include "ferry/safetensors.h"
#include "hf/st_io.h"
#include "core/bulk_write.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- atomic file writes ------------------------------------------------------- */

ferry_status ferry_st_write_all(int fd, const char *tmp, const void *buf,
				size_t n)
{
	const char *p = buf;

	while (n > 0) {
		size_t want = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
		ssize_t w = write(fd, p, want);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return ferry_error(FERRY_ERR_IO, "%s: error writing: %s",
					   tmp, strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	return FERRY_OK;
}

/* fsync of the directory holding path, so the rename survives a power
 * loss; best effort (some file systems refuse to fsync directories). */
static void sync_parent_dir(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		return;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

ferry_status ferry_st_atomic_write(const char *path, ferry_st_emit_fn emit,
				   void *ctx)
{
	size_t len = strlen(path);
	ferry_status st;
	char *tmp;
	int fd, tries;

	tmp = ferry_malloc(len + 32);
	if (!tmp)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory for the temporary name",
				   path);
	snprintf(tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
	for (tries = 0;; tries++) {
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			  0644);
		/* A leftover of a dead process that had our pid: replace it. */
		if (fd < 0 && errno == EEXIST && tries == 0 && unlink(tmp) == 0)
			continue;
		break;
	}
	if (fd < 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot create: %s", tmp,
				 strerror(errno));
		ferry_free(tmp);
		return st;
	}
	st = emit(fd, tmp, ctx);
	if (!st && fsync(fd) != 0)
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", tmp,
				 strerror(errno));
	if (close(fd) != 0 && !st)
		st = ferry_error(FERRY_ERR_IO, "%s: close failed: %s", tmp,
				 strerror(errno));
	if (!st && rename(tmp, path) != 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot rename %s over it: %s",
				 path, tmp, strerror(errno));
	if (st)
		unlink(tmp);
	else
		sync_parent_dir(path);
	ferry_free(tmp);
	return st;
}

/* ---- writer ------------------------------------------------------------------- */

struct write_ctx {
	const struct ferry_st_write *t;
	int n;
	const size_t *numel;
	const unsigned char *header; /* 8 + header bytes */
	size_t header_bytes;
};

/* Values i .. i + m - 1 of t into out, little-endian in the file's dtype,
 * on every thread (a conversion runs at memory speed only so). */
static void convert(const struct ferry_st_write *t, size_t i, size_t m, unsigned char *out)
{
	const size_t esize = ferry_st_dtype_size(t->dtype);

#pragma omp parallel for schedule(static) if (m >= ((size_t)1 << 16))
	for (size_t j = 0; j < m; j++) {
		const float v = t->data[i + j];
		unsigned char *o = out + j * esize;
		uint32_t u = t->dtype == FERRY_ST_F32    ? ferry_st_f32_bits(v)
			     : t->dtype == FERRY_ST_BF16 ? ferry_st_f32_to_bf16(v)
							 : ferry_st_f32_to_f16(v);

		for (size_t b = 0; b < esize; b++)
			o[b] = (unsigned char)(u >> (8 * b));
	}
}

/* One tensor's values, converted straight into the writer's buffers. */
static ferry_status emit_tensor(struct ferry_bulk_file *b, const struct ferry_st_write *t, size_t numel)
{
	const size_t esize = ferry_st_dtype_size(t->dtype);
	ferry_status st = FERRY_OK;
	size_t i = 0;

	if (t->dtype == FERRY_ST_F32 && !ST_BIG_ENDIAN)
		return ferry_bulk_append(b, t->data, numel * sizeof(float));
	while (i < numel && !st) {
		size_t room, m;
		unsigned char *o = ferry_bulk_space(b, &room);

		m = room / esize < numel - i ? room / esize : numel - i;
		if (m == 0) { /* the buffer's last bytes split a value */
			unsigned char one[4];

			convert(t, i, 1, one);
			st = ferry_bulk_append(b, one, esize);
			i++;
			continue;
		}
		convert(t, i, m, o);
		st = ferry_bulk_commit(b, m * esize);
		i += m;
	}
	return st;
}

static ferry_status emit_tensors(int fd, const char *tmp, void *vctx)
{
	const struct write_ctx *c = vctx;
	struct ferry_bulk_file *b;
	ferry_status st = ferry_bulk_begin(fd, tmp, &b), end;

	if (st)
		return st;
	st = ferry_bulk_append(b, c->header, c->header_bytes);
	for (int k = 0; k < c->n && !st; k++)
		st = emit_tensor(b, &c->t[k], c->numel[k]);
	end = ferry_bulk_end(b);
	return st ? st : end;
}

static int cmp_write_name(const void *a, const void *b)
{
	const struct ferry_st_write *x = *(const struct ferry_st_write *const *)a;
	const struct ferry_st_write *y = *(const struct ferry_st_write *const *)b;

	return strcmp(x->name, y->name);
}

/* {"dtype": ..., "shape": [...], "data_offsets": [off, off + nb]}, or NULL
 * when out of memory. */
static json_t *header_entry(const struct ferry_st_write *t, uint64_t off,
			    uint64_t nb)
{
	json_t *e = json_object(), *shape = json_array(), *offs = json_array();
	int d, bad = !e || !shape || !offs;

	for (d = 0; d < t->ndim && !bad; d++)
		bad = json_array_append_new(shape, json_integer(t->shape[d]));
	bad = bad ||
	      json_array_append_new(offs, json_integer((json_int_t)off)) ||
	      json_array_append_new(offs, json_integer((json_int_t)(off + nb))) ||
	      json_object_set_new(e, "dtype",
				  json_string(ferry_st_dtype_name(t->dtype))) ||
	      json_object_set(e, "shape", shape) ||
	      json_object_set(e, "data_offsets", offs);
	json_decref(shape);
	json_decref(offs);
	if (bad) {
		json_decref(e);
		return NULL;
	}
	return e;
}

/* The JSON header: __metadata__ first, then the tensors in order. */
static ferry_status build_header(const char *path,
				 const struct ferry_st_write *t, int n,
				 const size_t *numel, const char *fmt,
				 json_t **out)
{
	json_t *root = json_object();
	uint64_t off = 0;
	int k;

	if (!root)
		goto oom;
	if (fmt) {
		json_t *m = json_object(), *s = json_string(fmt);

		if (!s) {
			json_decref(m);
			json_decref(root);
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: metadata format is not valid UTF-8 (or out of memory)",
					   path);
		}
		if (!m) {
			json_decref(s);
			goto oom;
		}
		if (json_object_set_new(m, "format", s)) {
			json_decref(m);
			goto oom;
		}
		if (json_object_set_new(root, "__metadata__", m))
			goto oom;
	}
	for (k = 0; k < n; k++) {
		uint64_t nb = (uint64_t)numel[k] * ferry_st_dtype_size(t[k].dtype);
		json_t *e = header_entry(&t[k], off, nb);

		if (!e)
			goto oom;
		if (json_object_set_new(root, t[k].name, e)) {
			json_decref(root);
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: tensor name %s is not valid UTF-8 (or out of memory)",
					   path, t[k].name);
		}
		off += nb;
	}
	*out = root;
	return FERRY_OK;
oom:
	json_decref(root);
	return ferry_error(FERRY_ERR_NOMEM,
			   "%s: out of memory building the header", path);
}

/* Checks tensor k of a write (name, dtype, shape, size, data) and sets
 * *numel; *total, the bytes of the tensors so far, grows by its size. */
static ferry_status check_write_tensor(const char *path,
				       const struct ferry_st_write *t, int k,
				       uint64_t *total, size_t *numel)
{
	uint64_t m = 1, nb;
	int d;

	if (!t->name || !*t->name || !strcmp(t->name, "__metadata__"))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: tensor %d has no name, or a reserved one",
				   path, k);
	if (!ferry_st_dtype_valid(t->dtype))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: tensor %s has a bad dtype (%d)", path,
				   t->name, (int)t->dtype);
	if (t->ndim < 0 || t->ndim > FERRY_ST_MAX_DIMS)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: tensor %s has %d dimensions (0..%d allowed)",
				   path, t->name, t->ndim, FERRY_ST_MAX_DIMS);
	for (d = 0; d < t->ndim; d++) {
		if (t->shape[d] < 0 ||
		    __builtin_mul_overflow(m, (uint64_t)t->shape[d], &m))
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: tensor %s has a bad shape",
					   path, t->name);
	}
	if (__builtin_mul_overflow(m, (uint64_t)ferry_st_dtype_size(t->dtype), &nb) ||
	    __builtin_add_overflow(*total, nb, total) ||
	    *total > (uint64_t)INT64_MAX / 2 || m > SIZE_MAX / sizeof(float))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: tensor %s is too large", path, t->name);
	if (m > 0 && !t->data)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: tensor %s has no data", path, t->name);
	*numel = (size_t)m;
	return FERRY_OK;
}

/* Checks the n tensors of a write, their names distinct (sorted: scratch
 * for n pointers), and sets numel[]. */
static ferry_status check_write_tensors(const char *path,
					const struct ferry_st_write *t, int n,
					const struct ferry_st_write **sorted,
					size_t *numel)
{
	uint64_t total = 0;
	ferry_status st;
	int k;

	for (k = 0; k < n; k++) {
		st = check_write_tensor(path, &t[k], k, &total, &numel[k]);
		if (st)
			return st;
		sorted[k] = &t[k];
	}
	if (n > 1)
		qsort(sorted, (size_t)n, sizeof(*sorted), cmp_write_name);
	for (k = 1; k < n; k++) {
		if (!strcmp(sorted[k - 1]->name, sorted[k]->name))
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: tensor name %s appears twice", path,
					   sorted[k]->name);
	}
	return FERRY_OK;
}

/* The file's first bytes: the 8-byte length, then root as compact JSON
 * padded with spaces to a multiple of 8; *header (the caller frees it),
 * *bytes long. */
static ferry_status encode_header(const char *path, json_t *root,
				  unsigned char **header, size_t *bytes)
{
	size_t json_len, padded;

	json_len = json_dumpb(root, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (json_len == 0)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory encoding the header", path);
	padded = (json_len + 7) & ~(size_t)7;
	*header = ferry_malloc(8 + padded);
	if (!*header)
		return ferry_st_nomem(path);
	if (json_dumpb(root, (char *)*header + 8, json_len,
		       JSON_COMPACT | JSON_PRESERVE_ORDER) != json_len)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory encoding the header", path);
	memset(*header + 8 + json_len, ' ', padded - json_len);
	ferry_st_store_le64(*header, padded);
	*bytes = 8 + padded;
	return FERRY_OK;
}

ferry_status ferry_safetensors_write(const char *path,
				     const struct ferry_st_write *t, int n,
				     const char *metadata_format)
{
	const struct ferry_st_write **sorted = NULL;
	struct write_ctx c = { 0 };
	size_t *numel = NULL, header_bytes = 0;
	unsigned char *header = NULL;
	json_t *root = NULL;
	ferry_status st;

	if (!path || !*path)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_safetensors_write: path is NULL or empty");
	if (n < 0 || (n > 0 && !t))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: bad tensor list (n = %d)", path, n);
	numel = ferry_malloc(sizeof(*numel) * (size_t)(n ? n : 1));
	sorted = ferry_malloc(sizeof(*sorted) * (size_t)(n ? n : 1));
	if (!numel || !sorted) {
		st = ferry_st_nomem(path);
		goto out;
	}
	st = check_write_tensors(path, t, n, sorted, numel);
	if (!st)
		st = build_header(path, t, n, numel, metadata_format, &root);
	if (!st)
		st = encode_header(path, root, &header, &header_bytes);
	if (st)
		goto out;
	c.t = t;
	c.n = n;
	c.numel = numel;
	c.header = header;
	c.header_bytes = header_bytes;
	st = ferry_st_atomic_write(path, emit_tensors, &c);
out:
	json_decref(root);
	ferry_free(header);
	ferry_free(sorted);
	ferry_free(numel);
	return st;
}
