#include "interrupt.h"
#include "cli_clock.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t received, deferring, grace_s;
static struct sigaction old_int, old_term, old_alrm;
static bool installed;
static double last_poll, longest_gap;

/* The signal's default action: the handler runs with both signals
 * blocked, so the raised one is delivered, and ends the process, as soon
 * as the handler returns. */
static void end_now(int sig)
{
	signal(sig, SIG_DFL);
	raise(sig);
}

/* No work here: the command looks at the flag between steps, unless it
 * cannot (see interrupt.h). */
static void on_signal(int sig)
{
	if (!deferring || received) {
		end_now(sig);
		return;
	}
	received = sig;
	alarm((unsigned)grace_s);
}

/* The grace ran out: say so (write(2) is safe here, stdio is not) and end. */
static void on_alarm(int sig)
{
	static const char msg[] = "ferry: the step under way did not finish after the signal; "
				  "ended without saving\n";
	ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);

	(void)n;
	(void)sig;
	end_now(received ? received : SIGTERM);
}

void interrupt_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaddset(&sa.sa_mask, SIGALRM);
	/* SA_RESTART: reads and writes in progress carry on */
	sa.sa_flags = SA_RESTART;
	received = 0;
	deferring = 0;
	sigaction(SIGINT, NULL, &old_int);
	if (old_int.sa_handler != SIG_IGN)
		sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, &old_term);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, &old_alrm);
	installed = true;
}

void interrupt_defer(void)
{
	if (deferring)
		return;
	last_poll = cli_now_s();
	longest_gap = 0;
	grace_s = INTERRUPT_FIRST_GRACE_S;
	deferring = 1;
}

int interrupt_poll(void)
{
	double t = cli_now_s();
	int sig = received;

	if (sig) {
		alarm(0);
		return sig;
	}
	if (t - last_poll > longest_gap)
		longest_gap = t - last_poll;
	last_poll = t;
	grace_s = INTERRUPT_GRACE_S + (int)ceil(3 * longest_gap);
	return 0;
}

void interrupt_restore(void)
{
	if (!installed)
		return;
	alarm(0);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGALRM, &old_alrm, NULL);
	deferring = 0;
	installed = false;
}

int interrupt_signal(void)
{
	return received;
}

const char *interrupt_name(int sig)
{
	return sig == SIGINT ? "SIGINT (Ctrl-C)" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
