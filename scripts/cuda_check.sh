#!/usr/bin/env bash
# Builds loom with the CUDA backend and runs the CUDA tests; meant for the GPU machine
# (device tool: `bash scripts/cuda_check.sh`, with .deps/root in the call's carry when that
# machine lacks the jansson/PCRE2 headers: see scripts/device_deps.sh).
#
#   bash scripts/cuda_check.sh            environment report, build, CTest label "cuda",
#                                         timings at GPT-2 124M shapes
#   CUDA_CHECK_SANITIZE=1 ...             also compute-sanitizer memcheck and racecheck on the
#                                         small parity cases
# Logs go to $OUT (the device tool's output folder) when set, else to build-cuda/logs.
# Exit status: that of the parity tests (CTest).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${CUDA_CHECK_BUILD:-build-cuda}
LOGS=${OUT:-$ROOT/$BUILD/logs}
mkdir -p "$LOGS"
JOBS=$(nproc 2>/dev/null || echo 4)
export PATH=/usr/local/cuda/bin:$PATH

section() { printf '\n== %s ==\n' "$*"; }

# ---- environment ------------------------------------------------------------------------
{
  section environment
  uname -srm
  (. /etc/os-release 2>/dev/null && echo "os: $PRETTY_NAME")
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -4
  nvcc --version 2>&1 | tail -2
  cmake --version 2>&1 | head -1
  cc --version 2>&1 | head -1
  echo "cores: $JOBS"
} 2>&1 | tee "$LOGS/env.log"

# ---- pkg-config for what the machine lacks ------------------------------------------------
DEPS=$ROOT/.deps
if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$DEPS/root/usr/bin/pkgconf" ]; then
  mkdir -p "$DEPS/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$DEPS/root/usr/lib/x86_64-linux-gnu" "$DEPS/root/usr/bin/pkgconf" > "$DEPS/bin/pkg-config"
  chmod +x "$DEPS/bin/pkg-config"
  export PATH=$DEPS/bin:$PATH
  echo "pkg-config: using the carried pkgconf" | tee -a "$LOGS/env.log"
fi
PCDIR=$DEPS/pc
mkdir -p "$PCDIR"
for mod in jansson libpcre2-8; do
  pkg-config --exists "$mod" 2>/dev/null && continue
  src=$DEPS/root/usr/lib/x86_64-linux-gnu/pkgconfig/$mod.pc
  if [ -f "$src" ]; then
    sed "s|^prefix=.*|prefix=$DEPS/root/usr|" "$src" > "$PCDIR/$mod.pc"
    echo "pkg-config: $mod from .deps/root" | tee -a "$LOGS/env.log"
  else
    echo "pkg-config: $mod missing and not carried (run scripts/device_deps.sh here, carry .deps/root)" | tee -a "$LOGS/env.log"
  fi
done
# the unpacked -dev .so links point at runtimes that were not carried: point them at the
# machine's own runtime (same soname), or drop them so the static archive is used
for link in "$DEPS"/root/usr/lib/x86_64-linux-gnu/lib*.so; do
  [ -L "$link" ] || continue
  [ -e "$link" ] && continue
  base=$(basename "$link")
  sys=$(ls /usr/lib/x86_64-linux-gnu/"$base".[0-9]* 2>/dev/null | head -1)
  if [ -n "$sys" ]; then ln -sfn "$sys" "$link"; else rm -f "$link"; fi
done
if ! pkg-config --exists openblas 2>/dev/null; then
  lib=$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so* /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so* 2>/dev/null | head -1)
  hdr=$(ls -d /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include 2>/dev/null |
        while read -r d; do [ -f "$d/cblas.h" ] && echo "$d" && break; done)
  if [ -n "$lib" ] && [ -n "$hdr" ]; then
    mkdir -p "$DEPS/lib"
    ln -sfn "$lib" "$DEPS/lib/libopenblas.so"
    printf 'Name: openblas\nDescription: OpenBLAS found on this machine\nVersion: 0\nLibs: -L%s -lopenblas\nCflags: -I%s\n' \
      "$DEPS/lib" "$hdr" > "$PCDIR/openblas.pc"
    echo "pkg-config: openblas from $lib, $hdr" | tee -a "$LOGS/env.log"
  fi
fi
export PKG_CONFIG_PATH=$PCDIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
for mod in openblas jansson libpcre2-8; do
  echo "pkg-config $mod: $(pkg-config --modversion "$mod" 2>&1)"
done | tee -a "$LOGS/env.log"

# ---- build ---------------------------------------------------------------------------------
section build | tee "$LOGS/build.log"
t0=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 >> "$LOGS/build.log" 2>&1 || {
  tail -40 "$LOGS/build.log"; echo "cuda_check: configure failed"; exit 2; }
# only what the CUDA tests need, so that unrelated work in progress cannot stop the check
targets=$(ls tests/cuda/test_*.c 2>/dev/null | xargs -n1 basename | sed 's/\.c$//' | tr '\n' ' ')
cmake --build "$BUILD" -j"$JOBS" --target $targets >> "$LOGS/build.log" 2>&1 || {
  grep -E "error|Error" "$LOGS/build.log" | head -40; echo "cuda_check: build failed"; exit 2; }
grep -E "warning" "$LOGS/build.log" | grep -E "backend/cuda|tests/cuda" | head -20
echo "built $targets in $(( $(date +%s) - t0 )) s" | tee -a "$LOGS/build.log"

# ---- tests ---------------------------------------------------------------------------------
section "ctest -L cuda"
export LOOM_REQUIRE_CUDA=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-$JOBS}
t0=$(date +%s)
ctest --test-dir "$BUILD" -L cuda -V --timeout 300 > "$LOGS/ctest.log" 2>&1
rc=$?
grep -E "^[0-9]+: (ok |FAIL|--|[0-9]+ passed|skipped|error)" "$LOGS/ctest.log" | sed 's/^[0-9]*: //'
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$LOGS/ctest.log" | head -10
echo "ctest exit $rc in $(( $(date +%s) - t0 )) s"

if [ "${CUDA_CHECK_SANITIZE:-0}" = "1" ] && command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck; do
    section "compute-sanitizer $tool (small cases)"
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$BUILD/tests/test_cuda_parity" small > "$LOGS/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool exit $?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|passed, " "$LOGS/sanitize_$tool.log" | head -8
  done
fi

section "timings"
timeout 120 "$BUILD/tests/test_cuda_parity" bench 2>&1 | tee "$LOGS/bench.log"
exit $rc
