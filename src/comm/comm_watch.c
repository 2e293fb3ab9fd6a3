/*
 * The collective timeout (ferry_comm_set_timeout): a watchdog thread per
 * watched family of communicators notices a collective that has waited
 * too long, asks the other ranks where they are, and tells the caller who
 * is missing.
 *
 * Each watched communicator has a slot: how many collectives it began and
 * since when the one under way waits (0: none), written by the thread that
 * calls its collectives, read by the watchdog.  Slots are taken lowest
 * first as communicators are made and freed, which every rank does in the
 * same order, so slot s is the same communicator on every rank.  Questions
 * and answers go over a duplicate of their own, never mixed with
 * collectives; every rank's watchdog answers each tick, also when its own
 * collectives are fine, since another rank may be the one waiting.
 *
 * Each tick it also looks at the processes of the ranks on its own
 * machine (pids gathered at the start): one gone without saying bye (a
 * rank ending on purpose does, ferry_comm_watch_bye) was killed, and the
 * job ends with ferry's message naming it before the launcher's own.
 */
#include "comm/comm_impl.h"
#include "core/clock.h"
#include "core/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WATCH_SLOTS 16
#define TICK_NS 100000000LL       /* how often the watchdog looks: 0.1 s */
#define ROLL_CALL_NS 2000000000LL /* how long it waits for answers, at most */
#define ROLL_NAP_NS 10000000LL    /* ... looking every 10 ms */
#define GRACE_NS 5000000000LL     /* the other waiting ranks' pause: the first ends the job */
#define TAG_ASK 0x6601            /* {slot} */
#define TAG_ANSWER 0x6602         /* {slot, started (2 ints), waiting in it} */
#define TAG_BYE 0x6603            /* {rank}: it ends the job on purpose */

struct watch_slot {
	atomic_bool used;
	atomic_llong started; /* collectives begun */
	atomic_llong since;   /* when the one under way began (ns); 0: none */
	_Atomic(const char *) what;
	struct ferry_comm *comm; /* under the lock: to cancel (NCCL's) */
};

struct comm_watch {
	pthread_mutex_t lock; /* taking and leaving slots, refs, fn */
	pthread_t thread;
	atomic_bool stop;
	atomic_llong timeout; /* ns; 0: off */
	ferry_comm_timeout_fn fn;
	void *arg;
	struct ferry_comm *side; /* the questions' and answers' duplicate */
	struct peer *peers;      /* every rank's; NULL: not known */
	bool *bye;               /* [rank]: said it ends on purpose (the watchdog's) */
	pthread_mutex_t send_lock; /* the side's sends: the watchdog's, a bye */
	int refs;                /* communicators watched */
	struct watch_slot slots[WATCH_SLOTS];
};

/* Who a rank is: its machine (a hash of its host name and boot), its
 * process and when that started, so that a peer on the same machine that
 * is gone (killed: SIGKILL, the OOM killer) is seen at the next tick,
 * before the launcher ends the job with a text of its own. */
struct peer {
	uint64_t host;
	long long pid, start;
};

/* Its start time (clock ticks since boot) and state letter, from
 * /proc/PID/stat; -1 when no such process. */
static long long proc_start(long long pid, char *state)
{
	char path[64], buf[1024], *p;
	long long start = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%lld/stat", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	buf[fread(buf, 1, sizeof(buf) - 1, f)] = 0;
	fclose(f);
	/* after the name, which may hold ") ": state, then field 22 */
	if ((p = strrchr(buf, ')')) && p[1] == ' ') {
		*state = p[2];
		p += 2;
		for (int field = 3; field < 22 && p; field++)
			p = strchr(p + 1, ' ');
		if (p)
			start = strtoll(p + 1, NULL, 10);
	}
	return start;
}

static struct peer self_peer(void)
{
	struct peer me = { 0xcbf29ce484222325ull, (long long)getpid(), 0 };
	char name[256] = "", boot[64] = "", state;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f) {
		if (!fgets(boot, sizeof(boot), f))
			boot[0] = 0;
		fclose(f);
	}
	gethostname(name, sizeof(name) - 1);
	for (const char *t = name; *t; t++)
		me.host = (me.host ^ (unsigned char)*t) * 0x100000001b3ull;
	for (const char *t = boot; *t; t++)
		me.host = (me.host ^ (unsigned char)*t) * 0x100000001b3ull;
	me.start = proc_start(me.pid, &state);
	return me;
}

/* What the roll call learnt of one rank. */
enum roll { SILENT, ANSWERED, WAITING_TOO };

static void nap(long long ns)
{
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };

	nanosleep(&ts, NULL);
}

void ferry_comm_watch_begin(struct ferry_comm *c, const char *what)
{
	struct watch_slot *s;

	if (!c->watch)
		return;
	s = &c->watch->slots[c->watch_slot];
	atomic_store(&s->what, what);
	atomic_fetch_add(&s->started, 1);
	atomic_store(&s->since, ferry_now_ns());
}

void ferry_comm_watch_end(struct ferry_comm *c)
{
	if (c->watch)
		atomic_store(&c->watch->slots[c->watch_slot].since, 0);
}

/* c (whose watch is set) takes the lowest free slot; none free: c is not
 * watched. */
void ferry_comm_watch_attach(struct ferry_comm *c)
{
	struct comm_watch *w = c->watch;
	int s = 0;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	while (s < WATCH_SLOTS && atomic_load(&w->slots[s].used))
		s++;
	if (s < WATCH_SLOTS) {
		atomic_store(&w->slots[s].started, 0);
		atomic_store(&w->slots[s].since, 0);
		atomic_store(&w->slots[s].used, true);
		w->slots[s].comm = c;
		w->refs++;
		c->watch_slot = s;
	} else {
		c->watch = NULL;
	}
	pthread_mutex_unlock(&w->lock);
}

void ferry_comm_watch_join(struct ferry_comm *c, struct ferry_comm *base)
{
	c->watch = base->watch;
	ferry_comm_watch_attach(c);
}

/* Ends the collectives under way of the communicators that can (NCCL's,
 * which no abort of the host side's would stop), before fn ends the job. */
static void cancel_all(struct comm_watch *w)
{
	pthread_mutex_lock(&w->lock);
	for (int s = 0; s < WATCH_SLOTS; s++) {
		struct ferry_comm *c = w->slots[s].comm;

		if (atomic_load(&w->slots[s].used) && c && c->iface->cancel)
			c->iface->cancel(c);
	}
	pthread_mutex_unlock(&w->lock);
}

static void say_bye(struct comm_watch *w)
{
	struct ferry_comm *side = w->side;

	/* small: on their way at once (eager), before this rank ends */
	pthread_mutex_lock(&w->send_lock);
	for (int p = 0; p < side->size; p++)
		if (p != side->rank)
			(void)side->iface->send_ints(side, p, TAG_BYE, &side->rank, 1);
	pthread_mutex_unlock(&w->send_lock);
}

/* (A rank ending its watch ends on purpose: the others' must not see a
 * lost peer in its exit.) */
static void watch_free(struct comm_watch *w)
{
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	say_bye(w);
	ferry_comm_free(w->side);
	ferry_free(w->peers);
	ferry_free(w->bye);
	pthread_mutex_destroy(&w->send_lock);
	pthread_mutex_destroy(&w->lock);
	ferry_free(w);
}

void ferry_comm_watch_bye(struct ferry_comm *c)
{
	if (c->watch && c->watch->side)
		say_bye(c->watch);
}

void ferry_comm_watch_detach(struct ferry_comm *c)
{
	struct comm_watch *w = c->watch;
	bool last;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	atomic_store(&w->slots[c->watch_slot].used, false);
	w->slots[c->watch_slot].comm = NULL;
	last = --w->refs == 0;
	pthread_mutex_unlock(&w->lock);
	c->watch = NULL;
	if (last)
		watch_free(w);
}

/* Answers every question that came: where this rank is at the slot asked. */
static void answer(struct comm_watch *w)
{
	struct ferry_comm *side = w->side;
	int q, from;

	while (side->iface->recv_ints(side, TAG_ASK, &q, 1, &from)) {
		int a[4] = { q, -1, -1, 0 };

		if (q >= 0 && q < WATCH_SLOTS && atomic_load(&w->slots[q].used)) {
			unsigned long long k = (unsigned long long)atomic_load(&w->slots[q].started);

			a[1] = (int)(k >> 32);
			a[2] = (int)(unsigned)k;
			a[3] = atomic_load(&w->slots[q].since) != 0;
		}
		pthread_mutex_lock(&w->send_lock);
		(void)side->iface->send_ints(side, from, TAG_ANSWER, a, 4);
		pthread_mutex_unlock(&w->send_lock);
	}
	while (side->iface->recv_ints(side, TAG_BYE, &q, 1, &from))
		if (w->bye && from >= 0 && from < side->size)
			w->bye[from] = true;
}

/* The slot whose collective has waited past the timeout (*waited ns), or -1. */
static int overdue(struct comm_watch *w, long long *waited)
{
	long long timeout = atomic_load(&w->timeout), now = ferry_now_ns();

	for (int s = 0; timeout && s < WATCH_SLOTS; s++) {
		long long since = atomic_load(&w->slots[s].since);

		if (atomic_load(&w->slots[s].used) && since && now - since >= timeout) {
			*waited = now - since;
			return s;
		}
	}
	return -1;
}

/* Asks every other rank where it is at slot s; roll[p] and at[p] (the
 * collectives it began there) for those that answer in time. */
static void roll_call(struct comm_watch *w, int s, enum roll *roll, long long *at)
{
	struct ferry_comm *side = w->side;
	long long wait = atomic_load(&w->timeout), deadline;
	int left = side->size - 1, a[4], from;

	wait = wait && wait < ROLL_CALL_NS ? wait : ROLL_CALL_NS;
	deadline = ferry_now_ns() + wait;
	pthread_mutex_lock(&w->send_lock);
	for (int p = 0; p < side->size; p++)
		if (p != side->rank)
			(void)side->iface->send_ints(side, p, TAG_ASK, &s, 1);
	pthread_mutex_unlock(&w->send_lock);
	while (left > 0 && ferry_now_ns() < deadline && !atomic_load(&w->stop)) {
		answer(w);
		while (side->iface->recv_ints(side, TAG_ANSWER, a, 4, &from))
			if (a[0] == s && from >= 0 && from < side->size && roll[from] == SILENT) {
				at[from] = (long long)(((unsigned long long)(unsigned)a[1] << 32) | (unsigned)a[2]);
				roll[from] = a[3] ? WAITING_TOO : ANSWERED;
				left--;
			}
		nap(ROLL_NAP_NS);
	}
}

/* Appends lead, "rank 1" or "ranks 1, 3" (those `pick` says) and tail to
 * buf at *len; false, appending nothing, when there are none. */
static bool name_ranks(char *buf, size_t n, size_t *len, int size, bool (*pick)(int, const void *), const void *ctx,
		       const char *lead, const char *tail)
{
	int count = 0;

	for (int p = 0; p < size; p++)
		count += pick(p, ctx);
	if (count && *len < n)
		*len += snprintf(buf + *len, n - *len, "%s%s", lead, count > 1 ? "ranks " : "rank ");
	for (int p = 0, i = 0; count && p < size; p++)
		if (pick(p, ctx) && *len < n)
			*len += snprintf(buf + *len, n - *len, "%s%d", i++ ? ", " : "", p);
	if (count && *len < n)
		*len += snprintf(buf + *len, n - *len, "%s", tail);
	return count > 0;
}

struct roll_result {
	const enum roll *roll; /* NULL: no roll call (out of memory) */
	const long long *at;
	long long k;           /* the collective waited in, as this rank counts */
	int me;
};

static bool silent(int p, const void *ctx)
{
	const struct roll_result *r = ctx;

	return r->roll && p != r->me && r->roll[p] == SILENT;
}

static bool behind(int p, const void *ctx)
{
	const struct roll_result *r = ctx;

	return r->roll && p != r->me && r->roll[p] != SILENT && r->at[p] < r->k;
}

/* The message: who did not answer, who did not arrive, and where this
 * rank waits. */
static ferry_status describe(struct comm_watch *w, int s, long long waited, const struct roll_result *r)
{
	char msg[400] = "";
	size_t len = 0;
	bool any = name_ranks(msg, sizeof(msg), &len, w->side->size, silent, r, "", " did not answer");

	any |= name_ranks(msg, sizeof(msg), &len, w->side->size, behind, r, any ? " and " : "", " did not arrive");
	return ferry_error(FERRY_ERR_IO, "%s; rank %d waited %.1f s in collective %lld (%s) of communicator %d",
			   any ? msg : "no other rank known to be missing", r->me, waited * 1e-9, r->k,
			   atomic_load(&w->slots[s].what), s);
}

/* Calls the watch's fn with st (every collective cancelled first): at once
 * where this rank is the first to say it, else after a grace in which the
 * first one may (answering roll calls meanwhile); nothing once stopped. */
static void stop_all(struct comm_watch *w, bool first, ferry_status st)
{
	ferry_comm_timeout_fn fn;
	void *arg;

	for (long long end = ferry_now_ns() + GRACE_NS; !first && ferry_now_ns() < end && !atomic_load(&w->stop);
	     nap(ROLL_NAP_NS))
		answer(w);
	if (atomic_load(&w->stop))
		return;
	pthread_mutex_lock(&w->lock);
	fn = w->fn;
	arg = w->arg;
	pthread_mutex_unlock(&w->lock);
	cancel_all(w);
	fn(arg, st);
}

/* Slot s has waited past the timeout: the roll call, then fn, at once on
 * the lowest rank waiting there too, after a grace on the others. */
static void fire(struct comm_watch *w, int s, long long waited)
{
	int n = w->side->size, first = w->side->rank;
	enum roll *roll = ferry_calloc((size_t)n, sizeof(*roll));
	long long *at = ferry_calloc((size_t)n, sizeof(*at));
	struct roll_result r = { roll && at ? roll : NULL, at, atomic_load(&w->slots[s].started), w->side->rank };
	ferry_status st;

	if (r.roll)
		roll_call(w, s, roll, at);
	for (int p = 0; r.roll && p < first; p++)
		if (roll[p] == WAITING_TOO && at[p] == r.k)
			first = p;
	st = describe(w, s, waited, &r);
	ferry_free(roll);
	ferry_free(at);
	stop_all(w, first == r.me, st);
}

/* A rank on this machine whose process is gone (or a zombie), or -1. */
static int lost_peer(const struct comm_watch *w)
{
	const struct peer *me = w->peers ? &w->peers[w->side->rank] : NULL;

	for (int p = 0; me && me->start >= 0 && p < w->side->size; p++) {
		const struct peer *q = &w->peers[p];
		char state = 'R';
		long long start;

		if (p == w->side->rank || q->host != me->host || q->start < 0 || (w->bye && w->bye[p]))
			continue;
		start = proc_start(q->pid, &state);
		if (start != q->start || state == 'Z' || state == 'X')
			return p;
	}
	return -1;
}

/* Rank p's process is gone: fn at once on the lowest rank of this
 * machine still there, after a grace on the others (each sees it). */
static void fire_lost(struct comm_watch *w, int p)
{
	const struct peer *q = &w->peers[p];
	ferry_status st;
	bool first = true;

	for (int r = 0; r < w->side->rank; r++)
		first &= r == p || w->peers[r].host != w->peers[w->side->rank].host;
	st = ferry_error(FERRY_ERR_IO, "rank %d (process %lld on this machine) ended without a word (killed: "
			 "SIGKILL, the OOM killer?); rank %d saw it", p, q->pid, w->side->rank);
	stop_all(w, first, st);
}

static void *watch_main(void *p)
{
	struct comm_watch *w = p;
	bool fired = false;

	while (!atomic_load(&w->stop)) {
		long long waited = 0;
		int s;

		answer(w);
		if (!fired && (s = lost_peer(w)) >= 0) {
			answer(w); /* a bye sent before it went, read since? */
			if (w->bye && w->bye[s])
				continue;
			fired = true;
			fire_lost(w, s);
		} else if (!fired && (s = overdue(w, &waited)) >= 0) {
			fired = true; /* once: fn ends the job */
			fire(w, s, waited);
		}
		nap(TICK_NS);
	}
	return NULL;
}

/* A watch of c: its questions' duplicate, c's slot, the thread. */
static ferry_status watch_new(struct ferry_comm *c, long long timeout, ferry_comm_timeout_fn fn, void *arg)
{
	struct comm_watch *w = ferry_calloc(1, sizeof(*w));
	ferry_status st;

	if (!w)
		return ferry_error(FERRY_ERR_NOMEM, "collective timeout: out of host memory");
	if ((st = ferry_comm_dup(c, &w->side))) {
		ferry_free(w);
		return st;
	}
	/* every rank's process, for lost_peer (a collective, as the dup is) */
	struct peer me = self_peer();
	int32_t room;

	w->peers = ferry_calloc((size_t)w->side->size, sizeof(*w->peers));
	w->bye = ferry_calloc((size_t)w->side->size, sizeof(*w->bye));
	room = w->peers && w->bye; /* every rank's, or none gathers */
	if (ferry_comm_all_reduce(w->side, &room, 1, FERRY_COMM_I32, FERRY_COMM_MIN, NULL) || !room ||
	    ferry_comm_all_gather(w->side, &me, w->peers, sizeof(me), FERRY_COMM_BYTE, NULL)) {
		ferry_free(w->peers); /* then only the timeout watches */
		w->peers = NULL;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->send_lock, NULL);
	atomic_store(&w->timeout, timeout);
	w->fn = fn;
	w->arg = arg;
	c->watch = w;
	ferry_comm_watch_attach(c);
	if (pthread_create(&w->thread, NULL, watch_main, w)) {
		c->watch = NULL;
		ferry_comm_free(w->side);
		ferry_free(w->peers);
		ferry_free(w->bye);
		pthread_mutex_destroy(&w->send_lock);
		pthread_mutex_destroy(&w->lock);
		ferry_free(w);
		return ferry_error(FERRY_ERR_NOMEM, "collective timeout: cannot start its thread");
	}
	return FERRY_OK;
}

ferry_status ferry_comm_set_timeout(ferry_comm_t c, double seconds, ferry_comm_timeout_fn fn, void *arg)
{
	long long timeout = (long long)(seconds * 1e9);

	if (!c)
		return ferry_error(FERRY_ERR_INVALID, "collective timeout: NULL communicator");
	if (!(seconds >= 0 && seconds <= 1e9))
		return ferry_error(FERRY_ERR_INVALID, "collective timeout of %g s: 0 (off) to 1e9 s", seconds);
	if (seconds > 0 && !fn)
		return ferry_error(FERRY_ERR_INVALID, "collective timeout: no function to call");
	if (seconds > 0 && timeout == 0)
		timeout = 1;
	if (c->watch) {
		pthread_mutex_lock(&c->watch->lock);
		c->watch->fn = fn ? fn : c->watch->fn;
		c->watch->arg = fn ? arg : c->watch->arg;
		pthread_mutex_unlock(&c->watch->lock);
		atomic_store(&c->watch->timeout, timeout);
		return FERRY_OK;
	}
	if (!timeout || c->size == 1 || !c->iface->send_ints)
		return FERRY_OK;
	return watch_new(c, timeout, fn, arg);
}
