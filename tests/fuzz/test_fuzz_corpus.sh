#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz built (ASan+UBSan) and run once over each committed corpus:
# every seed, including the inputs of fixed crashes, must pass. Skipped (exit 77) where clang
# cannot link libFuzzer (scripts/setup.sh installs clang and libclang-rt-14-dev).
set -euo pipefail
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${LOOM_BUILD:-$SRC/build}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/t.c"
if ! command -v clang >/dev/null 2>&1 ||
   ! clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1; then
  echo "skipped: no clang/libFuzzer"
  exit 77
fi
FUZZ_NO_INSTALL=1 FUZZ_BUILD="$BUILD/fuzz-build" bash "$SRC/scripts/fuzz.sh" --replay
