#!/usr/bin/env bash
# BERT WordPiece (BertWordPieceLowerCase and BertWordPieceCase) on bert-base-uncased's vocab.txt:
#  1. hand-checked sentences: the expected tokens are written out below and turned into ids by
#     their line number in vocab.txt;
#  2. the bert-tokenizer npm package (lower case) on ~2000 plain lines of the Gutenberg corpus;
#  3. a plain-Python reference (tests/data/bert_reference.py, Python's unicodedata) on the torture
#     set, random strings over all of Unicode, the Shakespeare acts and two books, both variants;
#  4. invalid UTF-8 and broken vocabularies are clean errors.
set -euo pipefail
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${LOOM_BUILD:-$SRC/build}
PY=${PYTHON:-/usr/bin/python3}
TOOL=$BUILD/tests/test_tokenizer
[ -x "$TOOL" ] || { echo "test_tokenizer_bert: $TOOL not built" >&2; exit 1; }
command -v node >/dev/null || { echo "test_tokenizer_bert: node not found" >&2; exit 1; }

bash "$SRC/scripts/fetch_data.sh" >/dev/null
NM=${LOOM_NPM_DIR:-$SRC/.deps/npm}/node_modules
VOCAB=$SRC/data/bert/vocab.txt
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
start=$(date +%s)
bad=0

# ---- 1. hand-checked sentences: VARIANT <TAB> TEXT (\t \n \u escapes) <TAB> expected tokens
cat >"$W/hand.tsv" <<'EOF'
lower	Hello, World!	hello , world !
lower	I like strawberries.	i like straw ##berries .
lower	The quick brown fox jumps over the lazy dog.	the quick brown fox jumps over the lazy dog .
lower	H\u00e9llo W\u00f6rld! Na\u00efve caf\u00e9.	hello world ! naive cafe .
lower	don't stop	don ' t stop
lower	$100.50 costs	$ 100 . 50 costs
lower	\u4e2d\u6587text	\u4e2d \u6587 text
lower	unaffable	una ##ffa ##ble
lower	  multiple   spaces\tand\nnewlines  	multiple spaces and new ##lines
lower	\u0130stanbul	istanbul
lower	e-mail: someone@example.com	e - mail : someone @ example . com
lower	hello\u200dworld\u0007!	hello ##world !
lower	\u039f\u0394\u039f\u03a3	\u03bf ##\u03b4 ##\u03bf\u03c2
cased	Hello, World!	[UNK] , [UNK] !
cased	I like strawberries.	[UNK] like straw ##berries .
cased	caf\u00e9 na\u00efve	[UNK] [UNK]
cased	don't stop	don ' t stop
cased	\u4e2d\u6587text	\u4e2d \u6587 text
cased	  multiple   spaces\tand\nnewlines  	multiple spaces and new ##lines
EOF
mkdir -p "$W/hand/lower" "$W/hand/cased" "$W/hand/want" "$W/hand/got"
"$PY" - "$W/hand.tsv" "$VOCAB" "$W/hand" <<'PY'
import os, sys
tsv, vocab_path, out = sys.argv[1:4]
lines = open(vocab_path, encoding="utf-8").read().split("\n")
line_of = {}
for i, t in enumerate(lines):
    line_of.setdefault(t, i)       # the id of a token is its (0-based) line number
unesc = lambda s: s.encode("ascii").decode("unicode_escape")
for k, row in enumerate(open(tsv, encoding="ascii")):
    variant, text, toks = row.rstrip("\n").split("\t")
    ids = [line_of[unesc(t)] for t in toks.split(" ")]
    name = "%02d.txt" % k
    open(os.path.join(out, variant, name), "wb").write(unesc(text).encode("utf-8"))
    open(os.path.join(out, "want", name + ".ids"), "w").write("".join("%d\n" % i for i in ids))
PY
"$TOOL" encode-files BertWordPieceLowerCase "$VOCAB" - "$W/hand/got" "$W"/hand/lower/*.txt
"$TOOL" encode-files BertWordPieceCase "$VOCAB" - "$W/hand/got" "$W"/hand/cased/*.txt
echo -n "1. hand-checked sentences: "
"$PY" "$SRC/tests/data/compare_ids.py" "$W/hand/want" "$W/hand/got" "$W"/hand/lower/*.txt "$W"/hand/cased/*.txt ||
  bad=$((bad + 1))

# ---- 2. the npm package on plain corpus lines
mkdir -p "$W/plain" "$W/npm" "$W/loom"
"$PY" - "$SRC/data/gutenberg" "$W/plain" <<'PY'
import os, re, sys
src, out = sys.argv[1:3]
ok = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 .,;:!?'\"()-]*$")
for name in ["carroll-alice.txt", "austen-emma.txt", "melville-moby_dick.txt", "shakespeare-macbeth.txt"]:
    keep = []
    for line in open(os.path.join(src, name), encoding="latin-1"):
        line = " ".join(line.split())
        if line and ok.match(line):
            keep.append(line)
        if len(keep) == 500:
            break
    open(os.path.join(out, name), "w").write("\n".join(keep) + "\n")
PY
node "$SRC/tests/data/bert_oracle.js" "$NM" "$W/npm" "$W"/plain/*.txt
"$TOOL" encode-files BertWordPieceLowerCase "$VOCAB" - "$W/loom" "$W"/plain/*.txt
echo -n "2. equal to the bert-tokenizer npm package ($(cat "$W"/plain/*.txt | wc -l) lines): "
"$PY" "$SRC/tests/data/compare_ids.py" "$W/npm" "$W/loom" "$W"/plain/*.txt || bad=$((bad + 1))

# ---- 3. the Python reference, both variants
"$PY" "$SRC/tests/data/tokenizer_torture.py" "$W/torture"
mkdir -p "$W/acts"
"$PY" - "$SRC/data/shakespeare.jsonl" "$W/acts" <<'PY'
import json, os, sys
for i, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    open(os.path.join(sys.argv[2], "act_%02d.txt" % i), "w", encoding="utf-8").write(json.loads(line)["text"])
PY
REF_FILES=("$W"/torture/valid/*.txt "$W"/torture/wide/*.txt "$W"/acts/*.txt
           "$SRC/data/gutenberg/carroll-alice.txt" "$SRC/data/gutenberg/blake-poems.txt")
for variant in lower cased; do
  T=$([ $variant = lower ] && echo BertWordPieceLowerCase || echo BertWordPieceCase)
  rm -rf "$W/ref" "$W/loom"
  mkdir -p "$W/ref" "$W/loom"
  "$PY" "$SRC/tests/data/bert_reference.py" "$VOCAB" $variant "$W/ref" "${REF_FILES[@]}" &
  "$TOOL" encode-files $T "$VOCAB" - "$W/loom" "${REF_FILES[@]}"
  wait $!
  echo -n "3. $T against the Python reference: "
  "$PY" "$SRC/tests/data/compare_ids.py" "$W/ref" "$W/loom" "${REF_FILES[@]}" || bad=$((bad + 1))
done

# ---- 4. errors
while read -r name off; do
  "$TOOL" invalid BertWordPieceLowerCase "$VOCAB" - "$W/torture/invalid/$name.bin" "$off" >/dev/null ||
    { echo "invalid UTF-8 case $name (offset $off) not reported correctly" >&2; bad=$((bad + 1)); }
done <"$W/torture/invalid.list"
if "$TOOL" load BertWordPieceCase "$W/none.txt" - >"$W/err" || ! grep -q "none.txt" "$W/err"; then
  echo "missing vocab.txt not reported: $(cat "$W/err")" >&2
  bad=$((bad + 1))
fi
grep -v -x -F '[UNK]' "$VOCAB" >"$W/nounk.txt"
if "$TOOL" load BertWordPieceLowerCase "$W/nounk.txt" - >"$W/err" || ! grep -q "nounk.txt" "$W/err"; then
  echo "vocab.txt without [UNK] not reported: $(cat "$W/err")" >&2
  bad=$((bad + 1))
fi
out=$("$TOOL" load BertWordPieceLowerCase "$VOCAB" -)
[ "$out" = "ok vocab_size=30522 eod=102" ] || { echo "bert vocab: $out" >&2; bad=$((bad + 1)); }
echo "4. error cases checked"

echo "test_tokenizer_bert: $(( $(date +%s) - start )) s"
if [ "$bad" -ne 0 ]; then
  echo "test_tokenizer_bert: $bad failure(s)" >&2
  exit 1
fi
echo "test_tokenizer_bert: all passed"
