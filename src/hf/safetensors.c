/*
 * safetensors files: reader (single file or sharded directory) and atomic
 * writer.  See include/ferry/safetensors.h for the format and the contract.
 *
 * The reader validates every header up front, keeps one descriptor per file
 * and reads a tensor with pread straight into the caller's buffer: F32 lands
 * in place; BF16/F16 land in the buffer's upper half and are widened in
 * place, front to back (element i's 4 bytes never reach an element > i's
 * 2 bytes), so a read allocates nothing.
 */
#include "ferry/safetensors.h"

#include "core/error.h"
#include "core/file_header.h"
#include "hf/st_io.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's limit on the JSON header. */
#define ST_MAX_HEADER 100000000ull
/* An index file is a name -> file map: a few hundred KB for huge models. */
#define ST_MAX_INDEX (256ull << 20)
#define ST_SINGLE "model.safetensors"
#define ST_INDEX "model.safetensors.index.json"
/* Bytes converted per write() by the writer. */
#define ST_WRITE_CHUNK ((size_t)1 << 20)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_BIG_ENDIAN 1
#else
#define ST_BIG_ENDIAN 0
#endif

/* ---- dtypes and conversions ------------------------------------------------ */

const char *ferry_st_dtype_name(enum ferry_st_dtype dtype)
{
	switch (dtype) {
	case FERRY_ST_F32: return "F32";
	case FERRY_ST_BF16: return "BF16";
	case FERRY_ST_F16: return "F16";
	}
	return "?";
}

size_t ferry_st_dtype_size(enum ferry_st_dtype dtype)
{
	switch (dtype) {
	case FERRY_ST_F32: return 4;
	case FERRY_ST_BF16: return 2;
	case FERRY_ST_F16: return 2;
	}
	return 0;
}

static int dtype_valid(enum ferry_st_dtype dtype)
{
	return ferry_st_dtype_size(dtype) != 0;
}

/* The other dtypes of the format: refused as unsupported, not unknown. */
static const char *const other_dtypes[] = {
	"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F64",
	"C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
};

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

float ferry_st_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t ferry_st_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Round to nearest, ties to even; overflow carries into inf. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float ferry_st_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f) /* inf, NaN (payload kept) */
		return bits_f32(sign | 0x7f800000u | (mant << 13));
	if (exp != 0)
		return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
	if (mant == 0)
		return bits_f32(sign);
	/* Subnormal: mant * 2^-24; normalise. */
	exp = 113;
	while (!(mant & 0x400u)) {
		mant <<= 1;
		exp--;
	}
	return bits_f32(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t ferry_st_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	uint32_t h, rem, m, shift, half;

	if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf) */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* normal: >= 2^-14 */
		h = (a >> 13) - (112u << 10);
		rem = a & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++; /* a carry into the exponent is right */
		return (uint16_t)(sign | h);
	}
	if (a <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
		return sign;
	/* Subnormal result: value = m * 2^(e - 150), in units of 2^-24. */
	m = (a & 0x7fffffu) | 0x800000u;
	shift = 126u - (a >> 23);
	h = m >> shift;
	rem = m & ((1u << shift) - 1u);
	half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (h & 1u)))
		h++;
	return (uint16_t)(sign | h);
}

/* ---- small helpers ----------------------------------------------------------- */

static uint64_t load_le64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void store_le64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* "a/b" (dir "" or NULL gives "b"); NULL when out of memory. */
static char *path_join(const char *dir, const char *name)
{
	size_t nd = dir ? strlen(dir) : 0, nn = strlen(name);
	char *p = ferry_malloc(nd + nn + 2);

	if (!p)
		return NULL;
	if (nd) {
		memcpy(p, dir, nd);
		if (dir[nd - 1] != '/')
			p[nd++] = '/';
	}
	memcpy(p + nd, name, nn + 1);
	return p;
}

/* "[64, 32]" into buf. */
static const char *shape_str(char *buf, size_t size, const int64_t *shape,
			     int ndim)
{
	size_t at = 0;
	int i;

	at += (size_t)snprintf(buf, size, "[");
	for (i = 0; i < ndim && at < size; i++)
		at += (size_t)snprintf(buf + at, size - at, "%s%lld",
				       i ? ", " : "", (long long)shape[i]);
	if (at < size)
		snprintf(buf + at, size - at, "]");
	return buf;
}

/* Stats path, refuses anything but a regular file, then opens it without
 * blocking (so a FIFO swapped in after the stat cannot hang us either). */
static ferry_status open_regular(const char *path, int *fd_out,
				 uint64_t *size)
{
	struct stat sb;
	int fd;

	if (stat(path, &sb) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)",
				   path, ferry_file_kind(sb.st_mode));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)",
				   path, ferry_file_kind(sb.st_mode));
	}
	*fd_out = fd;
	*size = (uint64_t)sb.st_size;
	return FERRY_OK;
}

/* Reads exactly n bytes at off.  The file's length was checked, so an end
 * of file means it shrank under us. */
static ferry_status read_full(int fd, const char *path, void *buf, size_t n,
			      uint64_t off, const char *what)
{
	char *p = buf;

	while (n > 0) {
		size_t want = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
		ssize_t r = pread(fd, p, want, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return ferry_error(FERRY_ERR_IO,
					   "%s: error reading %s: %s", path,
					   what, strerror(errno));
		}
		if (r == 0)
			return ferry_error(FERRY_ERR_IO,
					   "%s: unexpected end of file reading %s (did the file change?)",
					   path, what);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return FERRY_OK;
}

ferry_status ferry_st_read_small_file(const char *path, uint64_t max,
				      char **out, size_t *len)
{
	ferry_status st;
	uint64_t size = 0;
	char *buf;
	int fd = -1;

	st = open_regular(path, &fd, &size);
	if (st)
		return st;
	if (size > max) {
		close(fd);
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %llu bytes, more than the %llu a JSON file of this kind may have",
				   path, (unsigned long long)size,
				   (unsigned long long)max);
	}
	buf = ferry_malloc((size_t)size + 1);
	if (!buf) {
		close(fd);
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for %llu bytes",
				   path, (unsigned long long)size);
	}
	st = read_full(fd, path, buf, (size_t)size, 0, "the file");
	close(fd);
	if (st) {
		ferry_free(buf);
		return st;
	}
	buf[size] = '\0';
	*out = buf;
	*len = (size_t)size;
	return FERRY_OK;
}

/* ---- reader -------------------------------------------------------------------- */

struct st_shard {
	char *path;
	int fd;
	uint64_t size;
};

struct st_entry {
	struct ferry_st_tensor t;
	int shard;
};

struct st_meta {
	char *key, *value;
};

struct ferry_safetensors {
	char *path; /* as given to open, for messages */
	struct st_shard *shards;
	int n_shards;
	struct st_entry *tensors;
	int n_tensors, cap_tensors;
	struct st_entry **by_name; /* sorted by name */
	struct st_meta *meta;
	int n_meta, cap_meta;
};

void ferry_safetensors_close(ferry_safetensors_t h)
{
	int i;

	if (!h)
		return;
	for (i = 0; i < h->n_shards; i++) {
		if (h->shards[i].fd >= 0)
			close(h->shards[i].fd);
		ferry_free(h->shards[i].path);
	}
	for (i = 0; i < h->n_tensors; i++)
		ferry_free((char *)h->tensors[i].t.name);
	for (i = 0; i < h->n_meta; i++) {
		ferry_free(h->meta[i].key);
		ferry_free(h->meta[i].value);
	}
	ferry_free(h->shards);
	ferry_free(h->tensors);
	ferry_free(h->by_name);
	ferry_free(h->meta);
	ferry_free(h->path);
	ferry_free(h);
}

static ferry_status nomem(const char *path)
{
	return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
}

/* Keeps the string values of one file's __metadata__; the first file to
 * name a key wins.  Anything that is not a string map is ignored. */
static ferry_status add_metadata(struct ferry_safetensors *h, const char *path,
				 json_t *obj)
{
	const char *key;
	json_t *val;
	int i;

	if (!json_is_object(obj))
		return FERRY_OK;
	json_object_foreach(obj, key, val) {
		if (!json_is_string(val))
			continue;
		for (i = 0; i < h->n_meta; i++)
			if (!strcmp(h->meta[i].key, key))
				break;
		if (i < h->n_meta)
			continue;
		if (h->n_meta == h->cap_meta) {
			int cap = h->cap_meta ? 2 * h->cap_meta : 8;
			struct st_meta *m = ferry_malloc(sizeof(*m) * (size_t)cap);

			if (!m)
				return nomem(path);
			if (h->n_meta)
				memcpy(m, h->meta, sizeof(*m) * (size_t)h->n_meta);
			ferry_free(h->meta);
			h->meta = m;
			h->cap_meta = cap;
		}
		h->meta[h->n_meta].key = ferry_strdup(key);
		h->meta[h->n_meta].value = ferry_strdup(json_string_value(val));
		if (!h->meta[h->n_meta].key || !h->meta[h->n_meta].value) {
			ferry_free(h->meta[h->n_meta].key);
			ferry_free(h->meta[h->n_meta].value);
			return nomem(path);
		}
		h->n_meta++;
	}
	return FERRY_OK;
}

static ferry_status grow_tensors(struct ferry_safetensors *h, size_t more,
				 const char *path)
{
	size_t need = (size_t)h->n_tensors + more, cap;
	struct st_entry *t;

	if (need <= (size_t)h->cap_tensors)
		return FERRY_OK;
	if (need > INT_MAX / 2)
		return ferry_error(FERRY_ERR_FORMAT, "%s: too many tensors",
				   path);
	cap = (size_t)h->cap_tensors * 2;
	if (cap < need)
		cap = need;
	t = ferry_malloc(sizeof(*t) * cap);
	if (!t)
		return nomem(path);
	if (h->n_tensors)
		memcpy(t, h->tensors, sizeof(*t) * (size_t)h->n_tensors);
	ferry_free(h->tensors);
	h->tensors = t;
	h->cap_tensors = (int)cap;
	return FERRY_OK;
}

/* Reads a non-negative JSON integer. */
static int json_u64(json_t *j, uint64_t *v)
{
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return 0;
	*v = (uint64_t)json_integer_value(j);
	return 1;
}

/* The dtype of tensor name from its header string jd; the format's other
 * dtypes are refused as unsupported, anything else as unknown. */
static ferry_status parse_dtype(const char *path, const char *name, json_t *jd,
				enum ferry_st_dtype *dtype)
{
	const char *ds;
	size_t i;

	if (!json_is_string(jd))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: dtype is not a string", path,
				   name);
	ds = json_string_value(jd);
	if (!strcmp(ds, "F32")) {
		*dtype = FERRY_ST_F32;
	} else if (!strcmp(ds, "BF16")) {
		*dtype = FERRY_ST_BF16;
	} else if (!strcmp(ds, "F16")) {
		*dtype = FERRY_ST_F16;
	} else {
		for (i = 0; i < sizeof(other_dtypes) / sizeof(other_dtypes[0]); i++)
			if (!strcmp(ds, other_dtypes[i]))
				return ferry_error(FERRY_ERR_FORMAT,
						   "%s: tensor %s has unsupported dtype %s (ferry reads F32, BF16 and F16)",
						   path, name, ds);
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s has unknown dtype '%.32s'",
				   path, name, ds);
	}
	return FERRY_OK;
}

/* The shape of tensor name from its header array js into e (whose dtype is
 * set), and its size in bytes, checked for overflow. */
static ferry_status parse_shape(const char *path, const char *name, json_t *js,
				struct st_entry *e, uint64_t *nbytes)
{
	uint64_t numel = 1;
	size_t i, nd;

	if (!json_is_array(js))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: shape is not an array", path,
				   name);
	nd = json_array_size(js);
	if (nd > FERRY_ST_MAX_DIMS)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s has %zu dimensions, more than %d",
				   path, name, nd, FERRY_ST_MAX_DIMS);
	e->t.ndim = (int)nd;
	for (i = 0; i < nd; i++) {
		uint64_t d;

		if (!json_u64(json_array_get(js, i), &d))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: tensor %s: shape[%zu] is not a non-negative integer",
					   path, name, i);
		e->t.shape[i] = (int64_t)d;
		if (__builtin_mul_overflow(numel, d, &numel))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: tensor %s: shape overflows",
					   path, name);
	}
	if (__builtin_mul_overflow(numel, (uint64_t)ferry_st_dtype_size(e->t.dtype),
				   nbytes) ||
	    *nbytes > (uint64_t)SIZE_MAX / 2)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: shape overflows", path,
				   name);
	e->t.numel = (size_t)numel;
	return FERRY_OK;
}

/* Checks the data_offsets jo of tensor e (shape and dtype set, nbytes
 * long) against its size and the data section's, and sets its offset. */
static ferry_status parse_offsets(const char *path, const char *name,
				  json_t *jo, uint64_t nbytes,
				  uint64_t data_size, struct st_entry *e)
{
	uint64_t b, end;

	if (!json_is_array(jo) || json_array_size(jo) != 2 ||
	    !json_u64(json_array_get(jo, 0), &b) ||
	    !json_u64(json_array_get(jo, 1), &end) || end < b)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: data_offsets is not [begin, end] with 0 <= begin <= end",
				   path, name);
	if (end - b != nbytes) {
		char s[160];

		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: shape %s of %s is %llu bytes, but data_offsets [%llu, %llu] span %llu",
				   path, name,
				   shape_str(s, sizeof(s), e->t.shape, e->t.ndim),
				   ferry_st_dtype_name(e->t.dtype),
				   (unsigned long long)nbytes,
				   (unsigned long long)b,
				   (unsigned long long)end,
				   (unsigned long long)(end - b));
	}
	if (end > data_size)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: data_offsets [%llu, %llu] run past the end of the %llu-byte data section",
				   path, name, (unsigned long long)b,
				   (unsigned long long)end,
				   (unsigned long long)data_size);
	e->t.offset = b;
	return FERRY_OK;
}

/* Validates one header entry into e (name not yet set); offsets relative
 * to the data section, checked against its size. */
static ferry_status parse_entry(const char *path, const char *name, json_t *v,
				uint64_t data_size, struct st_entry *e)
{
	json_t *jd, *js, *jo;
	uint64_t nbytes = 0;
	ferry_status st;

	if (!json_is_object(v))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: tensor %s: entry is not a JSON object",
				   path, name);
	jd = json_object_get(v, "dtype");
	js = json_object_get(v, "shape");
	jo = json_object_get(v, "data_offsets");
	if (!jd || !js || !jo)
		return ferry_error(FERRY_ERR_FORMAT, "%s: tensor %s has no %s",
				   path, name,
				   !jd ? "dtype" : !js ? "shape" : "data_offsets");
	st = parse_dtype(path, name, jd, &e->t.dtype);
	if (!st)
		st = parse_shape(path, name, js, e, &nbytes);
	if (!st)
		st = parse_offsets(path, name, jo, nbytes, data_size, e);
	if (st)
		return st;
	e->t.nbytes = (size_t)nbytes;
	return FERRY_OK;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct st_entry *x = a, *y = b;

	if (x->t.offset != y->t.offset)
		return x->t.offset < y->t.offset ? -1 : 1;
	if (x->t.nbytes != y->t.nbytes)
		return x->t.nbytes < y->t.nbytes ? -1 : 1;
	return 0;
}

/* Opens shard sh, checks its 8-byte header length against the file and
 * reads the JSON header into *buf (*len bytes; the caller frees it). */
static ferry_status read_shard_header(struct st_shard *sh, char **buf,
				      uint64_t *len)
{
	const char *path = sh->path;
	unsigned char len8[8];
	ferry_status st;
	uint64_t n;

	st = open_regular(path, &sh->fd, &sh->size);
	if (st)
		return st;
	if (sh->size < 8)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: file is %llu bytes, too short for the 8-byte header length",
				   path, (unsigned long long)sh->size);
	st = read_full(sh->fd, path, len8, 8, 0, "the header length");
	if (st)
		return st;
	n = load_le64(len8);
	if (n > ST_MAX_HEADER)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header length %llu is over the limit of %llu bytes (not a safetensors file?)",
				   path, (unsigned long long)n,
				   (unsigned long long)ST_MAX_HEADER);
	if (n > sh->size - 8)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header length %llu runs past the end of the file (%llu bytes)",
				   path, (unsigned long long)n,
				   (unsigned long long)sh->size);
	if (n < 2)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header length %llu is too small for a JSON object",
				   path, (unsigned long long)n);
	*buf = ferry_malloc((size_t)n);
	if (!*buf)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory for the %llu-byte header",
				   path, (unsigned long long)n);
	*len = n;
	return read_full(sh->fd, path, *buf, (size_t)n, 8, "the header");
}

/* The n-byte header buf of path as a JSON object (*root: the caller's to
 * release, NULL on failure). */
static ferry_status parse_header_json(const char *path, const char *buf,
				      uint64_t n, json_t **root)
{
	json_error_t jerr;

	if (buf[0] != '{')
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header is not a JSON object (does not start with '{')",
				   path);
	*root = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!*root)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header is not valid JSON: %s (at byte %d)",
				   path, jerr.text, jerr.position);
	if (!json_is_object(*root))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: header is not a JSON object", path);
	return FERRY_OK;
}

/* Appends the tensors of shard si's header root (in header order) and keeps
 * its metadata; data_size bounds the offsets. */
static ferry_status add_shard_entries(struct ferry_safetensors *h, int si,
				      json_t *root, uint64_t data_size)
{
	const char *path = h->shards[si].path, *key;
	ferry_status st;
	json_t *val;

	st = grow_tensors(h, json_object_size(root), path);
	if (st)
		return st;
	json_object_foreach(root, key, val) {
		struct st_entry *e = &h->tensors[h->n_tensors];

		if (!strcmp(key, "__metadata__")) {
			st = add_metadata(h, path, val);
			if (st)
				return st;
			continue;
		}
		memset(e, 0, sizeof(*e));
		st = parse_entry(path, key, val, data_size, e);
		if (st)
			return st;
		e->t.name = ferry_strdup(key);
		if (!e->t.name)
			return nomem(path);
		e->t.file = h->shards[si].path;
		e->shard = si;
		h->n_tensors++;
	}
	return FERRY_OK;
}

/* Sorts tensors first.. (one shard's) by offset and checks that they tile
 * its data_size-byte data section: no overlaps, no holes. */
static ferry_status check_tiling(struct ferry_safetensors *h, const char *path,
				 int first, uint64_t data_size)
{
	uint64_t pos = 0;
	int i;

	if (h->n_tensors > first)
		qsort(h->tensors + first, (size_t)(h->n_tensors - first),
		      sizeof(h->tensors[0]), cmp_offset);
	for (i = first; i < h->n_tensors; i++) {
		struct ferry_st_tensor *t = &h->tensors[i].t;

		if (t->offset < pos)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: tensor %s (bytes %llu..%llu of the data) overlaps tensor %s",
					   path, t->name,
					   (unsigned long long)t->offset,
					   (unsigned long long)(t->offset + t->nbytes),
					   h->tensors[i - 1].t.name);
		if (t->offset > pos)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: bytes %llu..%llu of the data belong to no tensor (a hole before tensor %s)",
					   path, (unsigned long long)pos,
					   (unsigned long long)t->offset, t->name);
		pos = t->offset + t->nbytes;
	}
	if (pos != data_size)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %llu bytes of data follow the last tensor (the data section is %llu bytes, the tensors %llu)",
				   path, (unsigned long long)(data_size - pos),
				   (unsigned long long)data_size,
				   (unsigned long long)pos);
	return FERRY_OK;
}

/* Opens shard si, validates its header and appends its tensors (in data
 * order) and metadata. */
static ferry_status load_shard(struct ferry_safetensors *h, int si)
{
	struct st_shard *sh = &h->shards[si];
	uint64_t n = 0, data_start, data_size;
	json_t *root = NULL;
	char *buf = NULL;
	int first = h->n_tensors, i;
	ferry_status st;

	st = read_shard_header(sh, &buf, &n);
	if (st)
		goto out;
	data_start = 8 + n;
	data_size = sh->size - data_start;
	st = parse_header_json(sh->path, buf, n, &root);
	if (!st)
		st = add_shard_entries(h, si, root, data_size);
	if (!st)
		st = check_tiling(h, sh->path, first, data_size);
	if (st)
		goto out;
	for (i = first; i < h->n_tensors; i++)
		h->tensors[i].t.offset += data_start;
out:
	json_decref(root);
	ferry_free(buf);
	return st;
}

static int cmp_entry_name(const void *a, const void *b)
{
	const struct st_entry *x = *(const struct st_entry *const *)a;
	const struct st_entry *y = *(const struct st_entry *const *)b;
	int c = strcmp(x->t.name, y->t.name);

	/* Ties (duplicates) by position, so the message is deterministic. */
	return c ? c : (x > y) - (x < y);
}

/* Sorts the name index; a name in two shards is an error. */
static ferry_status build_name_index(struct ferry_safetensors *h)
{
	int i;

	h->by_name = ferry_malloc(sizeof(*h->by_name) *
				  (size_t)(h->n_tensors ? h->n_tensors : 1));
	if (!h->by_name)
		return nomem(h->path);
	for (i = 0; i < h->n_tensors; i++)
		h->by_name[i] = &h->tensors[i];
	if (h->n_tensors > 1)
		qsort(h->by_name, (size_t)h->n_tensors, sizeof(*h->by_name),
		      cmp_entry_name);
	for (i = 1; i < h->n_tensors; i++) {
		const struct ferry_st_tensor *a = &h->by_name[i - 1]->t;
		const struct ferry_st_tensor *b = &h->by_name[i]->t;

		if (!strcmp(a->name, b->name))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: tensor %s is in both %s and %s",
					   h->path, a->name, a->file, b->file);
	}
	return FERRY_OK;
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Takes ownership of path. */
static void add_shard(struct ferry_safetensors *h, char *path)
{
	struct st_shard *s = &h->shards[h->n_shards++];

	s->path = path;
	s->fd = -1;
	s->size = 0;
}

/* Reads index_path (into *text, the caller's to free), parses it (*root,
 * the caller's to release) and finds its weight_map: *map, *n entries. */
static ferry_status read_index(const char *index_path, char **text,
			       json_t **root, json_t **map, size_t *n)
{
	json_error_t jerr;
	ferry_status st;
	size_t len;

	st = ferry_st_read_small_file(index_path, ST_MAX_INDEX, text, &len);
	if (st)
		return st;
	*root = json_loadb(*text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*root)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: not valid JSON: %s (line %d, column %d)",
				   index_path, jerr.text, jerr.line, jerr.column);
	*map = json_object_get(*root, "weight_map");
	if (!json_is_object(*map))
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: no \"weight_map\" object", index_path);
	*n = json_object_size(*map);
	if (*n == 0)
		return ferry_error(FERRY_ERR_FORMAT, "%s: weight_map is empty",
				   index_path);
	if (*n > INT_MAX / 4)
		return ferry_error(FERRY_ERR_FORMAT, "%s: too many tensors",
				   index_path);
	return FERRY_OK;
}

/* The distinct file names of weight_map map (n entries), sorted: *names
 * (the caller frees the array; the strings are map's), *u of them. */
static ferry_status index_shard_names(const char *index_path, json_t *map,
				      size_t n, const char ***names, size_t *u)
{
	const char *key;
	json_t *val;
	size_t i = 0, k;

	*names = ferry_malloc(sizeof(**names) * n);
	if (!*names)
		return nomem(index_path);
	json_object_foreach(map, key, val) {
		const char *f = json_string_value(val);

		if (!f)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: weight_map[\"%s\"] is not a file name string",
					   index_path, key);
		if (!*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, ".."))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: weight_map[\"%s\"] = \"%s\" is not a file name in the checkpoint's directory",
					   index_path, key, f);
		(*names)[i++] = f;
	}
	qsort(*names, n, sizeof(**names), cmp_str_ptr);
	for (k = 0, i = 0; i < n; i++)
		if (i == 0 || strcmp((*names)[i], (*names)[i - 1]))
			(*names)[k++] = (*names)[i];
	*u = k;
	return FERRY_OK;
}

/* Adds the u shards names[] (files in dir, each of which must exist), loads
 * them and indexes their tensors by name. */
static ferry_status load_index_shards(struct ferry_safetensors *h,
				      const char *index_path, const char *dir,
				      const char **names, size_t u)
{
	ferry_status st;
	size_t i;

	h->shards = ferry_calloc(u, sizeof(*h->shards));
	if (!h->shards)
		return nomem(index_path);
	for (i = 0; i < u; i++) {
		char *p = path_join(dir, names[i]);
		struct stat sb;

		if (!p)
			return nomem(index_path);
		add_shard(h, p);
		if (stat(p, &sb) != 0)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s names shard %s, which is missing: %s",
					   index_path, p, strerror(errno));
	}
	for (i = 0; i < u; i++) {
		st = load_shard(h, (int)i);
		if (st)
			return st;
	}
	return build_name_index(h);
}

/* The index's weight_map (n entries) and the loaded shards must agree,
 * both ways. */
static ferry_status check_index_matches(struct ferry_safetensors *h,
					const char *index_path, json_t *map,
					size_t n)
{
	const char *key;
	json_t *val;
	int k;

	json_object_foreach(map, key, val) {
		const struct ferry_st_tensor *t = ferry_safetensors_find(h, key);
		const char *f = json_string_value(val), *slash;

		if (!t)
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: weight_map puts %s in %s, which does not hold it",
					   index_path, key, f);
		slash = strrchr(t->file, '/');
		if (strcmp(slash ? slash + 1 : t->file, f))
			return ferry_error(FERRY_ERR_FORMAT,
					   "%s: weight_map puts %s in %s, but it is in %s",
					   index_path, key, f, t->file);
	}
	if ((size_t)h->n_tensors == n)
		return FERRY_OK;
	for (k = 0; k < h->n_tensors; k++)
		if (!json_object_get(map, h->tensors[k].t.name))
			break;
	return ferry_error(FERRY_ERR_FORMAT,
			   "%s: %s holds tensor %s, which weight_map does not list",
			   index_path,
			   k < h->n_tensors ? h->tensors[k].t.file : "a shard",
			   k < h->n_tensors ? h->tensors[k].t.name : "?");
}

/* A sharded checkpoint: index_path's weight_map names the shards, which are
 * files in dir. */
static ferry_status load_index(struct ferry_safetensors *h,
			       const char *index_path, const char *dir)
{
	json_t *root = NULL, *map = NULL;
	const char **names = NULL;
	size_t n = 0, u = 0;
	char *text = NULL;
	ferry_status st;

	st = read_index(index_path, &text, &root, &map, &n);
	if (!st)
		st = index_shard_names(index_path, map, n, &names, &u);
	if (!st)
		st = load_index_shards(h, index_path, dir, names, u);
	if (!st)
		st = check_index_matches(h, index_path, map, n);
	ferry_free(names);
	json_decref(root);
	ferry_free(text);
	return st;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

/* Loads the handle's one shard (already added) and indexes its tensors. */
static ferry_status load_single(struct ferry_safetensors *h)
{
	ferry_status st = load_shard(h, 0);

	return st ? st : build_name_index(h);
}

/* A checkpoint directory: model.safetensors, or else the index of a
 * sharded checkpoint. */
static ferry_status open_dir(struct ferry_safetensors *h, const char *path)
{
	ferry_status st;
	struct stat sb;
	char *p = path_join(path, ST_SINGLE);

	if (!p)
		return nomem(path);
	if (stat(p, &sb) == 0) {
		h->shards = ferry_calloc(1, sizeof(*h->shards));
		if (!h->shards) {
			ferry_free(p);
			return nomem(path);
		}
		add_shard(h, p);
		return load_single(h);
	}
	ferry_free(p);
	p = path_join(path, ST_INDEX);
	if (!p)
		return nomem(path);
	if (stat(p, &sb) != 0)
		st = ferry_error(FERRY_ERR_IO, "%s: holds neither %s nor %s",
				 path, ST_SINGLE, ST_INDEX);
	else
		st = load_index(h, p, path);
	ferry_free(p);
	return st;
}

/* An index file named directly: its shards are in its directory. */
static ferry_status open_index_file(struct ferry_safetensors *h,
				    const char *path)
{
	const char *slash = strrchr(path, '/');
	ferry_status st;
	char *dir = ferry_strdup(path);

	if (!dir)
		return nomem(path);
	if (!slash)
		dir[0] = '\0';
	else
		dir[slash - path + (slash == path)] = '\0';
	st = load_index(h, path, dir);
	ferry_free(dir);
	return st;
}

/* One safetensors file. */
static ferry_status open_file(struct ferry_safetensors *h, const char *path)
{
	char *p;

	h->shards = ferry_calloc(1, sizeof(*h->shards));
	p = ferry_strdup(path);
	if (!h->shards || !p) {
		ferry_free(p);
		return nomem(path);
	}
	add_shard(h, p);
	return load_single(h);
}

ferry_status ferry_safetensors_open(const char *path, ferry_safetensors_t *out)
{
	struct ferry_safetensors *h;
	ferry_status st;
	struct stat sb;

	if (!path || !out)
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_safetensors_open: path or out is NULL");
	if (stat(path, &sb) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	h = ferry_calloc(1, sizeof(*h));
	if (!h)
		return nomem(path);
	h->path = ferry_strdup(path);
	if (!h->path) {
		ferry_free(h);
		return nomem(path);
	}
	if (S_ISDIR(sb.st_mode))
		st = open_dir(h, path);
	else if (S_ISREG(sb.st_mode) && ends_with(path, ".json"))
		st = open_index_file(h, path);
	else
		st = open_file(h, path);
	if (st) {
		ferry_safetensors_close(h);
		return st;
	}
	*out = h;
	return FERRY_OK;
}

int ferry_safetensors_count(ferry_safetensors_t h)
{
	return h ? h->n_tensors : 0;
}

const struct ferry_st_tensor *ferry_safetensors_tensor(ferry_safetensors_t h,
						       int i)
{
	if (!h || i < 0 || i >= h->n_tensors)
		return NULL;
	return &h->tensors[i].t;
}

const struct ferry_st_tensor *ferry_safetensors_find(ferry_safetensors_t h,
						     const char *name)
{
	int lo = 0, hi;

	if (!h || !name || !h->by_name)
		return NULL;
	hi = h->n_tensors;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		const struct ferry_st_tensor *t = &h->by_name[mid]->t;
		int c = strcmp(name, t->name);

		if (c == 0)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const char *ferry_safetensors_metadata(ferry_safetensors_t h, const char *key)
{
	int i;

	if (!h || !key)
		return NULL;
	for (i = 0; i < h->n_meta; i++)
		if (!strcmp(h->meta[i].key, key))
			return h->meta[i].value;
	return NULL;
}

ferry_status ferry_safetensors_read_f32(ferry_safetensors_t h,
					const char *name, const int64_t *shape,
					int ndim, float *dst)
{
	const struct ferry_st_tensor *t;
	const struct st_entry *e;
	unsigned char *src;
	ferry_status st;
	size_t i;
	int d;

	if (!h || !name || !dst || ndim < 0 || ndim > FERRY_ST_MAX_DIMS ||
	    (ndim > 0 && !shape))
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_safetensors_read_f32(%s): bad arguments",
				   name ? name : "NULL");
	t = ferry_safetensors_find(h, name);
	if (!t)
		return ferry_error(FERRY_ERR_FORMAT, "%s not found in %s", name,
				   h->path);
	for (d = 0; d < ndim && ndim == t->ndim; d++)
		if (shape[d] != t->shape[d])
			break;
	if (ndim != t->ndim || d != ndim) {
		char have[160], want[160];

		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %s has shape %s, expected %s", t->file,
				   name,
				   shape_str(have, sizeof(have), t->shape, t->ndim),
				   shape_str(want, sizeof(want), shape, ndim));
	}
	e = (const struct st_entry *)t;
	if (t->nbytes == 0)
		return FERRY_OK;
	if (t->dtype == FERRY_ST_F32) {
		st = read_full(h->shards[e->shard].fd, t->file, dst, t->nbytes,
			       t->offset, name);
		if (st || !ST_BIG_ENDIAN)
			return st;
		src = (unsigned char *)dst;
		for (i = 0; i < t->numel; i++, src += 4) {
			uint32_t u = (uint32_t)src[0] | (uint32_t)src[1] << 8 |
				     (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24;

			dst[i] = bits_f32(u);
		}
		return FERRY_OK;
	}
	/* Two-byte elements: read into the upper half, widen in place. */
	src = (unsigned char *)dst + t->nbytes;
	st = read_full(h->shards[e->shard].fd, t->file, src, t->nbytes,
		       t->offset, name);
	if (st)
		return st;
	if (t->dtype == FERRY_ST_BF16) {
		for (i = 0; i < t->numel; i++) {
			uint16_t v = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);

			dst[i] = ferry_st_bf16_to_f32(v);
		}
	} else {
		for (i = 0; i < t->numel; i++) {
			uint16_t v = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);

			dst[i] = ferry_st_f16_to_f32(v);
		}
	}
	return FERRY_OK;
}

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
	unsigned char *buf; /* ST_WRITE_CHUNK bytes, or NULL if not needed */
};

static ferry_status emit_tensors(int fd, const char *tmp, void *vctx)
{
	const struct write_ctx *c = vctx;
	ferry_status st;
	int k;

	st = ferry_st_write_all(fd, tmp, c->header, c->header_bytes);
	for (k = 0; k < c->n && !st; k++) {
		const struct ferry_st_write *t = &c->t[k];
		size_t esize = ferry_st_dtype_size(t->dtype);
		size_t per = ST_WRITE_CHUNK / esize, i = 0;

		if (t->dtype == FERRY_ST_F32 && !ST_BIG_ENDIAN) {
			st = ferry_st_write_all(fd, tmp, t->data,
						c->numel[k] * sizeof(float));
			continue;
		}
		while (i < c->numel[k] && !st) {
			size_t m = c->numel[k] - i < per ? c->numel[k] - i : per;
			unsigned char *o = c->buf;
			size_t j;

			for (j = 0; j < m; j++) {
				float v = t->data[i + j];
				uint32_t u;

				switch (t->dtype) {
				case FERRY_ST_F32:
					u = f32_bits(v);
					*o++ = (unsigned char)u;
					*o++ = (unsigned char)(u >> 8);
					*o++ = (unsigned char)(u >> 16);
					*o++ = (unsigned char)(u >> 24);
					break;
				case FERRY_ST_BF16:
					u = ferry_st_f32_to_bf16(v);
					*o++ = (unsigned char)u;
					*o++ = (unsigned char)(u >> 8);
					break;
				case FERRY_ST_F16:
					u = ferry_st_f32_to_f16(v);
					*o++ = (unsigned char)u;
					*o++ = (unsigned char)(u >> 8);
					break;
				}
			}
			st = ferry_st_write_all(fd, tmp, c->buf, m * esize);
			i += m;
		}
	}
	return st;
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
	if (!dtype_valid(t->dtype))
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
 * for n pointers), and sets numel[] and *need_buf (the bytes of conversion
 * buffer the writer needs). */
static ferry_status check_write_tensors(const char *path,
					const struct ferry_st_write *t, int n,
					const struct ferry_st_write **sorted,
					size_t *numel, size_t *need_buf)
{
	uint64_t total = 0;
	ferry_status st;
	int k;

	for (k = 0; k < n; k++) {
		st = check_write_tensor(path, &t[k], k, &total, &numel[k]);
		if (st)
			return st;
		if (t[k].dtype != FERRY_ST_F32 || ST_BIG_ENDIAN)
			*need_buf = ST_WRITE_CHUNK;
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
		return nomem(path);
	if (json_dumpb(root, (char *)*header + 8, json_len,
		       JSON_COMPACT | JSON_PRESERVE_ORDER) != json_len)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory encoding the header", path);
	memset(*header + 8 + json_len, ' ', padded - json_len);
	store_le64(*header, padded);
	*bytes = 8 + padded;
	return FERRY_OK;
}

ferry_status ferry_safetensors_write(const char *path,
				     const struct ferry_st_write *t, int n,
				     const char *metadata_format)
{
	const struct ferry_st_write **sorted = NULL;
	struct write_ctx c = { 0 };
	size_t *numel = NULL, need_buf = 0, header_bytes = 0;
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
		st = nomem(path);
		goto out;
	}
	st = check_write_tensors(path, t, n, sorted, numel, &need_buf);
	if (!st)
		st = build_header(path, t, n, numel, metadata_format, &root);
	if (!st)
		st = encode_header(path, root, &header, &header_bytes);
	if (st)
		goto out;
	if (need_buf) {
		c.buf = ferry_malloc(need_buf);
		if (!c.buf) {
			st = nomem(path);
			goto out;
		}
	}
	c.t = t;
	c.n = n;
	c.numel = numel;
	c.header = header;
	c.header_bytes = header_bytes;
	st = ferry_st_atomic_write(path, emit_tensors, &c);
out:
	json_decref(root);
	ferry_free(c.buf);
	ferry_free(header);
	ferry_free(sorted);
	ferry_free(numel);
	return st;
}
