/* Model checkpoint and training state files: layout, round trips, atomic
 * writes, every kind of bad file the readers must reject (non-finite
 * parameters, corrupted state checksums included), version-1 states, and the
 * commit protocol of a model and its state: every write of a save failing
 * in turn, the state a killed save left behind recovered, stale temporaries
 * removed, destinations that must not be replaced and over-long paths
 * refused. */
#include "ferry/checkpoint.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/model.h"

#include <errno.h>
#include <math.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_test_util.h"
#include "ckpt/commit.h"

static long file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void write_raw(const char *path, const void *a, size_t na,
		      const void *b, size_t nb)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(a, 1, na, f) != na ||
	    (nb && fwrite(b, 1, nb, f) != nb) || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void *read_raw(const char *path, long *size)
{
	FILE *f = fopen(path, "rb");
	void *buf;

	*size = file_size(path);
	if (!f || *size < 0) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	buf = malloc((size_t)*size + 1);
	if (!buf || fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
	return buf;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Random finite bit patterns (denormals, huge values, -0 included): the
 * round trip must be bitwise.  (Non-finite values are refused.) */
static void fill_random(float *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint32_t u = next_u32();

		if (((u >> 23) & 0xff) == 0xff)
			u &= ~(1u << 23); /* exponent 254: finite */
		memcpy(&p[i], &u, sizeof(u));
	}
}

/* complete, as a reader returns it */
static const struct ferry_model_config small = {
	.arch = "gpt2", .max_seq = 8, .vocab = 10, .padded_vocab = 64,
	.layers = 2, .heads = 2, .kv_heads = 2, .channels = 4, .head_size = 2, .ffn = 16,
	.tie_embeddings = 1,
};

static void test_config(void)
{
	/* llm.c's ParameterTensors, in order, with their sizes for `small` */
	static const struct { const char *name; size_t n; } llmc[] = {
		{ "wte", 64 * 4 }, { "wpe", 8 * 4 }, { "ln1w", 2 * 4 }, { "ln1b", 2 * 4 },
		{ "qkvw", 2 * 12 * 4 }, { "qkvb", 2 * 12 }, { "attprojw", 2 * 4 * 4 },
		{ "attprojb", 2 * 4 }, { "ln2w", 2 * 4 }, { "ln2b", 2 * 4 }, { "fcw", 2 * 16 * 4 },
		{ "fcb", 2 * 16 }, { "fcprojw", 2 * 4 * 16 }, { "fcprojb", 2 * 4 }, { "lnfw", 4 },
		{ "lnfb", 4 },
	};
	struct ferry_model_config c = small, gpt2 = {
		.max_seq = 1024, .vocab = 50257, .padded_vocab = 50304,
		.layers = 12, .heads = 12, .channels = 768,
	};
	size_t off = 0;

	CHECK_OK(ferry_model_config_complete(&c));
	CHECK(ferry_model_config_num_params(&c) == 784);
	CHECK(ferry_model_param_tensors(&c) == 16);
	for (int i = 0; i < 16; i++) {
		struct ferry_param_info pi;

		CHECK_OK(ferry_model_param_info(&c, i, &pi));
		CHECK(!strcmp(pi.name, llmc[i].name) && pi.numel == llmc[i].n && pi.offset == off);
		off += pi.numel;
	}
	CHECK(ferry_model_param_find(&c, "qkvw") == 4);
	/* GPT-2 small, as llm.c reports it. */
	CHECK_OK(ferry_model_config_complete(&gpt2));
	CHECK(ferry_model_config_num_params(&gpt2) == 124475904);

	CHECK(ferry_pad_vocab(50257) == 50304);
	CHECK(ferry_pad_vocab(257) == 320);
	CHECK(ferry_pad_vocab(64) == 64);
	CHECK(ferry_pad_vocab(5000) == 5120);
	CHECK(ferry_pad_vocab(0) == 0);

	c = gpt2;
	c.channels = 770;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID,
		  "channels (770) is not divisible by heads (12)");
	c = gpt2;
	c.padded_vocab = 50000;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID,
		  "padded_vocab");
	c = gpt2;
	c.layers = 0;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID, "layers");
	c = gpt2;
	c.max_seq = -1;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID, "max_seq");
	c = gpt2;
	c.heads = 0;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID, "heads");
	/* Sizes that overflow any reasonable file. */
	c = gpt2;
	c.layers = 2000000000;
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID, "layers");
	c.layers = 1 << 20;
	c.channels = 1 << 28;
	c.heads = 1;
	c.kv_heads = c.head_size = c.ffn = 0; /* derived again from the new shape */
	CHECK_ERR(ferry_model_config_complete(&c), FERRY_ERR_INVALID,
		  "too many parameters");
	c.channels = 2000000000;
	c.kv_heads = c.head_size = c.ffn = 0;
	CHECK(ferry_model_config_complete(&c) == FERRY_ERR_INVALID);
}

static void test_model_roundtrip(void)
{
	const char *path = tpath("model.bin");
	struct ferry_model_config c;
	float *a, *b, *back;
	int32_t *hdr;
	long size;
	size_t n = 784;
	int i;

	a = malloc(n * sizeof(float));
	b = malloc(n * sizeof(float));
	back = malloc(n * sizeof(float));
	if (!a || !b || !back)
		exit(1);
	fill_random(a, n);
	fill_random(b, n);

	CHECK_OK(ferry_checkpoint_write(path, &small, a));
	CHECK(!exists(tpath("model.bin.tmp")));
	CHECK(file_size(path) == 1024 + 4 * 784);

	/* llm.c's layout, byte for byte. */
	hdr = read_raw(path, &size);
	CHECK(hdr[0] == 20240326 && hdr[1] == 3);
	CHECK(hdr[2] == 8 && hdr[3] == 10 && hdr[4] == 2 && hdr[5] == 2 &&
	      hdr[6] == 4 && hdr[7] == 64);
	for (i = 8; i < 256; i++)
		CHECK(hdr[i] == 0);
	CHECK(size == 1024 + 4 * 784 &&
	      memcmp(hdr + 256, a, n * sizeof(float)) == 0);
	free(hdr);

	memset(&c, 0, sizeof(c));
	CHECK_OK(ferry_checkpoint_read_config(path, &c));
	CHECK(!memcmp(&c, &small, sizeof(c)));
	memset(&c, 0, sizeof(c));
	memset(back, 0, n * sizeof(float));
	CHECK_OK(ferry_checkpoint_read(path, &c, back, n));
	CHECK(!memcmp(&c, &small, sizeof(c)));
	CHECK(!memcmp(back, a, n * sizeof(float)));

	/* Wrong buffer size. */
	CHECK_ERR(ferry_checkpoint_read(path, &c, back, n - 1),
		  FERRY_ERR_INVALID, path);

	/* Writing again replaces the file atomically. */
	CHECK_OK(ferry_checkpoint_write(path, &small, b));
	CHECK(!exists(tpath("model.bin.tmp")));
	CHECK_OK(ferry_checkpoint_read(path, &c, back, n));
	CHECK(!memcmp(back, b, n * sizeof(float)));

	/* A failed write (tmp name blocked by a directory) leaves the old
	 * file as it was. */
	{
		char blocked[64];

		snprintf(blocked, sizeof(blocked), "model.bin.tmp.%ld", (long)getpid());
		CHECK(mkdir(tpath(blocked), 0755) == 0);
		CHECK_ERR(ferry_checkpoint_write(path, &small, a), FERRY_ERR_IO,
			  blocked);
		CHECK(rmdir(tpath(blocked)) == 0);
	}
	CHECK_OK(ferry_checkpoint_read(path, &c, back, n));
	CHECK(!memcmp(back, b, n * sizeof(float)));

	/* A failed rename (target is a directory) removes the tmp file. */
	CHECK(mkdir(tpath("isdir.bin"), 0755) == 0);
	CHECK_ERR(ferry_checkpoint_write(tpath("isdir.bin"), &small, a),
		  FERRY_ERR_IO, "isdir.bin");
	CHECK(!exists(tpath("isdir.bin.tmp")));

	/* Allocation failure while writing: clean error, old file intact. */
	ferry_fault_fail_after(0);
	CHECK_ERR(ferry_checkpoint_write(path, &small, a), FERRY_ERR_NOMEM,
		  path);
	ferry_fault_fail_after(-1);
	CHECK(!exists(tpath("model.bin.tmp")));
	CHECK_OK(ferry_checkpoint_read(path, &c, back, n));
	CHECK(!memcmp(back, b, n * sizeof(float)));

	/* Reads under allocation failure either work or fail cleanly. */
	for (i = 0; i < 4; i++) {
		ferry_status st;

		memset(back, 0, n * sizeof(float));
		ferry_fault_fail_after(i);
		st = ferry_checkpoint_read(path, &c, back, n);
		ferry_fault_fail_after(-1);
		CHECK(st == FERRY_OK || (st == FERRY_ERR_NOMEM &&
					 strstr(ferry_last_error(), path)));
		if (st == FERRY_OK)
			CHECK(!memcmp(back, b, n * sizeof(float)));
	}

	/* Invalid config refused at write; nothing created. */
	c = small;
	c.heads = 3;
	CHECK_ERR(ferry_checkpoint_write(tpath("bad.bin"), &c, a),
		  FERRY_ERR_INVALID, "not divisible");
	CHECK(!exists(tpath("bad.bin")) && !exists(tpath("bad.bin.tmp")));

	free(a);
	free(b);
	free(back);
}

static void model_header(int32_t hdr[256], const struct ferry_model_config *c)
{
	memset(hdr, 0, 256 * sizeof(int32_t));
	hdr[0] = 20240326;
	hdr[1] = 3;
	hdr[2] = c->max_seq;
	hdr[3] = c->vocab;
	hdr[4] = c->layers;
	hdr[5] = c->heads;
	hdr[6] = c->channels;
	hdr[7] = c->padded_vocab;
}

/* Writes a model file with the given header and nbytes of parameters, then
 * expects both readers to fail with want and a message naming the file and
 * containing needle. */
static void expect_bad_model(const char *name, const int32_t hdr[256],
			     size_t hdr_bytes, size_t nbytes, ferry_status want,
			     const char *needle, int line)
{
	const char *path = tpath(name);
	struct ferry_model_config c;
	char *zeros = calloc(1, nbytes + 1);
	float *params = calloc(784, sizeof(float));
	int before = failures;

	if (!zeros || !params)
		exit(1);
	write_raw(path, hdr, hdr_bytes, zeros, nbytes);
	CHECK_ERR(ferry_checkpoint_read_config(path, &c), want, path);
	CHECK_ERR(ferry_checkpoint_read_config(path, &c), want, needle);
	CHECK_ERR(ferry_checkpoint_read(path, &c, params, 784), want, path);
	CHECK_ERR(ferry_checkpoint_read(path, &c, params, 784), want, needle);
	if (failures != before)
		fprintf(stderr, "  (bad model case at %s:%d)\n", __FILE__, line);
	free(zeros);
	free(params);
}

static void test_model_bad(void)
{
	const size_t good = 784 * 4;
	struct ferry_model_config c;
	int32_t hdr[256];

	CHECK_ERR(ferry_checkpoint_read_config(tpath("missing.bin"), &c),
		  FERRY_ERR_IO, tpath("missing.bin"));

	model_header(hdr, &small);
	expect_bad_model("hdr_short.bin", hdr, 100, 0, FERRY_ERR_FORMAT,
			 "too short", __LINE__);
	expect_bad_model("empty.bin", hdr, 0, 0, FERRY_ERR_FORMAT, "too short",
			 __LINE__);
	expect_bad_model("truncated.bin", hdr, 1024, good - 4, FERRY_ERR_FORMAT,
			 "truncated", __LINE__);
	expect_bad_model("hdr_only.bin", hdr, 1024, 0, FERRY_ERR_FORMAT,
			 "truncated", __LINE__);
	expect_bad_model("trailing.bin", hdr, 1024, good + 1, FERRY_ERR_FORMAT,
			 "trailing", __LINE__);

	hdr[0] = 123;
	expect_bad_model("magic.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "bad magic 123, expected 20240326 (llm.c model checkpoint)",
			 __LINE__);
	model_header(hdr, &small);
	hdr[1] = 5;
	expect_bad_model("bf16.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "version 5 (bf16) not supported, need 3 (fp32)",
			 __LINE__);
	hdr[1] = 1;
	expect_bad_model("v1.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "version 1", __LINE__);

	c = small;
	c.heads = 3;
	model_header(hdr, &c);
	expect_bad_model("heads.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "channels (4) is not divisible by heads (3)", __LINE__);
	c = small;
	c.layers = 0;
	model_header(hdr, &c);
	expect_bad_model("layers0.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "layers", __LINE__);
	c = small;
	c.channels = -4;
	model_header(hdr, &c);
	expect_bad_model("negc.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "channels", __LINE__);
	c = small;
	c.max_seq = -8;
	model_header(hdr, &c);
	expect_bad_model("negt.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "max_seq", __LINE__);
	c = small;
	c.padded_vocab = 8;
	model_header(hdr, &c);
	expect_bad_model("vp.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "padded_vocab (8) is smaller than vocab (10)", __LINE__);
	/* A header claiming a huge model must not be believed. */
	c = small;
	c.layers = 1 << 30;
	c.channels = 1 << 20;
	c.heads = 1;
	model_header(hdr, &c);
	expect_bad_model("huge.bin", hdr, 1024, good, FERRY_ERR_FORMAT,
			 "huge.bin", __LINE__);
	/* A directory is not a checkpoint. */
	CHECK_ERR(ferry_checkpoint_read_config(dir, &c), FERRY_ERR_IO, dir);
}

static void test_state(void)
{
	const char *path = tpath("model.bin.state");
	struct ferry_train_state st = {
		.step = 12345678901ll,
		.data_shard = 3,
		.data_offset = 999,
		.rng = 0xdeadbeefcafebabeull,
	}, back;
	const size_t n = 1000;
	float *m = malloc(n * 4), *v = malloc(n * 4);
	float *m2 = malloc(n * 4), *v2 = malloc(n * 4);
	int32_t *raw, hdr[256];
	int64_t i64;
	long size;
	int i;

	if (!m || !v || !m2 || !v2)
		exit(1);
	fill_random(m, n);
	fill_random(v, n);
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	CHECK(!exists(tpath("model.bin.state.tmp")));
	CHECK(file_size(path) == 1024 + 8 * 1000);

	raw = read_raw(path, &size);
	CHECK(raw[0] == 20241121 && raw[1] == 6);
	memcpy(&i64, raw + 2, 8);
	CHECK(i64 == 12345678901ll);
	CHECK(raw[2] == (int32_t)(12345678901ll & 0xffffffff) && raw[3] == 2);
	memcpy(&i64, raw + 4, 8);
	CHECK(i64 == 1000);
	memcpy(&i64, raw + 6, 8);
	CHECK(i64 == 3);
	memcpy(&i64, raw + 8, 8);
	CHECK(i64 == 999);
	for (i = 12; i < 256; i++)
		CHECK(raw[i] == 0 || i == 34 || i == 35); /* [34..35]: checksum */
	CHECK(!memcmp(raw + 256, m, n * 4) && !memcmp(raw + 256 + n, v, n * 4));
	memcpy(hdr, raw, sizeof(hdr));
	free(raw);

	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(back.step == st.step && back.data_shard == st.data_shard &&
	      back.data_offset == st.data_offset && back.rng == st.rng);
	CHECK(!memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4));

	/* Replace: a second write wins. */
	st.step = 7;
	CHECK_OK(ferry_state_write(path, &st, v, m, n));
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(back.step == 7 && !memcmp(m2, v, n * 4) && !memcmp(v2, m, n * 4));

	/* Mismatched model. */
	CHECK_ERR(ferry_state_read(path, &back, m2, v2, n - 1),
		  FERRY_ERR_FORMAT, path);
	CHECK_ERR(ferry_state_read(path, &back, m2, v2, n + 1),
		  FERRY_ERR_FORMAT, "1000 parameters");

	/* Bad files. */
	CHECK_ERR(ferry_state_read(tpath("none.state"), &back, m2, v2, n),
		  FERRY_ERR_IO, tpath("none.state"));
	write_raw(tpath("hdronly.state"), hdr, 1024, NULL, 0);
	CHECK_ERR(ferry_state_read(tpath("hdronly.state"), &back, m2, v2, n),
		  FERRY_ERR_FORMAT, "hdronly.state: truncated");
	{
		float *big = calloc(2 * n + 1, 4);

		if (!big)
			exit(1);
		write_raw(tpath("short.state"), hdr, 1024, big, n * 8 - 1);
		CHECK_ERR(ferry_state_read(tpath("short.state"), &back, m2, v2,
					   n),
			  FERRY_ERR_FORMAT, "short.state: truncated");
		write_raw(tpath("trail.state"), hdr, 1024, big, n * 8 + 2);
		CHECK_ERR(ferry_state_read(tpath("trail.state"), &back, m2, v2,
					   n),
			  FERRY_ERR_FORMAT, "trailing");
		hdr[0] = 42;
		write_raw(tpath("magic.state"), hdr, 1024, big, n * 8);
		CHECK_ERR(ferry_state_read(tpath("magic.state"), &back, m2, v2,
					   n),
			  FERRY_ERR_FORMAT, "bad magic 42");
		hdr[0] = 20241121;
		hdr[1] = 7;
		write_raw(tpath("ver.state"), hdr, 1024, big, n * 8);
		CHECK_ERR(ferry_state_read(tpath("ver.state"), &back, m2, v2, n),
			  FERRY_ERR_FORMAT, "version 7 not supported, need 1, 2, 3, 4, 5 or 6");
		hdr[1] = 1;
		i64 = -5;
		memcpy(hdr + 6, &i64, 8);
		write_raw(tpath("neg.state"), hdr, 1024, big, n * 8);
		CHECK_ERR(ferry_state_read(tpath("neg.state"), &back, m2, v2, n),
			  FERRY_ERR_FORMAT, "neg.state");
		free(big);
	}
	write_raw(tpath("hdr.state"), hdr, 10, NULL, 0);
	CHECK_ERR(ferry_state_read(tpath("hdr.state"), &back, m2, v2, n),
		  FERRY_ERR_FORMAT, "too short");

	/* Argument checks. */
	CHECK_ERR(ferry_state_write(path, &st, m, v, 0), FERRY_ERR_INVALID,
		  path);
	st.data_offset = -1;
	CHECK_ERR(ferry_state_write(path, &st, m, v, n), FERRY_ERR_INVALID,
		  path);
	st.data_offset = 0;
	ferry_fault_fail_after(0);
	CHECK_ERR(ferry_state_write(path, &st, m, v, n), FERRY_ERR_NOMEM, path);
	ferry_fault_fail_after(-1);
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(back.step == 7);

	free(m);
	free(v);
	free(m2);
	free(v2);
}

/* ---- non-finite values, checksums, version 1 -------------------------------------- */

/* Offset of parameter `name`'s layer l, element at, in small's array. */
static size_t param_at(const char *name, int l, size_t at)
{
	struct ferry_param_info pi;
	int p = ferry_model_param_find(&small, name);

	if (p < 0 || ferry_model_param_info(&small, p, &pi) != FERRY_OK) {
		fprintf(stderr, "no parameter %s\n", name);
		exit(1);
	}
	return pi.offset + (size_t)l * pi.layer_numel + at;
}

static void poke_float(const char *path, long offset, float f)
{
	FILE *fp = fopen(path, "r+b");

	if (!fp || fseek(fp, offset, SEEK_SET) != 0 || fwrite(&f, 4, 1, fp) != 1 || fclose(fp) != 0) {
		fprintf(stderr, "cannot patch %s\n", path);
		exit(1);
	}
}

static void test_non_finite(void)
{
	const char *path = tpath("nan.bin");
	struct ferry_model_config c;
	const size_t n = 784;
	float *a = calloc(n, 4), *back = calloc(n, 4);
	size_t q = param_at("qkvw", 1, 5); /* qkvw is [12, 4] per layer: [1, 1] */
	long size;
	char *keep;

	if (!a || !back)
		exit(1);
	fill_random(a, n);
	CHECK_OK(ferry_checkpoint_write(path, &small, a));
	poke_float(path, 1024 + 4 * (long)q, NAN);
	CHECK_ERR(ferry_checkpoint_read(path, &c, back, n), FERRY_ERR_FORMAT,
		  "nan.bin: tensor qkvw of layer 1 holds a non-finite value (nan) at [1, 1]");
	CHECK_OK(ferry_checkpoint_read_config(path, &c)); /* the header alone is fine */
	poke_float(path, 1024 + 4 * (long)q, a[q]);
	poke_float(path, 1024 + 4 * (long)param_at("wte", 0, 3), -INFINITY);
	CHECK_ERR(ferry_checkpoint_read(path, &c, back, n), FERRY_ERR_FORMAT,
		  "tensor wte holds a non-finite value (-inf) at [0, 3]");

	/* writers refuse them before writing anything */
	CHECK_OK(ferry_checkpoint_write(path, &small, a));
	keep = read_raw(path, &size);
	a[q] = NAN;
	CHECK_ERR(ferry_checkpoint_write(path, &small, a), FERRY_ERR_INVALID,
		  "not saved: qkvw of layer 1 holds a non-finite value (nan) at [1, 1]");
	{
		long size2;
		char *now = read_raw(path, &size2);

		CHECK(size2 == size && !memcmp(now, keep, (size_t)size));
		free(now);
	}
	free(keep);
	free(a);
	free(back);
}

/* A version-4 file (without a validation glob) back as a version-2 one: the order fields zeroed, the
 * version 2, the checksum computed again (over header, glob, m, v). */
static void write_as_v2(const char *from, const char *to, size_t glob_bytes, size_t n)
{
	long size;
	int32_t *raw = read_raw(from, &size);
	uint64_t h;

	raw[1] = 2;
	memset(raw + 34, 0, 6 * 4); /* the checksum and [36..39] */
	h = ferry_ckpt_fnv_words(FERRY_FNV_INIT, raw, (size_t)size);
	CHECK((size_t)size == 1024 + glob_bytes + n * 8);
	memcpy(raw + 34, &h, 8);
	write_raw(to, raw, (size_t)size, NULL, 0);
	free(raw);
}

static void test_state_v2(void)
{
	const char *path = tpath("v2.state");
	const size_t n = 300;
	struct ferry_train_state st = { .step = 5, .data_shard = 1, .data_offset = 40, .data_shards = 2,
					.rng = 99, .params_hash = 0x1234, .total_steps = 50, .warmup = 3,
					.lr = 1e-3f, .final_lr_frac = 0.25f, .B = 8, .T = 64, .seed = 4242,
					.adamw = { .beta1 = 0.8f, .beta2 = 0.9f, .eps = 1e-6f, .weight_decay = 0.05f,
						   .grad_clip = 2.0f },
					.data_hash = 0xfeedull, .shuffle = 1, .data_epoch = 3 };
	struct ferry_train_state back;
	float *m = malloc(n * 4), *v = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4);
	int32_t *raw;
	long size;

	if (!m || !v || !m2 || !v2)
		exit(1);
	fill_random(m, n);
	fill_random(v, n);
	snprintf(st.data, sizeof(st.data), "data/train_*.bin"); /* 16 bytes */
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	CHECK(file_size(path) == 1024 + 16 + 8 * 300);
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(back.version == 6 && !back.val_data[0] && !back.place[0]);
	/* version 4: the validation glob after the training glob and a NUL */
	snprintf(st.val_data, sizeof(st.val_data), "data/val_*.bin"); /* 14 bytes: 16 + 1 + 14, padded 32 */
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	CHECK(file_size(path) == 1024 + 32 + 8 * 300);
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(!strcmp(back.val_data, "data/val_*.bin") && !strcmp(back.data, "data/train_*.bin"));
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read_info(path, &back));
	CHECK(!strcmp(back.val_data, "data/val_*.bin") && !strcmp(back.data, "data/train_*.bin"));
	st.val_data[0] = 0; /* the older versions below are made from the file without it */
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	CHECK(back.version == 6 && back.shuffle == 1 && back.data_epoch == 3 && back.B == 8 && back.T == 64 &&
	      back.seed == 4242 &&
	      back.data_hash == 0xfeedull && !strcmp(back.data, "data/train_*.bin") &&
	      back.adamw.beta1 == 0.8f && back.adamw.beta2 == 0.9f && back.adamw.eps == 1e-6f &&
	      back.adamw.weight_decay == 0.05f && back.adamw.grad_clip == 2.0f && back.total_steps == 50 &&
	      back.warmup == 3 && back.lr == 1e-3f && back.final_lr_frac == 0.25f && back.step == 5);
	CHECK(!memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4));
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read_info(path, &back));
	CHECK(back.step == 5 && !strcmp(back.data, "data/train_*.bin"));

	/* one flipped bit anywhere is refused */
	{
		unsigned char *bytes;
		long offs[] = { 1024 + 16 + 4 * 17, 1024 + 16 + 4 * 300 + 4 * 299 + 3, 1024 + 3, 8 * 4 };

		for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++) {
			bytes = read_raw(path, &size);
			bytes[offs[k]] ^= 0x10;
			write_raw(tpath("flip.state"), bytes, (size_t)size, NULL, 0);
			free(bytes);
			CHECK_ERR(ferry_state_read(tpath("flip.state"), &back, m2, v2, n), FERRY_ERR_FORMAT,
				  "checksum mismatch");
		}
	}
	/* the writer refuses non-finite moments */
	{
		float v7 = v[7];

		v[7] = NAN;
		CHECK_ERR(ferry_state_write(tpath("nanm.state"), &st, m, v, n), FERRY_ERR_INVALID,
			  "AdamW moment 7 is not finite");
		CHECK(!exists(tpath("nanm.state")));
		v[7] = v7;
	}

	/* a version-2 file (no data order: in order) reads */
	write_as_v2(path, tpath("v2only.state"), 16, n);
	memset(&back, 0xff, sizeof(back));
	CHECK_OK(ferry_state_read(tpath("v2only.state"), &back, m2, v2, n));
	CHECK(back.version == 2 && back.shuffle == 0 && back.data_epoch == 0 && back.B == 8 && back.seed == 4242 &&
	      !strcmp(back.data, "data/train_*.bin"));
	/* a data order other than 0 and 1 is refused */
	raw = read_raw(path, &size);
	raw[36] = 2;
	write_raw(tpath("order.state"), raw, (size_t)size, NULL, 0);
	free(raw);
	CHECK_ERR(ferry_state_read(tpath("order.state"), &back, m2, v2, n), FERRY_ERR_FORMAT,
		  "data order 2 in header");

	/* a version-1 file (no fields past [20], no glob, no checksum) reads */
	raw = read_raw(path, &size);
	raw[1] = 1;
	memset(raw + 21, 0, (256 - 21) * 4);
	write_raw(tpath("v1.state"), raw, 1024, (char *)raw + 1024 + 16, n * 8);
	free(raw);
	memset(&back, 0xff, sizeof(back));
	CHECK_OK(ferry_state_read(tpath("v1.state"), &back, m2, v2, n));
	CHECK(back.version == 1 && back.step == 5 && back.total_steps == 50 && back.lr == 1e-3f &&
	      back.data_shards == 2 && back.B == 0 && back.T == 0 && back.seed == 0 && back.data_hash == 0 &&
	      back.data[0] == 0);
	CHECK(!memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4));
	free(m);
	free(v);
	free(m2);
	free(v2);
}

/* Version 6: the run's placement after the globs, in the checksum; a
 * version-5 file (none recorded) reads "". */
static void test_state_v6(void)
{
	const char *path = tpath("v6.state");
	const size_t n = 64;
	static struct ferry_train_state st = { .step = 2, .total_steps = 10, .lr = 1e-3f, .B = 4, .T = 16 }, back;
	static const char place[] = "layers.weights=host:stream(1),adam=host:cpu"; /* 44 bytes */
	float m[64], v[64], m2[64], v2[64];
	int32_t *raw;
	long size;
	uint64_t h;

	fill_random(m, n);
	fill_random(v, n);
	snprintf(st.data, sizeof(st.data), "d_*.bin"); /* 7 bytes, padded 8 */
	snprintf(st.place, sizeof(st.place), "%s", place);
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	CHECK(file_size(path) == 1024 + 8 + 44 + 8 * (long)n);
	CHECK_OK(ferry_state_read(path, &back, m2, v2, n));
	CHECK(back.version == 6 && !strcmp(back.place, place) && !strcmp(back.data, "d_*.bin"));
	CHECK(!memcmp(m, m2, sizeof(m)) && !memcmp(v, v2, sizeof(v)));
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_state_read_info(path, &back));
	CHECK(!strcmp(back.place, place));
	/* a flipped bit in the placement is refused */
	raw = read_raw(path, &size);
	((unsigned char *)raw)[1024 + 8 + 3] ^= 0x10;
	write_raw(tpath("v6flip.state"), raw, (size_t)size, NULL, 0);
	free(raw);
	CHECK_ERR(ferry_state_read(tpath("v6flip.state"), &back, m2, v2, n), FERRY_ERR_FORMAT, "checksum mismatch");
	/* version 5: the same file without the placement */
	st.place[0] = 0;
	CHECK_OK(ferry_state_write(path, &st, m, v, n));
	raw = read_raw(path, &size);
	raw[1] = 5;
	memset(raw + 34, 0, 8);
	h = ferry_ckpt_fnv_words(FERRY_FNV_INIT, raw, (size_t)size);
	memcpy(raw + 34, &h, 8);
	write_raw(tpath("v5.state"), raw, (size_t)size, NULL, 0);
	free(raw);
	memset(&back, 0xff, sizeof(back));
	CHECK_OK(ferry_state_read(tpath("v5.state"), &back, m2, v2, n));
	CHECK(back.version == 5 && back.place[0] == 0 && back.step == 2);
	/* too long a placement is refused before anything is written */
	memset(st.place, 'a', sizeof(st.place));
	CHECK_ERR(ferry_state_write(tpath("long.state"), &st, m, v, n), FERRY_ERR_INVALID, "placement is longer");
	CHECK(!exists(tpath("long.state")));
}

/* ---- the commit protocol ------------------------------------------------------------- */

static long dead_pid(void)
{
	pid_t p = fork();

	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (long)p;
}

/* Entries beside the checkpoint named base that are temporaries. */
static int temporaries(const char *base)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	size_t n = strlen(base);
	int count = 0;

	while (dp && (e = readdir(dp)))
		if (!strncmp(e->d_name, base, n) && (strstr(e->d_name + n, ".tmp") || strstr(e->d_name + n, ".old"))) {
			fprintf(stderr, "  temporary: %s\n", e->d_name);
			count++;
		}
	if (dp)
		closedir(dp);
	return count;
}

struct pair {
	float *p, *m, *v;
	struct ferry_train_state st;
};

#define NP 784

static void pair_make(struct pair *x, int64_t step)
{
	x->p = malloc(NP * 4);
	x->m = malloc(NP * 4);
	x->v = malloc(NP * 4);
	if (!x->p || !x->m || !x->v)
		exit(1);
	fill_random(x->p, NP);
	fill_random(x->m, NP);
	fill_random(x->v, NP);
	memset(&x->st, 0, sizeof(x->st));
	x->st.step = step;
	x->st.total_steps = 100;
	x->st.lr = 1e-3f;
	x->st.B = 2;
	x->st.T = 4;
	x->st.params_hash = ferry_params_hash(x->p, NP);
	snprintf(x->st.data, sizeof(x->st.data), "shards_%lld_*.bin", (long long)step);
}

static void pair_free(struct pair *x)
{
	free(x->p);
	free(x->m);
	free(x->v);
}

/* path and path.state hold x, exactly. */
static bool holds(const char *path, const struct pair *x)
{
	static float p[NP], m[NP], v[NP];
	struct ferry_model_config c;
	struct ferry_train_state st;
	char sp[4300];

	snprintf(sp, sizeof(sp), "%s.state", path);
	return ferry_checkpoint_read(path, &c, p, NP) == FERRY_OK && !memcmp(p, x->p, sizeof(p)) &&
	       ferry_state_read(sp, &st, m, v, NP) == FERRY_OK && !memcmp(m, x->m, sizeof(m)) &&
	       !memcmp(v, x->v, sizeof(v)) && st.step == x->st.step && st.params_hash == ferry_params_hash(p, NP) &&
	       !strcmp(st.data, x->st.data);
}

static ferry_status save(const char *path, const struct pair *x)
{
	return ferry_checkpoint_save(path, &small, x->p, &x->st, x->m, x->v, NP);
}

/* Every write-path operation of a save fails in turn, as on a full disk:
 * the previous pair stays, whole, and no temporary is left. */
static void test_commit_full_disk(struct pair *a, struct pair *b)
{
	const char *path = tpath("pair.bin");
	int failed = 0;

	for (long k = 0; k < 100; k++) {
		ferry_status st;

		CHECK_OK(save(path, a));
		ferry_fault_fail_write_after(k);
		st = save(path, b);
		ferry_fault_fail_write_after(-1);
		CHECK(temporaries("pair.bin") == 0);
		if (st == FERRY_OK) {
			CHECK(holds(path, b));
			break;
		}
		CHECK_ERR(st, FERRY_ERR_IO, "No space left on device");
		CHECK(holds(path, a));
		failed++;
	}
	printf("a save survives each of its %d writes failing (the previous pair intact, no temporary left)\n",
	       failed);
	CHECK(failed == 8); /* model: header, parameters, fsync; state: header, glob, m, v, fsync */
}

/* The moment a kill -9 between the two renames leaves: the new model in
 * place, the old state, the new state as a dead process's temporary. */
static void test_commit_recovery(struct pair *a, struct pair *b)
{
	const char *path = tpath("pair.bin");
	char name[128];
	long pid = dead_pid(), pid2 = dead_pid();

	CHECK_OK(save(path, a));
	CHECK_OK(ferry_checkpoint_write(path, &small, b->p));
	snprintf(name, sizeof(name), "pair.bin.state.tmp.%ld", pid);
	CHECK_OK(ferry_state_write(tpath(name), &b->st, b->m, b->v, NP));
	/* a killed save's partial temporaries (both still there: no commit) */
	snprintf(name, sizeof(name), "pair.bin.tmp.%ld", pid2);
	write_raw(tpath(name), "partial", 7, NULL, 0);
	snprintf(name, sizeof(name), "pair.bin.state.tmp.%ld", pid2);
	CHECK_OK(ferry_state_write(tpath(name), &b->st, b->m, b->v, NP));
	/* a live process's temporary is not touched */
	write_raw(tpath("pair.bin.tmp.1"), "live", 4, NULL, 0);
	CHECK(!holds(path, b) && !holds(path, a));
	CHECK_OK(ferry_checkpoint_recover(path));
	CHECK(holds(path, b));
	CHECK(exists(tpath("pair.bin.tmp.1")));
	unlink(tpath("pair.bin.tmp.1"));
	CHECK(temporaries("pair.bin") == 0);

	/* a corrupted candidate is not paired: the mix stays refused */
	CHECK_OK(save(path, a));
	CHECK_OK(ferry_checkpoint_write(path, &small, b->p));
	snprintf(name, sizeof(name), "pair.bin.state.tmp.%ld", pid);
	CHECK_OK(ferry_state_write(tpath(name), &b->st, b->m, b->v, NP));
	poke_float(tpath(name), 1024 + 20 + 4 * 3, 0.5f);
	CHECK_OK(ferry_checkpoint_recover(path));
	CHECK(!holds(path, b));
	CHECK(temporaries("pair.bin") == 0);
	/* the next save makes a whole pair again */
	CHECK_OK(save(path, a));
	CHECK(holds(path, a));
}

static void test_commit_paths(struct pair *a)
{
	char deep[4200], name[300], cwd[4096];
	size_t at;
	long size;
	char *keep;

	/* destinations that must not be replaced */
	CHECK(symlink("pair.bin", tpath("link.bin")) == 0);
	CHECK_ERR(save(tpath("link.bin"), a), FERRY_ERR_INVALID, "link.bin is a symbolic link");
	CHECK_ERR(ferry_checkpoint_write(tpath("link.bin"), &small, a->p), FERRY_ERR_INVALID, "symbolic link");
	CHECK(symlink("elsewhere", tpath("s.bin.state")) == 0);
	CHECK_ERR(ferry_checkpoint_check_save_path(tpath("s.bin"), &small), FERRY_ERR_INVALID,
		  "s.bin.state (the state file of the save) is a symbolic link");
	CHECK(mkfifo(tpath("fifo.bin"), 0600) == 0);
	CHECK_ERR(save(tpath("fifo.bin"), a), FERRY_ERR_INVALID, "not a regular file (a device, FIFO or socket)");
	CHECK_ERR(ferry_checkpoint_check_save_path("/dev/null", &small), FERRY_ERR_INVALID,
		  "/dev/null is not a regular file");
	{
		struct stat sb;

		CHECK(lstat(tpath("link.bin"), &sb) == 0 && S_ISLNK(sb.st_mode));
		CHECK(lstat(tpath("fifo.bin"), &sb) == 0 && S_ISFIFO(sb.st_mode));
		CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
	}
	CHECK_ERR(ferry_checkpoint_check_save_path(tpath("no/such/dir/x.bin"), &small), FERRY_ERR_IO,
		  "cannot save there");

	/* a 4088-byte path: a pair there (made through a short relative name)
	 * stays whole; the save is refused with the whole story */
	snprintf(deep, sizeof(deep), "%s", dir);
	while (strlen(deep) + 201 < 4088 - 40) {
		at = strlen(deep);
		deep[at++] = '/';
		memset(deep + at, 'd', 200);
		deep[at + 200] = 0;
		CHECK(mkdir(deep, 0700) == 0);
	}
	at = strlen(deep);
	deep[at++] = '/';
	memset(deep + at, 'm', 4088 - at);
	deep[4088] = 0;
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	*strrchr(deep, '/') = 0;
	CHECK(chdir(deep) == 0);
	deep[strlen(deep)] = '/';
	CHECK_OK(save(strrchr(deep, '/') + 1, a));
	CHECK(chdir(cwd) == 0);
	CHECK(strlen(deep) == 4088);
	keep = read_raw(deep, &size);
	CHECK_ERR(ferry_checkpoint_check_save_path(deep, &small), FERRY_ERR_INVALID,
		  "over the system's limit of 4095 bytes for a path");
	CHECK_ERR(save(deep, a), FERRY_ERR_INVALID, "save path too long");
	CHECK(strlen(ferry_last_error()) < 450); /* whole: the error buffer holds 511 */
	printf("over-long path: %s\n", ferry_last_error());
	CHECK(holds(deep, a));
	free(keep);

	/* a name that fits but whose temporaries' names would not */
	memset(name, 'n', 250);
	name[250] = 0;
	CHECK_ERR(ferry_checkpoint_check_save_path(tpath(name), &small), FERRY_ERR_INVALID,
		  "over the system's limit of 255 bytes for a name");
}

static void test_commit(void)
{
	struct pair a, b;

	pair_make(&a, 3);
	pair_make(&b, 4);
	CHECK_OK(save(tpath("pair.bin"), &a));
	CHECK(holds(tpath("pair.bin"), &a));
	CHECK_OK(save(tpath("pair.bin"), &b));
	CHECK(holds(tpath("pair.bin"), &b));
	CHECK(temporaries("pair.bin") == 0);
	test_commit_full_disk(&a, &b);
	test_commit_recovery(&a, &b);
	test_commit_paths(&a);
	pair_free(&a);
	pair_free(&b);
}

int main(void)
{
	scratch_dir_make("test_checkpoint");
	test_config();
	test_model_roundtrip();
	test_model_bad();
	test_state();
	test_non_finite();
	test_state_v2();
	test_state_v6();
	test_commit();

	return scratch_finish("test_checkpoint");
}
