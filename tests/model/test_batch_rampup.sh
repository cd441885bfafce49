#!/usr/bin/env bash
# The global batch ramp-up (--rampup-batch-size START INCREMENT SAMPLES):
# - every iteration's global batch, consumed samples and learning rate, and the number of
#   iterations, against Megatron-LM's ramp-up arithmetic (tests/ref/lr_schedule_ref.py rampup=);
# - the iterations before the batch first grows train as a run with --global-batch-size START,
#   bit for bit (the same samples, the loss averaged over the batch in force);
# - a run stopped and resumed inside the ramp gives the straight run's losses bit for bit;
# - under MPI, data-parallel (DP=2) and pipeline-parallel (PP=2, and interleaved) runs, where the
#   micro-batches per rank change with the batch, equal the single-rank run within 1e-5.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 16 --eval-iters 0 --log-interval 1
      --lr 1e-3 --lr-decay-style cosine --lr-warmup-samples 24 --train-samples 200 --seed 5)
ramp=(--rampup-batch-size 4 4 60)

# the ramp against the reference: batches 4 x 5, 8 x 3, 12 x 2, then 16 (from 68 consumed) x 8
run ramp "${ramp[@]}"
if "$PY" "$SRC/tests/ref/lr_schedule_ref.py" "$tmp/ramp.jsonl" lr=1e-3 gbs=16 train_samples=200 \
    warmup_samples=24 style=cosine rampup=4,4,60 > "$tmp/ramp.ref" 2>&1; then
  echo "ok   batches, consumed samples and learning rates as Megatron's ramp-up: $(cat "$tmp/ramp.ref")"
else
  echo "FAIL $(cat "$tmp/ramp.ref")"; fail=1
fi
grep -q "ramps up from 4 to 16 by 4 over 60 samples: 18 iterations" "$tmp/ramp.log" ||
  { echo "FAIL the log does not announce the ramp"; grep "loom:" "$tmp/ramp.log"; fail=1; }

# the first 5 iterations (batch 4) as a constant batch of 4
run const4 --global-batch-size 4
head -5 "$tmp/ramp.txt" > "$tmp/ramp5.txt"
head -5 "$tmp/const4.txt" > "$tmp/const45.txt"
ITERS=5 same const45 ramp5

# stopped at iteration 7 (inside the ramp, batch 8) and resumed
run first "${ramp[@]}" --exit-interval 7 --save "$tmp/ck"
run resumed "${ramp[@]}" --load "$tmp/ck"
cat "$tmp/first.txt" "$tmp/resumed.txt" > "$tmp/both.txt"
ITERS=18 same ramp both

# data- and pipeline-parallel ramps against the single rank
if command -v mpirun >/dev/null && ! grep -q '^LOOM_MPI:BOOL=OFF' "${LOOM_BUILD:-build}/CMakeCache.txt" 2>/dev/null; then
  source "$SRC/tests/dist/mpi_env.sh"
  run ref "${ramp[@]}" --save "$tmp/ref-ck"
  for layout in "dp2" "pp2" "pp2 vpp"; do
    set -- $layout
    extra=()
    [ "$1" = pp2 ] && extra=(--pipeline-model-parallel-size 2)
    [ "${2:-}" = vpp ] && extra+=(--num-layers-per-virtual-pipeline-stage 1)
    # the interleaved schedule needs micro-batches per rank in multiples of the stages
    r=("${ramp[@]}")
    [ "${2:-}" = vpp ] && r=(--rampup-batch-size 8 8 60)
    name="$1${2:+-$2}"
    if ! loom_mpirun 2 "$LOOM" "${base[@]}" "${r[@]}" "${extra[@]}" --save "$tmp/$name-ck" \
        --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1; then
      echo "FAIL $name: the run failed"; tail -3 "$tmp/$name.log"; fail=1; continue
    fi
    refname=ref
    if [ "${2:-}" = vpp ]; then
      run ref8 --rampup-batch-size 8 8 60 --save "$tmp/ref8-ck"
      refname=ref8
    fi
    "$PY" "$SRC/tests/ref/compare_runs.py" "$tmp/$refname.jsonl" "$tmp/$refname-ck" "$tmp/$name.jsonl" \
      "$tmp/$name-ck" 1e-5 "ramp-up $name" || fail=1
  done
else
  echo "skipped: the MPI layouts (no mpirun, or built without MPI)"
fi
[ $fail -eq 0 ] && echo "batch ramp-up: all passed"
exit $fail
