#!/usr/bin/env bash
# Saves that cannot strand a run. A training run (saves at 2, 4 and 6) is killed (SIGKILL) just
# before each rename and fsync of its saves, one point a run (the test-only LOOM_TEST_KILL_AT hook
# of src/core/fileio.c), and at random moments; so is a finished run launched again with --load
# (which saves its last iteration again), with the same flags and with a flag that changes what
# meta.json records (so the directory is replaced: swapped in one step, and with
# LOOM_TEST_NO_EXCHANGE=1 by the fallback's two renames). After every kill the same command with
# --load must work, finish equal to the uninterrupted run (losses, evaluations, checkpoint bytes)
# and leave no temporary directory behind. Also: the state a kill between the fallback's two
# renames leaves (pointer naming a missing directory) loads, with a warning; a save that fails
# (a file size limit) leaves nothing behind and a retry succeeds; no checkpoint holds a
# non-finite value; --check-for-nan-in-loss-and-grad names the rank and the iteration.
set -uo pipefail
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 97 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --lr-warmup-iters 2
      --hidden-dropout 0.1 --log-interval 1 --eval-interval 3 --eval-iters 1 --seed 5
      --train-iters 6 --save-interval 2)
fail=0
strip() { sed -E 's/"ms_per_iter": [^,]*, "tokens_per_s": [^,]*, "tflops_per_rank": [^,]*, "mfu": [^,}]*//' "$1"; }
"$LOOM" train "${args[@]}" --save "$tmp/ref" --metrics-file "$tmp/ref.jsonl" > /dev/null ||
  { echo "FAIL: the uninterrupted run"; exit 1; }

# what a checkpoint root may hold once a run has finished: checkpoints and the pointer only
stale() { find "$1" -mindepth 1 -maxdepth 1 \( -name '*.tmp.*' -o -name '*.old.*' \) | head -3; }
same_ckpt() { # DIR: its iter_0000006 equals the uninterrupted run's, byte for byte
  for f in model.safetensors optim.safetensors meta.json; do
    cmp -s "$1/iter_0000006/$f" "$tmp/ref/iter_0000006/$f" || return 1
  done
  [ "$(cat "$1/latest_checkpointed_iteration.txt")" = 6 ]
}
# finish the run in DIR after a kill, as a user would: the same command with --load (without it
# when no checkpoint was complete yet); it must succeed and end equal to the uninterrupted run
recover() { # DIR LABEL
  local d=$1 label=$2 load=()
  if [ -e "$d/latest_checkpointed_iteration.txt" ] ||
     [ -n "$(find "$d" -mindepth 1 -maxdepth 1 -regex '.*/iter_[0-9]+' 2> /dev/null)" ]; then
    load=(--load "$d")
  fi
  rm -f "$tmp/rec.jsonl"
  if ! "$LOOM" train "${args[@]}" "${load[@]}" --save "$d" --metrics-file "$tmp/rec.jsonl" \
      > "$tmp/rec.log" 2>&1; then
    echo "FAIL: $label: the run with ${load[*]:---load} failed: $(grep error "$tmp/rec.log")"
    return 1
  fi
  local n; n=$(wc -l < "$tmp/rec.jsonl")
  if ! diff <(strip "$tmp/ref.jsonl" | tail -n "$n") <(strip "$tmp/rec.jsonl") > /dev/null; then
    echo "FAIL: $label: the resumed run's metrics differ from the uninterrupted run's"; return 1
  fi
  if ! same_ckpt "$d"; then echo "FAIL: $label: the final checkpoint differs"; return 1; fi
  local left; left=$(stale "$d")
  if [ -n "$left" ]; then echo "FAIL: $label: left behind: $left"; return 1; fi
  return 0
}

# 1. a run from scratch, killed before each rename/fsync of its three saves
points=0 bad=0
for ((n = 1; n < 400; n++)); do
  rm -rf "$tmp/d"
  (LOOM_TEST_KILL_AT=$n "$LOOM" train "${args[@]}" --save "$tmp/d" > /dev/null; exit $?) 2> /dev/null
  rc=$?
  [ $rc -eq 0 ] && break
  [ $rc -eq 137 ] || { echo "FAIL: kill point $n: exit status $rc, not a SIGKILL"; bad=1; break; }
  points=$n
  recover "$tmp/d" "training killed at point $n" || bad=1
done
[ "$points" -ge 30 ] || { echo "FAIL: only $points kill points in three saves"; bad=1; }
[ $bad -eq 0 ] && echo "ok   training killed at each of its $points renames/fsyncs: every --load works and ends equal to the uninterrupted run, nothing left behind" || fail=1

# 2. a finished run launched again (its last iteration saved again), killed at each point: with
#    the same flags (the same bytes: the checkpoint is kept), and with --hidden-dropout 0.2, which
#    meta.json records (the directory is replaced), swapped and by the fallback's renames
for mode in same changed changed-fallback; do
  extra=() env=()
  [ $mode != same ] && extra=(--hidden-dropout 0.2)
  [ $mode = changed-fallback ] && env=(LOOM_TEST_NO_EXCHANGE=1)
  points=0 bad=0
  for ((n = 1; n < 200; n++)); do
    rm -rf "$tmp/d"; cp -r "$tmp/ref" "$tmp/d"
    (env "${env[@]}" LOOM_TEST_KILL_AT=$n "$LOOM" train "${args[@]}" "${extra[@]}" --load "$tmp/d" \
      --save "$tmp/d" > /dev/null; exit $?) 2> /dev/null
    rc=$?
    [ $rc -eq 0 ] && break
    [ $rc -eq 137 ] || { echo "FAIL: $mode relaunch, point $n: exit status $rc"; bad=1; break; }
    points=$n
    recover "$tmp/d" "$mode relaunch killed at point $n" || bad=1
    grep -q "loaded checkpoint $tmp/d at iteration 6" "$tmp/rec.log" ||
      { echo "FAIL: $mode relaunch killed at point $n: iteration 6 not loaded"; bad=1; }
  done
  [ "$points" -ge 2 ] || { echo "FAIL: $mode relaunch: only $points kill points"; bad=1; }
  [ $bad -eq 0 ] && echo "ok   a finished run launched again ($mode) killed at each of its $points renames/fsyncs: every --load works" || fail=1
done
# the same-flags relaunch leaves the checkpoint as it was (no second copy written)
rm -rf "$tmp/d"; cp -a "$tmp/ref" "$tmp/d"; touch -d '2001-01-01' "$tmp/d/iter_0000006"
"$LOOM" train "${args[@]}" --load "$tmp/d" --save "$tmp/d" > /dev/null 2>&1
if same_ckpt "$tmp/d" && [ "$(stat -c %Y "$tmp/d/iter_0000006")" = "$(date -d 2001-01-01 +%s)" ]; then
  echo "ok   a finished run launched again keeps its complete last checkpoint untouched"
else
  echo "FAIL: the relaunch rewrote iter_0000006"; fail=1
fi

# 3. the state a kill between the fallback's two renames leaves (before this fix, every later
#    --load failed): the old copy aside, the new one in its temporary, the pointer naming neither
rm -rf "$tmp/d"; cp -r "$tmp/ref" "$tmp/d"
mv "$tmp/d/iter_0000006" "$tmp/d/iter_0000006.old.4242"
cp -r "$tmp/d/iter_0000006.old.4242" "$tmp/d/iter_0000006.tmp.4242"
"$LOOM" train "${args[@]}" --load "$tmp/d" --skip-train > "$tmp/w.log" 2>&1
if grep -q "warning: .*names iteration 6, but .* is missing or incomplete; loading .*iter_0000006.old.4242" "$tmp/w.log" &&
   grep -q "loaded checkpoint .* at iteration 6" "$tmp/w.log" && recover "$tmp/d" "pointer to a missing directory"; then
  echo "ok   a pointer naming a missing directory: --load warns and takes the complete copy; the next save puts it back"
else
  echo "FAIL: pointer naming a missing directory"; grep error "$tmp/w.log"; fail=1
fi

# 4. random kills (delays from a fixed seed)
RANDOM=27; bad=0; kills=0
for i in $(seq 1 12); do
  rm -rf "$tmp/d"
  delay=$(printf '0.%03d' $((RANDOM % 400)))
  (timeout -s KILL "$delay" "$LOOM" train "${args[@]}" --save-interval 1 --save "$tmp/d" > /dev/null; exit $?) 2> /dev/null
  [ $? -eq 137 ] && kills=$((kills + 1))
  recover "$tmp/d" "random kill after ${delay}s" || bad=1
done
[ $bad -eq 0 ] && echo "ok   $kills of 12 runs killed at random moments: every --load works and ends equal to the uninterrupted run" || fail=1

# 5. a failed save (a file size limit: the write fails with EFBIG) leaves nothing behind, and a
#    later save succeeds; stale temporaries of killed saves are removed at the next save
rm -rf "$tmp/d"
(trap '' XFSZ; ulimit -f 100; "$LOOM" train "${args[@]}" --save "$tmp/d" > "$tmp/f.log" 2>&1)
rc=$?
mkdir -p "$tmp/d/iter_0000002.tmp.999999" "$tmp/d/iter_0000004.old.1"
echo x > "$tmp/d/latest_checkpointed_iteration.txt.tmp.77"
mkdir "$tmp/d/iter_0000003.tmp.other"  # not one of loom's names: left alone
if [ $rc -ne 0 ] && grep -q "error: .*cannot write" "$tmp/f.log" &&
   [ -z "$(find "$tmp/d" -mindepth 1 -maxdepth 1 -name '*.tmp.[0-9]*' ! -name '*999999' ! -name '*.77')" ] &&
   "$LOOM" train "${args[@]}" --save "$tmp/d" > /dev/null 2>&1 && same_ckpt "$tmp/d" &&
   [ "$(find "$tmp/d" -mindepth 1 -maxdepth 1 -name '*.tmp.*' -o -mindepth 1 -maxdepth 1 -name '*.old.*' | xargs -n1 basename)" = iter_0000003.tmp.other ]; then
  echo "ok   a failed save leaves nothing; the next save removes stale temporaries (loom's names only) and succeeds"
else
  echo "FAIL: failed save (rc $rc): $(grep error "$tmp/f.log"); left: $(ls "$tmp/d")"; fail=1
fi

# 6. divergence: with --clip-grad 0 and a huge learning rate a step leaves Inf/NaN weights while
#    its loss and gradient norm were finite; no checkpoint may hold them
rm -rf "$tmp/d"
"$LOOM" train "${args[@]}" --clip-grad 0 --lr 1e39 --save-interval 1 --save "$tmp/d" > "$tmp/n.log" 2>&1
rc=$?
finite() { # every tensor of every checkpoint in DIR is finite
  python3 - "$1" <<'PY'
import array, glob, json, math, struct, sys
bad = 0
for f in glob.glob(sys.argv[1] + "/*/*.safetensors"):
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    a = array.array("f"); a.frombytes(b[8 + n:])
    bad += sum(1 for x in a if not math.isfinite(x))
sys.exit(bad != 0)
PY
}
last=$(cat "$tmp/d/latest_checkpointed_iteration.txt" 2> /dev/null || echo none)
if [ $rc -ne 0 ] && grep -q "^loom: error: iteration $((last + 1)): .* holds a non-finite value .*not saved" "$tmp/n.log" &&
   [ -z "$(stale "$tmp/d")" ] && finite "$tmp/d"; then
  echo "ok   a step that leaves non-finite weights is not saved (one-line error; checkpoints up to $last, all finite; nothing left)"
else
  echo "FAIL: non-finite state: rc $rc, $(ls -A "$tmp/d" 2>/dev/null | tr '\n' ' ')"; grep error "$tmp/n.log"; fail=1
fi
"$LOOM" train "${args[@]}" --clip-grad 0 --lr 1e39 --check-for-nan-in-loss-and-grad > "$tmp/c.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c error "$tmp/c.log")" = 1 ] &&
   grep -q "^loom: error: rank 0: found NaN in local forward loss calculation at iteration [0-9]* (--check-for-nan-in-loss-and-grad)$" "$tmp/c.log"; then
  echo "ok   --check-for-nan-in-loss-and-grad: a one-line error naming the rank and the iteration"
else
  echo "FAIL: --check-for-nan-in-loss-and-grad (rc $rc): $(grep error "$tmp/c.log")"; fail=1
fi
exit $fail
