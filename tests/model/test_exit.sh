#!/usr/bin/env bash
# Stopping early, as Megatron-LM's flags do, with a checkpoint to resume from:
# - --exit-duration-in-mins: a limit already passed after the first iteration stops the run there
#   (exit status 0, a log line saying why), saving at iteration 1; resumed without the flag, the
#   run ends with the losses and gradient norms of the uninterrupted run, bit for bit;
# - --exit-signal-handler: SIGTERM, sent once the first iteration is logged, stops the run at the
#   end of an iteration (exit status 0, the log line), with its checkpoint and metrics at that
#   iteration.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --log-interval 1
      --lr 1e-3 --lr-decay-style cosine --lr-decay-iters 6 --seed 3)

run straight --train-iters 6
run first --train-iters 6 --exit-duration-in-mins 1e-9 --save "$tmp/ck"
if grep -q "exiting at iteration 1 after .* minutes (--exit-duration-in-mins 1e-09)" "$tmp/first.log" &&
    [ "$(cat "$tmp/ck/latest_checkpointed_iteration.txt" 2>/dev/null)" = 1 ]; then
  echo "ok   --exit-duration-in-mins: stopped and saved at iteration 1"
else
  echo "FAIL --exit-duration-in-mins did not stop at iteration 1"; tail -3 "$tmp/first.log"; fail=1
fi
run rest --train-iters 6 --load "$tmp/ck"
cat "$tmp/first.txt" "$tmp/rest.txt" > "$tmp/both.txt"
ITERS=6 same straight both

# SIGTERM once the first iteration is in the metrics; the run would go on for a long time
OMP_NUM_THREADS=1 "$LOOM" "${base[@]}" --train-iters 1000000 --exit-signal-handler \
  --save "$tmp/sig" --metrics-file "$tmp/sig.jsonl" > "$tmp/sig.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -s "$tmp/sig.jsonl" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -TERM $pid 2>/dev/null
timeout 120 tail --pid=$pid -f /dev/null
wait $pid
rc=$?
it=$(cat "$tmp/sig/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
last=$(tail -1 "$tmp/sig.jsonl" 2>/dev/null | sed -E 's/.*"iteration": ([0-9]+).*/\1/')
if [ $rc -eq 0 ] && grep -q "exiting at iteration $it: SIGTERM received" "$tmp/sig.log" &&
    [ "$last" = "$it" ] && [ "$it" -ge 1 ] && [ "$it" -lt 1000000 ]; then
  echo "ok   --exit-signal-handler: SIGTERM stopped the run at iteration $it, saved"
else
  echo "FAIL --exit-signal-handler: exit $rc, checkpoint at $it, metrics end at $last"
  tail -3 "$tmp/sig.log"; fail=1
fi
exit $fail
