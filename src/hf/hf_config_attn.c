/*
 * config.json's keys that say how each layer attends, for the reader and
 * the writer of hf_config.c: the sliding window and the layers it acts on,
 * and Gemma 2's score scale and soft caps.  A family (struct
 * ferry_hf_family) says which of them it has and their defaults:
 *
 *   - a window that acts whenever set (Mistral on every layer, Gemma 2 on
 *     the layers whose index is a multiple of window_layers_every), its
 *     sliding_window the class's default when absent and none when null;
 *   - a gated window (Qwen2): sliding_window acts only with
 *     use_sliding_window true, and then on layers from max_window_layers;
 *   - layer_types (transformers' per-layer list), accepted where it says
 *     what the family's rule gives: sliding_attention where the window may
 *     act, full_attention where it does not;
 *   - query_pre_attn_scalar, attn_logit_softcapping and
 *     final_logit_softcapping (null: no cap) where the family has them.
 *
 * A key a family does not have is refused by name, as hf_config.c refuses
 * every key it does not know.
 */
#include "hf/hf_config_internal.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

#define MAX_WINDOW (1 << 24) /* what the attention op's float constant holds exactly */

/* A window that acts whenever it is set (no use_sliding_window). */
static bool always_windowed(const struct ferry_hf_family *f)
{
	return f->sliding_window > 0 && !f->gated_sliding_window;
}

/* Whether the family's window may act on layer l (it may still be none). */
static bool window_layer(const struct ferry_hf_family *f, const struct ferry_hf_config *c, int l)
{
	if (f->sliding_window <= 0 || (f->gated_sliding_window && l < c->max_window_layers))
		return false;
	if (f->sliding_window_pattern > 1 && (l + 1) % f->sliding_window_pattern == 0)
		return false;
	return f->window_layers_every <= 1 || l % f->window_layers_every == 0;
}

/* "every layer", "the layers whose index is a multiple of 2" */
static const char *window_layers_text(const struct ferry_hf_family *f, char *buf, size_t n)
{
	if (f->sliding_window_pattern > 1)
		snprintf(buf, n, "every layer but each %d-th", f->sliding_window_pattern);
	else if (f->window_layers_every <= 1)
		snprintf(buf, n, "every layer");
	else
		snprintf(buf, n, "the layers whose index is a multiple of %d", f->window_layers_every);
	return buf;
}

/* ---- reading ------------------------------------------------------------------- */

/* An integer in [lo, MAX_WINDOW] at key (a number with no fraction). */
static ferry_status read_count(json_t *j, const char *path, const char *key, int lo, int *out)
{
	char d[64];

	if (!json_is_number(j) || json_number_value(j) < lo || json_number_value(j) > MAX_WINDOW ||
	    json_number_value(j) != floor(json_number_value(j)))
		return ferry_error(FERRY_ERR_FORMAT, "%s: %s must be an integer from %d to %d, not %s", path, key, lo,
				   MAX_WINDOW, ferry_hfc_describe(j, d, sizeof(d)));
	*out = (int)json_number_value(j);
	return FERRY_OK;
}

/* sliding_window: the class's default when absent, none when null or,
 * gated, while use_sliding_window is not true; then max_window_layers. */
static ferry_status read_window(json_t *root, const char *path, const struct ferry_hf_family *f,
				struct ferry_hf_config *c)
{
	json_t *j = json_object_get(root, "sliding_window"), *from = ferry_hfc_get(root, "max_window_layers");
	ferry_status st;

	c->sliding_window = c->max_window_layers = 0;
	if (f->sliding_window <= 0 || json_is_null(j) ||
	    (f->gated_sliding_window && !json_is_true(ferry_hfc_get(root, "use_sliding_window"))))
		return FERRY_OK;
	c->sliding_window = f->sliding_window;
	if (j && (st = read_count(j, path, "sliding_window", 1, &c->sliding_window)))
		return st;
	if (!f->gated_sliding_window)
		return FERRY_OK;
	c->max_window_layers = f->max_window_layers;
	return from ? read_count(from, path, "max_window_layers", 0, &c->max_window_layers) : FERRY_OK;
}

/* A soft cap: the class's default when absent, none (0) when null. */
static ferry_status read_cap(json_t *root, const char *path, const char *key, double def, double *out)
{
	json_t *j = json_object_get(root, key);
	char d[64];

	*out = !j ? def : 0.0;
	if (!j || json_is_null(j))
		return FERRY_OK;
	if (!json_is_number(j) || !(json_number_value(j) > 0) || !isfinite(json_number_value(j)))
		return ferry_error(FERRY_ERR_FORMAT, "%s: %s must be null or a positive number, not %s", path, key,
				   ferry_hfc_describe(j, d, sizeof(d)));
	*out = json_number_value(j);
	return FERRY_OK;
}

ferry_status ferry_hfc_read_attention(json_t *root, const char *path, const struct ferry_hf_family *f,
				      struct ferry_hf_config *c)
{
	json_t *j = ferry_hfc_get(root, "query_pre_attn_scalar");
	ferry_status st;

	c->query_pre_attn_scalar = 0;
	c->attn_logit_softcapping = c->final_logit_softcapping = 0.0;
	if ((st = read_window(root, path, f, c)))
		return st;
	if (f->query_pre_attn_scalar > 0) {
		c->query_pre_attn_scalar = f->query_pre_attn_scalar;
		if (j && (st = read_count(j, path, "query_pre_attn_scalar", 1, &c->query_pre_attn_scalar)))
			return st;
	}
	if (f->attn_logit_softcapping > 0 &&
	    (st = read_cap(root, path, "attn_logit_softcapping", f->attn_logit_softcapping,
			   &c->attn_logit_softcapping)))
		return st;
	if (f->final_logit_softcapping > 0) /* Gemma 4's: none when absent (the class's None) */
		return read_cap(root, path, "final_logit_softcapping", f->gemma4_keys ? 0.0 : f->final_logit_softcapping,
				&c->final_logit_softcapping);
	return FERRY_OK;
}

/* ---- every key accounted for ------------------------------------------------------ */

/* layer_types: one entry per layer, each what the family's rule gives
 * there (sliding_attention where the window may act: with none, or a gated
 * family's unset one, every layer attends fully). */
static ferry_status check_layer_types(const char *path, const struct ferry_hf_family *f,
				      const struct ferry_hf_config *c, json_t *v)
{
	char d[64];

	for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
		const char *s = json_string_value(json_array_get(v, i));
		const bool may = window_layer(f, c, (int)i) && (c->sliding_window || !f->gated_sliding_window);
		const bool must = window_layer(f, c, (int)i) && c->sliding_window;

		if (!s || ((strcmp(s, "full_attention") || must) && (strcmp(s, "sliding_attention") || !may)))
			return ferry_error(FERRY_ERR_UNSUPPORTED,
					   "%s: layer_types[%zu] %s is not supported (ferry's %s has %s there)", path,
					   i, ferry_hfc_describe(json_array_get(v, i), d, sizeof(d)), f->title,
					   must ? "sliding_attention" : "full_attention");
	}
	if (!json_is_array(v) || json_array_size(v) != (size_t)c->num_hidden_layers)
		return ferry_error(FERRY_ERR_FORMAT, "%s: layer_types must list num_hidden_layers (%d) entries, "
				   "not %s", path, c->num_hidden_layers, ferry_hfc_describe(v, d, sizeof(d)));
	return FERRY_OK;
}

/* The window's keys: sliding_window, use_sliding_window, max_window_layers. */
static ferry_status check_window_key(json_t *root, const char *path, const struct ferry_hf_family *f,
				     const char *key, json_t *v)
{
	const bool gate_open = json_is_true(ferry_hfc_get(root, "use_sliding_window"));
	char d[64], text[80];

	if (!strcmp(key, "use_sliding_window") && (f->gated_sliding_window ? json_is_boolean(v) : json_is_false(v)))
		return FERRY_OK;
	if (!strcmp(key, "sliding_window") && f->sliding_window > 0)
		return FERRY_OK; /* read_window's */
	if (!strcmp(key, "max_window_layers") && f->gated_sliding_window)
		return FERRY_OK; /* read_window's, or unused while use_sliding_window is false */
	if (!strcmp(key, "max_window_layers") && always_windowed(f))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: max_window_layers is not a field of %s (its window "
				   "acts on %s)", path, f->architecture, window_layers_text(f, text, sizeof(text)));
	if (f->gated_sliding_window && !gate_open && strcmp(key, "use_sliding_window"))
		return FERRY_OK; /* no window while use_sliding_window is false */
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not supported (sliding-window attention: %s)",
			   path, key, ferry_hfc_describe(v, d, sizeof(d)),
			   f->sliding_window > 0 ? "a window acts whenever sliding_window sets one"
						 : "ferry's attention is full");
}

/* Gemma 3's sliding_window_pattern: the family's (every 6th layer full). */
static ferry_status check_pattern(const char *path, const struct ferry_hf_family *f, const char *key, json_t *v)
{
	char d[64];

	if (f->sliding_window_pattern > 1 && json_is_integer(v) && json_integer_value(v) == f->sliding_window_pattern)
		return FERRY_OK;
	if (f->sliding_window_pattern > 1)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s %s is not supported (ferry's %s attends fully on every "
				   "%d-th layer)", path, key, ferry_hfc_describe(v, d, sizeof(d)), f->title,
				   f->sliding_window_pattern);
	return ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s is not a field of %s", path, key, f->architecture);
}

bool ferry_hfc_attention_key(json_t *root, const char *path, const struct ferry_hf_family *f,
			     const struct ferry_hf_config *c, const char *key, json_t *v, ferry_status *st)
{
	const bool scale = !strcmp(key, "query_pre_attn_scalar");
	const bool cap = !strcmp(key, "attn_logit_softcapping") || !strcmp(key, "final_logit_softcapping");
	const bool has = scale ? f->query_pre_attn_scalar > 0
			       : !strcmp(key, "attn_logit_softcapping") ? f->attn_logit_softcapping > 0
									: f->final_logit_softcapping > 0;

	if (!strcmp(key, "layer_types"))
		*st = check_layer_types(path, f, c, v);
	else if (!strcmp(key, "sliding_window_pattern") || !strcmp(key, "_sliding_window_pattern"))
		*st = check_pattern(path, f, key, v);
	else if (!strcmp(key, "sliding_window") || !strcmp(key, "use_sliding_window") ||
		 !strcmp(key, "max_window_layers"))
		*st = check_window_key(root, path, f, key, v);
	else if (scale || cap)
		*st = has ? FERRY_OK
			      : ferry_error(FERRY_ERR_UNSUPPORTED, "%s: %s is not a field of %s (ferry's %s has no "
					    "%s)", path, key, f->architecture, f->title,
					    scale ? "such scale" : "soft-capping");
	else
		return false;
	return true;
}

/* ---- writing ----------------------------------------------------------------------- */

ferry_status ferry_hfc_check_attention(const struct ferry_hf_config *c, const struct ferry_hf_family *f,
				       const char *path)
{
	const bool caps = f->attn_logit_softcapping > 0, final = f->final_logit_softcapping > 0;

	if (c->sliding_window < 0 || c->sliding_window > MAX_WINDOW || (c->sliding_window && f->sliding_window <= 0))
		return ferry_error(FERRY_ERR_INVALID, "%s: sliding_window %d: %s", path, c->sliding_window,
				   f->sliding_window > 0 ? "out of range" : "the family has no window");
	if (c->max_window_layers < 0 || c->max_window_layers > MAX_WINDOW ||
	    (c->max_window_layers && !f->gated_sliding_window))
		return ferry_error(FERRY_ERR_INVALID, "%s: max_window_layers %d: %s", path, c->max_window_layers,
				   f->gated_sliding_window ? "out of range" : "not a field of the family");
	if (f->rope_local_base_freq > 0 ? !(c->rope_local_base_freq > 0) || !isfinite(c->rope_local_base_freq)
					: c->rope_local_base_freq != 0)
		return ferry_error(FERRY_ERR_INVALID, "%s: rope_local_base_freq %g: %s", path, c->rope_local_base_freq,
				   f->rope_local_base_freq > 0 ? "not a positive number" : "not a field of the family");
	if (f->gemma4_keys ? c->query_pre_attn_scalar != 1 /* unscaled scores: no such key */
	    : f->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar <= 0 || c->query_pre_attn_scalar > MAX_WINDOW
					 : c->query_pre_attn_scalar != 0)
		return ferry_error(FERRY_ERR_INVALID, "%s: query_pre_attn_scalar %d: %s", path,
				   c->query_pre_attn_scalar, f->query_pre_attn_scalar > 0 ? "out of range"
											  : "not a field of the family");
	if ((caps ? !(c->attn_logit_softcapping >= 0) || !isfinite(c->attn_logit_softcapping)
		  : c->attn_logit_softcapping != 0) ||
	    (final ? !(c->final_logit_softcapping >= 0) || !isfinite(c->final_logit_softcapping)
		   : c->final_logit_softcapping != 0))
		return ferry_error(FERRY_ERR_INVALID, "%s: soft caps %g and %g: %s", path, c->attn_logit_softcapping,
				   c->final_logit_softcapping, caps ? "not finite and >= 0" : "the family has none");
	return FERRY_OK;
}

/* value, or null for 0 (none) */
static json_t *or_null(json_t *value, bool set)
{
	if (set)
		return value;
	json_decref(value);
	return json_null();
}

int ferry_hfc_set_attention(json_t *root, const struct ferry_hf_family *f, const struct ferry_hf_config *c)
{
	const bool caps = f->attn_logit_softcapping > 0;
	int bad = 0;

	if (f->gated_sliding_window) {
		bad = json_object_set_new(root, "use_sliding_window", json_boolean(c->sliding_window > 0));
		if (c->sliding_window > 0)
			bad = bad || json_object_set_new(root, "sliding_window", json_integer(c->sliding_window)) ||
			      json_object_set_new(root, "max_window_layers", json_integer(c->max_window_layers));
	} else if (f->sliding_window > 0) {
		bad = json_object_set_new(root, "sliding_window",
					  or_null(json_integer(c->sliding_window), c->sliding_window > 0));
	}
	if (f->query_pre_attn_scalar > 0)
		bad = bad || json_object_set_new(root, "query_pre_attn_scalar", json_integer(c->query_pre_attn_scalar));
	if (caps)
		bad = bad ||
		      json_object_set_new(root, "attn_logit_softcapping",
					  or_null(json_real(c->attn_logit_softcapping), c->attn_logit_softcapping > 0));
	if (f->final_logit_softcapping > 0)
		bad = bad ||
		      json_object_set_new(root, "final_logit_softcapping",
					  or_null(json_real(c->final_logit_softcapping), c->final_logit_softcapping > 0));
	return bad;
}
