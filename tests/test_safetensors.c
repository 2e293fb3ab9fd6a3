/* Hugging Face checkpoints: safetensors round trips (single file and
 * sharded), the fp16/bf16 conversions, every kind of bad file the reader
 * must refuse, atomic writes, config.json, and files made by the reference
 * implementation (tests/data/, see make_safetensors_fixtures.py). */
#include "ferry/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_test_util.h"

static long file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void write_bytes(const char *path, const void *a, size_t na)
{
	FILE *f = fopen(path, "wb");

	if (!f || (na && fwrite(a, 1, na, f) != na) || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void write_text(const char *path, const char *s)
{
	write_bytes(path, s, strlen(s));
}

static char *read_bytes(const char *path, long *size)
{
	FILE *f = fopen(path, "rb");
	char *buf;

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
	buf[*size] = '\0';
	fclose(f);
	return buf;
}

/* Writes a safetensors file by hand: header_len as given (or, when
 * UINT64_MAX, the JSON's length padded with spaces to 8), the JSON, then
 * nd data bytes (0x11, 0x22, ...). */
static void write_st_raw(const char *path, const char *json, uint64_t header_len,
			 size_t nd)
{
	size_t nj = strlen(json), pad = (nj + 7) / 8 * 8, i;
	unsigned char *buf = calloc(1, 8 + pad + nd + 1);

	if (!buf)
		exit(1);
	if (header_len == UINT64_MAX)
		header_len = pad;
	for (i = 0; i < 8; i++)
		buf[i] = (unsigned char)(header_len >> (8 * i));
	memcpy(buf + 8, json, nj);
	memset(buf + 8 + nj, ' ', pad - nj);
	for (i = 0; i < nd; i++)
		buf[8 + pad + i] = (unsigned char)(0x11 * (i % 15 + 1));
	write_bytes(path, buf, 8 + pad + nd);
	free(buf);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float bits_f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* Values with every exponent, plus the awkward ones. */
static void fill_values(float *p, size_t n)
{
	static const float special[] = { 0.0f, -0.0f, 1.0f, -2.5f, 65504.0f,
					 65520.0f, 1e-8f, 6e-8f, 3e-5f, 1e30f };
	size_t i;

	for (i = 0; i < n; i++) {
		if (i < sizeof(special) / sizeof(special[0]))
			p[i] = special[i];
		else if (i % 7 == 0)
			p[i] = bits_f(next_u32()); /* any bits: NaN, inf, denormal */
		else
			p[i] = ((float)(next_u32() % 20001) - 10000.0f) / 1000.0f;
	}
	if (n > 12) {
		p[10] = INFINITY;
		p[11] = -INFINITY;
		p[12] = NAN;
	}
}

static int same_value(float a, float b)
{
	return (isnan(a) && isnan(b)) || f_bits(a) == f_bits(b);
}

/* What a value becomes after a trip through dtype. */
static float through(enum ferry_st_dtype dt, float v)
{
	switch (dt) {
	case FERRY_ST_F32: return v;
	case FERRY_ST_BF16: return ferry_st_bf16_to_f32(ferry_st_f32_to_bf16(v));
	case FERRY_ST_F16: return ferry_st_f16_to_f32(ferry_st_f32_to_f16(v));
	}
	return NAN;
}

/* No "*.tmp.*" file left in dir d. */
static int no_tmp_files(const char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	int clean = 1;

	if (!dp)
		return 1;
	while ((e = readdir(dp)))
		if (strstr(e->d_name, ".tmp.")) {
			fprintf(stderr, "  leftover %s/%s\n", d, e->d_name);
			clean = 0;
		}
	closedir(dp);
	return clean;
}

/* ---- conversions ------------------------------------------------------------ */

/* Reference narrowing: nearest representable of the two neighbours, ties
 * to the even one, computed in double from the decoded table. */
static uint16_t ref_round(float v, float (*widen)(uint16_t), uint16_t maxfin)
{
	double x = fabs((double)v), best_err = INFINITY;
	uint16_t best = 0, h, sign = signbit(v) ? 0x8000 : 0;

	/* Binary search over the ordered magnitudes 0..maxfin. */
	uint32_t lo = 0, hi = maxfin;

	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;

		if ((double)widen((uint16_t)mid) <= x)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (h = (uint16_t)lo; h <= (uint16_t)(lo + 1) && h <= maxfin + 1; h++) {
		double y = h == maxfin + 1 ? 2.0 * widen(maxfin) - widen(maxfin - 1)
					   : (double)widen(h);
		double err = fabs(y - x);

		if (err < best_err || (err == best_err && !(h & 1))) {
			best_err = err;
			best = h;
		}
	}
	return (uint16_t)(sign | best);
}

static void test_conversions(void)
{
	uint32_t i;
	int bad = 0;

	/* Widening then narrowing is the identity on every non-NaN pattern;
	 * NaN stays NaN. */
	for (i = 0; i < 65536; i++) {
		uint16_t h = (uint16_t)i;
		float b = ferry_st_bf16_to_f32(h), f = ferry_st_f16_to_f32(h);

		if (isnan(b) ? !isnan(ferry_st_bf16_to_f32(ferry_st_f32_to_bf16(b)))
			     : ferry_st_f32_to_bf16(b) != h)
			bad++;
		if (isnan(f) ? !isnan(ferry_st_f16_to_f32(ferry_st_f32_to_f16(f)))
			     : ferry_st_f32_to_f16(f) != h)
			bad++;
		if (f_bits(b) != (uint32_t)h << 16)
			bad++;
	}
	CHECK(bad == 0);

	/* fp16 specials. */
	CHECK(ferry_st_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
	CHECK(ferry_st_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
	CHECK(ferry_st_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
	CHECK(ferry_st_f16_to_f32(0x7bff) == 65504.0f);
	CHECK(ferry_st_f16_to_f32(0x3c00) == 1.0f);
	CHECK(ferry_st_f16_to_f32(0xc000) == -2.0f);
	CHECK(isinf(ferry_st_f16_to_f32(0x7c00)) && ferry_st_f16_to_f32(0x7c00) > 0);
	CHECK(isinf(ferry_st_f16_to_f32(0xfc00)) && ferry_st_f16_to_f32(0xfc00) < 0);
	CHECK(isnan(ferry_st_f16_to_f32(0x7e00)) && isnan(ferry_st_f16_to_f32(0x7c01)));
	CHECK(f_bits(ferry_st_f16_to_f32(0x8000)) == 0x80000000u);
	CHECK(f_bits(ferry_st_f16_to_f32(0x8001)) == f_bits(-ldexpf(1.0f, -24)));

	CHECK(ferry_st_f32_to_f16(65504.0f) == 0x7bff);
	CHECK(ferry_st_f32_to_f16(65519.99f) == 0x7bff);
	CHECK(ferry_st_f32_to_f16(65520.0f) == 0x7c00);
	CHECK(ferry_st_f32_to_f16(1e10f) == 0x7c00);
	CHECK(ferry_st_f32_to_f16(-INFINITY) == 0xfc00);
	CHECK((ferry_st_f32_to_f16(NAN) & 0x7c00) == 0x7c00 &&
	      (ferry_st_f32_to_f16(NAN) & 0x3ff) != 0);
	CHECK(ferry_st_f32_to_f16(bits_f(0x7f800001u)) != 0x7c00); /* sNaN stays NaN */
	CHECK(ferry_st_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000); /* tie to even 0 */
	CHECK(ferry_st_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);
	CHECK(ferry_st_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002); /* 1.5 ulp tie -> 2 */
	CHECK(ferry_st_f32_to_f16(-ldexpf(1.0f, -26)) == 0x8000);
	CHECK(ferry_st_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00); /* tie, even */
	CHECK(ferry_st_f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3c02); /* tie, up */
	CHECK(ferry_st_f32_to_f16(ldexpf(2047.0f, -25)) == 0x0400); /* rounds to min normal */

	CHECK(ferry_st_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3f80);
	CHECK(ferry_st_f32_to_bf16(1.0f + ldexpf(3.0f, -8)) == 0x3f82);
	CHECK(ferry_st_f32_to_bf16(bits_f(0x7f7fffffu)) == 0x7f80); /* FLT_MAX -> inf */
	CHECK(ferry_st_f32_to_bf16(bits_f(0x7f800001u)) != 0x7f80);
	CHECK((ferry_st_f32_to_bf16(bits_f(0x7f800001u)) & 0x7f80) == 0x7f80);
	CHECK(ferry_st_f32_to_bf16(-0.0f) == 0x8000);
	CHECK(ferry_st_f32_to_bf16(bits_f(0x00000001u)) == 0x0000); /* tiny denormal */

	/* Narrowing of random floats against the reference rounding. */
	bad = 0;
	for (i = 0; i < 200000; i++) {
		float v = bits_f(next_u32());
		uint16_t want;

		if (isnan(v))
			continue;
		if (i % 2) /* bias towards fp16's range */
			v = ldexpf(frexpf(v, &(int){ 0 }), (int)(next_u32() % 48) - 30);
		want = ref_round(v, ferry_st_bf16_to_f32, 0x7f7f);
		if (ferry_st_f32_to_bf16(v) != want && !isinf(v))
			bad++;
		if (!isinf(v) && fabsf(v) < 65520.0f) {
			want = ref_round(v, ferry_st_f16_to_f32, 0x7bff);
			if (ferry_st_f32_to_f16(v) != want)
				bad++;
		}
#ifdef __FLT16_MAX__
		{
			_Float16 r = (_Float16)v;
			uint16_t rb;

			memcpy(&rb, &r, 2);
			if (ferry_st_f32_to_f16(v) != rb)
				bad++;
		}
#endif
	}
	CHECK(bad == 0);
	if (bad)
		fprintf(stderr, "  %d conversion mismatches\n", bad);

	CHECK(!strcmp(ferry_st_dtype_name(FERRY_ST_BF16), "BF16"));
	CHECK(ferry_st_dtype_size(FERRY_ST_F32) == 4 &&
	      ferry_st_dtype_size(FERRY_ST_F16) == 2 &&
	      ferry_st_dtype_size((enum ferry_st_dtype)9) == 0);
}

/* ---- round trips --------------------------------------------------------------- */

#define NT 9

static void make_tensors(struct ferry_st_write *t, float **data,
			 enum ferry_st_dtype dt, const char *prefix)
{
	static const int64_t shapes[NT][FERRY_ST_MAX_DIMS] = {
		{ 0 }, { 0 }, { 5 }, { 3, 4 }, { 2, 3, 4 },
		{ 1, 1, 1, 1, 1, 1, 1, 2 }, { 64, 32 }, { 7, 0 }, { 33 },
	};
	static const int ndims[NT] = { 0, 1, 1, 2, 3, 8, 2, 2, 1 };
	static char names[3][NT][64];
	int k, d;

	for (k = 0; k < NT; k++) {
		size_t n = 1;
		char *name = names[dt][k];

		snprintf(name, 64, "%s.%d.weight", prefix, k);
		t[k].name = name;
		t[k].dtype = dt;
		t[k].ndim = ndims[k];
		memset(t[k].shape, 0, sizeof(t[k].shape));
		for (d = 0; d < ndims[k]; d++) {
			t[k].shape[d] = shapes[k][d];
			n *= (size_t)shapes[k][d];
		}
		data[k] = malloc((n ? n : 1) * sizeof(float));
		if (!data[k])
			exit(1);
		fill_values(data[k], n);
		t[k].data = n ? data[k] : NULL;
	}
}

static size_t numel_of(const struct ferry_st_write *t)
{
	size_t n = 1;
	int d;

	for (d = 0; d < t->ndim; d++)
		n *= (size_t)t->shape[d];
	return n;
}

/* Every tensor of t[0..n) reads back from st as the dtype trip predicts. */
static void check_contents(ferry_safetensors_t st, const struct ferry_st_write *t,
			   int n)
{
	int k;

	for (k = 0; k < n; k++) {
		size_t m = numel_of(&t[k]), i, bad = 0;
		float *back = malloc((m ? m : 1) * sizeof(float));
		const struct ferry_st_tensor *info = ferry_safetensors_find(st, t[k].name);

		if (!back)
			exit(1);
		CHECK(info != NULL);
		if (!info) {
			free(back);
			continue;
		}
		CHECK(info->dtype == t[k].dtype && info->ndim == t[k].ndim &&
		      info->numel == m &&
		      info->nbytes == m * ferry_st_dtype_size(t[k].dtype));
		CHECK(!memcmp(info->shape, t[k].shape, sizeof(info->shape)));
		memset(back, 0xcd, (m ? m : 1) * sizeof(float));
		CHECK_OK(ferry_safetensors_read_f32(st, t[k].name, t[k].shape,
						    t[k].ndim, back));
		for (i = 0; i < m; i++)
			if (!same_value(back[i], through(t[k].dtype, t[k].data[i])))
				bad++;
		CHECK(bad == 0);
		if (bad)
			fprintf(stderr, "  %s: %zu values differ\n", t[k].name, bad);
		free(back);
	}
}

static void test_roundtrip(void)
{
	struct ferry_st_write t[3 * NT];
	float *data[3 * NT];
	const char *path = tpath("rt.safetensors");
	ferry_safetensors_t st = NULL;
	char *raw;
	long size;
	uint64_t hlen = 0, total = 0;
	int k, i;

	make_tensors(t, data, FERRY_ST_F32, "model.f32");
	make_tensors(t + NT, data + NT, FERRY_ST_BF16, "model.bf16");
	make_tensors(t + 2 * NT, data + 2 * NT, FERRY_ST_F16, "model.f16");

	CHECK_OK(ferry_safetensors_write(path, t, 3 * NT, "pt"));
	CHECK(no_tmp_files(dir));

	/* Layout: 8-byte length, space-padded JSON, tensors in order. */
	raw = read_bytes(path, &size);
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | (unsigned char)raw[i];
	for (k = 0; k < 3 * NT; k++)
		total += numel_of(&t[k]) * ferry_st_dtype_size(t[k].dtype);
	CHECK(hlen % 8 == 0 && raw[8] == '{');
	CHECK((uint64_t)size == 8 + hlen + total);
	CHECK(raw[8 + hlen - 1] == '}' || raw[8 + hlen - 1] == ' ');
	CHECK(strstr(raw + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL);
	CHECK(strstr(raw + 8, "\"model.f32.6.weight\":{\"dtype\":\"F32\",\"shape\":[64,32],\"data_offsets\":[") != NULL);
	free(raw);

	CHECK_OK(ferry_safetensors_open(path, &st));
	if (!st)
		return;
	CHECK(ferry_safetensors_count(st) == 3 * NT);
	CHECK(!strcmp(ferry_safetensors_metadata(st, "format"), "pt"));
	CHECK(ferry_safetensors_metadata(st, "nope") == NULL);
	/* File order is the order given (zero-size tensors sort first among
	 * equal offsets, so compare only the non-empty ones). */
	{
		uint64_t prev = 0;

		for (k = 0; k < 3 * NT; k++) {
			const struct ferry_st_tensor *ti = ferry_safetensors_tensor(st, k);

			CHECK(ti && ti->offset >= prev && !strcmp(ti->file, path));
			if (ti)
				prev = ti->offset;
		}
		CHECK(ferry_safetensors_tensor(st, -1) == NULL);
		CHECK(ferry_safetensors_tensor(st, 3 * NT) == NULL);
		/* a 4-byte scalar, an empty tensor, then [5] */
		CHECK(ferry_safetensors_tensor(st, 0)->offset == 8 + hlen);
		CHECK(!strcmp(ferry_safetensors_tensor(st, 0)->name, "model.f32.0.weight"));
		CHECK(ferry_safetensors_find(st, "model.f32.2.weight")->offset ==
		      8 + hlen + 4);
	}
	check_contents(st, t, 3 * NT);

	/* Scalars and the name lookup. */
	{
		const struct ferry_st_tensor *s = ferry_safetensors_find(st, "model.bf16.0.weight");

		CHECK(s && s->ndim == 0 && s->numel == 1 && s->nbytes == 2);
		CHECK(ferry_safetensors_find(st, "model.bf16.0.weigh") == NULL);
		CHECK(ferry_safetensors_find(st, NULL) == NULL);
		CHECK(ferry_safetensors_find(NULL, "x") == NULL);
	}

	/* Shape checks and a missing tensor. */
	{
		float buf[64 * 64];
		int64_t want[2] = { 64, 64 };
		char msg[512];

		snprintf(msg, sizeof(msg),
			 "%s: model.f16.6.weight has shape [64, 32], expected [64, 64]",
			 path);
		CHECK_ERR(ferry_safetensors_read_f32(st, "model.f16.6.weight", want, 2, buf),
			  FERRY_ERR_FORMAT, msg);
		want[1] = 32;
		CHECK_ERR(ferry_safetensors_read_f32(st, "model.f16.6.weight", want, 1, buf),
			  FERRY_ERR_FORMAT, "has shape [64, 32], expected [64]");
		CHECK_ERR(ferry_safetensors_read_f32(st, "model.f16.0.weight", want, 1, buf),
			  FERRY_ERR_FORMAT, "has shape [], expected [64]");
		CHECK_OK(ferry_safetensors_read_f32(st, "model.f16.6.weight", want, 2, buf));
		snprintf(msg, sizeof(msg), "lm_head.weight not found in %s", path);
		CHECK_ERR(ferry_safetensors_read_f32(st, "lm_head.weight", want, 2, buf),
			  FERRY_ERR_FORMAT, msg);
		CHECK_ERR(ferry_safetensors_read_f32(st, "model.f16.6.weight", want, 9, buf),
			  FERRY_ERR_INVALID, "model.f16.6.weight");
		CHECK_ERR(ferry_safetensors_read_f32(st, "model.f16.6.weight", NULL, 2, buf),
			  FERRY_ERR_INVALID, "model.f16.6.weight");
	}
	ferry_safetensors_close(st);
	ferry_safetensors_close(NULL);
	CHECK(ferry_safetensors_count(NULL) == 0);

	/* A directory holding model.safetensors; no metadata this time. */
	CHECK(mkdir(tpath("single"), 0755) == 0);
	CHECK_OK(ferry_safetensors_write(tpath("single/model.safetensors"), t + NT, NT, NULL));
	st = NULL;
	CHECK_OK(ferry_safetensors_open(tpath("single"), &st));
	if (st) {
		CHECK(ferry_safetensors_count(st) == NT);
		CHECK(ferry_safetensors_metadata(st, "format") == NULL);
		check_contents(st, t + NT, NT);
		ferry_safetensors_close(st);
	}

	/* No tensors at all is a valid file. */
	CHECK_OK(ferry_safetensors_write(tpath("empty.safetensors"), NULL, 0, NULL));
	CHECK(file_size(tpath("empty.safetensors")) == 16);
	st = NULL;
	CHECK_OK(ferry_safetensors_open(tpath("empty.safetensors"), &st));
	CHECK(ferry_safetensors_count(st) == 0);
	CHECK(ferry_safetensors_find(st, "x") == NULL);
	ferry_safetensors_close(st);

	/* Reads under allocation failure: work or fail cleanly (the
	 * sanitizer build checks nothing leaks). */
	for (i = 0; i < 100; i++) {
		ferry_status s;

		st = NULL;
		ferry_fault_fail_after(i);
		s = ferry_safetensors_open(path, &st);
		ferry_fault_fail_after(-1);
		CHECK(s == FERRY_OK || (s == FERRY_ERR_NOMEM && strstr(ferry_last_error(), path)));
		if (s == FERRY_OK) {
			CHECK(ferry_safetensors_count(st) == 3 * NT);
			ferry_safetensors_close(st);
			break;
		}
		CHECK(st == NULL);
	}
	CHECK(i > 3 && i < 100);

	for (k = 0; k < 3 * NT; k++)
		free(data[k]);
}

/* ---- sharded checkpoints ----------------------------------------------------------- */

static void write_index(const char *d, const char *body)
{
	char path[4300], text[4096];

	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", d);
	snprintf(text, sizeof(text),
		 "{\n  \"metadata\": {\"total_size\": 1234},\n  \"weight_map\": {\n%s\n  }\n}\n",
		 body);
	write_text(path, text);
}

static const char *good_map =
	"    \"model.f32.2.weight\": \"model-00001-of-00002.safetensors\",\n"
	"    \"model.f32.3.weight\": \"model-00001-of-00002.safetensors\",\n"
	"    \"model.bf16.6.weight\": \"model-00002-of-00002.safetensors\",\n"
	"    \"model.f16.4.weight\": \"model-00002-of-00002.safetensors\"";

static void make_shards(const char *d, struct ferry_st_write *t)
{
	char p1[4300], p2[4300];
	struct ferry_st_write a[2] = { t[2], t[3] };
	struct ferry_st_write b[2] = { t[NT + 6], t[2 * NT + 4] };

	mkdir(d, 0755);
	snprintf(p1, sizeof(p1), "%s/model-00001-of-00002.safetensors", d);
	snprintf(p2, sizeof(p2), "%s/model-00002-of-00002.safetensors", d);
	CHECK_OK(ferry_safetensors_write(p1, a, 2, "pt"));
	CHECK_OK(ferry_safetensors_write(p2, b, 2, "pt"));
}

static void test_sharded(void)
{
	struct ferry_st_write t[3 * NT], sel[4];
	float *data[3 * NT];
	const char *d = tpath("sharded");
	ferry_safetensors_t st = NULL;
	char p[4300];
	int k, i;

	make_tensors(t, data, FERRY_ST_F32, "model.f32");
	make_tensors(t + NT, data + NT, FERRY_ST_BF16, "model.bf16");
	make_tensors(t + 2 * NT, data + 2 * NT, FERRY_ST_F16, "model.f16");
	sel[0] = t[2];
	sel[1] = t[3];
	sel[2] = t[NT + 6];
	sel[3] = t[2 * NT + 4];

	make_shards(d, t);
	write_index(d, good_map);
	CHECK_OK(ferry_safetensors_open(d, &st));
	if (st) {
		CHECK(ferry_safetensors_count(st) == 4);
		check_contents(st, sel, 4);
		/* Shard by shard, in name order. */
		CHECK(strstr(ferry_safetensors_tensor(st, 0)->file, "00001") &&
		      strstr(ferry_safetensors_tensor(st, 3)->file, "00002"));
		CHECK(!strcmp(ferry_safetensors_metadata(st, "format"), "pt"));
		snprintf(p, sizeof(p), "nope not found in %s", d);
		{
			float one[1];

			CHECK_ERR(ferry_safetensors_read_f32(st, "nope", NULL, 0, one),
				  FERRY_ERR_FORMAT, p);
		}
		ferry_safetensors_close(st);
	}
	/* The index file itself can be named. */
	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", d);
	st = NULL;
	CHECK_OK(ferry_safetensors_open(p, &st));
	CHECK(ferry_safetensors_count(st) == 4);
	ferry_safetensors_close(st);

	/* Allocation failures while opening a sharded checkpoint. */
	for (i = 0; i < 200; i++) {
		ferry_status s;

		st = NULL;
		ferry_fault_fail_after(i);
		s = ferry_safetensors_open(d, &st);
		ferry_fault_fail_after(-1);
		CHECK(s == FERRY_OK || (s == FERRY_ERR_NOMEM && strstr(ferry_last_error(), d)));
		if (s == FERRY_OK) {
			ferry_safetensors_close(st);
			break;
		}
	}
	CHECK(i > 5 && i < 200);

	/* A shard the index names is missing. */
	write_index(d, "    \"model.f32.2.weight\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"x\": \"model-00003-of-00003.safetensors\"");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "model.safetensors.index.json names shard");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "model-00003-of-00003.safetensors, which is missing");
	/* The index puts a tensor in the wrong shard. */
	write_index(d, "    \"model.f32.2.weight\": \"model-00002-of-00002.safetensors\",\n"
		       "    \"model.f32.3.weight\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"model.bf16.6.weight\": \"model-00002-of-00002.safetensors\",\n"
		       "    \"model.f16.4.weight\": \"model-00002-of-00002.safetensors\"");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "weight_map puts model.f32.2.weight in model-00002-of-00002.safetensors, but it is in");
	/* ... names a tensor no shard has. */
	write_index(d, "    \"model.f32.2.weight\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"model.f32.3.weight\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"ghost\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"model.bf16.6.weight\": \"model-00002-of-00002.safetensors\",\n"
		       "    \"model.f16.4.weight\": \"model-00002-of-00002.safetensors\"");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "weight_map puts ghost in model-00001-of-00002.safetensors, which does not hold it");
	/* ... leaves one out. */
	write_index(d, "    \"model.f32.2.weight\": \"model-00001-of-00002.safetensors\",\n"
		       "    \"model.bf16.6.weight\": \"model-00002-of-00002.safetensors\",\n"
		       "    \"model.f16.4.weight\": \"model-00002-of-00002.safetensors\"");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "holds tensor model.f32.3.weight, which weight_map does not list");
	/* ... points outside the directory, or is not a map. */
	write_index(d, "    \"model.f32.2.weight\": \"../x.safetensors\"");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "is not a file name in the checkpoint's directory");
	write_index(d, "    \"model.f32.2.weight\": 3");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "is not a file name string");
	write_index(d, "");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "weight_map is empty");
	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", d);
	write_text(p, "{\"metadata\": {}}");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "no \"weight_map\" object");
	write_text(p, "{\"weight_map\": {\"a\": \"b\", }");
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "model.safetensors.index.json: not valid JSON");
	/* The same name in two shards. */
	{
		struct ferry_st_write dup[1] = { t[3] };

		snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", d);
		sel[0] = t[3];
		CHECK_OK(ferry_safetensors_write(p, dup, 1, NULL));
		write_index(d, "    \"model.f32.2.weight\": \"model-00001-of-00002.safetensors\",\n"
			       "    \"model.f32.3.weight\": \"model-00002-of-00002.safetensors\"");
		CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
			  "tensor model.f32.3.weight is in both");
	}
	/* A bad shard is named in the message. */
	snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", d);
	write_bytes(p, "abc", 3);
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT, p);
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_FORMAT,
		  "too short for the 8-byte header length");
	/* A shard that is a FIFO is refused without blocking. */
	unlink(p);
	CHECK(mkfifo(p, 0644) == 0);
	CHECK_ERR(ferry_safetensors_open(d, &st), FERRY_ERR_IO,
		  "model-00002-of-00002.safetensors: not a regular file");
	unlink(p);

	/* A directory with neither file. */
	CHECK(mkdir(tpath("nothing"), 0755) == 0);
	st = NULL;
	CHECK_ERR(ferry_safetensors_open(tpath("nothing"), &st), FERRY_ERR_IO,
		  "holds neither model.safetensors nor model.safetensors.index.json");
	CHECK(st == NULL);

	for (k = 0; k < 3 * NT; k++)
		free(data[k]);
}

/* ---- bad files --------------------------------------------------------------------- */

static void expect_bad(const char *name, ferry_status want, const char *needle,
		       int line)
{
	ferry_safetensors_t st = NULL;
	int before = failures;

	CHECK_ERR(ferry_safetensors_open(tpath(name), &st), want, tpath(name));
	CHECK_ERR(ferry_safetensors_open(tpath(name), &st), want, needle);
	CHECK(st == NULL);
	if (failures != before)
		fprintf(stderr, "  (bad file case at %s:%d)\n", __FILE__, line);
}

#define BAD_JSON(name, json, nd, needle)                                   \
	do {                                                               \
		write_st_raw(tpath(name), json, UINT64_MAX, nd);           \
		expect_bad(name, FERRY_ERR_FORMAT, needle, __LINE__);      \
	} while (0)

static void test_bad_files(void)
{
	ferry_safetensors_t st = NULL;
	const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

	/* The reference layout works, so each case below tests one thing. */
	write_st_raw(tpath("ok.safetensors"), ok, UINT64_MAX, 8);
	CHECK_OK(ferry_safetensors_open(tpath("ok.safetensors"), &st));
	ferry_safetensors_close(st);
	st = NULL;

	CHECK_ERR(ferry_safetensors_open(tpath("missing.safetensors"), &st),
		  FERRY_ERR_IO, tpath("missing.safetensors"));
	CHECK_ERR(ferry_safetensors_open(NULL, &st), FERRY_ERR_INVALID, "NULL");

	write_bytes(tpath("empty.st"), "", 0);
	expect_bad("empty.st", FERRY_ERR_FORMAT,
		   "file is 0 bytes, too short for the 8-byte header length", __LINE__);
	write_bytes(tpath("five.st"), "\x10\0\0\0\0", 5);
	expect_bad("five.st", FERRY_ERR_FORMAT, "too short for the 8-byte header length",
		   __LINE__);
	write_st_raw(tpath("pastend.st"), ok, 4096, 8);
	expect_bad("pastend.st", FERRY_ERR_FORMAT,
		   "header length 4096 runs past the end of the file", __LINE__);
	write_st_raw(tpath("absurd.st"), ok, 1ull << 40, 8);
	expect_bad("absurd.st", FERRY_ERR_FORMAT,
		   "header length 1099511627776 is over the limit", __LINE__);
	write_st_raw(tpath("huge.st"), ok, UINT64_MAX - 1, 8);
	expect_bad("huge.st", FERRY_ERR_FORMAT, "is over the limit", __LINE__);
	write_st_raw(tpath("zero.st"), ok, 0, 8);
	expect_bad("zero.st", FERRY_ERR_FORMAT, "header length 0 is too small", __LINE__);

	BAD_JSON("notjson.st", "{\"a\": [1, 2", 0, "header is not valid JSON");
	BAD_JSON("array.st", "[1, 2]", 0, "header is not a JSON object");
	BAD_JSON("space.st", " {}", 0, "does not start with '{'");
	BAD_JSON("dupkey.st",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		 8, "duplicate");
	BAD_JSON("entry.st", "{\"a\":5}", 0, "tensor a: entry is not a JSON object");
	BAD_JSON("nodtype.st", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
		 "tensor a has no dtype");
	BAD_JSON("noshape.st", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
		 "tensor a has no shape");
	BAD_JSON("nooffs.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
		 "tensor a has no data_offsets");
	BAD_JSON("i64.st", "{\"pos\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
		 "tensor pos has unsupported dtype I64");
	BAD_JSON("f64.st", "{\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
		 "tensor x has unsupported dtype F64");
	BAD_JSON("q4.st", "{\"x\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
		 "tensor x has unknown dtype 'Q4'");
	BAD_JSON("dtypenum.st", "{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
		 "dtype is not a string");
	BAD_JSON("span.st", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", 8,
		 "tensor w: shape [2, 3] of BF16 is 12 bytes, but data_offsets [0, 8] span 8");
	BAD_JSON("negdim.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
		 "shape[0] is not a non-negative integer");
	BAD_JSON("realdim.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
		 "shape[0] is not a non-negative integer");
	BAD_JSON("dims9.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
		 "has 9 dimensions, more than 8");
	BAD_JSON("overflow.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
		 "shape overflows");
	BAD_JSON("offs.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
		 "data_offsets is not [begin, end]");
	BAD_JSON("offs3.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
		 "data_offsets is not [begin, end]");
	BAD_JSON("outside.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
		 "tensor w: data_offsets [4, 12] run past the end of the 8-byte data section");
	BAD_JSON("overlap.st",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		 12, "tensor b (bytes 4..12 of the data) overlaps tensor a");
	BAD_JSON("same.st",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		 8, "overlaps tensor");
	BAD_JSON("hole.st",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		 12, "bytes 4..8 of the data belong to no tensor (a hole before tensor b)");
	BAD_JSON("trail.st", ok, 10, "2 bytes of data follow the last tensor");
	BAD_JSON("trunc.st", ok, 6, "run past the end of the 6-byte data section");

	/* __metadata__ is not a tensor; non-string values are ignored. */
	write_st_raw(tpath("meta.st"),
		     "{\"__metadata__\":{\"format\":\"pt\",\"n\":3,\"s\":\"x\"},"
		     "\"a\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]},"
		     "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[2,2]}}",
		     UINT64_MAX, 2);
	CHECK_OK(ferry_safetensors_open(tpath("meta.st"), &st));
	if (st) {
		float v[1];

		CHECK(ferry_safetensors_count(st) == 2);
		CHECK(!strcmp(ferry_safetensors_metadata(st, "format"), "pt"));
		CHECK(!strcmp(ferry_safetensors_metadata(st, "s"), "x"));
		CHECK(ferry_safetensors_metadata(st, "n") == NULL);
		CHECK_OK(ferry_safetensors_read_f32(st, "a", NULL, 0, v));
		CHECK(v[0] == ferry_st_f16_to_f32(0x2211));
		ferry_safetensors_close(st);
		st = NULL;
	}
	write_st_raw(tpath("meta2.st"), "{\"__metadata__\":[1]}", UINT64_MAX, 0);
	CHECK_OK(ferry_safetensors_open(tpath("meta2.st"), &st));
	CHECK(ferry_safetensors_count(st) == 0);
	ferry_safetensors_close(st);
	st = NULL;

	/* Not regular files: a FIFO is refused before it is opened (opening
	 * one for reading would block), a directory without a checkpoint. */
	CHECK(mkfifo(tpath("fifo.safetensors"), 0644) == 0);
	CHECK_ERR(ferry_safetensors_open(tpath("fifo.safetensors"), &st), FERRY_ERR_IO,
		  "fifo.safetensors: not a regular file");
	CHECK(st == NULL);
	/* /dev/null is a character device. */
	CHECK_ERR(ferry_safetensors_open("/dev/null", &st), FERRY_ERR_IO,
		  "/dev/null: not a regular file");
}

/* ---- writer failures ------------------------------------------------------------------ */

static void test_write_failures(void)
{
	const char *path = tpath("keep.safetensors");
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { -1, -2, -3, -4, -5, -6 };
	struct ferry_st_write t[2] = {
		{ .name = "x", .dtype = FERRY_ST_BF16, .ndim = 2, .shape = { 2, 3 }, .data = a },
		{ .name = "y", .dtype = FERRY_ST_F32, .ndim = 1, .shape = { 6 }, .data = a },
	};
	struct ferry_st_write nt[2];
	char *old, *now, tmpname[4300];
	long nold, nnow;
	int i;

	CHECK_OK(ferry_safetensors_write(path, t, 2, "pt"));
	old = read_bytes(path, &nold);

	/* Into a directory that does not exist: nothing is created. */
	CHECK_ERR(ferry_safetensors_write(tpath("nodir/x.safetensors"), t, 2, NULL),
		  FERRY_ERR_IO, tpath("nodir/x.safetensors.tmp."));
	CHECK(!exists(tpath("nodir")));

	/* Bad arguments, refused before anything is written. */
	memcpy(nt, t, sizeof(nt));
	nt[1].name = "x";
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "tensor name x appears twice");
	memcpy(nt, t, sizeof(nt));
	nt[0].ndim = 9;
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "has 9 dimensions");
	memcpy(nt, t, sizeof(nt));
	nt[0].shape[1] = -3;
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "bad shape");
	memcpy(nt, t, sizeof(nt));
	nt[0].data = NULL;
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "tensor x has no data");
	memcpy(nt, t, sizeof(nt));
	nt[1].name = "__metadata__";
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "reserved");
	memcpy(nt, t, sizeof(nt));
	nt[1].dtype = (enum ferry_st_dtype)7;
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "bad dtype");
	memcpy(nt, t, sizeof(nt));
	nt[1].name = "bad\xff";
	CHECK_ERR(ferry_safetensors_write(path, nt, 2, NULL), FERRY_ERR_INVALID,
		  "not valid UTF-8");
	CHECK_ERR(ferry_safetensors_write(path, t, 2, "\xfe"), FERRY_ERR_INVALID,
		  "not valid UTF-8");
	CHECK_ERR(ferry_safetensors_write(path, NULL, 2, NULL), FERRY_ERR_INVALID, path);
	CHECK_ERR(ferry_safetensors_write(NULL, t, 2, NULL), FERRY_ERR_INVALID, "NULL");
	CHECK(no_tmp_files(dir));
	now = read_bytes(path, &nnow);
	CHECK(nnow == nold && !memcmp(old, now, (size_t)nold));
	free(now);

	/* Every allocation failure: a clean error naming the file, no
	 * temporary left, the old file as it was; then it works. */
	t[0].data = b;
	t[1].data = b;
	for (i = 0; i < 100; i++) {
		ferry_status s;

		ferry_fault_fail_after(i);
		s = ferry_safetensors_write(path, t, 2, "pt");
		ferry_fault_fail_after(-1);
		if (s == FERRY_OK)
			break;
		CHECK(s == FERRY_ERR_NOMEM && strstr(ferry_last_error(), path));
		CHECK(no_tmp_files(dir));
		now = read_bytes(path, &nnow);
		CHECK(nnow == nold && !memcmp(old, now, (size_t)nold));
		free(now);
	}
	CHECK(i > 2 && i < 100);
	now = read_bytes(path, &nnow);
	CHECK(nnow == nold && memcmp(old, now, (size_t)nold)); /* new values */
	free(now);
	free(old);
	old = read_bytes(path, &nold);

	/* The temporary's name is taken by a directory: error, old file kept. */
	snprintf(tmpname, sizeof(tmpname), "%s.tmp.%ld", path, (long)getpid());
	CHECK(mkdir(tmpname, 0755) == 0);
	t[0].data = a;
	CHECK_ERR(ferry_safetensors_write(path, t, 2, "pt"), FERRY_ERR_IO, tmpname);
	CHECK(rmdir(tmpname) == 0);
	now = read_bytes(path, &nnow);
	CHECK(nnow == nold && !memcmp(old, now, (size_t)nold));
	free(now);
	free(old);
	/* A stale temporary file of ours is replaced. */
	write_text(tmpname, "stale");
	CHECK_OK(ferry_safetensors_write(path, t, 2, "pt"));
	CHECK(!exists(tmpname));

	/* The rename fails (the target is a directory): temporary removed. */
	CHECK(mkdir(tpath("isdir.safetensors"), 0755) == 0);
	CHECK_ERR(ferry_safetensors_write(tpath("isdir.safetensors"), t, 2, NULL),
		  FERRY_ERR_IO, "isdir.safetensors: cannot rename");
	CHECK(no_tmp_files(dir));
}

/* ---- config.json ------------------------------------------------------------------------- */

/* tests/data, next to this file (or $FERRY_TEST_DATA). */
static const char *data_path(const char *name)
{
	static char buf[64][4200];
	static int at;
	const char *env = getenv("FERRY_TEST_DATA");
	char *p = buf[at++ % 64];

	if (env && *env) {
		snprintf(p, 4200, "%s/%s", env, name);
	} else {
		const char *slash = strrchr(__FILE__, '/');

		snprintf(p, 4200, "%.*sdata/%s",
			 slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__, name);
	}
	return p;
}

/* Writes DIR/config.json from text (a subdirectory per case). */
static const char *config_case(const char *name, const char *text)
{
	char sub[256];
	const char *d;

	snprintf(sub, sizeof(sub), "cfg_%s", name);
	d = tpath(sub);
	mkdir(d, 0755);
	snprintf(sub, sizeof(sub), "cfg_%s/config.json", name);
	write_text(tpath(sub), text);
	return d;
}

static int config_equal(const struct ferry_hf_config *a,
			const struct ferry_hf_config *b)
{
	return !strcmp(a->model_type, b->model_type) &&
	       a->hidden_size == b->hidden_size &&
	       a->intermediate_size == b->intermediate_size &&
	       a->num_attention_heads == b->num_attention_heads &&
	       a->num_key_value_heads == b->num_key_value_heads &&
	       a->num_hidden_layers == b->num_hidden_layers &&
	       a->vocab_size == b->vocab_size &&
	       a->max_position_embeddings == b->max_position_embeddings &&
	       a->head_dim == b->head_dim && a->rope_theta == b->rope_theta &&
	       a->rms_norm_eps == b->rms_norm_eps &&
	       a->tie_word_embeddings == b->tie_word_embeddings &&
	       !strcmp(a->torch_dtype, b->torch_dtype);
}

/* Qwen/Qwen2.5-0.5B's config.json as published. */
#define QWEN25_05B                                                                               \
	"{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"                      \
	" \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\","               \
	" \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"            \
	" \"max_position_embeddings\": 32768, \"max_window_layers\": 24, \"model_type\": \"qwen2\","   \
	" \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"         \
	" \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"             \
	" \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","                               \
	" \"transformers_version\": \"4.40.1\", \"use_cache\": true, \"use_sliding_window\": false,"   \
	" \"vocab_size\": 151936}"

#define LLAMA_MIN "\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4"

#define BAD_CONFIG(name, text, want, needle)                                    \
	do {                                                                    \
		const char *d_ = config_case(name, text);                       \
		CHECK_ERR(ferry_hf_config_read(d_, &c), want, d_);               \
		CHECK_ERR(ferry_hf_config_read(d_, &c), want, needle);           \
	} while (0)

/* bos_token_id and eos_token_id: read as one id, a list or null (absent),
 * written back as they were, bad ones refused naming them. */
static void test_token_ids(void)
{
	struct ferry_hf_config c, back;
	const char *d;
	char *text;
	long n;

	CHECK_OK(ferry_hf_config_read(data_path("llama32_1b_config.json"), &c));
	CHECK(c.has_bos && c.bos_token_id == 128000 && c.n_eos == 1 && !c.eos_list && c.eos_token_id[0] == 128001);
	d = config_case("ids_list", "{" LLAMA_MIN ", \"bos_token_id\": null, \"eos_token_id\": [128001, 128008, 128009]}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(!c.has_bos && c.eos_list && c.n_eos == 3 && c.eos_token_id[0] == 128001 &&
	      c.eos_token_id[1] == 128008 && c.eos_token_id[2] == 128009);
	CHECK(mkdir(tpath("ids_out"), 0755) == 0);
	CHECK_OK(ferry_hf_config_write(tpath("ids_out"), &c));
	text = read_bytes(tpath("ids_out/config.json"), &n);
	CHECK(text && strstr(text, "\"eos_token_id\": [\n    128001,\n    128008,\n    128009\n  ],") &&
	      !strstr(text, "bos_token_id"));
	free(text);
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_hf_config_read(tpath("ids_out"), &back));
	CHECK(!back.has_bos && back.eos_list && back.n_eos == 3 && back.eos_token_id[2] == 128009);
	c.has_bos = true, c.bos_token_id = 7, c.eos_list = false, c.n_eos = 1;
	CHECK_OK(ferry_hf_config_write(tpath("ids_out"), &c));
	text = read_bytes(tpath("ids_out/config.json"), &n);
	CHECK(text && strstr(text, "\"bos_token_id\": 7,") && strstr(text, "\"eos_token_id\": 128001,"));
	free(text);
	CHECK_OK(ferry_hf_config_read(config_case("ids_none", "{" LLAMA_MIN "}"), &c));
	CHECK(!c.has_bos && !c.n_eos);
	BAD_CONFIG("ids_neg", "{" LLAMA_MIN ", \"bos_token_id\": -1}", FERRY_ERR_FORMAT,
		   "bos_token_id must be a token id (an integer from 0) or null, not -1");
	BAD_CONFIG("ids_str", "{" LLAMA_MIN ", \"eos_token_id\": \"x\"}", FERRY_ERR_FORMAT,
		   "eos_token_id must be a token id (an integer from 0), a list of 1 to 8 of them, or null");
	BAD_CONFIG("ids_long", "{" LLAMA_MIN ", \"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", FERRY_ERR_FORMAT,
		   "a list of 1 to 8 of them");
	BAD_CONFIG("ids_empty", "{" LLAMA_MIN ", \"eos_token_id\": []}", FERRY_ERR_FORMAT, "a list of 1 to 8 of them");
	BAD_CONFIG("ids_elem", "{" LLAMA_MIN ", \"eos_token_id\": [1, 2.5]}", FERRY_ERR_FORMAT,
		   "eos_token_id[1] must be a token id (an integer from 0), not 2.5");
}

static void test_config(void)
{
	struct ferry_hf_config c, back;
	const char *d;
	char msg[4400];
	long n;
	char *text;
	int i;

	/* TinyLlama-1.1B-Chat-v1.0's published config.json. */
	memset(&c, 0x55, sizeof(c));
	CHECK_OK(ferry_hf_config_read(data_path("tinyllama_config.json"), &c));
	CHECK(!strcmp(c.model_type, "llama"));
	CHECK(c.hidden_size == 2048 && c.intermediate_size == 5632 &&
	      c.num_attention_heads == 32 && c.num_key_value_heads == 4 &&
	      c.num_hidden_layers == 22 && c.vocab_size == 32000 &&
	      c.max_position_embeddings == 2048 && c.head_dim == 64);
	CHECK(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-5);
	CHECK(!c.tie_word_embeddings && !strcmp(c.torch_dtype, "bfloat16"));

	/* Llama-3.2-1B's published config.json: llama3 rope scaling. */
	d = data_path("llama32_1b_config.json");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.hidden_size == 2048 && c.intermediate_size == 8192 &&
	      c.num_attention_heads == 32 && c.num_key_value_heads == 8 &&
	      c.num_hidden_layers == 16 && c.vocab_size == 128256 &&
	      c.max_position_embeddings == 131072 && c.head_dim == 64 &&
	      c.rope_theta == 500000.0 && c.rms_norm_eps == 1e-5 &&
	      c.tie_word_embeddings && !strcmp(c.torch_dtype, "bfloat16"));
	CHECK(c.rope_type == FERRY_HF_ROPE_LLAMA3 && c.rope_factor == 32.0 &&
	      c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0 &&
	      c.rope_original_max_position_embeddings == 8192);
	/* ... written back under the same fields, read back the same. */
	CHECK(mkdir(tpath("l32out"), 0755) == 0);
	CHECK_OK(ferry_hf_config_write(tpath("l32out"), &c));
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_hf_config_read(tpath("l32out"), &back));
	CHECK(config_equal(&c, &back) && back.rope_type == FERRY_HF_ROPE_LLAMA3 &&
	      back.rope_factor == 32.0 && back.rope_low_freq_factor == 1.0 &&
	      back.rope_high_freq_factor == 4.0 &&
	      back.rope_original_max_position_embeddings == 8192);
	text = read_bytes(tpath("l32out/config.json"), &n);
	CHECK(strstr(text, "\"rope_scaling\": {\n    \"factor\": 32.0,\n    \"high_freq_factor\": 4.0,\n"
			   "    \"low_freq_factor\": 1.0,\n    \"original_max_position_embeddings\": 8192,\n"
			   "    \"rope_type\": \"llama3\"\n  },"));
	free(text);
	/* linear: factor only */
	d = config_case("lin", "{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.rope_type == FERRY_HF_ROPE_LINEAR && c.rope_factor == 2.0);

	/* Qwen2.5-0.5B's published config.json (Qwen2Config's keys). */
	d = config_case("qwen25", QWEN25_05B);
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(!strcmp(c.model_type, "qwen2") && c.hidden_size == 896 && c.intermediate_size == 4864 &&
	      c.num_attention_heads == 14 && c.num_key_value_heads == 2 && c.head_dim == 64 &&
	      c.num_hidden_layers == 24 && c.vocab_size == 151936 && c.max_position_embeddings == 32768 &&
	      c.rope_theta == 1000000.0 && c.rms_norm_eps == 1e-6 && c.tie_word_embeddings &&
	      c.rope_type == FERRY_HF_ROPE_DEFAULT);
	CHECK(mkdir(tpath("qout"), 0755) == 0);
	CHECK_OK(ferry_hf_config_write(tpath("qout"), &c));
	CHECK_OK(ferry_hf_config_read(tpath("qout"), &back));
	CHECK(config_equal(&c, &back));
	text = read_bytes(tpath("qout/config.json"), &n);
	CHECK(strstr(text, "\"Qwen2ForCausalLM\"") && strstr(text, "\"use_sliding_window\": false") &&
	      !strstr(text, "attention_bias"));
	free(text);
	/* Qwen2Config's defaults; the architecture alone names the family. */
	d = config_case("qdef", "{\"architectures\": [\"Qwen2ForCausalLM\"]}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(!strcmp(c.model_type, "qwen2") && c.vocab_size == 151936 && c.intermediate_size == 22016 &&
	      c.max_position_embeddings == 32768 && c.rms_norm_eps == 1e-6);

	/* LlamaConfig's defaults. */
	d = config_case("defaults", "{\"model_type\": \"llama\"}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.vocab_size == 32000 && c.hidden_size == 4096 &&
	      c.intermediate_size == 11008 && c.num_hidden_layers == 32 &&
	      c.num_attention_heads == 32 && c.num_key_value_heads == 32 &&
	      c.head_dim == 128 && c.max_position_embeddings == 2048 &&
	      c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6 &&
	      !c.tie_word_embeddings && !strcmp(c.torch_dtype, "float32"));
	/* null is None: the default. */
	d = config_case("nulls", "{\"model_type\": \"llama\", \"num_key_value_heads\": null,"
				 " \"head_dim\": null, \"rope_scaling\": null, \"num_attention_heads\": 8}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.num_key_value_heads == 8 && c.head_dim == 512);
	/* No model_type, but the architecture. */
	d = config_case("arch", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
				" \"num_attention_heads\": 4, \"rope_theta\": 500000,"
				" \"dtype\": \"float16\", \"hidden_act\": \"silu\"}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.head_dim == 16 && c.rope_theta == 500000.0 &&
	      !strcmp(c.torch_dtype, "float16") && !strcmp(c.model_type, "llama"));
	/* A key given twice is refused. */
	d = config_case("hd", "{" LLAMA_MIN ", \"num_attention_heads\": 3, \"head_dim\": 32}");
	CHECK_ERR(ferry_hf_config_read(d, &c), FERRY_ERR_FORMAT, "duplicate");
	/* head_dim given: the heads need not divide hidden_size. */
	d = config_case("hd2", "{\"model_type\": \"llama\", \"hidden_size\": 64,"
			       " \"num_attention_heads\": 3, \"head_dim\": 32}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.head_dim == 32 && c.num_attention_heads == 3);
	/* rope_scaling without a type, or "default", is plain RoPE. */
	d = config_case("rs0", "{" LLAMA_MIN ", \"rope_scaling\": {\"factor\": 2.0}}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	d = config_case("rs1", "{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"default\"}}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	d = config_case("rp", "{" LLAMA_MIN ", \"rope_parameters\": {\"rope_type\": \"default\","
			      " \"rope_theta\": 1000000.0}}");
	CHECK_OK(ferry_hf_config_read(d, &c));
	CHECK(c.rope_theta == 1e6);
	/* The file itself may be named. */
	snprintf(msg, sizeof(msg), "%s/config.json", d);
	CHECK_OK(ferry_hf_config_read(msg, &c));

	/* Errors. */
	snprintf(msg, sizeof(msg), "%s/config.json: model_type 'gpt2' is not a Llama or Qwen 2",
		 tpath("cfg_gpt2"));
	BAD_CONFIG("gpt2", "{\"model_type\": \"gpt2\", \"n_embd\": 768}", FERRY_ERR_FORMAT, msg);
	BAD_CONFIG("noarch", "{\"architectures\": [\"GPT2LMHeadModel\"]}", FERRY_ERR_FORMAT,
		   "architectures lists none of LlamaForCausalLM, Qwen2ForCausalLM");
	BAD_CONFIG("mtnum", "{\"model_type\": 7}", FERRY_ERR_FORMAT, "model_type '7' is not a Llama");
	BAD_CONFIG("div", "{\"model_type\": \"llama\", \"hidden_size\": 100, \"num_attention_heads\": 3}",
		   FERRY_ERR_FORMAT, "hidden_size (100) is not divisible by num_attention_heads (3)");
	BAD_CONFIG("kv", "{" LLAMA_MIN ", \"num_key_value_heads\": 3}", FERRY_ERR_FORMAT,
		   "num_attention_heads (4) is not divisible by num_key_value_heads (3)");
	BAD_CONFIG("neg", "{" LLAMA_MIN ", \"num_hidden_layers\": -2}", FERRY_ERR_FORMAT,
		   "num_hidden_layers must be a positive integer that fits an int, not -2");
	BAD_CONFIG("zero", "{" LLAMA_MIN ", \"vocab_size\": 0}", FERRY_ERR_FORMAT,
		   "vocab_size must be a positive integer");
	BAD_CONFIG("big", "{" LLAMA_MIN ", \"intermediate_size\": 3000000000}", FERRY_ERR_FORMAT,
		   "intermediate_size must be a positive integer that fits an int, not 3000000000");
	BAD_CONFIG("real", "{" LLAMA_MIN ", \"max_position_embeddings\": 2048.5}", FERRY_ERR_FORMAT,
		   "max_position_embeddings must be a positive integer that fits an int, not 2048.5");
	BAD_CONFIG("str", "{" LLAMA_MIN ", \"vocab_size\": \"32000\"}", FERRY_ERR_FORMAT,
		   "not \"32000\"");
	BAD_CONFIG("odd", "{" LLAMA_MIN ", \"head_dim\": 15}", FERRY_ERR_FORMAT,
		   "head_dim (15) must be even");
	BAD_CONFIG("theta", "{" LLAMA_MIN ", \"rope_theta\": -1}", FERRY_ERR_FORMAT,
		   "rope_theta must be a positive number");
	BAD_CONFIG("eps", "{" LLAMA_MIN ", \"rms_norm_eps\": \"x\"}", FERRY_ERR_FORMAT,
		   "rms_norm_eps must be a positive number");
	BAD_CONFIG("tie", "{" LLAMA_MIN ", \"tie_word_embeddings\": 1}", FERRY_ERR_FORMAT,
		   "tie_word_embeddings must be true or false");
	BAD_CONFIG("dtype", "{" LLAMA_MIN ", \"torch_dtype\": \"a-very-long-dtype-name\"}",
		   FERRY_ERR_FORMAT, "torch_dtype must be a string of at most 15 characters");
	BAD_CONFIG("yarn", "{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0}}",
		   FERRY_ERR_UNSUPPORTED, "rope_scaling of type \"yarn\" is not supported");
	BAD_CONFIG("linx", "{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0,"
		   " \"attention_factor\": 1.5}}", FERRY_ERR_UNSUPPORTED, "rope_scaling's attention_factor");
	BAD_CONFIG("l3miss", "{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
		   " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}}", FERRY_ERR_FORMAT,
		   "rope_scaling's high_freq_factor must be a positive number, not absent");
	BAD_CONFIG("l3neg", "{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": -8.0}}",
		   FERRY_ERR_FORMAT, "rope_scaling's factor must be a positive number, not -8");
	BAD_CONFIG("unknown", "{" LLAMA_MIN ", \"logit_scale\": 0.5}", FERRY_ERR_UNSUPPORTED,
		   "logit_scale is not a field ferry implements");
	BAD_CONFIG("drop", "{" LLAMA_MIN ", \"attention_dropout\": 0.1}", FERRY_ERR_UNSUPPORTED,
		   "attention_dropout 0.1 is not supported");
	BAD_CONFIG("sw", "{" LLAMA_MIN ", \"sliding_window\": 4096}", FERRY_ERR_UNSUPPORTED,
		   "sliding_window 4096 is not supported (sliding-window attention");
	BAD_CONFIG("qlt", "{\"model_type\": \"qwen2\", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
		   FERRY_ERR_UNSUPPORTED, "layer_types[1] \"sliding_attention\" is not supported");
	BAD_CONFIG("qab", "{\"model_type\": \"qwen2\", \"attention_bias\": true}",
		   FERRY_ERR_UNSUPPORTED, "attention_bias is not a field of Qwen2ForCausalLM");
	BAD_CONFIG("rsnum", "{" LLAMA_MIN ", \"rope_scaling\": 2}", FERRY_ERR_UNSUPPORTED,
		   "rope_scaling 2 is not supported");
	BAD_CONFIG("rp3", "{" LLAMA_MIN ", \"rope_parameters\": {\"rope_type\": \"yarn\"}}",
		   FERRY_ERR_UNSUPPORTED, "rope_parameters of type \"yarn\"");
	BAD_CONFIG("act", "{" LLAMA_MIN ", \"hidden_act\": \"gelu\"}", FERRY_ERR_UNSUPPORTED,
		   "hidden_act \"gelu\" is not supported");
	BAD_CONFIG("bias", "{" LLAMA_MIN ", \"attention_bias\": true}", FERRY_ERR_UNSUPPORTED,
		   "attention_bias");
	BAD_CONFIG("mlpbias", "{" LLAMA_MIN ", \"mlp_bias\": true}", FERRY_ERR_UNSUPPORTED,
		   "mlp_bias");
	BAD_CONFIG("notjson", "{\"model_type\": \"llama\",", FERRY_ERR_FORMAT,
		   "config.json: not valid JSON");
	BAD_CONFIG("arr", "[1]", FERRY_ERR_FORMAT, "config.json: not a JSON object");
	CHECK_ERR(ferry_hf_config_read(tpath("nothing"), &c), FERRY_ERR_IO,
		  "nothing/config.json: cannot open");
	CHECK(mkfifo(tpath("fifo.json"), 0644) == 0);
	CHECK_ERR(ferry_hf_config_read(tpath("fifo.json"), &c), FERRY_ERR_IO,
		  "fifo.json: not a regular file");
	CHECK_ERR(ferry_hf_config_read(NULL, &c), FERRY_ERR_INVALID, "NULL");
	/* A failed read leaves *out alone. */
	memset(&c, 0x5a, sizeof(c));
	memcpy(&back, &c, sizeof(c));
	CHECK(ferry_hf_config_read(tpath("cfg_kv"), &c) != FERRY_OK);
	CHECK(!memcmp(&c, &back, sizeof(c)));

	/* Writer: round trip, pretty-printed, transformers' keys. */
	CHECK_OK(ferry_hf_config_read(data_path("tinyllama_config.json"), &c));
	CHECK(mkdir(tpath("out"), 0755) == 0);
	CHECK_OK(ferry_hf_config_write(tpath("out"), &c));
	CHECK(no_tmp_files(tpath("out")));
	memset(&back, 0, sizeof(back));
	CHECK_OK(ferry_hf_config_read(tpath("out"), &back));
	CHECK(config_equal(&c, &back));
	text = read_bytes(tpath("out/config.json"), &n);
	CHECK(strstr(text, "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n") == text);
	CHECK(strstr(text, "\n  \"model_type\": \"llama\",\n"));
	CHECK(strstr(text, "\n  \"hidden_act\": \"silu\",\n"));
	CHECK(strstr(text, "\n  \"rms_norm_eps\": 1e-5,\n")); /* jansson's spelling */
	CHECK(strstr(text, "\n  \"rope_theta\": 10000.0,\n"));
	CHECK(strstr(text, "\n  \"tie_word_embeddings\": false,\n"));
	CHECK(strstr(text, "\n  \"torch_dtype\": \"bfloat16\"\n}\n"));
	free(text);
	/* An empty torch_dtype is written as float32; odd values round trip. */
	c.torch_dtype[0] = '\0';
	c.rms_norm_eps = 1.0 / 3.0;
	c.rope_theta = 123456.789;
	c.tie_word_embeddings = true;
	CHECK_OK(ferry_hf_config_write(tpath("out"), &c));
	CHECK_OK(ferry_hf_config_read(tpath("out"), &back));
	CHECK(!strcmp(back.torch_dtype, "float32") && back.rms_norm_eps == 1.0 / 3.0 &&
	      back.rope_theta == 123456.789 && back.tie_word_embeddings);

	/* Invalid configs are refused and nothing is written. */
	back = c;
	back.num_key_value_heads = 5;
	CHECK(mkdir(tpath("out2"), 0755) == 0);
	CHECK_ERR(ferry_hf_config_write(tpath("out2"), &back), FERRY_ERR_INVALID,
		  "num_attention_heads (32) is not divisible by num_key_value_heads (5)");
	back = c;
	back.vocab_size = 0;
	CHECK_ERR(ferry_hf_config_write(tpath("out2"), &back), FERRY_ERR_INVALID,
		  "out2/config.json: vocab_size must be positive");
	back = c;
	back.rms_norm_eps = 0;
	CHECK_ERR(ferry_hf_config_write(tpath("out2"), &back), FERRY_ERR_INVALID,
		  "rms_norm_eps");
	CHECK(!exists(tpath("out2/config.json")) && no_tmp_files(tpath("out2")));
	CHECK_ERR(ferry_hf_config_write(tpath("nodir"), &c), FERRY_ERR_IO,
		  "nodir/config.json.tmp.");
	CHECK(!exists(tpath("nodir")));

	/* Allocation failures: clean, nothing half-written, then it works. */
	text = read_bytes(tpath("out/config.json"), &n);
	c.num_hidden_layers = 3;
	for (i = 0; i < 100; i++) {
		ferry_status s;
		char *now;
		long nn;

		ferry_fault_fail_after(i);
		s = ferry_hf_config_write(tpath("out"), &c);
		ferry_fault_fail_after(-1);
		if (s == FERRY_OK)
			break;
		CHECK(s == FERRY_ERR_NOMEM && strstr(ferry_last_error(), tpath("out")));
		CHECK(no_tmp_files(tpath("out")));
		now = read_bytes(tpath("out/config.json"), &nn);
		CHECK(nn == n && !memcmp(now, text, (size_t)n));
		free(now);
	}
	CHECK(i > 0 && i < 100);
	free(text);
	CHECK_OK(ferry_hf_config_read(tpath("out"), &back));
	CHECK(back.num_hidden_layers == 3);
	for (i = 0; i < 100; i++) {
		ferry_status s;

		ferry_fault_fail_after(i);
		s = ferry_hf_config_read(tpath("out"), &back);
		ferry_fault_fail_after(-1);
		if (s == FERRY_OK)
			break;
		CHECK(s == FERRY_ERR_NOMEM);
	}
	CHECK(i > 0 && i < 100);
}

/* ---- files made by the reference implementation -------------------------------------- */

/* What make_safetensors_fixtures.py stores (see there). */
static void test_reference_files(void)
{
	ferry_safetensors_t st = NULL;
	float v[64], src[64];
	int i, bad;
	const char *p = data_path("ref_mixed.safetensors");

	if (!exists(p)) {
		fprintf(stderr, "fixtures missing: %s\n", p);
		failures++;
		return;
	}
	CHECK_OK(ferry_safetensors_open(p, &st));
	if (!st)
		return;
	CHECK(ferry_safetensors_count(st) == 8);
	CHECK(!strcmp(ferry_safetensors_metadata(st, "format"), "pt"));
	{
		const int64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s32[2] = { 3, 2 };
		const int64_t s64[1] = { 64 }, s8[1] = { 8 };

		/* fp32: exact. */
		CHECK_OK(ferry_safetensors_read_f32(st, "model.embed_tokens.weight", s23, 2, v));
		for (i = 0, bad = 0; i < 6; i++)
			bad += v[i] != (float)(i - 5) * 0.375f;
		CHECK(bad == 0);
		/* bf16: 1, -2.5, 3.140625 (pi), 0x714a (1e30 rounded). */
		CHECK_OK(ferry_safetensors_read_f32(st, "model.norm.weight", s4, 1, v));
		CHECK(v[0] == 1.0f && v[1] == -2.5f && v[2] == 3.140625f &&
		      f_bits(v[3]) == 0x714a0000u);
		CHECK(ferry_st_f32_to_bf16(1e30f) == 0x714a);
		/* fp16: 65504, smallest subnormal, -0, inf, -inf, nan. */
		CHECK_OK(ferry_safetensors_read_f32(st, "lm_head.weight", s32, 2, v));
		CHECK(v[0] == 65504.0f && v[1] == ldexpf(1.0f, -24) &&
		      f_bits(v[2]) == 0x80000000u && isinf(v[3]) && v[3] > 0 &&
		      isinf(v[4]) && v[4] < 0 && isnan(v[5]));
		/* numpy's fp32 -> fp16 rounding equals ferry's, value by value. */
		CHECK_OK(ferry_safetensors_read_f32(st, "ref.f16_src", s64, 1, src));
		CHECK_OK(ferry_safetensors_read_f32(st, "ref.f16_rounded", s64, 1, v));
		for (i = 0, bad = 0; i < 64; i++)
			if (!same_value(v[i], through(FERRY_ST_F16, src[i]))) {
				fprintf(stderr, "  f16 %d: %a -> numpy %a, ferry %a\n", i,
					src[i], v[i], through(FERRY_ST_F16, src[i]));
				bad++;
			}
		CHECK(bad == 0);
		/* bf16 ties and near-ties rounded by hand. */
		CHECK_OK(ferry_safetensors_read_f32(st, "ref.bf16_src", s8, 1, src));
		CHECK_OK(ferry_safetensors_read_f32(st, "ref.bf16_rounded", s8, 1, v));
		for (i = 0, bad = 0; i < 8; i++)
			if (!same_value(v[i], through(FERRY_ST_BF16, src[i]))) {
				fprintf(stderr, "  bf16 %d: %a -> %a, ferry %a\n", i,
					src[i], v[i], through(FERRY_ST_BF16, src[i]));
				bad++;
			}
		CHECK(bad == 0);
		/* Scalar. */
		CHECK_OK(ferry_safetensors_read_f32(st, "scalar", NULL, 0, v));
		CHECK(v[0] == 42.0f);
	}
	ferry_safetensors_close(st);

	/* The sharded directory (index written as transformers writes it). */
	st = NULL;
	CHECK_OK(ferry_safetensors_open(data_path("ref_sharded"), &st));
	if (!st)
		return;
	CHECK(ferry_safetensors_count(st) == 3);
	{
		const int64_t s[2] = { 4, 4 };

		for (i = 0; i < 3; i++) {
			char name[64];
			int j;

			snprintf(name, sizeof(name), "model.layers.%d.self_attn.q_proj.weight", i);
			CHECK_OK(ferry_safetensors_read_f32(st, name, s, 2, v));
			for (j = 0, bad = 0; j < 16; j++)
				bad += v[j] != (float)(i * 16 + j) / 8.0f;
			CHECK(bad == 0);
		}
		CHECK(strstr(ferry_safetensors_find(st, "model.layers.2.self_attn.q_proj.weight")->file,
			     "model-00002-of-00002.safetensors") != NULL);
		CHECK(strstr(ferry_safetensors_find(st, "model.layers.1.self_attn.q_proj.weight")->file,
			     "model-00001-of-00002.safetensors") != NULL);
	}
	ferry_safetensors_close(st);
}

int main(void)
{
	scratch_dir_make("test_safetensors");
	test_conversions();
	test_roundtrip();
	test_sharded();
	test_bad_files();
	test_write_failures();
	test_config();
	test_token_ids();
	test_reference_files();
	return scratch_finish("test_safetensors");
}
