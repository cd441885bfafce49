#!/usr/bin/env bash
# Layouts that do not divide are refused before any work with exactly one "loom: error:" line
# (from rank 0) naming the flag, a non-zero exit, and promptly; a failure on one rank alone ends
# the whole job promptly with that rank's message.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=(--mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 97
   --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --eval-iters 0)
pass=0 fail=0
# expect N "needle" flags... : exactly one error line containing needle, exit != 0, within 60 s
expect() {
  local n=$1 needle=$2
  shift 2
  local start=$SECONDS out rc
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$LOOM" train "$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s\n' "$out" | grep -c '^loom: error:')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -qF -- "$needle"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL ($n ranks, exit $rc, $lines error lines, $((SECONDS - start)) s) expected '$needle': $(printf '%s' "$out" | head -5)"
  fi
}
expect 4 "does not divide world size 4" "${M[@]}" --num-attention-heads 6 --hidden-size 48 --tensor-model-parallel-size 3
expect 4 "--tensor-model-parallel-size 4 does not divide the 2 query groups" "${M[@]}" --tensor-model-parallel-size 4 --group-query-attention --num-query-groups 2
expect 2 "--pipeline-model-parallel-size 2 does not divide --num-layers 3" "${M[@]}" --num-layers 3 --pipeline-model-parallel-size 2
expect 2 "--num-layers-per-virtual-pipeline-stage 3" "${M[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
expect 2 "interleaved schedule needs the micro-batches" "${M[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 2
expect 2 "--global-batch-size 6 is not a multiple" "${M[@]}" --global-batch-size 6
expect 2 "--sequence-parallel needs --seq-length 15" "${M[@]}" --seq-length 15 --tensor-model-parallel-size 2 --sequence-parallel
expect 4 "--num-attention-heads 6" "${M[@]}" --num-attention-heads 6 --hidden-size 48 --tensor-model-parallel-size 4
# one rank fails alone (only rank 0 opens the metrics file): the job ends promptly with its message
start=$SECONDS
out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "$LOOM" train "${M[@]}" \
      --tensor-model-parallel-size 2 --metrics-file "$tmp/no/such/dir/m.jsonl" 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "loom: error: \[rank 0\] --metrics-file"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL one-rank failure (exit $rc, $((SECONDS - start)) s): $(printf '%s' "$out" | head -3)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
