#!/usr/bin/env bash
# Layout-independent checkpoints. Train 10 of 20 iterations under one layout (--train-iters 20
# --exit-interval 10, so the learning-rate schedule is the straight run's), save, resume under
# another layout for the last 10; every iteration's loss and grad norm, and the final weights and
# Adam moments, must equal a straight 20-iteration single-rank run within 1e-5 relative.
# The resumed half must start at iteration 11 (a resume that started over would also match).
# Layout pairs, as (TP, PP, DP):
#   (2,2,1) -> (1,1,1)  and back   tensor and pipeline parallel, both directions
#   (1,1,2) -> (1,1,1)             a data-parallel change
#   (1,1,2) -> (2,1,1)+SP          data parallel to tensor + sequence parallel
#   (1,2,1) interleaved -> (2,1,1) two virtual stages per rank to tensor parallel
#   (1,2,1) of 3 + 1 layers -> (1,3,1) of 1 + 2 + 1   uneven pipeline stages
#                                  (--decoder-first/last-pipeline-num-layers)
# for a GPT-2-style model (tied embedding: its two pipeline copies are saved as one tensor) and a
# Llama-style one (RMSNorm, SwiGLU, rotary, grouped-query attention, no biases, untied), with
# dropout on. The vocabulary (97) keeps the default --make-vocab-size-divisible-by 128, so TP=1
# pads it to 128 rows and TP=2 to 256: the checkpoint must load across different paddings.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_resume.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --num-layers 4 --seq-length 16 --vocab-size 97
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 5)
gpt=(--hidden-size 32 --num-attention-heads 4)
llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4
       --ffn-hidden-size 96 --normalization RMSNorm --swiglu --position-embedding-type rope
       --disable-bias-linear --untie-embeddings-and-output-weights)
TP2PP2="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
# "RANKS:FLAGS|RANKS:FLAGS": the saving layout, then the resuming one
pairs=("4:$TP2PP2|1:"
       "1:|4:$TP2PP2"
       "2:|1:"
       "2:|2:--tensor-model-parallel-size 2 --sequence-parallel"
       "2:--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1|2:--tensor-model-parallel-size 2"
       "2:--pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1|3:--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1")
# layout N FLAGS...: "TP=t PP=p DP=d" (+ SP, VPP) of N ranks with these flags
layout() {
  local n=$1 tp=1 pp=1 extra=""
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --tensor-model-parallel-size) tp=$2; shift ;;
      --pipeline-model-parallel-size) pp=$2; shift ;;
      --sequence-parallel) extra+=" SP" ;;
      --num-layers-per-virtual-pipeline-stage) extra+=" interleaved"; shift ;;
      --decoder-first-pipeline-num-layers) extra+=" first stage $2 layers"; shift ;;
      --decoder-last-pipeline-num-layers) extra+=" last stage $2 layers"; shift ;;
    esac
    shift
  done
  echo "TP=$tp PP=$pp DP=$((n / (tp * pp)))$extra"
}
run() {
  local n=$1
  shift
  if [ "$n" -eq 1 ]; then "$LOOM" train "$@"; else loom_mpirun "$n" "$LOOM" train "$@"; fi
}
pass=0 fail=0 k=0
for model in gpt llama; do
  declare -n margs=$model
  ref="$tmp/$model-ref"
  "$LOOM" train "${common[@]}" "${margs[@]}" --save "$ref" --metrics-file "$ref.jsonl" > "$ref.log" 2>&1
  for p in "${pairs[@]}"; do
    k=$((k + 1))
    first=${p%%|*} second=${p#*|}
    n1=${first%%:*} f1=${first#*:} n2=${second%%:*} f2=${second#*:}
    # shellcheck disable=SC2086
    label="$model $(layout "$n1" $f1) -> $(layout "$n2" $f2)"
    out="$tmp/run$k"
    # shellcheck disable=SC2086
    if ! run "$n1" "${common[@]}" "${margs[@]}" $f1 --exit-interval 10 --save "$out" \
           --metrics-file "$out.1.jsonl" > "$out.log" 2>&1 ||
       ! run "$n2" "${common[@]}" "${margs[@]}" $f2 --load "$out" --save "$out" \
           --metrics-file "$out.2.jsonl" >> "$out.log" 2>&1; then
      echo "FAIL $label: a run failed"; grep -m3 'error' "$out.log" || tail -3 "$out.log"
      fail=$((fail + 1)); continue
    fi
    if ! grep -q "loaded checkpoint $out at iteration 10" "$out.log"; then
      echo "FAIL $label: the resumed run did not report loading iteration 10"; fail=$((fail + 1)); continue
    fi
    if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.1.jsonl" "$out.2.jsonl" "$out" 10 1e-5 "$label"; then
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
