/*
 * Encoding throughput of a tokenizer: the documents of a corpus (separated
 * by NUL bytes, as bench/tokenize_corpus.py writes them) encoded with
 * ferry_tokenizer_encode on T threads, each thread taking documents as it
 * goes.  Reading the file and loading the tokenizer are not timed.
 *
 *   bench_tokenize --tokenizer JSON [--threads T] [--passes P]
 *                  [--ids-out FILE] CORPUS
 *
 * Prints one line per pass, "ferry threads=T bytes=B tokens=N seconds=S
 * MBps=R cpu_seconds=C cpuMBps=Q" (MB: 10^6 bytes of text, NULs not
 * counted; C the process's CPU time over the pass), the form
 * bench/tokenize_ref.py prints for Hugging Face's tokenizers and tiktoken;
 * bench/tokenize.sh runs them in turn.  --ids-out writes, untimed and
 * before the passes, every document's ids (an int32 count, then the ids,
 * host order) for tokenize_ref.py --check to compare.
 */
#include "ferry/tokenizer.h"
#include "bench_util.h"

#include <omp.h>
#include <stdint.h>

/* CPU time of the process, all threads: unlike wall time, it does not
 * count the time other work on the machine takes the cores. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct corpus {
	char *text;
	size_t bytes;	/* of text, NULs not counted */
	size_t *start, *len;
	size_t n;
};

static int read_corpus(const char *path, struct corpus *c)
{
	FILE *f = fopen(path, "rb");
	long size;
	size_t n = 0;

	if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		perror(path);
		return -1;
	}
	c->text = malloc((size_t)size + 1);
	if (!c->text || fread(c->text, 1, (size_t)size, f) != (size_t)size) {
		fprintf(stderr, "bench_tokenize: %s: cannot read %ld bytes\n", path, size);
		return -1;
	}
	fclose(f);
	c->text[size] = '\0';
	for (long i = 0; i <= size; i++)
		n += c->text[i] == '\0';
	c->start = malloc(n * sizeof(size_t));
	c->len = malloc(n * sizeof(size_t));
	if (!c->start || !c->len)
		return -1;
	for (size_t at = 0; at < (size_t)size;) {
		size_t e = at + strlen(c->text + at);

		if (e > at) {
			c->start[c->n] = at;
			c->len[c->n++] = e - at;
			c->bytes += e - at;
		}
		at = e + 1;
	}
	return 0;
}

static int write_ids(ferry_tokenizer_t tok, const struct corpus *c, const char *path)
{
	struct ferry_token_buf b = { 0 };
	FILE *f = fopen(path, "wb");
	int rc = f ? 0 : -1;

	for (size_t d = 0; d < c->n && !rc; d++) {
		int32_t n;

		b.n = 0;
		if (ferry_tokenizer_encode(tok, c->text + c->start[d], c->len[d], 0, &b)) {
			fprintf(stderr, "bench_tokenize: document %zu: %s\n", d, ferry_last_error());
			rc = -1;
			break;
		}
		n = (int32_t)b.n;
		if (fwrite(&n, 4, 1, f) != 1 || fwrite(b.ids, 4, b.n, f) != b.n)
			rc = -1;
	}
	if (f && fclose(f))
		rc = -1;
	if (rc)
		fprintf(stderr, "bench_tokenize: cannot write %s\n", path);
	ferry_token_buf_free(&b);
	return rc;
}

/* One pass over every document; the token count, or -1. */
static long long encode_all(ferry_tokenizer_t tok, const struct corpus *c)
{
	long long tokens = 0;
	int failed = 0;

#pragma omp parallel reduction(+ : tokens, failed)
	{
		struct ferry_token_buf b = { 0 };

#pragma omp for schedule(dynamic, 4)
		for (size_t d = 0; d < c->n; d++) {
			b.n = 0;
			if (ferry_tokenizer_encode(tok, c->text + c->start[d], c->len[d], 0, &b)) {
				fprintf(stderr, "bench_tokenize: document %zu: %s\n", d, ferry_last_error());
				failed++;
			}
			tokens += (long long)b.n;
		}
		ferry_token_buf_free(&b);
	}
	return failed ? -1 : tokens;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_tokenize --tokenizer JSON [--threads T] [--passes P] [--ids-out FILE] CORPUS\n"
		   "  encodes CORPUS's NUL-separated documents on T threads (default: all), P times (default 1)\n");
}

int main(int argc, char **argv)
{
	const char *tok_path = NULL, *ids_out = NULL, *corpus_path = NULL;
	int threads = omp_get_max_threads(), passes = 1;
	struct corpus c = { 0 };
	ferry_tokenizer_t tok;

	for (int i = 1; i < argc; i++) {
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--tokenizer") && val) {
			tok_path = argv[++i];
		} else if (!strcmp(argv[i], "--ids-out") && val) {
			ids_out = argv[++i];
		} else if (!strcmp(argv[i], "--threads") && val && (threads = atoi(argv[++i])) >= 1) {
		} else if (!strcmp(argv[i], "--passes") && val && (passes = atoi(argv[++i])) >= 1) {
		} else if (argv[i][0] != '-' && !corpus_path) {
			corpus_path = argv[i];
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!tok_path || !corpus_path) {
		usage(stderr);
		return 2;
	}
	if (ferry_tokenizer_open(tok_path, &tok)) {
		fprintf(stderr, "bench_tokenize: %s\n", ferry_last_error());
		return 1;
	}
	if (read_corpus(corpus_path, &c) || (ids_out && write_ids(tok, &c, ids_out)))
		return 1;
	omp_set_num_threads(threads);
	for (int p = 0; p < passes; p++) {
		double t0 = now_s(), c0 = cpu_s(), sec, cpu;
		long long tokens = encode_all(tok, &c);

		sec = now_s() - t0;
		cpu = cpu_s() - c0;
		if (tokens < 0) {
			fprintf(stderr, "bench_tokenize: encoding failed\n");
			return 1;
		}
		printf("ferry threads=%d bytes=%zu tokens=%lld seconds=%.3f MBps=%.2f cpu_seconds=%.3f cpuMBps=%.2f\n",
		       threads, c.bytes, tokens, sec, c.bytes / sec / 1e6, cpu, c.bytes / cpu / 1e6);
		fflush(stdout);
	}
	ferry_tokenizer_free(tok);
	return 0;
}
