#!/usr/bin/env bash
# A --split weight of 0 leaves that split out (Megatron-core's split matrix): `--split 100,0,0`
# trains without validation or test and says so, exit 0; `--split 98,2,0` over 25 documents
# validates on 1 document (24/1, as current Megatron) and has no test split. And --save-grads on
# a run resumed with --load: the gradients of the first iteration it trains are written; a
# resumed run that trains no iteration is an error naming --save-grads, and makes no folder.
set -euo pipefail
LOOM=${LOOM:-build/loom}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 25 documents: the first 25 paragraphs of Alice's Adventures in Wonderland
"${PYTHON:-/usr/bin/python3}" -c "
import json, re, sys
t = open('$SRC/data/gutenberg/carroll-alice.txt', encoding='utf-8').read()
ps = [p.strip() for p in re.split(r'\n\s*\n', t) if p.strip()][:25]
sys.stdout.write(''.join(json.dumps({'text': p}) + '\n' for p in ps))" > "$tmp/docs.jsonl"
"$LOOM" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/sh" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt" --append-eod > /dev/null
D=$tmp/sh_text_document
M=(--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2
   --global-batch-size 2 --lr 1e-3 --log-interval 1 --eval-interval 2 --tokenizer-type GPT2BPETokenizer
   --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt" --data-path "$D")
OMP_NUM_THREADS=1 "$LOOM" train "${M[@]}" --train-iters 2 --split 100,0,0 > "$tmp/a.log" 2>&1 ||
    { echo "FAIL: --split 100,0,0 failed:"; cat "$tmp/a.log"; exit 1; }
grep -q "validation split weight 0: no validation" "$tmp/a.log" || { echo "FAIL: no word of the absent validation"; cat "$tmp/a.log"; exit 1; }
! grep -qi "validation loss\|val_loss\|test loss" "$tmp/a.log" || { echo "FAIL: evaluated an absent split"; exit 1; }
OMP_NUM_THREADS=1 "$LOOM" train "${M[@]}" --train-iters 2 --split 98,2,0 --eval-iters 1 > "$tmp/b.log" 2>&1 ||
    { echo "FAIL: --split 98,2,0 failed:"; cat "$tmp/b.log"; exit 1; }
grep -qi "validation" "$tmp/b.log" || { echo "FAIL: --split 98,2,0 did not validate"; cat "$tmp/b.log"; exit 1; }
! grep -qi "test set\|test loss" "$tmp/b.log" || { echo "FAIL: --split 98,2,0 evaluated a test split"; exit 1; }
echo "split weight 0: absent, evaluation skipped; 98,2,0 over 25 documents validates"
# --save-grads with --load
OMP_NUM_THREADS=1 "$LOOM" train "${M[@]}" --train-iters 2 --save "$tmp/ck" --save-interval 2 > /dev/null 2>&1
if OMP_NUM_THREADS=1 "$LOOM" train "${M[@]}" --train-iters 2 --load "$tmp/ck" --save-grads "$tmp/g1" > "$tmp/c.log" 2>&1; then
    echo "FAIL: --save-grads on a run with nothing to train exited 0"; exit 1
fi
grep -q "loom: error: --save-grads $tmp/g1: this run trains no iteration" "$tmp/c.log" || { echo "FAIL: message"; cat "$tmp/c.log"; exit 1; }
[ ! -e "$tmp/g1" ] || { echo "FAIL: --save-grads made a folder"; exit 1; }
OMP_NUM_THREADS=1 "$LOOM" train "${M[@]}" --train-iters 3 --load "$tmp/ck" --use-checkpoint-opt_param-scheduler --save-grads "$tmp/g2" > "$tmp/d.log" 2>&1 ||
    { echo "FAIL: resumed run with --save-grads:"; cat "$tmp/d.log"; exit 1; }
[ -n "$(ls -A "$tmp/g2")" ] || { echo "FAIL: --save-grads left an empty folder on a resumed run"; exit 1; }
echo "--save-grads: written on a resumed run's first iteration; refused where none is trained"
