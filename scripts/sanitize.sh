#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (with LeakSanitizer).
#   scripts/sanitize.sh              configure and build build-asan/ (gcc), then run every CTest
#   scripts/sanitize.sh -R REGEX     only the tests matching REGEX (ctest's -R)
# Environment:
#   SAN_BUILD   build directory (default build-asan)
#   SAN_JOBS    parallel build and test jobs (default 2)
#   CC          compiler (default gcc; clang works too)
# Any sanitizer report aborts the process that made it (halt_on_error, -fno-sanitize-recover),
# so it fails the test that ran it; the report is in the test's output (ctest --output-on-failure).
# Left out: fuzz/test_fuzz_corpus (it builds its own ASan+UBSan targets with clang: running it
# here would only build them a second time). Ranks started by mpirun run without LeakSanitizer
# (through Open MPI's mca_base_env_list): Open MPI keeps thousands of allocations until exit from
# plugins built without frame pointers, which LeakSanitizer can neither attribute nor suppress;
# ASan's memory errors and UBSan stay on there, and every process not under mpirun (the
# single-rank runs, the tools, the test programs) is leak-checked. Allocations that libraries
# outside loom (Open MPI's) keep until exit are suppressed in tests/sanitize/lsan.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${SAN_BUILD:-build-asan}
JOBS=${SAN_JOBS:-2}
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
CC=${CC:-gcc} cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF \
  -DLOOM_NATIVE=OFF -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log" >&2; exit 1; }
rm -f "$BUILD.configure.log"
cmake --build "$BUILD" -j"$JOBS" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:halt_on_error=1:detect_stack_use_after_return=0:check_initialization_order=1:strict_string_checks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/tests/sanitize/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}"
select=()
if [ "${1:-}" = "-R" ]; then select=(-R "$2"); fi
ctest --test-dir "$BUILD" -j"$JOBS" --output-on-failure -E '^fuzz/' "${select[@]}" \
  --timeout 1800
