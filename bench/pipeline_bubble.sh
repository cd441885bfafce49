#!/usr/bin/env bash
# Pipeline bubble: the fraction of a training step that pipeline stage 0 (world rank 0) spends
# waiting for activations or gradients, as loom's pipeline executor measures it
# ("pipeline_wait_fraction" = wait / (busy + wait) in the metrics file), next to the analytic
# bubble of the 1F1B schedule, (p-1)/(m+p-1), and of the interleaved schedule with v = 2 virtual
# stages per rank, (p-1)/(v m + p-1). CPU, MPI, one OpenMP/BLAS thread per rank; the same model
# (4 layers per pipeline rank, hidden 256, sequence 64, micro-batch 2, vocabulary 128 so that the
# output layer adds little to the last stage) for both schedules.
#
#   bench/pipeline_bubble.sh [BUILD_DIR] [ITERS]      (BUILD_DIR built with MPI; default build)
#
# The measured figure is the median over iterations 2..ITERS (the first one allocates). With more
# ranks than cores (p = 4 on a 2-core machine) ranks share cores, so a stage also "waits" while
# its neighbour is descheduled and the measured bubble is inflated; read those rows as the
# schedule's trend, not as a hardware measurement. The interleaved schedule needs m to be a
# multiple of p ("-" otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ITERS=${2:-5}
source tests/dist/mpi_env.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if ! grep -q '^LOOM_MPI:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "pipeline_bubble.sh: $BUILD is not an MPI build (cmake -S . -B build-par -DLOOM_CUDA=OFF)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# measure P V M: median wait fraction of stage 0
measure() {
  local p=$1 v=$2 m=$3 extra=()
  [ "$v" -gt 1 ] && extra=(--num-layers-per-virtual-pipeline-stage $((4 / v)))
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$p" "$BUILD/loom" train \
    --mock-data --num-layers $((4 * p)) --hidden-size 256 --num-attention-heads 4 --seq-length 64 \
    --vocab-size 128 --micro-batch-size 2 --global-batch-size $((2 * m)) --train-iters "$ITERS" \
    --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
    --pipeline-model-parallel-size "$p" "${extra[@]}" --metrics-file "$tmp/m.jsonl" > "$tmp/log" 2>&1 ||
    { echo "run failed (p=$p v=$v m=$m):" >&2; tail -3 "$tmp/log" >&2; exit 1; }
  /usr/bin/python3 -c "
import json, statistics
r = [json.loads(l)['pipeline_wait_fraction'] for l in open('$tmp/m.jsonl')][1:]
print('%.3f' % statistics.median(r))"
}
analytic() { /usr/bin/python3 -c "print('%.3f' % (($1 - 1) / ($2 * $3 + $1 - 1)))"; }
echo "| p | m | 1F1B measured | 1F1B (p-1)/(m+p-1) | interleaved v=2 measured | interleaved (p-1)/(2m+p-1) |"
echo "| --- | --- | --- | --- | --- | --- |"
for p in 2 4; do
  for m in 1 2 4 8 16; do
    one=$(measure "$p" 1 "$m")
    if [ $((m % p)) -eq 0 ]; then
      two=$(measure "$p" 2 "$m") two_a=$(analytic "$p" 2 "$m")
    else
      two=- two_a=-
    fi
    echo "| $p | $m | $one | $(analytic "$p" 1 "$m") | $two | $two_a |"
  done
done
