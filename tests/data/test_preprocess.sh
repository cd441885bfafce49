#!/usr/bin/env bash
# loom preprocess: JSON lines -> PREFIX_{key}_document.bin/.idx.
#  - outputs are byte-identical for --workers 1, 2 and 4 (several input batches);
#  - the independent Python reader (tests/ref/indexed_ref.py) reads them, and decoding the ids
#    with GPT-2's vocabulary (byte-level, decoded here in Python) gives back each line's text,
#    plus <|endoftext|> with --append-eod; empty texts are documents without sequences;
#  - several --json-keys give one dataset each; list values give one sequence per sentence;
#  - a bad line (malformed JSON, invalid UTF-8, missing key, wrong type) is a one-line error
#    naming the line, exit 1, no output and no temporary left, existing outputs untouched.
set -euo pipefail
: "${LOOM:?}" "${LOOM_SRC:?}"
PY=${PYTHON:-python3}
REF="$LOOM_SRC/tests/ref/indexed_ref.py"
VOCAB="$LOOM_SRC/data/gpt2/vocab.json"
MERGES="$LOOM_SRC/data/gpt2/merges.txt"
BERT_VOCAB="$LOOM_SRC/data/bert/vocab.txt"
if [ ! -f "$VOCAB" ] || [ ! -f "$MERGES" ] || [ ! -f "$BERT_VOCAB" ]; then
  bash "$LOOM_SRC/scripts/fetch_data.sh"
fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
GPT=(--tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB" --merge-file "$MERGES")

# ---- input: 5000 lines (more than one batch), varied text, two keys, one list value ----------
"$PY" - "$W/in.jsonl" <<'EOF'
import json, random, sys
r = random.Random(11)
words = ["the", "The", " quick", "brown", "fox's", "jumps", "über", "naïve", "日本語", "😀",
         "  spaces  ", "\n", "\t", "123", "4.5e6", "<|endoftext|>", "don't", "I'll", "—", "\u00a0",
         "Zürich", "\\", "\"quoted\"", "a\u0000b", "ﬁ", "\r\n"]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(5000):
        n = r.choice([0, 1, 3, 10, 40]) if i % 97 else 0
        text = " ".join(r.choice(words) for _ in range(n))
        title = "Title %d %s" % (i, r.choice(words))
        obj = {"id": i, "text": text, "title": title}
        if i == 17:
            obj["title"] = ["First sentence.", "", " Second one."]
        f.write(json.dumps(obj, ensure_ascii=(i % 2 == 0)) + "\n")
EOF

run() { "$LOOM" preprocess --input "$W/in.jsonl" "${GPT[@]}" --log-interval 0 "$@"; }

for w in 1 2 4; do
  run --output-prefix "$W/w$w" --json-keys text title --append-eod --workers "$w" >/dev/null \
    || bad "preprocess --workers $w failed"
done
for key in text title; do
  for w in 2 4; do
    for ext in bin idx; do
      cmp -s "$W/w1_${key}_document.$ext" "$W/w${w}_${key}_document.$ext" \
        || bad "$key .$ext differs between --workers 1 and --workers $w"
    done
  done
done
grep -q '\.tmp\.' <<< "$(ls "$W")" && bad "temporaries left behind"

# ---- contents, through the independent reader ------------------------------------------------
"$PY" - "$REF" "$VOCAB" "$W/in.jsonl" "$W/w1" <<'EOF' || bad "contents check failed"
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
vocab = json.load(open(sys.argv[2], encoding="utf-8"))
inv = {i: t for t, i in vocab.items()}
# GPT-2's byte <-> printable character table: printable Latin-1 bytes map to themselves, the
# other 68 bytes to U+0100 onwards in byte order
keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
char_to_byte, extra = {}, 0
for b in range(256):
    if b in keep:
        char_to_byte[chr(b)] = b
    else:
        char_to_byte[chr(256 + extra)] = b
        extra += 1
EOD = vocab["<|endoftext|>"]
def decode(ids):
    return bytes(char_to_byte[c] for i in ids for c in inv[i]).decode("utf-8")
lines = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8")]
errors = 0
for key in ("text", "title"):
    dtype, docs, _ = ref.read(sys.argv[4] + "_%s_document" % key)
    assert dtype == "u16", dtype
    assert len(docs) == len(lines), (len(docs), len(lines))
    for obj, doc in zip(lines, docs):
        v = obj[key]
        sents = [s for s in (v if isinstance(v, list) else [v]) if s]
        if not sents:
            if doc != []:
                errors += 1
            continue
        if len(doc) != len(sents) or doc[-1][-1] != EOD:
            errors += 1
            continue
        doc[-1] = doc[-1][:-1]
        got = [decode(seq) for seq in doc]
        if got != sents or any(EOD in seq for seq in doc):
            errors += 1
            if errors < 5:
                print("mismatch at id %d key %s: %r vs %r" % (obj["id"], key, got, sents))
if errors:
    print("%d documents differ" % errors)
    sys.exit(1)
EOF

# without --append-eod: no end-of-document ids at all, default key "text"
run --output-prefix "$W/noeod" --workers 2 >/dev/null || bad "preprocess without --append-eod"
"$PY" - "$REF" "$W/noeod_text_document" <<'EOF' || bad "--append-eod absent but EOD ids found"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
_, docs, _ = ref.read(sys.argv[2])
assert not any(50256 in seq for doc in docs for seq in doc)
EOF
[ -e "$W/noeod_title_document.idx" ] && bad "an output for a key that was not asked for"

# ---- BERT WordPiece: u16 (30522 ids), [SEP] as end of document --------------------------------
"$LOOM" preprocess --input "$W/in.jsonl" --output-prefix "$W/bert" --tokenizer-type \
  BertWordPieceLowerCase --vocab-file "$BERT_VOCAB" --append-eod --workers 2 --log-interval 0 \
  >/dev/null || bad "BERT preprocess failed"
"$PY" - "$REF" "$W/bert_text_document" "$BERT_VOCAB" <<'EOF' || bad "BERT output check failed"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
vocab = [l.rstrip("\n") for l in open(sys.argv[3], encoding="utf-8")]
sep = vocab.index("[SEP]")
dtype, docs, _ = ref.read(sys.argv[2])
assert dtype == "u16" and len(docs) == 5000
for doc in docs:
    assert len(doc) <= 1
    if doc:
        assert doc[0][-1] == sep and all(0 <= t < len(vocab) for t in doc[0])
EOF

# ---- bad input: line-numbered one-line errors, nothing written --------------------------------
expect_error() { # name workers expected-text... (input in $W/bad.jsonl)
  local name=$1 workers=$2
  shift 2
  rm -f "$W"/bad_*
  set +e
  out=$("$LOOM" preprocess --input "$W/bad.jsonl" --output-prefix "$W/bad" "${GPT[@]}" \
        --json-keys text title --workers "$workers" 2>&1 >/dev/null)
  rc=$?
  set -e
  [ $rc -eq 1 ] || bad "$name: exit $rc (want 1): $out"
  for want in "$@"; do
    case "$out" in *"$want"*) ;; *) bad "$name: message '$out' lacks '$want'";; esac
  done
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || bad "$name: not one line: $out"
  [ -z "$(ls "$W" | grep '^bad_' || true)" ] || bad "$name: files left: $(ls "$W" | grep '^bad_')"
}
ok='{"text": "fine", "title": "t"}'
printf '%s\n%s\n{"text": "broken", "title": \n%s\n' "$ok" "$ok" "$ok" > "$W/bad.jsonl"
for w in 1 2; do expect_error "malformed JSON" $w "line 3" "malformed JSON" "bad.jsonl"; done
# first bad line in file order whatever the worker count (many lines, two bad ones)
"$PY" -c '
import sys
ok = "{\"text\": \"fine words here\", \"title\": \"t\"}\n"
sys.stdout.write(ok * 3000 + "{bad\n" + ok * 500 + "[1,2\n" + ok * 10)' > "$W/bad.jsonl"
for w in 1 4; do expect_error "first bad line" $w "line 3001:"; done
printf '%s\n%s\n%s\n%s\n{"text": "caf\xe9", "title": "t"}\n' "$ok" "$ok" "$ok" "$ok" > "$W/bad.jsonl"
expect_error "invalid UTF-8" 2 "line 5" "UTF-8"
printf '%s\n{"title": "no text"}\n' "$ok" > "$W/bad.jsonl"
expect_error "missing key" 1 "line 2" "missing key 'text'"
printf '%s\n%s\n%s\n{"text": "x", "title": 7}\n' "$ok" "$ok" "$ok" > "$W/bad.jsonl"
expect_error "wrong type" 2 "line 4" "'title'"
printf '%s\n["not", "an", "object"]\n' "$ok" > "$W/bad.jsonl"
expect_error "not an object" 1 "line 2" "object"
printf '%s\n{"text": ["a", 5], "title": "t"}\n' "$ok" > "$W/bad.jsonl"
expect_error "list item" 1 "line 2" "item 1"

# a failed run leaves an existing dataset with the same prefix untouched
cp "$W/w1_text_document.bin" "$W/keep.bin"
cp "$W/w1_text_document.idx" "$W/keep.idx"
printf '%s\n{oops\n' "$ok" > "$W/bad.jsonl"
set +e
"$LOOM" preprocess --input "$W/bad.jsonl" --output-prefix "$W/w1" "${GPT[@]}" --json-keys text \
  >/dev/null 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || bad "failing run over existing outputs: exit $rc"
cmp -s "$W/keep.bin" "$W/w1_text_document.bin" && cmp -s "$W/keep.idx" "$W/w1_text_document.idx" \
  || bad "a failed run changed existing outputs"
grep -q '\.tmp\.' <<< "$(ls "$W")" && bad "temporaries left behind by a failed run"

# ---- flag errors --------------------------------------------------------------------------------
flag_error() { # expected-text args...
  local want=$1
  shift
  set +e
  out=$("$LOOM" preprocess "$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  [ $rc -eq 1 ] || bad "flags '$*': exit $rc"
  case "$out" in *"$want"*) ;; *) bad "flags '$*': message '$out' lacks '$want'";; esac
}
flag_error "--merge-file" --input "$W/in.jsonl" --output-prefix "$W/x" --tokenizer-type \
  GPT2BPETokenizer --vocab-file "$VOCAB"
flag_error "--input" --output-prefix "$W/x" "${GPT[@]}"
flag_error "--tokenizer-type" --input "$W/in.jsonl" --output-prefix "$W/x" --tokenizer-type \
  SentencePiece --vocab-file "$VOCAB"
flag_error "nope.jsonl" --input "$W/nope.jsonl" --output-prefix "$W/x" "${GPT[@]}"
flag_error "no/such/dir" --input "$W/in.jsonl" --output-prefix "$W/no/such/dir/x" "${GPT[@]}"
flag_error "--workers" --input "$W/in.jsonl" --output-prefix "$W/x" "${GPT[@]}" --workers 0
grep -q -- "--json-keys" <<< "$("$LOOM" preprocess --help)" || bad "--help lacks --json-keys"

if [ $fail -ne 0 ]; then echo "test_preprocess: FAILED"; exit 1; fi
echo "test_preprocess: ok"
