#include "demo_data.h"
#include "commands.h"

#include <errno.h>
#include <glob.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORTUNE_DIR "/usr/share/games/fortunes"
/* The shuffled text, handed to `ferry data` and removed afterwards. */
#define CORPUS_TEXT FERRY_DEMO_DIR "/.demo_corpus.txt"

bool ferry_demo_data_has_val(void)
{
	glob_t g;
	bool found = glob(FERRY_DEMO_PREFIX "_val_*.bin", 0, NULL, &g) == 0;

	globfree(&g);
	return found;
}

struct docs {
	char **v;
	size_t n, cap;
};

static void docs_free(struct docs *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i]);
	free(d->v);
}

static int docs_add(struct docs *d, const char *text, size_t len)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4096;
		char **v = realloc(d->v, cap * sizeof(*v));

		if (!v)
			return -1;
		d->v = v;
		d->cap = cap;
	}
	d->v[d->n] = strndup(text, len);
	if (!d->v[d->n])
		return -1;
	d->n++;
	return 0;
}

/* A fortune file's cookies, each a document: the text between lines that
 * are "%" (a trailing '\r' ignored), blank ones skipped. */
static int read_cookies(const char *path, struct docs *d)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *doc = NULL;
	size_t cap = 0, len = 0;
	ssize_t n;
	int rc = 0;

	if (!f)
		return 0; /* unreadable: one file less */
	while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
		bool sep = (n == 2 && line[0] == '%') || (n == 3 && line[0] == '%' && line[1] == '\r');
		char *grown;

		if (sep) {
			if (len && docs_add(d, doc, len))
				rc = -1;
			len = 0;
			continue;
		}
		grown = realloc(doc, len + (size_t)n + 1);
		if (!grown) {
			rc = -1;
			break;
		}
		doc = grown;
		memcpy(doc + len, line, (size_t)n);
		len += (size_t)n;
	}
	if (rc == 0 && len && docs_add(d, doc, len))
		rc = -1;
	free(line);
	free(doc);
	fclose(f);
	return rc;
}

/* Drawings are not language: a small model learns words faster without. */
static bool skipped(const char *name)
{
	return !strcmp(name, "art") || !strcmp(name, "ascii-art") || strchr(name, '.') != NULL;
}

/* Every cookie of the fortune files (not their .dat indexes and .u8
 * links), in file order.  Returns -1 when out of memory. */
static int collect(struct docs *d)
{
	glob_t g;
	int rc = 0;

	if (glob(FORTUNE_DIR "/*", 0, NULL, &g) != 0)
		return 0;
	for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
		struct stat sb;
		const char *name = strrchr(g.gl_pathv[i], '/') + 1;

		if (!skipped(name) && lstat(g.gl_pathv[i], &sb) == 0 && S_ISREG(sb.st_mode))
			rc = read_cookies(g.gl_pathv[i], d);
	}
	globfree(&g);
	return rc;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Fisher-Yates with a fixed seed: the same corpus on every machine. */
static void shuffle(struct docs *d)
{
	uint64_t s = 20240520;

	for (size_t i = d->n; i > 1; i--) {
		size_t j = (size_t)(splitmix64(&s) % i);
		char *t = d->v[i - 1];

		d->v[i - 1] = d->v[j];
		d->v[j] = t;
	}
}

static int write_text(const char *path, const struct docs *d)
{
	FILE *f;
	int bad = 0;

	if (mkdir(FERRY_DEMO_DIR, 0777) != 0 && errno != EEXIST)
		return -1;
	f = fopen(path, "w");
	if (!f)
		return -1;
	for (size_t i = 0; i < d->n && !bad; i++)
		bad = fputs(d->v[i], f) < 0 || fputs("%\n", f) < 0;
	return fclose(f) != 0 || bad ? -1 : 0;
}

int ferry_demo_data_ensure(FILE *log)
{
	char a0[] = "data", a1[] = "--doc-sep", a2[] = "%", a3[] = "--out", a4[] = FERRY_DEMO_PREFIX,
	     a5[] = CORPUS_TEXT;
	char *argv[] = { a0, a1, a2, a3, a4, a5, NULL };
	struct docs d = { 0 };
	glob_t g;
	int found = glob(FERRY_DEMO_PREFIX "_train_*.bin", 0, NULL, &g) == 0, rc;

	globfree(&g);
	if (found)
		return 0;
	fprintf(log, "preparing the demo corpus (first run): the fortune cookies of %s in a fixed shuffled "
		     "order, then ferry data\n", FORTUNE_DIR);
	fflush(log);
	if (collect(&d)) {
		fprintf(stderr, "ferry train: out of memory reading the demo corpus\n");
		docs_free(&d);
		return -1;
	}
	if (d.n == 0) { /* no fortunes: `ferry data` says what it uses instead */
		docs_free(&d);
		return cmd_data(1, argv) == 0 ? 0 : -1;
	}
	shuffle(&d);
	if (write_text(CORPUS_TEXT, &d)) {
		fprintf(stderr, "ferry train: cannot write %s: %s\n", CORPUS_TEXT, strerror(errno));
		unlink(CORPUS_TEXT);
		docs_free(&d);
		return -1;
	}
	docs_free(&d);
	rc = cmd_data(6, argv);
	unlink(CORPUS_TEXT);
	return rc == 0 ? 0 : -1;
}
