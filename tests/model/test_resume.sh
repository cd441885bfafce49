#!/usr/bin/env bash
# Resume: 20 iterations straight and 10 (--exit-interval) + save + load + 10 give bit-identical losses and grad
# norms (dropout on, so the counter-based RNG state must carry over too), and the final
# checkpoints hold identical tensors. --no-save-optim leaves the optimizer state out.
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
# --no-save-optim: the checkpoint holds the weights and training state only; the resumed run's
# first iteration (weights and data alone) equals the straight run's, and the optimizer restarts
"$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 10 --no-save-optim --save "$tmp/c" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 11 --metrics-file "$tmp/noopt.jsonl" --load "$tmp/c" > "$tmp/noopt.log"
first() { sed -n "$2p" "$1" | sed -E 's/.*"loss": ([^,]*), "grad_norm": ([^,]*),.*/\1 \2/'; }
if [ ! -e "$tmp/c/iter_0000010/optim.safetensors" ] && [ -e "$tmp/c/iter_0000010/model.safetensors" ] &&
   grep -q "holds no optimizer state" "$tmp/noopt.log" &&
   [ -n "$(first "$tmp/noopt.jsonl" 1)" ] && [ "$(first "$tmp/noopt.jsonl" 1)" = "$(first "$tmp/straight.jsonl" 11)" ]; then
  echo "ok   --no-save-optim: no optimizer file; the resumed run starts from the same weights"
else
  echo "FAIL: --no-save-optim"; ls "$tmp/c/iter_0000010"; cat "$tmp/noopt.log"; fail=1
fi
[ "$(cat "$tmp/b/latest_checkpointed_iteration.txt")" = 20 ] || { echo "FAIL: latest pointer"; fail=1; }
exit $fail
