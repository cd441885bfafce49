#!/usr/bin/env bash
# One rank of four started with other flags or other files (mpirun's MPMD form: three ranks with
# the job's flags, one with its own): every case ends within seconds, before any work, with
# exactly one "loom: error:" line (rank 0's) naming the difference and its ranks, and a non-zero
# exit; no hang, no crash, no silent exit 0. The ranks agree at start-up (loom_comm_agree): on
# their errors so far (an unknown flag or a missing file on one rank is that rank's message) and
# on a record of the resolved settings, every flag and each input file's size and header hash.
# The same flags on every rank train as before.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
bash "$SRC/scripts/fetch_data.sh" > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$SRC/data/gpt2/vocab.json"
     --merge-file "$SRC/data/gpt2/merges.txt")
head -n 4 "$SRC/data/shakespeare.jsonl" > "$tmp/a.jsonl"
tail -n 3 "$SRC/data/shakespeare.jsonl" > "$tmp/b.jsonl"
for p in a b; do
  "$LOOM" preprocess --input "$tmp/$p.jsonl" --output-prefix "$tmp/$p" "${TOK[@]}" --append-eod \
    --workers 1 > /dev/null || { echo "FAIL preprocess $p"; exit 1; }
done
A=$tmp/a_text_document B=$tmp/b_text_document
# relative paths read from each rank's working directory: w0 (ranks 0-2) holds dataset a as d/x,
# w1 dataset b under the same name, w2 none
mkdir -p "$tmp/w0/d" "$tmp/w1/d" "$tmp/w2"
for e in idx bin; do cp "$A.$e" "$tmp/w0/d/x.$e"; cp "$B.$e" "$tmp/w1/d/x.$e"; done
M=("${TOK[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
   --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --eval-iters 0 --log-interval 1
   --lr 1e-3 --seed 5 --split 100,0,0)
pass=0 fail=0
# launch ARGS -- OTHER: ranks 0-2 take ARGS, rank 3 ARGS and OTHER (a "--wdir DIR" first in ARGS
# or OTHER: that working directory for those ranks); sets rc, secs, out, err
launch() {
  local a=() b=() wa=() wb=() side=a
  for x in "$@"; do
    if [ "$x" = -- ]; then side=b; continue; fi
    if [ $side = a ]; then a+=("$x"); else b+=("$x"); fi
  done
  if [ "${a[0]:-}" = --wdir ]; then wa=(-wdir "${a[1]}"); a=("${a[@]:2}"); fi
  if [ "${b[0]:-}" = --wdir ]; then wb=(-wdir "${b[1]}"); b=("${b[@]:2}"); fi
  [ ${#wb[@]} -eq 0 ] && wb=("${wa[@]}")
  local start=$SECONDS
  timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np 3 "${wa[@]}" "$LOOM" train "${a[@]}" : -np 1 "${wb[@]}" "$LOOM" train "${a[@]}" "${b[@]}" \
    > "$tmp/out" 2> "$tmp/err"
  rc=$? secs=$((SECONDS - start)) out=$(cat "$tmp/out") err=$(cat "$tmp/err")
}
verdict() { # verdict OK LABEL
  if [ "$1" -eq 1 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $2 (exit $rc, $secs s): $(printf '%s\n' "$err" | grep -m3 -v '^ *$' | tr '\n' ' ')"
  fi
}
# refused LABEL NEEDLE ARGS... -- OTHER...: one error line holding NEEDLE, non-zero, in seconds,
# nothing trained
refused() {
  local label=$1 needle=$2
  shift 2
  launch "$@"
  local lines ok=0
  lines=$(printf '%s\n' "$err" | grep -c '^loom: error:')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -le 20 ] && [ "$lines" -eq 1 ] &&
     grep -qF -- "$needle" <<< "$(grep '^loom: error:' <<< "$err")" &&
     ! grep -qE 'parameters, .* layers|] iteration +[0-9]+/' <<< "$out"; then ok=1; fi
  verdict $ok "$label: expected one error line with '$needle', got $lines"
}
D=(--data-path "$A")
refused "model size" "loom: error: ranks disagree on --hidden-size: 32 on ranks 0-2, 64 on rank 3" \
  "${M[@]}" "${D[@]}" -- --hidden-size 64
refused "batch" "loom: error: ranks disagree on --global-batch-size: 8 on ranks 0-2, 16 on rank 3" \
  "${M[@]}" "${D[@]}" -- --global-batch-size 16
refused "seed" "loom: error: ranks disagree on --seed: 5 on ranks 0-2, 6 on rank 3" \
  "${M[@]}" "${D[@]}" -- --seed 6
refused "learning rate" "loom: error: ranks disagree on --lr: 0.001 on ranks 0-2, 0.002 on rank 3" \
  "${M[@]}" "${D[@]}" -- --lr 2e-3
refused "schedule" "loom: error: ranks disagree on --lr-decay-style: linear on ranks 0-2, cosine on rank 3" \
  "${M[@]}" "${D[@]}" -- --lr-decay-style cosine
refused "data file" "loom: error: ranks disagree on --data-path: $A on ranks 0-2, $B on rank 3" \
  "${M[@]}" "${D[@]}" -- --data-path "$B"
refused "data file's contents" "loom: error: ranks disagree on --data-path's file d/x.idx: $(stat -c %s "$A.idx") bytes" \
  --wdir "$tmp/w0" "${M[@]}" --data-path d/x -- --wdir "$tmp/w1"
refused "unknown flag" "loom: error: [rank 3] unknown flag --no-such-flag" \
  "${M[@]}" "${D[@]}" -- --no-such-flag
refused "missing data file" "loom: error: ranks disagree on --data-path's file d/x.idx: $(stat -c %s "$A.idx") bytes, header hash" \
  --wdir "$tmp/w0" "${M[@]}" --data-path d/x -- --wdir "$tmp/w2"
grep -q "missing on rank 3" <<< "$err"
verdict $((1 - $?)) "missing data file: the file is not named missing on rank 3"
refused "missing vocabulary" "loom: error: [rank 3] " \
  "${M[@]}" "${D[@]}" -- --vocab-file "$tmp/no-such-vocab.json"
grep -q "no-such-vocab.json" <<< "$err"
verdict $((1 - $?)) "missing vocabulary: the file is not named"
refused "missing checkpoint" "loom: error: [rank 3] $tmp/no-such-ckpt" \
  "${M[@]}" "${D[@]}" -- --load "$tmp/no-such-ckpt"
refused "--save alone" "loom: error: ranks disagree on --save: not given on ranks 0-2, $tmp/ck on rank 3" \
  "${M[@]}" "${D[@]}" -- --save "$tmp/ck"
[ ! -e "$tmp/ck" ]
verdict $((1 - $?)) "--save alone: the checkpoint directory was made"
refused "tensor-parallel size" "loom: error: ranks disagree on --tensor-model-parallel-size: 1 on ranks 0-2, 2 on rank 3" \
  "${M[@]}" "${D[@]}" -- --tensor-model-parallel-size 2
refused "--help alone" "loom: error: ranks disagree on --help: not given on ranks 0-2, given on rank 3" \
  "${M[@]}" "${D[@]}" -- --help
# the same flags everywhere: trains, exit 0
launch "${M[@]}" "${D[@]}" --
ok=0
if [ $rc -eq 0 ] && ! grep -q 'loom: error' <<< "$err" && grep -qE '] iteration +2/' <<< "$out"; then ok=1; fi
verdict $ok "the same flags on every rank do not train"
echo "test_rank_mismatch: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
