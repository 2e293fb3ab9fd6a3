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
 *    the master weights are the adam group's, for GPT-2 and Llama under
 *    every placement of the weights and the optimizer;
 *  - the stream rule's rings are there for the streamed weight groups
 *    only, each slot of each parameter inside its device entries and in
 *    its group; the copies for rollback for the speculative update only,
 *    of every stacked parameter's master weights and moments.
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
		"layers.weights=device,edges.weights=device,adam=host:cpu:shard(4),activations=everything_saveable,"
		"activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=host(dram):cpu(speculative):shard(2),"
		"activations=nothing_saveable,activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=device:shard(3,grads),activations=nothing_saveable,"
		"activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=host(dram):cpu(speculative):shard(2,grads),"
		"activations=nothing_saveable,activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=device:shard(2,params),activations=everything_saveable,"
		"activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=host:cpu(speculative):shard(3,params),"
		"activations=nothing_saveable,activations.prefetch=2",
		"layers.weights=host:stream(2),edges.weights=device,adam=host(cxl):stream,activations=nothing_saveable,"
		"activations.host=nvme,activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=host(params=node:2,optimizer=dram):cpu(speculative),"
		"activations.context=offload,activations.host=interleave:1*3+2,activations.prefetch=2",
		"layers.weights=device,edges.weights=device,adam=host:cpu,adam.grads=device:stream(3),"
		"activations=minimal_offloaded,activations.prefetch=2",
	};
	static const char *const bad[] = {
		"adam", "adam=", "adam=host", "layers.weights=host:stream(0)", "layers.weights=host:stream(65)",
		"layers.weights=host:stream(2", "edges.weights=host:stream(1)", "weights=device",
		"activations=full,activations.context=offload", "activations.context=offload,activations=full",
		"activations.prefetch=x", "activations.=device", "adam=device,bogus=1",
		"adam=device:shard(1)", "adam=device:shard", "adam=host:shard(2)", "adam=host(dram):shard(2)",
		"adam=host:cpu:shard(1)", "adam=host:cpu:shard", "adam=host:cpu:shard(2", "adam=host:cpu:shard(2)x",
		"adam=host:shard(2):cpu", "adam=host:cpu:shard(2,params", "adam=host:cpu:shard(1,params)",
		"adam=host:cpu:shard(2,grads", "adam=host:cpu:shard(1,grads)",
		"adam=device:shard(1,grads)", "adam=device:shard(2,grad)", "adam=device:shard(2,grads",
		"adam=device:shard(,grads)", "adam=device:shard(2,param)", "adam=device:shard(2,grads,params)",
		"adam=host(Tape):cpu", "adam=host(activations=dram):cpu", "layers.weights=host(dram):stream(2)",
		"adam=host(nvme):cpu", "adam=host(grads=nvme):stream", "adam=host(cxl)", "adam=host(cxl:stream",
		"adam=host():stream", "adam=host(params=dram,params=cxl):cpu", "adam=:stream", "activations.host=",
		"activations.host=c,x", "adam.grads=device", "adam.grads=device:stream(0)",
		"adam.grads=device:stream(16)", "adam.grads=host:stream", "adam.grads=device:stream(2",
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
	/* a group named twice: the second would silently replace the first */
	ferry_places_default(&p);
	before = p;
	CHECK(ferry_places_parse(" adam=host:cpu , adam=host:stream ", &p) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "adam is named twice") && !memcmp(&p, &before, sizeof(p)),
	      "a group named twice is refused: %s", ferry_last_error());
	CHECK(ferry_places_parse("adam=host:cpu,adam.grads=device:stream(1)", &p) == FERRY_OK,
	      "adam and adam.grads are two: %s", ferry_last_error());
}

/* --host-tier as a shorthand: every kind's tier goes to the group holding
 * that kind's host state (the activations', adam's while it is on the
 * host), all=nvme to those the NVMe tier can hold, and the placements give
 * the spec back. */
static void test_tiers(void)
{
	static const struct {
		enum ferry_optim_place opt;
		const char *spec, *place, *back;
	} cases[] = {
		{ FERRY_OPTIM_STREAM, "all=nvme", "adam=host(params=nvme,optimizer=nvme):stream,activations=everything_saveable,"
		  "activations.host=nvme", "activations=nvme,params=nvme,optimizer=nvme" },
		{ FERRY_OPTIM_CPU, "all=nvme", "adam=host:cpu,activations=everything_saveable,activations.host=nvme",
		  "activations=nvme" },
		{ FERRY_OPTIM_CPU, "optimizer=cxl,grads=node:1,params=cxl", "adam=host(params=cxl,grads=node:1,optimizer=cxl)"
		  ":cpu,activations=everything_saveable", "params=cxl,grads=node:1,optimizer=cxl" },
		{ FERRY_OPTIM_STREAM, "all=dram", "adam=host(dram):stream,activations=everything_saveable,activations.host=dram",
		  "activations=dram,params=dram,grads=dram,optimizer=dram" },
		{ FERRY_OPTIM_DEVICE, "all=dram", "adam=device,activations=everything_saveable,activations.host=dram",
		  "activations=dram" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct ferry_exec_opts o = { .optimizer = cases[i].opt, .host_tier = cases[i].spec }, back = { 0 };
		char place[FERRY_PLACE_CHARS], spec[FERRY_PLACE_CHARS];
		struct ferry_places p, q;

		CHECK(ferry_exec_opts_places(&o, &p) == FERRY_OK && ferry_places_format(&p, place, sizeof(place)) == FERRY_OK &&
		      ferry_places_tier_spec(&p, spec, sizeof(spec)) == FERRY_OK, "--host-tier %s: %s", cases[i].spec,
		      ferry_last_error());
		CHECK(strstr(place, cases[i].place) != NULL, "--host-tier %s: placements %s", cases[i].spec, place);
		CHECK(!strcmp(spec, cases[i].back), "--host-tier %s: written back as %s", cases[i].spec, spec);
		ferry_exec_opts_set_places(&back, &p);
		back.host_tier = spec;
		CHECK(ferry_exec_opts_places(&back, &q) == FERRY_OK && !memcmp(&p, &q, sizeof(p)),
		      "--host-tier %s: placements -> flags -> placements differ", cases[i].spec);
	}
	/* a spec over placements: the kinds it names, the others kept */
	{
		struct ferry_places p;
		char spec[FERRY_PLACE_CHARS];

		ferry_places_default(&p);
		CHECK(ferry_places_parse("adam=host(params=dram):stream,activations.host=cxl", &p) == FERRY_OK &&
		      ferry_places_set_tiers(&p, "optimizer=nvme,activations=node:1") == FERRY_OK &&
		      ferry_places_tier_spec(&p, spec, sizeof(spec)) == FERRY_OK &&
		      !strcmp(spec, "activations=node:1,params=dram,optimizer=nvme"), "set tiers over placements: %s", spec);
		CHECK(ferry_places_set_tiers(&p, "weights=dram") == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "unknown kind 'weights'"), "a bad spec is refused");
	}
}

/* Every shorthand flag combination the table accepts. */
struct flags {
	enum ferry_optim_place opt;
	bool params, embeddings;
	int prefetch;
	enum ferry_clip_order clip;
	int grads_ring; /* --device-grads's D */
};

static const struct flags combos[] = {
	{ FERRY_OPTIM_DEVICE, false, false, 0, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_STREAM, false, false, 0, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_SPECULATIVE, 0 },
	{ FERRY_OPTIM_STREAM, true, false, 0, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_CPU, true, false, 2, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_CPU, true, true, 0, FERRY_CLIP_SPECULATIVE, 0 },
	{ FERRY_OPTIM_STREAM, true, true, 3, FERRY_CLIP_EXACT, 0 },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_EXACT, 1 },
	{ FERRY_OPTIM_CPU, false, false, 0, FERRY_CLIP_SPECULATIVE, 2 },
};

static struct ferry_exec_opts opts_of(const struct flags *f, enum ferry_dtype act)
{
	return (struct ferry_exec_opts){ .policy = "minimal_offloaded", .optimizer = f->opt, .offload_params = f->params,
					 .offload_embeddings = f->embeddings, .param_prefetch = f->prefetch,
					 .clip_order = f->clip, .device_grads = f->grads_ring, .act_dtype = act };
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
	if (e->kind == FERRY_TK_ACTIVATION)
		CHECK(e->group == FERRY_GROUP_ACTIVATIONS, "%s: %s is an activation", what, e->name);
	if (e->kind == FERRY_TK_ACT_GRAD || e->kind == FERRY_TK_BATCH || e->kind == FERRY_TK_WORKSPACE)
		CHECK(e->group == FERRY_GROUP_NONE, "%s: %s is placed by no group", what, e->name);
}

/* Each streamed weight group's ring: there exactly when the group is
 * streamed, its entries on the device and in its group, a layout for the
 * layers (every stacked parameter, each slot within its entries) or one
 * per stage (the unstacked ones). */
static void check_rings(const char *what, const struct ferry_tensor_table *tt)
{
	for (int g = 0; g < FERRY_GROUP_COUNT; g++) {
		const struct ferry_table_ring *r = &tt->ix.ring[g];
		bool weights = g == FERRY_GROUP_LAYER_WEIGHTS || g == FERRY_GROUP_EDGE_WEIGHTS;

		CHECK(!r->slots == !(weights && ferry_table_streamed(tt, g)), "%s: group %d: a ring of %d slots", what, g,
		      r->slots);
		for (int k = 0; k < r->n_layouts; k++)
			for (int q = 0; q < tt->md->n_params; q++) {
				struct ferry_param_info pi;
				int w = r->w[k][q], gr = r->g[k][q];

				CHECK(ferry_model_param_info(&tt->cfg, q, &pi) == FERRY_OK, "%s: parameter %d", what, q);
				if (w < 0) {
					CHECK(gr < 0 && (g != FERRY_GROUP_LAYER_WEIGHTS || !pi.present || !pi.layers),
					      "%s: stacked %s not in the layers' ring", what, pi.name);
					continue;
				}
				CHECK(gr >= 0 && !pi.layers == (g == FERRY_GROUP_EDGE_WEIGHTS),
				      "%s: %s in group %d's ring", what, pi.name, g);
				CHECK(tt->e[w].site == FERRY_SITE_DEVICE && tt->e[gr].site == FERRY_SITE_DEVICE &&
				      tt->e[w].group == g && tt->e[gr].group == g, "%s: %s's ring entries", what, pi.name);
				CHECK((r->off[q] + (size_t)(r->slots - 1) * r->slot_numel + pi.layer_numel) *
					      ferry_dtype_size(tt->e[w].dtype) <= tt->e[w].bytes,
				      "%s: %s's last slot past its entry", what, pi.name);
			}
	}
}

/* The copies for rollback: exactly the speculative placement's, every
 * stacked parameter's master weights and moments, inside a host entry of
 * its own. */
static void check_rollback(const char *what, const struct ferry_tensor_table *tt)
{
	const struct ferry_table_index *ix = &tt->ix;
	bool spec = ferry_table_place(tt, FERRY_GROUP_ADAM)->speculative;

	for (int q = 0; q < tt->md->n_params; q++) {
		struct ferry_param_info pi;
		const int state[3] = { ix->param[q], ix->mom[q], ix->var[q] };

		if (ferry_model_param_info(&tt->cfg, q, &pi) != FERRY_OK || !pi.present)
			continue;
		for (int i = 0; i < 3; i++) {
			const struct ferry_tensor_entry *e = &tt->e[state[i]], *c;

			CHECK((e->rollback >= 0) == (spec && pi.layers), "%s: %s: a copy for rollback %d", what, e->name,
			      e->rollback);
			if (e->rollback < 0)
				continue;
			c = &tt->e[e->rollback];
			CHECK(c->site == FERRY_SITE_HOST && c->buffer != e->buffer && c->group == FERRY_GROUP_ADAM &&
			      e->rollback_off + e->bytes <= c->bytes, "%s: %s's copy for rollback", what, e->name);
		}
	}
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
			check_rings(what, &a);
			check_rollback(what, &a);
			ferry_tensor_table_release(&a);
		}
}

/* One placement's table of test_params_on_host (below), in fp32 or bf16. */
static void params_on_host_table(const struct ferry_model_config *cfg, const char *arch, size_t S, size_t layer,
				 size_t unstacked, const char *place, bool bf16)
{
	const bool stream = strstr(place, "host:stream:") != NULL;
	struct ferry_exec_opts o = { .act_dtype = bf16 ? FERRY_BF16 : FERRY_F32, .place = place };
	const size_t a = bf16 ? 2 : 4;
	struct ferry_tensor_table tt;
	const struct ferry_table_index *ix = &tt.ix;
	size_t most = 0, device_weights = 0;

	if (ferry_tensor_table_build(cfg, 2, 8, &o, &tt)) {
		CHECK(0, "%s %s: parameters split on the host: %s", arch, place, ferry_last_error());
		return;
	}
	for (int q = 0; q < tt.md->n_params; q++) {
		struct ferry_param_info pi;

		if (!ferry_model_param_info(&tt.cfg, q, &pi) && pi.present && pi.layers && pi.layer_numel > most)
			most = pi.layer_numel;
	}
	for (int i = 0; i < tt.n; i++) {
		device_weights += tt.e[i].site == FERRY_SITE_DEVICE && tt.e[i].kind == FERRY_TK_WEIGHT;
		check_entry(arch, &tt, i);
	}
	CHECK(ix->shard_numel == S && ix->param_slice >= 0 && ix->param_slice == ix->host_param_slice &&
	      tt.e[ix->param_slice].site == FERRY_SITE_HOST && tt.e[ix->param_slice].bytes == S * 4 &&
	      (ix->copy_slice == ix->param_slice) == !bf16 && (!bf16 || ix->copy_slice == ix->host_copy_slice) &&
	      tt.e[ix->copy_slice].site == FERRY_SITE_HOST && tt.e[ix->copy_slice].bytes == S * a &&
	      tt.e[ix->copy_slice].dtype == o.act_dtype && !device_weights &&
	      tt.e[ix->param_stage].site == FERRY_SITE_DEVICE &&
	      tt.e[ix->param_stage].bytes == (most < S ? most : S) * a &&
	      tt.buffers[ix->ring[FERRY_GROUP_LAYER_WEIGHTS].buffer].bytes == 2 * layer * a &&
	      tt.buffers[ix->copy_buffer].bytes == unstacked * a &&
	      !ferry_table_streamed(&tt, FERRY_GROUP_LAYER_WEIGHTS) &&
	      (stream ? ix->opt_ring >= 0 && ix->host_grad_slice < 0 &&
			tt.e[ix->opt_ring].bytes == 2 * most * (3 * 4 + (bf16 ? a : 0))
		      : ix->opt_ring < 0 && ix->host_grad_slice >= 0),
	      "%s %s %s: the host's slice of the parameters, a staging slot of %zu, two gathered slots, the "
	      "unstacked whole", arch, place, bf16 ? "bf16" : "fp32", most < S ? most : S);
	ferry_tensor_table_release(&tt);
}

/* ZeRO-3 with the layers' weights on the host and the edges streamed
 * (edges.weights=host:stream, --offload-embeddings), AdamW `adam` (cpu:
 * on host threads; stream: streamed): no unstacked parameters or
 * gradients whole on the device but the edge region, --zero 0's; their
 * gradients whole on the host (`unstacked` elements); the staging slot a
 * layer's part still (the edges pass in pieces); streamed, the optimizer
 * ring in place of the host's slice of the gradients. */
static void edges_gathered_table(const struct ferry_model_config *cfg, const char *arch, size_t S, size_t unstacked,
				 const char *adam)
{
	char z0_place[96], place[96];
	struct ferry_exec_opts o = { .act_dtype = FERRY_F32, .place = z0_place };
	struct ferry_tensor_table z0, tt;
	size_t host_grads = 0, most = 0;
	const bool stream = !strcmp(adam, "stream");

	snprintf(z0_place, sizeof(z0_place), "adam=host:%s,layers.weights=host:stream,edges.weights=host:stream", adam);
	snprintf(place, sizeof(place), "adam=host:%s:shard(3,params),layers.weights=host:stream,"
		 "edges.weights=host:stream", adam);
	if (ferry_tensor_table_build(cfg, 2, 8, &o, &z0)) {
		CHECK(0, "%s: %s: %s", arch, o.place, ferry_last_error());
		return;
	}
	o.place = place;
	if (ferry_tensor_table_build(cfg, 2, 8, &o, &tt)) {
		CHECK(0, "%s: %s: %s", arch, o.place, ferry_last_error());
		ferry_tensor_table_release(&z0);
		return;
	}
	for (int q = 0; q < tt.md->n_params; q++) {
		struct ferry_param_info pi;

		if (tt.ix.grad[q] >= 0 && tt.e[tt.ix.grad[q]].site == FERRY_SITE_HOST)
			host_grads += tt.e[tt.ix.grad[q]].bytes / 4;
		if (!ferry_model_param_info(&tt.cfg, q, &pi) && pi.present && pi.layers && pi.layer_numel > most)
			most = pi.layer_numel;
	}
	for (int i = 0; i < tt.n; i++)
		check_entry(arch, &tt, i);
	CHECK(tt.ix.copy_buffer < 0 && tt.ix.dev_grad_buffer < 0 && tt.ix.ring[FERRY_GROUP_EDGE_WEIGHTS].slots == 1 &&
	      tt.buffers[tt.ix.ring[FERRY_GROUP_EDGE_WEIGHTS].buffer].bytes ==
		      z0.buffers[z0.ix.ring[FERRY_GROUP_EDGE_WEIGHTS].buffer].bytes &&
	      host_grads == unstacked && tt.e[tt.ix.param_stage].bytes == (most < S ? most : S) * 4 &&
	      (stream ? tt.ix.opt_ring >= 0 && tt.ix.host_grad_slice < 0 : tt.ix.opt_ring < 0 && tt.ix.host_grad_slice >= 0),
	      "%s %s: the edges gathered: --zero 0's edge region, %zu unstacked gradients on the host, a staging slot "
	      "of %zu", arch, place, unstacked, most < S ? most : S);
	ferry_tensor_table_release(&tt);
	ferry_tensor_table_release(&z0);
}

static void test_edges_gathered(const struct ferry_model_config *cfg, const char *arch, size_t S, size_t unstacked)
{
	edges_gathered_table(cfg, arch, S, unstacked, "cpu");
	edges_gathered_table(cfg, arch, S, unstacked, "stream");
}

/* ZeRO-3 with the layers' weights on the host (adam=host:cpu:shard(3,
 * params),layers.weights=host:stream), in fp32 and bf16: the slice
 * gathered from is the host's (S elements, as on the device: in fp32 the
 * master slice, in bf16 a slice of the compute copy beside it), the
 * device keeps no weights but the two gathered slots (`layer` elements
 * each), the unstacked ones whole and a slot for the largest layer's part
 * of one parameter (at most S), all in the kernels' type, and the layers
 * are not streamed whole.  With AdamW streamed (adam=host:stream:...) the
 * same, and the optimizer ring in place of the host's slice of the
 * gradients: two slots of the largest layer's part of a parameter, each
 * its master, m and v (and in bf16 the update's bf16 result).  With
 * AdamW on host threads or streamed, --param-prefetch D: D + 1 gathered
 * slots; and the edges sharded too (test_edges_gathered). */
static void test_params_on_host(const struct ferry_model_config *cfg, const char *arch, size_t S, size_t layer,
				size_t unstacked)
{
	static const char cpu[] = "adam=host:cpu:shard(3,params),layers.weights=host:stream",
			  stream[] = "adam=host:stream:shard(3,params),layers.weights=host:stream";

	params_on_host_table(cfg, arch, S, layer, unstacked, cpu, false);
	params_on_host_table(cfg, arch, S, layer, unstacked, cpu, true);
	params_on_host_table(cfg, arch, S, layer, unstacked, stream, false);
	params_on_host_table(cfg, arch, S, layer, unstacked, stream, true);
	for (int k = 0; k < 4; k++) { /* --param-prefetch D: D + 1 gathered slots, at most the layers */
		const int d = k & 1 ? 5 : 2;
		const size_t slots = d + 1 < cfg->layers ? (size_t)d + 1 : (size_t)cfg->layers;
		struct ferry_exec_opts o = { .act_dtype = FERRY_F32 };
		struct ferry_tensor_table tt;
		char place[96];

		snprintf(place, sizeof(place), "adam=host:%s:shard(3,params),layers.weights=host:stream(%d)",
			 k >> 1 ? "stream" : "cpu", d);
		o.place = place;
		if (ferry_tensor_table_build(cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s: %s: %s", arch, place, ferry_last_error());
			continue;
		}
		CHECK(tt.buffers[tt.ix.ring[FERRY_GROUP_LAYER_WEIGHTS].buffer].bytes == slots * layer * 4 &&
		      tt.ix.ring[FERRY_GROUP_LAYER_WEIGHTS].slots == (int)slots && (tt.ix.opt_ring >= 0) == (k >> 1),
		      "%s: %s: %zu gathered slots%s", arch, place, slots, k >> 1 ? ", the optimizer ring" : "");
		ferry_tensor_table_release(&tt);
	}
	test_edges_gathered(cfg, arch, S, unstacked);
}

/* adam=device:shard(3,params) (ZeRO-3), in fp32 and bf16, and with AdamW
 * on host threads: a slice of the parameters (S elements, the fp32
 * master; on the host's side the device's is the compute copy), a slice
 * of the compute copy in the kernels' type (the master's own in fp32),
 * two slots gathered and the unstacked parameters whole in the kernels'
 * type; the gradients fp32 (layer: a slot's elements, unstacked: the
 * unstacked parameters'). */
static void test_param_shard(const struct ferry_model_config *cfg, const char *arch, size_t S, size_t layer,
			     size_t unstacked)
{
	static const char *const place[2] = { "adam=device:shard(3,params)", "adam=host:cpu:shard(3,params)" };

	for (int k = 0; k < 4; k++) {
		const bool bf16 = k & 1, host = k >> 1;
		const size_t a = bf16 ? 2 : 4, master = host ? a : 4;
		struct ferry_exec_opts o = { .act_dtype = bf16 ? FERRY_BF16 : FERRY_F32, .place = place[host] };
		struct ferry_tensor_table tt;
		const struct ferry_table_index *ix = &tt.ix;

		if (ferry_tensor_table_build(cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s %s: parameters split: %s", arch, place[host], ferry_last_error());
			continue;
		}
		CHECK(ix->shard_numel == S && tt.e[ix->param_slice].bytes == S * master && ix->param[0] < 0 &&
		      tt.e[ix->copy_slice].bytes == S * a && (ix->copy_slice == ix->param_slice) == (master == a) &&
		      tt.e[ix->copy_slice].dtype == o.act_dtype &&
		      tt.buffers[ix->ring[FERRY_GROUP_LAYER_WEIGHTS].buffer].bytes == 2 * layer * a &&
		      tt.buffers[ix->copy_buffer].bytes == unstacked * a,
		      "%s %s %s: a slice of the parameters and of their copy, two gathered slots, the unstacked whole",
		      arch, place[host], bf16 ? "bf16" : "fp32");
		CHECK(tt.e[ix->grad_slice].bytes == S * 4 && tt.e[ix->grad_ring].bytes == 2 * layer * 4 &&
		      (!host || tt.e[ix->host_param_slice].bytes == S * 4) &&
		      (!host || !bf16 || tt.e[ix->host_copy_slice].bytes == S * 2),
		      "%s %s %s: fp32 gradients and master", arch, place[host], bf16 ? "bf16" : "fp32");
		for (int i = 0; i < tt.n; i++)
			check_entry(arch, &tt, i);
		ferry_tensor_table_release(&tt);
	}
}

/* adam=device:shard(3,grads): the slices are whole blocks of the norm's
 * sum (n / 256 rounded up each), 3 of them cover the array; the gradients
 * are a slice, two slots of one layer's stacked gradients, and the
 * unstacked ones whole. */
static void test_grad_shard(const struct ferry_model_config *cfg, const char *arch)
{
	struct ferry_exec_opts o = { .act_dtype = FERRY_F32, .place = "adam=device:shard(3,grads)" };
	struct ferry_tensor_table tt;
	size_t block, S, layer = 0, unstacked = 0;

	if (ferry_tensor_table_build(cfg, 2, 8, &o, &tt)) {
		CHECK(0, "%s: gradients split: %s", arch, ferry_last_error());
		return;
	}
	block = (tt.n_params + 255) / 256;
	S = tt.ix.shard_numel;
	for (int q = 0; q < tt.md->n_params; q++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&tt.cfg, q, &pi) || !pi.present)
			continue;
		CHECK(tt.ix.grad[q] < 0, "%s: no whole gradient of %s", arch, pi.name);
		if (pi.layers)
			layer += (pi.layer_numel + 63) / 64 * 64;
		else
			unstacked += pi.numel;
	}
	CHECK(S % block == 0 && 3 * S >= tt.n_params && 3 * (S - block) < tt.n_params &&
	      tt.e[tt.ix.grad_slice].bytes == S * 4 && tt.e[tt.ix.mom_slice].bytes == S * 4,
	      "%s: slices of %zu of %zu elements, blocks of %zu", arch, S, tt.n_params, block);
	CHECK(tt.e[tt.ix.grad_ring].bytes == 2 * layer * 4 && tt.buffers[tt.ix.dev_grad_buffer].bytes == unstacked * 4,
	      "%s: two slots of %zu and %zu unstacked gradient elements", arch, layer, unstacked);
	for (int i = 0; i < tt.n; i++)
		check_entry(arch, &tt, i);
	ferry_tensor_table_release(&tt);
	test_param_shard(cfg, arch, S, layer, unstacked);
	test_params_on_host(cfg, arch, S, layer, unstacked);
}

/* adam=host:cpu:shard(3) with layers.weights=host:stream (ZeRO-1): the
 * parameters (and their bf16 copy) whole on the host, padded to 3 slices,
 * the gradients whole, the moments a slice; (3,grads), ZeRO-2: the
 * gradients a slice, two host slots of a layer's, the unstacked whole.
 * The same with adam=host:stream:shard(3), and the optimizer ring. */
static void test_offloaded_shard(const char *arch)
{
	struct ferry_model_config cfg = { .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .max_seq = 16 };
	static const char *const place[4] = { "adam=host:cpu:shard(3),layers.weights=host:stream",
					      "adam=host:cpu:shard(3,grads),layers.weights=host:stream",
					      "adam=host:stream:shard(3),layers.weights=host:stream",
					      "adam=host:stream:shard(3,grads),layers.weights=host:stream" };

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	for (int k = 0; k < 8; k++) {
		const bool bf16 = k & 1, grads = k & 2, stream = k & 4;
		struct ferry_exec_opts o = { .act_dtype = bf16 ? FERRY_BF16 : FERRY_F32,
					     .optimizer = stream ? FERRY_OPTIM_STREAM : FERRY_OPTIM_CPU, .place = place[k >> 1] };
		struct ferry_tensor_table tt;
		size_t S, n, layer = 0, unstacked = 0;

		if (ferry_tensor_table_build(&cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s: offloaded and split: %s", arch, ferry_last_error());
			continue;
		}
		n = tt.n_params;
		S = tt.ix.shard_numel;
		for (int q = 0; q < tt.md->n_params; q++) {
			struct ferry_param_info pi;

			if (ferry_model_param_info(&tt.cfg, q, &pi) || !pi.present)
				continue;
			if (pi.layers)
				layer += (pi.layer_numel + 63) / 64 * 64;
			else
				unstacked += pi.numel;
		}
		CHECK(3 * S >= n && tt.buffers[tt.ix.params_buffer].bytes == 3 * S * 4 &&
		      tt.buffers[tt.ix.params_buffer].site == FERRY_SITE_HOST &&
		      (!bf16 || tt.buffers[tt.ix.host_copy_buffer].bytes == 3 * S * 2) &&
		      tt.e[tt.ix.mom_slice].bytes == S * 4 && tt.e[tt.ix.var_slice].bytes == S * 4 && tt.ix.mom[0] < 0 &&
		      tt.ix.host_param_slice < 0 && tt.ix.grad_slice < 0,
		      "%s %s: the parameters whole on the host, padded to 3 slices of %zu; the moments a slice", arch,
		      bf16 ? "bf16" : "fp32", S);
		CHECK(grads ? tt.e[tt.ix.host_grad_slice].bytes == S * 4 && tt.e[tt.ix.grad_ring].bytes == 2 * layer * 4 &&
				      tt.e[tt.ix.grad_ring].site == FERRY_SITE_HOST &&
				      tt.buffers[tt.ix.grads_buffer].bytes == unstacked * 4
			    : tt.buffers[tt.ix.grads_buffer].bytes == n * 4 && tt.ix.grad_ring < 0,
		      "%s %s: the gradients %s", arch, bf16 ? "bf16" : "fp32",
		      grads ? "a slice, two host slots and the unstacked whole" : "whole");
		/* streamed: a ring of master, m, v, gradient (and the bf16 copy), two slots of a chunk */
		CHECK(stream ? tt.ix.opt_ring >= 0 && tt.e[tt.ix.opt_ring].bytes == 2 * tt.ix.opt_chunk * (16 + (bf16 ? 2 : 0))
			     : tt.ix.opt_ring < 0,
		      "%s %s: %s", arch, place[k >> 1], stream ? "the optimizer ring" : "no optimizer ring");
		for (int i = 0; i < tt.n; i++)
			check_entry(arch, &tt, i);
		check_rings(arch, &tt);
		ferry_tensor_table_release(&tt);
	}
}

/* ZeRO-3 with the parameters on the host: AdamW on host threads (the
 * gathered ring any depth, the embeddings whole or sharded) or streamed
 * (the gathered ring any depth, the embeddings whole or sharded). */
static void zero3_offloaded_places(void)
{
	static const struct {
		const char *place, *error; /* NULL: accepted */
	} cases[] = {
		{ "adam=host:cpu:shard(2,params),layers.weights=host:stream", NULL },
		{ "adam=host:cpu(speculative):shard(2,params),layers.weights=host:stream", NULL },
		{ "adam=host:cpu:shard(2,params),layers.weights=host:stream,edges.weights=host:stream", NULL },
		{ "adam=host:cpu:shard(2,params),layers.weights=host:stream(3)", NULL },
		{ "adam=host:stream:shard(2,params),layers.weights=host:stream", NULL },
		{ "adam=host:stream:shard(2,params),layers.weights=host:stream,edges.weights=host:stream", NULL },
		{ "adam=host:stream:shard(2,params),layers.weights=host:stream(2)", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ferry_places p;

		ferry_places_default(&p);
		CHECK(ferry_places_parse(cases[i].place, &p) == FERRY_OK, "%s parses", cases[i].place);
		if (cases[i].error)
			CHECK(ferry_places_check(&p) == FERRY_ERR_INVALID && strstr(ferry_last_error(), cases[i].error),
			      "%s: refused (%s)", cases[i].place, ferry_last_error());
		else
			CHECK(ferry_places_check(&p) == FERRY_OK, "%s: accepted (%s)", cases[i].place, ferry_last_error());
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
	test_grad_shard(&cfg, arch);
	ferry_places_default(&p);
	CHECK(ferry_places_parse("adam=device:shard(2)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK, "shard");
	ferry_places_default(&p);
	CHECK(ferry_places_parse("adam=host:cpu:shard(2)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard == 2, "a split optimizer on host threads");
	CHECK(ferry_places_parse("adam=host:stream:shard(2)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard == 2, "a split optimizer streamed from the host");
	CHECK(ferry_places_parse("adam=host:cpu:shard(2,grads)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard_grads && !p.group[FERRY_GROUP_ADAM].shard_params,
	      "ZeRO-2 on host threads");
	CHECK(ferry_places_parse("adam=host:stream:shard(2,grads)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard_grads && !p.group[FERRY_GROUP_ADAM].shard_params, "ZeRO-2 streamed");
	CHECK(ferry_places_parse("adam=host:cpu:shard(2,params)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard_grads && p.group[FERRY_GROUP_ADAM].shard_params,
	      "ZeRO-3 on host threads");
	CHECK(ferry_places_parse("adam=host:stream:shard(2,params)", &p) == FERRY_OK && ferry_places_check(&p) == FERRY_OK &&
	      p.group[FERRY_GROUP_ADAM].shard_grads && p.group[FERRY_GROUP_ADAM].shard_params, "ZeRO-3 streamed");
	CHECK(ferry_places_parse("adam=host:cpu:shard(2),layers.weights=host:stream", &p) == FERRY_OK &&
	      ferry_places_check(&p) == FERRY_OK, "ZeRO-1 on host threads with the parameters offloaded");
	ferry_places_default(&p);
	CHECK(ferry_places_parse("adam=host:stream:shard(2),layers.weights=host:stream", &p) == FERRY_OK &&
	      ferry_places_check(&p) == FERRY_OK, "ZeRO-1 streamed with the parameters offloaded");
	ferry_places_default(&p);
	CHECK(ferry_places_parse("adam=host:stream:shard(2,grads),layers.weights=host:stream", &p) == FERRY_OK &&
	      ferry_places_check(&p) == FERRY_OK, "ZeRO-2 streamed with the parameters offloaded");
	zero3_offloaded_places();
	ferry_places_default(&p);
	for (int z = 2; z <= 3; z++) { /* the device's split with its state moved to the host: streamed */
		char text[FERRY_PLACE_CHARS];

		ferry_places_default(&p);
		CHECK(ferry_places_parse(z == 2 ? "adam=device:shard(2,grads)" : "adam=device:shard(2,params)", &p) ==
		      FERRY_OK, "--zero %d", z);
		p.group[FERRY_GROUP_ADAM].home = FERRY_HOME_HOST;
		CHECK(ferry_places_check(&p) == FERRY_OK && ferry_places_format(&p, text, sizeof(text)) == FERRY_OK &&
		      strstr(text, z == 2 ? "adam=host:stream:shard(2,grads)" : "adam=host:stream:shard(2,params)"),
		      "--zero %d with the optimizer streamed from the host", z);
	}
}

/* Bytes of the table's entries on the host. */
static size_t host_bytes(const struct ferry_tensor_table *tt)
{
	size_t n = 0;

	for (int i = 0; i < tt->n; i++)
		n += tt->e[i].site == FERRY_SITE_HOST ? tt->e[i].bytes : 0;
	return n;
}

/* adam=host:cpu:shard(3): on the host this rank's slice of the master
 * weights, both moments and the gradients (and of the bf16 result, and
 * with the speculative order of their undo copy) and nothing else; on
 * the device the compute copy padded to 3 slices, which the parameters'
 * entries are.  adam=host:stream:shard(3): on the host the slices of the
 * master weights and moments only. */
static void test_host_shard(const char *arch)
{
	struct ferry_model_config cfg = { .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .max_seq = 16 };
	static const char *const place[3] = { "adam=host:cpu:shard(3)", "adam=host:cpu(speculative):shard(3)",
					      "adam=host:stream:shard(3)" };

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	for (int v = 0; v < 6; v++) {
		const bool bf16 = v & 1, spec = v / 2 == 1, stream = v / 2 == 2;
		struct ferry_exec_opts o = { .act_dtype = bf16 ? FERRY_BF16 : FERRY_F32, .place = place[v / 2] };
		const size_t per = stream ? 12 : 16 + (bf16 ? 2 : 0) + (spec ? 12 : 0);
		struct ferry_tensor_table tt;
		size_t S, n;

		if (ferry_tensor_table_build(&cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s: split table on the host: %s", arch, ferry_last_error());
			continue;
		}
		n = tt.n_params;
		S = tt.ix.shard_numel;
		CHECK(S == (n + 2) / 3 && S * 3 >= n && tt.e[tt.ix.host_param_slice].bytes == S * 4 &&
		      tt.e[tt.ix.mom_slice].bytes == S * 4 && tt.e[tt.ix.var_slice].bytes == S * 4 &&
		      (stream || tt.e[tt.ix.host_grad_slice].bytes == S * 4) && tt.ix.mom[0] < 0 && tt.ix.host_grad[0] < 0,
		      "%s: host slices of %zu of %zu elements", arch, S, n);
		CHECK(host_bytes(&tt) == S * per, "%s %s: host bytes %zu, a slice's %zu", arch, place[v / 2],
		      host_bytes(&tt), S * per);
		CHECK(stream == (tt.ix.opt_ring >= 0), "%s %s: an optimizer ring when streamed", arch, place[v / 2]);
		CHECK(tt.buffers[tt.ix.copy_buffer].bytes == 3 * S * (bf16 ? 2 : 4) &&
		      tt.buffers[tt.ix.copy_buffer].site == FERRY_SITE_DEVICE && tt.ix.param[0] == tt.ix.copy[0],
		      "%s: the device's compute copy padded to 3 slices", arch);
		CHECK(!spec || tt.e[tt.ix.host_param_slice].rollback >= 0, "%s: the slice's undo copy", arch);
		for (int i = 0; i < tt.n; i++)
			check_entry(arch, &tt, i);
		ferry_tensor_table_release(&tt);
	}
}

/* adam=host:stream:shard(3,grads) and shard(3,params): on the host this
 * rank's slice of the master weights and both moments and nothing else
 * (S whole blocks of the norm's sum, as ZeRO-2's); on the device ZeRO-2's
 * gradient slice, the optimizer ring and either the compute copy padded to
 * 3 slices (grads) or ZeRO-3's weight slice (params). */
static void test_stream_shard(const char *arch)
{
	struct ferry_model_config cfg = { .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .max_seq = 16 };
	static const char *const place[2] = { "adam=host:stream:shard(3,grads)", "adam=host:stream:shard(3,params)" };

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	for (int v = 0; v < 2; v++) {
		struct ferry_exec_opts o = { .act_dtype = FERRY_F32, .place = place[v] };
		struct ferry_tensor_table tt;
		size_t S, n, block;

		if (ferry_tensor_table_build(&cfg, 2, 8, &o, &tt)) {
			CHECK(0, "%s %s: %s", arch, place[v], ferry_last_error());
			continue;
		}
		n = tt.n_params;
		S = tt.ix.shard_numel;
		block = (n + 255) / 256;
		CHECK(S % block == 0 && 3 * S >= n && 3 * (S - block) < n && host_bytes(&tt) == 12 * S &&
		      tt.e[tt.ix.host_param_slice].bytes == S * 4 && tt.ix.host_grad_slice < 0,
		      "%s %s: host bytes %zu, 12 a slice element (S %zu of %zu)", arch, place[v], host_bytes(&tt), S, n);
		CHECK(tt.ix.opt_ring >= 0 && tt.e[tt.ix.opt_ring].site == FERRY_SITE_DEVICE && tt.ix.grad_slice >= 0 &&
		      tt.e[tt.ix.grad_slice].site == FERRY_SITE_DEVICE && tt.e[tt.ix.grad_slice].bytes == S * 4,
		      "%s %s: the optimizer ring and the gradient slice on the device", arch, place[v]);
		CHECK(v ? tt.ix.param_slice >= 0 && tt.e[tt.ix.param_slice].site == FERRY_SITE_DEVICE &&
			      tt.e[tt.ix.param_slice].bytes == S * 4 && tt.ix.param[0] < 0
			: tt.ix.param_slice < 0 && tt.buffers[tt.ix.copy_buffer].bytes == 3 * S * 4,
		      "%s %s: %s", arch, place[v], v ? "the weights' slice" : "the compute copy padded to 3 slices");
		for (int i = 0; i < tt.n; i++)
			check_entry(arch, &tt, i);
		ferry_tensor_table_release(&tt);
	}
}

int main(void)
{
	test_syntax();
	test_tiers();
	test_tables("gpt2", 0);
	test_tables("llama", 0);
	test_tables("llama", 1);
	test_shard("gpt2");
	test_shard("llama");
	test_offloaded_shard("gpt2");
	test_offloaded_shard("llama");
	test_host_shard("gpt2");
	test_host_shard("llama");
	test_stream_shard("gpt2");
	test_stream_shard("llama");
	return test_exit_code();
}
