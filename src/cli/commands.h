/* Subcommands of the loom executable. Each parses its own flags (loom/args.h), returns the
 * process exit code, and prints a one-line "loom: error: ..." for a user's mistake. */
#ifndef LOOM_CLI_COMMANDS_H
#define LOOM_CLI_COMMANDS_H

int loom_cmd_train(int argc, char **argv);
int loom_cmd_samples(int argc, char **argv);
int loom_cmd_preprocess(int argc, char **argv);
int loom_cmd_generate(int argc, char **argv);
int loom_cmd_convert(int argc, char **argv);

#endif
