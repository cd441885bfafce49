/* STUB: replaced by the real implementation. */
#include <stdio.h>
#include "cli/commands.h"
int loom_cmd_generate(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "loom: error: generate is not implemented yet\n"); return 1; }
