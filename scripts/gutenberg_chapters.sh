#!/usr/bin/env bash
# A Gutenberg book as a sentence-split indexed dataset, one document per chapter (the demos'
# data): scripts/gutenberg_chapters.sh BOOK.txt PREFIX writes PREFIX.jsonl and, through
# `loom preprocess --split-sentences` with the bert-base-uncased WordPiece vocabulary,
# PREFIX_text_sentence.bin/.idx. Chapters start at lines "CHAPTER <roman numeral>".
set -euo pipefail
book=$1 prefix=$2
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
"$PY" - "$book" "$prefix.jsonl" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
chapters = re.split(r"\n(?=CHAPTER [IVXL]+\s*\n)", text)[1:]
with open(sys.argv[2], "w") as f:
    for c in chapters:
        body = c.split("\n", 1)[1].strip()
        f.write(json.dumps({"text": body}) + "\n")
print(f"{len(chapters)} chapters")
PYEOF
$LOOM preprocess --input "$prefix.jsonl" --output-prefix "$prefix" \
    --tokenizer-type BertWordPieceLowerCase --vocab-file data/bert/vocab.txt \
    --split-sentences --workers "$(nproc)"
