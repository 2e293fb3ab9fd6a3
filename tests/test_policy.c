/*
 * Activation placement policies: every preset's full placement vector on a
 * GPT-2-like layer and on a three-tensor tutorial layer, the parameterised
 * JAX forms and MaxText's custom, quoting and whitespace, and every error
 * (with its message), plus allocation failure.
 *
 * Expected placements are written one letter per tensor: D device,
 * O offload, R remat.
 */
#include "ferry/policy.h"
#include "test_util.h"

#include <stdarg.h>
#include <stdbool.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define N_GPT2 18

static const struct ferry_policy_tensor gpt2[N_GPT2] = {
	{ "decoder_layer_input", true, false, false },
	{ "pre_attention_norm", false, false, false },
	{ "pre_attention_norm_mean", false, false, false },
	{ "pre_attention_norm_rstd", false, false, false },
	{ "query_proj", false, true, false },
	{ "key_proj", false, true, false },
	{ "value_proj", false, true, false },
	{ "context", false, false, true },
	{ "attention_lse", false, false, true },
	{ "out_proj", false, true, false },
	{ "post_attention_residual", false, false, false },
	{ "pre_mlp_norm", false, false, false },
	{ "pre_mlp_norm_mean", false, false, false },
	{ "pre_mlp_norm_rstd", false, false, false },
	{ "mlpwi", false, true, false },
	{ "mlp_activation", false, false, false },
	{ "mlpwo", false, true, false },
	{ "decoder_layer_output", false, false, false },
};

/*
 * GPT-2 expectations are written in groups, in table order:
 *   input | norm mean rstd | q k v | context lse | out_proj |
 *   residual mlp_norm mean rstd | mlpwi | activation | mlpwo | output
 */
#define G(in, norm, qkv, attn, out, mid, wi, act, wo, outp) \
	in norm qkv attn out mid wi act wo outp

static const struct {
	const char *preset;
	const char *gpt2;      /* placements on the GPT-2 table */
	const char *tutorial;  /* placements on x (input), y (dot), out (dot) */
} preset_expect[] = {
	{ "nothing_saveable",
	  G("D", "RRR", "RRR", "RR", "R", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "everything_saveable",
	  G("D", "DDD", "DDD", "DD", "D", "DDDD", "D", "D", "D", "D"), "DDD" },
	{ "dots_saveable",
	  G("D", "RRR", "DDD", "DD", "D", "RRRR", "D", "R", "D", "R"), "DDD" },
	{ "dots_with_no_batch_dims_saveable",
	  G("D", "RRR", "DDD", "RR", "D", "RRRR", "D", "R", "D", "R"), "DDD" },
	{ "offload_dot_with_no_batch_dims",
	  G("D", "RRR", "OOO", "RR", "O", "RRRR", "O", "R", "O", "R"), "DOO" },
	{ "full",
	  G("D", "RRR", "RRR", "RR", "R", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "minimal",
	  G("D", "RRR", "DDD", "RR", "D", "RRRR", "D", "R", "D", "R"), "DDD" },
	{ "minimal_offloaded",
	  G("D", "RRR", "OOO", "RR", "O", "RRRR", "O", "R", "O", "R"), "DOO" },
	{ "save_dot_except_mlpwi",
	  G("D", "RRR", "DDD", "RR", "D", "RRRR", "R", "R", "D", "R"), "DRR" },
	{ "save_dot_except_mlp",
	  G("D", "RRR", "DDD", "RR", "D", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "save_dot_with_context_except_mlp",
	  G("D", "RRR", "DDD", "DR", "D", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "save_qkv_proj",
	  G("D", "RRR", "DDD", "RR", "R", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "qkv_proj_offloaded",
	  G("D", "RRR", "OOO", "RR", "R", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "save_out_proj",
	  G("D", "RRR", "RRR", "RR", "D", "RRRR", "R", "R", "R", "R"), "DRR" },
	{ "minimal_flash",
	  G("D", "RRR", "DDD", "DR", "D", "RRRR", "D", "R", "D", "R"), "DDD" },
};

#define N_EXPECT ((int)(sizeof(preset_expect) / sizeof(preset_expect[0])))

static const struct ferry_policy_tensor tutorial[3] = {
	{ "x", true, false, false },
	{ "y", false, true, false },
	{ "out", false, true, false },
};

static char letter(enum ferry_placement p)
{
	switch (p) {
	case FERRY_PLACE_DEVICE: return 'D';
	case FERRY_PLACE_OFFLOAD: return 'O';
	case FERRY_PLACE_REMAT: return 'R';
	}
	return '?';
}

/* Parses spec, places the table and compares with want (one letter per
 * tensor); reports each differing tensor by name. */
static void check_places(const char *spec, const struct ferry_policy_tensor *t,
			 int n, const char *want)
{
	enum ferry_placement out[64];
	struct ferry_policy *p = NULL;
	char got[65];
	ferry_status st;

	CHECK((int)strlen(want) == n, "%s: expectation has %zu letters for %d tensors",
	      spec, strlen(want), n);
	st = ferry_policy_parse(spec, &p);
	CHECK(st == FERRY_OK && p, "parse '%s': %d %s", spec, st, ferry_last_error());
	if (st)
		return;
	st = ferry_policy_place(p, t, n, out);
	CHECK(st == FERRY_OK, "place '%s': %d %s", spec, st, ferry_last_error());
	if (!st) {
		for (int i = 0; i < n; i++) {
			got[i] = letter(out[i]);
			CHECK(got[i] == want[i], "'%s': %s is %s, want %c", spec,
			      t[i].name, ferry_placement_name(out[i]), want[i]);
		}
		got[n] = '\0';
		CHECK(!strcmp(got, want), "'%s': got %s, want %s", spec, got, want);
	}
	ferry_policy_free(p);
}

/* The spec must fail to parse with FERRY_ERR_INVALID and a message holding
 * every one of the NULL-terminated fragments. */
static void check_parse_error(const char *spec, ...)
{
	struct ferry_policy *p = (struct ferry_policy *)&p; /* not NULL */
	ferry_status st = ferry_policy_parse(spec, &p);
	const char *msg = ferry_last_error();
	const char *frag;
	va_list ap;

	CHECK(st == FERRY_ERR_INVALID, "parse '%s' gave %d, want invalid", spec, st);
	CHECK(p == NULL, "parse '%s' failed but left *out set", spec);
	if (st == FERRY_OK)
		ferry_policy_free(p);
	va_start(ap, spec);
	while ((frag = va_arg(ap, const char *)))
		CHECK(strstr(msg, frag), "parse '%s': message \"%s\" lacks \"%s\"",
		      spec, msg, frag);
	va_end(ap);
}

/* The spec parses but placing the table fails with FERRY_ERR_INVALID, the
 * message holding the fragments and out left untouched. */
static void check_place_error(const char *spec, const struct ferry_policy_tensor *t,
			      int n, ...)
{
	enum ferry_placement out[64];
	struct ferry_policy *p = NULL;
	const char *frag, *msg;
	ferry_status st;
	va_list ap;

	st = ferry_policy_parse(spec, &p);
	CHECK(st == FERRY_OK, "parse '%s': %s", spec, ferry_last_error());
	if (st)
		return;
	for (int i = 0; i < n; i++)
		out[i] = (enum ferry_placement)77;
	st = ferry_policy_place(p, t, n, out);
	msg = ferry_last_error();
	CHECK(st == FERRY_ERR_INVALID, "place '%s' gave %d, want invalid", spec, st);
	for (int i = 0; i < n; i++)
		CHECK((int)out[i] == 77, "place '%s' failed but wrote out[%d]", spec, i);
	va_start(ap, n);
	while ((frag = va_arg(ap, const char *)))
		CHECK(strstr(msg, frag), "place '%s': message \"%s\" lacks \"%s\"",
		      spec, msg, frag);
	va_end(ap);
	ferry_policy_free(p);
}

static void test_presets(void)
{
	int n = ferry_policy_preset_count();

	CHECK(n == 15, "preset count %d, want 15", n);
	CHECK(N_EXPECT == 15, "the test expects %d presets", N_EXPECT);
	/* Same names, same order, each with a written-out expectation. */
	for (int i = 0; i < n && i < N_EXPECT; i++) {
		const char *name = ferry_policy_preset_name(i);

		CHECK(name && !strcmp(name, preset_expect[i].preset),
		      "preset %d is %s, want %s", i, name ? name : "(null)",
		      preset_expect[i].preset);
	}
	CHECK(ferry_policy_preset_name(-1) == NULL, "preset -1");
	CHECK(ferry_policy_preset_name(n) == NULL, "preset past the end");

	for (int i = 0; i < N_EXPECT; i++) {
		check_places(preset_expect[i].preset, gpt2, N_GPT2,
			     preset_expect[i].gpt2);
		/* The tutorial layer lacks every MaxText preset name: ignored. */
		check_places(preset_expect[i].preset, tutorial, 3,
			     preset_expect[i].tutorial);
	}

	/* JAX aliases place as their targets, and are not listed. */
	check_places("checkpoint_dots", gpt2, N_GPT2, preset_expect[2].gpt2);
	check_places("checkpoint_dots_with_no_batch_dims", gpt2, N_GPT2,
		     preset_expect[3].gpt2);
	for (int i = 0; i < n; i++)
		CHECK(strncmp(ferry_policy_preset_name(i), "checkpoint_", 11),
		      "alias %s listed", ferry_policy_preset_name(i));

	/* offload_dot_with_no_batch_dims with JAX's arguments. */
	check_places("offload_dot_with_no_batch_dims(offload_src=\"device\", "
		     "offload_dst=\"pinned_host\")", gpt2, N_GPT2,
		     preset_expect[4].gpt2);
	check_places("offload_dot_with_no_batch_dims('device', 'pinned_host')",
		     tutorial, 3, "DOO");
	check_places("offload_dot_with_no_batch_dims(offload_dst='pinned_host', "
		     "offload_src='device')", tutorial, 3, "DOO");

	/* Empty layers are fine. */
	{
		struct ferry_policy *p = NULL;
		ferry_status st = ferry_policy_parse("dots_saveable", &p);

		CHECK(st == FERRY_OK, "parse: %s", ferry_last_error());
		if (!st) {
			st = ferry_policy_place(p, NULL, 0, NULL);
			CHECK(st == FERRY_OK, "empty layer: %s", ferry_last_error());
		}
		ferry_policy_free(p);
	}
}

static void test_names(void)
{
	/* save_only_these_names, quoted both ways, with odd whitespace. */
	check_places("save_only_these_names(context, 'out_proj', \"mlpwo\")",
		     gpt2, N_GPT2,
		     G("D", "RRR", "RRR", "DR", "D", "RRRR", "R", "R", "D", "R"));
	check_places("  save_only_these_names ( 'query_proj' ,\"key_proj\" ,\tvalue_proj )\n",
		     gpt2, N_GPT2,
		     G("D", "RRR", "DDD", "RR", "R", "RRRR", "R", "R", "R", "R"));
	check_places("save_only_these_names()", gpt2, N_GPT2, preset_expect[0].gpt2);
	check_places("save_only_these_names(decoder_layer_input, pre_mlp_norm_rstd)",
		     gpt2, N_GPT2,
		     G("D", "RRR", "RRR", "RR", "R", "RRRD", "R", "R", "R", "R"));
	check_places("save_only_these_names(y)", tutorial, 3, "DDR");
	/* Listing a name twice is harmless. */
	check_places("save_only_these_names(y, 'y')", tutorial, 3, "DDR");

	/* save_and_offload positionally: saved, then offloaded; offloading
	 * the layer input by name. */
	check_places("save_and_offload_only_these_names([query_proj, key_proj], "
		     "[value_proj, decoder_layer_input])", gpt2, N_GPT2,
		     G("O", "RRR", "DDO", "RR", "R", "RRRR", "R", "R", "R", "R"));
	check_places("save_and_offload_only_these_names([], [x, out])", tutorial, 3,
		     "ORO");
	/* JAX's keywords, in either order, with the accepted src/dst. */
	check_places("save_and_offload_only_these_names(names_which_can_be_saved=['mlpwi'], "
		     "names_which_can_be_offloaded=[\"context\", 'attention_lse'])",
		     gpt2, N_GPT2,
		     G("D", "RRR", "RRR", "OO", "R", "RRRR", "D", "R", "R", "R"));
	check_places("save_and_offload_only_these_names(\n"
		     "    names_which_can_be_offloaded = [ 'context' ] ,\n"
		     "    names_which_can_be_saved = [ 'mlpwi' , 'mlp_activation' ],\n"
		     "    offload_src = \"device\", offload_dst = \"pinned_host\")",
		     gpt2, N_GPT2,
		     G("D", "RRR", "RRR", "OR", "R", "RRRR", "D", "D", "R", "R"));
	check_places("save_and_offload_only_these_names([y], [], offload_dst='pinned_host')",
		     tutorial, 3, "DDR");

	/* MaxText's custom, every placement word, case-insensitive. */
	check_places("custom:decoder_layer_input=offload,query_proj=device,"
		     "key_proj=save,context=Offload,mlpwi=SAVED,out_proj=offloaded,"
		     "mlpwo=remat,value_proj=REMAT", gpt2, N_GPT2,
		     G("O", "RRR", "DDR", "OR", "O", "RRRR", "D", "R", "R", "R"));
	check_places("custom : x = offload , y=device ", tutorial, 3, "ODR");
	check_places("custom:x=device,out='offload'", tutorial, 3, "DRO");
	check_places("custom:y=device,y=saved", tutorial, 3, "DDR");
	/* The layer input kept on device explicitly is fine. */
	check_places("custom:decoder_layer_input=device", gpt2, N_GPT2,
		     preset_expect[0].gpt2);

	/* The spec is stored trimmed, as a copy. */
	{
		char spec[] = "  custom:y=offload \t";
		struct ferry_policy *p = NULL;
		enum ferry_placement out[3];
		ferry_status st = ferry_policy_parse(spec, &p);

		CHECK(st == FERRY_OK, "parse: %s", ferry_last_error());
		if (!st) {
			memset(spec, 'z', sizeof(spec) - 1);
			CHECK(!strcmp(ferry_policy_spec(p), "custom:y=offload"),
			      "spec '%s'", ferry_policy_spec(p));
			st = ferry_policy_place(p, tutorial, 3, out);
			CHECK(st == FERRY_OK && out[0] == FERRY_PLACE_DEVICE &&
			      out[1] == FERRY_PLACE_OFFLOAD && out[2] == FERRY_PLACE_REMAT,
			      "custom:y=offload after the caller's string changed");
		}
		ferry_policy_free(p);
	}

	/* 64 names fit; each up to 63 characters. */
	{
		char spec[64 * 8 + 64], name63[64];
		size_t used = 0;
		struct ferry_policy *p = NULL;

		used += (size_t)snprintf(spec, sizeof(spec), "save_only_these_names(");
		for (int i = 0; i < 64; i++)
			used += (size_t)snprintf(spec + used, sizeof(spec) - used,
						 "%sn%d", i ? "," : "", i);
		snprintf(spec + used, sizeof(spec) - used, ")");
		CHECK(ferry_policy_parse(spec, &p) == FERRY_OK, "64 names: %s",
		      ferry_last_error());
		ferry_policy_free(p);

		memset(name63, 'a', 63);
		name63[63] = '\0';
		snprintf(spec, sizeof(spec), "custom:%s=device", name63);
		p = NULL;
		CHECK(ferry_policy_parse(spec, &p) == FERRY_OK, "63-char name: %s",
		      ferry_last_error());
		ferry_policy_free(p);
	}
}

static void test_errors(void)
{
	char spec[1024];
	const char *msg;
	size_t len;

	/* Unknown policies list the known ones, to the end. */
	check_parse_error("foo", "unknown policy 'foo'", "known: nothing_saveable",
			  "everything_saveable", "dots_with_no_batch_dims_saveable",
			  "offload_dot_with_no_batch_dims", "minimal_offloaded",
			  "save_dot_with_context_except_mlp", "qkv_proj_offloaded",
			  "minimal_flash", "save_only_these_names(",
			  "save_and_offload_only_these_names(",
			  "custom:name=device|offload|remat,...)", NULL);
	check_parse_error("foo(a, b)", "unknown policy 'foo'", NULL);
	check_parse_error("Dots_Saveable", "unknown policy 'Dots_Saveable'", NULL);
	check_parse_error("dots", "unknown policy 'dots'", NULL);
	check_parse_error("customs:a=device", "unknown policy 'customs'", NULL);
	memset(spec, 'q', 200);
	spec[200] = '\0';
	check_parse_error(spec, "unknown policy 'qqqq", NULL);
	msg = ferry_last_error();
	len = strlen(msg);
	CHECK(len > 0 && msg[len - 1] == ')' && strstr(msg, "custom:name="),
	      "long unknown policy: the known list was cut: %s", msg);
	check_parse_error("(a)", "unknown policy '(a)'", NULL);

	/* Empty specs. */
	check_parse_error("", "empty policy", NULL);
	check_parse_error(" \t\n", "empty policy", NULL);

	/* Both saved and offloaded: at parse time, whatever the layer. */
	check_parse_error("save_and_offload_only_these_names([a, b], [c, a])",
			  "name 'a' is both saved and offloaded",
			  "policy 'save_and_offload_only_these_names(", NULL);
	check_parse_error("save_and_offload_only_these_names("
			  "names_which_can_be_offloaded=['query_proj'], "
			  "names_which_can_be_saved=[\"query_proj\"])",
			  "name 'query_proj' is both saved and offloaded", NULL);
	check_parse_error("custom:y=device,y=offload",
			  "name 'y' is both saved and offloaded", NULL);
	check_parse_error("custom:y=device,y=remat", "name 'y'",
			  "two placements", NULL);

	/* save_and_offload's arguments. */
	check_parse_error("save_and_offload_only_these_names(names_which_can_be_saved=[a])",
			  "missing the list of offloaded names", NULL);
	check_parse_error("save_and_offload_only_these_names(names_which_can_be_offloaded=[a])",
			  "missing the list of saved names", NULL);
	check_parse_error("save_and_offload_only_these_names([a])",
			  "missing the list of offloaded names", NULL);
	check_parse_error("save_and_offload_only_these_names()",
			  "missing the list of saved names", NULL);
	check_parse_error("save_and_offload_only_these_names(names_which_can_be_saved=[a], [b])",
			  "unexpected list", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], [c])",
			  "unexpected list", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], "
			  "names_which_can_be_saved=[c])",
			  "names_which_can_be_saved given twice", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], "
			  "offload_dst=\"device\")",
			  "offload_dst=\"device\" is not supported", "pinned_host", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], offload_src='host')",
			  "offload_src=\"host\" is not supported", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], "
			  "offload_src=device, offload_src=device)",
			  "offload_src given twice", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b], frobnicate=1)",
			  "expected a [list]", "found 'f'", NULL);
	check_parse_error("save_and_offload_only_these_names([a], [b],)",
			  "empty argument", NULL);
	check_parse_error("save_and_offload_only_these_names(a, b)",
			  "expected a [list]", NULL);
	check_parse_error("offload_dot_with_no_batch_dims(offload_dst='host')",
			  "offload_dst=\"host\" is not supported", NULL);
	check_parse_error("offload_dot_with_no_batch_dims('device', 'pinned_host', 'x')",
			  "too many arguments", NULL);
	check_parse_error("minimal_offloaded(offload_src='device')",
			  "unexpected '('", NULL);

	/* custom's syntax. */
	check_parse_error("custom", "custom needs name=device|offload|remat", NULL);
	check_parse_error("custom:", "custom needs name=device|offload|remat", NULL);
	check_parse_error("custom: ", "custom needs", NULL);
	check_parse_error("custom a=device", "expected ':'", NULL);
	check_parse_error("custom:y=keep", "'y=keep'",
			  "the placement must be device, offload or remat", NULL);
	check_parse_error("custom:y", "expected '='", "found the end", NULL);
	check_parse_error("custom:=device", "empty name", NULL);
	check_parse_error("custom:y=device,", "empty name", NULL);
	check_parse_error("custom:y=", "empty name", NULL);
	check_parse_error("custom:y=device z=remat", "unexpected 'z'", NULL);

	/* Parentheses and brackets. */
	check_parse_error("save_only_these_names(a, b", "unbalanced parentheses",
			  "expected ')'", NULL);
	check_parse_error("save_only_these_names(a, b))", "unbalanced parentheses",
			  "unmatched ')'", NULL);
	check_parse_error("save_only_these_names(", "unbalanced parentheses", NULL);
	check_parse_error("save_only_these_names(a,", "unbalanced parentheses", NULL);
	check_parse_error("save_only_these_names", "expected '('", NULL);
	check_parse_error("save_only_these_names a", "expected '('", "found 'a'", NULL);
	check_parse_error("save_and_offload_only_these_names([a, b], [c)",
			  "unbalanced brackets", "expected ']'", NULL);
	check_parse_error("save_and_offload_only_these_names([a, b], [c]",
			  "unbalanced parentheses", NULL);
	check_parse_error("save_and_offload_only_these_names([a, b]], [c])",
			  "unbalanced parentheses", NULL);
	check_parse_error("save_and_offload_only_these_names(", "unbalanced parentheses",
			  NULL);
	check_parse_error("full)", "unbalanced parentheses", NULL);
	check_parse_error("dots_saveable]", "unbalanced brackets", NULL);

	/* Names. */
	check_parse_error("save_only_these_names(a,,b)", "empty name", NULL);
	check_parse_error("save_only_these_names(a,)", "empty name", NULL);
	check_parse_error("save_only_these_names(,a)", "empty name", NULL);
	check_parse_error("save_only_these_names('')", "empty name", NULL);
	check_parse_error("save_only_these_names('a)", "bad character ')'", NULL);
	check_parse_error("save_only_these_names('a", "unterminated quote", NULL);
	check_parse_error("save_only_these_names('a b')", "bad character ' '", NULL);
	check_parse_error("save_only_these_names(a b)", "expected ')'", "found 'b'",
			  NULL);
	check_parse_error("save_only_these_names([a])", "empty name", NULL);
	{
		char name64[65];

		memset(name64, 'a', 64);
		name64[64] = '\0';
		snprintf(spec, sizeof(spec), "save_only_these_names(%s)", name64);
		check_parse_error(spec, "is longer than 63 characters", NULL);
	}
	{
		size_t used = (size_t)snprintf(spec, sizeof(spec), "custom:");

		for (int i = 0; i < 65; i++)
			used += (size_t)snprintf(spec + used, sizeof(spec) - used,
						 "%sn%d=device", i ? "," : "", i);
		check_parse_error(spec, "more than 64 names", NULL);
	}

	/* Trailing garbage. */
	check_parse_error("dots_saveable x", "unexpected 'x'", NULL);
	check_parse_error("dots_saveable()", "unexpected '('", NULL);
	check_parse_error("save_only_these_names(a) b", "unexpected 'b'", NULL);
	check_parse_error("full,minimal", "unexpected ','", NULL);
	check_parse_error("full\x01", "unexpected byte 0x01", NULL);

	/* Unknown names the user wrote: refused when placing, listing the
	 * layer's names. */
	check_place_error("save_only_these_names(foo)", tutorial, 3,
			  "policy 'save_only_these_names(foo)': unknown name 'foo' "
			  "(this model's names: x, y, out)", NULL);
	check_place_error("save_only_these_names(query_proj, qkv_proj)", gpt2, N_GPT2,
			  "unknown name 'qkv_proj'",
			  "this model's names: decoder_layer_input, pre_attention_norm, ",
			  "mlpwo, decoder_layer_output)", NULL);
	check_place_error("save_and_offload_only_these_names([y], [bar])", tutorial, 3,
			  "unknown name 'bar'", NULL);
	check_place_error("custom:y=device,Out=offload", tutorial, 3,
			  "unknown name 'Out'", "x, y, out", NULL);
	check_place_error("custom:query_proj=remat", tutorial, 3,
			  "unknown name 'query_proj'", NULL);

	/* The layer input, whatever its name, cannot be recomputed. */
	check_place_error("custom:decoder_layer_input=remat", gpt2, N_GPT2,
			  "the layer input 'decoder_layer_input' cannot be recomputed: "
			  "it is the scan carry (keep it on device or offload it)", NULL);
	check_place_error("custom:y=device,x=Remat", tutorial, 3,
			  "the layer input 'x' cannot be recomputed", NULL);
	/* Other tensors named remat are fine. */
	check_places("custom:query_proj=remat,mlpwo=device", gpt2, N_GPT2,
		     G("D", "RRR", "RRR", "RR", "R", "RRRR", "R", "R", "D", "R"));

	/* Bad arguments. */
	{
		struct ferry_policy *p = NULL;
		enum ferry_placement out[3];

		CHECK(ferry_policy_parse(NULL, &p) == FERRY_ERR_INVALID, "NULL spec");
		CHECK(ferry_policy_parse("full", NULL) == FERRY_ERR_INVALID, "NULL out");
		CHECK(ferry_policy_place(NULL, tutorial, 3, out) == FERRY_ERR_INVALID,
		      "NULL policy");
		if (ferry_policy_parse("full", &p) == FERRY_OK) {
			CHECK(ferry_policy_place(p, tutorial, -1, out) == FERRY_ERR_INVALID,
			      "negative count");
			CHECK(ferry_policy_place(p, tutorial, 3, NULL) == FERRY_ERR_INVALID,
			      "NULL out");
			CHECK(ferry_policy_place(p, NULL, 3, out) == FERRY_ERR_INVALID,
			      "NULL tensors");
		} else {
			CHECK(0, "parse full: %s", ferry_last_error());
		}
		ferry_policy_free(p);
		ferry_policy_free(NULL);
	}
}

static void test_placement_names(void)
{
	CHECK(!strcmp(ferry_placement_name(FERRY_PLACE_REMAT), "remat"), "remat");
	CHECK(!strcmp(ferry_placement_name(FERRY_PLACE_DEVICE), "device"), "device");
	CHECK(!strcmp(ferry_placement_name(FERRY_PLACE_OFFLOAD), "offload"), "offload");
	CHECK(!strcmp(ferry_placement_name((enum ferry_placement)9), "invalid"),
	      "out of range");
}

/* Every allocation of a parse failing in turn: NOMEM, *out NULL, nothing
 * leaked (LeakSanitizer in the ASan build; glibc's counters here). */
static void test_nomem(void)
{
	const char *specs[] = {
		"dots_saveable",
		"save_and_offload_only_these_names([query_proj], [context])",
		"custom:x=offload,y=device",
	};

	for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
		int k;

		for (k = 0; k < 16; k++) {
			struct ferry_policy *p = (struct ferry_policy *)&p;
			ferry_status st;

			ferry_fault_fail_after(k);
			st = ferry_policy_parse(specs[s], &p);
			ferry_fault_fail_after(-1);
			if (st == FERRY_OK) {
				ferry_policy_free(p);
				break;
			}
			CHECK(st == FERRY_ERR_NOMEM, "'%s' failing allocation %d: %d %s",
			      specs[s], k, st, ferry_last_error());
			CHECK(p == NULL, "'%s' failing allocation %d left *out set",
			      specs[s], k);
			CHECK(strstr(ferry_last_error(), "out of memory"),
			      "message: %s", ferry_last_error());
		}
		CHECK(k >= 1 && k < 16, "'%s': %d allocations failed before success",
		      specs[s], k);
	}

	/* ferry_fault_fail_after(0): the very first allocation fails. */
	{
		struct ferry_policy *p = NULL;

		ferry_fault_fail_after(0);
		CHECK(ferry_policy_parse("full", &p) == FERRY_ERR_NOMEM && !p,
		      "fail_after(0)");
		ferry_fault_fail_after(-1);
	}

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && \
	(__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	/* Heap in use is back where it was after failed and good parses. */
	{
		struct ferry_policy *p = NULL;
		size_t before = mallinfo2().uordblks;

		for (int k = 0; k < 3; k++) {
			ferry_fault_fail_after(k);
			if (ferry_policy_parse("save_only_these_names(y)", &p) == FERRY_OK)
				ferry_policy_free(p);
			ferry_fault_fail_after(-1);
		}
		CHECK(mallinfo2().uordblks == before, "heap grew by %zu bytes",
		      mallinfo2().uordblks - before);
	}
#endif
}

int main(void)
{
	test_nomem();
	test_presets();
	test_names();
	test_errors();
	test_placement_names();
	return test_exit_code();
}
