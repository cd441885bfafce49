#!/usr/bin/env bash
# 1-bit Adam against AdamW on real text: a small GPT trained with DP=2 on a book of the Gutenberg
# sample (data/gutenberg), the same schedule for both, 1-bit Adam's warmup 15% of the steps;
# prints both runs' final validation losses and their relative difference, and the data-parallel
# bytes of a warmup step and of a compressed one.
# usage: bench/onebit_gutenberg.sh [ITERS]   (CPU, mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/dist/mpi_env.sh
ITERS=${1:-300}
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt)
# paragraphs of a few books as JSON lines
/usr/bin/python3 - "$tmp/books.jsonl" data/gutenberg/austen-persuasion.txt <<'PY'
import json, sys
with open(sys.argv[1], "w") as out:
    for path in sys.argv[2:]:
        for para in open(path, encoding="utf-8", errors="replace").read().split("\n\n"):
            text = " ".join(para.split())
            if len(text) > 40:
                out.write(json.dumps({"text": text}) + "\n")
PY
"$LOOM" preprocess --input "$tmp/books.jsonl" --output-prefix "$tmp/books" "${TOK[@]}" --append-eod \
    --workers 2 > /dev/null
run() {
  local name=$1
  shift
  loom_mpirun 2 "$LOOM" train --data-path "$tmp/books_text_document" --split 98,2,0 "${TOK[@]}" \
      --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
      --micro-batch-size 8 --global-batch-size 16 --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 \
      --lr-decay-style cosine --lr-warmup-iters $((ITERS / 10)) --weight-decay 0.01 --clip-grad 1.0 \
      --log-interval 1 --eval-interval "$ITERS" --eval-iters 10 --seed 5 "$@" \
      --metrics-file "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1
}
run adamw
run onebit --optimizer onebit-adam --onebit-freeze-step $((ITERS * 15 / 100))
/usr/bin/python3 - "$tmp/adamw.jsonl" "$tmp/onebit.jsonl" <<'PY'
import json, sys
def final(path):
    rows = [json.loads(l) for l in open(path)]
    val = [r["val_loss"] for r in rows if "val_loss" in r and "loss" in r][-1]
    dp = [r["comm_bytes"]["dp"] for r in rows if "loss" in r]
    return val, dp
a, da = final(sys.argv[1])
b, db = final(sys.argv[2])
print(f"validation loss after training: AdamW {a:.4f}, 1-bit Adam {b:.4f} ({100 * (b - a) / a:+.2f}%)")
print(f"data-parallel bytes a step: AdamW {da[-1]:,}; 1-bit Adam warmup {db[0]:,}, compressed {db[-1]:,} (1/{db[0] / db[-1]:.1f})")
PY
