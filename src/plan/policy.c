/*
 * Activation placement policies: parsing a spec string (JAX / MaxText names)
 * and placing a layer's named tensors.
 *
 * Every policy reduces to one representation: a rule for tensors the policy
 * does not name (all remat, all device, or by dot-ness), and a table of names
 * with an explicit placement that overrides the rule.  Names the user wrote
 * are marked so ferry_policy_place() can refuse ones the layer lacks; names
 * from a MaxText preset are not (MaxText ignores absent names too).
 *
 * Syntax details beyond policy.h: names may be quoted with ' or "; empty
 * lists "()" and "[]" are allowed, empty names (including a trailing comma)
 * are not; offload_dot_with_no_batch_dims may carry JAX's (offload_src,
 * offload_dst) and save_and_offload_only_these_names JAX's offload_src= /
 * offload_dst= keywords, which must be "device" / "pinned_host"; JAX's
 * keyword form needs both name lists, as in JAX.  custom's placement words
 * are device|save|saved, offload|offloaded, remat, in any case.
 */
#include "ferry/policy.h"
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_NAMES 64
#define MAX_NAME_LEN 63
/* How much of a long spec to echo in messages, so the useful tail of the
 * message (the known policies, the model's names) survives the 512-byte
 * error buffer. */
#define SPEC_ECHO 60

enum rule {
	RULE_REMAT,          /* nothing saved */
	RULE_DEVICE,         /* everything saved */
	RULE_DOTS,           /* dots and batched dots saved */
	RULE_DOTS_NO_BATCH,  /* dots saved */
	RULE_OFFLOAD_DOTS,   /* dots offloaded */
};

struct name_entry {
	char name[MAX_NAME_LEN + 1];
	enum ferry_placement place;
	bool user;  /* written by the user: must exist in the layer */
};

struct ferry_policy {
	char *spec;  /* trimmed copy of the spec */
	enum rule rule;
	int n_names;
	struct name_entry names[MAX_NAMES];
};

/* ---- presets ------------------------------------------------------------- */

struct preset {
	const char *name;
	enum rule rule;
	const char *const *saved;      /* NULL-terminated, or NULL */
	const char *const *offloaded;  /* NULL-terminated, or NULL */
};

static const char *const dot_except_mlpwi[] = {
	"query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwo", NULL
};
static const char *const dot_except_mlp[] = {
	"query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", NULL
};
static const char *const dot_with_context_except_mlp[] = {
	"query_proj", "value_proj", "key_proj", "qkv_proj", "context", "out_proj", NULL
};
static const char *const qkv_proj[] = {
	"query_proj", "value_proj", "key_proj", "qkv_proj", NULL
};
static const char *const qkv_proj_offloaded[] = {
	"query_proj", "value_proj", "key_proj", NULL
};
static const char *const out_proj[] = { "out_proj", NULL };
static const char *const context_only[] = { "context", NULL };

/* The listed presets, in ferry_policy_preset_name() order. */
static const struct preset presets[] = {
	/* JAX */
	{ "nothing_saveable", RULE_REMAT, NULL, NULL },
	{ "everything_saveable", RULE_DEVICE, NULL, NULL },
	{ "dots_saveable", RULE_DOTS, NULL, NULL },
	{ "dots_with_no_batch_dims_saveable", RULE_DOTS_NO_BATCH, NULL, NULL },
	{ "offload_dot_with_no_batch_dims", RULE_OFFLOAD_DOTS, NULL, NULL },
	/* MaxText */
	{ "full", RULE_REMAT, NULL, NULL },
	{ "minimal", RULE_DOTS_NO_BATCH, NULL, NULL },
	{ "minimal_offloaded", RULE_OFFLOAD_DOTS, NULL, NULL },
	{ "save_dot_except_mlpwi", RULE_REMAT, dot_except_mlpwi, NULL },
	{ "save_dot_except_mlp", RULE_REMAT, dot_except_mlp, NULL },
	{ "save_dot_with_context_except_mlp", RULE_REMAT, dot_with_context_except_mlp, NULL },
	{ "save_qkv_proj", RULE_REMAT, qkv_proj, NULL },
	{ "qkv_proj_offloaded", RULE_REMAT, NULL, qkv_proj_offloaded },
	{ "save_out_proj", RULE_REMAT, out_proj, NULL },
	{ "minimal_flash", RULE_DOTS_NO_BATCH, context_only, NULL },
};

#define N_PRESETS ((int)(sizeof(presets) / sizeof(presets[0])))

/* JAX's older names for the same policies: accepted, not listed. */
static const struct {
	const char *alias;
	const char *target;
} aliases[] = {
	{ "checkpoint_dots", "dots_saveable" },
	{ "checkpoint_dots_with_no_batch_dims", "dots_with_no_batch_dims_saveable" },
};

/* The parameterised forms, for the "known:" list of an unknown policy. */
#define SAVE_ONLY "save_only_these_names"
#define SAVE_AND_OFFLOAD "save_and_offload_only_these_names"
#define PARAM_FORMS SAVE_ONLY "(...), " SAVE_AND_OFFLOAD "([...], [...]), " \
	"custom:name=device|offload|remat,..."

int ferry_policy_preset_count(void)
{
	return N_PRESETS;
}

const char *ferry_policy_preset_name(int i)
{
	if (i < 0 || i >= N_PRESETS)
		return NULL;
	return presets[i].name;
}

const char *ferry_placement_name(enum ferry_placement p)
{
	switch (p) {
	case FERRY_PLACE_REMAT: return "remat";
	case FERRY_PLACE_DEVICE: return "device";
	case FERRY_PLACE_OFFLOAD: return "offload";
	}
	return "invalid";
}

static const struct preset *find_preset(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
		if (strlen(aliases[i].alias) == len &&
		    !memcmp(aliases[i].alias, name, len)) {
			name = aliases[i].target;
			len = strlen(name);
			break;
		}
	}
	for (int i = 0; i < N_PRESETS; i++) {
		if (strlen(presets[i].name) == len &&
		    !memcmp(presets[i].name, name, len))
			return &presets[i];
	}
	return NULL;
}

/* ---- the parser ----------------------------------------------------------- */

struct parser {
	const char *s;      /* the trimmed spec, NUL-terminated */
	size_t pos;
	struct ferry_policy *pol;
};

/* The spec for messages: cut to SPEC_ECHO characters with "...". */
static const char *spec_echo(const char *spec, char buf[SPEC_ECHO + 4])
{
	size_t len = strlen(spec);

	if (len <= SPEC_ECHO)
		return spec;
	memcpy(buf, spec, SPEC_ECHO);
	memcpy(buf + SPEC_ECHO, "...", 4);
	return buf;
}

/* "policy 'SPEC': <what>" for syntax and content errors. */
static ferry_status parse_error(struct parser *ps, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static ferry_status parse_error(struct parser *ps, const char *fmt, ...)
{
	char what[400], echo[SPEC_ECHO + 4];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return ferry_error(FERRY_ERR_INVALID, "policy '%s': %s",
			   spec_echo(ps->s, echo), what);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

/* Characters of an unquoted name or keyword: anything but the syntax
 * characters, whitespace and control characters. */
static bool is_name_char(char c)
{
	return (unsigned char)c > ' ' && c != 0x7f && !strchr(",()[]=:'\"", c);
}

static void skip_ws(struct parser *ps)
{
	while (is_space(ps->s[ps->pos]))
		ps->pos++;
}

static char peek(struct parser *ps)
{
	skip_ws(ps);
	return ps->s[ps->pos];
}

/* Describes the character at the cursor for "expected X, found Y". */
static const char *found(struct parser *ps, char buf[12])
{
	unsigned char c = (unsigned char)ps->s[ps->pos];

	if (!c)
		return "the end";
	if (c < ' ' || c >= 0x7f)
		snprintf(buf, 12, "byte 0x%02x", c);
	else
		snprintf(buf, 12, "'%c'", c);
	return buf;
}

/* Consumes c (after whitespace) or fails naming what was there.  Column
 * numbers are 1-based in the trimmed spec. */
static ferry_status expect(struct parser *ps, char c)
{
	char b[12];

	if (peek(ps) == c) {
		ps->pos++;
		return FERRY_OK;
	}
	if (c == ')' || c == ']')
		return parse_error(ps, "unbalanced %s: expected '%c' at column %zu, found %s",
				   c == ')' ? "parentheses" : "brackets", c,
				   ps->pos + 1, found(ps, b));
	return parse_error(ps, "expected '%c' at column %zu, found %s", c,
			   ps->pos + 1, found(ps, b));
}

/* Reads a name, bare or quoted with ' or " (JAX style), into out. */
static ferry_status parse_name(struct parser *ps, char out[MAX_NAME_LEN + 1])
{
	char quote = 0, b[12];
	size_t start, len;

	skip_ws(ps);
	if (ps->s[ps->pos] == '\'' || ps->s[ps->pos] == '"')
		quote = ps->s[ps->pos++];
	start = ps->pos;
	while (is_name_char(ps->s[ps->pos]))
		ps->pos++;
	len = ps->pos - start;
	if (quote) {
		if (ps->s[ps->pos] != quote) {
			if (!ps->s[ps->pos])
				return parse_error(ps, "unterminated quote at column %zu",
						   start);
			return parse_error(ps, "bad character %s in a quoted name at column %zu",
					   found(ps, b), ps->pos + 1);
		}
		ps->pos++;
	}
	if (!len)
		return parse_error(ps, "empty name at column %zu (found %s)",
				   start + 1, found(ps, b));
	if (len > MAX_NAME_LEN)
		return parse_error(ps, "name '%.20s...' is longer than %d characters",
				   ps->s + start, MAX_NAME_LEN);
	memcpy(out, ps->s + start, len);
	out[len] = '\0';
	return FERRY_OK;
}

/* Index of name in the policy's table, or -1. */
static int find_name(const struct ferry_policy *pol, const char *name)
{
	for (int i = 0; i < pol->n_names; i++) {
		if (!strcmp(pol->names[i].name, name))
			return i;
	}
	return -1;
}

/* Adds a name with its placement.  A name given twice the same way is
 * harmless; given two ways it is an error (JAX refuses a name both saved and
 * offloaded). */
static ferry_status add_name(struct parser *ps, const char *name,
			     enum ferry_placement place, bool user)
{
	struct ferry_policy *pol = ps->pol;
	int k = find_name(pol, name);
	struct name_entry *e = k >= 0 ? &pol->names[k] : NULL;

	if (e) {
		if (e->place == place)
			return FERRY_OK;
		if ((e->place == FERRY_PLACE_DEVICE && place == FERRY_PLACE_OFFLOAD) ||
		    (e->place == FERRY_PLACE_OFFLOAD && place == FERRY_PLACE_DEVICE))
			return parse_error(ps, "name '%s' is both saved and offloaded",
					   name);
		return parse_error(ps, "name '%s' is given two placements (%s and %s)",
				   name, ferry_placement_name(e->place),
				   ferry_placement_name(place));
	}
	if (pol->n_names == MAX_NAMES)
		return parse_error(ps, "more than %d names", MAX_NAMES);
	e = &pol->names[pol->n_names++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->place = place;
	e->user = user;
	return FERRY_OK;
}

/* name (',' name)* up to (not including) `close`; empty when close comes
 * first, as save_only_these_names() and [] are valid Python. */
static ferry_status parse_name_list(struct parser *ps, char close,
				    enum ferry_placement place)
{
	char name[MAX_NAME_LEN + 1];
	ferry_status st;

	if (peek(ps) == close)
		return FERRY_OK;
	for (;;) {
		/* At the end, say what is missing rather than "empty name". */
		if (!peek(ps))
			return expect(ps, close);
		st = parse_name(ps, name);
		if (st)
			return st;
		st = add_name(ps, name, place, true);
		if (st)
			return st;
		if (peek(ps) != ',')
			return FERRY_OK;
		ps->pos++;
	}
}

/* '[' names ']' */
static ferry_status parse_bracket_list(struct parser *ps,
				       enum ferry_placement place)
{
	ferry_status st = expect(ps, '[');

	if (!st)
		st = parse_name_list(ps, ']', place);
	if (!st)
		st = expect(ps, ']');
	return st;
}

/* Tries to read `word` followed by '=' at the cursor; leaves the cursor
 * alone if it is not there. */
static bool accept_keyword(struct parser *ps, const char *word)
{
	size_t save = ps->pos, len = strlen(word);

	skip_ws(ps);
	if (strncmp(ps->s + ps->pos, word, len) || is_name_char(ps->s[ps->pos + len])) {
		ps->pos = save;
		return false;
	}
	ps->pos += len;
	if (peek(ps) != '=') {
		ps->pos = save;
		return false;
	}
	ps->pos++;
	return true;
}

/* The value of offload_src / offload_dst: ferry offloads from device memory
 * to pinned host memory only, so those are the only values accepted. */
static ferry_status parse_offload_target(struct parser *ps, const char *key,
					 const char *want)
{
	char value[MAX_NAME_LEN + 1];
	ferry_status st = parse_name(ps, value);

	if (st)
		return st;
	if (strcmp(value, want))
		return parse_error(ps, "%s=\"%s\" is not supported (only %s=\"%s\")",
				   key, value, key, want);
	return FERRY_OK;
}

/* save_and_offload_only_these_names(...): the two lists positionally (ferry's
 * shorthand) or with JAX's keywords in any order, and optionally JAX's
 * offload_src / offload_dst. */
static ferry_status parse_save_and_offload(struct parser *ps)
{
	bool have_saved = false, have_offloaded = false, have_src = false,
	     have_dst = false, any_keyword = false;
	int positional = 0;
	ferry_status st;
	char b[12];

	st = expect(ps, '(');
	if (st)
		return st;
	while (peek(ps) != ')') {
		const char *key;
		bool *seen, keyword = true;

		if (accept_keyword(ps, "names_which_can_be_saved")) {
			key = "names_which_can_be_saved";
			seen = &have_saved;
			st = parse_bracket_list(ps, FERRY_PLACE_DEVICE);
		} else if (accept_keyword(ps, "names_which_can_be_offloaded")) {
			key = "names_which_can_be_offloaded";
			seen = &have_offloaded;
			st = parse_bracket_list(ps, FERRY_PLACE_OFFLOAD);
		} else if (accept_keyword(ps, "offload_src")) {
			key = "offload_src";
			seen = &have_src;
			st = parse_offload_target(ps, key, "device");
		} else if (accept_keyword(ps, "offload_dst")) {
			key = "offload_dst";
			seen = &have_dst;
			st = parse_offload_target(ps, key, "pinned_host");
		} else if (peek(ps) == '[') {
			/* As in Python, no positional argument after a keyword. */
			if (any_keyword || positional == 2)
				return parse_error(ps, "unexpected list at column %zu "
						   "(give [saved], [offloaded] first, then keywords)",
						   ps->pos + 1);
			keyword = false;
			if (positional++ == 0) {
				key = "names_which_can_be_saved";
				seen = &have_saved;
				st = parse_bracket_list(ps, FERRY_PLACE_DEVICE);
			} else {
				key = "names_which_can_be_offloaded";
				seen = &have_offloaded;
				st = parse_bracket_list(ps, FERRY_PLACE_OFFLOAD);
			}
		} else if (!peek(ps)) {
			return expect(ps, ')');
		} else {
			return parse_error(ps, "expected a [list] or one of "
					   "names_which_can_be_saved=, "
					   "names_which_can_be_offloaded=, offload_src=, "
					   "offload_dst= at column %zu, found %s",
					   ps->pos + 1, found(ps, b));
		}
		if (st)
			return st;
		if (*seen)
			return parse_error(ps, "%s given twice", key);
		*seen = true;
		any_keyword |= keyword;
		if (peek(ps) != ',')
			break;
		ps->pos++;
		if (peek(ps) == ')')
			return parse_error(ps, "empty argument at column %zu", ps->pos + 1);
	}
	st = expect(ps, ')');
	if (st)
		return st;
	/* JAX requires both lists; an empty one is written []. */
	if (!have_saved)
		return parse_error(ps, "missing the list of saved names "
				   "(names_which_can_be_saved=[...])");
	if (!have_offloaded)
		return parse_error(ps, "missing the list of offloaded names "
				   "(names_which_can_be_offloaded=[...])");
	return FERRY_OK;
}

/* offload_dot_with_no_batch_dims takes JAX's (offload_src, offload_dst),
 * positionally or by keyword; bare, as MaxText's minimal_offloaded, it
 * means ("device", "pinned_host"). */
static ferry_status parse_offload_dot_args(struct parser *ps)
{
	bool have_src = false, have_dst = false;
	ferry_status st;

	st = expect(ps, '(');
	if (st)
		return st;
	if (peek(ps) != ')') {
		for (int i = 0;; i++) {
			bool kw_src = accept_keyword(ps, "offload_src");
			bool kw_dst = !kw_src && accept_keyword(ps, "offload_dst");
			bool src = kw_src || (!kw_dst && i == 0);

			if (!kw_src && !kw_dst && i > 1)
				return parse_error(ps, "too many arguments");
			if (src ? have_src : have_dst)
				return parse_error(ps, "%s given twice",
						   src ? "offload_src" : "offload_dst");
			st = src ? parse_offload_target(ps, "offload_src", "device")
				 : parse_offload_target(ps, "offload_dst", "pinned_host");
			if (st)
				return st;
			*(src ? &have_src : &have_dst) = true;
			if (peek(ps) != ',')
				break;
			ps->pos++;
		}
	}
	return expect(ps, ')');
}

/* Placement words of custom: MaxText's device / offload / remat, plus the
 * natural "saved" / "offloaded", case-insensitive. */
static bool placement_from_word(const char *w, enum ferry_placement *out)
{
	static const struct {
		const char *word;
		enum ferry_placement place;
	} words[] = {
		{ "device", FERRY_PLACE_DEVICE },
		{ "saved", FERRY_PLACE_DEVICE },
		{ "save", FERRY_PLACE_DEVICE },
		{ "offload", FERRY_PLACE_OFFLOAD },
		{ "offloaded", FERRY_PLACE_OFFLOAD },
		{ "remat", FERRY_PLACE_REMAT },
	};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (!strcasecmp(w, words[i].word)) {
			*out = words[i].place;
			return true;
		}
	}
	return false;
}

/* custom:name=placement,...  (the cursor is after "custom") */
static ferry_status parse_custom(struct parser *ps)
{
	char name[MAX_NAME_LEN + 1], word[MAX_NAME_LEN + 1];
	enum ferry_placement place;
	ferry_status st;

	/* An empty custom would be 'full', but is more likely a mistake. */
	if (peek(ps) && peek(ps) != ':')
		return expect(ps, ':');
	if (peek(ps) == ':')
		ps->pos++;
	if (!peek(ps))
		return parse_error(ps, "custom needs name=device|offload|remat,... "
				   "(for everything recomputed use 'full')");
	for (;;) {
		st = parse_name(ps, name);
		if (!st)
			st = expect(ps, '=');
		if (!st)
			st = parse_name(ps, word);
		if (st)
			return st;
		if (!placement_from_word(word, &place))
			return parse_error(ps, "'%s=%s': the placement must be device, "
					   "offload or remat", name, word);
		st = add_name(ps, name, place, true);
		if (st)
			return st;
		if (peek(ps) != ',')
			return FERRY_OK;
		ps->pos++;
	}
}

static ferry_status load_preset(struct parser *ps, const struct preset *pr)
{
	ferry_status st = FERRY_OK;

	ps->pol->rule = pr->rule;
	for (int i = 0; !st && pr->saved && pr->saved[i]; i++)
		st = add_name(ps, pr->saved[i], FERRY_PLACE_DEVICE, false);
	for (int i = 0; !st && pr->offloaded && pr->offloaded[i]; i++)
		st = add_name(ps, pr->offloaded[i], FERRY_PLACE_OFFLOAD, false);
	return st;
}

static ferry_status unknown_policy(struct parser *ps, size_t head_len)
{
	char known[400], echo[SPEC_ECHO + 4];
	size_t used = 0;

	for (int i = 0; i < N_PRESETS; i++)
		used += snprintf(known + used, sizeof(known) - used, "%s, ",
				 presets[i].name);
	if (head_len > SPEC_ECHO)
		head_len = SPEC_ECHO;
	/* Name just the policy word when there is one ("foo" of "foo(a)"). */
	if (!head_len)
		return ferry_error(FERRY_ERR_INVALID,
				   "unknown policy '%s' (known: %s" PARAM_FORMS ")",
				   spec_echo(ps->s, echo), known);
	return ferry_error(FERRY_ERR_INVALID,
			   "unknown policy '%.*s' (known: %s" PARAM_FORMS ")",
			   (int)head_len, ps->s, known);
}

static ferry_status parse_spec(struct parser *ps)
{
	const struct preset *pr;
	const char *head = ps->s;
	size_t len = 0, before;
	ferry_status st;
	char b[12], c;

	while (is_name_char(head[len]))
		len++;
	ps->pos = len;
	if (!len)
		return unknown_policy(ps, 0);

	if (len == strlen(SAVE_ONLY) && !memcmp(head, SAVE_ONLY, len)) {
		ps->pol->rule = RULE_REMAT;
		st = expect(ps, '(');
		if (!st)
			st = parse_name_list(ps, ')', FERRY_PLACE_DEVICE);
		if (!st)
			st = expect(ps, ')');
	} else if (len == strlen(SAVE_AND_OFFLOAD) &&
		   !memcmp(head, SAVE_AND_OFFLOAD, len)) {
		ps->pol->rule = RULE_REMAT;
		st = parse_save_and_offload(ps);
	} else if (len == 6 && !memcmp(head, "custom", 6)) {
		ps->pol->rule = RULE_REMAT;
		st = parse_custom(ps);
	} else if ((pr = find_preset(head, len))) {
		st = load_preset(ps, pr);
		if (!st && !strcmp(pr->name, "offload_dot_with_no_batch_dims") &&
		    peek(ps) == '(')
			st = parse_offload_dot_args(ps);
	} else {
		return unknown_policy(ps, len);
	}
	if (st)
		return st;
	if (!peek(ps))
		return FERRY_OK;

	c = ps->s[ps->pos];
	if (c == ')' || c == ']')
		return parse_error(ps, "unbalanced %s: unmatched '%c' at column %zu",
				   c == ')' ? "parentheses" : "brackets", c, ps->pos + 1);
	/* Quote what was understood, without the whitespace after it. */
	for (before = ps->pos; before && is_space(ps->s[before - 1]); before--)
		;
	return parse_error(ps, "unexpected %s at column %zu after '%.*s'",
			   found(ps, b), ps->pos + 1, (int)before, ps->s);
}

ferry_status ferry_policy_parse(const char *spec, struct ferry_policy **out)
{
	struct ferry_policy *pol;
	struct parser ps;
	size_t start = 0, end;
	ferry_status st;

	if (!out)
		return ferry_error(FERRY_ERR_INVALID, "ferry_policy_parse: out is NULL");
	*out = NULL;
	if (!spec)
		return ferry_error(FERRY_ERR_INVALID, "ferry_policy_parse: spec is NULL");
	end = strlen(spec);
	while (start < end && is_space(spec[start]))
		start++;
	while (end > start && is_space(spec[end - 1]))
		end--;
	if (start == end)
		return ferry_error(FERRY_ERR_INVALID,
				   "empty policy (try nothing_saveable, dots_saveable, ...)");

	pol = ferry_calloc(1, sizeof(*pol));
	if (!pol)
		return ferry_error(FERRY_ERR_NOMEM, "policy '%.*s': out of memory",
				   (int)(end - start < SPEC_ECHO ? end - start : SPEC_ECHO),
				   spec + start);
	pol->spec = ferry_malloc(end - start + 1);
	if (!pol->spec) {
		ferry_free(pol);
		return ferry_error(FERRY_ERR_NOMEM, "policy '%.*s': out of memory",
				   (int)(end - start < SPEC_ECHO ? end - start : SPEC_ECHO),
				   spec + start);
	}
	memcpy(pol->spec, spec + start, end - start);
	pol->spec[end - start] = '\0';

	ps.s = pol->spec;
	ps.pos = 0;
	ps.pol = pol;
	st = parse_spec(&ps);
	if (st) {
		ferry_policy_free(pol);
		return st;
	}
	*out = pol;
	return FERRY_OK;
}

void ferry_policy_free(struct ferry_policy *p)
{
	if (!p)
		return;
	ferry_free(p->spec);
	ferry_free(p);
}

const char *ferry_policy_spec(const struct ferry_policy *p)
{
	return p ? p->spec : "";
}

/* ---- placing ------------------------------------------------------------ */

static enum ferry_placement apply_rule(enum rule rule,
				       const struct ferry_policy_tensor *t)
{
	switch (rule) {
	case RULE_REMAT:
		return FERRY_PLACE_REMAT;
	case RULE_DEVICE:
		return FERRY_PLACE_DEVICE;
	case RULE_DOTS:
		return t->dot || t->batched_dot ? FERRY_PLACE_DEVICE : FERRY_PLACE_REMAT;
	case RULE_DOTS_NO_BATCH:
		return t->dot ? FERRY_PLACE_DEVICE : FERRY_PLACE_REMAT;
	case RULE_OFFLOAD_DOTS:
		return t->dot ? FERRY_PLACE_OFFLOAD : FERRY_PLACE_REMAT;
	}
	return FERRY_PLACE_REMAT;
}

static ferry_status unknown_name(const struct ferry_policy *p, const char *name,
				 const struct ferry_policy_tensor *tensors, int n)
{
	char list[320], echo[SPEC_ECHO + 4];
	size_t used = 0;

	list[0] = '\0';
	for (int i = 0; i < n; i++) {
		const char *sep = i ? ", " : "";

		/* Keep room for ", ..." should the next name not fit. */
		if (used + strlen(sep) + strlen(tensors[i].name) + sizeof(", ...") >
		    sizeof(list)) {
			snprintf(list + used, sizeof(list) - used, "%s...", sep);
			break;
		}
		used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
					 sep, tensors[i].name);
	}
	return ferry_error(FERRY_ERR_INVALID,
			   "policy '%s': unknown name '%s' (this model's names: %s)",
			   spec_echo(p->spec, echo), name, list);
}

ferry_status ferry_policy_place(const struct ferry_policy *p,
				const struct ferry_policy_tensor *tensors, int n,
				enum ferry_placement *out)
{
	char echo[SPEC_ECHO + 4];

	if (!p || n < 0 || (n && (!tensors || !out)))
		return ferry_error(FERRY_ERR_INVALID,
				   "ferry_policy_place: bad arguments (policy %p, %d tensors)",
				   (const void *)p, n);
	for (int i = 0; i < n; i++) {
		if (!tensors[i].name)
			return ferry_error(FERRY_ERR_INVALID,
					   "ferry_policy_place: tensor %d has no name", i);
	}

	/* Check everything before writing anything: out is untouched on error. */
	for (int k = 0; k < p->n_names; k++) {
		const struct name_entry *e = &p->names[k];
		int i;

		for (i = 0; i < n && strcmp(tensors[i].name, e->name); i++)
			;
		if (i == n) {
			if (e->user)
				return unknown_name(p, e->name, tensors, n);
			continue;
		}
		if (tensors[i].is_layer_input && e->place == FERRY_PLACE_REMAT)
			return ferry_error(FERRY_ERR_INVALID,
					   "policy '%s': the layer input '%s' cannot be "
					   "recomputed: it is the scan carry (keep it on "
					   "device or offload it)",
					   spec_echo(p->spec, echo), e->name);
	}

	for (int i = 0; i < n; i++) {
		int k = find_name(p, tensors[i].name);
		const struct name_entry *e = k >= 0 ? &p->names[k] : NULL;

		if (tensors[i].is_layer_input)
			/* The carry exists anyway: keep it unless named for offload. */
			out[i] = e && e->place == FERRY_PLACE_OFFLOAD ? FERRY_PLACE_OFFLOAD
								       : FERRY_PLACE_DEVICE;
		else
			out[i] = e ? e->place : apply_rule(p->rule, &tensors[i]);
	}
	return FERRY_OK;
}
