/*
 * Model checkpoints in llm.c's format and ferry's training state file.
 * See include/ferry/checkpoint.h for both layouts.
 *
 * Files are raw little-endian int32/fp32 and are read and written straight
 * from memory, so this code only works on little-endian hosts.
 */
#include "ferry/checkpoint.h"
#include "core/error.h"
#include "core/file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "checkpoint files are little-endian and read without swapping");
_Static_assert(sizeof(float) == 4, "checkpoints store IEEE fp32");

#define HEADER_INTS FERRY_FILE_HEADER_INTS
#define HEADER_BYTES FERRY_FILE_HEADER_BYTES

/* llm.c writes version 5 for bf16 parameters; name it in the error. */
#define LLMC_BF16_VERSION 5

static const int32_t model_versions[] = { FERRY_CHECKPOINT_VERSION };
static const struct ferry_file_version_name model_named[] = {
	{ LLMC_BF16_VERSION, "bf16" },
};
static const struct ferry_file_format model_format = {
	.kind = "llm.c model checkpoint",
	.header = "model",
	.magic = FERRY_CHECKPOINT_MAGIC,
	.versions = model_versions,
	.n_versions = sizeof(model_versions) / sizeof(model_versions[0]),
	.version_note = "fp32",
	.named = model_named,
	.n_named = sizeof(model_named) / sizeof(model_named[0]),
};

static const int32_t state_versions[] = { FERRY_STATE_VERSION };
static const struct ferry_file_format state_format = {
	.kind = "ferry training state",
	.header = "training state",
	.magic = FERRY_STATE_MAGIC,
	.versions = state_versions,
	.n_versions = sizeof(state_versions) / sizeof(state_versions[0]),
};

/* ---- reading helpers -------------------------------------------------------- */

static ferry_status open_for_read(const char *path,
				  const struct ferry_file_format *fmt,
				  int32_t hdr[HEADER_INTS], int *fd,
				  int64_t *size)
{
	if (!path)
		return ferry_error(FERRY_ERR_INVALID, "checkpoint path is NULL");
	return ferry_file_header_open(path, fmt, hdr, fd, size);
}

/* Reads exactly n bytes; the file length was checked already, so a short
 * read means an I/O error or a file that changed under us. */
static ferry_status read_exact(int fd, const char *path, void *buf, size_t n,
			       const char *what)
{
	ssize_t got;

	if (n == 0)
		return FERRY_OK;
	got = ferry_file_read_full(fd, buf, n);
	if (got == (ssize_t)n)
		return FERRY_OK;
	if (got < 0)
		return ferry_error(FERRY_ERR_IO, "%s: error reading %s: %s",
				   path, what, strerror(errno));
	return ferry_error(FERRY_ERR_FORMAT,
			   "%s: unexpected end of file reading %s", path, what);
}

static ferry_status check_length(const char *path, int64_t size,
				 int64_t expect, const char *what)
{
	if (size < expect)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: truncated: %s needs %lld bytes, file has %lld",
				   path, what, (long long)expect, (long long)size);
	if (size > expect)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %lld trailing bytes: %s needs %lld bytes, file has %lld",
				   path, (long long)(size - expect), what,
				   (long long)expect, (long long)size);
	return FERRY_OK;
}

/*
 * Opens a model file, validates header and length, and leaves fd positioned
 * at the first parameter.  On success *n_total is the parameter count.
 */
static ferry_status model_open(const char *path, int *out,
			       struct ferry_model_config *cfg, size_t *n_total)
{
	int32_t hdr[HEADER_INTS];
	struct ferry_model_config c = { .arch = "gpt2" };
	ferry_status st;
	int64_t size = 0;
	size_t n;
	int fd = -1;

	st = open_for_read(path, &model_format, hdr, &fd, &size);
	if (st)
		return st;
	c.max_seq = hdr[2];
	c.vocab = hdr[3];
	c.layers = hdr[4];
	c.heads = hdr[5];
	c.channels = hdr[6];
	c.padded_vocab = hdr[7];
	if (ferry_model_config_complete(&c) != FERRY_OK) {
		char why[256];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		st = ferry_error(FERRY_ERR_FORMAT, "%s: invalid model config: %s",
				 path, why);
		goto fail;
	}
	/* the check bounds n so that 1024 + 4n fits in int64. */
	n = ferry_model_config_num_params(&c);
	st = check_length(path, size,
			  HEADER_BYTES + (int64_t)n * (int64_t)sizeof(float),
			  "header + parameters");
	if (st)
		goto fail;
	*out = fd;
	*cfg = c;
	*n_total = n;
	return FERRY_OK;
fail:
	close(fd);
	return st;
}

ferry_status ferry_checkpoint_read_config(const char *path,
					  struct ferry_model_config *cfg)
{
	struct ferry_model_config c;
	ferry_status st;
	size_t n;
	int fd;

	if (!cfg)
		return ferry_error(FERRY_ERR_INVALID, "%s: config output is NULL",
				   path ? path : "(null)");
	st = model_open(path, &fd, &c, &n);
	if (st)
		return st;
	close(fd); /* read-only: a close error cannot lose data */
	*cfg = c;
	return FERRY_OK;
}

ferry_status ferry_checkpoint_read(const char *path,
				   struct ferry_model_config *cfg,
				   float *params, size_t n_params)
{
	struct ferry_model_config c;
	ferry_status st;
	size_t n;
	int fd;

	if (!cfg || !params)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: config or parameter buffer is NULL",
				   path ? path : "(null)");
	st = model_open(path, &fd, &c, &n);
	if (st)
		return st;
	if (n != n_params) {
		st = ferry_error(FERRY_ERR_INVALID,
				 "%s: model has %zu parameters, buffer holds %zu",
				 path, n, n_params);
		goto out;
	}
	st = read_exact(fd, path, params, n * sizeof(float), "parameters");
	if (st)
		goto out;
	*cfg = c;
out:
	close(fd);
	return st;
}

/* ---- atomic writes ------------------------------------------------------------ */

struct chunk {
	const void *data;
	size_t bytes;
	const char *what;
};

uint64_t ferry_params_hash(const float *params, size_t n)
{
	/* FNV-1a over 32-bit words: fast, and any changed value changes it */
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		uint32_t w;

		memcpy(&w, &params[i], sizeof(w));
		h = (h ^ w) * 0x100000001b3ull;
	}
	return h;
}

/* fsync of the directory holding path, so a rename survives a power loss;
 * best effort (some file systems refuse to fsync directories). */
static void sync_dir(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	int fd;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/*
 * Writes the chunks to "<path>.tmp", flushes and fsyncs it, then renames it
 * over path.  On any failure the tmp file is removed and path is untouched.
 */
static ferry_status write_atomic(const char *path, const struct chunk *chunks,
				 int n_chunks)
{
	ferry_status st = FERRY_OK;
	size_t len = strlen(path);
	FILE *f = NULL;
	char *tmp;
	int i, rc;

	tmp = ferry_malloc(len + sizeof(".tmp"));
	if (!tmp)
		return ferry_error(FERRY_ERR_NOMEM,
				   "%s: out of memory for the temporary name",
				   path);
	memcpy(tmp, path, len);
	memcpy(tmp + len, ".tmp", sizeof(".tmp"));

	f = fopen(tmp, "wb");
	if (!f) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot create: %s", tmp,
				 strerror(errno));
		goto out;
	}
	for (i = 0; i < n_chunks; i++) {
		if (chunks[i].bytes &&
		    fwrite(chunks[i].data, 1, chunks[i].bytes, f) !=
			    chunks[i].bytes) {
			st = ferry_error(FERRY_ERR_IO, "%s: error writing %s: %s",
					 tmp, chunks[i].what, strerror(errno));
			goto fail;
		}
	}
	if (fflush(f) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: error writing: %s", tmp,
				 strerror(errno));
		goto fail;
	}
	/* The data must be on disk before the rename makes it visible. */
	if (fsync(fileno(f)) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", tmp,
				 strerror(errno));
		goto fail;
	}
	rc = fclose(f);
	f = NULL;
	if (rc != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: close failed: %s", tmp,
				 strerror(errno));
		goto fail;
	}
	if (rename(tmp, path) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot rename %s over it: %s",
				 path, tmp, strerror(errno));
		goto fail;
	}
	sync_dir(path); /* make the rename itself durable */
	goto out;
fail:
	if (f)
		fclose(f);
	remove(tmp);
out:
	ferry_free(tmp);
	return st;
}

ferry_status ferry_checkpoint_write(const char *path,
				    const struct ferry_model_config *cfg,
				    const float *params)
{
	int32_t hdr[HEADER_INTS] = { 0 };
	struct ferry_model_config c;
	struct chunk chunks[2];
	size_t n;

	if (!path || !cfg || !params)
		return ferry_error(FERRY_ERR_INVALID,
				   "checkpoint write: NULL path, config or parameters");
	c = *cfg;
	if (strcmp(c.arch, "gpt2") != 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: llm.c model files hold GPT-2 only, not %s", path, c.arch);
	if (ferry_model_config_complete(&c) != FERRY_OK) {
		char why[256];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_INVALID, "%s: invalid model config: %s",
				   path, why);
	}
	cfg = &c;
	n = ferry_model_config_num_params(cfg);
	hdr[0] = FERRY_CHECKPOINT_MAGIC;
	hdr[1] = FERRY_CHECKPOINT_VERSION;
	hdr[2] = cfg->max_seq;
	hdr[3] = cfg->vocab;
	hdr[4] = cfg->layers;
	hdr[5] = cfg->heads;
	hdr[6] = cfg->channels;
	hdr[7] = cfg->padded_vocab;
	chunks[0] = (struct chunk){ hdr, sizeof(hdr), "header" };
	chunks[1] = (struct chunk){ params, n * sizeof(float), "parameters" };
	return write_atomic(path, chunks, 2);
}

/* ---- training state ---------------------------------------------------------- */

/* int64 fields live in two consecutive int32 slots, low half first. */
static void put64(int32_t *hdr, int at, int64_t v)
{
	memcpy(&hdr[at], &v, sizeof(v));
}

static int64_t get64(const int32_t *hdr, int at)
{
	int64_t v;

	memcpy(&v, &hdr[at], sizeof(v));
	return v;
}

/* n parameters -> two fp32 arrays; false when the file would not fit. */
static int state_bytes_ok(size_t n)
{
	return n <= (size_t)((INT64_MAX - HEADER_BYTES) / 8) &&
	       n <= SIZE_MAX / sizeof(float);
}

ferry_status ferry_state_write(const char *path,
			       const struct ferry_train_state *st,
			       const float *m, const float *v, size_t n_params)
{
	int32_t hdr[HEADER_INTS] = { 0 };
	struct chunk chunks[3];

	if (!path || !st || !m || !v)
		return ferry_error(FERRY_ERR_INVALID,
				   "state write: NULL path, state or moments");
	if (n_params == 0 || !state_bytes_ok(n_params))
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: bad parameter count %zu", path, n_params);
	if (st->step < 0 || st->data_shard < 0 || st->data_offset < 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: negative step (%lld) or data position (%lld, %lld)",
				   path, (long long)st->step,
				   (long long)st->data_shard,
				   (long long)st->data_offset);
	hdr[0] = FERRY_STATE_MAGIC;
	hdr[1] = FERRY_STATE_VERSION;
	put64(hdr, 2, st->step);
	put64(hdr, 4, (int64_t)n_params);
	put64(hdr, 6, st->data_shard);
	put64(hdr, 8, st->data_offset);
	put64(hdr, 10, (int64_t)st->rng);
	put64(hdr, 12, (int64_t)st->params_hash);
	put64(hdr, 14, st->total_steps);
	hdr[16] = st->warmup;
	memcpy(&hdr[17], &st->lr, sizeof(float));
	memcpy(&hdr[18], &st->final_lr_frac, sizeof(float));
	put64(hdr, 19, st->data_shards);
	chunks[0] = (struct chunk){ hdr, sizeof(hdr), "header" };
	chunks[1] = (struct chunk){ m, n_params * sizeof(float), "AdamW m" };
	chunks[2] = (struct chunk){ v, n_params * sizeof(float), "AdamW v" };
	return write_atomic(path, chunks, 3);
}

ferry_status ferry_state_read(const char *path, struct ferry_train_state *st,
			      float *m, float *v, size_t n_params)
{
	int32_t hdr[HEADER_INTS];
	struct ferry_train_state s;
	ferry_status rc;
	int64_t size = 0, n;
	int fd = -1;

	if (!st || !m || !v)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: NULL state or moment buffer",
				   path ? path : "(null)");
	rc = open_for_read(path, &state_format, hdr, &fd, &size);
	if (rc)
		return rc;
	n = get64(hdr, 4);
	s.step = get64(hdr, 2);
	s.data_shard = get64(hdr, 6);
	s.data_offset = get64(hdr, 8);
	s.rng = (uint64_t)get64(hdr, 10);
	s.params_hash = (uint64_t)get64(hdr, 12);
	s.total_steps = get64(hdr, 14);
	s.warmup = hdr[16];
	memcpy(&s.lr, &hdr[17], sizeof(float));
	memcpy(&s.final_lr_frac, &hdr[18], sizeof(float));
	s.data_shards = get64(hdr, 19);
	if (n <= 0 || !state_bytes_ok((size_t)n)) {
		rc = ferry_error(FERRY_ERR_FORMAT,
				 "%s: bad parameter count %lld in header", path,
				 (long long)n);
		goto out;
	}
	if (s.step < 0 || s.data_shard < 0 || s.data_offset < 0) {
		rc = ferry_error(FERRY_ERR_FORMAT,
				 "%s: negative step (%lld) or data position (%lld, %lld)",
				 path, (long long)s.step, (long long)s.data_shard,
				 (long long)s.data_offset);
		goto out;
	}
	rc = check_length(path, size, HEADER_BYTES + n * 8,
			  "header + AdamW m and v");
	if (rc)
		goto out;
	if ((uint64_t)n != (uint64_t)n_params) {
		rc = ferry_error(FERRY_ERR_FORMAT,
				 "%s: state is for %lld parameters, model has %zu",
				 path, (long long)n, n_params);
		goto out;
	}
	rc = read_exact(fd, path, m, n_params * sizeof(float), "AdamW m");
	if (rc)
		goto out;
	rc = read_exact(fd, path, v, n_params * sizeof(float), "AdamW v");
	if (rc)
		goto out;
	*st = s;
out:
	close(fd);
	return rc;
}
