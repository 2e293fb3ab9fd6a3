/* Version-3 shards (packed documents): rows, targets, positions, padding,
 * the refusals, --truncate, shuffled order and resume, parts, reading once. */
#include "ferry/data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_test_util.h"

/* A version-3 shard of n tokens: ids, then flags; header count `count`. */
static void write_v3(const char *path, const uint32_t *ids, const uint8_t *flags, int n, int count, int extra)
{
	int32_t hdr[256] = { FERRY_SHARD_MAGIC, FERRY_SHARD_VERSION_DOCS, count };
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(hdr, sizeof(hdr), 1, f) != 1 || (n && fwrite(ids, 4, (size_t)n, f) != (size_t)n) ||
	    (n && fwrite(flags, 1, (size_t)n, f) != (size_t)n) || (extra && fputc(0, f) == EOF) || fclose(f)) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

/* Documents of the given lengths, ids 100 * doc + index, every token after
 * the first a target except where mask_odd drops the odd ones. */
static int make_docs(const int *len, int n_docs, bool mask_odd, int first_doc, uint32_t *ids, uint8_t *flags)
{
	int n = 0;

	for (int d = 0; d < n_docs; d++)
		for (int i = 0; i < len[d]; i++, n++) {
			ids[n] = (uint32_t)(100 * (first_doc + d) + i);
			flags[n] = (uint8_t)((i == 0 ? FERRY_TOKEN_DOC_START : 0) |
					     (i > 0 && !(mask_odd && i % 2) ? FERRY_TOKEN_TARGET : 0));
		}
	return n;
}

#define T 5
#define VOCAB 1000

/* Shard a: documents 0..3 of 3, 2, 4, 1 tokens (odd positions not targets):
 * rows [d0 d1] [d2 d3].  Shard b: documents 4, 5 of 5 and 2: rows [d4] [d5 pad]. */
static void write_corpus(void)
{
	static const int la[] = { 3, 2, 4, 1 }, lb[] = { 5, 2 };
	uint32_t ids[16];
	uint8_t flags[16];
	int n = make_docs(la, 4, true, 0, ids, flags);

	write_v3(tpath("c_a.bin"), ids, flags, n, n, 0);
	n = make_docs(lb, 2, false, 4, ids, flags);
	write_v3(tpath("c_b.bin"), ids, flags, n, n, 0);
}

static void check_row(const int32_t *in, const int32_t *tg, const int32_t *pos, const int32_t *want_in,
		      const int32_t *want_tg, const int32_t *want_pos, const char *what)
{
	if (memcmp(in, want_in, T * 4) || memcmp(tg, want_tg, T * 4) || memcmp(pos, want_pos, T * 4)) {
		fprintf(stderr, "%s: row differs: in", what);
		for (int t = 0; t < T; t++)
			fprintf(stderr, " %d/%d/%d", in[t], tg[t], pos[t]);
		fprintf(stderr, "\n");
		failures++;
	}
}

static void test_rows(void)
{
	/* rows 0..3: inputs, targets, positions */
	static const int32_t in[4][T] = { { 0, 1, 2, 100, 101 }, { 200, 201, 202, 203, 300 },
					  { 400, 401, 402, 403, 404 }, { 500, 501, 0, 0, 0 } };
	/* shard a masks odd indexes: d0's token 1 is no target, 2 is; d2's 2 is */
	static const int32_t tg[4][T] = { { -1, 2, -1, -1, -1 }, { -1, 202, -1, -1, -1 },
					  { 401, 402, 403, 404, -1 }, { 501, -1, -1, -1, -1 } };
	static const int32_t pos[4][T] = { { 0, 1, 2, 0, 1 }, { 0, 1, 2, 3, 0 }, { 0, 1, 2, 3, 4 }, { 0, 1, 0, 0, 0 } };
	int32_t bi[2 * T], bt[2 * T], bp[2 * T];
	ferry_loader_t l;
	int64_t s, o;

	CHECK_OK(ferry_loader_open(tpath("c_*.bin"), 2, T, VOCAB, &l));
	CHECK(ferry_loader_packed(l) && ferry_loader_rows(l) == 4);
	CHECK_ERR(ferry_loader_next(l, bi, bt), FERRY_ERR_INVALID, "positions");
	for (int batch = 0; batch < 3; batch++) { /* the third wraps around */
		int r0 = batch % 2 * 2;

		ferry_loader_position(l, &s, &o);
		CHECK(s == 0 && o == r0);
		CHECK_OK(ferry_loader_next_packed(l, bi, bt, bp));
		for (int b = 0; b < 2; b++)
			check_row(bi + b * T, bt + b * T, bp + b * T, in[r0 + b], tg[r0 + b], pos[r0 + b], "in order");
	}
	ferry_loader_free(l);

	/* data parallel: rows 1 of each group of 2 is rank 1's */
	CHECK_OK(ferry_loader_open(tpath("c_*.bin"), 2, T, VOCAB, &l));
	CHECK_OK(ferry_loader_set_part(l, 2, 1, 1));
	CHECK_OK(ferry_loader_next_packed(l, bi, bt, bp));
	check_row(bi, bt, bp, in[1], tg[1], pos[1], "part");
	CHECK_OK(ferry_loader_next_packed(l, bi, bt, bp));
	check_row(bi, bt, bp, in[3], tg[3], pos[3], "part");
	ferry_loader_free(l);

	/* once: 4 rows in batches of 3, the second padded; then nothing */
	{
		const struct ferry_loader_opts once = { .once = true };
		static const int32_t pad_in[T] = { 0 }, pad_tg[T] = { -1, -1, -1, -1, -1 }, pad_pos[T] = { 0 };
		int32_t ci[3 * T], ct[3 * T], cp[3 * T];

		CHECK_OK(ferry_loader_open_opts(tpath("c_*.bin"), 3, T, VOCAB, &once, &l));
		CHECK_OK(ferry_loader_next_packed(l, ci, ct, cp));
		CHECK_OK(ferry_loader_next_packed(l, ci, ct, cp));
		check_row(ci, ct, cp, in[3], tg[3], pos[3], "once");
		check_row(ci + T, ct + T, cp + T, pad_in, pad_tg, pad_pos, "once padding");
		CHECK_ERR(ferry_loader_next_packed(l, ci, ct, cp), FERRY_ERR_INVALID, "all 4 rows");
		ferry_loader_free(l);
		CHECK_ERR(ferry_loader_open(tpath("c_*.bin"), 5, T, VOCAB, &l), FERRY_ERR_INVALID, "fewer than");
		CHECK_OK(ferry_loader_open_opts(tpath("c_*.bin"), 5, T, VOCAB, &once, &l));
		ferry_loader_free(l);
	}
}

/* Shuffled: each epoch a permutation of the rows, the same for a seed;
 * a saved position resumes it. */
static void test_shuffled(void)
{
	int32_t a[T], t_[T], p[T], seen[8][T];
	ferry_loader_t l, m;
	int64_t s, o, e;
	int hits[600] = { 0 };

	CHECK_OK(ferry_loader_open(tpath("c_*.bin"), 1, T, VOCAB, &l));
	CHECK_OK(ferry_loader_open(tpath("c_*.bin"), 1, T, VOCAB, &m));
	CHECK_OK(ferry_loader_shuffle(l, 9));
	CHECK_OK(ferry_loader_shuffle(m, 9));
	for (int i = 0; i < 8; i++) {
		CHECK_OK(ferry_loader_next_packed(l, seen[i], t_, p));
		if (i < 4)
			hits[seen[i][0]]++;
	}
	CHECK(hits[0] == 1 && hits[200] == 1 && hits[400] == 1 && hits[500] == 1); /* epoch 0: each row once */
	CHECK(ferry_loader_epoch(l) == 2);
	for (int i = 0; i < 3; i++)
		CHECK_OK(ferry_loader_next_packed(m, a, t_, p));
	ferry_loader_position(m, &s, &o);
	e = ferry_loader_epoch(m);
	ferry_loader_free(m);
	CHECK_OK(ferry_loader_open(tpath("c_*.bin"), 1, T, VOCAB, &m));
	CHECK_OK(ferry_loader_shuffle(m, 9));
	CHECK_OK(ferry_loader_seek_epoch(m, e, s, o));
	for (int i = 3; i < 8; i++) {
		CHECK_OK(ferry_loader_next_packed(m, a, t_, p));
		CHECK(memcmp(a, seen[i], sizeof(a)) == 0);
	}
	CHECK_ERR(ferry_loader_seek_epoch(m, 0, 1, 0), FERRY_ERR_INVALID, "packed data");
	CHECK_ERR(ferry_loader_seek_epoch(m, 0, 0, 5), FERRY_ERR_INVALID, "4 rows");
	ferry_loader_free(m);
	ferry_loader_free(l);
}

static void test_refused(void)
{
	static const int long_doc[] = { 2, 7, 1 };
	uint32_t ids[16];
	uint8_t flags[16];
	int32_t in[T], tg[T], pos[T];
	const struct ferry_loader_opts cut = { .truncate = true };
	ferry_loader_t l;
	int n = make_docs(long_doc, 3, false, 0, ids, flags);

	write_v3(tpath("long.bin"), ids, flags, n, n, 0);
	CHECK_ERR(ferry_loader_open(tpath("long.bin"), 1, T, VOCAB, &l), FERRY_ERR_INVALID,
		  "long.bin: document 2 (tokens 2..8) has 7 tokens");
	CHECK_ERR(ferry_loader_open(tpath("long.bin"), 1, T, VOCAB, &l), FERRY_ERR_INVALID, "--truncate");
	CHECK_OK(ferry_loader_open_opts(tpath("long.bin"), 1, T, VOCAB, &cut, &l));
	CHECK(ferry_loader_rows(l) == 3);
	CHECK_OK(ferry_loader_next_packed(l, in, tg, pos));
	CHECK_OK(ferry_loader_next_packed(l, in, tg, pos)); /* document 2, its first 5 */
	{
		static const int32_t wi[T] = { 100, 101, 102, 103, 104 }, wt[T] = { 101, 102, 103, 104, -1 },
				     wp[T] = { 0, 1, 2, 3, 4 };

		check_row(in, tg, pos, wi, wt, wp, "truncated");
	}
	CHECK_OK(ferry_loader_next_packed(l, in, tg, pos));
	CHECK(in[0] == 200 && tg[0] == -1 && in[1] == 0);
	ferry_loader_free(l);

	flags[3] |= 4;
	write_v3(tpath("bits.bin"), ids, flags, n, n, 0);
	CHECK_ERR(ferry_loader_open_opts(tpath("bits.bin"), 1, T, VOCAB, &cut, &l), FERRY_ERR_FORMAT,
		  "bits.bin: token 3 has flags 0x05");
	flags[3] &= 3;
	flags[0] = FERRY_TOKEN_TARGET;
	write_v3(tpath("start.bin"), ids, flags, n, n, 0);
	CHECK_ERR(ferry_loader_open_opts(tpath("start.bin"), 1, T, VOCAB, &cut, &l), FERRY_ERR_FORMAT,
		  "start.bin: its first token does not start a document");
	flags[0] = FERRY_TOKEN_DOC_START;
	write_v3(tpath("len.bin"), ids, flags, n, n, 1);
	CHECK_ERR(ferry_loader_open_opts(tpath("len.bin"), 1, T, VOCAB, &cut, &l), FERRY_ERR_FORMAT, "trailing");
	write_v3(tpath("vocab.bin"), ids, flags, n, n, 0);
	CHECK_OK(ferry_loader_open_opts(tpath("vocab.bin"), 1, T, 150, &cut, &l));
	CHECK_OK(ferry_loader_next_packed(l, in, tg, pos));
	CHECK_OK(ferry_loader_next_packed(l, in, tg, pos));
	CHECK_ERR(ferry_loader_next_packed(l, in, tg, pos), FERRY_ERR_FORMAT, "token 200 at index 9 is >= vocab 150");
	ferry_loader_free(l);
	{
		int32_t hdr[256] = { FERRY_SHARD_MAGIC, FERRY_SHARD_VERSION, 12 };
		uint16_t tok[12] = { 0 };
		FILE *f = fopen(tpath("mix_b.bin"), "wb");

		CHECK(f && fwrite(hdr, sizeof(hdr), 1, f) == 1 && fwrite(tok, 2, 12, f) == 12 && !fclose(f));
		write_v3(tpath("mix_a.bin"), ids, flags, n, n, 0);
		CHECK_ERR(ferry_loader_open_opts(tpath("mix_*.bin"), 1, T, VOCAB, &cut, &l), FERRY_ERR_FORMAT,
			  "mixes version 3");
	}
}

int main(void)
{
	(void)exists;
	scratch_dir_make("test_pack_loader");
	write_corpus();
	test_rows();
	test_shuffled();
	test_refused();
	return scratch_finish("test_pack_loader");
}
