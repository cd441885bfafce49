#!/usr/bin/env bash
# T5's span-corruption samples as a training run reads them, checked through `loom samples --model
# t5` alone: Alice in Wonderland by chapter, preprocessed with --split-sentences
# (bert-base-uncased WordPiece), 3000 samples of 512 encoder and 128 decoder positions,
# --vocab-extra-ids 100 (ids: the vocabulary's V, then [BOS] V, [EOS] V+1, <extra_id_i> V+2+i):
#   - the layout: labels -1 on the encoder's positions, a label on every real decoder position
#     (the loss mask is the decoder's length), the real positions a prefix of each part;
#   - the encoder's input holds <extra_id_0>, <extra_id_1>, ... once each, in order, one per span;
#     the decoder's targets are (sentinel_i, span_i)... EOS and its input BOS then the targets but
#     the last; the spans are whole words (none starts with a "##" piece, none is followed by one);
#   - the masked share of the text's tokens 15% +- 0.5;
#   - the mean span length, in words: the spans' lengths are drawn from the geometric
#     distribution (p = 0.2) clipped at 10 words, whose mean this script computes from the
#     distribution itself, then shortened where they exceed the budget or the text, and spans
#     touching a masked token are dropped (Megatron-LM's procedure): so the measured mean is
#     compared with an independent simulation of that procedure (numpy's generator) over the same
#     texts, within 3%, and the simulation's own drawn lengths with the distribution's mean
#     within 1%;
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
args=(--model t5 --data-path "$tmp/alice_text_sentence" "${TOK[@]}" --vocab-extra-ids 100
      --split 100,0,0 --num-layers 1 --hidden-size 32 --num-attention-heads 4
      --seq-length 512 --decoder-seq-length 128 --hidden-dropout 0 --attention-dropout 0
      --micro-batch-size 8 --global-batch-size 48 --train-iters 63 --eval-iters 0)
"$LOOM" samples "${args[@]}" > "$tmp/a.jsonl"
"$LOOM" samples "${args[@]}" > "$tmp/b.jsonl"
"$LOOM" samples "${args[@]}" --seed 99 --train-iters 1 > "$tmp/c.jsonl"
cmp -s "$tmp/a.jsonl" "$tmp/b.jsonl" || { echo "FAIL: two runs printed different samples"; exit 1; }
"$PY" - "$tmp" "$VOCAB" <<'PYEOF'
import json, sys
import numpy as np
tmp, vocab = sys.argv[1], [l.rstrip("\n") for l in open(sys.argv[2], encoding="utf-8")]
V = len(vocab)
BOS, EOS, S0, NS = V, V + 1, V + 2, 100
TE, TD, P, MAXW, MASK_PROB = 512, 128, 0.2, 10, 0.15
piece = lambda t: t < V and vocab[t].startswith("##")
fail = 0
def check(cond, what):
    global fail
    print(("ok   " if cond else "FAIL ") + what)
    fail |= not cond

def words_of(toks):
    """whole words: a token and the ## pieces after it (lengths in tokens)"""
    w = []
    for t in toks:
        if w and piece(t): w[-1] += 1
        else: w.append(1)
    return w

# the distribution's mean: E[min(G, 10)], G geometric on {1, 2, ...} with p = 0.2
pk = [P * (1 - P) ** (k - 1) for k in range(1, MAXW)] + [(1 - P) ** (MAXW - 1)]
geo_mean = sum(k * q for k, q in zip(range(1, MAXW + 1), pk))

rng = np.random.default_rng(12345)
def simulate(toks):
    """Megatron-LM's span choice (create_masked_lm_predictions, geometric, whole words) over toks;
    returns the accepted spans' words and the words drawn"""
    w = words_of(toks)
    starts = np.cumsum([0] + w[:-1])
    n = len(toks)
    budget = min(MASK_PROB * n, max(1, round(n * MASK_PROB)))
    covered = np.zeros(n, bool)
    masked, out, drawn = 0, [], []
    for w0 in rng.permutation(len(w)):
        if masked >= budget: break
        g = min(int(rng.geometric(P)), MAXW)
        drawn.append(g)
        g = min(g, len(w) - w0)
        span = sum(w[w0:w0 + g])
        while masked + span > budget and g > 1:
            g -= 1
            span -= w[w0 + g]
        if masked + span > budget: continue
        a = starts[w0]
        if covered[a:a + span].any(): continue
        covered[a:a + span] = True
        masked += span
        out.append(g)
    return out, drawn

layout_bad = sentinel_bad = dec_bad = whole_bad = 0
masked = text = 0
span_words, sim_words, sim_drawn = [], [], []
first = None
n = 0
for line in open(f"{tmp}/a.jsonl"):
    s = json.loads(line)
    n += 1
    tok, lab, pm, tt = s["tokens"], s["labels"], s["padding_mask"], s["token_types"]
    if first is None: first = tok
    ne, nd = sum(pm[:TE]), sum(pm[TE:])
    layout_bad += (pm[:TE] != [1] * ne + [0] * (TE - ne) or pm[TE:] != [1] * nd + [0] * (TD - nd)
                   or any(l != -1 for l in lab[:TE]) or lab[TE:] != lab[TE:TE + nd] + [-1] * (TD - nd)
                   or min(lab[TE:TE + nd]) < 0 or tt != [0] * TE + [1] * TD)
    enc, din, dout = tok[:ne], tok[TE:TE + nd], lab[TE:TE + nd]
    sent = [t for t in enc if t >= S0]
    k = len(sent)
    sentinel_bad += sent != list(range(S0, S0 + k))
    # the decoder's targets: (sentinel_i, span_i)... EOS; its input: BOS, targets but the last
    spans, cur = [], None
    for t in dout[:-1]:
        if t >= S0:
            if cur is not None: spans.append(cur)
            cur = []
        elif cur is None or t in (BOS, EOS): cur = None; break
        else: cur.append(t)
    ok = cur is not None and dout[-1] == EOS and din == [BOS] + dout[:-1]
    if ok: spans.append(cur)
    ok = ok and [t for t in dout if t >= S0] == sent and all(spans)
    dec_bad += not ok
    if not ok: continue
    # the text: the encoder's input with each sentinel replaced by its span
    orig, ends = [], []
    for t in enc:
        if t >= S0:
            if spans[t - S0] and piece(spans[t - S0][0]): whole_bad += 1
            orig += spans[t - S0]
            ends.append(len(orig))
        else:
            orig.append(t)
    whole_bad += sum(e < len(orig) and piece(orig[e]) for e in ends)
    masked += sum(map(len, spans))
    text += len(orig)
    span_words += [len(words_of(sp)) for sp in spans]
    got, drawn = simulate(orig)
    sim_words += got
    sim_drawn += drawn

check(n == 63 * 48, f"{n} samples")
check(layout_bad == 0, f"rows with a bad layout (labels, padding, token types): {layout_bad}")
check(sentinel_bad == 0, f"encoder inputs whose sentinels are not <extra_id_0>.. once each, in order: {sentinel_bad}")
check(dec_bad == 0, f"decoders not BOS + (sentinel, span)... / (sentinel, span)... + EOS: {dec_bad}")
check(whole_bad == 0, f"spans that split a word: {whole_bad}")
share = masked / text
check(abs(share - 0.15) <= 0.005, f"masked share {share:.4f} of {text} tokens (15% +- 0.5)")
m, sm, sd = np.mean(span_words), np.mean(sim_words), np.mean(sim_drawn)
check(abs(sd / geo_mean - 1) <= 0.01,
      f"simulation: mean words drawn {sd:.4f}, the clipped geometric's mean {geo_mean:.4f} (1%)")
check(abs(m / sm - 1) <= 0.03,
      f"mean span {m:.4f} words over {len(span_words)} spans; the simulation's {sm:.4f} (3%); "
      f"{m / geo_mean:.3f} of the distribution's mean")
other_seed = json.loads(open(f"{tmp}/c.jsonl").readline())["tokens"]
check(other_seed != first, "another --seed gives another first sample")
sys.exit(fail)
PYEOF
