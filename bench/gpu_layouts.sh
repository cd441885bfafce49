#!/usr/bin/env bash
# Hybrid layouts on 4 or 8 GPUs of one host, with a weak-scaling table in the form of
# Megatron-LM's (model, TP, PP, DP, GPUs, batch, TFLOP/s per GPU, MFU), and a correctness check
# of each run against a reference run of the same model on fewer GPUs (loss and grad norm of
# every one of the 20 iterations within 2e-2 relative: bf16 rounding differs between layouts).
#
#   bash bench/gpu_layouts.sh            the runs that fit the GPUs present (nvidia-smi -L)
#   RUNS="1.3b:tp4" bash bench/gpu_layouts.sh     one run by name (see the list below)
# Models (bf16, sequence 2048, vocabulary 50257, no dropout, mock data):
#   1.3b  24 layers, hidden 2048, 32 heads;   reference: one GPU
#   7b    32 layers, hidden 4096, 32 heads;   reference: TP=2 on two GPUs
# Environment: LOOM (build-gpu/loom), PYTHON (python3), ITERS (20), WARMUP (5: iterations left
# out of the timing), OUT_DIR (logs; $OUT or bench-gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build-gpu/loom}
PY=${PYTHON:-python3}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
LOGS=${OUT_DIR:-${OUT:-bench-gpu-logs}}
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)

# name:label  GPUS TP PP DP VPP(layers per virtual stage, 0 = off) SP MICRO GLOBAL
RUN_TABLE="
1.3b:ref      1 1 1 1 0 0 4 64
1.3b:tp4      4 4 1 1 0 0 4 64
1.3b:pp4      4 1 4 1 0 0 4 64
1.3b:tp2dp2   4 2 1 2 0 0 4 64
1.3b:tp8      8 8 1 1 0 0 4 64
1.3b:tp4dp2   8 4 1 2 0 0 4 64
1.3b:tp2pp2dp2sp 8 2 2 2 0 1 1 64
1.3b:pp8vpp   8 1 8 1 1 0 4 64
1.3b:dp8      8 1 1 8 0 0 4 64
7b:ref        2 2 1 1 0 0 1 64
7b:tp8        8 8 1 1 0 0 1 64
7b:tp4dp2     8 4 1 2 0 0 1 64
7b:tp2pp2dp2sp 8 2 2 2 0 1 1 64
7b:pp8vpp     8 1 8 1 1 0 1 64
"
model_flags() {
  case $1 in
    1.3b) echo "--num-layers 24 --hidden-size 2048 --num-attention-heads 32" ;;
    7b) echo "--num-layers 32 --hidden-size 4096 --num-attention-heads 32" ;;
  esac
}
common=(--mock-data --seq-length 2048 --vocab-size 50257 --hidden-dropout 0 --attention-dropout 0
        --lr 1e-4 --lr-warmup-iters 2 --weight-decay 0.01 --clip-grad 1.0 --eval-iters 0
        --log-interval 1 --seed 7 --device cuda --bf16 --train-iters "$ITERS")

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
want=${RUNS:-}
if [ -z "$want" ]; then # every run that fits, the references first
  want="$(echo "$RUN_TABLE" | awk -v n="$ngpu" 'NF && $2 <= n && $1 ~ /:ref$/ {print $1}')
$(echo "$RUN_TABLE" | awk -v n="$ngpu" 'NF && $2 <= n && $1 !~ /:ref$/ {print $1}')"
fi
res="$LOGS/layouts.jsonl"
: > "$res"
rc=0
for name in $want; do
  read -r _ gpus tp pp dp vpp sp mb gb < <(echo "$RUN_TABLE" | awk -v k="$name" '$1 == k')
  [ -z "${gpus:-}" ] && { echo "gpu_layouts: no run named $name"; rc=1; continue; }
  [ "$gpus" -gt "$ngpu" ] && { echo "skip $name: needs $gpus GPUs, $ngpu present"; continue; }
  model=${name%%:*}
  flags=("${common[@]}" $(model_flags "$model") --tensor-model-parallel-size "$tp"
         --pipeline-model-parallel-size "$pp" --micro-batch-size "$mb" --global-batch-size "$gb")
  [ "$vpp" -gt 0 ] && flags+=(--num-layers-per-virtual-pipeline-stage "$vpp")
  [ "$sp" -gt 0 ] && flags+=(--sequence-parallel)
  m="$LOGS/layout-${name/:/-}"
  cmd=("$LOOM" train "${flags[@]}" --metrics-file "$m.metrics")
  [ "$gpus" -gt 1 ] && cmd=(timeout 1200 mpirun --allow-run-as-root --oversubscribe --bind-to none
    -np "$gpus" -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH "${cmd[@]}")
  echo "== $name: ${cmd[*]}"
  if ! "${cmd[@]}" > "$m.log" 2>&1; then echo "$name failed:"; tail -5 "$m.log"; rc=1; continue; fi
  "$PY" - "$m.metrics" "$WARMUP" "$name" "$gpus" "$tp" "$pp" "$dp" "$gb" "$LOGS/layout-$model-ref.metrics" <<'PY' | tee -a "$res"
import json, os, sys
sys.path.insert(0, "bench")
from loom_metrics import summarise
path, warm, name, gpus, tp, pp, dp, gb, ref = sys.argv[1:10]
r = summarise(path, int(warm), name, int(gpus))
r.update(tp=int(tp), pp=int(pp), dp=int(dp), batch=int(gb))
if not name.endswith(":ref") and os.path.exists(ref):
    a = [r for r in map(json.loads, open(ref)) if "loss" in r]
    b = [r for r in map(json.loads, open(path)) if "loss" in r]
    worst = max(max(abs(x["loss"] - y["loss"]) / abs(x["loss"]),
                    abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"])) for x, y in zip(a, b))
    r["worst_rel_diff_vs_ref"] = worst
    r["matches_ref"] = len(a) == len(b) and worst <= 2e-2
print(json.dumps(r))
PY
done
"$PY" - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n| model | TP | PP | DP | GPUs | batch | tokens/s | TFLOP/s per GPU | MFU | peak GiB | vs reference |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m, _, lay = r["impl"].partition(":")
    ok = "reference" if lay == "ref" else (f"{'ok' if r.get('matches_ref') else 'FAIL'} "
                                          f"({r.get('worst_rel_diff_vs_ref', float('nan')):.1e})")
    print(f"| {m} {lay} | {r['tp']} | {r['pp']} | {r['dp']} | {r['gpus']} | {r['batch']} | "
          f"{r['tokens_per_s']:.0f} | {r['tflops']:.1f} | {100 * r['mfu']:.1f}% | "
          f"{r['peak_mem_bytes'] / 2**30:.1f} | {ok} |")
bad = [r for r in rows if r.get("matches_ref") is False]
sys.exit(1 if bad else 0)
PY
[ $? -ne 0 ] && rc=1
exit $rc
