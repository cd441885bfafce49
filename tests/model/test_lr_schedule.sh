#!/usr/bin/env bash
# The learning-rate schedule against Megatron-LM's (tests/ref/lr_schedule_ref.py, written from its
# scheduler's semantics): iteration-based (--train-iters, --lr-warmup-iters, --lr-decay-iters)
# and sample-based (--train-samples, --lr-warmup-samples, --lr-decay-samples) training,
# --lr-warmup-fraction, --lr-warmup-init, and the constant, linear, cosine, inverse-square-root
# and WSD styles (WSD's four final shapes), and the weight decay over training
# (--weight-decay-incr-style); every iteration's learning rate and weight decay within 1e-12. A schedule given in samples that equals
# one in iterations trains to the same losses bit for bit.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --log-interval 1
      --lr 1e-3 --seed 3)
# check NAME "KEY=VALUE ..." FLAGS...: one run against the reference schedule
check() {
  local name=$1 ref=$2
  shift 2
  if ! OMP_NUM_THREADS=2 "$LOOM" "${base[@]}" "$@" --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
    echo "FAIL $name: loom exited non-zero"; tail -3 "$tmp/$name.log"; fail=1; return
  fi
  # shellcheck disable=SC2086
  if "$PY" "$SRC/tests/ref/lr_schedule_ref.py" "$tmp/$name.jsonl" lr=1e-3 gbs=4 $ref > "$tmp/$name.ref" 2>&1; then
    echo "ok   $name"
  else
    echo "FAIL $name: $(cat "$tmp/$name.ref")"; fail=1
  fi
}
check iters-cosine "train_iters=10 warmup_iters=2 decay_iters=7 style=cosine min_lr=1e-4" \
  --train-iters 10 --lr-warmup-iters 2 --lr-decay-iters 7 --lr-decay-style cosine --min-lr 1e-4
check samples-cosine "train_samples=40 warmup_samples=8 decay_samples=28 style=cosine min_lr=1e-4" \
  --train-samples 40 --lr-warmup-samples 8 --lr-decay-samples 28 --lr-decay-style cosine --min-lr 1e-4
check samples-fraction "train_samples=35 warmup_fraction=0.1 style=cosine" \
  --train-samples 35 --lr-warmup-fraction 0.1 --lr-decay-style cosine
check samples-odd-warmup "train_samples=40 warmup_samples=6 decay_samples=30 style=linear" \
  --train-samples 40 --lr-warmup-samples 6 --lr-decay-samples 30
check iters-fraction-linear "train_iters=9 warmup_fraction=0.25 decay_iters=6 style=linear min_lr=2e-4" \
  --train-iters 9 --lr-warmup-fraction 0.25 --lr-decay-iters 6 --min-lr 2e-4
check iters-inverse-sqrt "train_iters=8 warmup_fraction=0.3 init=1e-4 style=inverse-square-root min_lr=4e-4" \
  --train-iters 8 --lr-warmup-fraction 0.3 --lr-warmup-init 1e-4 --lr-decay-style inverse-square-root --min-lr 4e-4
check iters-constant "train_iters=6 warmup_iters=3 init=5e-4 style=constant" \
  --train-iters 6 --lr-warmup-iters 3 --lr-warmup-init 5e-4 --lr-decay-style constant
check iters-inverse-sqrt-past-decay "train_iters=8 warmup_iters=2 decay_iters=5 style=inverse-square-root min_lr=1e-4" \
  --train-iters 8 --lr-warmup-iters 2 --lr-decay-iters 5 --lr-decay-style inverse-square-root --min-lr 1e-4
check iters-wsd-exponential "train_iters=12 warmup_iters=2 decay_iters=10 wsd_iters=4 style=WSD min_lr=1e-4" \
  --train-iters 12 --lr-warmup-iters 2 --lr-decay-iters 10 --lr-decay-style WSD --lr-wsd-decay-iters 4 --min-lr 1e-4
check iters-wsd-minus-sqrt "train_iters=10 warmup_fraction=0.1 wsd_iters=5 style=WSD wsd_style=minus_sqrt" \
  --train-iters 10 --lr-warmup-fraction 0.1 --lr-decay-style WSD --lr-wsd-decay-style minus_sqrt --lr-wsd-decay-iters 5
check samples-wsd-cosine "train_samples=40 warmup_samples=4 wsd_samples=18 style=WSD wsd_style=cosine min_lr=2e-4" \
  --train-samples 40 --lr-warmup-samples 4 --lr-decay-style WSD --lr-wsd-decay-style cosine --lr-wsd-decay-samples 18 --min-lr 2e-4
check samples-wsd-linear "train_samples=40 wsd_samples=16 style=WSD wsd_style=linear" \
  --train-samples 40 --lr-decay-style WSD --lr-wsd-decay-style linear --lr-wsd-decay-samples 16
# --decoupled-lr: the word embedding's and output layer's own peak and final rates on the same
# warmup (from --lr-warmup-init) and decay; without --decoupled-min-lr, --min-lr's
check decoupled-cosine "train_iters=10 warmup_iters=2 init=1e-4 decay_iters=8 style=cosine min_lr=1e-4 decoupled_lr=5e-3 decoupled_min_lr=2e-4" \
  --train-iters 10 --lr-warmup-iters 2 --lr-warmup-init 1e-4 --lr-decay-iters 8 --lr-decay-style cosine --min-lr 1e-4 \
  --decoupled-lr 5e-3 --decoupled-min-lr 2e-4
check decoupled-wsd "train_iters=10 style=WSD wsd_iters=4 min_lr=1e-5 decoupled_lr=2e-3" \
  --train-iters 10 --lr-decay-style WSD --lr-wsd-decay-iters 4 --min-lr 1e-5 --decoupled-lr 2e-3
# the weight decay over training (Megatron's get_wd)
check wd-linear "train_iters=8 wd_start=0.01 wd_end=0.2 wd_style=linear" \
  --train-iters 8 --weight-decay-incr-style linear --start-weight-decay 0.01 --end-weight-decay 0.2
check wd-cosine-samples "train_samples=30 wd_start=0 wd_end=0.1 wd_style=cosine" \
  --train-samples 30 --weight-decay-incr-style cosine --start-weight-decay 0 --end-weight-decay 0.1
# a changing decay whose ends agree trains as the constant one, bit for bit; a rising one not
ITERS=6
run wd-const --train-iters 6 --weight-decay 0.1
run wd-flat --train-iters 6 --weight-decay-incr-style linear --start-weight-decay 0.1 --end-weight-decay 0.1
run wd-rise --train-iters 6 --weight-decay-incr-style linear --start-weight-decay 0 --end-weight-decay 1
same wd-const wd-flat
if [ -s "$tmp/wd-rise.txt" ] && ! cmp -s "$tmp/wd-const.txt" "$tmp/wd-rise.txt"; then
  echo "ok   a rising weight decay trains otherwise"
else
  echo "FAIL a rising weight decay trains as the constant one"; fail=1
fi
# the same schedule in iterations and in samples: the same training, bit for bit
losses() { sed -E 's/.*"lr": ([^,]*), "loss": ([^,]*),.*/\1 \2/' "$tmp/$1.jsonl"; }
if [ -s "$tmp/iters-cosine.jsonl" ] && [ "$(losses iters-cosine)" = "$(losses samples-cosine)" ]; then
  echo "ok   samples-cosine trains as iters-cosine (learning rates and losses the same bits)"
else
  echo "FAIL samples-cosine differs from iters-cosine"; fail=1
fi
exit $fail
