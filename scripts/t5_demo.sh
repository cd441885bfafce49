#!/usr/bin/env bash
# Pretrain a small T5 on a Gutenberg book on the CPU: Jane Austen's Emma, one document per
# chapter, split into sentences (loom preprocess --split-sentences, WordPiece lower case), then
# Megatron-LM's T5 samples (whole-word spans of geometric length replaced by sentinels, the
# decoder predicting the spans) and `loom train --model t5`; reports the loss on the validation
# chapters against a unigram baseline (each decoder target predicted by its frequency among the
# training samples' targets: that distribution's cross-entropy on the validation samples).
#   scripts/t5_demo.sh [extra loom train flags, e.g. --train-iters 50]
# Run after scripts/setup.sh --data and scripts/build.sh (scripts/quickstart.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
RUN=runs/t5-emma
mkdir -p "$RUN"
bash scripts/gutenberg_chapters.sh data/gutenberg/austen-emma.txt "$RUN/emma"
TOK=(--tokenizer-type BertWordPieceLowerCase --vocab-file data/bert/vocab.txt)
DATA="$RUN/emma_text_sentence"
ARGS=(--model t5 --data-path "$DATA" --split 90,10,0 "${TOK[@]}" --vocab-extra-ids 100
      --encoder-num-layers 2 --decoder-num-layers 2 --hidden-size 128 --num-attention-heads 4
      --seq-length 64 --decoder-seq-length 16 --position-embedding-type relative
      --micro-batch-size 16 --global-batch-size 32 --train-iters 150
      --lr 1e-3 --min-lr 1e-4 --lr-decay-style linear --lr-warmup-iters 20 --weight-decay 0.01
      --clip-grad 1.0 --log-interval 25 --eval-interval 75 --eval-iters 4 --seed 1234)
rm -rf "$RUN/ckpt"
$LOOM train "${ARGS[@]}" --save "$RUN/ckpt" --metrics-file "$RUN/metrics.jsonl" "$@"
# the unigram baseline from the samples the run read (training) and evaluated (validation)
$LOOM samples "${ARGS[@]}" "$@" > "$RUN/train_samples.jsonl"
"$PY" - "$RUN/metrics.jsonl" "$RUN/train_samples.jsonl" <<'PYEOF'
import json, math, sys
from collections import Counter
rows = [json.loads(l) for l in open(sys.argv[1])]
counts = Counter()
for l in open(sys.argv[2]):
    s = json.loads(l)
    counts.update(t for t in s["labels"] if t >= 0)
total = sum(counts.values())
entropy = -sum(c / total * math.log(c / total) for c in counts.values())
it = [r for r in rows if "loss" in r]
val = [r for r in rows if "val_loss" in r]
print(f"\nunigram baseline over {total} decoder targets of the training samples: "
      f"{entropy:.3f} nats")
print(f"train loss {it[0]['loss']:.3f} -> {it[-1]['loss']:.3f}")
for r in val:
    print(f"validation at iteration {r['iteration']}: loss {r['val_loss']:.3f}")
PYEOF
