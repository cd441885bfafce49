#!/usr/bin/env bash
# BERT pretraining data end to end, on Alice's Adventures in Wonderland (one document per chapter):
#  - loom preprocess --split-sentences writes PREFIX_text_sentence.bin/.idx, the same bytes for
#    --workers 1 and 2; its document index counts sentences (read by tests/ref/indexed_ref.py):
#    one document per line, one sequence per sentence, for known texts the sentences expected;
#  - --keep-newlines keeps the line breaks (GPT-2 ids, decoded here) and changes no WordPiece id;
#  - bert_dataset_check (tests/data/bert_dataset_check.c) reads 10000 samples of 512 tokens from
#    the sentence-split book, with the binary head and without, and checks their structure,
#    segments, whole-word masks, determinism and statistics (masked share 15% +- 0.5 point,
#    80/10/10 within 2 points, n-grams 6:3:2 within 2 points, swap rate 0.5 +- 0.02);
#  - the same book preprocessed without --split-sentences (one sequence per chapter) is refused
#    with the binary head, naming --split-sentences and --bert-no-binary-head, and read without it.
set -euo pipefail
: "${LOOM:?}" "${LOOM_SRC:?}" "${LOOM_BUILD:?}"
PY=${PYTHON:-python3}
REF="$LOOM_SRC/tests/ref/indexed_ref.py"
BERT_VOCAB="$LOOM_SRC/data/bert/vocab.txt"
GPT_VOCAB="$LOOM_SRC/data/gpt2/vocab.json"
GPT_MERGES="$LOOM_SRC/data/gpt2/merges.txt"
BOOK="$LOOM_SRC/data/gutenberg/carroll-alice.txt"
CHECK="$LOOM_BUILD/tests/bert_dataset_check"
if [ ! -f "$BERT_VOCAB" ] || [ ! -f "$GPT_VOCAB" ] || [ ! -f "$BOOK" ]; then
  bash "$LOOM_SRC/scripts/fetch_data.sh"
fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
BERT=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$BERT_VOCAB" --log-interval 0)
GPT=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT_VOCAB" --merge-file "$GPT_MERGES"
     --log-interval 0)

# ---- the book, one JSON line per chapter -----------------------------------------------------
"$PY" - "$BOOK" "$W/alice.jsonl" <<'EOF'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
chapters = re.split(r"\n(?=CHAPTER [IVXL]+\.)", text)[1:]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for c in chapters:
        f.write(json.dumps({"text": c}) + "\n")
print(len(chapters), "chapters")
EOF

for w in 1 2; do
  "$LOOM" preprocess --input "$W/alice.jsonl" --output-prefix "$W/w$w" "${BERT[@]}" \
    --split-sentences --workers "$w" >/dev/null || bad "preprocess --split-sentences --workers $w"
done
for ext in bin idx; do
  cmp -s "$W/w1_text_sentence.$ext" "$W/w2_text_sentence.$ext" \
    || bad ".$ext differs between --workers 1 and 2"
done
"$LOOM" preprocess --input "$W/alice.jsonl" --output-prefix "$W/doc" "${BERT[@]}" >/dev/null \
  || bad "preprocess without --split-sentences"

# the document index: one document per chapter, counting its sentences; the same tokens as the
# unsplit chapter (WordPiece: a sentence boundary is whitespace)
"$PY" - "$REF" "$W/w1_text_sentence" "$W/doc_text_document" <<'EOF' || bad "document index"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
_, sent, _ = ref.read(sys.argv[2])
_, docs, _ = ref.read(sys.argv[3])
assert len(sent) == len(docs) > 5, (len(sent), len(docs))
assert all(len(d) == 1 for d in docs)
n = sum(len(d) for d in sent)
assert n > 20 * len(sent), n
for s, d in zip(sent, docs):
    assert [t for q in s for t in q] == d[0], "tokens differ from the unsplit chapter"
    assert all(len(q) > 0 for q in s)
print(len(sent), "documents,", n, "sentences")
EOF

# ---- known texts: sentences, list values, empty texts, --keep-newlines ------------------------
"$PY" - "$W/small.jsonl" <<'EOF'
import json, sys
lines = [
    {"text": "Mr. Smith went to Washington. He arrived at 5 p.m. sharp!\n\nA new paragraph\nwrapped here"},
    {"text": ["First item. Second item.", "", "Third"]},
    {"text": ""},
    {"text": "Wait... what?! 'Yes,' said J. R. Tolkien.  The end."},
]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for o in lines:
        f.write(json.dumps(o) + "\n")
EOF
"$LOOM" preprocess --input "$W/small.jsonl" --output-prefix "$W/gs" "${GPT[@]}" --split-sentences \
  >/dev/null || bad "preprocess small (GPT-2)"
"$LOOM" preprocess --input "$W/small.jsonl" --output-prefix "$W/gk" "${GPT[@]}" --split-sentences \
  --keep-newlines >/dev/null || bad "preprocess small --keep-newlines (GPT-2)"
"$LOOM" preprocess --input "$W/small.jsonl" --output-prefix "$W/bs" "${BERT[@]}" --split-sentences \
  >/dev/null || bad "preprocess small (BERT)"
"$LOOM" preprocess --input "$W/small.jsonl" --output-prefix "$W/bk" "${BERT[@]}" --split-sentences \
  --keep-newlines >/dev/null || bad "preprocess small --keep-newlines (BERT)"
"$PY" - "$REF" "$GPT_VOCAB" "$W" <<'EOF' || bad "small texts"
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
vocab = json.load(open(sys.argv[2], encoding="utf-8"))
inv = {i: t for t, i in vocab.items()}
keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
c2b, extra = {}, 0
for b in range(256):
    if b in keep: c2b[chr(b)] = b
    else: c2b[chr(256 + extra)] = b; extra += 1
def dec(ids): return bytes(c2b[ch] for i in ids for ch in inv[i]).decode("utf-8")
want = [
    ["Mr. Smith went to Washington.", "He arrived at 5 p.m.", "sharp!", "A new paragraph wrapped here"],
    ["First item.", "Second item.", "Third"],
    [],
    ["Wait...", "what?!", "'Yes,' said J. R. Tolkien.", "The end."],
]
want_keep = [
    ["Mr. Smith went to Washington.", "He arrived at 5 p.m.", "sharp!\n\n", "A new paragraph\nwrapped here"],
    want[1], want[2], want[3],
]
for name, w in (("gs", want), ("gk", want_keep)):
    _, docs, _ = ref.read(sys.argv[3] + "/" + name + "_text_sentence")
    got = [[dec(s) for s in d] for d in docs]
    assert got == w, (name, got)
_, bs, _ = ref.read(sys.argv[3] + "/bs_text_sentence")
_, bk, _ = ref.read(sys.argv[3] + "/bk_text_sentence")
assert bs == bk, "WordPiece ids changed by --keep-newlines"
assert [len(d) for d in bs] == [4, 3, 0, 4], [len(d) for d in bs]
EOF

# ---- BERT samples ------------------------------------------------------------------------------
P="$W/w1_text_sentence"
echo "== binary head"
"$CHECK" "$P" "$BERT_VOCAB" BertWordPieceLowerCase --seq-length 512 --samples 10000 \
  || bad "bert_dataset_check (binary head)"
echo "== --bert-no-binary-head"
"$CHECK" "$P" "$BERT_VOCAB" BertWordPieceLowerCase --seq-length 512 --samples 10000 \
  --no-binary-head || bad "bert_dataset_check (no binary head)"
echo "== valid split"
"$CHECK" "$P" "$BERT_VOCAB" BertWordPieceLowerCase --seq-length 512 --samples 2000 --split 9,2,0 \
  --which valid >/dev/null || bad "bert_dataset_check (valid split)"
echo "== one sequence per document"
"$CHECK" "$W/doc_text_document" "$BERT_VOCAB" BertWordPieceLowerCase --expect-error \
  "--split-sentences" || bad "document-level dataset with the binary head"
"$CHECK" "$W/doc_text_document" "$BERT_VOCAB" BertWordPieceLowerCase --samples 1000 \
  --no-binary-head | grep -q "^swap rate 0.0000" || bad "document-level dataset without the binary head"

# ---- a cased vocabulary: the same rules (the vocabulary file is the same; ids differ) --------
"$LOOM" preprocess --input "$W/alice.jsonl" --output-prefix "$W/cased" \
  --tokenizer-type BertWordPieceCase --vocab-file "$BERT_VOCAB" --log-interval 0 \
  --split-sentences >/dev/null || bad "preprocess BertWordPieceCase"
echo "== BertWordPieceCase"
"$CHECK" "$W/cased_text_sentence" "$BERT_VOCAB" BertWordPieceCase --seq-length 512 --samples 10000 \
  | grep -E "share|swap" || bad "bert_dataset_check (cased)"

exit $fail
