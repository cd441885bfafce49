#!/usr/bin/env bash
# BERT (--model bert, the encoder form with the LM head, pooler and sentence-order head) in every
# parallel layout gives the single-rank run: TP=2, TP=2 with sequence parallelism, PP=2 (the
# embeddings on the first stage, the heads on the last), PP=2 interleaved (2 virtual stages),
# DP=2 with the distributed optimizer, and TP=2 x PP=2, each 20 iterations with dropout on, in
# fp32 under MPI, on the mock BERT data (padded samples, token types, masked positions, sop
# labels): loss, lm loss, sop loss and grad norm at every iteration, the parameters' norm, and
# every parameter after training within 1e-5 relative. Then checkpoints reshard: 10 iterations
# on TP=2 x PP=2 saved, resumed on DP=2 with the distributed optimizer to 20, equal to the
# straight single-rank run within 1e-5.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model bert --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4
        --seq-length 16 --vocab-size 61 --make-vocab-size-divisible-by 16
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-decay-iters 20 --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 7
        --log-params-norm --save-interval 10)
fail=0 pass=0
ref="$tmp/ref"
"$LOOM" train "${common[@]}" --save "$ref" --metrics-file "$ref.jsonl" > "$ref.log" 2>&1 ||
  { echo "FAIL the single-rank run failed"; tail -5 "$ref.log"; exit 1; }
grep -q '"sop loss"' "$ref.jsonl" || { echo "FAIL no sop loss in the metrics"; exit 1; }
for l in "2 1 1" "2 1 1 sp" "1 2 1" "1 2 1 vpp" "1 1 2 dist" "2 2 1"; do
  set -- $l
  tp=$1 pp=$2 dp=$3 extra=()
  case "${4:-}" in
    vpp) extra=(--num-layers-per-virtual-pipeline-stage 1) ;;
    sp) extra=(--sequence-parallel) ;;
    dist) extra=(--use-distributed-optimizer) ;;
  esac
  n=$((tp * pp * dp))
  out="$tmp/$tp-$pp-$dp${4:-}"
  if ! loom_mpirun "$n" "$LOOM" train "${common[@]}" --tensor-model-parallel-size "$tp" \
      --pipeline-model-parallel-size "$pp" "${extra[@]}" --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
    echo "FAIL bert TP=$tp PP=$pp DP=$dp ${4:-}: the run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue
  fi
  if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "bert TP=$tp PP=$pp DP=$dp ${4:-}"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
# resharding: 10 iterations on TP=2 x PP=2, then DP=2 with the distributed optimizer
half="$tmp/half"
loom_mpirun 4 "$LOOM" train "${common[@]}" --train-iters 10 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --save "$half" --metrics-file "$half.jsonl" > "$half.log" 2>&1 &&
loom_mpirun 2 "$LOOM" train "${common[@]}" --use-distributed-optimizer --load "$half" --save "$half" \
    --metrics-file "$half.jsonl" >> "$half.log" 2>&1 || { echo "FAIL the resharded runs failed"; tail -5 "$half.log"; fail=$((fail + 1)); }
if [ -f "$half/latest_checkpointed_iteration.txt" ] &&
   "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$half.jsonl" "$half" 1e-5 "bert TP2xPP2 -> DP2 resumed at 10"; then
  pass=$((pass + 1)); else fail=$((fail + 1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
