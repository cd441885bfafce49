#!/usr/bin/env bash
# Layout-independent checkpoints: 10 iterations under one layout, save, resume under another for
# 10 more; iterations 11-20 must equal a straight 20-iteration single-rank run within 1e-5
# (losses, grad norms) and so must the final weights. Layout pairs: TP=2 x PP=2 -> 1 rank,
# 1 rank -> TP=2 x PP=2, DP=2 -> TP=2 with sequence parallelism; GPT-2 style (tied embedding,
# whose two pipeline copies must come back as one tensor) and Llama style.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --num-layers 4 --seq-length 16 --vocab-size 97 --make-vocab-size-divisible-by 32
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 5)
gpt=(--hidden-size 32 --num-attention-heads 4)
llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4
       --ffn-hidden-size 96 --normalization RMSNorm --swiglu --position-embedding-type rope
       --disable-bias-linear --untie-embeddings-and-output-weights)
# run NAME RANKS LAYOUT-FLAGS... -- TRAIN-FLAGS...
run() {
  local n=$1
  shift
  if [ "$n" -eq 1 ]; then "$LOOM" train "$@"; else loom_mpirun "$n" "$LOOM" train "$@"; fi
}
pairs=("4:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2|1:"
       "1:|4:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
       "2:|2:--tensor-model-parallel-size 2 --sequence-parallel")
pass=0 fail=0
for model in gpt llama; do
  declare -n margs=$model
  ref="$tmp/$model-ref"
  "$LOOM" train "${common[@]}" "${margs[@]}" --save "$ref" --metrics-file "$ref.jsonl" > /dev/null
  for p in "${pairs[@]}"; do
    first=${p%%|*} second=${p#*|}
    n1=${first%%:*} f1=${first#*:} n2=${second%%:*} f2=${second#*:}
    out="$tmp/$model-$pass-$fail"
    # shellcheck disable=SC2086
    run "$n1" "${common[@]}" "${margs[@]}" $f1 --exit-interval 10 --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1 &&
    run "$n2" "${common[@]}" "${margs[@]}" $f2 --load "$out" --save "$out" --metrics-file "$out.jsonl" >> "$out.log" 2>&1 || {
      echo "FAIL $model [$f1] -> [$f2]: a run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue; }
    if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "$model ${n1} ranks [$f1] -> ${n2} ranks [$f2]"; then
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
