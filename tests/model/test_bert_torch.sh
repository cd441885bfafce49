#!/usr/bin/env bash
# BERT against an independent PyTorch BERT (tests/ref/bert_ref.py, float64): a small random
# Hugging Face Megatron-BERT (MegatronBertForPreTraining: 2 layers, hidden 64, 4 heads, a
# vocabulary of 100 that loom pads to 128), imported with `loom convert`, trained 5 iterations in
# loom (AdamW, clipping, weight decay; dropout off) on the mock BERT samples that `loom samples`
# prints for the same flags, and exported back: the lm loss and sop loss of every iteration, the
# grad norm and every gradient of the first iteration within 2e-5 relative (measured: the losses
# within 9e-7, grad norms 1.5e-6, every gradient within 1e-5 but the top layer's query weight
# and bias at 1.17e-5: fp32 against float64 on attention sharpened by the reference's wide query
# and key init), every weight after the 5 steps within 1e-4. Again without the binary head (MegatronBertForMaskedLM's tensors: no
# pooler, no sop loss). A reference that drops the pooler or the token types fails.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/bert_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model bert --mock-data --vocab-size 100 --seq-length 32 --train-iters 5
        --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-style constant
        --clip-grad 1.0 --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0
        --log-interval 1 --eval-iters 0 --seed 1234)
for case in binary nobinary; do
  d="$tmp/$case" extra=() ref_extra=()
  mkdir -p "$d"
  if [ $case = nobinary ]; then extra=(--bert-no-binary-head) ref_extra=(--no-binary-head); fi
  "$PYTHON" "$REF" make --out "$d/hf" --vocab 100 --hidden 64 --layers 2 --heads 4 --ffn 128 \
      --max-pos 32 "${ref_extra[@]}"
  "$LOOM" convert --loader hf --saver loom --load-dir "$d/hf" --save-dir "$d/ckpt"
  "$LOOM" samples --load "$d/ckpt" "${common[@]}" "${extra[@]}" > "$d/samples.jsonl"
  "$LOOM" train --load "$d/ckpt" --finetune "${common[@]}" "${extra[@]}" --save "$d/out" \
      --save-grads "$d/grads" --metrics-file "$d/metrics.jsonl" > "$d/train.log"
  "$LOOM" convert --loader loom --saver hf --load-dir "$d/grads" --save-dir "$d/grads_hf"
  "$LOOM" convert --loader loom --saver hf --load-dir "$d/out" --save-dir "$d/out_hf"
  args=(--init "$d/hf" --samples "$d/samples.jsonl" --grads "$d/grads_hf" --final "$d/out_hf"
        --metrics "$d/metrics.jsonl" --iters 5 --micro-batch 2 --global-batch 4 --lr 1e-3
        --clip 1.0 --wd 0.1 --tol 2e-5 "${ref_extra[@]}")
  echo "== $case"
  "$PYTHON" "$REF" check "${args[@]}"
  # the check must be able to fail: a reference without the token types (and the pooler)
  for wrong in --drop-token-types --drop-pooler; do
    [ $case = nobinary ] && [ $wrong = --drop-pooler ] && continue
    if "$PYTHON" "$REF" check "${args[@]}" "$wrong" > "$d/wrong.log" 2>&1; then
      echo "FAIL $case: a reference with $wrong passed too"; exit 1
    fi
    echo "ok   $case: a reference with $wrong fails ($(grep -c FAIL "$d/wrong.log") checks)"
  done
done
