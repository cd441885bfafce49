#!/usr/bin/env bash
# Real text end to end: preprocess JSON lines with the GPT-2 tokenizer, train on the Megatron
# dataset with a blend of two prefixes and a split, check the loss falls, a validation loss is
# logged and MFU stays within 100%, then generate from the checkpoint (greedy twice gives the same
# text; the prompt is kept).
set -euo pipefail
LOOM=${LOOM:-build/loom}
SRC=${LOOM_SRC:-.}
bash "$SRC/scripts/fetch_data.sh" > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt")
head -n 4 "$SRC/data/shakespeare.jsonl" > "$tmp/a.jsonl"
# 4 documents: --split 2,1,1 gives 2/1/1 (3 would give 2/0/1 by the split matrix)
tail -n 4 "$SRC/data/shakespeare.jsonl" > "$tmp/b.jsonl"
"$LOOM" preprocess --input "$tmp/a.jsonl" --output-prefix "$tmp/a" "${TOK[@]}" --append-eod --workers 2 > /dev/null
"$LOOM" preprocess --input "$tmp/b.jsonl" --output-prefix "$tmp/b" "${TOK[@]}" --append-eod --workers 2 > /dev/null
"$LOOM" train --data-path 0.7 "$tmp/a_text_document" 0.3 "$tmp/b_text_document" --split 2,1,1 "${TOK[@]}" \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 4 \
    --global-batch-size 8 --train-iters 30 --lr 3e-3 --lr-warmup-iters 3 --log-interval 10 \
    --eval-interval 30 --eval-iters 2 --hidden-dropout 0 --attention-dropout 0 \
    --save "$tmp/ck" --metrics-file "$tmp/m.jsonl" > "$tmp/train.log"
/usr/bin/python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in objs if "loss" in r]
first, last = rows[0]["loss"], rows[-1]["loss"]
# after training, the validation set's loss once more (its next batches) and the loss of
# --split's third part (Megatron-LM's test set): the last two objects
test, after = objs[-1].get("test_loss"), objs[-2].get("val_loss")
assert test is not None and len(objs) == len(rows) + 2 and 0 < test < 20, f"test loss: {objs[-1]}"
assert after is not None and 0 < after < 20, f"validation after training: {objs[-2]}"
assert last < first - 1.0, f"loss did not fall: {first} -> {last}"
assert "val_loss" in rows[-1], "no validation loss"
# MFU against the CPU's measured peak, which a faster step raises: never above 100%
mfu = [r["mfu"] for r in rows if "mfu" in r]
assert mfu and all(0.0 < m <= 1.0 for m in mfu), f"MFU outside (0, 1]: {mfu}"
print(f"ok   loss {first:.3f} -> {last:.3f}, validation {rows[-1]['val_loss']:.3f}, test {test:.3f}, MFU at most {100 * max(mfu):.1f}%")
PY
g1=$("$LOOM" generate --load "$tmp/ck" "${TOK[@]}" --prompt "KING:" --max-new-tokens 12 --greedy 2>"$tmp/gen.err")
g2=$("$LOOM" generate --load "$tmp/ck" "${TOK[@]}" --prompt "KING:" --max-new-tokens 12 --greedy 2>/dev/null)
[ "$g1" = "$g2" ] || { echo "FAIL: greedy generation differs between runs"; exit 1; }
case "$g1" in "KING:"*) ;; *) echo "FAIL: generated text does not start with the prompt: $g1"; exit 1;; esac
grep -q "generated 12 tokens after a 2-token prompt" "$tmp/gen.err" || { echo "FAIL: $(cat "$tmp/gen.err")"; exit 1; }
echo "ok   greedy generation repeatable: $(printf '%s' "$g1" | head -c 60 | tr '\n' ' ')"
