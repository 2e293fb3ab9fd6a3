/* Token shards: the loader's batches and positions, shard validation,
 * text -> shards, and the tokenizers. */
#include "ferry/data.h"

#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_test_util.h"

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* A shard whose header says `count` tokens but that holds n_tok of them. */
static void write_shard(const char *path, int magic, int version, int count,
			const uint16_t *tok, int n_tok)
{
	int32_t hdr[256] = { 0 };
	FILE *f = fopen(path, "wb");

	hdr[0] = magic;
	hdr[1] = version;
	hdr[2] = count;
	if (!f || fwrite(hdr, sizeof(hdr), 1, f) != 1 ||
	    (n_tok && fwrite(tok, 2, (size_t)n_tok, f) != (size_t)n_tok) ||
	    fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

static void good_shard(const char *path, int base, int n)
{
	uint16_t tok[256];
	int i;

	for (i = 0; i < n; i++)
		tok[i] = (uint16_t)(base + i);
	write_shard(path, 20240520, 1, n, tok, n);
}

/* Reads a shard written by ferry_data_from_text: header count -> *n,
 * tokens appended to out[*total]. */
static void read_shard(const char *path, uint16_t *out, int *total, int cap)
{
	int32_t hdr[256];
	FILE *f = fopen(path, "rb");

	if (!f || fread(hdr, sizeof(hdr), 1, f) != 1) {
		fprintf(stderr, "%s:%d: cannot read %s\n", __FILE__, __LINE__,
			path);
		failures++;
		if (f)
			fclose(f);
		return;
	}
	CHECK(hdr[0] == 20240520 && hdr[1] == 1);
	CHECK(hdr[2] >= 0 && *total + hdr[2] <= cap);
	if (hdr[2] >= 0 && *total + hdr[2] <= cap) {
		CHECK(fread(out + *total, 2, (size_t)hdr[2], f) == (size_t)hdr[2]);
		*total += hdr[2];
	}
	CHECK(fgetc(f) == EOF); /* exact length */
	fclose(f);
}

/* ---- loader --------------------------------------------------------------- */

/* B=2, T=4: a batch reads 9 tokens and advances 8. */
#define B 2
#define T 4

static void expect_batch(ferry_loader_t l, int64_t shard, int64_t off,
			 int base, int line)
{
	int32_t in[B * T], tg[B * T];
	int64_t s, o;
	int i, ok = 1;

	ferry_loader_position(l, &s, &o);
	if (s != shard || o != off) {
		fprintf(stderr, "%s:%d: position (%lld, %lld), want (%lld, %lld)\n",
			__FILE__, line, (long long)s, (long long)o,
			(long long)shard, (long long)off);
		failures++;
	}
	if (ferry_loader_next(l, in, tg) != FERRY_OK) {
		fprintf(stderr, "%s:%d: next failed: %s\n", __FILE__, line,
			ferry_last_error());
		failures++;
		return;
	}
	for (i = 0; i < B * T; i++)
		ok &= in[i] == base + off + i && tg[i] == base + off + i + 1;
	if (!ok) {
		fprintf(stderr, "%s:%d: batch at (%lld, %lld) has %d.. -> %d.., want %lld..\n",
			__FILE__, line, (long long)shard, (long long)off, in[0],
			tg[0], (long long)(base + off));
		failures++;
	}
}

static void test_loader(void)
{
	const char *pat = tpath("ok_*.bin");
	int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
	ferry_loader_t l = NULL;
	int64_t s, o;
	ferry_status st;
	int i;

	/* Written out of order: the loader must sort by name.  Shard 1 is
	 * shorter than a batch and is skipped. */
	good_shard(tpath("ok_000002.bin"), 200, 20);
	good_shard(tpath("ok_000001.bin"), 150, 5);
	good_shard(tpath("ok_000000.bin"), 100, 30);

	CHECK_OK(ferry_loader_open(pat, B, T, 1000, &l));
	if (!l)
		return;
	CHECK(ferry_loader_num_shards(l) == 3);
	CHECK(ferry_loader_num_tokens(l) == 55);

	expect_batch(l, 0, 0, 100, __LINE__);
	expect_batch(l, 0, 8, 100, __LINE__);
	expect_batch(l, 0, 16, 100, __LINE__);
	/* 6 tokens left in shard 0, shard 1 too short: on to shard 2. */
	expect_batch(l, 2, 0, 200, __LINE__);
	expect_batch(l, 2, 8, 200, __LINE__);
	/* 4 left: wrap around. */
	expect_batch(l, 0, 0, 100, __LINE__);
	expect_batch(l, 0, 8, 100, __LINE__);

	/* Position / seek round trip gives the identical batch. */
	ferry_loader_position(l, &s, &o);
	CHECK(s == 0 && o == 16);
	CHECK_OK(ferry_loader_next(l, in, tg));
	CHECK_OK(ferry_loader_next(l, in2, tg2));
	CHECK_OK(ferry_loader_seek(l, s, o));
	expect_batch(l, 0, 16, 100, __LINE__);
	CHECK_OK(ferry_loader_next(l, in, tg));
	CHECK(!memcmp(in, in2, sizeof(in)) && !memcmp(tg, tg2, sizeof(tg)));
	CHECK(in[0] == 200);

	/* Seeks that need settling. */
	CHECK_OK(ferry_loader_seek(l, 0, 30));
	expect_batch(l, 2, 0, 200, __LINE__);
	CHECK_OK(ferry_loader_seek(l, 1, 0));
	expect_batch(l, 2, 0, 200, __LINE__);
	CHECK_OK(ferry_loader_seek(l, 2, 11));
	expect_batch(l, 2, 11, 200, __LINE__);
	CHECK_OK(ferry_loader_seek(l, 2, 12));
	expect_batch(l, 0, 0, 100, __LINE__);
	CHECK_OK(ferry_loader_seek(l, 0, 21));
	expect_batch(l, 0, 21, 100, __LINE__);

	/* Bad seeks leave the position alone. */
	CHECK_OK(ferry_loader_seek(l, 0, 5));
	CHECK_ERR(ferry_loader_seek(l, -1, 0), FERRY_ERR_INVALID, "shard -1");
	CHECK_ERR(ferry_loader_seek(l, 3, 0), FERRY_ERR_INVALID, "shard 3");
	CHECK_ERR(ferry_loader_seek(l, 0, -1), FERRY_ERR_INVALID, "offset -1");
	CHECK_ERR(ferry_loader_seek(l, 0, 31), FERRY_ERR_INVALID,
		  "ok_000000.bin");
	expect_batch(l, 0, 5, 100, __LINE__);

	ferry_loader_rewind(l);
	expect_batch(l, 0, 0, 100, __LINE__);
	ferry_loader_free(l);

	/* Batch exactly the size of the largest shard: T such that
	 * B*T+1 == 30 is impossible with B=2, so use B=1, T=29. */
	CHECK_OK(ferry_loader_open(pat, 1, 29, 1000, &l));
	if (l) {
		int32_t bin[29], btg[29];

		for (i = 0; i < 3; i++) {
			CHECK_OK(ferry_loader_next(l, bin, btg));
			CHECK(bin[0] == 100 && btg[28] == 129);
			ferry_loader_position(l, &s, &o);
			CHECK(s == 0 && o == 0);
		}
		ferry_loader_free(l);
		l = NULL;
	}

	/* Allocation failures at open: clean NOMEM each time, then success. */
	for (i = 0;; i++) {
		ferry_fault_fail_after(i);
		st = ferry_loader_open(pat, B, T, 1000, &l);
		ferry_fault_fail_after(-1);
		if (st == FERRY_OK)
			break;
		CHECK(st == FERRY_ERR_NOMEM && l == NULL);
		if (i > 50 || st != FERRY_ERR_NOMEM)
			break;
	}
	CHECK(i > 0 && st == FERRY_OK);
	/* next does not allocate. */
	ferry_fault_fail_after(0);
	if (l)
		expect_batch(l, 0, 0, 100, __LINE__);
	ferry_fault_fail_after(-1);
	ferry_loader_free(l);
	ferry_loader_free(NULL);
}

/* One shuffled batch: each row must be a whole sample (T+1 consecutive
 * tokens from token s*T of one shard, s < its samples); ids[b] gets
 * shard * 100 + s.  Shards as test_loader writes them: base 100 + 50 * i. */
static int shuffled_batch(ferry_loader_t l, int *ids)
{
	static const int samples[3] = { 7, 1, 4 }; /* (tokens - 1) / T */
	int32_t in[B * T], tg[B * T];
	int ok = 1;

	if (ferry_loader_next(l, in, tg) != FERRY_OK)
		return 0;
	for (int b = 0; b < B; b++) {
		int shard = (in[b * T] - 100) / 50, s = (in[b * T] - 100 - 50 * shard) / T;

		ok &= shard >= 0 && shard < 3 && s < samples[shard] && (in[b * T] - 100) % T == 0;
		for (int t = 0; t < T; t++)
			ok &= in[b * T + t] == in[b * T] + t && tg[b * T + t] == in[b * T] + t + 1;
		ids[b] = shard * 100 + s;
	}
	return ok;
}

/* llm.c's shuffling: an epoch visits every usable shard, B samples to a
 * batch, no sample twice; the orders come from the seed and the position
 * alone (a seek in a fresh loader continues them exactly); other seeds
 * and epochs give other orders, unlike the in-order walk. */
static void test_loader_shuffled(void)
{
	const char *pat = tpath("ok_*.bin");
	int ids[3][5 * B], again[5 * B], seen[300] = { 0 };
	ferry_loader_t l = NULL, l2 = NULL;
	int64_t s, o, e;
	int i, ok = 1, differ = 0;

	/* shard 0: 30 tokens, 7 samples, 3 batches; shard 1: 1 sample, none;
	 * shard 2: 20 tokens, 4 samples, 2 batches: 5 batches an epoch */
	CHECK_OK(ferry_loader_open(pat, B, T, 1000, &l));
	CHECK_OK(ferry_loader_open(pat, B, T, 1000, &l2));
	if (!l || !l2)
		return;
	CHECK(!ferry_loader_shuffled(l));
	CHECK_OK(ferry_loader_shuffle(l, 1337));
	CHECK(ferry_loader_shuffled(l) && ferry_loader_epoch(l) == 0);
	for (e = 0; e < 3; e++)
		for (i = 0; i < 5; i++) {
			ok &= shuffled_batch(l, &ids[e][i * B]);
			ok &= ferry_loader_epoch(l) == e + (i == 4);
		}
	/* every shuffled row is a whole sample; 5 batches an epoch */
	CHECK(ok);
	for (i = 0; i < 5 * B; i++)
		seen[ids[0][i]]++;
	for (i = 0, ok = 1; i < 300; i++)
		ok &= seen[i] <= 1;
	/* no sample twice in an epoch */
	CHECK(ok);
	for (i = 0, o = 0, s = 0; i < 7; i++)
		o += seen[i] == 1;
	for (i = 0; i < 4; i++)
		s += seen[200 + i] == 1;
	/* 6 of shard 0's 7 samples, all 4 of shard 2's, none of shard 1 */
	CHECK(o == 6 && s == 4 && seen[100] == 0);
	/* epochs have their own orders */
	CHECK(memcmp(ids[0], ids[1], sizeof(ids[0])) || memcmp(ids[1], ids[2], sizeof(ids[0])));

	/* the in-order walk reads samples 0, 1, 2, ... of shard 0 first */
	for (i = 0; i < 5 * B; i++)
		differ |= ids[0][i] != (i < 6 ? i : 200 + i - 6);
	/* shuffled differs from the in-order walk */
	CHECK(differ);

	/* same seed: same batches; a seek to a saved position continues them */
	CHECK_OK(ferry_loader_shuffle(l2, 1337));
	for (i = 0, ok = 1; i < 5; i++)
		ok &= shuffled_batch(l2, &again[i * B]);
	/* the seed reproduces the order */
	CHECK(ok && !memcmp(again, ids[0], sizeof(again)));
	for (i = 0; i < 2; i++)
		ok &= shuffled_batch(l2, again);
	ferry_loader_position(l2, &s, &o);
	e = ferry_loader_epoch(l2);
	/* after 7 batches: epoch 1, a whole batch in */
	CHECK(e == 1 && o % B == 0);
	ferry_loader_free(l2);
	CHECK_OK(ferry_loader_open(pat, B, T, 1000, &l2));
	CHECK_OK(ferry_loader_shuffle(l2, 1337));
	CHECK_OK(ferry_loader_seek_epoch(l2, e, s, o));
	for (i = 0; i < 3; i++)
		ok &= shuffled_batch(l2, &again[i * B]);
	/* a seek continues the saved order */
	CHECK(ok && !memcmp(again, &ids[1][2 * B], 3 * B * sizeof(int)));
	ferry_loader_rewind(l2);
	/* rewind: epoch 0 again */
	CHECK(shuffled_batch(l2, again) && !memcmp(again, ids[0], B * sizeof(int)));
	CHECK_ERR(ferry_loader_seek_epoch(l2, -1, 0, 0), FERRY_ERR_INVALID, "epoch -1");
	CHECK_ERR(ferry_loader_seek_epoch(l2, 0, 0, 8), FERRY_ERR_INVALID, "(7 samples)");

	/* another seed, another order */
	CHECK_OK(ferry_loader_shuffle(l2, 1338));
	for (i = 0, ok = 1; i < 5; i++)
		ok &= shuffled_batch(l2, &again[i * B]);
	/* seed 1338 differs from 1337 */
	CHECK(ok && memcmp(again, ids[0], sizeof(again)));
	ferry_loader_free(l2);

	/* the in-order walk knows no epochs; allocation failures leave it so */
	CHECK_OK(ferry_loader_open(pat, B, T, 1000, &l2));
	CHECK_ERR(ferry_loader_seek_epoch(l2, 1, 0, 0), FERRY_ERR_INVALID, "in-order");
	ferry_fault_fail_after(0);
	CHECK_ERR(ferry_loader_shuffle(l2, 1), FERRY_ERR_NOMEM, "shuffled order");
	ferry_fault_fail_after(-1);
	CHECK(!ferry_loader_shuffled(l2));
	expect_batch(l2, 0, 0, 100, __LINE__);
	ferry_loader_free(l2);
	ferry_loader_free(l);
}

static void test_loader_bad(void)
{
	uint16_t tok[64];
	ferry_loader_t l = (ferry_loader_t)1;
	int32_t in[B * T], tg[B * T];
	int64_t s, o;
	int i;

	CHECK_ERR(ferry_loader_open(tpath("nothing_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_IO, "no files match '");
	CHECK(l == NULL);
	CHECK_ERR(ferry_loader_open(tpath("nothing_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_IO, tpath("nothing_*.bin"));
	CHECK_ERR(ferry_loader_open(tpath("ok_*.bin"), 0, T, 1000, &l),
		  FERRY_ERR_INVALID, "batch");
	CHECK_ERR(ferry_loader_open(tpath("ok_*.bin"), B, -1, 1000, &l),
		  FERRY_ERR_INVALID, "-1");
	CHECK_ERR(ferry_loader_open(tpath("ok_*.bin"), B, T, 0, &l),
		  FERRY_ERR_INVALID, "vocab");
	CHECK_ERR(ferry_loader_open(tpath("ok_*.bin"), 1 << 20, 1 << 20, 1000,
				    &l),
		  FERRY_ERR_INVALID, "too large");

	for (i = 0; i < 64; i++)
		tok[i] = (uint16_t)i;

	/* One bad file among good ones is named. */
	good_shard(tpath("magic_0.bin"), 0, 20);
	write_shard(tpath("magic_1.bin"), 20240326, 1, 20, tok, 20);
	CHECK_ERR(ferry_loader_open(tpath("magic_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "magic_1.bin: bad magic 20240326");

	write_shard(tpath("ver_0.bin"), 20240520, 4, 20, tok, 20);
	CHECK_ERR(ferry_loader_open(tpath("ver_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "ver_0.bin: version 4");

	/* Version 2 holds uint32 tokens: 20 uint16 are 10 of them. */
	write_shard(tpath("ver2_0.bin"), 20240520, 2, 20, tok, 20);
	CHECK_ERR(ferry_loader_open(tpath("ver2_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "ver2_0.bin: truncated");

	write_shard(tpath("trunc_0.bin"), 20240520, 1, 40, tok, 30);
	CHECK_ERR(ferry_loader_open(tpath("trunc_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "trunc_0.bin: truncated");

	write_shard(tpath("trail_0.bin"), 20240520, 1, 20, tok, 21);
	CHECK_ERR(ferry_loader_open(tpath("trail_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "trail_0.bin");

	write_shard(tpath("negc_0.bin"), 20240520, 1, -3, tok, 0);
	CHECK_ERR(ferry_loader_open(tpath("negc_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "negc_0.bin");

	write_bytes(tpath("tiny_0.bin"), tok, 10);
	CHECK_ERR(ferry_loader_open(tpath("tiny_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_FORMAT, "tiny_0.bin");

	/* Too short for one batch of 9 tokens. */
	good_shard(tpath("short_0.bin"), 0, 8);
	good_shard(tpath("short_1.bin"), 0, 3);
	CHECK_ERR(ferry_loader_open(tpath("short_*.bin"), B, T, 1000, &l),
		  FERRY_ERR_INVALID, "no shard has the 9 tokens");

	/* A token >= vocab is found when its batch is loaded; the error names
	 * the file and the token's index, and the position does not move. */
	for (i = 0; i < 30; i++)
		tok[i] = (uint16_t)(i % 50);
	tok[12] = 50;
	write_shard(tpath("vocab_0.bin"), 20240520, 1, 30, tok, 30);
	CHECK_OK(ferry_loader_open(tpath("vocab_*.bin"), B, T, 50, &l));
	if (l) {
		CHECK_OK(ferry_loader_next(l, in, tg));
		CHECK(in[0] == 0 && tg[7] == 8);
		CHECK_ERR(ferry_loader_next(l, in, tg), FERRY_ERR_FORMAT,
			  "vocab_0.bin: token 50 at index 12");
		ferry_loader_position(l, &s, &o);
		CHECK(s == 0 && o == 8);
		ferry_loader_free(l);
	}
	/* The same data is fine with a bigger vocab. */
	CHECK_OK(ferry_loader_open(tpath("vocab_*.bin"), B, T, 51, &l));
	if (l) {
		CHECK_OK(ferry_loader_next(l, in, tg));
		CHECK_OK(ferry_loader_next(l, in, tg));
		CHECK(in[4] == 50 && tg[3] == 50);
		ferry_loader_free(l);
	}
}

/* ---- text -> shards ----------------------------------------------------- */

static void put_text(uint16_t *out, int *n, const char *s)
{
	while (*s)
		out[(*n)++] = (unsigned char)*s++;
}

static void read_split(const char *prefix, const char *split, int shards,
		       uint16_t *out, int *n, int cap)
{
	char name[4300];
	int i;

	*n = 0;
	for (i = 0; i < shards; i++) {
		snprintf(name, sizeof(name), "%s_%s_%06d.bin", prefix, split, i);
		read_shard(name, out, n, cap);
	}
	snprintf(name, sizeof(name), "%s_%s_%06d.bin", prefix, split, shards);
	CHECK(!exists(name));
}

static int count_tmp_files(void)
{
	glob_t g;
	char pat[4200];
	int n;

	snprintf(pat, sizeof(pat), "%s/*.tmp*", dir);
	if (glob(pat, 0, NULL, &g) != 0)
		return 0;
	n = (int)g.gl_pathc;
	globfree(&g);
	return n;
}

static void test_text(void)
{
	const char *a = tpath("a.txt"), *b = tpath("b.txt");
	const char *prefix = tpath("txt");
	const char *paths[2] = { a, b };
	struct ferry_data_opts o = {
		.out_prefix = prefix, .doc_sep = "%", .val_fraction = 0.5,
		.shard_tokens = 5,
	};
	struct ferry_data_stats st;
	uint16_t want[64], got[256];
	int nw, ng, i;
	ferry_loader_t l;
	int32_t in[4], tg[4];
	const char *text_a = "hi\n%x\n%\nyo\r\n%\r\n\n%\nlast";
	const char *text_b = "%\nbye\n%\n";

	write_bytes(a, text_a, strlen(text_a));
	write_bytes(b, text_b, strlen(text_b));
	/* Leftovers of an earlier, longer run must disappear. */
	write_bytes(tpath("txt_val_000002.bin"), "x", 1);
	write_bytes(tpath("txt_val_000003.bin"), "x", 1);

	memset(&st, 0, sizeof(st));
	CHECK_OK(ferry_data_from_text(paths, 2, &o, &st));
	/* Documents: 1 "hi\n%x\n", 2 "yo\r\n", 3 "\n", 4 "last", 5 "bye\n";
	 * k = 2: documents 2 and 4 go to val. */
	CHECK(st.documents == 5);
	CHECK(st.train_tokens == 14 && st.val_tokens == 10);
	CHECK(st.train_shards == 3 && st.val_shards == 2);
	CHECK(!exists(tpath("txt_val_000002.bin")));
	CHECK(!exists(tpath("txt_val_000003.bin")));
	CHECK(count_tmp_files() == 0);

	nw = 0;
	want[nw++] = 256;
	put_text(want, &nw, "hi\n%x\n");
	want[nw++] = 256;
	put_text(want, &nw, "\n");
	want[nw++] = 256;
	put_text(want, &nw, "bye\n");
	read_split(prefix, "train", 3, got, &ng, 256);
	CHECK(ng == nw && !memcmp(got, want, (size_t)nw * 2));

	nw = 0;
	want[nw++] = 256;
	put_text(want, &nw, "yo\r\n");
	want[nw++] = 256;
	put_text(want, &nw, "last");
	read_split(prefix, "val", 2, got, &ng, 256);
	CHECK(ng == nw && !memcmp(got, want, (size_t)nw * 2));

	/* The loader reads them back (shards of 5 tokens: T=4 fits). */
	CHECK_OK(ferry_loader_open(tpath("txt_train_*.bin"), 1, 4,
				   FERRY_BYTE_VOCAB, &l));
	if (l) {
		CHECK(ferry_loader_num_tokens(l) == 14);
		CHECK_OK(ferry_loader_next(l, in, tg));
		CHECK(in[0] == 256 && in[1] == 'h' && in[2] == 'i' &&
		      in[3] == '\n' && tg[3] == '%');
		ferry_loader_free(l);
	}

	/* No separator, no val: one document per file, one shard. */
	o.doc_sep = NULL;
	o.val_fraction = 0;
	o.shard_tokens = 1000;
	o.out_prefix = tpath("whole");
	CHECK_OK(ferry_data_from_text(paths, 2, &o, &st));
	CHECK(st.documents == 2 && st.val_tokens == 0 && st.val_shards == 0);
	CHECK(st.train_shards == 1);
	CHECK(st.train_tokens == (long)(2 + strlen(text_a) + strlen(text_b)));
	nw = 0;
	want[nw++] = 256;
	put_text(want, &nw, text_a);
	want[nw++] = 256;
	put_text(want, &nw, text_b);
	read_split(tpath("whole"), "train", 1, got, &ng, 256);
	CHECK(ng == nw && !memcmp(got, want, (size_t)nw * 2));
	CHECK(!exists(tpath("whole_val_000000.bin")));

	/* val_fraction 1: everything to val but the first document, which
	 * always trains (a training set is never empty). */
	o.val_fraction = 1.0;
	o.out_prefix = tpath("allval");
	CHECK_OK(ferry_data_from_text(paths, 2, &o, &st));
	CHECK(st.train_shards == 1 && st.train_tokens == (long)(1 + strlen(text_a)) && st.val_shards == 1);
	CHECK(st.val_tokens == (long)(1 + strlen(text_b)));

	/* Blank-line separator. */
	{
		const char *c = tpath("c.txt");
		const char *one[1] = { c };

		write_bytes(c, "p1\nl2\n\r\np2\n\n\n", 13);
		o.doc_sep = "";
		o.val_fraction = 0;
		o.out_prefix = tpath("blank");
		CHECK_OK(ferry_data_from_text(one, 1, &o, &st));
		CHECK(st.documents == 2);
		nw = 0;
		want[nw++] = 256;
		put_text(want, &nw, "p1\nl2\n");
		want[nw++] = 256;
		put_text(want, &nw, "p2\n");
		read_split(tpath("blank"), "train", 1, got, &ng, 256);
		CHECK(ng == nw && !memcmp(got, want, (size_t)nw * 2));
	}

	/* Errors name the culprit. */
	o.doc_sep = "%";
	o.out_prefix = tpath("err");
	{
		const char *missing[2] = { a, tpath("missing.txt") };
		const char *empty_in[1] = { tpath("seps.txt") };

		CHECK_ERR(ferry_data_from_text(missing, 2, &o, &st), FERRY_ERR_IO,
			  "missing.txt");
		/* a failing run leaves the previous corpus of its prefix as it
		 * was, though it had written shards of other text before */
		{
			const char *other[2] = { tpath("other.txt"), tpath("missing.txt") };
			uint16_t before[256];
			int nb;

			write_bytes(other[0], "other text, long enough for shards\n", 35);
			read_split(prefix, "train", 3, before, &nb, 256);
			o.out_prefix = prefix;
			o.shard_tokens = 5;
			CHECK_ERR(ferry_data_from_text(other, 2, &o, &st), FERRY_ERR_IO, "missing.txt");
			o.shard_tokens = 1000;
			read_split(prefix, "train", 3, got, &ng, 256);
			CHECK(ng == nb && !memcmp(got, before, (size_t)nb * 2));
			CHECK(count_tmp_files() == 0);
			o.out_prefix = tpath("err");
		}
		write_bytes(tpath("seps.txt"), "%\n%\n", 4);
		CHECK_ERR(ferry_data_from_text(empty_in, 1, &o, &st),
			  FERRY_ERR_INVALID, "seps.txt");
	}
	o.out_prefix = tpath("no/such/dir/x");
	CHECK_ERR(ferry_data_from_text(paths, 2, &o, &st), FERRY_ERR_IO,
		  "no/such/dir/x_train_000000.bin.tmp");
	o.out_prefix = tpath("err");
	o.val_fraction = 1.5;
	CHECK_ERR(ferry_data_from_text(paths, 2, &o, &st), FERRY_ERR_INVALID,
		  "1.5");
	o.val_fraction = 0.1;
	o.shard_tokens = 0;
	CHECK_ERR(ferry_data_from_text(paths, 2, &o, &st), FERRY_ERR_INVALID,
		  "shard");
	o.shard_tokens = 100;
	CHECK_ERR(ferry_data_from_text(paths, 0, &o, &st), FERRY_ERR_INVALID,
		  "no input");
	CHECK(count_tmp_files() == 0);

	/* Allocation failures: clean NOMEM, then success. */
	o.out_prefix = tpath("fault");
	for (i = 0; i < 50; i++) {
		ferry_status s;

		ferry_fault_fail_after(i);
		s = ferry_data_from_text(paths, 2, &o, &st);
		ferry_fault_fail_after(-1);
		if (s == FERRY_OK)
			break;
		CHECK(s == FERRY_ERR_NOMEM);
		if (s != FERRY_ERR_NOMEM)
			break;
	}
	CHECK(i > 0 && i < 50);
	CHECK(count_tmp_files() == 0);
}

/* Separators split across the 64 KiB read chunks. */
static void test_text_chunks(void)
{
	const size_t chunk = 65536;
	const char *path = tpath("big.txt");
	const char *paths[1] = { path };
	struct ferry_data_opts o = {
		.out_prefix = tpath("big"), .doc_sep = "%%", .val_fraction = 0,
		.shard_tokens = 1 << 20,
	};
	struct ferry_data_stats st;
	size_t n = 0, i;
	char *text = malloc(3 * chunk);
	uint16_t *got = malloc(3 * chunk * 2);
	int ng;

	if (!text || !got)
		exit(1);
	/* doc 1: 'a' * (chunk - 2) + "\n", then "%%" straddling the chunk
	 * boundary (one '%' in each chunk), then "\r\n"; doc 2: a line that
	 * starts like the separator ("%%%") across the next boundary. */
	memset(text, 'a', chunk - 2);
	n = chunk - 2;
	text[n++] = '\n';
	text[n++] = '%'; /* last byte of chunk 1 */
	text[n++] = '%';
	text[n++] = '\r';
	text[n++] = '\n';
	while (n < 2 * chunk - 1)
		text[n++] = 'b';
	text[n - 1] = '\n';
	text[n++] = '%'; /* last byte of chunk 2 */
	text[n++] = '%';
	text[n++] = '%';
	text[n++] = '\n';
	text[n++] = '%';
	text[n++] = '%';
	write_bytes(path, text, n);

	CHECK_OK(ferry_data_from_text(paths, 1, &o, &st));
	CHECK(st.documents == 2);
	/* EOT + doc 1 (chunk - 1 bytes) + EOT + doc 2 (the rest, minus the
	 * two separator lines of 4 and 2 bytes). */
	CHECK(st.train_tokens == (long)(1 + (chunk - 1) + 1 + (n - (chunk - 1) - 4 - 2)));
	read_split(tpath("big"), "train", 1, got, &ng, (int)(3 * chunk));
	CHECK(ng == st.train_tokens);
	if (ng == st.train_tokens) {
		int ok = got[0] == 256 && got[chunk] == 256;

		for (i = 1; i < chunk - 1; i++)
			ok &= got[i] == 'a';
		ok &= got[chunk - 1] == '\n';
		ok &= got[chunk + 1] == 'b';
		ok &= got[ng - 4] == '%' && got[ng - 3] == '%' &&
		      got[ng - 2] == '%' && got[ng - 1] == '\n';
		ok &= got[ng - 5] == '\n' && got[ng - 6] == 'b';
		CHECK(ok);
	}
	free(text);
	free(got);
}

/* ---- tokenizer ------------------------------------------------------------ */

static void write_tokenizer(const char *path, int magic, int version,
			    int vocab, int eot, const char *const *toks,
			    int n_toks, int cut)
{
	unsigned char buf[2048];
	int32_t hdr[256] = { 0 };
	size_t n = 0;
	int i;

	hdr[0] = magic;
	hdr[1] = version;
	hdr[2] = vocab;
	hdr[3] = eot;
	memcpy(buf, hdr, sizeof(hdr));
	n = sizeof(hdr);
	for (i = 0; i < n_toks; i++) {
		size_t len = strlen(toks[i]);

		buf[n++] = (unsigned char)len;
		memcpy(buf + n, toks[i], len);
		n += len;
	}
	write_bytes(path, buf, n - (size_t)cut);
}

static void test_tokenizer(void)
{
	const char *toks[4] = { "a", "bc", "", "<|eot|>" };
	ferry_tokenizer_t t = NULL;
	const char *p;
	int len, i;

	CHECK_OK(ferry_tokenizer_open(NULL, &t));
	if (t) {
		CHECK(ferry_tokenizer_eot(t) == 256);
		for (i = 0; i < 256; i++) {
			p = ferry_tokenizer_decode(t, i, &len);
			CHECK(p && len == 1 && (unsigned char)p[0] == i);
		}
		p = ferry_tokenizer_decode(t, 256, &len);
		CHECK(!p && len == 0);
		p = ferry_tokenizer_decode(t, 257, &len);
		CHECK(!p && len == 0);
		p = ferry_tokenizer_decode(t, -1, &len);
		CHECK(!p && len == 0);
		ferry_tokenizer_free(t);
	}

	write_tokenizer(tpath("tok2.bin"), 20240328, 2, 4, 3, toks, 4, 0);
	CHECK_OK(ferry_tokenizer_open(tpath("tok2.bin"), &t));
	if (t) {
		CHECK(ferry_tokenizer_eot(t) == 3);
		p = ferry_tokenizer_decode(t, 0, &len);
		CHECK(p && len == 1 && p[0] == 'a');
		p = ferry_tokenizer_decode(t, 1, &len);
		CHECK(p && len == 2 && !memcmp(p, "bc", 2));
		p = ferry_tokenizer_decode(t, 2, &len);
		CHECK(len == 0);
		p = ferry_tokenizer_decode(t, 3, &len);
		CHECK(!p && len == 0);
		p = ferry_tokenizer_decode(t, 4, &len);
		CHECK(!p && len == 0);
		ferry_tokenizer_free(t);
	}
	/* Version 1: no EOT field, EOT is the last token. */
	write_tokenizer(tpath("tok1.bin"), 20240328, 1, 3, 0, toks, 3, 0);
	CHECK_OK(ferry_tokenizer_open(tpath("tok1.bin"), &t));
	if (t) {
		CHECK(ferry_tokenizer_eot(t) == 2);
		p = ferry_tokenizer_decode(t, 1, &len);
		CHECK(p && len == 2 && !memcmp(p, "bc", 2));
		ferry_tokenizer_free(t);
	}

	t = (ferry_tokenizer_t)1;
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_none.bin"), &t), FERRY_ERR_IO,
		  "tok_none.bin");
	CHECK(t == NULL);
	write_tokenizer(tpath("tok_magic.bin"), 20240326, 2, 4, 3, toks, 4, 0);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_magic.bin"), &t),
		  FERRY_ERR_FORMAT, "tok_magic.bin: bad magic 20240326");
	write_tokenizer(tpath("tok_ver.bin"), 20240328, 3, 4, 3, toks, 4, 0);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_ver.bin"), &t),
		  FERRY_ERR_FORMAT, "tok_ver.bin: version 3");
	write_tokenizer(tpath("tok_cut.bin"), 20240328, 2, 4, 3, toks, 4, 1);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_cut.bin"), &t),
		  FERRY_ERR_FORMAT, "tok_cut.bin: truncated");
	write_tokenizer(tpath("tok_few.bin"), 20240328, 2, 5, 3, toks, 4, 0);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_few.bin"), &t),
		  FERRY_ERR_FORMAT, "tok_few.bin: truncated");
	write_tokenizer(tpath("tok_more.bin"), 20240328, 2, 3, 1, toks, 4, 0);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_more.bin"), &t),
		  FERRY_ERR_FORMAT, "trailing");
	write_tokenizer(tpath("tok_eot.bin"), 20240328, 2, 4, 4, toks, 4, 0);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_eot.bin"), &t),
		  FERRY_ERR_FORMAT, "EOT");
	write_tokenizer(tpath("tok_hdr.bin"), 20240328, 2, 4, 3, toks, 0, 1000);
	CHECK_ERR(ferry_tokenizer_open(tpath("tok_hdr.bin"), &t),
		  FERRY_ERR_FORMAT, "too short");

	for (i = 0; i < 10; i++) {
		ferry_status s;

		ferry_fault_fail_after(i);
		s = ferry_tokenizer_open(i % 2 ? NULL : tpath("tok2.bin"), &t);
		ferry_fault_fail_after(-1);
		CHECK(s == FERRY_OK || (s == FERRY_ERR_NOMEM && t == NULL));
		ferry_tokenizer_free(t);
	}
	ferry_fault_fail_after(0);
	CHECK(ferry_tokenizer_open(NULL, &t) == FERRY_ERR_NOMEM);
	ferry_fault_fail_after(-1);
}

/* Version 2 shards (uint32 tokens) past 65535, in one glob with a
 * version-1 shard: both read, in order. */
static void test_loader_u32(void)
{
	enum { N = 20 };
	int32_t hdr[256] = { 20240520, 2, N }, in[B * T], tg[B * T];
	uint32_t tok[N];
	ferry_loader_t l = NULL;
	FILE *f;
	int i;

	for (i = 0; i < N; i++)
		tok[i] = 128000u + (uint32_t)i;
	good_shard(tpath("wide_000000.bin"), 7, N);
	f = fopen(tpath("wide_000001.bin"), "wb");
	CHECK(f && fwrite(hdr, sizeof(hdr), 1, f) == 1 &&
	      fwrite(tok, sizeof(tok), 1, f) == 1 && fclose(f) == 0);
	CHECK_OK(ferry_loader_open(tpath("wide_*.bin"), B, T, 128256, &l));
	if (!l)
		return;
	CHECK(ferry_loader_num_tokens(l) == 2 * N);
	CHECK_OK(ferry_loader_next(l, in, tg));
	CHECK(in[0] == 7 && tg[B * T - 1] == 7 + B * T);
	CHECK_OK(ferry_loader_next(l, in, tg));
	CHECK_OK(ferry_loader_next(l, in, tg)); /* shard 0 has 2 batches of 9 */
	CHECK(in[0] == 128000 && tg[B * T - 1] == 128000 + B * T);
	ferry_loader_free(l);
	CHECK_OK(ferry_loader_open(tpath("wide_000001.bin"), B, T, 128001, &l));
	if (l) {
		CHECK_ERR(ferry_loader_next(l, in, tg), FERRY_ERR_FORMAT,
			  "token 128001 at index 1");
		ferry_loader_free(l);
	}
}

int main(void)
{
	scratch_dir_make("test_data");
	test_loader();
	test_loader_shuffled();
	test_loader_bad();
	test_loader_u32();
	test_text();
	test_text_chunks();
	test_tokenizer();

	return scratch_finish("test_data");
}
