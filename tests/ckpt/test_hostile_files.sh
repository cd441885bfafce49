#!/usr/bin/env bash
# Hostile input files: every reader refuses them with one line "loom: error: ..." naming the
# file (or the tensor, the key), exit 1, in seconds and without unbounded memory. Cases: a FIFO
# in place of each file loom reads (model.safetensors, meta.json, config.json, the pointer file,
# vocab.json, merges.txt, .bin, .idx); "num_layers" 2^62 in meta.json (train --load, generate,
# convert) and "n_layer" 2^62 in config.json; a safetensors header one byte short and a data
# section longer than its tensors; NaN and Inf weights (train --load, generate, convert both
# ways); meta.json contradicting the tensors (no bias, fewer layers, rope with a position table),
# an unknown format or format_version, a key of the wrong JSON type; config.json's n_layer 1
# with two layers' tensors, a wrong type; duplicate ids in vocab.json; a pointer file reading
# "4abc"; --global-batch-size -4; control bytes from a file escaped in the error line.
set -uo pipefail
LOOM=${LOOM:-build/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
VOCAB=$SRC/data/gpt2/vocab.json MERGES=$SRC/data/gpt2/merges.txt
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB" --merge-file "$MERGES")

# The memory bound: 4 GiB of address space, or under AddressSanitizer (scripts/sanitize.sh sets
# ASAN_OPTIONS; its shadow memory alone reserves terabytes of address space) 4000 MB resident
limit_memory() { ulimit -v 4000000; }
if [ -n "${ASAN_OPTIONS:-}" ]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:hard_rss_limit_mb=4000:allocator_may_return_null=1"
  limit_memory() { :; }
fi

# expect NAME PATTERN CMD...: CMD fails (exit 1, not killed, within 10 s and the memory bound)
# with one line on stderr, "loom: error: ..." matching the extended regex PATTERN
expect() {
  local name=$1 pat=$2
  shift 2
  (limit_memory; timeout 10 "$@" </dev/null >/dev/null 2>"$tmp/err")
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -qE "^loom: error: .*($pat)" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $name: exit $rc, $lines lines: $(head -c 400 "$tmp/err" | cat -v)"
  fi
}

# a small GPT-2 form model (learned positions, biases, LayerNorm, tied), its HF export
MODEL=(--num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --vocab-size 50257)
TRAIN=(--mock-data "${MODEL[@]}" --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --log-interval 100
       --eval-iters 0 --seed 3)
# train --load: the model's flags left out (the checkpoint's), one iteration more
LOADTRAIN=(--mock-data --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --log-interval 100
           --eval-iters 0 --seed 3 --train-iters 3 --override-opt_param-scheduler)
"$LOOM" train "${TRAIN[@]}" --train-iters 2 --save "$tmp/ck" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: setup train: $(cat "$tmp/err")"; exit 1; }
"$LOOM" convert --loader loom --saver hf --load-dir "$tmp/ck" --save-dir "$tmp/hf" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: setup convert: $(cat "$tmp/err")"; exit 1; }
IT=$tmp/ck/iter_0000002

# copy of the checkpoint (or HF directory) $1 as $2
ckcopy() { rm -rf "$2"; cp -r "$1" "$2"; }
# the three readers of a loom checkpoint directory ROOT
on_ckpt() { # NAME PATTERN ROOT
  expect "$1 (train --load)" "$2" "$LOOM" train "${LOADTRAIN[@]}" --load "$3"
  expect "$1 (generate)" "$2" "$LOOM" generate --load "$3" "${TOK[@]}" --prompt "a" --max-new-tokens 2 --greedy
  expect "$1 (convert)" "$2" "$LOOM" convert --loader loom --saver hf --load-dir "$3" --save-dir "$tmp/out.hf"
}
on_hf() { # NAME PATTERN HFDIR
  expect "$1 (convert hf)" "$2" "$LOOM" convert --loader hf --saver loom --load-dir "$3" --save-dir "$tmp/out.ck"
}

# ---- FIFOs ----
NOTREG="not a regular file"
for f in model.safetensors meta.json; do
  ckcopy "$tmp/ck" "$tmp/c"
  rm "$tmp/c/iter_0000002/$f" && mkfifo "$tmp/c/iter_0000002/$f"
  on_ckpt "fifo $f" "$f.*$NOTREG" "$tmp/c"
done
ckcopy "$tmp/ck" "$tmp/c"
rm "$tmp/c/latest_checkpointed_iteration.txt" && mkfifo "$tmp/c/latest_checkpointed_iteration.txt"
expect "fifo pointer file" "latest_checkpointed_iteration.txt.*$NOTREG" \
  "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/c" --save-dir "$tmp/out.hf"
for f in model.safetensors config.json; do
  ckcopy "$tmp/hf" "$tmp/h"
  rm "$tmp/h/$f" && mkfifo "$tmp/h/$f"
  on_hf "fifo $f" "$f.*$NOTREG" "$tmp/h"
done
mkfifo "$tmp/vocab.fifo" "$tmp/merges.fifo"
expect "fifo vocab.json" "vocab.fifo.*$NOTREG" "$LOOM" generate --load "$tmp/ck" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$tmp/vocab.fifo" --merge-file "$MERGES" --prompt a --max-new-tokens 1
expect "fifo merges.txt" "merges.fifo.*$NOTREG" "$LOOM" generate --load "$tmp/ck" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$VOCAB" --merge-file "$tmp/merges.fifo" --prompt a --max-new-tokens 1
head -n 2 "$SRC/data/shakespeare.jsonl" >"$tmp/d.jsonl"
if "$LOOM" preprocess --input "$tmp/d.jsonl" --output-prefix "$tmp/d" "${TOK[@]}" --append-eod >/dev/null 2>"$tmp/err"; then
  for ext in bin idx; do
    mkdir -p "$tmp/ds_$ext"
    cp "$tmp/d_text_document.bin" "$tmp/d_text_document.idx" "$tmp/ds_$ext/"
    rm "$tmp/ds_$ext/d_text_document.$ext" && mkfifo "$tmp/ds_$ext/d_text_document.$ext"
    expect "fifo .$ext" "d_text_document.$ext.*$NOTREG" "$LOOM" train "${TOK[@]}" "${MODEL[@]}" \
      --data-path "$tmp/ds_$ext/d_text_document" --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 \
      --train-iters 2 --eval-iters 0 --log-interval 100
  done
else
  fail=$((fail + 1)); echo "FAIL: preprocess: $(cat "$tmp/err")"
fi

# ---- JSON edits ----
# jset FILE PYEXPR: apply PYEXPR to the JSON object o of FILE
jset() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
p = sys.argv[1]
o = json.load(open(p))
exec(sys.argv[2])
json.dump(o, open(p, "w"), indent=2)
PY
}
meta_case() { # NAME PATTERN PYEXPR
  ckcopy "$tmp/ck" "$tmp/c"
  jset "$tmp/c/iter_0000002/meta.json" "$3"
  on_ckpt "$1" "$2" "$tmp/c"
}
hf_case() { # NAME PATTERN PYEXPR
  ckcopy "$tmp/hf" "$tmp/h"
  jset "$tmp/h/config.json" "$3"
  on_hf "$1" "$2" "$tmp/h"
}
meta_case "num_layers 2^62" "num_layers|--num-layers|too large" 'o["model"]["num_layers"] = 2**62'
meta_case "hidden_size 2^40" "hidden_size|--hidden-size|too large|no head_dim" 'o["model"]["hidden_size"] = 2**40'
hf_case "n_layer 2^62" "n_layer|num_layers|--num-layers|too large" 'o["n_layer"] = 2**62'
meta_case "no bias, bias tensors" "bias.*(not|unexpected|extra)|(not|unexpected|extra).*bias|no Hugging Face equivalent" \
  'o["model"]["add_bias_linear"] = False'
meta_case "fewer layers than tensors" "layers\.1\." 'o["model"]["num_layers"] = 1'
meta_case "rope with a position table" "position_embeddings|no Hugging Face equivalent" \
  'o["model"]["position_embedding_type"] = "rope"'
meta_case "unknown format" "format" 'o["format"] = "loom-xyz"'
meta_case "unknown format_version" "format_version" 'o["format_version"] = 7'
meta_case "format_version of the wrong type" "format_version" 'o["format_version"] = "1"'
meta_case "iteration of the wrong type" "iteration" 'o["iteration"] = "2"'
meta_case "seed of the wrong type" "seed" 'o["seed"] = "3"'
meta_case "loss_scale of the wrong type" "loss_scale" 'o["loss_scale"] = "1"'
meta_case "control bytes escaped" 'family.*\\x1b' 'o["family"] = "\x1b[31mred"'
hf_case "n_layer 1, two layers' tensors" "h\.1\." 'o["n_layer"] = 1'
hf_case "layer_norm_epsilon of the wrong type" "layer_norm_epsilon" 'o["layer_norm_epsilon"] = "1e-5"'

# ---- safetensors data ----
# stedit FILE PYCODE: edit the tensors' bytes (d: bytearray of the data section, h: the header
# dict, hb: header bytes) of a safetensors file, then write it back (with `out` if set)
stedit() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hb = b[8:8 + n]
h = json.loads(hb)
d = bytearray(b[8 + n:])
out = None
exec(sys.argv[2])
if out is None:
    out = struct.pack("<Q", len(hb)) + hb + bytes(d)
open(p, "wb").write(out)
PY
}
# the header one byte short: the header text padded with spaces, its length one less
SHORT='t = json.dumps(h).encode() + b"        "
out = struct.pack("<Q", len(t) - 1) + t + bytes(d)'
LONGER='d += b"\0\0\0\0"'
NAN='import math
o = h["decoder.layers.0.mlp.linear_fc1.weight"]["data_offsets"][0]
d[o + 4:o + 8] = struct.pack("<f", float("nan"))'
INF='o = h["embedding.word_embeddings.weight"]["data_offsets"][0]
d[o:o + 4] = struct.pack("<f", float("inf"))'
HFNAN='o = h["h.1.attn.c_attn.weight"]["data_offsets"][0]
d[o + 8:o + 12] = struct.pack("<f", float("nan"))'
st_case() { # NAME PATTERN PYCODE
  ckcopy "$tmp/ck" "$tmp/c"
  stedit "$tmp/c/iter_0000002/model.safetensors" "$3"
  on_ckpt "$1" "$2" "$tmp/c"
}
st_case "header one byte short" "model.safetensors" "$SHORT"
st_case "data longer than its tensors" "model.safetensors" "$LONGER"
st_case "NaN weight" "decoder.layers.0.mlp.linear_fc1.weight.*(NaN|finite)" "$NAN"
st_case "Inf weight" "embedding.word_embeddings.weight.*(Inf|finite)" "$INF"
ckcopy "$tmp/ck" "$tmp/c"
stedit "$tmp/c/iter_0000002/optim.safetensors" \
  'o = h["exp_avg.decoder.layers.0.mlp.linear_fc1.weight"]["data_offsets"][0]
d[o:o + 4] = struct.pack("<f", float("nan"))'
expect "NaN moment (train --load)" "exp_avg.decoder.layers.0.mlp.linear_fc1.weight.*(NaN|finite)" \
  "$LOOM" train "${LOADTRAIN[@]}" --load "$tmp/c"
for c in SHORT LONGER HFNAN; do
  ckcopy "$tmp/hf" "$tmp/h"
  stedit "$tmp/h/model.safetensors" "${!c}"
  pat="model.safetensors"
  [ $c = HFNAN ] && pat="h.1.attn.c_attn.weight.*(NaN|finite)"
  on_hf "hf $c" "$pat" "$tmp/h"
done

# ---- the pointer file, vocab.json, flags ----
ckcopy "$tmp/ck" "$tmp/c"
printf '2abc\n' >"$tmp/c/latest_checkpointed_iteration.txt"
on_ckpt "pointer file 2abc" "latest_checkpointed_iteration.txt" "$tmp/c"
"$PYTHON" - "$VOCAB" "$tmp/dupvocab.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
v["zzzz_duplicate"] = v["the"]
json.dump(v, open(sys.argv[2], "w"))
PY
expect "duplicate ids in vocab.json" "dupvocab.json.*(duplicate|twice)" "$LOOM" generate --load "$tmp/ck" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$tmp/dupvocab.json" --merge-file "$MERGES" --prompt a --max-new-tokens 1
expect "--global-batch-size -4" "--global-batch-size" "$LOOM" train --mock-data "${MODEL[@]}" --micro-batch-size 2 \
  --global-batch-size -4 --lr 1e-3 --train-iters 2 --lr-warmup-iters 1

echo "hostile files: $pass passed, $fail failed"
[ $fail -eq 0 ]
