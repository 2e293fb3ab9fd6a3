/* Ctrl-C (SIGINT) and SIGTERM during long work.  Once the work has said it
 * looks at the flag (interrupt_defer), the first signal only sets it: the
 * command finishes the step, saves and exits 128 + the signal.  A signal
 * before that (setup, the sgemm measurement: nothing would look at the
 * flag), a second signal, or a first one after which the work does not
 * reach interrupt_poll within the grace (a step that cannot finish: a
 * matrix product stuck in a library, a write that blocks) ends the
 * process at once, as the signal's default action would. */
#ifndef FERRY_TOOLS_INTERRUPT_H
#define FERRY_TOOLS_INTERRUPT_H

/* The grace after a first signal: this many seconds, plus three times the
 * longest stretch seen between two interrupt_poll calls. */
#define INTERRUPT_GRACE_S 5
/* ... and before the first poll, when no step has been timed yet. */
#define INTERRUPT_FIRST_GRACE_S 60

/* Installs the handlers, a signal ending the process until
 * interrupt_defer.  An inherited "ignore SIGINT" (a background job of a
 * non-interactive shell, nohup) is kept: that SIGINT was not meant for us.
 * SIGTERM is always caught. */
void interrupt_install(void);
/* From now on the work calls interrupt_poll between its steps, and a first
 * signal waits for it (within the grace). */
void interrupt_defer(void);
/* The work's check between two steps: the signal received (SIGINT,
 * SIGTERM) or 0.  A signal seen here has been noticed: its grace timer
 * stops, and the work may take its time to save. */
int interrupt_poll(void);
/* Puts the previous dispositions back. */
void interrupt_restore(void);
/* The signal received since interrupt_install (SIGINT, SIGTERM), or 0. */
int interrupt_signal(void);
/* "SIGINT", "SIGTERM". */
const char *interrupt_name(int sig);

#endif
