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
source "$ROOT/scripts/device_env.sh"

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
