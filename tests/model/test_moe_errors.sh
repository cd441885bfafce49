#!/usr/bin/env bash
# Bad MoE settings are one-line errors naming the flag, before any work (no model is built, no
# iteration runs): k > E, groups that do not divide E, group settings that do not fit, the expert
# bias with softmax scores, pre-softmax with sigmoid scores, padding without a capacity factor, a
# shared gate without shared experts, a bad or wrong-length --moe-layer-freq, MoE layers on
# several tensor-parallel ranks.
set -uo pipefail
LOOM=${LOOM:-build/loom}
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 97 --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0)
fail=0
check() { # FLAG-IN-MESSAGE ARGS...
  local want=$1
  shift
  local out rc
  out=$("$LOOM" "${base[@]}" "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
     printf '%s' "$out" | grep -q -- "$want" && ! printf '%s' "$out" | grep -q iteration; then
    echo "ok   $*: $out"
  else
    echo "FAIL $* (exit $rc): $out"
    fail=1
  fi
}
check "--moe-router-topk 5" --num-experts 4 --moe-router-topk 5
check "--moe-router-topk 0" --num-experts 4 --moe-router-topk 0
check "--moe-router-num-groups 3 must divide --num-experts 8" --num-experts 8 --moe-router-num-groups 3 --moe-router-group-topk 1
check "--moe-router-group-topk 3 must divide --moe-router-topk 2" --num-experts 8 --moe-router-num-groups 4 --moe-router-group-topk 3
check "--moe-router-num-groups" --num-experts 8 --moe-router-num-groups 4
check "more than the 2 in each" --num-experts 8 --moe-router-topk 6 --moe-router-num-groups 4 --moe-router-group-topk 2
check "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid" --num-experts 4 --moe-router-enable-expert-bias
check "--moe-router-pre-softmax goes with" --num-experts 4 --moe-router-pre-softmax --moe-router-score-function sigmoid
check "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor" --num-experts 4 --moe-pad-expert-input-to-capacity
check "--moe-expert-capacity-factor must be positive" --num-experts 4 --moe-expert-capacity-factor -1
check "--moe-shared-expert-gate needs" --num-experts 4 --moe-shared-expert-gate
check "--moe-layer-freq '\[0,2\]'" --num-experts 4 --moe-layer-freq "[0,2]"
check "gives 3 layers; --num-layers is 2" --num-experts 4 --moe-layer-freq "([0]*1+[1]*2)"
check "--moe-layer-freq '0'" --num-experts 4 --moe-layer-freq 0
check "--moe-router-score-function: 'tanh' is not one of" --num-experts 4 --moe-router-score-function tanh
check "--num-experts must be >= 0" --num-experts -2
exit $fail
