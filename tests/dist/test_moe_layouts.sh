#!/usr/bin/env bash
# MoE layers in every parallel layout give the single-rank run: a GPT-2-style model with MoE
# layers 0 and 2 of 4 (--moe-layer-freq 2; 4 GELU experts with biases, top-2, balancing and
# z-losses) and a Llama-style one (every layer MoE: 4 SwiGLU experts, sigmoid scores with the
# expert bias, a capacity factor, shared experts with their gate), 20 iterations with dropout, in
# fp32 under MPI: the first at TP=2 with sequence parallelism (the experts' fc1 split by columns
# and fc2 by rows as the dense MLP's), DP=2 and TP=2 x PP=2, the second at TP=2, PP=2 and DP=2
# with the distributed optimizer (the expert bias, updated alike on every rank, stays whole). Loss, grad norm and the
# parameters' norm at every iteration, every parameter after training (the expert bias too), and
# the logged load_balancing_loss, z_loss and expert load must equal the single-rank run within
# 1e-5 relative.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--mock-data --num-layers 4 --seq-length 16 --vocab-size 97 --make-vocab-size-divisible-by 32
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 11
        --log-params-norm)
gpt=(--hidden-size 32 --num-attention-heads 4 --num-experts 4 --moe-router-topk 2
     --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 --moe-layer-freq 2)
llama=(--hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 48 --normalization RMSNorm
       --swiglu --position-embedding-type rope --disable-bias-linear
       --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2
       --moe-ffn-hidden-size 24 --moe-router-score-function sigmoid
       --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2
       --moe-expert-capacity-factor 1.5 --moe-shared-expert-intermediate-size 16
       --moe-shared-expert-gate --moe-aux-loss-coeff 1e-2)
fail=0 pass=0
gpt_layouts=("2 1 1 sp" "1 1 2" "2 2 1")
llama_layouts=("2 1 1" "1 2 1" "1 1 2 do")
for model in gpt llama; do
  declare -n margs=$model lays=${model}_layouts
  ref="$tmp/$model-ref"
  "$LOOM" train "${common[@]}" "${margs[@]}" --save "$ref" --metrics-file "$ref.jsonl" > "$ref.log"
  for l in "${lays[@]}"; do
    set -- $l
    tp=$1 pp=$2 dp=$3 extra=()
    [ "${4:-}" = sp ] && extra=(--sequence-parallel)
    [ "${4:-}" = do ] && extra=(--use-distributed-optimizer)
    n=$((tp * pp * dp))
    out="$tmp/$model-$tp-$pp-$dp${4:-}" label="$model TP=$tp PP=$pp DP=$dp ${4:-}"
    if ! loom_mpirun "$n" "$LOOM" train "${common[@]}" "${margs[@]}" --tensor-model-parallel-size "$tp" \
        --pipeline-model-parallel-size "$pp" "${extra[@]}" --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
      echo "FAIL $label: the run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue
    fi
    if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "$label" &&
       "$PYTHON" - "$ref.jsonl" "$out.jsonl" "$label" <<'PYEOF'; then
import json, sys
import numpy as np
a, b = ([r for r in map(json.loads, open(p)) if "loss" in r] for p in sys.argv[1:3])
worst = 0.0
for x, y in zip(a, b):
    for k in ("load_balancing_loss", "z_loss", "expert_load"):
        if k not in x:
            continue
        u, v = np.array(x[k], float), np.array(y[k], float)
        worst = max(worst, float(np.abs(u - v).max() / max(np.abs(u).max(), 1e-30)))
ok = len(a) == len(b) == 20 and worst <= 1e-5
print(f"{'ok  ' if ok else 'FAIL'} {sys.argv[3]}: load_balancing_loss, z_loss, expert load: worst "
      f"relative difference {worst:.2e}")
sys.exit(0 if ok else 1)
PYEOF
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
