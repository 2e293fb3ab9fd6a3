/*
 * The cost model on packed documents (issue 38 item 4): a step on rows of
 * documents of D tokens prices attention by the pairs scored within each
 * document, not by a row's whole causal triangle.  On a calibration made by
 * hand where attention is the only op with a time (priced by its FLOPs,
 * no gaps), the predicted compute of a step, and one layer's forward and
 * backward as --prefetch-depth auto counts them, are the whole-row ones
 * times pairs(D) / pairs(T), so they fall as documents shorten; documents
 * of a row's length, or no length given, or token streams price as
 * before.
 */
#include "ferry/cost.h"
#include "ferry/model.h"
#include "cost/calibration.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

enum { B = 2, T = 64, L = 4 };

static struct ferry_model_config cfg = { .arch = "llama", .max_seq = T, .vocab = 67, .layers = L, .heads = 4,
					 .kv_heads = 2, .channels = 32, .ffn = 48 };

/* Causal pairs of a row of T tokens cut into documents of d. */
static double row_pairs(int d)
{
	const double k = T / d, r = T % d;

	return k * d * (d + 1) / 2 + r * (r + 1) / 2;
}

static struct ferry_calibration *attention_only(void)
{
	struct ferry_calibration *c = ferry_calib_new();

	CHECK(c != NULL, "calibration");
	if (!c)
		exit(test_exit_code());
	for (int bwd = 0; bwd < 2; bwd++) {
		struct ferry_op_call k = { .kind = FERRY_OP_ATTENTION, .backward = bwd, .B = 1, .T = 8, .C = 32, .NH = 4,
					   .NKV = 2 };
		struct ferry_calib_op e = { .kind = k.kind, .backward = bwd, .B = 1, .T = 8, .C = 32, .NH = 4, .NKV = 2,
					    .seconds = 1e-3, .flops = ferry_op_flops(&k) };

		CHECK(ferry_calib_add_op(c, &e) == FERRY_OK, "add op");
	}
	return c;
}

static struct ferry_exec_opts opts(bool packed, int doc)
{
	return (struct ferry_exec_opts){ .policy = "custom:decoder_layer_input=offload", .prefetch_depth = 1,
					 .packed = packed, .doc_tokens = doc };
}

static double compute(const struct ferry_calibration *c, bool packed, int doc)
{
	struct ferry_exec_opts o = opts(packed, doc);
	struct ferry_prediction p;

	CHECK(ferry_model_predict(&cfg, B, T, &o, (ferry_calibration_t)c, &p) == FERRY_OK, "predict: %s",
	      ferry_last_error());
	return p.compute_s;
}

static struct ferry_prefetch_choice layer(const struct ferry_calibration *c, int doc)
{
	struct ferry_exec_opts o = opts(true, doc);
	struct ferry_prefetch_choice ch;

	CHECK(ferry_prefetch_auto(&cfg, B, T, &o, (ferry_calibration_t)c, 0, &ch) == FERRY_OK, "prefetch auto: %s",
	      ferry_last_error());
	return ch;
}

int main(void)
{
	struct ferry_calibration *c;
	double stream, whole, rows, prev;
	struct ferry_prefetch_choice lw;

	CHECK(ferry_model_config_complete(&cfg) == FERRY_OK, "config");
	c = attention_only();
	stream = compute(c, false, 0);
	whole = compute(c, true, 0);
	rows = compute(c, true, T);
	CHECK(stream > 0 && whole == stream && rows == stream && compute(c, false, 8) == stream,
	      "whole rows, documents of T, a stream (given a length or not): %g %g %g s", whole, rows, stream);
	prev = whole;
	lw = layer(c, 0);
	for (int d = 32; d >= 1; d /= 2) {
		const double got = compute(c, true, d), want = whole * row_pairs(d) / row_pairs(T);
		struct ferry_prefetch_choice ld = layer(c, d);

		CHECK(got < prev && fabs(got - want) <= 1e-12 * want, "documents of %d: %.9g s, want %.9g s", d, got,
		      want);
		CHECK(fabs(ld.forward_s - lw.forward_s * row_pairs(d) / row_pairs(T)) <= 1e-12 * lw.forward_s &&
			      fabs(ld.backward_s - lw.backward_s * row_pairs(d) / row_pairs(T)) <= 1e-12 * lw.backward_s,
		      "documents of %d: a layer %g / %g s forward / backward against %g / %g s whole rows", d,
		      ld.forward_s, ld.backward_s, lw.forward_s, lw.backward_s);
		prev = got;
	}
	/* a length that does not divide T: its last document shorter */
	CHECK(fabs(compute(c, true, 24) - whole * row_pairs(24) / row_pairs(T)) <= 1e-12 * whole, "documents of 24");
	ferry_calibration_free(c);
	return test_exit_code();
}
