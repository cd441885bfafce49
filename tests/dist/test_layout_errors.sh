#!/usr/bin/env bash
# Layouts that do not divide are refused before any work: exactly one "loom: error:" line (rank
# 0's) naming the flag, no model built (no parameter banner, no iteration), a non-zero exit, within
# 60 s. The vocabulary never fails to divide: it is padded (a multiple of
# --make-vocab-size-divisible-by x TP), which is checked by training with an odd vocabulary under
# TP = 2. A failure met by some ranks only (rank 0 alone; the ranks of one pipeline stage) or by
# every rank outside the collective checks (a truncated checkpoint) ends the whole job promptly
# with a non-zero exit and the failing rank's message.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
LOOM=${LOOM:-$LOOM_BUILD/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=(--mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 97
   --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --eval-iters 0 --log-interval 1)
pass=0 fail=0
# launch N args...: run N ranks under `timeout 60`; sets rc, secs, out (stdout), err (stderr)
launch() {
  local n=$1 start=$SECONDS
  shift
  timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$LOOM" train "$@" \
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
# refused N "needle" args...: exactly one error line, containing needle, nothing built
refused() {
  local n=$1 needle=$2
  shift 2
  launch "$n" "$@"
  local lines ok=0
  lines=$(printf '%s\n' "$err" | grep -c '^loom: error:')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] &&
     grep -q -- "^loom: error: .*$needle" <<< "$err" &&
     ! grep -qE 'parameters, .* layers|iteration' <<< "$out"; then ok=1; fi
  verdict $ok "$n ranks, expected one error line with '$needle', got $lines"
}
# world size vs TP x PP
refused 4 "--tensor-model-parallel-size 3 does not divide world size 4; valid: products that divide 4" "${M[@]}" \
  --hidden-size 48 --num-attention-heads 6 --tensor-model-parallel-size 3
refused 2 "= 4 does not divide world size 2" "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
# tensor parallel vs the model
refused 4 "--tensor-model-parallel-size 4 does not divide --num-attention-heads 6" "${M[@]}" \
  --hidden-size 48 --num-attention-heads 6 --tensor-model-parallel-size 4
refused 4 "--tensor-model-parallel-size 4 does not divide the 2 query groups" "${M[@]}" \
  --tensor-model-parallel-size 4 --group-query-attention --num-query-groups 2
refused 2 "--tensor-model-parallel-size 2 does not divide --ffn-hidden-size 99" "${M[@]}" \
  --tensor-model-parallel-size 2 --ffn-hidden-size 99
# pipeline vs layers
refused 2 "--pipeline-model-parallel-size 2 does not divide --num-layers 3" "${M[@]}" \
  --num-layers 3 --pipeline-model-parallel-size 2
refused 2 "--num-layers-per-virtual-pipeline-stage 3 x --pipeline-model-parallel-size 2 does not divide --num-layers 4" \
  "${M[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
refused 2 "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size > 1" "${M[@]}" \
  --num-layers-per-virtual-pipeline-stage 1
# uneven stages: the rest must split equally over the middle stages, without virtual stages
refused 3 "--decoder-first-pipeline-num-layers 1 and --decoder-last-pipeline-num-layers 0 leave 3 of --num-layers 4 to 2 middle stages" \
  "${M[@]}" --pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1
refused 2 "--decoder-first-pipeline-num-layers 5 and --decoder-last-pipeline-num-layers 0 leave -1" \
  "${M[@]}" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 5
refused 2 "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1" "${M[@]}" \
  --decoder-last-pipeline-num-layers 1
refused 2 "--num-layers 4 + 1 (the embedding) must split into --pipeline-model-parallel-size 2 equal shares" \
  "${M[@]}" --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split
refused 2 "--account-for-embedding-in-pipeline-split excludes" "${M[@]}" \
  --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split --decoder-last-pipeline-num-layers 1
refused 2 "--num-layers-per-virtual-pipeline-stage takes equal stages" "${M[@]}" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --decoder-first-pipeline-num-layers 1
# batch sizes
refused 2 "--global-batch-size 6 is not a multiple of --micro-batch-size 2 x data-parallel size 2" "${M[@]}" \
  --global-batch-size 6
refused 2 "interleaved schedule needs the micro-batches per rank" "${M[@]}" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 2
# sequence parallel vs sequence length
refused 2 "--sequence-parallel needs --seq-length 15 to be a multiple of --tensor-model-parallel-size 2" \
  "${M[@]}" --seq-length 15 --tensor-model-parallel-size 2 --sequence-parallel

# the vocabulary is padded, never refused: 97 entries under TP = 2 become 98
launch 2 "${M[@]}" --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 1
ok=0
[ $rc -eq 0 ] && grep -q 'vocab 97 (padded 98)' <<< "$out" && ok=1
verdict $ok "TP=2 with a vocabulary of 97 and --make-vocab-size-divisible-by 1 should train"

# the embedding counted as a layer of the first stage: 5 layers on 2 stages as 2 + 3
launch 2 "${M[@]}" --num-layers 5 --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split
ok=0
[ $rc -eq 0 ] && grep -q 'pipeline stages of 2 + 3 layers' <<< "$out" && ok=1
verdict $ok "--account-for-embedding-in-pipeline-split with 5 layers on 2 stages should train as 2 + 3"

# failed_alone N "needle" args...: non-zero exit within 60 s, an error line containing needle
failed_alone() {
  local n=$1 needle=$2
  shift 2
  launch "$n" "$@"
  local ok=0
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "^loom: error: .*$needle" <<< "$err" && ok=1
  verdict $ok "one rank's failure: expected '$needle'"
}
# rank 0 alone opens the metrics file; the other ranks are already waiting in the first step
failed_alone 4 "\[rank 0\] --metrics-file: cannot open" "${M[@]}" --tensor-model-parallel-size 2 \
  --metrics-file "$tmp/no/such/dir/m.jsonl"
# a checkpoint whose tensor of the last pipeline stage holds a NaN: only ranks 2 and 3 (stage 1)
# read it, and fail
"$LOOM" train "${M[@]}" --save "$tmp/ck" > /dev/null 2>&1
cp -r "$tmp/ck" "$tmp/ck-nan"
"$PYTHON" - "$tmp/ck-nan/iter_0000002/model.safetensors" <<'EOF'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", data[:8])
e = json.loads(data[8:8 + n])["decoder.layers.3.mlp.linear_fc2.bias"]
at = 8 + n + e["data_offsets"][0]
data[at:at + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(bytes(data))
EOF
failed_alone 4 "\\[rank [23]\\] .*decoder.layers.3.mlp.linear_fc2.bias' holds NaN" "${M[@]}" \
  --train-iters 4 --lr-decay-iters 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --load "$tmp/ck-nan"
# a truncated checkpoint fails on every rank (after the collective checks): the job still ends
cp -r "$tmp/ck" "$tmp/ck-truncated"
truncate -s -100 "$tmp/ck-truncated/iter_0000002/model.safetensors"
failed_alone 4 "model.safetensors: .*file truncated" "${M[@]}" --train-iters 4 --lr-decay-iters 2 \
  --tensor-model-parallel-size 2 --load "$tmp/ck-truncated"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
