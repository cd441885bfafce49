#!/usr/bin/env bash
# Pipeline bubble: the fraction of a step stage 0 spends waiting for activations or gradients,
# measured by loom's pipeline executor ("pipeline_wait_fraction" in the metrics), next to the
# analytic bubble of 1F1B, (p-1)/(m+p-1), and of the interleaved schedule with v virtual
# stages, (p-1)/(v*m+p-1). CPU, MPI, one OpenMP thread per rank.
#   bench/pipeline_bubble.sh [build dir]
# With more ranks than cores the ranks share cores and waits include being descheduled: read the
# figures as the schedule's shape, not as a hardware measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
source tests/dist/mpi_env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-4s %-3s %-4s %-12s %-10s\n" p v m measured analytic
for p in 2 4; do
  for v in 1 2; do
    for m in 1 2 4 8 16; do
      [ "$v" -gt 1 ] && [ $((m % p)) -ne 0 ] && continue
      layers=$((p * v * 2))
      extra=()
      [ "$v" -gt 1 ] && extra=(--num-layers-per-virtual-pipeline-stage 2)
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$p" "$BUILD/loom" train \
          --mock-data --num-layers "$layers" --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
          --vocab-size 512 --micro-batch-size 2 --global-batch-size $((2 * m)) --train-iters 4 \
          --log-interval 1 --eval-iters 0 --pipeline-model-parallel-size "$p" "${extra[@]}" \
          --metrics-file "$tmp/m.jsonl" > /dev/null
      measured=$(/usr/bin/python3 -c "import json,sys; r=[json.loads(l) for l in open('$tmp/m.jsonl')][1:]; print('%.3f' % (sum(x['pipeline_wait_fraction'] for x in r)/len(r)))")
      analytic=$(/usr/bin/python3 -c "print('%.3f' % (($p-1)/($v*$m+$p-1)))")
      printf "%-4s %-3s %-4s %-12s %-10s\n" "$p" "$v" "$m" "$measured" "$analytic"
    done
  done
done
