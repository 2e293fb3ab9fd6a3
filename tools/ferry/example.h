/* ferry example's parts (cmd_example.c runs them in order). */
#ifndef FERRY_TOOLS_EXAMPLE_H
#define FERRY_TOOLS_EXAMPLE_H

/* The tutorial's third example (optimizer-state offloading): its memory
 * analysis at the tutorial's size, its steps at dim x dim.  Returns the
 * exit code. */
int example_adam(int dim);

#endif
