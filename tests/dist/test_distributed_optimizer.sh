#!/usr/bin/env bash
# --use-distributed-optimizer (the gradient buckets reduce-scattered over the data-parallel ranks,
# each rank's pieces of them updated by it, the parameters gathered after each step) trains
# exactly as the whole optimizer on every rank: for DP=2, DP=3 (pieces that end in the padding),
# TP=2 x DP=2, PP=2 x DP=2 and interleaved PP=2 x DP=2 of a GPT, DP=2 of a Llama-style model and
# DP=3 of one whose embedding and output layer have their own learning rate (--decoupled-lr: their
# ranges cut by the pieces), with buckets of 2000 parameters (--ddp-bucket-size: several buckets a
# stage, cut inside layers), every iteration's loss, learning rate and count of zero gradients
# and the final checkpoint (model.safetensors and optim.safetensors, byte for byte) equal those
# of the same layout without the flag, and the gradient norms to 1e-13. A run stopped and resumed
# with the flag, and one resumed without it, equal the straight run the same way (the checkpoint
# holds whole moments either way). The distributed runs compare their replicas' weight hashes
# every 4 iterations (--check-weight-hash-across-dp-replicas-interval), which must find them the
# same; their log names the buckets. --save-grads saves the same gradients with it as without. With --overlap-param-gather (each bucket's gather waited for
# where the next forward first reads it) every layout gives the distributed run's bits: metrics,
# parameter norms, weight hashes and the final weights. (Open MPI completes every outstanding
# gather at the first wait here, so this checks what the waits deliver, not their places.)
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
common=(train --mock-data --num-layers 4 --seq-length 16 --vocab-size 97
        --make-vocab-size-divisible-by 32 --micro-batch-size 2 --global-batch-size 12
        --train-iters 8 --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1
        --clip-grad 1.0 --log-interval 1 --eval-iters 0 --seed 11 --ddp-bucket-size 2000
        --log-num-zeros-in-grad --log-params-norm)
gpt=(--hidden-size 32 --num-attention-heads 4)
llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4
       --ffn-hidden-size 96 --normalization RMSNorm --swiglu --position-embedding-type rope
       --disable-bias-linear --untie-embeddings-and-output-weights)

# train NAME RANKS ARGS...: $tmp/NAME.jsonl, .log, checkpoint $tmp/NAME
train() {
  local name=$1 n=$2
  shift 2
  if ! loom_mpirun "$n" "$LOOM" "${common[@]}" "$@" --save "$tmp/$name" \
      --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
    echo "FAIL $name: the run failed"; tail -3 "$tmp/$name.log"; fail=$((fail + 1)); return 1
  fi
}
# metrics: loss, grad norm and lr of each iteration
metrics() {
  sed -E 's/.*"lr": ([^,]*), "loss": ([^,]*), "grad_norm": ([^,]*),.*"num_zeros": ([0-9]*).*/\1 \2 \3 \4/' "$1"
}
# the same lr, loss and zero count, grad norms within 1e-13 of each other (relative): the
# distributed optimizer's norm adds the ranks' sums of squares over their pieces, another order of
# the same double additions
close() {
  paste -d' ' "$1" "$2" | awk '{ d = $3 - $7; if (d < 0) d = -d;
    if (NF != 8 || $1 != $5 || $2 != $6 || $4 != $8 || d > 1e-13 * $3) bad = 1 } END { exit bad }'
}
# same LABEL A B [ITERS]: A's and B's metrics (B's last ITERS against A's) and final checkpoints
same() {
  local label=$1 a=$2 b=$3 it=${4:-8} ok=1
  close <(metrics "$tmp/$a.jsonl" | tail -n "$it") <(metrics "$tmp/$b.jsonl") || ok=0
  [ "$(metrics "$tmp/$b.jsonl" | wc -l)" = "$it" ] || ok=0
  for f in model optim; do
    cmp -s "$tmp/$a/iter_0000008/$f.safetensors" "$tmp/$b/iter_0000008/$f.safetensors" || ok=0
  done
  if [ $ok = 1 ]; then
    echo "ok   $label"; pass=$((pass + 1))
  else
    echo "FAIL $label"; paste <(metrics "$tmp/$a.jsonl") <(metrics "$tmp/$b.jsonl") | head; fail=$((fail + 1))
  fi
}

for layout in "gpt 2 dp2" "gpt 3 dp3" "gpt 4 tp2 --tensor-model-parallel-size 2" \
              "gpt 4 pp2 --pipeline-model-parallel-size 2" \
              "gpt 4 vpp --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 16" \
              "llama 2 dp2" \
              "llama 3 dp3-decoupled --decoupled-lr 6e-3"; do
  set -- $layout
  model=$1 n=$2 name=$3
  shift 3
  declare -n margs=$model
  train "$model-$name" "$n" "${margs[@]}" "$@" || continue
  train "$model-$name-dist" "$n" "${margs[@]}" "$@" --use-distributed-optimizer \
    --check-weight-hash-across-dp-replicas-interval 4 || continue
  grep -qE "distributed optimizer: each of the .* pieces of ([3-9]|[1-9][0-9]+) gradient buckets" \
    "$tmp/$model-$name-dist.log" ||
    { echo "FAIL $model $name: the log does not say the optimizer is distributed over 3 or more buckets"; fail=$((fail + 1)); }
  # the replicas' weights compared at iterations 4 and 8
  [ "$(grep -c 'data-parallel replicas are the same' "$tmp/$model-$name-dist.log")" = 2 ] ||
    { echo "FAIL $model $name: the replicas' weight hashes were not compared twice"; fail=$((fail + 1)); }
  same "$model $name ($n ranks): --use-distributed-optimizer gives the same losses and checkpoint" \
    "$model-$name" "$model-$name-dist"
  # the gather overlapped with the next forward: the same reductions, so the same bits throughout
  train "$model-$name-overlap" "$n" "${margs[@]}" "$@" --use-distributed-optimizer \
    --overlap-param-gather --check-weight-hash-across-dp-replicas-interval 4 || continue
  if cmp -s <(metrics "$tmp/$model-$name-dist.jsonl") <(metrics "$tmp/$model-$name-overlap.jsonl") &&
     cmp -s <(grep -o '"params_norm": [^,}]*' "$tmp/$model-$name-dist.jsonl") \
            <(grep -o '"params_norm": [^,}]*' "$tmp/$model-$name-overlap.jsonl") &&
     [ "$(grep -c 'data-parallel replicas are the same' "$tmp/$model-$name-overlap.log")" = 2 ] &&
     grep -q "gathered while the next forward runs" "$tmp/$model-$name-overlap.log" &&
     cmp -s "$tmp/$model-$name-dist/iter_0000008/model.safetensors" \
            "$tmp/$model-$name-overlap/iter_0000008/model.safetensors"; then
    echo "ok   $model $name: --overlap-param-gather the same bits"; pass=$((pass + 1))
  else
    echo "FAIL $model $name: --overlap-param-gather"; fail=$((fail + 1))
  fi
done

# stopped at iteration 5 and resumed, with the flag and without it
if train stop 2 "${gpt[@]}" --use-distributed-optimizer --exit-interval 5; then
  train resumed 2 "${gpt[@]}" --use-distributed-optimizer --load "$tmp/stop" &&
    same "resumed with --use-distributed-optimizer: the straight run's bits" gpt-dp2-dist resumed 3
  train resumed-whole 2 "${gpt[@]}" --load "$tmp/stop" &&
    same "a distributed optimizer's checkpoint resumed without it: the same bits" gpt-dp2-dist resumed-whole 3
fi
# --save-grads: the first iteration's reduced gradients, gathered from the ranks' pieces, the same
# bytes as the whole optimizer's
if train grads-whole 2 "${gpt[@]}" --save-grads "$tmp/g-whole" &&
   train grads-dist 2 "${gpt[@]}" --use-distributed-optimizer --save-grads "$tmp/g-dist"; then
  if cmp -s "$tmp/g-whole/model.safetensors" "$tmp/g-dist/model.safetensors"; then
    echo "ok   --save-grads with --use-distributed-optimizer: the same gradients"; pass=$((pass + 1))
  else
    echo "FAIL --save-grads with --use-distributed-optimizer: the gradients differ"; fail=$((fail + 1))
  fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
