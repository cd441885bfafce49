#!/usr/bin/env bash
# Checkpoints of --data-parallel-sharding-strategy optim_grads_params (ZeRO-3) hold whole logical
# tensors, so every strategy resumes every other: a ZeRO-3 run (DP=2, one micro-batch a step, the
# bits of plain data parallelism: see test_zero.sh) stopped at iteration 4 and resumed with
# no_shard, optim_grads or optim_grads_params, and a no_shard run stopped there and resumed with
# optim_grads_params, end with the straight run's bits (metrics and both checkpoint files); the
# ZeRO-3 checkpoint resumed by TP=2 x DP=2 with ZeRO-3 ends within fp32 rounding of it. The bytes
# a rank keeps with DP=3 and DP=4 are ZeRO's fractions of the unsharded run's (parameters,
# gradients and two moments: optim_grads 1, 1/d, 2/d; optim_grads_params 1/d, 1/d, 2/d of the
# parameters' bytes) and the log says so. Contradictory flags get a one-line error.
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
        --global-batch-size 4 --train-iters 8 --lr 3e-3 --lr-decay-style cosine
        --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-iters 0
        --seed 11 --ddp-bucket-size 1000)
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
train() {
  local name=$1 n=$2
  shift 2
  if ! loom_mpirun "$n" "$LOOM" "${common[@]}" "$@" --save "$tmp/$name" \
      --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
    bad "$name: the run failed"; tail -3 "$tmp/$name.log"; return 1
  fi
}
metrics() { sed -E 's/.*"lr": ([^,]*), "loss": ([^,]*), "grad_norm": ([^,]*),.*/\1 \2 \3/' "$1"; }
# bits LABEL STRAIGHT RESUMED: the resumed run's 4 iterations and final checkpoint are the bits of
# the straight run's last 4; grad norms within 1e-13 (no_shard sums the squares in another order)
bits() {
  local ok=1
  paste -d' ' <(metrics "$tmp/$2.jsonl" | tail -n 4) <(metrics "$tmp/$3.jsonl") | awk '{
    d = $3 - $6; if (d < 0) d = -d; if (NF != 6 || $1 != $4 || $2 != $5 || d > 1e-13 * $3) bad = 1
  } END { exit bad }' || ok=0
  [ "$(metrics "$tmp/$3.jsonl" | wc -l)" = 4 ] || ok=0
  for f in model optim; do
    cmp -s "$tmp/$2/iter_0000008/$f.safetensors" "$tmp/$3/iter_0000008/$f.safetensors" || ok=0
  done
  if [ $ok = 1 ]; then ok "$1"; else bad "$1"; fi
}
z3=(--data-parallel-sharding-strategy optim_grads_params)

if train straight 2 "${z3[@]}" && train stop 2 "${z3[@]}" --exit-interval 4; then
  for s in no_shard optim_grads optim_grads_params; do
    train "resumed-$s" 2 --data-parallel-sharding-strategy $s --load "$tmp/stop" &&
      bits "optim_grads_params checkpoint resumed with $s: the straight run's bits" straight "resumed-$s"
  done
  if train resumed-tp 4 "${z3[@]}" --tensor-model-parallel-size 2 --load "$tmp/stop"; then
    # the straight run's first four iterations, then the resumed run's
    head -n 4 "$tmp/straight.jsonl" | cat - "$tmp/resumed-tp.jsonl" > "$tmp/joined.jsonl"
    if "$PYTHON" "$REF" "$tmp/straight.jsonl" "$tmp/straight" "$tmp/joined.jsonl" "$tmp/resumed-tp" \
         3e-6 "ZeRO-3 checkpoint resumed by TP=2 x DP=2" > "$tmp/cmp.out"; then
      ok "$(sed 's/^ok *//' "$tmp/cmp.out")"
    else bad "$(sed 's/^FAIL *//' "$tmp/cmp.out")"; fi
  fi
fi
if train stop-plain 2 --exit-interval 4; then
  train resumed-plain 2 "${z3[@]}" --load "$tmp/stop-plain" &&
    bits "no_shard checkpoint resumed with optim_grads_params: the straight run's bits" straight resumed-plain
fi

# the bytes kept: ZeRO's fractions of the unsharded run's
state() { grep -o '"state_bytes": {[^}]*}' "$1" | tail -1 | grep -oE '[0-9]+' | tr '\n' ' '; }
for d in 3 4; do
  b=(--train-iters 2 --global-batch-size $((2 * d)))
  train "mem-$d-none" "$d" "${b[@]}" &&
  train "mem-$d-z2" "$d" "${b[@]}" --data-parallel-sharding-strategy optim_grads &&
  train "mem-$d-z3" "$d" "${b[@]}" "${z3[@]}" || continue
  read -r P G O <<< "$(state "$tmp/mem-$d-none.jsonl")"
  read -r p2 g2 o2 <<< "$(state "$tmp/mem-$d-z2.jsonl")"
  read -r p3 g3 o3 <<< "$(state "$tmp/mem-$d-z3.jsonl")"
  if [ "$P" = "$G" ] && [ $((P % (16 * 4 * d))) = 0 ] && [ "$p2 $g2 $o2" = "$P $((P / d)) $((2 * P / d))" ] &&
     [ "$p3 $g3 $o3" = "$((P / d)) $((P / d)) $((2 * P / d))" ] &&
     grep -q "sharding optim_grads_params over $d ranks: this rank keeps $p3 bytes of parameters, $g3 of gradients and $o3 of optimizer state" "$tmp/mem-$d-z3.log"; then
    ok "DP=$d: kept bytes no_shard $P/$G/$O, optim_grads $p2/$g2/$o2, optim_grads_params $p3/$g3/$o3"
  else
    bad "DP=$d: kept bytes no_shard $P/$G/$O, optim_grads $p2/$g2/$o2, optim_grads_params $p3/$g3/$o3"
  fi
done

# refused: one line naming the flags, non-zero exit
refuse() {
  local label=$1
  shift
  if "$LOOM" "${common[@]}" "$@" > "$tmp/err.out" 2>&1; then bad "$label: accepted"; return; fi
  if [ "$(grep -c . "$tmp/err.out")" = 1 ] && grep -q -- "$label" "$tmp/err.out"; then
    ok "refused: $(cat "$tmp/err.out")"
  else bad "$label: $(cat "$tmp/err.out")"; fi
}
refuse --data-parallel-sharding-strategy --data-parallel-sharding-strategy optim_grads_param
refuse --use-distributed-optimizer --use-distributed-optimizer --data-parallel-sharding-strategy no_shard
refuse --overlap-param-gather --overlap-param-gather --data-parallel-sharding-strategy no_shard
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
