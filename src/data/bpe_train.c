/*
 * The merges of a byte-level BPE, and its tokenizer.json (see
 * include/ferry/tokenizer.h and bpe_train.h).
 *
 * Each distinct word is an array of token ids with its count.  Every
 * adjacent pair (left, right) has a total count (the sum over the words it
 * occurs in, times their counts) and a list of the words it occurs in.  A
 * binary max-heap holds (count, pair) entries keyed by count, then the
 * smallest (left, right); an entry whose count is no longer the pair's is
 * stale: popped, it goes back with the pair's count.  A merge rewrites only
 * the words on its pair's list: their old pairs' counts are taken off,
 * their new ones added, each word joins the lists of the new pairs (those
 * holding the new token), and pairs whose count grew get a fresh heap
 * entry.  So a merge costs the length of the words it touches, not the
 * corpus.
 */
#include "data/bpe_train.h"
#include "tokenizer/hf_tokenizer.h"
#include "core/error.h"
#include "hf/st_io.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct pair {
	int32_t left, right;
	int64_t count;
	int64_t before;		/* the count when this merge first touched it */
	int stamp;		/* that merge's number */
	uint32_t *word;		/* words it occurs in (maybe no longer) */
	uint32_t n_word, cap_word;
};

struct heap_entry {
	int64_t count;
	int32_t pair;
};

struct trainer {
	const struct ferry_bpe_train_opts *opts;
	/* words: sym[w][0 .. n_sym[w]) */
	int32_t **sym;
	uint32_t *n_sym;
	int64_t *wcount;
	int *wstamp;
	size_t n_words;
	/* pairs: (left, right) -> index, open addressing */
	struct pair *pair;
	int32_t n_pair, cap_pair;
	int32_t *pslot;		/* index + 1; 0: empty */
	size_t pmask;
	struct heap_entry *heap;
	size_t n_heap, cap_heap;
	int32_t *touched;	/* pairs this merge changed */
	size_t n_touched, cap_touched;
	/* tokens: raw bytes by id; raw bytes -> id */
	char **tok;
	uint32_t *tok_len;
	int n_tok;
	struct tok_map *tok_map;
	int32_t (*merge)[2];	/* merge i: the pair, by ids */
	int n_merge;
};

/* ---- pairs ---- */

static uint64_t pair_hash(int32_t l, int32_t r)
{
	uint64_t k = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) * 0x9e3779b97f4a7c15ull;

	return k ^ (k >> 29);
}

static ferry_status pair_grow(struct trainer *t)
{
	size_t cap = t->pmask ? 2 * (t->pmask + 1) : 4096;
	int32_t *slot = calloc(cap, sizeof(*slot));
	struct pair *p = slot ? realloc(t->pair, cap / 2 * sizeof(*p)) : NULL;

	if (!p) {
		free(slot);
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu pairs", cap / 2);
	}
	t->pair = p;
	t->cap_pair = (int32_t)(cap / 2);
	for (int32_t i = 0; i < t->n_pair; i++) {
		size_t k = pair_hash(p[i].left, p[i].right) & (cap - 1);

		while (slot[k])
			k = (k + 1) & (cap - 1);
		slot[k] = i + 1;
	}
	free(t->pslot);
	t->pslot = slot;
	t->pmask = cap - 1;
	return FERRY_OK;
}

/* The index of (l, r), added with count 0 when new; -1 after an error. */
static int32_t pair_get(struct trainer *t, int32_t l, int32_t r)
{
	size_t k;

	if (t->n_pair >= t->cap_pair && pair_grow(t))
		return -1;
	for (k = pair_hash(l, r) & t->pmask; t->pslot[k]; k = (k + 1) & t->pmask) {
		struct pair *p = &t->pair[t->pslot[k] - 1];

		if (p->left == l && p->right == r)
			return t->pslot[k] - 1;
	}
	t->pair[t->n_pair] = (struct pair){ .left = l, .right = r, .stamp = -1 };
	t->pslot[k] = ++t->n_pair;
	return t->n_pair - 1;
}

static ferry_status pair_add_word(struct pair *p, uint32_t w)
{
	if (p->n_word && p->word[p->n_word - 1] == w)
		return FERRY_OK;
	if (p->n_word == p->cap_word) {
		uint32_t cap = p->cap_word ? 2 * p->cap_word : 4;
		uint32_t *v = realloc(p->word, cap * sizeof(*v));

		if (!v)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for a pair's words");
		p->word = v;
		p->cap_word = cap;
	}
	p->word[p->n_word++] = w;
	return FERRY_OK;
}

/* ---- the heap: the most frequent pair on top ---- */

static bool above(const struct trainer *t, struct heap_entry a, struct heap_entry b)
{
	const struct pair *p = &t->pair[a.pair], *q = &t->pair[b.pair];

	if (a.count != b.count)
		return a.count > b.count;
	return p->left != q->left ? p->left < q->left : p->right < q->right;
}

static ferry_status heap_push(struct trainer *t, int32_t pair)
{
	size_t i;

	if (t->n_heap == t->cap_heap) {
		size_t cap = t->cap_heap ? 2 * t->cap_heap : 4096;
		struct heap_entry *h = realloc(t->heap, cap * sizeof(*h));

		if (!h)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for the pair heap");
		t->heap = h;
		t->cap_heap = cap;
	}
	i = t->n_heap++;
	t->heap[i] = (struct heap_entry){ t->pair[pair].count, pair };
	while (i && above(t, t->heap[i], t->heap[(i - 1) / 2])) {
		struct heap_entry x = t->heap[i];

		t->heap[i] = t->heap[(i - 1) / 2];
		t->heap[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
	return FERRY_OK;
}

static struct heap_entry heap_pop(struct trainer *t)
{
	struct heap_entry top = t->heap[0];
	size_t i = 0, n = --t->n_heap;

	t->heap[0] = t->heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < n && above(t, t->heap[l], t->heap[m]))
			m = l;
		if (r < n && above(t, t->heap[r], t->heap[m]))
			m = r;
		if (m == i)
			break;
		struct heap_entry x = t->heap[i];

		t->heap[i] = t->heap[m];
		t->heap[m] = x;
		i = m;
	}
	return top;
}

/* ---- tokens and words ---- */

/* Appends a token of n raw bytes (id t->n_tok). */
static ferry_status token_add(struct trainer *t, const char *s, size_t n)
{
	char *p = malloc(n + 1);
	int old;
	ferry_status st;

	if (!p)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a token");
	memcpy(p, s, n);
	p[n] = '\0';
	t->tok[t->n_tok] = p;
	t->tok_len[t->n_tok] = (uint32_t)n;
	st = ferry_tok_map_put(t->tok_map, p, n, t->n_tok, &old);
	if (st) {
		free(p);
		return st;
	}
	t->n_tok++;
	return FERRY_OK;
}

static ferry_status trainer_init(struct trainer *t, const struct bpe_words *w)
{
	int ids = t->opts->vocab;
	size_t n = w->n ? w->n : 1;
	ferry_status st = FERRY_OK;

	t->tok = calloc((size_t)ids, sizeof(*t->tok));
	t->tok_len = calloc((size_t)ids, sizeof(*t->tok_len));
	t->merge = calloc((size_t)ids, sizeof(*t->merge));
	t->sym = calloc(n, sizeof(*t->sym));
	t->n_sym = calloc(n, sizeof(*t->n_sym));
	t->wcount = calloc(n, sizeof(*t->wcount));
	t->wstamp = calloc(n, sizeof(*t->wstamp));
	if (!t->tok || !t->tok_len || !t->merge || !t->sym || !t->n_sym || !t->wcount || !t->wstamp)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for %zu words", w->n);
	st = ferry_tok_map_new((size_t)ids, &t->tok_map);
	/* the special tokens' ids first: they are no byte string to merge */
	for (int i = 0; !st && i < t->opts->n_special; i++)
		t->tok[t->n_tok++] = NULL;
	for (int b = 0; !st && b < 256; b++)
		st = token_add(t, &(char){ (char)b }, 1);
	for (size_t i = 0; !st && i < w->n; i++) {
		t->sym[i] = malloc((w->len[i] ? w->len[i] : 1) * sizeof(int32_t));
		if (!t->sym[i])
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for a word");
		for (uint32_t k = 0; k < w->len[i]; k++)
			t->sym[i][k] = t->opts->n_special + (unsigned char)w->bytes[w->off[i] + k];
		t->n_sym[i] = w->len[i];
		t->wcount[i] = w->count[i];
		t->wstamp[i] = -1;
	}
	t->n_words = w->n;
	return st;
}

/* Every adjacent pair of every word counted, and on the heap. */
static ferry_status count_pairs(struct trainer *t)
{
	ferry_status st = FERRY_OK;

	for (size_t w = 0; w < t->n_words && !st; w++)
		for (uint32_t k = 0; k + 1 < t->n_sym[w] && !st; k++) {
			int32_t p = pair_get(t, t->sym[w][k], t->sym[w][k + 1]);

			if (p < 0)
				return ferry_error(FERRY_ERR_NOMEM, "out of memory for pairs");
			t->pair[p].count += t->wcount[w];
			st = pair_add_word(&t->pair[p], (uint32_t)w);
		}
	for (int32_t p = 0; p < t->n_pair && !st; p++)
		st = heap_push(t, p);
	return st;
}

/* Adds d to pair p's count, remembering what it was before this merge. */
static ferry_status pair_delta(struct trainer *t, int32_t p, int64_t d, int stamp)
{
	if (p < 0)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for pairs");
	if (t->pair[p].stamp != stamp) {
		if (t->n_touched == t->cap_touched) {
			size_t cap = t->cap_touched ? 2 * t->cap_touched : 1024;
			int32_t *v = realloc(t->touched, cap * sizeof(*v));

			if (!v)
				return ferry_error(FERRY_ERR_NOMEM, "out of memory for pairs");
			t->touched = v;
			t->cap_touched = cap;
		}
		t->touched[t->n_touched++] = p;
		t->pair[p].stamp = stamp;
		t->pair[p].before = t->pair[p].count;
	}
	t->pair[p].count += d;
	return FERRY_OK;
}

/* Word w with every (a, b) replaced by c, left to right. */
static ferry_status merge_word(struct trainer *t, uint32_t w, int32_t a, int32_t b,
			       int32_t c, int stamp)
{
	int32_t *s = t->sym[w];
	uint32_t n = t->n_sym[w], j = 0, k;
	int64_t cnt = t->wcount[w];
	ferry_status st = FERRY_OK;

	for (k = 0; k + 1 < n && !(s[k] == a && s[k + 1] == b); k++)
		;
	if (k + 1 >= n)
		return FERRY_OK; /* no longer in this word */
	for (k = 0; k + 1 < n && !st; k++)
		st = pair_delta(t, pair_get(t, s[k], s[k + 1]), -cnt, stamp);
	for (k = 0; k < n; j++) {
		bool hit = k + 1 < n && s[k] == a && s[k + 1] == b;

		s[j] = hit ? c : s[k];
		k += hit ? 2 : 1;
	}
	t->n_sym[w] = j;
	for (k = 0; k + 1 < j && !st; k++) {
		int32_t p = pair_get(t, s[k], s[k + 1]);

		st = pair_delta(t, p, cnt, stamp);
		if (!st && (s[k] == c || s[k + 1] == c))
			st = pair_add_word(&t->pair[p], w);
	}
	return st;
}

/* Merges pair p into a token (new, or the one with its bytes already). */
static ferry_status do_merge(struct trainer *t, int32_t p)
{
	int32_t a = t->pair[p].left, b = t->pair[p].right, c;
	size_t la = t->tok_len[a], lb = t->tok_len[b];
	char *s = malloc(la + lb);
	int stamp = t->n_merge;
	ferry_status st = FERRY_OK;

	if (!s)
		return ferry_error(FERRY_ERR_NOMEM, "out of memory for a token");
	memcpy(s, t->tok[a], la);
	memcpy(s + la, t->tok[b], lb);
	c = ferry_tok_map_get(t->tok_map, s, la + lb);
	if (c < 0) {
		c = t->n_tok;
		st = token_add(t, s, la + lb);
	}
	free(s);
	t->merge[t->n_merge][0] = a;
	t->merge[t->n_merge++][1] = b;
	t->n_touched = 0;
	/* the list of (a, b) does not grow here: new pairs hold c */
	for (uint32_t i = 0, n = t->pair[p].n_word; i < n && !st; i++) {
		uint32_t w = t->pair[p].word[i];

		if (t->wstamp[w] == stamp)
			continue;
		t->wstamp[w] = stamp;
		st = merge_word(t, w, a, b, c, stamp);
	}
	free(t->pair[p].word);
	t->pair[p].word = NULL;
	t->pair[p].n_word = t->pair[p].cap_word = 0;
	for (size_t i = 0; i < t->n_touched && !st; i++) {
		struct pair *q = &t->pair[t->touched[i]];

		if (q->count > q->before)
			st = heap_push(t, t->touched[i]);
	}
	return st;
}

/* Merges the most frequent pair until vocab ids or no pair is left. */
static ferry_status run_merges(struct trainer *t)
{
	ferry_status st = FERRY_OK;

	while (!st && t->n_tok < t->opts->vocab && t->n_merge < t->opts->vocab && t->n_heap) {
		struct heap_entry e = heap_pop(t);
		int64_t now = t->pair[e.pair].count;

		if (now != e.count) { /* stale: back with its count */
			if (now > 0)
				st = heap_push(t, e.pair);
			continue;
		}
		if (now > 0)
			st = do_merge(t, e.pair);
	}
	return st;
}

static void trainer_free(struct trainer *t)
{
	for (size_t w = 0; w < t->n_words; w++)
		free(t->sym[w]);
	for (int32_t p = 0; p < t->n_pair; p++)
		free(t->pair[p].word);
	for (int i = 0; t->tok && i < t->n_tok; i++)
		free(t->tok[i]);
	if (t->tok_map)
		ferry_tok_map_free(t->tok_map);
	free(t->sym);
	free(t->n_sym);
	free(t->wcount);
	free(t->wstamp);
	free(t->pair);
	free(t->pslot);
	free(t->heap);
	free(t->touched);
	free(t->tok);
	free(t->tok_len);
	free(t->merge);
}

/* ---- the tokenizer.json ---- */

/* Token id as the vocab spells it: ByteLevel's character per byte; a
 * special token its content. */
static json_t *token_string(const struct trainer *t, int id)
{
	struct tok_str s = { 0 };
	json_t *j;

	if (id < t->opts->n_special)
		return json_string(t->opts->special[id]);
	for (uint32_t i = 0; i < t->tok_len[id]; i++) {
		char c[2];

		if (ferry_tok_str_add(&s, c, ferry_tok_byte_char((unsigned char)t->tok[id][i], c)))
			break;
	}
	j = s.p ? json_stringn(s.p, s.n) : NULL;
	ferry_tok_str_free(&s);
	return j;
}

/* *clash: the id whose string an earlier token has (a special token spelt
 * as a learned one), else -1. */
static json_t *build_model(const struct trainer *t, int *clash)
{
	json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b}", "type", "BPE",
				  "dropout", "unk_token", "continuing_subword_prefix",
				  "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
				  "ignore_merges", 0);
	json_t *vocab = json_object(), *merges = json_array();
	bool ok = model && vocab && merges;

	*clash = -1;
	for (int id = 0; ok && id < t->n_tok; id++) {
		json_t *s = token_string(t, id);

		if (s && json_object_get(vocab, json_string_value(s)))
			*clash = id;
		ok = s && *clash < 0 &&
		     !json_object_set_new(vocab, json_string_value(s), json_integer(id));
		json_decref(s);
	}
	for (int i = 0; ok && i < t->n_merge; i++)
		ok = !json_array_append_new(merges, json_pack("[o, o]", token_string(t, t->merge[i][0]),
								token_string(t, t->merge[i][1])));
	if (ok && !json_object_set_new(model, "vocab", vocab) &&
	    !json_object_set_new(model, "merges", merges))
		return model;
	if (!ok) { /* (set_new takes them, set or not) */
		json_decref(vocab);
		json_decref(merges);
	}
	json_decref(model);
	return NULL;
}

static json_t *byte_level_step(void)
{
	return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
			 "trim_offsets", 1, "use_regex", 1);
}

static json_t *build_root(const struct trainer *t, int *clash)
{
	json_t *added = json_array(), *model = build_model(t, clash), *root;

	for (int i = 0; added && i < t->opts->n_special; i++)
		json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", i,
						       "content", t->opts->special[i], "single_word", 0,
						       "lstrip", 0, "rstrip", 0, "normalized", 0,
						       "special", 1));
	if (!added || !model ||
	    json_array_size(added) != (size_t)t->opts->n_special) {
		json_decref(added);
		json_decref(model);
		return NULL;
	}
	root = json_pack("{s:s, s:n, s:n, s:o, s:n, s:o, s:o, s:o, s:o}", "version", "1.0",
			 "truncation", "padding", "added_tokens", added, "normalizer",
			 "pre_tokenizer", byte_level_step(), "post_processor", byte_level_step(),
			 "decoder", byte_level_step(), "model", model);
	return root;
}

struct json_text {
	const char *s;
	size_t n;
};

static ferry_status emit_text(int fd, const char *tmp, void *ctx)
{
	const struct json_text *j = ctx;

	return ferry_st_write_all(fd, tmp, j->s, j->n);
}

static ferry_status write_json(const struct trainer *t, const char *path)
{
	int clash;
	json_t *root = build_root(t, &clash), *name = clash >= 0 ? token_string(t, clash) : NULL;
	char *s = root ? json_dumps(root, JSON_PRESERVE_ORDER | JSON_INDENT(2)) : NULL;
	struct json_text txt = { s, s ? strlen(s) : 0 };
	ferry_status st = s ? ferry_st_atomic_write(path, emit_text, &txt) :
		name ? ferry_error(FERRY_ERR_INVALID,
				   "%s: learned token %d '%.40s' is spelt as a special token: a tokenizer.json cannot hold both (choose another special token)",
				   path, clash, json_string_value(name)) :
		ferry_error(FERRY_ERR_NOMEM, "%s: out of memory building the JSON", path);

	json_decref(name);
	free(s);
	json_decref(root);
	return st;
}

/* Special token i is one the tokenizer.json can hold, as an added token
 * and a vocab key: UTF-8 (JSON's strings are), not another special token,
 * not a byte's ByteLevel character. */
static ferry_status check_special(const struct ferry_bpe_train_opts *o, int i)
{
	const char *s = o->special[i];
	json_t *j = s && *s ? json_string(s) : NULL;

	if (!s || !*s)
		return ferry_error(FERRY_ERR_INVALID, "special token %d is empty", i);
	json_decref(j);
	if (!j)
		return ferry_error(FERRY_ERR_INVALID, "special token %d is not UTF-8", i);
	for (int k = 0; k < i; k++)
		if (!strcmp(o->special[k], s))
			return ferry_error(FERRY_ERR_INVALID, "special token %d '%.40s' is special token %d again",
					   i, s, k);
	for (int b = 0; b < 256; b++) {
		char c[3] = { 0 };

		ferry_tok_byte_char((unsigned char)b, c);
		if (!strcmp(c, s))
			return ferry_error(FERRY_ERR_INVALID,
					   "special token %d '%.40s' is the byte-level token of one byte (0x%02x)",
					   i, s, b);
	}
	return FERRY_OK;
}

/* Whether out names one of the inputs: writing it would replace the corpus. */
static int out_is_input(const char *const *paths, int n_paths, const char *out)
{
	struct stat so, si;

	if (stat(out, &so) != 0)
		return -1;
	for (int i = 0; i < n_paths; i++)
		if (paths[i] && stat(paths[i], &si) == 0 && si.st_dev == so.st_dev &&
		    si.st_ino == so.st_ino)
			return i;
	return -1;
}

static ferry_status check_opts(const char *const *paths, int n_paths,
			       const struct ferry_bpe_train_opts *o, const char *out)
{
	ferry_status st = FERRY_OK;
	int in;

	if (!paths || n_paths <= 0 || !o || !out || !*out)
		return ferry_error(FERRY_ERR_INVALID, "no input files or no output path");
	in = out_is_input(paths, n_paths, out);
	if (in >= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "%s: the output is also an input FILE (%s): it would replace the corpus",
				   out, paths[in]);
	if (o->n_special < 0 || (o->n_special && !o->special))
		return ferry_error(FERRY_ERR_INVALID, "bad special token list");
	for (int i = 0; i < o->n_special && !st; i++)
		st = check_special(o, i);
	if (st)
		return st;
	if (o->vocab < o->n_special + 256 || o->vocab > TOK_MAX_ID)
		return ferry_error(FERRY_ERR_INVALID,
				   "vocab %d is not in [%d, %d] (the special tokens and 256 bytes come first)",
				   o->vocab, o->n_special + 256, TOK_MAX_ID);
	return FERRY_OK;
}

ferry_status ferry_tokenizer_train(const char *const *paths, int n_paths,
				   const struct ferry_bpe_train_opts *opts,
				   const char *out_path,
				   struct ferry_bpe_train_stats *stats)
{
	struct ferry_bpe_train_stats mine = { 0 };
	struct bpe_words words = { 0 };
	struct trainer t = { .opts = opts };
	ferry_status st = check_opts(paths, n_paths, opts, out_path);

	if (!st)
		st = ferry_bpe_count_files(paths, n_paths, opts, &words, &mine);
	if (!st)
		st = trainer_init(&t, &words);
	ferry_bpe_words_free(&words);
	if (!st)
		st = count_pairs(&t);
	if (!st)
		st = run_merges(&t);
	if (!st && t.n_merge == 0) /* a tokenizer of the bytes alone is no use */
		st = ferry_error(FERRY_ERR_INVALID,
				 "no text to learn from in %d input file%s (first: %s): no two bytes side by side to merge",
				 n_paths, n_paths == 1 ? "" : "s", paths[0]);
	if (!st)
		st = write_json(&t, out_path);
	mine.vocab = t.n_tok;
	mine.merges = t.n_merge;
	if (stats)
		*stats = mine;
	trainer_free(&t);
	return st;
}
