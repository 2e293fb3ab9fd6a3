/*
 * Model checkpoints in llm.c's format and ferry's training state file.
 * See include/ferry/checkpoint.h for both layouts; the commit of a model
 * and its state together is src/ckpt/commit.c.
 *
 * Files are raw little-endian int32/fp32 and are read and written straight
 * from memory, so this code only works on little-endian hosts.
 */
#include "ferry/checkpoint.h"
#include "ferry/place.h"
#include "core/bulk_read.h"
#include "core/error.h"
#include "core/file_header.h"
#include "models/model_table.h"
#include "ckpt/commit.h"
#include "ckpt/chunk_write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

static const int32_t state_versions[] = { 1, 2, 3, 4, 5, FERRY_STATE_VERSION };

_Static_assert(FERRY_STATE_PLACE_MAX + 1 == FERRY_PLACE_CHARS, "a state records any placement");
static const struct ferry_file_format state_format = {
	.kind = "ferry training state",
	.header = "training state",
	.magic = FERRY_STATE_MAGIC,
	.versions = state_versions,
	.n_versions = sizeof(state_versions) / sizeof(state_versions[0]),
};

/* ---- hashes ------------------------------------------------------------------- */

uint64_t ferry_ckpt_fnv_words(uint64_t h, const void *p, size_t nbytes)
{
	const unsigned char *b = p;

	for (size_t i = 0; i + 4 <= nbytes; i += 4) {
		uint32_t w;

		memcpy(&w, b + i, sizeof(w));
		h = (h ^ w) * 0x100000001b3ull;
	}
	return h;
}

uint64_t ferry_params_hash(const float *params, size_t n)
{
	/* FNV-1a over 32-bit words: fast, and any changed value changes it */
	return ferry_ckpt_fnv_words(FERRY_FNV_INIT, params, n * sizeof(float));
}

/* Folds each piece read into the checksum (ferry_bulk_read's callback). */
static void hash_piece(void *ctx, const void *p, size_t len, size_t at)
{
	(void)at;
	*(uint64_t *)ctx = ferry_ckpt_fnv_words(*(uint64_t *)ctx, p, len);
}

/* ---- non-finite values ------------------------------------------------------------ */

/* Whether every value is finite, on every thread (gigabytes at 8B); where
 * the first bad one is, the callers look for serially after. */
static bool all_finite(const float *x, size_t n)
{
	int bad = 0;

#pragma omp parallel for reduction(| : bad) schedule(static)
	for (size_t i = 0; i < n; i++)
		bad |= !isfinite(x[i]);
	return !bad;
}

static void index_str(char *buf, size_t n, const struct ferry_param_info *pi, size_t at)
{
	size_t used = 0;

	buf[0] = 0;
	for (int d = 0; d < pi->ndim && used < n; d++) {
		size_t stride = 1;

		for (int e = d + 1; e < pi->ndim; e++)
			stride *= (size_t)pi->shape[e]; /* <= layer_numel: no overflow */
		used += (size_t)snprintf(buf + used, n - used, "%s%zu", d ? ", " : "[", at / stride);
		at %= stride;
	}
	if (used < n)
		snprintf(buf + used, n - used, "]");
}

ferry_status ferry_ckpt_check_finite(const char *file, const struct ferry_model_config *cfg,
				     const float *params, size_t n, ferry_status code, const char *what)
{
	char sb[FERRY_CKPT_SHORT], at[160], name[256];
	struct ferry_param_info pi = { .name = "?" };
	size_t bad = 0, rel, layer = 0;

	if (all_finite(params, n))
		return FERRY_OK;
	while (bad < n && isfinite(params[bad]))
		bad++;
	for (int p = 0; p < ferry_model_param_tensors(cfg); p++) {
		struct ferry_param_info q;

		if (ferry_model_param_info(cfg, p, &q) == FERRY_OK && q.present && bad >= q.offset &&
		    bad - q.offset < q.numel) {
			pi = q;
			break;
		}
	}
	rel = bad - pi.offset;
	if (pi.layers && pi.layer_numel) {
		layer = rel / pi.layer_numel;
		rel %= pi.layer_numel;
	}
	/* the name the file's users know: Hugging Face's when there is one */
	if (pi.hf_name && pi.layers)
		snprintf(name, sizeof(name), pi.hf_name, (int)layer);
	else if (pi.hf_name)
		snprintf(name, sizeof(name), "%s", pi.hf_name);
	else if (pi.layers)
		snprintf(name, sizeof(name), "%s of layer %zu", pi.name, layer);
	else
		snprintf(name, sizeof(name), "%s", pi.name);
	if (pi.ndim)
		index_str(at, sizeof(at), &pi, rel);
	else
		snprintf(at, sizeof(at), "parameter %zu", bad);
	return ferry_error(code, "%s: %s%s holds a non-finite value (%g) at %s", ferry_ckpt_short(file, sb),
			   *what ? what : "tensor ", name, (double)params[bad], at);
}

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

/* The model an llm.c file holds: its header is that model's shape. */
static const struct ferry_model_decl *llmc_model(void)
{
	return ferry_model_decl_of_format(FERRY_CKPT_LLMC);
}

/*
 * Opens a model file, validates header and length, and leaves fd positioned
 * at the first parameter.  On success *n_total is the parameter count.
 */
/* A model file refused (st) that is a training state, named as a model
 * (ck.bin.state for ck.bin): say which file holds the model. */
static ferry_status state_given(const char *path, ferry_status st)
{
	int32_t magic = 0;
	size_t len = strlen(path);
	FILE *f = fopen(path, "rb");
	bool state = f && fread(&magic, sizeof(magic), 1, f) == 1 && magic == FERRY_STATE_MAGIC;

	if (f)
		fclose(f);
	if (!state)
		return st;
	if (len > 6 && !strcmp(path + len - 6, ".state"))
		return ferry_error(FERRY_ERR_FORMAT, "%s is a training state, not a model: the model is %.*s "
				   "(--resume %.*s continues its run)", path, (int)(len - 6), path, (int)(len - 6), path);
	return ferry_error(FERRY_ERR_FORMAT, "%s is a training state, not a model: give the model file it was "
			   "saved beside", path);
}

static ferry_status model_open(const char *path, int *out,
			       struct ferry_model_config *cfg, size_t *n_total)
{
	int32_t hdr[HEADER_INTS];
	struct ferry_model_config c = { 0 };
	ferry_status st;
	int64_t size = 0, bytes;
	size_t n;
	int fd = -1;

	st = open_for_read(path, &model_format, hdr, &fd, &size);
	if (st)
		return st == FERRY_ERR_FORMAT ? state_given(path, st) : st;
	snprintf(c.arch, sizeof(c.arch), "%s", llmc_model()->name);
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
	n = ferry_model_config_num_params(&c);
	if (n > (size_t)INT64_MAX || __builtin_mul_overflow((int64_t)n, (int64_t)sizeof(float), &bytes) ||
	    __builtin_add_overflow(bytes, HEADER_BYTES, &bytes)) {
		st = ferry_error(FERRY_ERR_FORMAT, "%s: %zu parameters do not fit a file", path, n);
		goto fail;
	}
	st = check_length(path, size, bytes, "header + parameters");
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
	st = ferry_bulk_read(fd, path, "parameters", params, n * sizeof(float), HEADER_BYTES, NULL, NULL);
	if (!st)
		st = ferry_ckpt_check_finite(path, &c, params, n, FERRY_ERR_FORMAT, "");
	if (st)
		goto out;
	*cfg = c;
out:
	close(fd);
	return st;
}

ferry_status ferry_ckpt_model_hash(const char *path, uint64_t *hash)
{
	struct ferry_model_config c;
	uint64_t h = FERRY_FNV_INIT;
	ferry_status st;
	size_t n;
	int fd;

	st = model_open(path, &fd, &c, &n);
	if (st)
		return st;
	/* through the reader's own buffers, hashed as they land */
	st = ferry_bulk_read(fd, path, "parameters", NULL, n * sizeof(float), HEADER_BYTES, hash_piece, &h);
	close(fd);
	if (!st)
		*hash = h;
	return st;
}

/* ---- writing ------------------------------------------------------------------ */

/* The model file's header and chunks; FERRY_ERR_INVALID for a config or
 * parameters that cannot be saved. */
static ferry_status model_chunks(const char *path, const struct ferry_model_config *cfg,
				 const float *params, int32_t hdr[HEADER_INTS], struct chunk chunks[2])
{
	char sb[FERRY_CKPT_SHORT];
	struct ferry_model_config c;
	ferry_status st;
	size_t n;

	if (!path || !cfg || !params)
		return ferry_error(FERRY_ERR_INVALID,
				   "checkpoint write: NULL path, config or parameters");
	c = *cfg;
	if (strcmp(c.arch, llmc_model()->name) != 0)
		return ferry_error(FERRY_ERR_INVALID, "%s: llm.c model files hold %s only, not %s",
				   ferry_ckpt_short(path, sb), llmc_model()->title, c.arch);
	if (ferry_model_config_complete(&c) != FERRY_OK) {
		char why[256];

		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_INVALID, "%s: invalid model config: %s",
				   ferry_ckpt_short(path, sb), why);
	}
	n = ferry_model_config_num_params(&c);
	if (n > SIZE_MAX / sizeof(float))
		return ferry_error(FERRY_ERR_INVALID, "%s: %zu parameters do not fit memory", path, n);
	st = ferry_ckpt_check_finite(path, &c, params, n, FERRY_ERR_INVALID, "not saved: ");
	if (st)
		return st;
	memset(hdr, 0, HEADER_BYTES);
	hdr[0] = FERRY_CHECKPOINT_MAGIC;
	hdr[1] = FERRY_CHECKPOINT_VERSION;
	hdr[2] = c.max_seq;
	hdr[3] = c.vocab;
	hdr[4] = c.layers;
	hdr[5] = c.heads;
	hdr[6] = c.channels;
	hdr[7] = c.padded_vocab;
	chunks[0] = (struct chunk){ hdr, HEADER_BYTES, "header" };
	chunks[1] = (struct chunk){ params, n * sizeof(float), "parameters" };
	return FERRY_OK;
}

/* write_atomic (a standalone file) or write_file (one inside a checkpoint
 * directory, which commits as a whole). */
typedef ferry_status (*chunk_writer)(const char *path, const struct chunk *chunks, int n_chunks, int checksum_at);

static ferry_status model_write(const char *path, const struct ferry_model_config *cfg,
				const float *params, chunk_writer writer)
{
	int32_t hdr[HEADER_INTS];
	struct chunk chunks[2];
	ferry_status st = model_chunks(path, cfg, params, hdr, chunks);

	return st ? st : writer(path, chunks, 2, -1);
}

ferry_status ferry_checkpoint_write(const char *path,
				    const struct ferry_model_config *cfg,
				    const float *params)
{
	return model_write(path, cfg, params, ferry_ckpt_write_atomic);
}

ferry_status ferry_ckpt_write_model(const char *file, const struct ferry_model_config *cfg,
				    const float *params)
{
	return model_write(file, cfg, params, ferry_ckpt_write_chunks);
}

/* ---- training state ---------------------------------------------------------- */

#define CHECKSUM_AT 34

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

static void putf(int32_t *hdr, int at, float v)
{
	memcpy(&hdr[at], &v, sizeof(v));
}

static float getf(const int32_t *hdr, int at)
{
	float v;

	memcpy(&v, &hdr[at], sizeof(v));
	return v;
}

/* The glob's bytes in the file: padded to whole words. */
static size_t glob_padded(size_t len)
{
	return (len + 3) & ~(size_t)3;
}

/* n parameters -> two fp32 arrays; false when the file would not fit. */
static int state_bytes_ok(size_t n)
{
	return n <= (size_t)((INT64_MAX - HEADER_BYTES - FERRY_STATE_GLOB_MAX - FERRY_STATE_PLACE_MAX - 8) / 8) &&
	       n <= SIZE_MAX / 8;
}

/* Moments must be finite: a diverged optimizer is not saved. */
static ferry_status check_moments(const char *path, const float *m, const float *v, size_t n)
{
	char sb[FERRY_CKPT_SHORT];
	bool bad = !all_finite(m, n) || !all_finite(v, n);

	for (size_t i = 0; bad && i < n; i++)
		if (!isfinite(m[i]) || !isfinite(v[i]))
			return ferry_error(FERRY_ERR_INVALID,
					   "%s: not saved: AdamW moment %zu is not finite (m %g, v %g)",
					   ferry_ckpt_short(path, sb), i, (double)m[i], (double)v[i]);
	return FERRY_OK;
}

static void state_header(int32_t *hdr, const struct ferry_train_state *st, size_t n, size_t glen, size_t plen)
{
	memset(hdr, 0, HEADER_BYTES);
	hdr[0] = FERRY_STATE_MAGIC;
	hdr[1] = FERRY_STATE_VERSION;
	put64(hdr, 2, st->step);
	put64(hdr, 4, (int64_t)n);
	put64(hdr, 6, st->data_shard);
	put64(hdr, 8, st->data_offset);
	put64(hdr, 10, (int64_t)st->rng);
	put64(hdr, 12, (int64_t)st->params_hash);
	put64(hdr, 14, st->total_steps);
	hdr[16] = st->warmup;
	putf(hdr, 17, st->lr);
	putf(hdr, 18, st->final_lr_frac);
	put64(hdr, 19, st->data_shards);
	hdr[21] = st->B;
	hdr[22] = st->T;
	put64(hdr, 23, (int64_t)st->seed);
	put64(hdr, 25, (int64_t)st->data_hash);
	hdr[27] = (int32_t)glen;
	putf(hdr, 28, st->adamw.weight_decay);
	putf(hdr, 29, st->adamw.grad_clip);
	putf(hdr, 30, st->adamw.beta1);
	putf(hdr, 31, st->adamw.beta2);
	putf(hdr, 32, st->adamw.eps);
	hdr[36] = st->shuffle ? 1 : 0;
	put64(hdr, 38, st->data_epoch);
	hdr[40] = st->lr_schedule;
	putf(hdr, 41, st->min_lr);
	putf(hdr, 42, st->decay_frac);
	hdr[43] = st->grad_accum;
	hdr[44] = (int32_t)plen;
}

/* The variable-length regions of a state file: the globs, the placement. */
struct state_text {
	char glob[FERRY_STATE_GLOB_MAX + 8];
	char place[FERRY_STATE_PLACE_MAX + 8];
	size_t glen, plen;
};

/* The placement into t (padded with zeros); false when too long. */
static bool place_text(const struct ferry_train_state *st, struct state_text *t)
{
	t->plen = strnlen(st->place, sizeof(st->place));
	memset(t->place, 0, sizeof(t->place));
	memcpy(t->place, st->place, t->plen);
	return t->plen <= FERRY_STATE_PLACE_MAX;
}

/* Checks the arguments and lays out the file: header (with its checksum),
 * the padded glob and placement (in t), m, v. */
static ferry_status state_chunks(const char *path, const struct ferry_train_state *st, const float *m,
				 const float *v, size_t n, int32_t *hdr, struct state_text *t, struct chunk chunks[5])
{
	char *gbuf = t->glob;
	char sb[FERRY_CKPT_SHORT];
	const char *name = path ? ferry_ckpt_short(path, sb) : "(null)";
	size_t glen, vlen;

	if (!path || !st || !m || !v)
		return ferry_error(FERRY_ERR_INVALID, "state write: NULL path, state or moments");
	if (n == 0 || !state_bytes_ok(n))
		return ferry_error(FERRY_ERR_INVALID, "%s: bad parameter count %zu", name, n);
	if (st->step < 0 || st->data_shard < 0 || st->data_offset < 0 || st->data_epoch < 0 || st->B < 0 ||
	    st->T < 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: negative step (%lld), data position (%lld, %lld, epoch %lld) or batch (%d x %d)",
				   name, (long long)st->step, (long long)st->data_shard,
				   (long long)st->data_offset, (long long)st->data_epoch, st->B, st->T);
	glen = strnlen(st->data, sizeof(st->data));
	if (glen > FERRY_STATE_GLOB_MAX)
		return ferry_error(FERRY_ERR_INVALID, "%s: the training glob is longer than %d bytes", name,
				   FERRY_STATE_GLOB_MAX);
	if (!place_text(st, t))
		return ferry_error(FERRY_ERR_INVALID, "%s: the placement is longer than %d bytes", name,
				   FERRY_STATE_PLACE_MAX);
	if (check_moments(path, m, v, n))
		return FERRY_ERR_INVALID;
	vlen = strnlen(st->val_data, sizeof(st->val_data));
	memset(gbuf, 0, FERRY_STATE_GLOB_MAX + 8);
	memcpy(gbuf, st->data, glen);
	if (vlen && glen + 1 + vlen <= FERRY_STATE_GLOB_MAX) { /* "train\0val" */
		memcpy(gbuf + glen + 1, st->val_data, vlen);
		glen += 1 + vlen;
	}
	state_header(hdr, st, n, glen, t->plen);
	/* the checksum (CHECKSUM_AT, 0 here) is hashed as the file is written */
	chunks[0] = (struct chunk){ hdr, HEADER_BYTES, "header" };
	chunks[1] = (struct chunk){ gbuf, glob_padded(glen), "training glob" };
	chunks[2] = (struct chunk){ t->place, glob_padded(t->plen), "placement" };
	chunks[3] = (struct chunk){ m, n * sizeof(float), "AdamW m" };
	chunks[4] = (struct chunk){ v, n * sizeof(float), "AdamW v" };
	return FERRY_OK;
}

static ferry_status state_write(const char *path, const struct ferry_train_state *st, const float *m,
				const float *v, size_t n_params, chunk_writer writer)
{
	int32_t hdr[HEADER_INTS];
	struct state_text *t = ferry_malloc(sizeof(*t));
	struct chunk chunks[5];
	ferry_status rc = t ? state_chunks(path, st, m, v, n_params, hdr, t, chunks)
			    : ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", path ? path : "state write");

	if (!rc)
		rc = writer(path, chunks, 5, CHECKSUM_AT);
	ferry_free(t);
	return rc;
}

ferry_status ferry_state_write(const char *path,
			       const struct ferry_train_state *st,
			       const float *m, const float *v, size_t n_params)
{
	return state_write(path, st, m, v, n_params, ferry_ckpt_write_atomic);
}

ferry_status ferry_ckpt_write_state(const char *file, const struct ferry_train_state *st,
				    const float *m, const float *v, size_t n_params)
{
	return state_write(file, st, m, v, n_params, ferry_ckpt_write_chunks);
}

/* The glob region's training glob and, after a NUL (version 4), the
 * validation glob into s. */
static void split_globs(struct ferry_train_state *s, const char *gbuf, size_t glen)
{
	size_t tlen = strnlen(gbuf, glen);

	memcpy(s->data, gbuf, tlen);
	s->data[tlen] = 0;
	s->val_data[0] = 0;
	if (s->version >= 4 && tlen + 1 < glen) {
		memcpy(s->val_data, gbuf + tlen + 1, glen - tlen - 1);
		s->val_data[glen - tlen - 1] = 0;
	}
}

/* The lengths of the variable regions (state_text's glen and plen), checked. */
static ferry_status text_lengths(const char *path, const int32_t *hdr, int32_t version, struct state_text *t)
{
	t->glen = version < 2 ? 0 : hdr[27] < 0 ? SIZE_MAX : (size_t)hdr[27];
	t->plen = version < 6 ? 0 : hdr[44] < 0 ? SIZE_MAX : (size_t)hdr[44];
	if (t->glen > FERRY_STATE_GLOB_MAX)
		return ferry_error(FERRY_ERR_FORMAT, "%s: bad training glob length %d in header", path, hdr[27]);
	if (t->plen > FERRY_STATE_PLACE_MAX)
		return ferry_error(FERRY_ERR_FORMAT, "%s: bad placement length %d in header", path, hdr[44]);
	return FERRY_OK;
}

/* The header's fields into *s; checks them and the file's length.  *n: the
 * parameter count, t's lengths: the glob's (0 for version 1) and the
 * placement's (0 before version 6). */
static ferry_status state_parse(const char *path, const int32_t *hdr, int64_t size,
				struct ferry_train_state *s, int64_t *n, struct state_text *t)
{
	memset(s, 0, sizeof(*s));
	s->version = hdr[1];
	*n = get64(hdr, 4);
	s->step = get64(hdr, 2);
	s->data_shard = get64(hdr, 6);
	s->data_offset = get64(hdr, 8);
	s->rng = (uint64_t)get64(hdr, 10);
	s->params_hash = (uint64_t)get64(hdr, 12);
	s->total_steps = get64(hdr, 14);
	s->warmup = hdr[16];
	s->lr = getf(hdr, 17);
	s->final_lr_frac = getf(hdr, 18);
	s->data_shards = get64(hdr, 19);
	if (s->version >= 2) {
		s->B = hdr[21];
		s->T = hdr[22];
		s->seed = (uint64_t)get64(hdr, 23);
		s->data_hash = (uint64_t)get64(hdr, 25);
		s->adamw = (struct ferry_adamw){ .weight_decay = getf(hdr, 28), .grad_clip = getf(hdr, 29),
						 .beta1 = getf(hdr, 30), .beta2 = getf(hdr, 31),
						 .eps = getf(hdr, 32) };
	}
	if (s->version >= 3) {
		s->shuffle = hdr[36];
		s->data_epoch = get64(hdr, 38);
	}
	if (s->version >= 5) {
		s->lr_schedule = hdr[40];
		s->min_lr = getf(hdr, 41);
		s->decay_frac = getf(hdr, 42);
		s->grad_accum = hdr[43];
	}
	if (*n <= 0 || !state_bytes_ok((size_t)*n))
		return ferry_error(FERRY_ERR_FORMAT, "%s: bad parameter count %lld in header", path,
				   (long long)*n);
	if (s->step < 0 || s->data_shard < 0 || s->data_offset < 0 || s->data_shards < 0 ||
	    s->data_epoch < 0 || s->total_steps < 0 || s->warmup < 0 || s->B < 0 || s->T < 0)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: negative step (%lld), data position (%lld, %lld of %lld shards, epoch %lld), "
				   "schedule (%lld, warmup %d) or batch (%d x %d)",
				   path, (long long)s->step, (long long)s->data_shard, (long long)s->data_offset,
				   (long long)s->data_shards, (long long)s->data_epoch, (long long)s->total_steps,
				   s->warmup, s->B, s->T);
	if (s->lr_schedule < 0 || s->lr_schedule > 3 || !(s->min_lr >= 0) || !isfinite(s->min_lr) ||
	    !(s->decay_frac >= 0 && s->decay_frac <= 1) || s->grad_accum < 0)
		return ferry_error(FERRY_ERR_FORMAT, "%s: bad schedule %d, floor %g, decay fraction %g or "
				   "gradient accumulation %d in header", path, s->lr_schedule, (double)s->min_lr,
				   (double)s->decay_frac, s->grad_accum);
	if (s->shuffle != 0 && s->shuffle != 1)
		return ferry_error(FERRY_ERR_FORMAT, "%s: data order %d in header (0 in order, 1 shuffled)", path,
				   s->shuffle);
	if (text_lengths(path, hdr, s->version, t))
		return FERRY_ERR_FORMAT;
	return check_length(path, size, HEADER_BYTES + (int64_t)(glob_padded(t->glen) + glob_padded(t->plen)) + *n * 8,
			    s->version >= 6 ? "header + training glob + placement + AdamW m and v" :
			    s->version >= 2 ? "header + training glob + AdamW m and v" : "header + AdamW m and v");
}

static ferry_status checksum_matches(const char *path, const int32_t *hdr, uint64_t h)
{
	uint64_t want = (uint64_t)get64(hdr, CHECKSUM_AT);

	if (h == want)
		return FERRY_OK;
	return ferry_error(FERRY_ERR_FORMAT,
			   "%s: checksum mismatch (header says %016llx, contents give %016llx): the file is "
			   "corrupted", path, (unsigned long long)want, (unsigned long long)h);
}

/* The checksum's start: the header with its checksum slots zeroed. */
static uint64_t header_hash(const int32_t *hdr)
{
	int32_t h[HEADER_INTS];

	memcpy(h, hdr, sizeof(h));
	put64(h, CHECKSUM_AT, 0);
	return ferry_ckpt_fnv_words(FERRY_FNV_INIT, h, sizeof(h));
}

/* Opens a state file and parses its header; fd is left after the header. */
static ferry_status state_open(const char *path, int *fd, int32_t *hdr, struct ferry_train_state *s,
			       int64_t *n, struct state_text *t)
{
	int64_t size = 0;
	ferry_status rc = open_for_read(path, &state_format, hdr, fd, &size);

	if (!rc && (rc = state_parse(path, hdr, size, s, n, t)) != FERRY_OK) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

/* The glob and placement regions after the header, into t and s. */
static ferry_status read_texts(int fd, const char *path, struct state_text *t, struct ferry_train_state *s)
{
	ferry_status rc = read_exact(fd, path, t->glob, glob_padded(t->glen), "training glob");

	if (!rc)
		rc = read_exact(fd, path, t->place, glob_padded(t->plen), "placement");
	if (rc)
		return rc;
	split_globs(s, t->glob, t->glen);
	memcpy(s->place, t->place, t->plen);
	s->place[t->plen] = 0;
	return FERRY_OK;
}

/* The moments after the texts, and the checksum over everything, hashed
 * as the pieces land (core/bulk_read.h). */
static ferry_status read_moments(int fd, const char *path, const int32_t *hdr, int32_t version,
				 const struct state_text *t, float *m, float *v, size_t n)
{
	const size_t bytes = n * sizeof(float);
	off_t at = lseek(fd, 0, SEEK_CUR);
	bool sum = version >= 2;
	uint64_t h = 0;
	ferry_status rc;

	if (at < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot tell where the moments start: %s", path, strerror(errno));
	if (sum) {
		h = ferry_ckpt_fnv_words(header_hash(hdr), t->glob, glob_padded(t->glen));
		h = ferry_ckpt_fnv_words(h, t->place, glob_padded(t->plen));
	}
	rc = ferry_bulk_read(fd, path, "AdamW m", m, bytes, (uint64_t)at, sum ? hash_piece : NULL, &h);
	if (!rc)
		rc = ferry_bulk_read(fd, path, "AdamW v", v, bytes, (uint64_t)at + bytes, sum ? hash_piece : NULL, &h);
	return rc || !sum ? rc : checksum_matches(path, hdr, h);
}

/* ferry_state_read, and without m (info alone) ferry_state_read_info. */
static ferry_status state_read(const char *path, struct ferry_train_state *st, float *m, float *v, size_t n_params)
{
	int32_t hdr[HEADER_INTS];
	struct state_text *t = ferry_malloc(sizeof(*t));
	struct ferry_train_state *s = ferry_malloc(sizeof(*s));
	ferry_status rc = t && s ? FERRY_OK : ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", path);
	int64_t n;
	int fd = -1;

	if (!rc)
		rc = state_open(path, &fd, hdr, s, &n, t);
	if (!rc && m && (uint64_t)n != (uint64_t)n_params)
		rc = ferry_error(FERRY_ERR_FORMAT, "%s: state is for %lld parameters, model has %zu", path,
				 (long long)n, n_params);
	if (!rc)
		rc = read_texts(fd, path, t, s);
	if (!rc && m)
		rc = read_moments(fd, path, hdr, s->version, t, m, v, n_params);
	if (!rc)
		*st = *s;
	if (fd >= 0)
		close(fd);
	ferry_free(t);
	ferry_free(s);
	return rc;
}

ferry_status ferry_state_read(const char *path, struct ferry_train_state *st,
			      float *m, float *v, size_t n_params)
{
	if (!st || !m || !v)
		return ferry_error(FERRY_ERR_INVALID, "%s: NULL state or moment buffer", path ? path : "(null)");
	return state_read(path, st, m, v, n_params);
}

ferry_status ferry_state_read_info(const char *path, struct ferry_train_state *st)
{
	if (!st)
		return ferry_error(FERRY_ERR_INVALID, "%s: NULL state", path ? path : "(null)");
	return state_read(path, st, NULL, NULL, 0);
}

ferry_status ferry_ckpt_state_hash(const char *path, uint64_t *params_hash)
{
	int32_t hdr[HEADER_INTS];
	struct ferry_train_state s;
	struct state_text t;
	ferry_status rc;
	int64_t n;
	int fd = -1;

	rc = state_open(path, &fd, hdr, &s, &n, &t);
	if (rc)
		return rc;
	close(fd);
	*params_hash = s.params_hash;
	return FERRY_OK;
}

ferry_status ferry_ckpt_state_verify(const char *path, uint64_t *params_hash)
{
	int32_t hdr[HEADER_INTS];
	struct ferry_train_state s;
	struct state_text t;
	ferry_status rc;
	uint64_t h;
	int64_t n;
	off_t at;
	int fd = -1;

	rc = state_open(path, &fd, hdr, &s, &n, &t);
	if (rc)
		return rc;
	h = header_hash(hdr);
	at = lseek(fd, 0, SEEK_CUR);
	if (at < 0)
		rc = ferry_error(FERRY_ERR_IO, "%s: cannot tell where the state's texts start: %s", path, strerror(errno));
	if (!rc && s.version >= 2)
		rc = ferry_bulk_read(fd, path, "the state", NULL, glob_padded(t.glen) + glob_padded(t.plen) + (size_t)n * 8,
				     (uint64_t)at, hash_piece, &h);
	if (!rc && s.version >= 2)
		rc = checksum_matches(path, hdr, h);
	close(fd);
	if (!rc)
		*params_hash = s.params_hash;
	return rc;
}
