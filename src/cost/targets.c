/* Planning targets: another machine's backend, device memory and
 * calibration, for plans made from anywhere (ferry/cost.h). */
#include "cost/calibration.h"
#include "cost/targets.h"
#include "core/error.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

const char *ferry_target_names(void)
{
	static char names[256];

	if (!names[0])
		for (int i = 0; ferry_builtin_targets[i].name; i++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
				 ferry_builtin_targets[i].name);
	return names;
}

/* The backend a bare calibration was measured on: its fingerprint's
 * "backend=NAME;" (ferry_machine_fingerprint). */
static void fingerprint_backend(const char *fp, char *out, size_t n)
{
	const char *b = strstr(fp, "backend=");
	size_t len;

	out[0] = 0;
	if (!b)
		return;
	b += strlen("backend=");
	len = strcspn(b, ";");
	snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), b);
}

/* A target file's object (root, consumed): its fields, then its calibration. */
static ferry_status from_target(json_t *root, const char *what, struct ferry_target *t, ferry_calibration_t *calib)
{
	const char *backend = "", *device = "", *about = "";
	json_int_t mem = 0, host = 0;
	json_t *c = NULL;

	if (json_unpack(root, "{s:s, s:s, s:I, s?I, s:s, s:o}", "backend", &backend, "device", &device, "device_mem",
			&mem, "host_mem", &host, "about", &about, "calibration", &c) != 0 ||
	    mem <= 0 || host < 0 || !backend[0]) {
		json_decref(root);
		return ferry_error(FERRY_ERR_FORMAT, "planning target %s: needs \"backend\", \"device\", a positive "
				   "\"device_mem\", \"about\" and \"calibration\" (src/cost/targets/h100.json shows "
				   "them)", what);
	}
	snprintf(t->backend, sizeof(t->backend), "%s", backend);
	snprintf(t->device, sizeof(t->device), "%s", device);
	snprintf(t->about, sizeof(t->about), "%s", about);
	t->device_mem = (size_t)mem;
	t->host_mem = (size_t)host;
	json_incref(c);
	json_decref(root);
	return ferry_calib_from_record(c, what, calib);
}

static ferry_status from_root(json_t *root, const char *what, struct ferry_target *t, ferry_calibration_t *calib)
{
	const char *format = json_string_value(json_object_get(root, "format"));
	ferry_status st;

	if (format && !strcmp(format, "ferry target"))
		return from_target(root, what, t, calib);
	/* a calibration ferry calibrate saved on that machine */
	if ((st = ferry_calib_from_record(root, what, calib)))
		return st;
	fingerprint_backend((*calib)->fingerprint, t->backend, sizeof(t->backend));
	snprintf(t->device, sizeof(t->device), "the machine of %s", what);
	snprintf(t->about, sizeof(t->about), "%s", (*calib)->fingerprint);
	if (!t->backend[0]) {
		ferry_calibration_free(*calib);
		*calib = NULL;
		return ferry_error(FERRY_ERR_FORMAT, "planning target %s: its fingerprint names no backend", what);
	}
	return FERRY_OK;
}

ferry_status ferry_target_load(const char *name, struct ferry_target *t, ferry_calibration_t *calib)
{
	json_error_t err;
	json_t *root = NULL;

	memset(t, 0, sizeof(*t));
	*calib = NULL;
	snprintf(t->name, sizeof(t->name), "%s", name);
	for (int i = 0; ferry_builtin_targets[i].name; i++)
		if (!strcmp(name, ferry_builtin_targets[i].name)) {
			if (!(root = json_loads(ferry_builtin_targets[i].json, 0, &err)))
				return ferry_error(FERRY_ERR_FORMAT, "built-in target %s: %s (line %d)", name,
						   err.text, err.line);
			return from_root(root, name, t, calib);
		}
	if (!strchr(name, '/') && !strchr(name, '.'))
		return ferry_error(FERRY_ERR_INVALID, "no planning target %s: the built-in ones are %s, or give a "
				   "target or calibration file", name, ferry_target_names());
	if (!(root = json_load_file(name, 0, &err)))
		return ferry_error(err.line > 0 ? FERRY_ERR_FORMAT : FERRY_ERR_IO, "planning target %s: %s%s", name,
				   err.text, err.line > 0 ? "" : " (a built-in name, or a target or calibration file)");
	return from_root(root, name, t, calib);
}
