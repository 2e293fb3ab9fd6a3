/*
 * Placements as values (ferry/place.h):
 *  - written and read back: format(parse(s)) is s for every combination of
 *    today's shorthand flags, and a bad item leaves the placements as they
 *    were;
 *  - the flags and their placements are one thing both ways: opts ->
 *    placements -> opts -> placements gives the same placements, and the
 *    same tensor table, byte for byte;
 *  - every tensor-table entry carries the group whose placement put it
 *    there, consistently: an entry on the host belongs to a group whose
 *    home is the host (or is an offloaded activation), AdamW's state and
 *    the master weights are the adam group's, the weight and gradient
 *    rings the layers', the edge region the edges', for GPT-2 and Llama
 *    under every placement of the weights and the optimizer.
 */
#include "ferry/place.h"
#include "ferry/plan.h"
#include "plan/tensor_table.h"
#include "test_util.h"

#include <string.h>

static void check_round_trip(const char *spec)
{
	struct ferry_places p, q;
	char out[FERRY_PLACE_CHARS];

	ferry_places_default(&p);
	CHECK(ferry_places_parse(spec, &p) == FERRY_OK, "parse '%s': %s", spec, ferry_last_error());
	CHECK(ferry_places_format(&p, out, sizeof(out)) == FERRY_OK, "format '%s'", spec);
	CHECK(!strcmp(out, spec), "'%s' written back as '%s'", spec, out);
	ferry_places_default(&q);
	CHECK(ferry_places_parse(out, &q) == FERRY_OK && !memcmp(&p, &q, sizeof(p)), "'%s' read twice differs", out);
}

static void test_syntax(void)
{
	static const char *const specs[] = {
		"layers.weights=device,edges.weights=device,adam=device,activations=everything_saveable,"
		"activations.prefetch=2",
		"layers.weights=host:stream(3),edges.weights=host:stream,adam=host:cpu(speculative),"
		"activations=save_and_offload_only_these_names([mlpwi], [query_proj, key_proj]),activations.prefetch=1",
		"layers.weights=host:stream(64),edges.weights=device,adam=host:stream,activations.context=offload,"
		"activations.mlpwi=device,activations.prefetch=5",
		"layers.weights=device,edges.weights=device,adam=host:cpu,activations=nothing_saveable,"
		"activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=device:shard(4),activations=everything_saveable,"
		"activations.prefetch=2",
	};
	static const char *const bad[] = {
		"adam", "adam=", "adam=host", "layers.weights=host:stream(0)", "layers.weights=host:stream(65)",
		"layers.weights=host:stream(2", "edges.weights=host:stream(1)", "weights=device",
		"activations=full,activations.context=offload", "activations.context=offload,activations=full",
		"activations.prefetch=x", "activations.=device", "adam=device,bogus=1",
		"adam=device:shard(1)", "adam=device:shard", "adam=host:shard(2)",
	};
	struct ferry_places p, before;

	for (size_t i = 0; i < sizeof(specs) / sizeof(*specs); i++)
		check_round_trip(specs[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		ferry_places_default(&p);
		CHECK(ferry_places_parse("adam=host:cpu,activations.prefetch=4", &p) == FERRY_OK, "a good spec");
		before = p;
		CHECK(ferry_places_parse(bad[i], &p) == FERRY_ERR_INVALID, "'%s' refused", bad[i]);
		CHECK(!memcmp(&p, &before, sizeof(p)), "'%s' changed the placements it was refused", bad[i]);
	}
	/* the default, and a later item replacing an earlier one's group */
	ferry_places_default(&p);
	CHECK(ferry_places_parse(" adam=host:cpu , adam=host:stream ", &p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].update == FERRY_UPDATE_DEVICE && p.group[FERRY_GROUP_ADAM].home == FERRY_HOME_HOST,
	      "the last item of a group wins");
}

/* Every shorthand flag combination the table accepts. */
struct flags {
	enum ferry_optim_place opt;
	bool params, embeddings;
	int prefetch;
	enum ferry_clip_order clip;
};

static const struct flags combos[] = {
	{ FERRY_OPTIM_DEVICE, false, false, 0, FERRY_CLIP_EXACT },
	{ FERRY_OPTIM_STREAM, false, false, 0, FERRY_CLIP_EXACT },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_EXACT },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_SPECULATIVE },
	{ FERRY_OPTIM_STREAM, true, false, 0, FERRY_CLIP_EXACT },
	{ FERRY_OPTIM_CPU, true, false, 2, FERRY_CLIP_EXACT },
	{ FERRY_OPTIM_CPU, true, true, 0, FERRY_CLIP_SPECULATIVE },
	{ FERRY_OPTIM_STREAM, true, true, 3, FERRY_CLIP_EXACT },
};

static struct ferry_exec_opts opts_of(const struct flags *f, enum ferry_dtype act)
{
	return (struct ferry_exec_opts){ .policy = "minimal_offloaded", .optimizer = f->opt, .offload_params = f->params,
					 .offload_embeddings = f->embeddings, .param_prefetch = f->prefetch,
					 .clip_order = f->clip, .act_dtype = act };
}

static bool same_table(const struct ferry_tensor_table *a, const struct ferry_tensor_table *b)
{
	if (a->n != b->n || a->n_buffers != b->n_buffers || memcmp(a->buffers, b->buffers, sizeof(a->buffers)))
		return false;
	for (int i = 0; i < a->n; i++)
		if (memcmp(&a->e[i], &b->e[i], sizeof(a->e[i])))
			return false;
	return true;
}

/* Entry i's group agrees with where it lives and what it is. */
static void check_entry(const char *what, const struct ferry_tensor_table *tt, int i)
{
	const struct ferry_tensor_entry *e = &tt->e[i];

	if (e->site == FERRY_SITE_HOST)
		CHECK(e->group == FERRY_GROUP_ACTIVATIONS ? e->act == FERRY_PLACE_OFFLOAD
			: e->group >= 0 && ferry_table_place(tt, e->group)->home == FERRY_HOME_HOST,
		      "%s: host entry %s in group %d, whose home is not the host", what, e->name, e->group);
	if (e->kind == FERRY_TK_WEIGHT || e->kind == FERRY_TK_OPT_STATE)
		CHECK(e->group == FERRY_GROUP_ADAM, "%s: %s is AdamW's (group %d)", what, e->name, e->group);
	if (i == tt->ix.wring || i == tt->ix.gring)
		CHECK(e->group == FERRY_GROUP_LAYER_WEIGHTS, "%s: the ring %s is the layers'", what, e->name);
	if (tt->ix.edge_buffer >= 0 && e->buffer == tt->ix.edge_buffer)
		CHECK(e->group == FERRY_GROUP_EDGE_WEIGHTS, "%s: the edge entry %s is the edges'", what, e->name);
	if (e->kind == FERRY_TK_ACTIVATION)
		CHECK(e->group == FERRY_GROUP_ACTIVATIONS, "%s: %s is an activation", what, e->name);
	if (e->kind == FERRY_TK_ACT_GRAD || e->kind == FERRY_TK_BATCH || e->kind == FERRY_TK_WORKSPACE)
		CHECK(e->group == FERRY_GROUP_NONE, "%s: %s is placed by no group", what, e->name);
}

static void test_tables(const char *arch, int tied)
{
	struct ferry_model_config cfg = { .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .max_seq = 16,
					  .tie_embeddings = tied };

	if (!strcmp(arch, "llama"))
		cfg.kv_heads = 2;
	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	for (int dt = 0; dt < 2; dt++)
		for (size_t c = 0; c < sizeof(combos) / sizeof(*combos); c++) {
			struct ferry_exec_opts o = opts_of(&combos[c], dt ? FERRY_BF16 : FERRY_F32), back = { 0 };
			struct ferry_tensor_table a, b;
			struct ferry_places p, q;
			char what[96];

			snprintf(what, sizeof(what), "%s%s %s, combination %zu", arch, tied ? " (tied)" : "",
				 dt ? "bf16" : "fp32", c);
			CHECK(ferry_exec_opts_places(&o, &p) == FERRY_OK, "%s: placements: %s", what, ferry_last_error());
			back.act_dtype = o.act_dtype;
			ferry_exec_opts_set_places(&back, &p);
			CHECK(ferry_exec_opts_places(&back, &q) == FERRY_OK && !memcmp(&p, &q, sizeof(p)),
			      "%s: flags -> placements -> flags -> placements differ", what);
			/* the written-down form alone gives the same table */
			char spec[FERRY_PLACE_CHARS];
			struct ferry_exec_opts written = { .act_dtype = o.act_dtype, .place = spec };

			CHECK(ferry_places_format(&p, spec, sizeof(spec)) == FERRY_OK, "%s: format", what);
			if (ferry_tensor_table_build(&cfg, 2, 8, &o, &a)) {
				CHECK(0, "%s: table: %s", what, ferry_last_error());
				continue;
			}
			if (!ferry_tensor_table_build(&cfg, 2, 8, &written, &b)) {
				CHECK(same_table(&a, &b), "%s: --place '%s' builds another table", what, spec);
				ferry_tensor_table_release(&b);
			} else {
				CHECK(0, "%s: table of '%s': %s", what, spec, ferry_last_error());
			}
			for (int i = 0; i < a.n; i++)
				check_entry(what, &a, i);
			ferry_tensor_table_release(&a);
		}
}

/* adam=device:shard(3): this rank's slice of each moment, the parameter
 * array (and its compute copy) padded to 3 slices; not on the host. */
static void test_shard(const char *arch)
{
	struct ferry_model_config cfg = { .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .max_seq = 16 };
	struct ferry_places p;

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	for (int dt = 0; dt < 2; dt++) {
		struct ferry_exec_opts o = { .act_dtype = dt ? FERRY_BF16 : FERRY_F32, .place = "adam=device:shard(3)" };
		struct ferry_tensor_table tt;
		size_t S, n;

		if (ferry_tensor_table_build(&cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s: sharded table: %s", arch, ferry_last_error());
			continue;
		}
		n = tt.n_params;
		S = tt.ix.shard_numel;
		CHECK(S == (n + 2) / 3 && tt.e[tt.ix.mom_slice].bytes == S * 4 && tt.e[tt.ix.var_slice].bytes == S * 4 &&
		      tt.buffers[tt.ix.mom_buffer].bytes == S * 4 && tt.ix.mom[0] < 0,
		      "%s: a slice of %zu of %zu elements", arch, S, n);
		CHECK(tt.buffers[tt.ix.params_buffer].bytes == 3 * S * 4 &&
		      (!dt || tt.buffers[tt.ix.copy_buffer].bytes == 3 * S * 2),
		      "%s %s: the parameters padded to 3 slices", arch, dt ? "bf16" : "fp32");
		for (int i = 0; i < tt.n; i++)
			check_entry(arch, &tt, i);
		ferry_tensor_table_release(&tt);
	}
	ferry_places_default(&p);
	CHECK(ferry_places_parse("adam=device:shard(2)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK, "shard");
	p.group[FERRY_GROUP_ADAM].home = FERRY_HOME_HOST;
	CHECK(ferry_places_check(&p) == FERRY_ERR_INVALID, "a split optimizer on the host: not yet");
}

int main(void)
{
	test_syntax();
	test_tables("gpt2", 0);
	test_tables("llama", 0);
	test_tables("llama", 1);
	test_shard("gpt2");
	test_shard("llama");
	return test_exit_code();
}
