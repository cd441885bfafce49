#!/usr/bin/env bash
# PyTorch parity: a small random GPT-2 and a Llama-style model (RMSNorm, SwiGLU, rotary, GQA, no
# biases, untied) written by an independent PyTorch reference in Hugging Face form, imported with
# `loom convert`, trained 5 iterations in loom (AdamW, clipping, weight decay) and exported back:
# losses, grad norms, first-iteration gradients and final weights must match within 1e-4; the
# GPT-2 again with --eod-mask-loss (no loss where the input is the end-of-document token), the
# loss minimised the mean over micro-batches of each one's mean (Megatron-LM's default), and with
# --calculate-per-token-loss the mean over the global batch's tokens (the loss logged the latter
# in both, as Megatron-LM logs it); and
# a GPT-2 with the exact GELU (activation_function "gelu", PyTorch's F.gelu; loom's erf form),
# which must come back out of loom under that name; and documents packed into samples
# (Megatron-LM's --reset-position-ids and --reset-attention-mask: both, on GPT-2 with learned
# positions and on the Llama-style model with rotary ones; the mask alone on GPT-2; the positions
# alone on the Llama-style model, where rotary positions restarting matter only without the mask,
# which leaves each query just the keys of its own document) on a vocabulary of 7 whose last id 6
# ends a document: the mock sequences of stride 1 to 6 hit it every 7 tokens, so a sample of 32
# holds 4 to 6 documents (the reference prints how many); the Llama-style model with Qwen3's
# query and key norms (q_norm, k_norm: Megatron-LM's --qk-layernorm with RMSNorm), imported from
# and exported back to Qwen3's form (model_type "qwen3", checked in the exported config); and the
# Llama-style model with heads of 24 columns on a hidden size of 64 (4 query heads on 2 key/value
# groups: Megatron-LM's --kv-channels, Hugging Face's head_dim), which must come back out of loom
# with that head_dim; and the Llama-style model with Qwen2's q/k/v biases (Megatron-LM's
# --add-qkv-bias), in from and back out to Qwen2's form (a reference whose init has those biases
# zeroed fails 63 checks); and the Llama-style model with Llama 3.1's rescaled rotary frequencies
# (rope_scaling of rope_type llama3: Megatron-LM's --use-rope-scaling), and with its rotary
# positions divided by 4 (rope_type linear: --rotary-seq-len-interpolation-factor), each of which
# must come back out.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/gpt_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --train-iters 5 --micro-batch-size 2 --global-batch-size 4 --seq-length 32
        --lr 1e-3 --lr-decay-style constant --clip-grad 0.05 --weight-decay 0.1
        --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0 --seed 1234)
# the third case: Megatron-LM's --eod-mask-loss, with NullTokenizer's end-of-document id (99 with
# --vocab-size 99: the model's vocabulary of 100), which the mock sequences hit now and then
for case in gpt2 llama "gpt2 eod" "gpt2 eod-per-token" "gpt2 erf" "gpt2 docs" "llama docs" \
    "gpt2 docs-mask" "llama docs-positions" "llama decoupled" "llama qknorm" \
    "llama headdim" "llama qkvbias" "llama ropescale" "llama ropelinear"; do
  set -- $case
  arch=$1 d="$tmp/${case// /-}" extra=() ref_extra=()
  # what the log must say and the exported config.json hold, for the cases that have one
  what="" logged="" exported=""
  if [ "${2:-}" = eod ]; then
    extra=(--tokenizer-type NullTokenizer --vocab-size 99 --eod-mask-loss)
    ref_extra=(--eod 99 --micro-mean)
  elif [ "${2:-}" = eod-per-token ]; then
    extra=(--tokenizer-type NullTokenizer --vocab-size 99 --eod-mask-loss --calculate-per-token-loss)
    ref_extra=(--eod 99)
  elif [ "${2:-}" = erf ]; then
    ref_extra=(--gelu erf)
    what="the exact GELU" logged='MLP GELU (erf)' exported='"activation_function": "gelu"'
  elif [ "${2:-}" = qknorm ]; then # Qwen3's q_norm and k_norm: loom's --qk-layernorm
    ref_extra=(--qk-norm)
    what="the query-key norms" logged='queries and keys normalised' exported='"model_type": "qwen3"'
  elif [ "${2:-}" = headdim ]; then # loom takes the head size from the config's head_dim
    ref_extra=(--head-dim 24)
    what="head size 24" logged='heads 4 (groups 2, head size 24)' exported='"head_dim": 24'
  elif [ "${2:-}" = qkvbias ]; then # Qwen2's q/k/v biases: loom's --add-qkv-bias
    ref_extra=(--qkv-bias)
    what="the qkv biases" logged=', qkv bias' exported='"model_type": "qwen2"'
  elif [ "${2:-}" = ropescale ]; then # Llama 3.1's rope_scaling: loom's --use-rope-scaling
    ref_extra=(--rope-scaling 8)
    what="Llama 3.1's rotary scaling" logged='rotary frequencies scaled (Llama 3.1: factor 8, low 1, high 4, context 32)'
    exported='"rope_type": "llama3"'
  elif [ "${2:-}" = ropelinear ]; then # rope_scaling linear: --rotary-seq-len-interpolation-factor
    ref_extra=(--rope-linear 4)
    what="rotary positions interpolated" logged='rotary positions divided by 4'
    exported='"rope_type": "linear"'
  elif [ "${2:-}" = decoupled ]; then # the embedding and output layer at 4x the others' rate
    extra=(--decoupled-lr 4e-3)
    ref_extra=(--decoupled-lr 4e-3)
  elif [[ "${2:-}" = docs* ]]; then
    flags=(--reset-position-ids --reset-attention-mask)
    [ "$2" = docs-positions ] && flags=(--reset-position-ids)
    [ "$2" = docs-mask ] && flags=(--reset-attention-mask)
    extra=(--tokenizer-type NullTokenizer --vocab-size 6 "${flags[@]}")
    ref_extra=(--vocab 7 --doc-eod 6 "${flags[@]}")
  fi
  "$PYTHON" "$REF" make --arch "$arch" --out "$d/hf" "${ref_extra[@]}"
  "$LOOM" convert --loader hf --saver loom --load-dir "$d/hf" --save-dir "$d/ckpt"
  "$LOOM" train --load "$d/ckpt" --finetune "${common[@]}" "${extra[@]}" --save "$d/out" \
      --save-grads "$d/grads" --metrics-file "$d/metrics.jsonl" > "$d/train.log"
  "$LOOM" convert --loader loom --saver hf --load-dir "$d/grads" --save-dir "$d/grads_hf"
  "$LOOM" convert --loader loom --saver hf --load-dir "$d/out" --save-dir "$d/out_hf"
  echo "== $case"
  "$PYTHON" "$REF" check --arch "$arch" --init "$d/hf" --grads "$d/grads_hf" --final "$d/out_hf" \
      --metrics "$d/metrics.jsonl" --iters 5 --micro-batch 2 --global-batch 4 --seq 32 \
      --lr 1e-3 --clip 0.05 --wd 0.1 --data-seed 1234 "${ref_extra[@]}"
  if [ -n "$what" ]; then
    grep -qF -- "$exported" "$d/out_hf/config.json" && grep -qF -- "$logged" "$d/train.log" ||
      { echo "FAIL $what: not in the log ($logged), or not exported ($exported)"; exit 1; }
    echo "ok   $what logged and exported ($exported)"
  fi
done
