/*
 * The chat-template interpreter on its own: each construct of the subset
 * rendered to the bytes Jinja (with transformers' trim_blocks and
 * lstrip_blocks) gives, constructs outside the subset refused by name and
 * line before rendering, raise_exception's message carried out.
 * tests/cli/chat_template.sh checks whole templates against transformers.
 */
#include "ferry/chat.h"
#include "test_util.h"

static const char *MSGS =
	"[{\"role\": \"system\", \"content\": \"  Be brief.  \"},"
	" {\"role\": \"user\", \"content\": \"Héllo wörld\"},"
	" {\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nHi!\"}]";

/* Renders src with MSGS; expect NULL: must fail, with `err` in the message. */
static void render_is(const char *src, bool gen, const char *expect, const char *err)
{
	ferry_chat_t c = NULL;
	char *out = NULL;
	size_t len = 0;
	ferry_status st = ferry_chat_open_source(src, strlen(src), "t",
						 "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}}", &c);

	if (!st)
		st = ferry_chat_render(c, MSGS, -1, gen, &out, &len);
	if (expect) {
		CHECK(st == FERRY_OK, "%s: %s", src, ferry_last_error());
		CHECK(!st && len == strlen(expect) && !memcmp(out, expect, len),
		      "%s:\n got [%.*s]\nwant [%s]", src, (int)len, out ? out : "", expect);
	} else {
		CHECK(st != FERRY_OK, "%s: rendered [%.*s], should fail", src, (int)len, out ? out : "");
		CHECK(strstr(ferry_last_error(), err), "%s: message '%s' lacks '%s'", src, ferry_last_error(), err);
	}
	free(out);
	ferry_chat_free(c);
}

int main(void)
{
	/* output, specials, whitespace control */
	render_is("{{ bos_token }}{{ eos_token }}!", false, "<s></s>!", NULL);
	render_is("a  {{- ' b ' -}}  c", false, "a b c", NULL);
	render_is("x\n  {% if true %}\n  y\n  {% endif %}\nz\n", false, "x\n  y\nz", NULL);
	render_is("{# c #}\n{%+ if true %}a{% endif %}", false, "a", NULL);
	render_is("   {%+ if true %}a{% endif %}", false, "   a", NULL);
	/* loops, loop variables, else, filters on loops */
	render_is("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
		  "{{ loop.length }}{{ loop.revindex }};{% endfor %}", false,
		  "10TrueFalse33;21FalseFalse32;32FalseTrue31;", NULL);
	render_is("{% for m in messages if m.role != 'system' %}{{ m['role'] }}{{ loop.length }}{% endfor %}",
		  false, "user2assistant2", NULL);
	render_is("{% for x in [] %}a{% else %}empty{% endfor %}", false, "empty", NULL);
	render_is("{% for k, v in {'a': 1, 'b': [1, 'x']}.items() %}{{ k }}={{ v }},{% endfor %}", false,
		  "a=1,b=[1, 'x'],", NULL);
	render_is("{% for x in range(5) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", false,
		  "012", NULL);
	/* scopes: set in a loop does not leak; a namespace carries state */
	render_is("{% set n = 0 %}{% set ns = namespace(n=0, s='') %}{% for m in messages %}"
		  "{% set n = n + 1 %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}", false, "0 3", NULL);
	/* if/elif/else, tests, in, operators */
	render_is("{% for m in messages %}{% if m.role == 'user' %}U{% elif m.role == 'system' %}S"
		  "{% else %}A{% endif %}{% endfor %}", false, "SUA", NULL);
	render_is("{{ x is defined }}{{ x is not defined }}{{ none is none }}{{ 'a' is string }}"
		  "{{ messages[0] is mapping }}{{ messages is iterable }}{{ messages is sequence }}"
		  "{{ true is true }}{{ 1 is false }}{{ 3 is equalto 3 }}{{ 4 is odd }}{{ 4 is divisibleby(2) }}",
		  false, "FalseTrueTrueTrueTrueTrueTrueTrueFalseTrueFalseTrue", NULL);
	render_is("{{ 'ell' in 'hello' }}{{ 'z' not in 'hello' }}{{ 'role' in messages[0] }}{{ 2 in [1, 2] }}",
		  false, "TrueTrueTrueTrue", NULL);
	render_is("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }} {{ 1 ~ 2 }}"
		  " {{ 'a' + 'b' }} {{ not 0 }} {{ 0 or 'x' }} {{ 1 and 2 }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }}",
		  false, "3 -4 1 2 3.5 7 12 ab True x 2 1.0 1e+20 0.30000000000000004", NULL);
	render_is("{{ '-' * 3 }}{{ 2 * 'ab' }}[{{ 'x' * 0 }}]", false, "---abab[]", NULL);
	render_is("{{ 'yes' if messages|length > 2 else 'no' }}[{{ 'x' if false }}]", false, "yes[]", NULL);
	/* strings: methods, slicing, filters */
	render_is("{{ messages[0].content|trim }}|{{ messages[0].content.strip() }}|{{ 'xxaxx'.strip('x') }}|"
		  "{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}",
		  false, "Be brief.|Be brief.|a|a|a|['a', 'b', '', 'c']|['a', 'b']", NULL);
	render_is("{{ messages[1].content.upper() }} {{ messages[1].content|lower }} {{ 'hELLO wORLD'.title() }}"
		  " {{ 'hello'|capitalize }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }}"
		  " {{ 'a-b'.replace('-', '+') }}", false,
		  "HÉLLO WÖRLD héllo wörld Hello World Hello True True a+b", NULL);
	render_is("{{ messages[1].content[::-1] }} {{ messages[1].content[1:4] }} {{ messages[-1].role }}"
		  " {{ (messages[1:]|first).role }} {{ (messages|last).role }} {{ [1,2,3][::-1] }}"
		  " {{ messages[1].content|length }}", false,
		  "dlröw olléH éll assistant user assistant [3, 2, 1] 11", NULL);
	render_is("{% set c = messages[2].content %}{{ c.split('</think>')[-1].lstrip('\\n') }}", false, "Hi!", NULL);
	render_is("{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
		  "{{ messages|map(attribute='role')|join(',') }} {{ [1, 'a']|join('-') }}"
		  " {{ x|default('d') }} {{ ''|default('e', true) }}", false, "1system,user,assistant 1-a d e", NULL);
	render_is("{{ ['a', 'code', 'b']|reject('equalto', 'code')|join(', ') }} {{ [0, 1, 2]|select|list }}"
		  " {{ messages|rejectattr('role', 'in', ['user', 'system'])|map(attribute='role')|list }}", false,
		  "a, b [1, 2] ['assistant']", NULL);
	/* tojson: transformers' json.dumps(ensure_ascii=False) */
	render_is("{{ messages[1]|tojson }} {{ {'a': [1, 2.5, none, true]}|tojson }} {{ 'q\"\\n'|tojson }}",
		  false, "{\"role\": \"user\", \"content\": \"Héllo wörld\"} {\"a\": [1, 2.5, null, true]} \"q\\\"\\n\"",
		  NULL);
	render_is("{{ {'a': [1], 'b': {}}|tojson(indent=2) }}", false, "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}",
		  NULL);
	render_is("{{ add_generation_prompt }}{% if add_generation_prompt %}<gen>{% endif %}", true, "True<gen>", NULL);
	render_is("{{ tools }} {{ tools is none }}", false, "None True", NULL);
	/* refusals: by name and line, before rendering */
	render_is("ok\n{% macro m() %}x{% endmacro %}", false, NULL, "line 2: 'macro' is outside the subset");
	render_is("a\n\n{{ x|wordwrap }}", false, NULL, "line 3: the filter 'wordwrap' is outside the subset");
	render_is("{% if x is lower %}{% endif %}", false, NULL, "the test 'lower' is outside the subset");
	render_is("{% include 'x' %}", false, NULL, "'include' is outside the subset");
	render_is("{% if true %}a", false, NULL, "not closed");
	render_is("{{ 'a' }", false, NULL, "line 1");
	render_is("{% endfor %}", false, NULL, "closes nothing");
	/* raise_exception: the template's message */
	render_is("\n{% if messages[0].role == 'system' %}{{ raise_exception('No system role!') }}{% endif %}",
		  false, NULL, "line 2: raise_exception: No system role!");
	return test_exit_code();
}
