#!/usr/bin/env bash
# Pretrain a small BERT on a Gutenberg book on the CPU: Jane Austen's Emma, one document per
# chapter, split into sentences (loom preprocess --split-sentences, WordPiece lower case), then
# Megatron-LM's BERT samples (sentence pairs, whole-word n-gram masking, sentence-order swaps)
# and `loom train --model bert`; reports the masked-LM loss and accuracy on the validation
# chapters against a unigram baseline (each masked token predicted by its frequency among the
# training samples' masked tokens: the baseline loss is that distribution's cross-entropy on the
# validation samples, its accuracy the share of the most frequent token) and the sentence-order
# loss against chance (ln 2).
#   scripts/bert_demo.sh [extra loom train flags, e.g. --train-iters 50]
# Run after scripts/setup.sh --data and scripts/build.sh (scripts/quickstart.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
RUN=runs/bert-emma
mkdir -p "$RUN"
bash scripts/gutenberg_chapters.sh data/gutenberg/austen-emma.txt "$RUN/emma"
TOK=(--tokenizer-type BertWordPieceLowerCase --vocab-file data/bert/vocab.txt)
DATA="$RUN/emma_text_sentence"
ARGS=(--model bert --data-path "$DATA" --split 90,10,0 "${TOK[@]}"
      --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128
      --micro-batch-size 16 --global-batch-size 32 --train-iters 300
      --lr 1e-3 --min-lr 1e-4 --lr-decay-style linear --lr-warmup-iters 30 --weight-decay 0.01
      --clip-grad 1.0 --log-interval 25 --eval-interval 100 --eval-iters 8 --seed 1234)
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
top = counts.most_common(1)[0][1] / total
it = [r for r in rows if "lm loss" in r]
val = [r for r in rows if "val_lm loss" in r]
print(f"\nunigram baseline over {total} masked tokens of the training samples: "
      f"loss {entropy:.3f} nats, accuracy {top:.3f} (the most frequent token)")
print(f"train lm loss {it[0]['lm loss']:.3f} -> {it[-1]['lm loss']:.3f}, "
      f"sop loss {it[0]['sop loss']:.3f} -> {it[-1]['sop loss']:.3f} (chance ln 2 = 0.693)")
for k, r in enumerate(val):
    when = "after training" if k and r["iteration"] == val[k - 1]["iteration"] else f"at iteration {r['iteration']}"
    print(f"validation {when}: lm loss {r['val_lm loss']:.3f}, "
          f"lm accuracy {r['val_lm accuracy']:.3f}, sop loss {r['val_sop loss']:.3f}")
PYEOF
