#!/usr/bin/env bash
# Megatron-LM's logging. The log line's lm loss is the mean over the iterations since the last
# log line (with --log-interval 2, of iterations 1-2 and 3-4 of the run logging every one).
# --tensorboard-dir: the event file is read back by tests/ref/tb_read.py, a reader written from
# the format's definition (every record's two CRC-32C checksums verified, nothing torn), and holds
# Megatron-LM's scalars with the values the metrics file logged: at every iteration
# learning-rate, batch-size, lm loss, loss-scale, grad-norm (and params-norm with
# --log-params-norm), each also " vs samples" against the training samples consumed; the
# validation losses (in the loop, the validation set after training, the test set) as
# "lm loss validation", with --log-validation-ppl-to-tensorboard their perplexities.
# --tensorboard-log-interval, --no-log-loss-scale-to-tensorboard, --log-world-size-to-tensorboard
# and --log-timers-to-tensorboard change which scalars are written and when; the training is the
# same bit for bit; two data-parallel ranks write one file; --skip-train writes none.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3
      --lr-decay-style cosine --log-interval 1 --eval-interval 2 --eval-iters 1 --seed 3)
run plain
run tb --tensorboard-dir "$tmp/tb" --log-params-norm --log-validation-ppl-to-tensorboard \
  --log-num-zeros-in-grad --save-grads "$tmp/grads"
same plain tb
run tb2 --tensorboard-dir "$tmp/tb2" --tensorboard-log-interval 2 --no-log-loss-scale-to-tensorboard \
  --log-world-size-to-tensorboard --log-timers-to-tensorboard
same plain tb2
events() { "$PY" "$SRC/tests/ref/tb_read.py" "$(ls "$1"/events.out.tfevents.* | head -1)"; }
if [ "$(ls "$tmp/tb" | wc -l)" = 1 ] && events "$tmp/tb" > "$tmp/tb.events" &&
   events "$tmp/tb2" > "$tmp/tb2.events" &&
   "$PY" - "$tmp/tb.events" "$tmp/tb.jsonl" "$tmp/tb2.events" "$tmp/grads/model.safetensors" \
       "$tmp/tb.log" <<'PYEOF'
import array, json, math, re, struct, sys
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
ev = [json.loads(l) for l in open(sys.argv[1])]
objs = [json.loads(l) for l in open(sys.argv[2])]
rows = [o for o in objs if "loss" in o]
assert ev[0].get("file_version") == "brain.Event:2" and "tag" not in ev[0], ev[0]
sc = ev[1:]
train = {"learning-rate": "lr", "batch-size": None, "lm loss": "loss", "loss-scale": None,
         "grad-norm": "grad_norm", "num-zeros": "num_zeros", "params-norm": "params_norm"}
want_tags = set(train) | {t + " vs samples" for t in train} | {
    "lm loss validation", "lm loss validation vs samples", "lm loss validation ppl",
    "lm loss validation ppl vs samples"}
tags = {e["tag"] for e in sc}
assert tags == want_tags, f"tags {sorted(tags ^ want_tags)}"
checked = 0
for r in rows:
    it, samples = r["iteration"], r["consumed_samples"]
    for tag, key in train.items():
        want = r[key] if key else 4.0 if tag == "batch-size" else 1.0
        got = [e["value"] for e in sc if e["tag"] == tag and e["step"] == it]
        got_vs = [e["value"] for e in sc if e["tag"] == tag + " vs samples" and e["step"] == samples]
        assert got == [f32(want)] and got_vs == [f32(want)], (tag, it, got, got_vs, want)
        checked += 2
# the validation losses in order: the loop's at 2 and 4, then after training the validation
# set's and the test set's (the metrics file's, in its order), each with its perplexity
vals = [(o["iteration"], o.get("val_loss", o.get("test_loss"))) for o in objs
        if "val_loss" in o or "test_loss" in o]
assert len(vals) == 4 and [v[0] for v in vals] == [2, 4, 4, 4], vals
got = [(e["step"], e["value"]) for e in sc if e["tag"] == "lm loss validation"]
ppl = [e["value"] for e in sc if e["tag"] == "lm loss validation ppl"]
assert got == [(s, f32(v)) for s, v in vals], (got, vals)
assert ppl == [f32(math.exp(min(20.0, v))) for _, v in vals], (ppl, vals)
checked += 8
# the second run: training scalars at iterations 2 and 4 only, no loss scale, the world size,
# the iteration time at every logged iteration
ev2 = [json.loads(l) for l in open(sys.argv[3])][1:]
steps = {e["step"] for e in ev2 if e["tag"] == "lm loss"}
tags2 = {e["tag"] for e in ev2}
times = sorted(e["step"] for e in ev2 if e["tag"] == "iteration-time")
world = {e["value"] for e in ev2 if e["tag"] == "world-size"}
assert steps == {2, 4} and "loss-scale" not in tags2 and world == {1.0} and times == [1, 2, 3, 4], \
    (steps, sorted(tags2), world, times)
assert all(e["value"] > 0 for e in ev2 if e["tag"] == "iteration-time")
# --log-num-zeros-in-grad: iteration 1's count equals the zeros of the gradients it saved
# (--save-grads), counted here from the file (the padded vocabulary's rows, the key biases),
# and the log line prints it
with open(sys.argv[4], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head, data = json.loads(f.read(n)), f.read()
zeros = 0
for name, t in head.items():
    if name == "__metadata__":
        continue
    assert t["dtype"] == "F32", (name, t["dtype"])
    a = array.array("f", data[t["data_offsets"][0]:t["data_offsets"][1]])
    zeros += sum(1 for x in a if x == 0.0)
logged = [int(m) for m in re.findall(r"num zeros: (\d+)", open(sys.argv[5]).read())]
assert zeros > 0 and rows[0]["num_zeros"] == zeros and logged[:1] == [zeros], \
    (zeros, rows[0]["num_zeros"], logged)
print(f"ok   --log-num-zeros-in-grad: {zeros} zeros at iteration 1, as in the saved gradients")
print(f"ok   the event file reads back (checksums verified): {checked} scalars equal to the "
      f"metrics file's, {len(sc)} in all; --tensorboard-log-interval 2 and the switches as asked")
PYEOF
then :; else echo "FAIL the event files"; fail=1; fi
# the log line's lm loss with --log-interval 2: the mean of the two iterations' (the metrics
# file of the run logging every iteration), printed as %.6E
run every2 --log-interval 2
lines=$(grep -o 'iteration *[0-9]*/ *4 .*lm loss: [0-9.E+-]*' "$tmp/every2.log" | sed -E 's/.*lm loss: //' | tr '\n' ' ')
want=$("$PY" -c "
import json, sys
l = [r['loss'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r]
print(' '.join('%.6E' % ((l[i] + l[i + 1]) / 2) for i in (0, 2)), end=' ')" "$tmp/plain.jsonl")
if [ -n "$lines" ] && [ "$lines" = "$want" ]; then
  echo "ok   the log line's lm loss is the mean since the last line: $lines"
else
  echo "FAIL the log line's lm loss [$lines], the iterations' means [$want]"; fail=1
fi
# --log-interval 4 with --eval-interval 2: the log line at iteration 4 only (Megatron-LM's); the
# evaluation at 2 prints its validation lines and writes an object of its own, with the value of
# the run logging every iteration
run every4 --log-interval 4
if "$PY" - "$tmp/every4.log" "$tmp/every4.jsonl" "$tmp/plain.jsonl" <<'PYEOF'
import json, re, sys
log = open(sys.argv[1]).read()
lines = re.findall(r"iteration +(\d+)/ +4 \|", log)
vals = re.findall(r"validation loss at iteration (\d+) \|", log)
objs = [json.loads(l) for l in open(sys.argv[2])]
plain = {o["iteration"]: o["val_loss"] for o in map(json.loads, open(sys.argv[3])) if "loss" in o and "val_loss" in o}
at2 = [o for o in objs if o["iteration"] == 2]
assert lines == ["4"] and vals == ["2", "4"], (lines, vals)
assert at2 == [{"iteration": 2, "val_loss": plain[2]}], (at2, plain)
PYEOF
then
  echo "ok   --log-interval 4: one log line; the evaluation at 2 logged on its own, as in the run logging every iteration"
else
  echo "FAIL --log-interval 4 with evaluations at 2 and 4"; fail=1
fi
# two data-parallel ranks (when MPI is built in): one event file, rank 0's
if command -v mpirun > /dev/null && ! grep -q '^LOOM_MPI:BOOL=OFF' "${LOOM_BUILD:-build}/CMakeCache.txt" 2> /dev/null; then
  source "$SRC/tests/dist/mpi_env.sh"
  if loom_mpirun 2 "$LOOM" "${base[@]}" --tensorboard-dir "$tmp/tbdp" > "$tmp/dp.log" 2>&1 &&
     [ "$(ls "$tmp/tbdp" | wc -l)" = 1 ] && events "$tmp/tbdp" > /dev/null; then
    echo "ok   two data-parallel ranks write one event file"
  else
    echo "FAIL two ranks: $(ls "$tmp/tbdp" 2>&1)"; tail -3 "$tmp/dp.log"; fail=1
  fi
fi
# --skip-train writes no events (as Megatron-LM's evaluations then)
run skip --tensorboard-dir "$tmp/tbskip" --skip-train
if [ ! -e "$tmp/tbskip" ] || [ -z "$(ls "$tmp/tbskip")" ]; then
  echo "ok   --skip-train writes no event file"
else
  echo "FAIL --skip-train wrote $(ls "$tmp/tbskip")"; fail=1
fi
exit $fail
