/* loom: command-line entry point. `loom <command> [flags]`; `loom <command> --help` lists flags. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} g_commands[] = {
    {"train", loom_cmd_train, "train a model (Megatron-LM flags)"},
    {"preprocess", loom_cmd_preprocess, "JSON lines -> Megatron indexed dataset (.bin/.idx)"},
    {"generate", loom_cmd_generate, "sample text from a checkpoint"},
    {"convert", loom_cmd_convert, "convert checkpoints between loom and Hugging Face"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: loom <command> [flags]   (loom <command> --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(f, "  %-12s %s\n", g_commands[i].name, g_commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (strcmp(argv[1], g_commands[i].name) == 0) return g_commands[i].run(argc, argv);
    fprintf(stderr, "loom: error: unknown command '%s'; valid: train, preprocess, generate, convert\n",
            argv[1]);
    return 1;
}
