#!/usr/bin/env bash
# Resume: 20 iterations straight and 10 (--exit-interval) + save + load + 10 give bit-identical losses and grad
# norms (dropout on, so the counter-based RNG state must carry over too), and the final
# checkpoints hold identical tensors.
set -euo pipefail
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--mock-data --num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 16
      --vocab-size 97 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 1e-4
      --lr-decay-style cosine --lr-warmup-iters 3 --hidden-dropout 0.1 --attention-dropout 0.1
      --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 99)
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/straight.jsonl" --save "$tmp/a" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 10 --metrics-file "$tmp/resumed.jsonl" --save "$tmp/b" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/resumed.jsonl" --load "$tmp/b" --save "$tmp/b" > /dev/null
fail=0
n=$(wc -l < "$tmp/straight.jsonl")
[ "$n" -eq 20 ] || { echo "FAIL: straight run logged $n iterations, expected 20"; fail=1; }
strip() { sed -E 's/"ms_per_iter": [^,]*, "tokens_per_s": [^,]*, "tflops_per_rank": [^,]*, "mfu": [^,}]*//' "$1"; }
if diff <(strip "$tmp/straight.jsonl") <(strip "$tmp/resumed.jsonl"); then
  echo "ok   losses, grad norms, learning rates and validation losses identical over 20 iterations"
else
  echo "FAIL: resumed run differs from the straight run"; fail=1
fi
if cmp "$tmp/a/iter_0000020/model.safetensors" "$tmp/b/iter_0000020/model.safetensors" &&
   cmp "$tmp/a/iter_0000020/optim.safetensors" "$tmp/b/iter_0000020/optim.safetensors"; then
  echo "ok   final weights and optimizer state bit-identical"
else
  echo "FAIL: final checkpoints differ"; fail=1
fi
grep -q '"val_loss"' "$tmp/straight.jsonl" || { echo "FAIL: no validation loss logged"; fail=1; }
[ "$(cat "$tmp/b/latest_checkpointed_iteration.txt")" = 20 ] || { echo "FAIL: latest pointer"; fail=1; }
exit $fail
