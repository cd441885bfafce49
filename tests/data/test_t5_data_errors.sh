#!/usr/bin/env bash
# T5's data flags refused with a one-line error naming the flag: --vocab-extra-ids with another
# model, --data-path without --vocab-extra-ids, a --vocab-size without room for [BOS], [EOS] and
# the sentinels, a negative --vocab-extra-ids, a decoder too short for BOS and EOS; and the
# default --vocab-size is the WordPiece vocabulary's 30522 + 2 + --vocab-extra-ids.
set -euo pipefail
LOOM=${LOOM:-build/loom}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOK=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$SRC/data/bert/vocab.txt")
printf '{"text": "One sentence here. And another one there. A third."}\n%.0s' 1 2 3 4 > "$tmp/d.jsonl"
"$LOOM" preprocess --input "$tmp/d.jsonl" --output-prefix "$tmp/d" "${TOK[@]}" --split-sentences > /dev/null
base=(--data-path "$tmp/d_text_sentence" "${TOK[@]}" --split 100,0,0 --num-layers 1
      --hidden-size 16 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1
      --global-batch-size 1 --train-iters 1 --eval-iters 0)
fail=0
expect() { # expect WHAT PATTERN -- loom samples args
  local what=$1 pat=$2; shift 3
  if "$LOOM" samples "$@" > "$tmp/out" 2> "$tmp/err"; then
    echo "FAIL $what: ran"; fail=1; return
  fi
  if [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "$pat" "$tmp/err"; then echo "ok   $what: $(cat "$tmp/err")"
  else echo "FAIL $what: $(cat "$tmp/err")"; fail=1; fi
}
expect "extra ids with GPT" "--vocab-extra-ids adds T5's sentinel ids" -- "${base[@]}" --vocab-extra-ids 100
expect "T5 data without extra ids" "give --vocab-extra-ids" -- --model t5 "${base[@]}"
expect "negative extra ids" "--vocab-extra-ids must be in" -- --model t5 "${base[@]}" --vocab-extra-ids -1
expect "vocabulary without the sentinels" "--vocab-size 30522: T5's samples use ids up to 30623" -- \
    --model t5 "${base[@]}" --vocab-extra-ids 100 --vocab-size 30522
expect "decoder of one position" "--decoder-seq-length 1" -- \
    --model t5 "${base[@]}" --vocab-extra-ids 100 --decoder-seq-length 1
"$LOOM" train --model t5 "${base[@]}" --vocab-extra-ids 100 --decoder-seq-length 8 \
    --log-interval 1 > "$tmp/log" 2>&1 || { echo "FAIL training on the data"; tail -3 "$tmp/log"; exit 1; }
if grep -q "vocab 30624 (padded 30720)" "$tmp/log"; then echo "ok   vocabulary 30522 + 2 + 100 = 30624"
else echo "FAIL vocabulary: $(grep -o 'vocab [0-9]* (padded [0-9]*)' "$tmp/log")"; fail=1; fi
exit $fail
