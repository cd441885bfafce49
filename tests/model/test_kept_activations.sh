#!/usr/bin/env bash
# --kept-activation-layers changes where the MLP's activation lives (kept per layer, or remade by
# the backward from the pre-activation), not what is computed: the same losses and gradient norms
# bit for bit with 0, 1 and all layers kept, for the GELU and the SwiGLU MLP, with dropout on;
# and pipeline parallelism (2 stages: the count is per stage) gives the same as well.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --vocab-size 128 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --eval-iters 0
      --log-interval 1 --lr 1e-3 --seed 7)
for mlp in gelu swiglu; do
  extra=()
  [ $mlp = swiglu ] && extra=(--swiglu)
  run $mlp-0 "${extra[@]}"
  run $mlp-1 "${extra[@]}" --kept-activation-layers 1
  run $mlp-all "${extra[@]}" --kept-activation-layers 9
  same $mlp-0 $mlp-1
  same $mlp-0 $mlp-all
done
if command -v mpirun > /dev/null && [ -x "$(dirname "$LOOM")/loom" ]; then
  mpi=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
  for k in 0 1; do
    if ! "${mpi[@]}" "$LOOM" "${base[@]}" --pipeline-model-parallel-size 2 \
        --kept-activation-layers $k --metrics-file "$tmp/pp-$k.jsonl" > "$tmp/pp-$k.log" 2>&1; then
      echo "FAIL pp-$k: exited non-zero"; tail -3 "$tmp/pp-$k.log"; fail=1
      continue
    fi
    losses_of pp-$k
  done
  same pp-0 pp-1
fi
exit $fail
