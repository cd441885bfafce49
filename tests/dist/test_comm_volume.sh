#!/usr/bin/env bash
# Communication volume per training step, counted by the comm layer on rank 0, equals the
# analytic value derived from the model's structure (tests/ref/comm_volume.py) for tensor,
# sequence, pipeline and data parallelism.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/comm_volume.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
        --max-position-embeddings 16 --vocab-size 97 --make-vocab-size-divisible-by 32
        --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --log-interval 1 --eval-iters 0)
fail=0
check() {
  local kind=$1 n=$2
  shift 2
  loom_mpirun "$n" "$LOOM" train "${common[@]}" "$@" --metrics-file "$tmp/$kind.jsonl" > "$tmp/$kind.log" 2>&1 ||
    { echo "FAIL $kind: run failed"; tail -5 "$tmp/$kind.log"; fail=$((fail + 1)); return; }
  "$PYTHON" "$REF" "$tmp/$kind.jsonl" "$kind" || fail=$((fail + 1))
}
check tp 2 --tensor-model-parallel-size 2
check sp 2 --tensor-model-parallel-size 2 --sequence-parallel
check pp 2 --pipeline-model-parallel-size 2
check dp 2
echo "$((4 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
