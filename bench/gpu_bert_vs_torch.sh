#!/usr/bin/env bash
# loom against PyTorch on one GPU for BERT: BERT-large's shape (24 layers, hidden 1024, 16 heads,
# FFN 4096, sequence 512, vocabulary 30522 padded to 30592, micro-batch 8), Megatron-LM's pre-LN
# BERT with the language-model head and the binary (sentence-order) head, random padded batches
# (lengths T/2 to T, about 15% of the words labelled), no dropout, AdamW (lr 1e-4, weight decay
# 0.01 on matrices) with clipping at 1.0. loom runs `loom train --model bert --mock-data --device
# cuda --bf16`; PyTorch runs bench/torch_bert.py (bf16 autocast, scaled_dot_product_attention with
# the padding mask, fused AdamW) eager and under torch.compile, in the same run. Prints one line
# per system: tokens/s (padding included, B x T a step on both sides), ms per step, model
# TFLOP/s, MFU (FLOPs per token 6 N + 12 L H T, against PEAK), peak memory, and loom's ratio to
# the faster PyTorch; checks that both sides count the same parameters.
#
#   bash bench/gpu_bert_vs_torch.sh
#   STEPS=50 BATCH=16 bash bench/gpu_bert_vs_torch.sh
#   SHAPE=tiny DEVICE=cpu LOOM=build/loom PYTHON=/usr/bin/python3 bash bench/gpu_bert_vs_torch.sh
#
# Environment: LOOM (default build-gpu/loom), PYTHON (python3), STEPS (timed steps, 20), WARMUP
# (5), BATCH (micro-batch, 8), SHAPE (large: BERT-large; base: BERT-base's 12 layers, hidden 768,
# 12 heads; tiny: 2 layers, hidden 64, 4 heads, sequence 64, vocabulary 1000, micro-batch 4 -- to
# check the script itself), DEVICE (cuda; cpu runs both sides in fp32: loom has no bf16 on the
# CPU), TORCH (0: loom only), TORCH_COMPILE (1: also torch.compile; skipped, with a note, where
# PyTorch has no torch.compile), BINARY_HEAD (1; 0: --bert-no-binary-head on both sides), MASK
# (the PyTorch side's padding mask for SDPA: bool or additive), KEPT_LAYERS (loom's
# --kept-activation-layers; default every layer), PEAK (TFLOP/s for MFU on both sides, 989),
# PROFILE (1 on cuda: one more short loom run with LOOM_CUDA_PROFILE=1, its time by op), OUT_DIR
# (logs and results; $OUT or bench-gpu-logs).
# Exit status 0 when every run finished (a skipped torch.compile counts as finished).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LOOM=${LOOM:-build-gpu/loom}
PY=${PYTHON:-python3}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
SHAPE=${SHAPE:-large}
DEVICE=${DEVICE:-cuda}
PEAK=${PEAK:-989}
MASK=${MASK:-bool}
LOGS=${OUT_DIR:-${OUT:-bench-gpu-logs}}
mkdir -p "$LOGS"
rc=0

# shape -> layers hidden heads ffn seq vocabulary micro-batch
case $SHAPE in
  large) read -r L H NH FFN SEQ VOCAB MB <<< "24 1024 16 4096 512 30522 ${BATCH:-8}" ;;
  base) read -r L H NH FFN SEQ VOCAB MB <<< "12 768 12 3072 512 30522 ${BATCH:-8}" ;;
  tiny) read -r L H NH FFN SEQ VOCAB MB <<< "2 64 4 256 64 1000 ${BATCH:-4}" ;;
  *) echo "unknown SHAPE $SHAPE (valid: large base tiny)" >&2; exit 2 ;;
esac
KEPT=${KEPT_LAYERS:-$L}
name="bert-$SHAPE"
res="$LOGS/$name.jsonl"
: > "$res"
iters=$((WARMUP + STEPS))

flags=(--model bert --mock-data --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH"
       --ffn-hidden-size "$FFN" --seq-length "$SEQ" --max-position-embeddings "$SEQ"
       --vocab-size "$VOCAB" --micro-batch-size "$MB" --hidden-dropout 0 --attention-dropout 0
       --lr 1e-4 --lr-decay-style constant --weight-decay 0.01 --clip-grad 1.0 --eval-iters 0
       --log-interval 1 --device "$DEVICE" --peak-tflops "$PEAK" --kept-activation-layers "$KEPT")
torch_flags=(--device "$DEVICE" --layers "$L" --hidden "$H" --heads "$NH" --ffn "$FFN" --seq "$SEQ"
             --batch "$MB" --vocab "$VOCAB" --peak-tflops "$PEAK" --mask "$MASK"
             --steps "$STEPS" --warmup "$WARMUP")
if [ "$DEVICE" = cuda ]; then
  flags+=(--bf16)
  label="loom --bf16"
else
  torch_flags+=(--fp32)
  label="loom fp32"
fi
if [ "${BINARY_HEAD:-1}" != 1 ]; then
  flags+=(--bert-no-binary-head)
  torch_flags+=(--no-binary-head)
fi

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $SHAPE on $DEVICE $( [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
"$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1

# loom: the step times from the metrics file (mean after the warm-up), the parameter count and
# the peak memory from its log
echo "== loom: ${flags[*]} --train-iters $iters"
loom_params=""
if "$LOOM" train "${flags[@]}" --train-iters "$iters" --metrics-file "$LOGS/loom-$name.metrics" \
    > "$LOGS/loom-$name.log" 2>&1; then
  loom_params=$(sed -n 's/^loom: \([0-9][0-9]*\) parameters.*/\1/p' "$LOGS/loom-$name.log" | head -1)
  grep -m1 "peak device memory" "$LOGS/loom-$name.log"
  grep "iteration *$iters/" "$LOGS/loom-$name.log" | grep -o "lm loss: [^|]*|.*grad norm: [^|]*" |
    sed 's/^/  last iteration: /'
  # bench/loom_metrics.py's summary, with TFLOP/s and MFU taken again from the parameter count in
  # loom's log (loom_metrics rounds them for GPU-sized figures) and checked against loom's own
  "$PY" - "$LOGS/loom-$name.metrics" "$WARMUP" "$label" "$loom_params" "$L" "$H" "$SEQ" "$PEAK" \
      <<'EOF' | tee -a "$res" || rc=1
import json, sys
sys.path.insert(0, "bench")
from loom_metrics import summarise
path, warmup, label, params, L, H, T, peak = sys.argv[1:9]
r = summarise(path, int(warmup), label)
if not params:
    raise SystemExit("no parameter count in loom's log")
r["params"] = int(params)
tflops = r["tokens_per_s"] * (6.0 * r["params"] + 12.0 * int(L) * int(H) * int(T)) / 1e12
if r["tflops"] > 0.1 and abs(tflops / r["tflops"] - 1) > 0.01:
    raise SystemExit(f"loom's TFLOP/s {r['tflops']} is not 6 N + 12 L H T's {tflops:.2f}")
r["tflops"], r["mfu"] = round(tflops, 4), round(tflops / float(peak), 6)
print(json.dumps(r))
EOF
else
  echo "loom failed:"; tail -5 "$LOGS/loom-$name.log"; rc=1
fi

have_compile=$("$PY" -c 'import torch; print(int(hasattr(torch, "compile")))' 2>/dev/null || echo 0)
for mode in eager compile; do
  [ "${TORCH:-1}" != 1 ] && continue
  extra=()
  if [ "$mode" = compile ]; then
    [ "${TORCH_COMPILE:-1}" != 1 ] && continue
    if [ "$have_compile" != 1 ]; then
      echo "== torch compile: skipped, this PyTorch has no torch.compile"
      continue
    fi
    extra=(--compile)
  fi
  echo "== torch $mode: ${torch_flags[*]} ${extra[*]}"
  if "$PY" bench/torch_bert.py "${torch_flags[@]}" "${extra[@]}" > "$LOGS/torch-$name-$mode.log" 2>&1 &&
      grep -q '^{' "$LOGS/torch-$name-$mode.log"; then
    grep '^{' "$LOGS/torch-$name-$mode.log" | tee -a "$res"
  else
    echo "torch $mode failed:"; tail -5 "$LOGS/torch-$name-$mode.log"; rc=1
  fi
done

if [ "$DEVICE" = cuda ] && [ "${PROFILE:-1}" = 1 ] && [ -n "$loom_params" ]; then
  echo "== loom device time by op and shape (LOOM_CUDA_PROFILE=1, 11 iterations, the first left out)"
  LOOM_CUDA_PROFILE=1 "$LOOM" train "${flags[@]}" --train-iters 11 > "$LOGS/loom-$name-profile.log" 2>&1 || rc=1
  sed -n '/loom cuda profile/,$p' "$LOGS/loom-$name-profile.log"
fi

# one line per system, loom's ratio to the faster PyTorch; the parameter counts compared
"$PY" - "$res" "$SHAPE" "$DEVICE" <<'EOF' || rc=1
import json, sys
path, shape, device = sys.argv[1:4]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
print(f"\nBERT {shape} on {device} ({path}):")
print(f"  {'':14} {'tokens/s':>10} {'ms/iter':>9} {'TFLOP/s':>9} {'MFU':>7} {'peak mem GiB':>13}")
for r in rows:
    mem = r.get("peak_mem_bytes", 0)
    mem_s = f"{mem / 2**30:13.2f}" if mem else f"{'-':>13}"
    if r.get("peak_mem_kind", "").startswith("process"):
        mem_s += " (RSS)"
    print(f"  {r['impl']:14} {r['tokens_per_s']:10.0f} {r['ms_per_iter']:9.1f} {r['tflops']:9.3f} "
          f"{100 * r['mfu']:6.2f}% {mem_s}")
loom = [r for r in rows if r["impl"].startswith("loom")]
torch = [r for r in rows if r["impl"].startswith("torch")]
if loom and torch:
    best = max(torch, key=lambda r: r["tokens_per_s"])
    print(f"  loom / best PyTorch ({best['impl']}): {loom[0]['tokens_per_s'] / best['tokens_per_s']:.2f}x tokens/s")
    counts = {r["impl"]: r.get("params", 0) for r in loom + torch}
    if len(set(counts.values())) != 1:
        print(f"  parameter counts differ: {counts}")
        sys.exit(1)
    print(f"  parameters: {loom[0]['params']} on every side")
EOF
exit $rc
