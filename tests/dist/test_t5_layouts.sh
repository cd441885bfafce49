#!/usr/bin/env bash
# T5 (--model t5, learned positions and the relative position bias) under data, tensor and
# sequence parallelism gives the single-rank run: DP=2, DP=2 with the distributed optimizer,
# TP=2 and TP=2 with --sequence-parallel, 20 iterations in fp32 under MPI on the mock T5 samples
# (padded encoder inputs and decoder targets) with Megatron-LM's default dropouts (hidden and
# attention 0.1: counter-based masks, the same for every layout): loss and grad norm at every
# iteration, the parameters' norm and every parameter after training within 1e-5 relative. The
# dropout is checked to act: a run without it has other losses. Pipeline parallelism is refused
# with a one-line error naming the flag.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
CMP="$(dirname "$0")/../ref/compare_runs.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model t5 --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4
        --seq-length 16 --decoder-seq-length 8 --vocab-size 61 --make-vocab-size-divisible-by 16
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-decay-iters 20 --lr-warmup-iters 2 --weight-decay 0.1
        --clip-grad 1.0 --log-interval 1 --eval-iters 0
        --seed 7 --log-params-norm --save-interval 20)
fail=0 pass=0
for pe in learned_absolute relative; do
  ref="$tmp/ref-$pe"
  "$LOOM" train "${common[@]}" --position-embedding-type $pe --save "$ref" \
      --metrics-file "$ref.jsonl" > "$ref.log" 2>&1 ||
    { echo "FAIL the single-rank run failed"; tail -5 "$ref.log"; exit 1; }
  for layout in "DP=2" "DP=2 --use-distributed-optimizer" "TP=2 --tensor-model-parallel-size 2" \
                "TP=2+SP --tensor-model-parallel-size 2 --sequence-parallel"; do
    name=${layout%% *} extra=${layout#"$name"}
    out="$tmp/$name-$pe${extra// /}"
    # shellcheck disable=SC2086
    if ! loom_mpirun 2 "$LOOM" train "${common[@]}" --position-embedding-type $pe $extra \
        --save "$out" --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
      echo "FAIL t5 $pe $layout: the run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue
    fi
    if "$PYTHON" "$CMP" "$ref.jsonl" "$ref" "$out.jsonl" "$out" 1e-5 "t5 $pe $layout"; then
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
done
# the dropout acts: without it the first iteration's loss is another
"$LOOM" train "${common[@]}" --hidden-dropout 0 --attention-dropout 0 --train-iters 1 \
    --metrics-file "$tmp/nodrop.jsonl" > "$tmp/nodrop.log" 2>&1 ||
  { echo "FAIL the run without dropout failed"; tail -5 "$tmp/nodrop.log"; exit 1; }
if "$PYTHON" - "$tmp/ref-learned_absolute.jsonl" "$tmp/nodrop.jsonl" <<'PYEOF'
import json, sys
first = [next(json.loads(l)["loss"] for l in open(f) if '"loss"' in l) for f in sys.argv[1:]]
print(f"first lm loss with dropout {first[0]:.6f}, without {first[1]:.6f}")
sys.exit(0 if abs(first[0] - first[1]) > 1e-4 * abs(first[1]) else 1)
PYEOF
then pass=$((pass + 1)); else echo "FAIL dropout does not change the loss"; fail=$((fail + 1)); fi
# not yet: pipeline parallelism, refused in one line
if loom_mpirun 2 "$LOOM" train "${common[@]}" --pipeline-model-parallel-size 2 > "$tmp/err.log" 2>&1; then
  echo "FAIL t5 with --pipeline-model-parallel-size 2 ran"; fail=$((fail + 1))
elif grep -q -- "--model t5 runs without pipeline parallelism" "$tmp/err.log"; then
  pass=$((pass + 1))
else
  echo "FAIL t5 with --pipeline-model-parallel-size 2: not the expected error"; tail -3 "$tmp/err.log"
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
