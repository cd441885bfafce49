#!/usr/bin/env bash
# --data-parallel-sharding-strategy optim_grads (ZeRO-2: gradients reduce-scattered every
# micro-batch, each rank keeping its shard) and optim_grads_params (ZeRO-3: parameters too,
# gathered around each unit's forward and backward) train as optim (ZeRO-1,
# --use-distributed-optimizer, itself bit for bit plain data parallelism: see
# test_distributed_optimizer.sh), for DP=2, 3 and 4, TP=2 x DP=2 with sequence parallelism,
# PP=2 x DP=2 and interleaved PP=2 x DP=2:
#   - one micro-batch a step per rank: the same reductions in the same order, so the same bits:
#     every iteration's loss, grad norm and zero count, and the final checkpoint (model and
#     optimizer, byte for byte);
#   - three micro-batches a step: the ranks' sums of each micro-batch added up over the
#     micro-batches instead of each rank's micro-batches added up first, the same fp32 sums in
#     another order; so within fp32 rounding: losses, grad norms and
#     final weights within 3e-6 relative (L2 of each tensor's difference), ZeRO-3 the same bits as
#     ZeRO-2 (its gathers change no value).
# Checkpoints stay whole tensors: a ZeRO-3 run stopped at iteration 4 and resumed with no_shard,
# optim_grads or optim_grads_params, and a no_shard one resumed with optim_grads_params, end
# where the straight runs of the same strategies end (bit for bit with one micro-batch a step).
# The bytes each rank keeps (state_bytes of the metrics file: parameters, gradients, optimizer
# moments) are ZeRO's formulas on P, the padded flat buffer's floats counted from the model's
# table here: no_shard 4P 4P 8P, optim 4P 4P 8P/d, optim_grads 4P 4P/d 8P/d, optim_grads_params
# 4P/d 4P/d 8P/d. Bad combinations are refused with a one-line error.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
common=(train --mock-data --num-layers 4 --seq-length 16 --vocab-size 97 --hidden-size 32
        --num-attention-heads 4 --make-vocab-size-divisible-by 32 --micro-batch-size 2
        --train-iters 4 --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1
        --clip-grad 1.0 --log-interval 1 --eval-iters 0 --seed 11 --ddp-bucket-size 1000
        --log-num-zeros-in-grad)

ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
# train NAME RANKS ARGS...: $tmp/NAME.jsonl, .log, checkpoint $tmp/NAME
train() {
  local name=$1 n=$2
  shift 2
  if ! loom_mpirun "$n" "$LOOM" "${common[@]}" "$@" --save "$tmp/$name" \
      --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
    bad "$name: the run failed"; tail -3 "$tmp/$name.log"; return 1
  fi
}
metrics() {
  sed -E 's/.*"lr": ([^,]*), "loss": ([^,]*), "grad_norm": ([^,]*),.*"num_zeros": ([0-9]*).*/\1 \2 \3 \4/' "$1"
}
# bits LABEL A B [ITERS]: B's metrics equal A's last ITERS and their last checkpoints are equal
bits() {
  local label=$1 a=$2 b=$3 it=${4:-4} ok=1
  cmp -s <(metrics "$tmp/$a.jsonl" | tail -n "$it") <(metrics "$tmp/$b.jsonl") || ok=0
  [ "$(metrics "$tmp/$b.jsonl" | wc -l)" = "$it" ] || ok=0
  for f in model optim; do
    cmp -s "$tmp/$a/iter_0000004/$f.safetensors" "$tmp/$b/iter_0000004/$f.safetensors" || ok=0
  done
  if [ $ok = 1 ]; then ok "$label"; else bad "$label"; paste <(metrics "$tmp/$a.jsonl") <(metrics "$tmp/$b.jsonl") | head -3; fi
}
close() {
  if "$PYTHON" "$REF" "$tmp/$2.jsonl" "$tmp/$2" "$tmp/$3.jsonl" "$tmp/$3" "$4" "$1" > "$tmp/cmp.out" 2>&1
  then ok "$(sed "s/^ok *//" "$tmp/cmp.out")"; else bad "$(sed "s/^FAIL *//" "$tmp/cmp.out")"; fi
}

# case RANKS NAME MICRO STRATEGIES... -- ARGS...: runs of each strategy with MICRO micro-batches a
# step per rank; the first strategy's run is the reference of the others
case_() {
  local n=$1 name=$2 micro=$3 strategies=() s ref
  shift 3
  while [ "$1" != -- ]; do strategies+=("$1"); shift; done
  shift
  local dp=$((n / ${DPDIV:-1}))
  for s in "${strategies[@]}"; do
    train "$name-$s" "$n" "$@" --global-batch-size $((2 * dp * micro)) \
      --data-parallel-sharding-strategy "$s" || return
  done
  ref=${strategies[0]}
  for s in "${strategies[@]:1}"; do
    if { [ "$micro" = 1 ] && [ "${EXACT:-1}" = 1 ]; } || [ "$s-$ref" = optim_grads_params-optim_grads ]; then
      bits "$name ($n ranks, $micro micro-batch a step): $s the bits of $ref" "$name-$ref" "$name-$s"
    else
      close "$name ($n ranks, $micro micro-batches a step): $s within fp32 rounding of $ref" \
        "$name-$ref" "$name-$s" 3e-6
    fi
  done
}
# one micro-batch a step: the same sums in the same order
case_ 2 dp2 1 optim optim_grads optim_grads_params -- 
case_ 3 dp3 1 optim optim_grads_params --
case_ 4 dp4 1 optim optim_grads_params --
DPDIV=2 case_ 4 pp2 1 optim optim_grads_params -- --pipeline-model-parallel-size 2
# several: another order of the same sums
case_ 2 dp2-3 3 optim optim_grads --
case_ 2 dp2-3z3 3 optim_grads optim_grads_params --
# the layers' sequence-parallel norm gradients summed over the tensor-parallel ranks after the
# data-parallel reduction instead of before: another order again
EXACT=0 DPDIV=2 case_ 4 tp2sp 1 optim optim_grads_params -- --tensor-model-parallel-size 2 --sequence-parallel
DPDIV=2 case_ 4 vpp 2 optim optim_grads_params -- --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
# data-parallel bytes of a step (rank 0) with one micro-batch: ZeRO-2 those of ZeRO-1 (a
# reduce-scatter of the gradients and a gather of the parameters), ZeRO-3 1.5 times (two gathers,
# before the forward and the backward); besides them every strategy all-reduces the loss (two
# doubles), the grad norm's partial sum (one double) and its count of zeros (--log-num-zeros-in-grad,
# one int64): 2 (d-1) S / d bytes each
dpbytes() { grep -o '"dp": [0-9]*' "$tmp/$1.jsonl" | tail -1 | grep -oE '[0-9]+'; }
for c in "2 dp2" "3 dp3" "4 dp4"; do
  set -- $c
  d=$1 z1=$(dpbytes "$2-optim") z3=$(dpbytes "$2-optim_grads_params")
  z2=$([ "$2" = dp2 ] && dpbytes "$2-optim_grads" || echo "$z1")
  scalars=$((2 * (d - 1) * 16 / d + 2 * (2 * (d - 1) * 8 / d)))
  if [ -n "$z1" ] && [ "$z2" = "$z1" ] && [ $(( 2 * (z3 - scalars) )) = $(( 3 * (z1 - scalars) )) ]; then
    ok "DP=$d, data-parallel bytes a step: ZeRO-1 $z1, ZeRO-2 $z2, ZeRO-3 $z3 (1.5 x besides $scalars of scalars)"
  else
    bad "DP=$d, data-parallel bytes a step: ZeRO-1 $z1, ZeRO-2 $z2, ZeRO-3 $z3"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
