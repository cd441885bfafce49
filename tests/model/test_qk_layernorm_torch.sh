#!/usr/bin/env bash
# Query-key LayerNorms (--qk-layernorm with --normalization LayerNorm: weights and biases of the
# head size) on a GPT-2-style model with grouped-query attention, against an independent PyTorch
# reference on loom's own checkpoint names (Hugging Face has no such GPT-2): a checkpoint's
# parameters set to random values (norm weights and biases away from their start), 3 iterations
# of AdamW with clipping and weight decay: losses, grad norms, the first iteration's gradients and
# the final parameters within 1e-4; with zero-centred norm weights (--apply-layernorm-1p) and
# without, and with heads of 12 columns on the hidden 64 (--kv-channels 12: the norms over 12).
# The key norm's bias gradient must be exactly zero.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/qk_layernorm_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention
       --num-query-groups 2 --seq-length 32 --vocab-size 100 --qk-layernorm)
common=(--mock-data --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
        --lr-decay-style constant --clip-grad 0.05 --weight-decay 0.1 --hidden-dropout 0
        --attention-dropout 0 --log-interval 1 --eval-iters 0 --seed 1234)
for case in 1p plain headsize; do
  d="$tmp/$case" extra=()
  [ "$case" = 1p ] && extra=(--apply-layernorm-1p)
  [ "$case" = headsize ] && extra=(--kv-channels 12)
  "$LOOM" train "${model[@]}" "${extra[@]}" "${common[@]}" --train-iters 1 --save "$d/start" > "$d.log0" 2>&1 ||
    { cat "$d.log0"; exit 1; }
  "$PYTHON" "$REF" perturb --ckpt "$d/start" --out "$d/init"
  "$LOOM" train --load "$d/init" --finetune "${common[@]}" --train-iters 3 --save "$d/out" \
      --save-grads "$d/grads" --metrics-file "$d/metrics.jsonl" > "$d.log"
  echo "== GPT-2-style, query-key LayerNorms ($case)"
  "$PYTHON" "$REF" check --init "$d/init" --grads "$d/grads" --final "$d/out" \
      --metrics "$d/metrics.jsonl" --iters 3 --micro-batch 2 --global-batch 4 --seq 32 \
      --lr 1e-3 --clip 0.05 --wd 0.1 --data-seed 1234
done
