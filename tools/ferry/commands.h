/* The ferry CLI's subcommands.  Each gets argv with argv[0] = its own name,
 * prints errors as "ferry <cmd>: <message>" on stderr, and returns the
 * process exit code: 0 ok, 1 failure, 2 usage error. */
#ifndef FERRY_TOOLS_COMMANDS_H
#define FERRY_TOOLS_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_example(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);

#endif
