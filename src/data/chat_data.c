/*
 * Conversations into version-3 shards (ferry_data_from_chat): each JSON
 * Lines record ({"messages": [...]} or {"prompt", "completion"}) rendered
 * whole by the chat template, tokenized whole with no special tokens of
 * ferry's own (the template writes them), and masked: the span of
 * assistant message i runs from the end of the rendering of messages[:i]
 * with the generation prompt to the end of the rendering of
 * messages[:i+1] (clipped where that rendering stops agreeing with the
 * whole: spans_of), and a token is a target when its text lies wholly in a
 * span (a token straddling a span's edge is not).  Each conversation is one
 * document, never split across shards.  Shards are temporaries until every
 * record was read, so a bad record leaves nothing written.
 */
#include "ferry/chat.h"
#include "ferry/data.h"
#include "chat/chat_json.h"
#include "core/error.h"
#include "data/shard_writer.h"
#include "data/text_reader.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (1u << 20)

struct span {
	size_t start, end;
};

struct chat_run {
	const struct ferry_data_opts *opts;
	ferry_chat_t chat;
	struct ferry_shard_writer *train, *val;
	long k, documents;
	const char *path;
	long line;
	/* ferry_chat_each */
	bool render_only, gen;
	void (*each)(void *ctx, const char *text, size_t len);
	void *ctx;
};

/* The record's messages: its "messages", or prompt/completion as a user
 * and an assistant turn (*own: to json_decref). */
static ferry_status messages_of(struct chat_run *c, json_t *rec, json_t **msgs, json_t **own)
{
	json_t *m = json_object_get(rec, "messages");
	json_t *p = json_object_get(rec, "prompt"), *a = json_object_get(rec, "completion");

	*own = NULL;
	if (!json_is_object(rec))
		return ferry_error(FERRY_ERR_FORMAT, "%s:%ld: a record must be a JSON object", c->path, c->line);
	if (json_is_array(m)) {
		*msgs = m;
	} else if (json_is_string(p) && json_is_string(a)) {
		*own = json_pack("[{s:s, s:O}, {s:s, s:O}]", "role", "user", "content", p, "role",
				 "assistant", "content", a);
		if (!*own)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory");
		*msgs = *own;
	} else {
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s:%ld: a record needs \"messages\" (a list) or \"prompt\" and \"completion\" (strings)",
				   c->path, c->line);
	}
	size_t i;
	json_t *v;

	json_array_foreach(*msgs, i, v)
		if (!json_is_string(json_object_get(v, "role")))
			return ferry_error(FERRY_ERR_FORMAT, "%s:%ld: message %zu has no \"role\" string", c->path,
					   c->line, i);
	return FERRY_OK;
}

static bool is_assistant(json_t *msg)
{
	return !strcmp(json_string_value(json_object_get(msg, "role")), "assistant");
}

static ferry_status render(struct chat_run *c, json_t *msgs, size_t n, bool gen, char **out,
			   size_t *len)
{
	ferry_status st = ferry_chat_render_json(c->chat, msgs, n, gen, out, len);

	if (st) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", ferry_last_error());
		return ferry_error(st, "%s:%ld: %s", c->path, c->line, msg);
	}
	return FERRY_OK;
}

/* The assistant spans of msgs within text (byte offsets): from the end of
 * messages[:i] rendered with the generation prompt to the end of
 * messages[:i+1] rendered, that end clipped to where that rendering stops
 * agreeing with the whole conversation's (Phi-3 writes an EOS after the
 * last turn only; Qwen 3 drops the reasoning of turns before the last
 * user message): an empty span then, never another turn's bytes. */
static ferry_status spans_of(struct chat_run *c, json_t *msgs, const char *text, size_t text_len,
			     struct span *sp, size_t *n_sp)
{
	ferry_status st = FERRY_OK;
	size_t turns = 0;

	*n_sp = 0;
	for (size_t i = 0; i < json_array_size(msgs) && !st; i++) {
		char *a = NULL, *b = NULL;
		size_t la, lb, same = 0;

		if (!is_assistant(json_array_get(msgs, i)))
			continue;
		turns++;
		la = 0; /* nothing before a first message (templates may index messages[0]) */
		if (i)
			st = render(c, msgs, i, true, &a, &la);
		if (!st)
			st = render(c, msgs, i + 1, false, &b, &lb);
		while (!st && same < lb && same < text_len && b[same] == text[same])
			same++;
		if (!st && same > la)
			sp[(*n_sp)++] = (struct span){ la, same };
		free(a);
		free(b);
	}
	if (!st && !turns)
		st = ferry_error(FERRY_ERR_INVALID, "%s:%ld: the conversation has no assistant turn (nothing to train on)",
				 c->path, c->line);
	return st;
}

/* Each token's flags; the number of targets. */
static size_t flags_of(const struct ferry_token_buf *ids, const struct ferry_token_span *tsp,
		       const struct span *sp, size_t n_sp, uint8_t *flags)
{
	size_t targets = 0;

	for (size_t i = 0; i < ids->n; i++) {
		flags[i] = i == 0 ? FERRY_TOKEN_DOC_START : 0;
		for (size_t k = 0; k < n_sp; k++)
			if (tsp[i].start >= sp[k].start && tsp[i].end <= sp[k].end && tsp[i].end > tsp[i].start)
				flags[i] |= FERRY_TOKEN_TARGET;
		targets += flags[i] & FERRY_TOKEN_TARGET;
	}
	return targets;
}

static ferry_status write_doc(struct chat_run *c, const struct ferry_token_buf *ids, const uint8_t *flags)
{
	struct ferry_shard_writer *w;
	ferry_status st = FERRY_OK;

	c->documents++;
	w = c->k && c->documents > 1 && c->documents % c->k == 0 ? c->val : c->train;
	/* a document never straddles two shards */
	if (w->f && w->in_shard + (long)ids->n > w->shard_tokens)
		st = ferry_shard_writer_close(w);
	for (size_t i = 0; i < ids->n && !st; i++)
		st = ferry_shard_writer_put_flagged(w, (uint32_t)ids->ids[i], flags[i]);
	return st;
}

static ferry_status one_record(struct chat_run *c, const char *line, size_t n)
{
	json_error_t err;
	json_t *rec, *msgs = NULL, *own = NULL;
	char *text = NULL;
	size_t len;
	struct span *sp = NULL;
	size_t n_sp = 0;
	struct ferry_token_buf ids = { 0 };
	struct ferry_token_span *tsp = NULL;
	uint8_t *flags = NULL;
	ferry_status st;

	while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	if (c->line == 1 && n >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) { /* BOM */
		line += 3;
		n -= 3;
	}
	if (!n)
		return FERRY_OK;
	rec = json_loadb(line, n, 0, &err);
	if (!rec)
		return ferry_error(FERRY_ERR_FORMAT, "%s:%ld: not JSON: %s", c->path, c->line, err.text);
	st = messages_of(c, rec, &msgs, &own);
	if (!st)
		st = render(c, msgs, json_array_size(msgs), c->gen, &text, &len);
	if (!st && c->render_only) {
		c->each(c->ctx, text, len);
		goto out;
	}
	if (!st) {
		sp = malloc((json_array_size(msgs) + 1) * sizeof(*sp));
		st = sp ? spans_of(c, msgs, text, len, sp, &n_sp) : ferry_error(FERRY_ERR_NOMEM, "out of memory");
	}
	if (!st) {
		st = ferry_tokenizer_encode_offsets(c->opts->tokenizer, text, len, &ids, &tsp);
		if (st) {
			char msg[1024];

			snprintf(msg, sizeof(msg), "%s", ferry_last_error());
			st = ferry_error(st, "%s:%ld: %s", c->path, c->line, msg);
		}
	}
	if (!st && !ids.n)
		st = ferry_error(FERRY_ERR_INVALID, "%s:%ld: the conversation renders to no tokens", c->path, c->line);
	if (!st) {
		flags = malloc(ids.n);
		if (!flags)
			st = ferry_error(FERRY_ERR_NOMEM, "out of memory");
		else if (!flags_of(&ids, tsp, sp, n_sp, flags))
			st = ferry_error(FERRY_ERR_INVALID,
					 "%s:%ld: no token lies in an assistant span (the template renders each assistant turn differently within the whole conversation)",
					 c->path, c->line);
	}
	if (!st)
		st = write_doc(c, &ids, flags);
out:
	free(flags);
	free(tsp);
	ferry_token_buf_free(&ids);
	free(sp);
	free(text);
	json_decref(own);
	json_decref(rec);
	return st;
}

static ferry_status read_jsonl(struct chat_run *c, const char *path)
{
	struct ferry_text_reader *in = NULL;
	char *buf = malloc(CHUNK), *line = NULL;
	size_t n, len = 0, cap = 0;
	ferry_status st = buf ? ferry_text_reader_open(path, &in) : ferry_error(FERRY_ERR_NOMEM, "out of memory");

	c->path = path;
	c->line = 0;
	while (!st && !(st = ferry_text_reader_read(in, buf, CHUNK, &n)) && n) {
		for (size_t i = 0; i < n && !st; i++) {
			if (buf[i] == '\n') {
				c->line++;
				st = one_record(c, line, len);
				len = 0;
				continue;
			}
			if (len == cap) {
				char *g = realloc(line, cap ? 2 * cap : 4096);

				if (!g) {
					st = ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for a line", path);
					break;
				}
				line = g;
				cap = cap ? 2 * cap : 4096;
			}
			line[len++] = buf[i];
		}
		if (!st && c->opts && c->opts->stop && c->opts->stop(c->opts->stop_ctx))
			st = ferry_error(FERRY_ERR_INVALID, "stopped while reading %s", path);
	}
	if (!st && len) {
		c->line++;
		st = one_record(c, line, len);
	}
	if (in)
		ferry_text_reader_close(in);
	free(line);
	free(buf);
	return st;
}

ferry_status ferry_chat_each(const char *const *paths, int n_paths, ferry_chat_t chat,
			     bool add_generation_prompt,
			     void (*each)(void *ctx, const char *text, size_t len), void *ctx)
{
	struct chat_run c = { .chat = chat, .render_only = true, .gen = add_generation_prompt,
			      .each = each, .ctx = ctx };
	ferry_status st = FERRY_OK;

	for (int i = 0; i < n_paths && !st; i++)
		st = read_jsonl(&c, paths[i]);
	return st;
}

ferry_status ferry_data_from_chat(const char *const *paths, int n_paths,
				  const struct ferry_data_opts *opts, ferry_chat_t chat,
				  struct ferry_data_stats *stats)
{
	struct ferry_shard_writer *train = ferry_calloc(1, sizeof(*train));
	struct ferry_shard_writer *val = ferry_calloc(1, sizeof(*val));
	struct chat_run c = { .opts = opts, .chat = chat, .train = train, .val = val };
	ferry_status st = FERRY_OK;
	int done;

	if (!train || !val)
		st = ferry_error(FERRY_ERR_NOMEM, "out of memory");
	else if (!paths || n_paths <= 0 || !opts || !opts->out_prefix || !*opts->out_prefix || !chat ||
		 !opts->tokenizer || opts->shard_tokens <= 0 || !(opts->val_fraction >= 0 && opts->val_fraction <= 1))
		st = ferry_error(FERRY_ERR_INVALID, "conversations to shards: needs files, an output prefix, a chat template, a tokenizer, a shard size and a val fraction in [0, 1]");
	if (st)
		goto out;
	for (int s = 0; s < 2; s++) {
		struct ferry_shard_writer *w = s ? val : train;

		w->prefix = opts->out_prefix;
		w->split = s ? "val" : "train";
		w->shard_tokens = opts->shard_tokens;
		w->width = 4;
		w->flags = true;
		w->stop = opts->stop;
		w->stop_ctx = opts->stop_ctx;
		ferry_shard_writer_remove_dead(w);
	}
	if (opts->val_fraction > 0) {
		double k = floor(1.0 / opts->val_fraction + 0.5);

		c.k = k < 1 ? 1 : (long)k;
	}
	for (int i = 0; i < n_paths && !st; i++)
		st = read_jsonl(&c, paths[i]);
	if (!st && !c.documents)
		st = ferry_error(FERRY_ERR_INVALID, "no conversation in %d input file%s (first: %s)", n_paths,
				 n_paths == 1 ? "" : "s", paths[0]);
	if (!st)
		st = ferry_shard_writer_close(train);
	if (!st)
		st = ferry_shard_writer_close(val);
	if (!st)
		st = ferry_shard_writer_commit(train, &done);
	if (!st)
		st = ferry_shard_writer_commit(val, &done);
	if (!st) {
		ferry_shard_writer_remove_stale(train, train->index);
		ferry_shard_writer_remove_stale(val, val->index);
		if (stats) {
			stats->documents = c.documents;
			stats->train_tokens = train->total;
			stats->val_tokens = val->total;
			stats->train_shards = train->index;
			stats->val_shards = val->index;
		}
	}
out:
	if (st && train)
		ferry_shard_writer_discard(train);
	if (st && val)
		ferry_shard_writer_discard(val);
	if (train)
		free(train->flag);
	if (val)
		free(val->flag);
	ferry_free(train);
	ferry_free(val);
	return st;
}
