/*
 * A calibration as a JSON file (the per-machine cache): written whole or
 * not at all, read back refusing anything made for another machine, by
 * another version, or too long ago; a lock file beside it that one
 * calibration at a time holds from reading the cache to writing it.
 */
#include "cost/calibration.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_NAME "ferry calibration"

static json_t *op_json(const struct ferry_calib_op *o)
{
	return json_pack("{s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:f, s:f}", "op",
			 ferry_op_info(o->kind)->name, "backward", o->backward, "B", o->B, "T", o->T, "C", o->C, "NH",
			 o->NH, "OC", o->OC, "V", o->V, "Vp", o->Vp, "NKV", o->NKV, "n", (json_int_t)o->n, "seconds",
			 o->seconds, "flops", o->flops);
}

static json_t *coll_json(const struct ferry_calibration *c)
{
	json_t *a = json_array();

	for (int i = 0; i < c->n_coll; i++) {
		const struct ferry_calib_coll *e = &c->coll[i];

		json_array_append_new(a, json_pack("{s:s, s:s, s:i, s:I, s:f}", "collective",
						   ferry_calib_coll_name(e->kind), "engine", e->engine, "ranks",
						   e->ranks, "bytes", (json_int_t)e->bytes, "seconds", e->seconds));
	}
	return a;
}

static json_t *comm_step_json(const struct ferry_calibration *c)
{
	json_t *a = json_array();

	for (int i = 0; i < c->n_comm_step; i++)
		json_array_append_new(a, json_pack("{s:s, s:i, s:f, s:f, s:f, s:f}", "engine", c->comm_step[i].engine,
						   "ranks", c->comm_step[i].ranks, "in_step", c->comm_step[i].in_step,
						   "in_step_idle", c->comm_step[i].in_step_idle,
						   "compute_slowdown", c->comm_step[i].compute_slowdown, "skew_s",
						   c->comm_step[i].skew_s));
	return a;
}

static json_t *to_json(const struct ferry_calibration *c)
{
	json_t *ops = json_array(), *copies = json_array(), *cxl = json_array(), *root;

	for (int i = 0; i < c->n_cxl; i++)
		json_array_append_new(cxl, json_pack("{s:i, s:f, s:f}", "node", c->cxl[i].node, "copy_factor",
						     c->cxl[i].copy, "adamw_factor", c->cxl[i].adamw));
	for (int i = 0; i < c->n_ops; i++)
		json_array_append_new(ops, op_json(&c->ops[i]));
	for (int i = 0; i < c->n_copy; i++) {
		const struct ferry_calib_copy *p = &c->copy[i];

		json_array_append_new(copies, json_pack("{s:I, s:f, s:f, s:f, s:f}", "bytes", (json_int_t)p->bytes,
							"d2h_s", p->d2h_s, "h2d_s", p->h2d_s, "d2h_both_s",
							p->d2h_both_s, "h2d_both_s", p->h2d_both_s));
	}
	root = json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:f, s:f, "
			 "s:s, s:s, s:o, s:o}",
			 "format", FORMAT_NAME, "version", c->version, "fingerprint", c->fingerprint, "created",
			 (json_int_t)c->created, "d2d_Bps", c->d2d_Bps, "zero_Bps", c->zero_Bps, "adamw_floats_per_s",
			 c->adamw_floats_per_s, "op_spread", c->op_spread, "others_cpu", c->others_cpu,
			 "copy_compute_slowdown",
			 c->copy_compute_slowdown, "task_gap_s", c->task_gap_s, "step_host_s", c->step_host_s,
			 "in_step_factor", c->in_step_factor, "cxl_copy_factor", c->cxl_copy_factor, "cxl_adamw_factor",
			 c->cxl_adamw_factor, "cxl_nodes", cxl, "nvme_read_Bps", c->nvme_read_Bps, "nvme_write_Bps",
			 c->nvme_write_Bps, "nvme_dir", c->nvme_dir, "nvme_mode", c->nvme_mode, "copies", copies, "ops",
			 ops);
	if (root && (json_object_set_new(root, "collectives", coll_json(c)) != 0 ||
		     json_object_set_new(root, "collective_steps", comm_step_json(c)) != 0)) {
		json_decref(root);
		return NULL;
	}
	return root;
}

/* mkdir -p of path's directory. */
static ferry_status make_dirs(const char *path)
{
	char d[4096];

	if (snprintf(d, sizeof(d), "%s", path) >= (int)sizeof(d))
		return ferry_error(FERRY_ERR_INVALID, "calibration: path too long");
	for (char *p = d + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(d, 0755) != 0 && errno != EEXIST)
			return ferry_error(FERRY_ERR_IO, "cannot make directory %s: %s", d, strerror(errno));
		*p = '/';
	}
	return FERRY_OK;
}

ferry_status ferry_calibration_save(ferry_calibration_t c, const char *path)
{
	char tmp[4200];
	json_t *root;
	ferry_status st;
	int rc;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()) >= sizeof(tmp))
		return ferry_error(FERRY_ERR_INVALID, "calibration: path too long");
	if ((st = make_dirs(path)))
		return st;
	if (!(root = to_json(c)))
		return ferry_error(FERRY_ERR_NOMEM, "calibration: out of host memory");
	rc = json_dump_file(root, tmp, JSON_INDENT(1));
	json_decref(root);
	if (rc != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return ferry_error(FERRY_ERR_IO, "cannot write the calibration to %s", path);
	}
	return FERRY_OK;
}

ferry_status ferry_calibration_lock(const char *path, bool wait, int *fd)
{
	char lock[4200];
	ferry_status st;
	int f, e;

	*fd = -1;
	if ((size_t)snprintf(lock, sizeof(lock), "%s.lock", path) >= sizeof(lock))
		return ferry_error(FERRY_ERR_INVALID, "calibration: path too long");
	if ((st = make_dirs(path)))
		return st;
	f = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (f < 0)
		return ferry_error(FERRY_ERR_IO, "cannot open the calibration lock %s: %s", lock, strerror(errno));
	while (flock(f, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
		if (errno == EINTR)
			continue;
		e = errno;
		close(f);
		if (!wait && e == EWOULDBLOCK)
			return FERRY_OK;
		return ferry_error(FERRY_ERR_IO, "cannot lock the calibration %s: %s", lock, strerror(e));
	}
	*fd = f;
	return FERRY_OK;
}

void ferry_calibration_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* the lock goes with the descriptor */
}

static int op_kind(const char *name)
{
	for (int k = 0; k < FERRY_OP_COUNT; k++)
		if (!strcmp(ferry_op_info((enum ferry_op_kind)k)->name, name))
			return k;
	return -1;
}

/* A figure read from the cache: finite and in [lo, hi], or 0 where zero_ok
 * (not measured).  A cache edited by hand or damaged otherwise predicts
 * negative or infinite step times. */
static ferry_status check_figure(const char *path, const char *name, double v, double lo, double hi,
				 bool zero_ok)
{
	if (isfinite(v) && ((zero_ok && v == 0) || (v >= lo && v <= hi)))
		return FERRY_OK;
	return ferry_error(FERRY_ERR_FORMAT, "calibration %s: %s is %g, not %s%g..%g: run `ferry calibrate` "
			   "again", path, name, v, zero_ok ? "0 or " : "", lo, hi);
}

/* Every figure of the header in its range: rates up to 1e16 a second,
 * times up to an hour, factors of speed 1e-3..1e3. */
static ferry_status check_figures(const struct ferry_calibration *c, const char *path)
{
	const struct {
		const char *name;
		double v, lo, hi;
		bool zero_ok;
	} f[] = {
		{ "d2d_Bps", c->d2d_Bps, 1, 1e16, true },
		{ "zero_Bps", c->zero_Bps, 1, 1e16, true },
		{ "adamw_floats_per_s", c->adamw_floats_per_s, 1, 1e16, true },
		{ "op_spread", c->op_spread, 0, 1e3, false },
		{ "others_cpu", c->others_cpu, 0, 1, false },
		{ "copy_compute_slowdown", c->copy_compute_slowdown, 1e-3, 1e3, true },
		{ "task_gap_s", c->task_gap_s, 0, 3600, false },
		{ "step_host_s", c->step_host_s, 0, 3600, false },
		{ "in_step_factor", c->in_step_factor, 1e-3, 1e3, true },
		{ "cxl_copy_factor", c->cxl_copy_factor, 1e-3, 1e3, true },
		{ "cxl_adamw_factor", c->cxl_adamw_factor, 1e-3, 1e3, true },
		{ "nvme_read_Bps", c->nvme_read_Bps, 1, 1e16, true },
		{ "nvme_write_Bps", c->nvme_write_Bps, 1, 1e16, true },
	};
	ferry_status st = FERRY_OK;

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]) && !st; i++)
		st = check_figure(path, f[i].name, f[i].v, f[i].lo, f[i].hi, f[i].zero_ok);
	return st;
}

/* An op's dimensions: none negative or absurd. */
static bool shape_ok(const struct ferry_calib_op *e)
{
	const int d[] = { e->B, e->T, e->C, e->NH, e->OC, e->V, e->Vp, e->NKV };

	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		if (d[i] < 0 || d[i] > (1 << 28))
			return false;
	return true;
}

/* Entry i of a list ("op", "copy", ...) that cannot be read. */
static ferry_status malformed(const char *path, const char *list, size_t i)
{
	return ferry_error(FERRY_ERR_FORMAT, "calibration %s: %s entry %zu is malformed: run `ferry calibrate` again",
			   path, list, i);
}

static ferry_status read_ops(const json_t *ops, struct ferry_calibration *c, const char *path)
{
	size_t i;
	json_t *o;

	json_array_foreach(ops, i, o) {
		struct ferry_calib_op e;
		const char *name = "";
		int bwd = 0;
		json_int_t n = 0;
		ferry_status st;

		memset(&e, 0, sizeof(e));
		if (json_unpack(o, "{s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:F, s:F}", "op", &name,
				"backward", &bwd, "B", &e.B, "T", &e.T, "C", &e.C, "NH", &e.NH, "OC", &e.OC, "V", &e.V,
				"Vp", &e.Vp, "NKV", &e.NKV, "n", &n, "seconds", &e.seconds, "flops", &e.flops) != 0 ||
		    op_kind(name) < 0 || !shape_ok(&e) || n < 0)
			return malformed(path, "op", i);
		if ((st = check_figure(path, "an op's seconds", e.seconds, 1e-12, 3600, false)) ||
		    (st = check_figure(path, "an op's flops", e.flops, 0, 1e20, false)))
			return st;
		e.kind = (enum ferry_op_kind)op_kind(name);
		e.backward = bwd;
		e.n = (long)n;
		if ((st = ferry_calib_add_op(c, &e)))
			return st;
	}
	return FERRY_OK;
}

static ferry_status read_copies(const json_t *copies, struct ferry_calibration *c, const char *path)
{
	size_t i;
	json_t *o;

	json_array_foreach(copies, i, o) {
		struct ferry_calib_copy p;
		json_int_t b = 0;
		ferry_status st;

		if (json_unpack(o, "{s:I, s:F, s:F, s:F, s:F}", "bytes", &b, "d2h_s", &p.d2h_s, "h2d_s", &p.h2d_s,
				"d2h_both_s", &p.d2h_both_s, "h2d_both_s", &p.h2d_both_s) != 0 || b <= 0)
			return malformed(path, "copy", i);
		if ((st = check_figure(path, "a copy's d2h_s", p.d2h_s, 1e-12, 3600, false)) ||
		    (st = check_figure(path, "a copy's h2d_s", p.h2d_s, 1e-12, 3600, false)) ||
		    (st = check_figure(path, "a copy's d2h_both_s", p.d2h_both_s, 1e-12, 3600, false)) ||
		    (st = check_figure(path, "a copy's h2d_both_s", p.h2d_both_s, 1e-12, 3600, false)))
			return st;
		p.bytes = (size_t)b;
		ferry_calib_add_copy(c, &p);
	}
	return FERRY_OK;
}

/* Each CPU-less node's measured speed (absent: none measured). */
static ferry_status read_cxl(const json_t *nodes, struct ferry_calibration *c, const char *path)
{
	size_t i;
	json_t *o;

	json_array_foreach(nodes, i, o) {
		struct ferry_calib_cxl x;

		if (json_unpack(o, "{s:i, s:F, s:F}", "node", &x.node, "copy_factor", &x.copy, "adamw_factor",
				&x.adamw) != 0 || !isfinite(x.copy) || !isfinite(x.adamw) || x.copy < 1e-3 ||
		    x.copy > 1e3 || x.adamw < 1e-3 || x.adamw > 1e3 || x.node < 0 || x.node > 4095)
			return malformed(path, "cxl_nodes", i);
		if (c->n_cxl < FERRY_CALIB_MAX_CXL)
			c->cxl[c->n_cxl++] = x;
	}
	return FERRY_OK;
}

static int coll_kind(const char *name)
{
	for (int k = 0; k < FERRY_COLL_KINDS; k++)
		if (!strcmp(ferry_calib_coll_name((enum ferry_calib_coll_kind)k), name))
			return k;
	return -1;
}

/* The collectives measured, per engine and ranks (absent: none; a cache
 * from before they were measured). */
static ferry_status read_colls(const json_t *a, struct ferry_calibration *c, const char *path)
{
	size_t i;
	json_t *o;

	json_array_foreach(a, i, o) {
		struct ferry_calib_coll e;
		const char *kind = "", *engine = "";
		json_int_t b = 0;
		ferry_status st;

		memset(&e, 0, sizeof(e));
		if (json_unpack(o, "{s:s, s:s, s:i, s:I, s:F}", "collective", &kind, "engine", &engine, "ranks",
				&e.ranks, "bytes", &b, "seconds", &e.seconds) != 0 || coll_kind(kind) < 0 ||
		    e.ranks < 2 || e.ranks > (1 << 24) || b <= 0 || strlen(engine) >= sizeof(e.engine))
			return malformed(path, "collectives", i);
		if ((st = check_figure(path, "a collective's seconds", e.seconds, 1e-12, 3600, false)))
			return st;
		e.kind = (enum ferry_calib_coll_kind)coll_kind(kind);
		e.bytes = (size_t)b;
		snprintf(e.engine, sizeof(e.engine), "%s", engine);
		ferry_calib_add_coll(c, &e);
	}
	return FERRY_OK;
}

/* The collectives inside steps, per engine and ranks (absent: none;
 * skew_s absent, as calibrations before it wrote: none; in_step_idle
 * absent: 0, in_step's). */
static ferry_status read_comm_steps(const json_t *a, struct ferry_calibration *c, const char *path)
{
	size_t i;
	json_t *o;

	json_array_foreach(a, i, o) {
		struct ferry_calib_comm_step e;
		const char *engine = "";
		ferry_status st;

		memset(&e, 0, sizeof(e));
		if (json_unpack(o, "{s:s, s:i, s:F, s?F, s:F, s?F}", "engine", &engine, "ranks", &e.ranks, "in_step",
				&e.in_step, "in_step_idle", &e.in_step_idle, "compute_slowdown", &e.compute_slowdown,
				"skew_s", &e.skew_s) != 0 ||
		    e.ranks < 2 || e.ranks > (1 << 24) ||
		    strlen(engine) >= sizeof(e.engine))
			return malformed(path, "collective_steps", i);
		if ((st = check_figure(path, "a step's in_step", e.in_step, 1e-3, 1e4, true)) ||
		    (st = check_figure(path, "a step's in_step_idle", e.in_step_idle, 1e-3, 1e4, true)) ||
		    (st = check_figure(path, "a step's compute_slowdown", e.compute_slowdown, 1e-3, 1e3, true)) ||
		    (st = check_figure(path, "a step's skew_s", e.skew_s, 0, 3600, true)))
			return st;
		snprintf(e.engine, sizeof(e.engine), "%s", engine);
		ferry_calib_add_comm_step(c, &e);
	}
	return FERRY_OK;
}

/* The header: refuses what is not for this machine and version, or old
 * (unless it is a record of another machine: any version and age). */
static ferry_status check_header(const json_t *root, const char *fingerprint, bool record,
				 struct ferry_calibration *c, const char *path)
{
	const char *fmt = "", *ver = "", *fp = "", *nvme_dir = "", *nvme_mode = "";
	json_int_t created = 0;
	double age_days;

	if (json_unpack((json_t *)root, "{s:s, s:s, s:s, s:I, s:F, s:F, s:F, s?F, s?F, s?F, s?F, s?F, s?F, s?F, s?F, "
			"s?F, s?F, s?s, s?s}", "format", &fmt, "version", &ver, "fingerprint", &fp, "created", &created,
			"d2d_Bps", &c->d2d_Bps, "zero_Bps", &c->zero_Bps, "adamw_floats_per_s",
			&c->adamw_floats_per_s, "op_spread", &c->op_spread, "others_cpu", &c->others_cpu,
			"copy_compute_slowdown",
			&c->copy_compute_slowdown, "task_gap_s", &c->task_gap_s, "step_host_s", &c->step_host_s,
			"in_step_factor", &c->in_step_factor, "cxl_copy_factor", &c->cxl_copy_factor,
			"cxl_adamw_factor", &c->cxl_adamw_factor, "nvme_read_Bps", &c->nvme_read_Bps,
			"nvme_write_Bps", &c->nvme_write_Bps, "nvme_dir", &nvme_dir, "nvme_mode", &nvme_mode) != 0 ||
	    strcmp(fmt, FORMAT_NAME))
		return ferry_error(FERRY_ERR_FORMAT, "%s is not a ferry calibration: run `ferry calibrate`", path);
	if (!record && strcmp(ver, FERRY_VERSION_STRING))
		return ferry_error(FERRY_ERR_FORMAT, "calibration %s was made by ferry %s, this is %s: stale, run "
				   "`ferry calibrate` again", path, ver, FERRY_VERSION_STRING);
	if (fingerprint && strcmp(fp, fingerprint))
		return ferry_error(FERRY_ERR_FORMAT, "calibration %s was made for another machine or backend (%s), "
				   "this is %s: run `ferry calibrate` here", path, fp, fingerprint);
	age_days = difftime(time(NULL), (time_t)created) / 86400.0;
	if (!record && (age_days > FERRY_CALIBRATION_MAX_AGE_DAYS || age_days < -1))
		return ferry_error(FERRY_ERR_FORMAT, "calibration %s is %.0f days old (at most %d): stale, run "
				   "`ferry calibrate` again", path, age_days, FERRY_CALIBRATION_MAX_AGE_DAYS);
	snprintf(c->version, sizeof(c->version), "%s", ver);
	snprintf(c->fingerprint, sizeof(c->fingerprint), "%s", fp);
	snprintf(c->nvme_dir, sizeof(c->nvme_dir), "%s", nvme_dir);
	snprintf(c->nvme_mode, sizeof(c->nvme_mode), "%s", nvme_mode);
	c->created = (long long)created;
	return check_figures(c, path);
}

/* ops and copies (always written), cxl_nodes, collectives and
 * collective_steps (where there are) are arrays: a string there used to read as no entries. */
static ferry_status check_arrays(const json_t *root, const char *path)
{
	static const char *const names[] = { "ops", "copies", "cxl_nodes", "collectives", "collective_steps" };

	for (int i = 0; i < 5; i++) {
		const json_t *a = json_object_get(root, names[i]);

		if ((a || i < 2) && !json_is_array(a))
			return ferry_error(FERRY_ERR_FORMAT, "calibration %s: \"%s\" is %s, not a list: run `ferry "
					   "calibrate` again", path, names[i], a ? "something else" : "missing");
	}
	return FERRY_OK;
}

/* A calibration from its JSON (root, consumed); path names it in errors. */
static ferry_status from_json(json_t *root, const char *path, const char *fingerprint, bool record,
			      ferry_calibration_t *out)
{
	struct ferry_calibration *c;
	ferry_status st;

	if (!(c = ferry_calib_new())) {
		json_decref(root);
		return ferry_error(FERRY_ERR_NOMEM, "calibration: out of host memory");
	}
	st = check_header(root, fingerprint, record, c, path);
	if (!st)
		st = check_arrays(root, path);
	if (!st)
		st = read_ops(json_object_get(root, "ops"), c, path);
	if (!st)
		st = read_copies(json_object_get(root, "copies"), c, path);
	if (!st)
		st = read_cxl(json_object_get(root, "cxl_nodes"), c, path);
	if (!st)
		st = read_colls(json_object_get(root, "collectives"), c, path);
	if (!st)
		st = read_comm_steps(json_object_get(root, "collective_steps"), c, path);
	json_decref(root);
	if (st)
		ferry_calibration_free(c);
	else
		*out = c;
	return st;
}

ferry_status ferry_calibration_load(const char *path, const char *fingerprint, ferry_calibration_t *out)
{
	json_error_t err;
	json_t *root;

	*out = NULL;
	if (access(path, R_OK) != 0)
		return ferry_error(FERRY_ERR_IO, "no calibration at %s: run `ferry calibrate` first", path);
	if (!(root = json_load_file(path, 0, &err)))
		return ferry_error(FERRY_ERR_FORMAT, "calibration %s: %s (line %d): run `ferry calibrate` again",
				   path, err.text, err.line);
	return from_json(root, path, fingerprint, false, out);
}

char *ferry_calib_to_text(const struct ferry_calibration *c)
{
	json_t *root = to_json(c);
	char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;

	json_decref(root);
	return s;
}

ferry_status ferry_calib_from_text(const char *text, const char *what, ferry_calibration_t *out)
{
	json_error_t err;
	json_t *root = json_loads(text, 0, &err);

	*out = NULL;
	if (!root)
		return ferry_error(FERRY_ERR_FORMAT, "calibration %s: %s", what, err.text);
	return from_json(root, what, NULL, false, out);
}

ferry_status ferry_calib_from_record(json_t *root, const char *what, ferry_calibration_t *out)
{
	*out = NULL;
	return from_json(root, what, NULL, true, out);
}
