#!/usr/bin/env bash
# BERT's data as a training run reads it, checked through `loom samples --model bert` alone (the
# samples in consumption order): Alice in Wonderland by chapter, preprocessed with
# --split-sentences (bert-base-uncased WordPiece), 6000 samples of 512 positions:
#   - the share of masked positions among the real non-special tokens 15% +- 0.5;
#   - of the masked positions, the input is [MASK] for 80%, the original token for 10%, another
#     token for 10%, each within 2 points;
#   - masked spans are whole words: a word (a token and its following "##" pieces) is masked
#     whole or not at all, so no masked span crosses a word boundary inside a word;
#   - runs of consecutive masked words of 1, 2 and 3 words, counted as spans, split as the n-gram
#     draws, 6:3:2 (54.5/27.3/18.2%), each within 2 points (runs of more words, adjacent spans
#     that touch, about a tenth of the masked words, are left out);
#   - the sentence-order label (segments swapped) is 1 for 0.5 +- 0.02 of the samples;
#   - the same output twice; another --seed gives other samples.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
VOCAB="$SRC/data/bert/vocab.txt"
"$PY" - "$SRC/data/gutenberg/carroll-alice.txt" "$tmp/alice.jsonl" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
with open(sys.argv[2], "w") as f:
    for c in re.split(r"\n(?=CHAPTER [IVXL]+\.)", text)[1:]:
        f.write(json.dumps({"text": c}) + "\n")
PYEOF
TOK=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB")
"$LOOM" preprocess --input "$tmp/alice.jsonl" --output-prefix "$tmp/alice" "${TOK[@]}" \
    --split-sentences > /dev/null
args=(--model bert --data-path "$tmp/alice_text_sentence" "${TOK[@]}" --split 100,0,0
      --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 512
      --micro-batch-size 8 --global-batch-size 48 --train-iters 125 --eval-iters 0)
"$LOOM" samples "${args[@]}" > "$tmp/a.jsonl"
"$LOOM" samples "${args[@]}" > "$tmp/b.jsonl"
"$LOOM" samples "${args[@]}" --seed 99 --train-iters 2 > "$tmp/c.jsonl"
cmp -s "$tmp/a.jsonl" "$tmp/b.jsonl" || { echo "FAIL: two runs printed different samples"; exit 1; }
"$PY" - "$tmp" "$VOCAB" <<'PYEOF'
import json, sys
tmp, vocab = sys.argv[1], [l.rstrip("\n") for l in open(sys.argv[2], encoding="utf-8")]
ids = {t: i for i, t in enumerate(vocab)}
CLS, SEP, MASK, PAD = ids["[CLS]"], ids["[SEP]"], ids["[MASK]"], ids["[PAD]"]
special = {CLS, SEP, PAD}
fail = 0
def check(cond, what):
    global fail
    print(("ok   " if cond else "FAIL ") + what)
    fail |= not cond
real = masked = as_mask = kept = other = swapped = n = 0
run_words = {1: 0, 2: 0, 3: 0, "more": 0}
broken = 0
first = None
for line in open(f"{tmp}/a.jsonl"):
    s = json.loads(line)
    n += 1
    if first is None: first = s["tokens"]
    swapped += s["sop_label"]
    toks, labs = s["tokens"], s["labels"]
    orig = [l if l >= 0 else t for t, l in zip(toks, labs)]
    words, cur = [], []          # words as lists of positions (a token and its ## pieces)
    for i, t in enumerate(orig):
        if s["padding_mask"][i] == 0 or t in special:
            if cur: words.append(cur); cur = []
            continue
        real += 1
        if vocab[t].startswith("##") and cur:
            cur.append(i)
        else:
            if cur: words.append(cur)
            cur = [i]
    if cur: words.append(cur)
    for i, l in enumerate(labs):
        if l < 0: continue
        masked += 1
        if toks[i] == MASK: as_mask += 1
        elif toks[i] == l: kept += 1
        else: other += 1
    flags = []
    for w in words:
        m = [labs[i] >= 0 for i in w]
        if any(m) and not all(m): broken += 1
        flags.append(all(m))
    k = 0
    while k < len(flags):
        if flags[k]:
            j = k
            while j < len(flags) and flags[j]: j += 1
            run_words[j - k if j - k <= 3 else "more"] += j - k
            k = j
        else:
            k += 1
share = masked / real
check(abs(share - 0.15) <= 0.005, f"masked share {share:.4f} of {real} real tokens in {n} samples (15% +- 0.5)")
for name, v, want in (("[MASK]", as_mask, 0.8), ("kept", kept, 0.1), ("random", other, 0.1)):
    check(abs(v / masked - want) <= 0.02, f"{name} {v / masked:.4f} of the masked (want {want} +- 0.02)")
check(broken == 0, f"words masked in part: {broken}")
# runs of 1, 2, 3 masked words, counted as spans (words / n): the n-gram mix 6:3:2
spans = [run_words[k] / k for k in (1, 2, 3)]
mix = [x / sum(spans) for x in spans]
for k, want in zip((1, 2, 3), (6 / 11, 3 / 11, 2 / 11)):
    check(abs(mix[k - 1] - want) <= 0.02, f"{k}-word spans {mix[k - 1]:.4f} (want {want:.4f} +- 0.02)")
check(abs(swapped / n - 0.5) <= 0.02, f"swap rate {swapped / n:.4f} (0.5 +- 0.02)")
other_seed = json.loads(open(f"{tmp}/c.jsonl").readline())["tokens"]
check(other_seed != first, "another --seed gives another first sample")
sys.exit(fail)
PYEOF
