#!/usr/bin/env bash
# Fuzzing loom's file parsers with libFuzzer (clang, ASan+UBSan): the targets of tests/fuzz.
#   scripts/fuzz.sh                 build, then fuzz each target for FUZZ_SECONDS (default 60)
#   scripts/fuzz.sh --replay        build, then run each target over its corpus once (seconds)
#   scripts/fuzz.sh [--replay] T..  only the targets T (fuzz_safetensors ...)
# Environment:
#   FUZZ_SECONDS   seconds per target when fuzzing (default 60)
#   FUZZ_TIMEOUT   seconds one input may take before it counts as a hang (default 10)
#   FUZZ_BUILD     build directory (default build-fuzz)
#   FUZZ_JOBS      parallel build jobs (default 2)
#   FUZZ_NO_INSTALL=1  do not apt-get what is missing (fail instead)
# Packages (Debian 12), installed with apt-get when missing and running as root:
#   FUZZ_PKGS: clang (the compiler), libclang-rt-14-dev (libFuzzer and the sanitizer runtimes),
#   plus the build dependencies of scripts/setup.sh.
# Corpora: tests/fuzz/corpus/<target>/ (committed seeds). New inputs found while fuzzing go to
# $FUZZ_BUILD/corpus/<target>/ (not committed); crashes, leaks and hangs to
# $FUZZ_BUILD/artifacts/<target>/. Any of them makes the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
FUZZ_PKGS="clang libclang-rt-14-dev"
SECONDS_PER=${FUZZ_SECONDS:-60}
TIMEOUT=${FUZZ_TIMEOUT:-10}
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-2}
replay=0
if [ "${1:-}" = "--replay" ]; then replay=1; shift; fi

# clang with libFuzzer: a one-line target must link
have_libfuzzer() {
  command -v clang >/dev/null 2>&1 || return 1
  local d
  d=$(mktemp -d)
  printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/t.c"
  clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$d"
  return $rc
}
if ! have_libfuzzer; then
  if [ "${FUZZ_NO_INSTALL:-0}" = 1 ] || [ "$(id -u)" != 0 ]; then
    echo "fuzz: clang with libFuzzer is missing (apt-get install $FUZZ_PKGS)" >&2
    exit 1
  fi
  echo "fuzz: installing $FUZZ_PKGS"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $FUZZ_PKGS >/dev/null
  have_libfuzzer || { echo "fuzz: clang still cannot link libFuzzer" >&2; exit 1; }
fi

CC=clang cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_FUZZ=ON \
  -DLOOM_CUDA=OFF -DLOOM_MPI=OFF -DLOOM_NATIVE=OFF >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log" >&2; exit 1; }
rm -f "$BUILD.configure.log"
cmake --build "$BUILD" --target fuzz_targets -j"$JOBS" >/dev/null

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$SRC"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1
failed=()
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/$t"
  seeds="$SRC/tests/fuzz/corpus/$t"
  [ -x "$bin" ] || { echo "fuzz: no target $t" >&2; failed+=("$t"); continue; }
  [ -d "$seeds" ] || { echo "fuzz: no corpus $seeds" >&2; failed+=("$t"); continue; }
  art="$BUILD/artifacts/$t"
  mkdir -p "$art"
  log="$BUILD/$t.log"
  if [ $replay = 1 ]; then
    # every seed once (files given one by one: libFuzzer runs them and exits)
    args=(-timeout="$TIMEOUT" -rss_limit_mb=4096 -artifact_prefix="$art/")
    files=("$seeds"/*)
    if "$bin" "${args[@]}" "${files[@]}" >"$log" 2>&1; then
      echo "fuzz: $t: ${#files[@]} corpus inputs ok"
    else
      echo "fuzz: $t: FAILED on its corpus (log $log):" >&2
      grep -E "ERROR|SUMMARY|Running: |runtime error" "$log" | tail -5 >&2 || true
      failed+=("$t")
    fi
  else
    work="$BUILD/corpus/$t"
    mkdir -p "$work"
    dict=()
    [ -f "$SRC/tests/fuzz/$t.dict" ] && dict=(-dict="$SRC/tests/fuzz/$t.dict")
    if "$bin" -max_total_time="$SECONDS_PER" -timeout="$TIMEOUT" -rss_limit_mb=4096 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" \
        "$work" "$seeds" >"$log" 2>&1; then
      execs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}')
      echo "fuzz: $t: ${SECONDS_PER}s, ${execs:-?} executions, no crash"
    else
      echo "fuzz: $t: FAILED (log $log, artifacts $art):" >&2
      grep -E "ERROR|SUMMARY|Test unit written|runtime error" "$log" | tail -5 >&2 || true
      failed+=("$t")
    fi
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
