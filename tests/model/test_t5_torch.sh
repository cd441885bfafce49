#!/usr/bin/env bash
# T5 against an independent PyTorch T5 (tests/ref/t5_ref.py, float64). The relative position
# buckets equal T5's published rule for every distance in [-300, 300], bidirectional and causal.
# Then for learned absolute positions and for the relative position bias: a small random model
# (2 + 2 layers of hidden 64, 4 heads, a vocabulary of 100 padded to 128, lengths 16 + 8) written
# by the reference into a loom checkpoint, trained 5 iterations in loom (AdamW, clipping, weight
# decay) on the mock T5 samples that `loom samples` prints for the same flags (their encoder
# inputs padded): the lm loss and grad norm of every iteration and every gradient of the first
# within 1e-5 relative, every weight after the 5 steps within 1e-4. A reference whose
# cross-attention sees the encoder's padded positions fails.
set -euo pipefail
LOOM=${LOOM:-build/loom}
BUILD=${LOOM_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/t5_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BUILD/tests/t5_buckets_check" > "$tmp/buckets.txt"
"$PYTHON" "$REF" buckets --loom "$tmp/buckets.txt"

common=(--model t5 --mock-data --vocab-size 100 --seq-length 16 --decoder-seq-length 8
        --num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128
        --micro-batch-size 2 --global-batch-size 4 --lr-decay-style constant --clip-grad 1.0
        --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0 --log-interval 1
        --eval-iters 0 --seed 1234)
for case in learned relative; do
  d="$tmp/$case" extra=() ref_extra=()
  mkdir -p "$d"
  if [ $case = relative ]; then
    extra=(--position-embedding-type relative --relative-attention-num-buckets 8
           --relative-attention-max-distance 12)
    ref_extra=(--relative --buckets 8 --max-distance 12)
  fi
  # a checkpoint of the model's form (lr 0: the weights as made), its weights then the reference's
  "$LOOM" train "${common[@]}" "${extra[@]}" --train-iters 1 --lr 0 --save "$d/init" > /dev/null
  "$PYTHON" "$REF" make --ckpt "$d/init" --hidden 64
  "$LOOM" samples --load "$d/init" --finetune "${common[@]}" "${extra[@]}" --train-iters 5 \
      --lr 1e-3 > "$d/samples.jsonl"
  "$LOOM" train --load "$d/init" --finetune "${common[@]}" "${extra[@]}" --train-iters 5 \
      --lr 1e-3 --save "$d/out" --save-grads "$d/grads" --metrics-file "$d/metrics.jsonl" \
      > "$d/train.log"
  args=(--init "$d/init" --samples "$d/samples.jsonl" --grads "$d/grads" --final "$d/out"
        --metrics "$d/metrics.jsonl" --iters 5 --micro-batch 2 --global-batch 4 --enc-seq 16
        --lr 1e-3 --clip 1.0 --wd 0.1 --heads 4 --vocab 100 "${ref_extra[@]}")
  echo "== $case"
  "$PYTHON" "$REF" check "${args[@]}"
  # the check must be able to fail: a reference without cross-attention's padding mask
  if "$PYTHON" "$REF" check "${args[@]}" --no-cross-mask > "$d/wrong.log" 2>&1; then
    echo "FAIL $case: a reference without the cross-attention padding mask passed too"; exit 1
  fi
  echo "ok   $case: a reference without the cross-attention padding mask fails" \
       "($(grep -c FAIL "$d/wrong.log") checks)"
done
