/* Ctrl-C (SIGINT) and SIGTERM during long work: the first one only sets a
 * flag that the command checks between steps (finish the step, save, exit
 * 128 + the signal); a second one ends the process at once. */
#ifndef FERRY_TOOLS_INTERRUPT_H
#define FERRY_TOOLS_INTERRUPT_H

/* Installs the handlers.  An inherited "ignore SIGINT" (a background job of
 * a non-interactive shell, nohup) is kept: that SIGINT was not meant for
 * us.  SIGTERM is always caught. */
void interrupt_install(void);
/* Puts the previous dispositions back. */
void interrupt_restore(void);
/* The signal received since interrupt_install (SIGINT, SIGTERM), or 0. */
int interrupt_signal(void);
/* "SIGINT", "SIGTERM". */
const char *interrupt_name(int sig);

#endif
