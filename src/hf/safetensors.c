/*
 * safetensors files: the reader (single file or sharded directory; the
 * dtypes are st_dtype.c, the file helpers st_io.c, the atomic writer
 * st_write.c).  See include/ferry/safetensors.h for the format and the
 * contract.
 *
 * The reader validates every header up front, keeps one descriptor per file
 * and reads a tensor with pread straight into the caller's buffer: F32 lands
 * in place; BF16/F16 land in the buffer's upper half and are widened in
 * place, front to back (element i's 4 bytes never reach an element > i's
 * 2 bytes), so a read allocates nothing.
 */
#include "ferry/safetensors.h"

#include "core/bulk_read.h"
#include "core/error.h"
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

/* The other dtypes of the format: refused as unsupported, not unknown. */
static const char *const other_dtypes[] = {
	"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F64",
	"C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
};

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
				return ferry_st_nomem(path);
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
			return ferry_st_nomem(path);
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
		return ferry_st_nomem(path);
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
				   ferry_st_shape_str(s, sizeof(s), e->t.shape, e->t.ndim),
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

	st = ferry_st_open_regular(path, &sh->fd, &sh->size);
	if (st)
		return st;
	if (sh->size < 8)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: file is %llu bytes, too short for the 8-byte header length",
				   path, (unsigned long long)sh->size);
	st = ferry_st_read_full(sh->fd, path, len8, 8, 0, "the header length");
	if (st)
		return st;
	n = ferry_st_load_le64(len8);
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
	return ferry_st_read_full(sh->fd, path, *buf, (size_t)n, 8, "the header");
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
			return ferry_st_nomem(path);
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
		return ferry_st_nomem(h->path);
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
		return ferry_st_nomem(index_path);
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
		return ferry_st_nomem(index_path);
	for (i = 0; i < u; i++) {
		char *p = ferry_st_path_join(dir, names[i]);
		struct stat sb;

		if (!p)
			return ferry_st_nomem(index_path);
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
	char *p = ferry_st_path_join(path, ST_SINGLE);

	if (!p)
		return ferry_st_nomem(path);
	if (stat(p, &sb) == 0) {
		h->shards = ferry_calloc(1, sizeof(*h->shards));
		if (!h->shards) {
			ferry_free(p);
			return ferry_st_nomem(path);
		}
		add_shard(h, p);
		return load_single(h);
	}
	ferry_free(p);
	p = ferry_st_path_join(path, ST_INDEX);
	if (!p)
		return ferry_st_nomem(path);
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
		return ferry_st_nomem(path);
	if (!slash)
		dir[0] = '\0';
	else
		dir[slash - path + (slash == path)] = '\0';
	st = load_index(h, path, dir);
	ferry_free(dir);
	return st;
}


/* Where a two-byte tensor's pieces widen to fp32 (ferry_bulk_read's callback). */
struct widen {
	float *dst;
	enum ferry_st_dtype dtype;
};

static void widen_piece(void *ctx, const void *p, size_t len, size_t at)
{
	const struct widen *w = ctx;
	const unsigned char *src = p;
	float *out = w->dst + at / 2;
	const size_t n = len / 2;

#pragma omp parallel for schedule(static) if (n >= ((size_t)1 << 16))
	for (size_t i = 0; i < n; i++) {
		uint16_t v = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);

		out[i] = w->dtype == FERRY_ST_BF16 ? ferry_st_bf16_to_f32(v) : ferry_st_f16_to_f32(v);
	}
}

/* One safetensors file. */
static ferry_status open_file(struct ferry_safetensors *h, const char *path)
{
	char *p;

	h->shards = ferry_calloc(1, sizeof(*h->shards));
	p = ferry_strdup(path);
	if (!h->shards || !p) {
		ferry_free(p);
		return ferry_st_nomem(path);
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
		return ferry_st_nomem(path);
	h->path = ferry_strdup(path);
	if (!h->path) {
		ferry_free(h);
		return ferry_st_nomem(path);
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
				   ferry_st_shape_str(have, sizeof(have), t->shape, t->ndim),
				   ferry_st_shape_str(want, sizeof(want), shape, ndim));
	}
	e = (const struct st_entry *)t;
	if (t->nbytes == 0)
		return FERRY_OK;
	if (t->dtype == FERRY_ST_F32) {
		st = ferry_bulk_read(h->shards[e->shard].fd, t->file, name, dst, t->nbytes, t->offset, NULL, NULL);
		if (st || !ST_BIG_ENDIAN)
			return st;
		src = (unsigned char *)dst;
		for (i = 0; i < t->numel; i++, src += 4) {
			uint32_t u = (uint32_t)src[0] | (uint32_t)src[1] << 8 |
				     (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24;

			dst[i] = ferry_st_bits_f32(u);
		}
		return FERRY_OK;
	}
	/* two-byte elements, widened on every thread as each piece lands */
	return ferry_bulk_read(h->shards[e->shard].fd, t->file, name, NULL, t->nbytes, t->offset, widen_piece,
			       &(struct widen){ dst, t->dtype });
}
