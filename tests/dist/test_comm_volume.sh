#!/usr/bin/env bash
# Communication volume per training step, counted by the comm layer on rank 0 ("comm_bytes" in
# the metrics file: tp, pp, dp and embedding groups), equals the analytic value derived from the
# model's structure (tests/ref/comm_volume.py, which also holds the models and the layouts) for
# tensor, sequence, pipeline (1F1B and interleaved) and data parallelism and three combinations,
# and data parallelism with the distributed optimizer (the gradients reduce-scattered and the
# parameters all-gathered: half an all-reduce's traffic each), on a GPT-2-style and a Llama-style
# model whose hidden size (40) makes the gradient buckets carry alignment padding; and ZeRO-2 and
# ZeRO-3 (--data-parallel-sharding-strategy optim_grads, optim_grads_params: the layers' bucket
# reduce-scattered every micro-batch, ZeRO-3 gathering every bucket before each micro-batch's
# forward and backward instead of after the step). The bytes of parameters, gradients and
# optimizer state rank 0 keeps ("state_bytes") equal ZeRO's formulas on the padded flat buffer.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/comm_volume.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for model in gpt llama; do
  for case in tp sp pp vpp dp tp+dp tp+pp+sp dp-dist tp+dp-dist dp-zero2 dp-zero3 tp+dp-zero3; do
    read -r n flags < <("$PYTHON" "$REF" flags "$model" "$case")
    out="$tmp/$model-$case"
    # shellcheck disable=SC2086
    if ! loom_mpirun "$n" "$LOOM" train $flags --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
      echo "FAIL $model $case: the run failed"; tail -3 "$out.log"; fail=$((fail + 1)); continue
    fi
    if "$PYTHON" "$REF" check "$out.jsonl" "$model" "$case"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
