#!/usr/bin/env bash
# loom against PyTorch on one GPU: GPT-2 124M (12 layers, hidden 768, 12 heads) and 350M
# (24 layers, hidden 1024, 16 heads), sequence 1024, micro-batch 16, vocabulary 50257; and, when
# asked for (MODELS=llama850m), a Llama-style model of 852.6M parameters (16 layers, hidden
# 2048, 32 query heads on 8 key/value heads, SwiGLU of 5632, RMSNorm, rotary embeddings, no
# biases, untied output layer, sequence 2048, micro-batch 4, vocabulary 32000). Random tokens, no
# dropout, AdamW with clipping. loom runs `loom train --device cuda --bf16`; PyTorch runs
# bench/torch_gpt.py (bf16 autocast, scaled_dot_product_attention, fused AdamW) eager and under
# torch.compile. Prints tokens/s, model TFLOP/s, MFU (989 TFLOP/s peak; FLOPs per
# token 6N + 12 L C T), peak memory, and loom's ratio to the faster PyTorch; then loom's time
# split by op (one more short run with LOOM_CUDA_PROFILE=1).
#
#   bash bench/gpu_vs_torch.sh                 both GPT models
#   MODELS=124m STEPS=20 bash bench/gpu_vs_torch.sh
# Environment: LOOM (default build-gpu/loom), PYTHON (python3), STEPS (timed steps, 20),
# WARMUP (5), BATCH (the GPT models' micro-batch, 16), TORCH (0: loom only), TORCH_COMPILE
# (1: also torch.compile), OUT_DIR (logs; $OUT or bench-gpu-logs), KEPT_LAYERS (loom's
# --kept-activation-layers for every model instead of the per-model value below).
# Exit status 0 when every run finished.
set -uo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build-gpu/loom}
PY=${PYTHON:-python3}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
BATCH=${BATCH:-16}
MODELS=${MODELS:-124m 350m}
LOGS=${OUT_DIR:-${OUT:-bench-gpu-logs}}
mkdir -p "$LOGS"
rc=0

# model -> arch layers hidden heads key/value-heads ffn seq micro-batch vocabulary, and loom's
# --kept-activation-layers: as many layers keep their MLP activation (instead of remaking it in
# the backward) as leave loom's peak memory below torch.compile's (8.45 GiB at 124M, 19.95 GiB at
# 350M): each kept layer takes 96 MiB at 124M and 128 MiB at 350M (micro-batch 16); 18 at 350M
# peak at 19.91 GiB (2026-12-01)
shape() {
  case $1 in
    124m) echo "gpt 12 768 12 12 3072 1024 $BATCH 50257 12" ;;
    350m) echo "gpt 24 1024 16 16 4096 1024 $BATCH 50257 18" ;;
    llama850m) echo "llama 16 2048 32 8 5632 2048 4 32000 16" ;;
    *) echo "unknown model $1 (valid: 124m 350m llama850m)" >&2; return 1 ;;
  esac
}

# loom: mean of the per-iteration times after the warm-up, from the metrics file
loom_row() { "$PY" bench/loom_metrics.py "$1" "$WARMUP" "loom --bf16"; }

table() { # json lines -> table with the ratio to the best PyTorch
  "$PY" - "$@" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    if not rows:
        continue
    print(f"\n{path.rsplit('/', 1)[-1].replace('.jsonl', '')}:")
    print(f"  {'':14} {'tokens/s':>10} {'ms/iter':>9} {'TFLOP/s':>8} {'MFU':>6} {'peak mem GiB':>13}")
    for r in rows:
        print(f"  {r['impl']:14} {r['tokens_per_s']:10.0f} {r['ms_per_iter']:9.1f} {r['tflops']:8.1f} "
              f"{100 * r['mfu']:5.1f}% {r['peak_mem_bytes'] / 2**30:13.2f}")
    loom = [r for r in rows if r["impl"].startswith("loom")]
    torch = [r for r in rows if r["impl"].startswith("torch")]
    if loom and torch:
        best = max(torch, key=lambda r: r["tokens_per_s"])
        print(f"  loom / best PyTorch ({best['impl']}): {loom[0]['tokens_per_s'] / best['tokens_per_s']:.2f}x tokens/s")
EOF
}

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
"$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1
results=()
for model in $MODELS; do
  read -r ARCH L C NH NKV FFN SEQ MB VOCAB KEPT < <(shape "$model") || { rc=1; continue; }
  res="$LOGS/$ARCH-$model.jsonl"
  : > "$res"
  iters=$((WARMUP + STEPS))
  flags=(--mock-data --num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH"
         --seq-length "$SEQ" --vocab-size "$VOCAB" --micro-batch-size "$MB" --hidden-dropout 0
         --attention-dropout 0 --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --eval-iters 0
         --log-interval 1 --device cuda --bf16 --kept-activation-layers "${KEPT_LAYERS:-$KEPT}")
  torch_flags=(--layers "$L" --hidden "$C" --heads "$NH" --seq "$SEQ" --batch "$MB"
               --vocab "$VOCAB" --arch "$ARCH")
  if [ "$ARCH" = llama ]; then
    flags+=(--group-query-attention --num-query-groups "$NKV" --ffn-hidden-size "$FFN"
            --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear
            --untie-embeddings-and-output-weights)
    torch_flags+=(--groups "$NKV" --ffn "$FFN")
  fi
  echo "== loom $model: ${flags[*]} --train-iters $iters"
  if "$LOOM" train "${flags[@]}" --train-iters "$iters" --metrics-file "$LOGS/loom-$model.metrics" \
      > "$LOGS/loom-$model.log" 2>&1; then
    loom_row "$LOGS/loom-$model.metrics" | tee -a "$res"
  else
    echo "loom $model failed:"; tail -5 "$LOGS/loom-$model.log"; rc=1
  fi
  for mode in eager compile; do
    [ "${TORCH:-1}" != 1 ] && continue
    [ "$mode" = compile ] && [ "${TORCH_COMPILE:-1}" != 1 ] && continue
    echo "== torch $model $mode"
    extra=()
    [ "$mode" = compile ] && extra=(--compile)
    if "$PY" bench/torch_gpt.py "${torch_flags[@]}" --steps "$STEPS" --warmup "$WARMUP" \
        "${extra[@]}" > "$LOGS/torch-$model-$mode.log" 2>&1; then
      grep '^{' "$LOGS/torch-$model-$mode.log" | tee -a "$res"
    else
      echo "torch $model $mode failed:"; tail -5 "$LOGS/torch-$model-$mode.log"; rc=1
    fi
  done
  echo "== loom $model device time by op and shape (LOOM_CUDA_PROFILE=1, 21 iterations, the first left out)"
  LOOM_CUDA_PROFILE=1 "$LOOM" train "${flags[@]}" --train-iters 21 > "$LOGS/loom-$model-profile.log" 2>&1 || rc=1
  sed -n '/loom cuda profile/,$p' "$LOGS/loom-$model-profile.log"
  grep -m1 "elapsed time" "$LOGS/loom-$model.log" | sed 's/.*elapsed/  first iteration: elapsed/' | cut -c1-80
  grep -m1 "peak device memory" "$LOGS/loom-$model.log"
  results+=("$res")
done
table "${results[@]}"
exit $rc
