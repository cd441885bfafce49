#!/usr/bin/env bash
# loom vs PyTorch: the same small GPT trained on the CPU, in one run.
#
#   bench/cpu_vs_torch.sh [BUILD_DIR]          (BUILD_DIR defaults to build; needs BUILD_DIR/loom)
#
# Model (both sides): GPT-2 layout, 4 layers, hidden 256, 4 heads, FFN 1024, sequence 256,
# micro-batch 8 (2048 tokens a step), tied output layer, fp32, no dropout, AdamW (weight decay
# 0.01 on matrices), gradient clipping at 1.0. Two vocabularies: 8192, and GPT-2's 50257 (padded
# to 50304 on both sides), where the output layer and the cross-entropy dominate.
# loom: `loom train --mock-data`, per-iteration times from --metrics-file.
# PyTorch: bench/torch_cpu_gpt.py, eager, torch.set_num_threads(THREADS), AdamW(foreach=True),
#   run with OMP_WAIT_POLICY=PASSIVE (its matrix products run on OpenBLAS's own threads, which
#   otherwise compete with OpenMP workers spinning after each parallel region: 3-4x slower here).
# Both run with OPENBLAS_CORETYPE removed from the environment, so that each side uses the
# kernels OpenBLAS (and, for loom, its own re-exec) picks for this CPU; set KEEP_CORETYPE=1 to
# keep an inherited value.
#
# Each round runs loom then PyTorch (the order alternates between rounds, so slow phases of a
# shared machine hit both); each side's figure is the median step time of ITERS steps after
# WARMUP. Printed: per round tokens/s of each and the ratio loom/PyTorch; then per vocabulary
# the median over rounds and the range (min-max).
#
# Environment: ROUNDS (3), ITERS (10), WARMUP (3), THREADS (2), VOCABS ("8192 50257"),
#              TORCH_DEFAULT=1 also measures PyTorch without OMP_WAIT_POLICY, COMPILE=1 also tries
#              torch.compile.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
LOOM=$BUILD/loom
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
VOCABS=${VOCABS:-"8192 50257"}
[ -x "$LOOM" ] || { echo "cpu_vs_torch: no $LOOM (build first: cmake -S . -B $BUILD && cmake --build $BUILD)" >&2; exit 1; }
"$PYTHON" -c "import torch" 2>/dev/null || { echo "cpu_vs_torch: $PYTHON cannot import torch" >&2; exit 1; }
if [ "${KEEP_CORETYPE:-0}" != 1 ]; then unset OPENBLAS_CORETYPE; fi
L=4 C=256 NH=4 T=256 B=8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "cpu_vs_torch: $(date -u +%Y-%m-%dT%H:%MZ) | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores | load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: L=$L C=$C NH=$NH T=$T B=$B fp32 AdamW, $THREADS threads, median of $ITERS steps after $WARMUP, $ROUNDS rounds"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset}; OpenBLAS picks: $("$PYTHON" -c "import ctypes; l=ctypes.CDLL('libopenblas.so.0'); l.openblas_get_corename.restype=ctypes.c_char_p; print(l.openblas_get_corename().decode())" 2>/dev/null || echo '?')"
echo "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

# median step (ms) of loom's iterations after the warm-up -> stdout
loom_ms() {
    local V=$1 m="$tmp/loom.jsonl"
    OMP_NUM_THREADS=$THREADS "$LOOM" train --mock-data --num-layers $L --hidden-size $C \
        --num-attention-heads $NH --seq-length $T --micro-batch-size $B --global-batch-size $B \
        --vocab-size "$V" --train-iters $((WARMUP + ITERS)) --log-interval 1 --eval-iters 0 \
        --hidden-dropout 0 --attention-dropout 0 --lr 1e-4 --weight-decay 0.01 --clip-grad 1.0 \
        --metrics-file "$m" > "$tmp/loom.log" 2>&1 || { cat "$tmp/loom.log" >&2; return 1; }
    "$PYTHON" -c "
import json, statistics, sys
r = [x['ms_per_iter'] for x in map(json.loads, open(sys.argv[1])) if 'loss' in x][$WARMUP:]
print(statistics.median(r))" "$m"
}

# median step (ms) of PyTorch -> stdout (or the error it reported, on stderr)
torch_ms() {
    local V=$1 policy=$2 out
    shift 2
    out=$(env ${policy:+OMP_WAIT_POLICY=$policy} "$PYTHON" bench/torch_cpu_gpt.py --layers $L \
          --hidden $C --heads $NH --seq $T --batch $B --vocab "$V" --warmup "$WARMUP" \
          --iters "$ITERS" --threads "$THREADS" "$@") || true
    "$PYTHON" -c "
import json, sys
r = json.loads(sys.argv[1] or '{\"error\": \"no output\"}')
if 'error' in r: print(r['error'], file=sys.stderr); sys.exit(1)
print(r['median_ms'])" "$out"
}

summary="$tmp/summary"
: > "$summary"
for V in $VOCABS; do
    echo
    echo "== vocabulary $V"
    printf "%-6s %14s %14s %8s\n" round "loom tok/s" "torch tok/s" ratio
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            lm=$(loom_ms "$V"); tm=$(torch_ms "$V" PASSIVE)
        else
            tm=$(torch_ms "$V" PASSIVE); lm=$(loom_ms "$V")
        fi
        "$PYTHON" -c "
import sys
lm, tm, n = float(sys.argv[1]), float(sys.argv[2]), $B * $T
print('%-6s %14.0f %14.0f %8.2f' % (sys.argv[3], n / lm * 1e3, n / tm * 1e3, tm / lm))
open(sys.argv[4], 'a').write('%s %f %f\n' % (sys.argv[5], n / lm * 1e3, n / tm * 1e3))" \
            "$lm" "$tm" "$r" "$summary" "$V"
    done
    if [ "${TORCH_DEFAULT:-0}" = 1 ]; then
        tm=$(torch_ms "$V" "")
        echo "PyTorch with libgomp's default wait policy: $("$PYTHON" -c "print('%.0f' % ($B * $T / float('$tm') * 1e3))") tok/s"
    fi
    if [ "${COMPILE:-0}" = 1 ]; then
        if tm=$(torch_ms "$V" PASSIVE --compile 2>"$tmp/compile.err"); then
            echo "PyTorch torch.compile: $("$PYTHON" -c "print('%.0f' % ($B * $T / float('$tm') * 1e3))") tok/s"
        else
            echo "PyTorch torch.compile: not measured ($(cat "$tmp/compile.err"))"
        fi
    fi
done

echo
"$PYTHON" - "$summary" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    v, l, t = line.split()
    rows.setdefault(v, []).append((float(l), float(t)))
print("summary (median over rounds, range in brackets)")
for v, rs in rows.items():
    l = [a for a, _ in rs]; t = [b for _, b in rs]; q = [a / b for a, b in rs]
    print(f"  vocab {v:>6}: loom {statistics.median(l):7.0f} tok/s [{min(l):.0f}-{max(l):.0f}]"
          f" | PyTorch {statistics.median(t):7.0f} tok/s [{min(t):.0f}-{max(t):.0f}]"
          f" | loom/PyTorch {statistics.median(q):.2f}x [{min(q):.2f}-{max(q):.2f}]")
PY
