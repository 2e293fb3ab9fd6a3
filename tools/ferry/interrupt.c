#include "interrupt.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>

static volatile sig_atomic_t received;
static struct sigaction old_int, old_term;
static bool installed;

/* No work here: the command looks at the flag between steps. */
static void on_signal(int sig)
{
	received = sig;
}

void interrupt_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	/* SA_RESETHAND: a second Ctrl-C takes the default action, ending the
	 * process; SA_RESTART: reads and writes in progress carry on */
	sa.sa_flags = SA_RESETHAND | SA_RESTART;
	received = 0;
	sigaction(SIGINT, NULL, &old_int);
	if (old_int.sa_handler != SIG_IGN)
		sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, &old_term);
	installed = true;
}

void interrupt_restore(void)
{
	if (!installed)
		return;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
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
