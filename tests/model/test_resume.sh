#!/usr/bin/env bash
# Resume: 20 iterations straight and 10 (--exit-interval) + save + load + 10 give bit-identical losses and grad
# norms (dropout on, so the counter-based RNG state must carry over too), and the final
# checkpoints hold identical tensors; --ckpt-step resumes from an earlier iteration than the latest,
# and --skip-train evaluates a checkpoint without training. Evaluations take successive validation
# batches, and a checkpoint records how far they got. --no-save-optim leaves the optimizer state out. A resume's
# learning-rate schedule must be the checkpoint's, or --override-opt_param-scheduler /
# --use-checkpoint-opt_param-scheduler says which one wins. --save-retain-interval keeps the
# checkpoints of its multiples and the latest.
set -euo pipefail
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--mock-data --num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 16
      --vocab-size 97 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 1e-4
      --lr-decay-style cosine --lr-warmup-iters 3 --hidden-dropout 0.1 --attention-dropout 0.1
      --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 99)
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/straight.jsonl" --save "$tmp/a" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 10 --metrics-file "$tmp/resumed.jsonl" --save "$tmp/b" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/resumed.jsonl" --load "$tmp/b" --save "$tmp/b" > /dev/null
fail=0
n=$(grep -c '"loss"' "$tmp/straight.jsonl")
[ "$n" -eq 20 ] || { echo "FAIL: straight run logged $n iterations, expected 20"; fail=1; }
# after training, the test split's loss (--split's third part; the mock data's test stream): one
# object, the last
tail -1 "$tmp/straight.jsonl" | grep -q '^{"iteration": 20, "test_loss": [0-9.]*}$' ||
  { echo "FAIL: no test loss after training"; fail=1; }
strip() { sed -E 's/"ms_per_iter": [^,]*, "tokens_per_s": [^,]*, "tflops_per_rank": [^,]*, "mfu": [^,}]*//' "$1"; }
if diff <(strip "$tmp/straight.jsonl") <(strip "$tmp/resumed.jsonl"); then
  echo "ok   losses, grad norms, learning rates, validation and test losses identical over 20 iterations"
else
  echo "FAIL: resumed run differs from the straight run"; fail=1
fi
if cmp "$tmp/a/iter_0000020/model.safetensors" "$tmp/b/iter_0000020/model.safetensors" &&
   cmp "$tmp/a/iter_0000020/optim.safetensors" "$tmp/b/iter_0000020/optim.safetensors"; then
  echo "ok   final weights and optimizer state bit-identical"
else
  echo "FAIL: final checkpoints differ"; fail=1
fi
grep -q '"val_loss"' "$tmp/straight.jsonl" || { echo "FAIL: no validation loss logged"; fail=1; }
# --ckpt-step: b holds iterations 10 and 20; from 10 the run repeats the straight run's 11..20 and
# the evaluations after them
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/step.jsonl" --load "$tmp/b" \
  --ckpt-step 10 > "$tmp/step.log"
if grep -q "loaded checkpoint .*iter_0000010 at iteration 10" "$tmp/step.log" &&
   diff <(strip "$tmp/straight.jsonl" | tail -12) <(strip "$tmp/step.jsonl") > /dev/null; then
  echo "ok   --ckpt-step 10 resumes from iteration 10 (not the latest, 20): the straight run's 11..20"
else
  echo "FAIL: --ckpt-step 10"; grep -E "loaded|error" "$tmp/step.log"; fail=1
fi
# Evaluations take successive validation batches (Megatron-LM's): at 5 batches 0-1, at 10
# batches 2-3, ... ; the checkpoint records how many samples they took (2 evaluations x 2
# batches x 4 samples at iteration 10)
cv=$(grep -o '"consumed_valid_samples": [0-9]*' "$tmp/b/iter_0000010/meta.json" | sed 's/.*: //')
[ "$cv" = 16 ] && echo "ok   the checkpoint at iteration 10 records 16 validation samples consumed" ||
  { echo "FAIL: consumed_valid_samples at iteration 10: '$cv', expected 16"; fail=1; }
# --skip-train evaluates the validation set from its start: with --eval-iters 2 batches 0-1, with
# 4 batches 0-3, so the straight run's evaluation at 10 (batches 2-3) is 2 x the second - the first
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/skip.jsonl" --load "$tmp/b" \
  --ckpt-step 10 --skip-train > "$tmp/skip.log"
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/skip4.jsonl" --load "$tmp/b" \
  --ckpt-step 10 --skip-train --eval-iters 4 > /dev/null
val_of() { grep "$2" "$1" | sed -E 's/.*"val_loss": ([^,}]*).*/\1/'; }
e2=$(val_of "$tmp/skip.jsonl" val_loss) e4=$(val_of "$tmp/skip4.jsonl" val_loss)
want=$(val_of "$tmp/straight.jsonl" '"iteration": 10,')
if [ -n "$want" ] && [ -n "$e2" ] && [ -n "$e4" ] && [ ! -e "$tmp/b/iter_0000011" ] &&
   [ "$(wc -l < "$tmp/skip.jsonl")" -eq 2 ] && grep -q '"test_loss"' "$tmp/skip.jsonl" &&
   grep -q "validation loss at iteration 10 on validation set" "$tmp/skip.log" &&
   python3 -c "import sys; e2, e4, w = map(float, sys.argv[1:]); sys.exit(not (abs(2 * e4 - e2 - w) <= 1e-9 * abs(w) and e2 != w))" "$e2" "$e4" "$want"; then
  echo "ok   --skip-train: the validation set from its start ($e2 over 2 batches, $e4 over 4), the test loss, no training; the straight run's evaluation at 10 ($want) is of batches 2-3"
else
  echo "FAIL: --skip-train gave '$e2' (2 batches) and '$e4' (4), the straight run at 10 '$want'"; fail=1
fi
# the recorded count is where a resume's evaluations start: set to 0 (the first batches again),
# the evaluation at 15 is not the straight run's; left out (an older checkpoint) it is reckoned
# from the iteration and --eval-interval, the straight run's again
for v in zero none; do
  cp -r "$tmp/b/iter_0000010" "$tmp/cv-$v"
  if [ $v = zero ]; then sed -i 's/"consumed_valid_samples": 16/"consumed_valid_samples": 0/' "$tmp/cv-$v/meta.json"
  else sed -i '/"consumed_valid_samples"/d' "$tmp/cv-$v/meta.json"; fi
  "$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 15 --metrics-file "$tmp/cv-$v.jsonl" \
    --load "$tmp/cv-$v" > /dev/null
done
v15=$(val_of "$tmp/straight.jsonl" '"iteration": 15,')
if [ -n "$v15" ] && [ "$(val_of "$tmp/cv-none.jsonl" '"iteration": 15,')" = "$v15" ] &&
   [ -n "$(val_of "$tmp/cv-zero.jsonl" '"iteration": 15,')" ] &&
   [ "$(val_of "$tmp/cv-zero.jsonl" '"iteration": 15,')" != "$v15" ]; then
  echo "ok   a resume's evaluations start at the recorded count (0: not the straight run's at 15; none: reckoned, $v15)"
else
  echo "FAIL: resumed evaluations at 15: straight $v15, none $(val_of "$tmp/cv-none.jsonl" '"iteration": 15,'), zero $(val_of "$tmp/cv-zero.jsonl" '"iteration": 15,')"; fail=1
fi
# and of the last checkpoint: the test loss the straight run logged after training, bit for bit
"$LOOM" train "${args[@]}" --train-iters 20 --metrics-file "$tmp/skip20.jsonl" --load "$tmp/b" \
  --skip-train > /dev/null
test_of() { grep '"test_loss"' "$1" | sed -E 's/.*"test_loss": ([^,}]*).*/\1/'; }
if [ -n "$(test_of "$tmp/straight.jsonl")" ] &&
   [ "$(test_of "$tmp/skip20.jsonl")" = "$(test_of "$tmp/straight.jsonl")" ]; then
  echo "ok   --skip-train of iteration 20: the straight run's test loss ($(test_of "$tmp/skip20.jsonl"))"
else
  echo "FAIL: test loss of iteration 20: '$(test_of "$tmp/skip20.jsonl")' against '$(test_of "$tmp/straight.jsonl")'"; fail=1
fi
# --no-save-optim: the checkpoint holds the weights and training state only; the resumed run's
# first iteration (weights and data alone) equals the straight run's, and the optimizer restarts
"$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 10 --no-save-optim --save "$tmp/c" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 11 --metrics-file "$tmp/noopt.jsonl" --load "$tmp/c" > "$tmp/noopt.log"
first() { sed -n "$2p" "$1" | sed -E 's/.*"loss": ([^,]*), "grad_norm": ([^,]*),.*/\1 \2/'; }
if [ ! -e "$tmp/c/iter_0000010/optim.safetensors" ] && [ -e "$tmp/c/iter_0000010/model.safetensors" ] &&
   grep -q "holds no optimizer state" "$tmp/noopt.log" &&
   [ -n "$(first "$tmp/noopt.jsonl" 1)" ] && [ "$(first "$tmp/noopt.jsonl" 1)" = "$(first "$tmp/straight.jsonl" 11)" ]; then
  echo "ok   --no-save-optim: no optimizer file; the resumed run starts from the same weights"
else
  echo "FAIL: --no-save-optim"; ls "$tmp/c/iter_0000010"; cat "$tmp/noopt.log"; fail=1
fi
[ "$(cat "$tmp/b/latest_checkpointed_iteration.txt")" = 20 ] || { echo "FAIL: latest pointer"; fail=1; }
# The learning-rate schedule is checked against the checkpoint's on resume (Megatron-LM's rule):
# other flags are an error; --use-checkpoint-opt_param-scheduler resumes on the saved schedule
# (the straight run's iterations 11-20 exactly); --override-opt_param-scheduler takes the flags'
# (the rate of a run started with them)
"$LOOM" train "${args[@]}" --train-iters 20 --exit-interval 10 --save "$tmp/d" > /dev/null
lr_at() { grep "\"iteration\": $2," "$1" | sed -E 's/.*"lr": ([^,]*),.*/\1/'; }
if out=$("$LOOM" train "${args[@]}" --train-iters 20 --lr 1e-3 --load "$tmp/d" 2>&1); then
  echo "FAIL: a resume with another --lr ran"; fail=1
elif grep -q "the optimizer's schedule differs from the checkpoint's (--lr 0.001 here, 0.003 there); give the same flags, or --override-opt_param-scheduler" <<< "$out"; then
  echo "ok   a resume with another --lr is refused, naming both ways out"
else
  echo "FAIL: $out"; fail=1
fi
# so are the embedding's and output layer's own rates (--decoupled-lr)
out=$("$LOOM" train "${args[@]}" --train-iters 20 --decoupled-lr 1e-2 --load "$tmp/d" 2>&1) && rc=0 || rc=$?
if [ $rc -ne 0 ] && grep -q "(--decoupled-lr 0.01, --decoupled-min-lr 0.0001 here; -1, -1 there (-1: none))" <<< "$out"; then
  echo "ok   a resume with a --decoupled-lr the checkpoint did not have is refused"
else
  echo "FAIL: --decoupled-lr resume: $out"; fail=1
fi
# WSD's final decay is part of it: another length or shape is refused, the same flags resume
wsd=(--train-iters 20 --lr-decay-style WSD --lr-wsd-decay-iters 6)
"$LOOM" train "${args[@]}" "${wsd[@]}" --exit-interval 10 --save "$tmp/w" > /dev/null
out1=$("$LOOM" train "${args[@]}" "${wsd[@]}" --lr-wsd-decay-iters 8 --load "$tmp/w" 2>&1) && rc1=0 || rc1=$?
out2=$("$LOOM" train "${args[@]}" "${wsd[@]}" --lr-wsd-decay-style cosine --load "$tmp/w" 2>&1) && rc2=0 || rc2=$?
if [ $rc1 -ne 0 ] && [ $rc2 -ne 0 ] &&
   grep -q "(WSD's final decay over 32 samples (exponential) here, 24 (exponential) there)" <<< "$out1" &&
   grep -q "(WSD's final decay over 24 samples (cosine) here, 24 (exponential) there)" <<< "$out2" &&
   "$LOOM" train "${args[@]}" "${wsd[@]}" --load "$tmp/w" > /dev/null 2>&1; then
  echo "ok   a resume with another WSD decay length or shape is refused; the same flags resume"
else
  echo "FAIL: WSD resume: $out1 / $out2"; fail=1
fi
"$LOOM" train "${args[@]}" --train-iters 20 --lr 1e-3 --load "$tmp/d" --use-checkpoint-opt_param-scheduler \
  --metrics-file "$tmp/ckpt-sched.jsonl" > /dev/null
if diff <(strip "$tmp/ckpt-sched.jsonl") <(strip "$tmp/straight.jsonl" | tail -n 12) > /dev/null; then
  echo "ok   --use-checkpoint-opt_param-scheduler resumes on the saved schedule, bit for bit"
else
  echo "FAIL: --use-checkpoint-opt_param-scheduler"; fail=1
fi
"$LOOM" train "${args[@]}" --train-iters 20 --lr 1e-3 --metrics-file "$tmp/new-lr.jsonl" > /dev/null
"$LOOM" train "${args[@]}" --train-iters 20 --lr 1e-3 --load "$tmp/d" --override-opt_param-scheduler \
  --metrics-file "$tmp/override.jsonl" > /dev/null
if [ -n "$(lr_at "$tmp/override.jsonl" 11)" ] && [ "$(lr_at "$tmp/override.jsonl" 11)" = "$(lr_at "$tmp/new-lr.jsonl" 11)" ] &&
   [ "$(lr_at "$tmp/override.jsonl" 11)" != "$(lr_at "$tmp/straight.jsonl" 11)" ]; then
  echo "ok   --override-opt_param-scheduler takes the flags' schedule"
else
  echo "FAIL: --override-opt_param-scheduler: $(lr_at "$tmp/override.jsonl" 11) vs $(lr_at "$tmp/new-lr.jsonl" 11)"; fail=1
fi
# --save-retain-interval 4 with --save-interval 2 over 10 iterations: iterations 4 and 8 kept, 10
# (the latest) kept, 2 and 6 deleted; a retained one still loads (iteration 4 -> 6)
"$LOOM" train "${args[@]}" --train-iters 10 --save-interval 2 --save-retain-interval 4 \
  --save "$tmp/keep" > /dev/null
kept=$(cd "$tmp/keep" && ls -d iter_* | tr '\n' ' ')
if [ "$kept" = "iter_0000004 iter_0000008 iter_0000010 " ] &&
   "$LOOM" train "${args[@]}" --train-iters 10 --load "$tmp/keep" --ckpt-step 4 --exit-interval 6 \
     --metrics-file "$tmp/keep.jsonl" > /dev/null && grep -q '"iteration": 5,' "$tmp/keep.jsonl"; then
  echo "ok   --save-retain-interval keeps $kept"
else
  echo "FAIL: --save-retain-interval kept $kept (want iter_0000004 iter_0000008 iter_0000010)"; fail=1
fi
exit $fail
