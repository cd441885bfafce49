/* loom: command-line entry point. `loom <command> [flags]`; `loom <command> --help` lists flags.
 *
 * Before dispatching, main() may replace the process with itself once, so that OpenBLAS loads
 * with AVX-512 matrix kernels (see blas_reexec below). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} g_commands[] = {
    {"train", loom_cmd_train, "train a model (Megatron-LM flags)"},
    {"samples", loom_cmd_samples, "print the samples `loom train` with the same flags would consume, as JSON lines"},
    {"preprocess", loom_cmd_preprocess, "JSON lines -> Megatron indexed dataset (.bin/.idx)"},
    {"generate", loom_cmd_generate, "sample text from a checkpoint"},
    {"convert", loom_cmd_convert, "convert checkpoints between loom and Hugging Face"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: loom <command> [flags]   (loom <command> --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(f, "  %-12s %s\n", g_commands[i].name, g_commands[i].help);
}

/* OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels from the CPU model once, when
 * the library loads, unless OPENBLAS_CORETYPE names them. A version that does not know the CPU
 * falls back to an older family: 0.3.21 on an AVX-512 CPU it cannot name runs the AVX2
 * ("Haswell") sgemm, at about half the speed of its AVX-512 ("SkylakeX") one. The choice cannot
 * be changed after loading, so when
 *   - OPENBLAS_CORETYPE is unset (an explicit choice is always kept),
 *   - LOOM_NO_REEXEC is unset or 0,
 *   - the CPU has AVX-512 F, BW, DQ and VL (what the SkylakeX kernels use), and
 *   - the kernels OpenBLAS loaded are not AVX-512 ones,
 * loom sets OPENBLAS_CORETYPE=SKYLAKEX and executes itself again with the same arguments (same
 * process id, so under mpirun too). The second start finds the variable set and goes on; if the
 * exec fails, the first one goes on with the kernels it has. */
static int core_uses_avx512(const char *core) {
    static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
    char lower[64];
    size_t n = 0;
    for (; core && core[n] && n + 1 < sizeof lower; n++)
        lower[n] = (char)(core[n] >= 'A' && core[n] <= 'Z' ? core[n] - 'A' + 'a' : core[n]);
    lower[n] = '\0';
    for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
        if (strcmp(lower, avx512_cores[i]) == 0) return 1;
    return 0;
}

static void blas_reexec(char **argv) {
#if defined(__x86_64__) && defined(__GNUC__)
    const char *opt_out = getenv("LOOM_NO_REEXEC");
    if (opt_out && *opt_out && strcmp(opt_out, "0") != 0) return;
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
        return;
    if (core_uses_avx512(openblas_get_corename())) return;
    if (setenv("OPENBLAS_CORETYPE", "SKYLAKEX", 1) != 0) return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: leave the environment as it was */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv) {
    blas_reexec(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (strcmp(argv[1], g_commands[i].name) == 0) return g_commands[i].run(argc, argv);
    fprintf(stderr, "loom: error: unknown command '%s'; valid: train, samples, preprocess, generate, convert\n",
            argv[1]);
    return 1;
}
