#!/usr/bin/env bash
# 1-bit Adam against an independent PyTorch simulation of W workers (tests/ref/onebit_ref.py) for
# W = 2, 3 and 4: three warmup steps of averaged-gradient Adam without bias correction, then five
# compressed steps; parameters, momentum, variance and every rank's worker and server error
# buffers within 1e-6 relative (L2), and the bytes each rank sends per compressed step counted by
# the comm layer: exactly the packed signs twice and two scales, at most 1/25 of an fp32
# all-reduce's (about 1/32). The helper runs loom's own functions (loom/onebit.h) over MPI.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/onebit_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$PYTHON" "$REF" make "$tmp" 2 3 4 || { echo "FAIL: the inputs"; exit 1; }
for W in 2 3 4; do
  loom_mpirun "$W" "$LOOM_TESTBIN/onebit_check" "$tmp/W$W" "$tmp/W$W/out" > "$tmp/run$W.log" 2>&1 ||
    { echo "FAIL W=$W: the run failed"; tail -3 "$tmp/run$W.log"; }
done
"$PYTHON" "$REF" check "$tmp" 2 3 4 || fail=1

# Training with --optimizer onebit-adam (DP=2, DP=2 x TP=2, DP=2 x PP=2): the replicas stay the
# same bits (the weight hashes compared every 2 iterations), and each compressed step's
# data-parallel traffic is the packed signs and scales of the rank's momentum (the n floats the
# log names, padded to 8 W) plus the loss's all-reduce (two doubles), at most 1/25 of a warmup
# step's (an fp32 all-reduce of the gradients). A run stopped within the warmup and resumed ends
# with the straight run's bits.
LOOM=${LOOM:-$LOOM_BUILD/loom}
common=(train --mock-data --num-layers 4 --seq-length 16 --vocab-size 97 --hidden-size 32
        --num-attention-heads 4 --make-vocab-size-divisible-by 32 --micro-batch-size 2
        --global-batch-size 8 --train-iters 8 --lr 1e-3 --log-interval 1 --eval-iters 0 --seed 11
        --check-weight-hash-across-dp-replicas-interval 2 --optimizer onebit-adam
        --onebit-freeze-step 3)
train() {
  local name=$1 n=$2
  shift 2
  loom_mpirun "$n" "$LOOM" "${common[@]}" "$@" --metrics-file "$tmp/$name.jsonl" --save "$tmp/$name" \
    > "$tmp/$name.log" 2>&1 || { echo "FAIL $name: the run failed"; tail -3 "$tmp/$name.log"; fail=1; return 1; }
}
for layout in "4 tp --tensor-model-parallel-size 2" "4 pp --pipeline-model-parallel-size 2" "2 dp"; do
  set -- $layout
  n=$1 name=$2
  shift 2
  train "$name" "$n" "$@" || continue
  read -r warm comp < <(grep -o '"dp": [0-9]*' "$tmp/$name.jsonl" | grep -oE '[0-9]+' | sed -n '1p;8p' | tr '\n' ' ')
  # rank 0's momentum: n floats (its log line), padded to 8 W = 16
  floats=$(grep -oE 'momentum of [0-9]+ floats' "$tmp/$name.log" | head -1 | grep -oE '[0-9]+')
  npad=$(( (floats + 15) / 16 * 16 ))
  want=$(( 2 * (npad / 2 / 8) + 2 * 4 + 16 ))
  if [ "$(grep -c 'replicas are the same' "$tmp/$name.log")" = 4 ] && [ "$comp" = "$want" ] &&
     [ $((comp * 25)) -le "$warm" ]; then
    echo "ok   1-bit Adam, $name ($n ranks): replicas the same; data-parallel bytes a step $warm in the warmup, $comp compressed (1/$((warm / comp)))"
  else
    echo "FAIL 1-bit Adam, $name ($n ranks): bytes $warm, $comp (want $want); $(grep -c 'replicas are the same' "$tmp/$name.log") hash checks"; fail=1
  fi
done
# stopped within the warmup and resumed: the same bits (no error yet to lose); stopped after it:
# the errors restart from zero, as DeepSpeed's, and training goes on with the replicas the same
if train stop2 2 --exit-interval 2 && train resumed2 2 --load "$tmp/stop2"; then
  if cmp -s "$tmp/dp/iter_0000008/model.safetensors" "$tmp/resumed2/iter_0000008/model.safetensors"; then
    echo "ok   1-bit Adam resumed within its warmup: the straight run's bits"
  else echo "FAIL 1-bit Adam resumed within its warmup"; fail=1; fi
fi
if train stop5 2 --exit-interval 5 && train resumed5 2 --load "$tmp/stop5"; then
  if [ "$(grep -c 'replicas are the same' "$tmp/resumed5.log")" = 2 ]; then
    echo "ok   1-bit Adam resumed after its warmup: runs on, replicas the same"
  else echo "FAIL 1-bit Adam resumed after its warmup"; fail=1; fi
fi
for bad in "--use-distributed-optimizer|not with --use-distributed-optimizer" \
           "--onebit-freeze-step 0|--onebit-freeze-step 0: give at least 1"; do
  flags=${bad%%|*} msg=${bad#*|}
  # shellcheck disable=SC2086
  if "$LOOM" "${common[@]}" $flags > "$tmp/err" 2>&1 || [ "$(grep -c . "$tmp/err")" != 1 ] ||
     ! grep -q -- "$msg" "$tmp/err"; then
    echo "FAIL 1-bit Adam with $flags: $(cat "$tmp/err")"; fail=1
  else echo "ok   refused: $(cat "$tmp/err")"; fi
done
exit $fail
