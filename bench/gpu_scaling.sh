#!/usr/bin/env bash
# Scaling on the GPUs of one host (the device tool's nvidia-h200-x2): each layout against one
# GPU running the same model, `loom train --device cuda --bf16 --mock-data`, NCCL, NVLink
# multicast off. Efficiency = tokens/s of the layout / (GPUs x tokens/s of one GPU).
#
#   data parallel   GPT-2 124M and 350M (sequence 1024, micro-batch 16): one GPU with one
#                   micro-batch a step against DP=2 with one micro-batch per rank (weak
#                   scaling: twice the global batch), gradients reduced in buckets while the
#                   backward runs (--ddp-bucket-size-mb 40); then with the distributed
#                   optimizer (the buckets reduce-scattered, the parameters all-gathered after
#                   the step) and with that gather overlapped with the next forward
#                   (--overlap-param-gather).
#   model parallel  a GPT of 1.3B (24 layers, hidden 2048, 32 heads, sequence 1024): one GPU,
#                   micro-batch 4 and 8 micro-batches a step (global batch 32), against PP=2
#                   (1F1B, the same 8 micro-batches) and TP=2 (same batch) on two GPUs.
#
#   bash bench/gpu_scaling.sh [dp] [mp]     (default both)
# Environment: LOOM (build-gpu/loom), PYTHON (python3), STEPS (10), WARMUP (3), OUT_DIR (logs;
# $OUT or bench-gpu-logs). Exit status 0 when every run finished.
set -uo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build-gpu/loom}
PY=${PYTHON:-python3}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
LOGS=${OUT_DIR:-${OUT:-bench-gpu-logs}}
PARTS=${*:-dp mp}
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
rc=0
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)

run() { # run LABEL NP FLAGS... : one training run, its summary line appended to $res
  local label=$1 np=$2
  shift 2
  local m="$LOGS/scaling-${label// /_}"
  local cmd=("$LOOM" train "$@" --train-iters $((WARMUP + STEPS)) --metrics-file "$m.metrics")
  [ "$np" -gt 1 ] && cmd=(timeout 600 mpirun --allow-run-as-root --oversubscribe --bind-to none
    -np "$np" -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH "${cmd[@]}")
  echo "== $label: ${cmd[*]}"
  if "${cmd[@]}" > "$m.log" 2>&1; then
    "$PY" bench/loom_metrics.py "$m.metrics" "$WARMUP" "$label" "$np" | tee -a "$res"
  else
    echo "$label failed:"; tail -5 "$m.log"; rc=1
  fi
}

table() { # the rows of $res with their efficiency against the first (one GPU)
  "$PY" - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if rows and rows[0]["gpus"] == 1:
    base = rows[0]
    print(f"  {'run':28} {'GPUs':>4} {'tokens/s':>10} {'ms/iter':>9} {'TFLOP/s/GPU':>11} {'MFU':>6} {'peak GiB':>9} {'efficiency':>10}")
    for r in rows:
        g = r["gpus"]
        eff = r["tokens_per_s"] / (g * base["tokens_per_s"])
        print(f"  {r['impl']:28} {g:4d} {r['tokens_per_s']:10.0f} {r['ms_per_iter']:9.1f} {r['tflops']:11.1f} "
              f"{100 * r['mfu']:5.1f}% {r['peak_mem_bytes'] / 2**30:9.2f} {100 * eff:9.1f}%")
PY
}

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $ngpu GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
if [ "$ngpu" -lt 2 ]; then echo "gpu_scaling: needs two GPUs"; exit 1; fi
common=(--mock-data --seq-length 1024 --vocab-size 50257 --hidden-dropout 0 --attention-dropout 0
        --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 --eval-iters 0 --log-interval 1
        --device cuda --bf16)
for part in $PARTS; do
case $part in
dp)
  for model in "124m 12 768 12" "350m 24 1024 16"; do
    read -r name L C NH <<< "$model"
    res="$LOGS/scaling-dp-$name.jsonl"; : > "$res"
    shape=(--num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH" --micro-batch-size 16)
    CUDA_VISIBLE_DEVICES=0 run "$name 1 GPU" 1 "${common[@]}" "${shape[@]}" --global-batch-size 16
    run "$name DP=2" 2 "${common[@]}" "${shape[@]}" --global-batch-size 32
    run "$name DP=2 dist-opt" 2 "${common[@]}" "${shape[@]}" --global-batch-size 32 \
      --use-distributed-optimizer
    run "$name DP=2 dist-opt overlap" 2 "${common[@]}" "${shape[@]}" --global-batch-size 32 \
      --use-distributed-optimizer --overlap-param-gather
    echo "-- data parallel, GPT $name (tokens/s of DP=2 against twice one GPU's):"
    table
  done
  ;;
mp)
  res="$LOGS/scaling-mp-1.3b.jsonl"; : > "$res"
  shape=(--num-layers 24 --hidden-size 2048 --num-attention-heads 32 --micro-batch-size 4
         --global-batch-size 32)
  CUDA_VISIBLE_DEVICES=0 run "1.3b 1 GPU" 1 "${common[@]}" "${shape[@]}"
  run "1.3b PP=2" 2 "${common[@]}" "${shape[@]}" --pipeline-model-parallel-size 2
  run "1.3b TP=2" 2 "${common[@]}" "${shape[@]}" --tensor-model-parallel-size 2
  echo "-- model parallel, GPT 1.3B, 8 micro-batches of 4 a step:"
  table
  ;;
*) echo "gpu_scaling: unknown part $part (dp, mp)"; exit 2 ;;
esac
done
exit $rc
