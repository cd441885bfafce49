#!/usr/bin/env bash
# `loom samples`: the samples a training run with the same flags consumes, as JSON lines, in
# consumption order. Checked on the mock data and on a real dataset (Shakespeare, preprocessed
# here): one line per sample of every global batch, iteration by iteration (with the batch
# ramp-up, as many as each iteration's batch), sample indices consecutive from 0; GPT labels are
# the tokens shifted by one (the sample's T + 1 tokens), -1 exactly where the input is the
# end-of-document token under --eod-mask-loss, loss_mask = labels >= 0; the same output twice;
# and the samples a run logs as consumed (its consumed_samples) equal the lines printed.
# BERT (--model bert, which builds no model for `loom samples`): on Alice's Adventures in Wonderland
# preprocessed with --split-sentences (one document per chapter) and on the mock data, every
# sample's structure: [CLS] first, two [SEP]s (one without the binary head) ending the real
# tokens, token types 0 then 1 up to the last [SEP] (0 without the binary head) and 0 on padding,
# the padding mask 1 exactly on the real tokens and [PAD] ids after them, labels only at real
# word positions (never [CLS], [SEP], [PAD]), loss_mask = labels >= 0, [MASK] nowhere else, about
# 15% of the words labelled (80% of them [MASK] on the book), both SOP labels met; the same output
# twice; the mock data's shape (lengths in [T/2, T], ids 0-3 special) and another seed's other
# samples; a dataset without --split-sentences refused naming it.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --lr 1e-3 --log-interval 1 --eval-iters 0)
# mock data, NullTokenizer's end-of-document id 6 of a vocabulary of 7: hit every few tokens
"$LOOM" samples "${model[@]}" --mock-data --tokenizer-type NullTokenizer --vocab-size 6 \
    --eod-mask-loss --global-batch-size 4 --train-iters 3 > "$tmp/mock.jsonl"
"$LOOM" samples "${model[@]}" --mock-data --tokenizer-type NullTokenizer --vocab-size 6 \
    --eod-mask-loss --global-batch-size 4 --train-iters 3 > "$tmp/mock2.jsonl"
cmp "$tmp/mock.jsonl" "$tmp/mock2.jsonl" || { echo "FAIL: two runs printed different samples"; exit 1; }
# ramp-up from 2 by 2 over 12 samples to 8
"$LOOM" samples "${model[@]}" --mock-data --vocab-size 97 --global-batch-size 8 \
    --rampup-batch-size 2 2 12 --train-samples 40 > "$tmp/ramp.jsonl"
OMP_NUM_THREADS=1 "$LOOM" train "${model[@]}" --mock-data --vocab-size 97 --global-batch-size 8 \
    --rampup-batch-size 2 2 12 --train-samples 40 --metrics-file "$tmp/ramp.metrics" > "$tmp/ramp.log"
# a real dataset
head -n 20 "$SRC/data/shakespeare.jsonl" > "$tmp/docs.jsonl"
"$LOOM" preprocess --input "$tmp/docs.jsonl" --output-prefix "$tmp/sh" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt" --append-eod > /dev/null
real=(--data-path "$tmp/sh_text_document" --vocab-file "$SRC/data/gpt2/vocab.json"
      --merge-file "$SRC/data/gpt2/merges.txt" --split 98,2,0 --eod-mask-loss)
"$LOOM" samples "${model[@]}" "${real[@]}" --global-batch-size 4 --train-iters 5 > "$tmp/real.jsonl"
"$PY" - "$tmp" <<'PYEOF'
import json, sys
tmp = sys.argv[1]
fail = 0
def check(cond, what):
    global fail
    if not cond:
        print("FAIL", what); fail = 1

def load(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]

def gpt_rows(rows, eod, what):
    for i, r in enumerate(rows):
        T = len(r["tokens"])
        check(r["sample"] == i, f"{what}: line {i} is sample {r['sample']}")
        for k in ("labels", "loss_mask", "token_types", "padding_mask"):
            check(len(r[k]) == T, f"{what}: {k} of sample {i} has {len(r[k])} values, not {T}")
        # labels: the next token; -1 where the input is the end-of-document token
        for t in range(T - 1):
            want = -1 if eod is not None and r["tokens"][t] == eod else r["tokens"][t + 1]
            if r["labels"][t] != want:
                check(False, f"{what}: sample {i} label {t} = {r['labels'][t]}, want {want}"); break
        check(r["loss_mask"] == [int(x >= 0) for x in r["labels"]], f"{what}: loss mask of {i}")
        check(r["padding_mask"] == [1] * T and r["token_types"] == [0] * T, f"{what}: masks of {i}")

mock = load("mock")
check(len(mock) == 12, f"mock: {len(mock)} samples, want 3 x 4")
check([r["iteration"] for r in mock] == [1] * 4 + [2] * 4 + [3] * 4, "mock: iterations")
gpt_rows(mock, 6, "mock")
check(sum(x == -1 for r in mock for x in r["labels"]) > 0, "mock: no end-of-document token met")

ramp = load("ramp")
per = {}
for r in ramp: per[r["iteration"]] = per.get(r["iteration"], 0) + 1
batches = [per[k] for k in sorted(per)]
# Megatron-LM's ramp-up: (8 - 2) / 2 = 3 increments over 12 samples, one every 4 consumed
want, consumed = [], 0
while consumed < 40:
    want.append(min(8, 2 + 2 * (consumed // 4)))
    consumed += want[-1]
check(len(batches) >= 5 and batches == want[:len(batches)], f"ramp: batches {batches}, want {want}")
gpt_rows(ramp, None, "ramp")
logged = [json.loads(l)["consumed_samples"] for l in open(f"{tmp}/ramp.metrics") if '"consumed_samples"' in l]
check(logged[-1] == len(ramp), f"ramp: training consumed {logged[-1]} samples, samples printed {len(ramp)}")

real = load("real")
check(len(real) == 20, f"real: {len(real)} samples")
gpt_rows(real, 50256, "real")
check(len({tuple(r["tokens"]) for r in real}) == 20, "real: repeated samples within one epoch")
print("gpt ok" if not fail else "FAILED")
sys.exit(fail)
PYEOF

# ---- BERT ----------------------------------------------------------------------------------
BERT_VOCAB="$SRC/data/bert/vocab.txt"
BOOK="$SRC/data/gutenberg/carroll-alice.txt"
if [ ! -f "$BERT_VOCAB" ] || [ ! -f "$BOOK" ]; then bash "$SRC/scripts/fetch_data.sh"; fi
"$PY" - "$BOOK" "$tmp/alice.jsonl" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for c in re.split(r"\n(?=CHAPTER [IVXL]+\.)", text)[1:]:
        f.write(json.dumps({"text": c}) + "\n")
PYEOF
wp=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$BERT_VOCAB")
"$LOOM" preprocess --input "$tmp/alice.jsonl" --output-prefix "$tmp/al" "${wp[@]}" --split-sentences > /dev/null
"$LOOM" preprocess --input "$tmp/alice.jsonl" --output-prefix "$tmp/al" "${wp[@]}" > /dev/null
bert=(--model bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64
      --micro-batch-size 2 --global-batch-size 8 --train-iters 25 --split 9,1,0)
"$LOOM" samples "${bert[@]}" --data-path "$tmp/al_text_sentence" "${wp[@]}" > "$tmp/bert.jsonl"
"$LOOM" samples "${bert[@]}" --data-path "$tmp/al_text_sentence" "${wp[@]}" > "$tmp/bert2.jsonl"
cmp "$tmp/bert.jsonl" "$tmp/bert2.jsonl" || { echo "FAIL: two BERT runs printed different samples"; exit 1; }
"$LOOM" samples "${bert[@]}" --data-path "$tmp/al_text_sentence" "${wp[@]}" --bert-no-binary-head \
    --train-iters 5 > "$tmp/bert_nb.jsonl"
if "$LOOM" samples "${bert[@]}" --data-path "$tmp/al_text_document" "${wp[@]}" > /dev/null 2> "$tmp/err"; then
  echo "FAIL: a dataset without --split-sentences was read with the binary head"; exit 1
fi
grep -q -- "--split-sentences" "$tmp/err" || { echo "FAIL: the refusal does not name --split-sentences: $(cat "$tmp/err")"; exit 1; }
mock=(--model bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --train-iters 25 --mock-data --vocab-size 100)
"$LOOM" samples "${mock[@]}" > "$tmp/bmock.jsonl"
"$LOOM" samples "${mock[@]}" > "$tmp/bmock2.jsonl"
cmp "$tmp/bmock.jsonl" "$tmp/bmock2.jsonl" || { echo "FAIL: two mock BERT runs printed different samples"; exit 1; }
"$LOOM" samples "${mock[@]}" --seed 7 --train-iters 1 > "$tmp/bmock_seed.jsonl"
"$LOOM" samples "${mock[@]}" --bert-no-binary-head --train-iters 5 > "$tmp/bmock_nb.jsonl"
"$PY" - "$tmp" <<'PYEOF'
import json, sys
tmp = sys.argv[1]
fail = 0
def check(cond, what):
    global fail
    if not cond:
        print("FAIL", what); fail = 1
def load(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]

def bert_rows(rows, what, T, PAD, CLS, SEP, MASK, binary, share, mask_share):
    words = labelled = as_mask = 0
    sops = set()
    for i, r in enumerate(rows):
        tok, lab, typ, pad, lm = r["tokens"], r["labels"], r["token_types"], r["padding_mask"], r["loss_mask"]
        check(r["sample"] == i and r["iteration"] == i // 8 + 1, f"{what}: line {i} is sample {r['sample']}")
        check(all(len(x) == T for x in (tok, lab, typ, pad, lm)), f"{what}: sample {i} lengths")
        n = sum(pad)
        check(pad == [1] * n + [0] * (T - n), f"{what}: sample {i} padding mask not 1s then 0s")
        check(all(x == PAD for x in tok[n:]), f"{what}: sample {i} padding ids")
        check(PAD not in tok[:n], f"{what}: sample {i} [PAD] among its real tokens")
        check(tok[0] == CLS and CLS not in tok[1:], f"{what}: sample {i} [CLS]")
        seps = [t for t in range(n) if tok[t] == SEP]
        check(len(seps) == (2 if binary else 1) and seps[-1] == n - 1, f"{what}: sample {i} [SEP]s at {seps}")
        want_types = [0] * (seps[0] + 1) + [1 if binary else 0] * (n - seps[0] - 1) + [0] * (T - n)
        check(typ == want_types, f"{what}: sample {i} token types")
        check(lm == [int(x >= 0) for x in lab], f"{what}: sample {i} loss mask vs labels")
        for t in range(T):
            if lab[t] >= 0:
                check(t < n and tok[t] not in (CLS, SEP) and lab[t] not in (PAD, CLS, SEP, MASK),
                      f"{what}: sample {i} label at position {t} (token {tok[t]}, label {lab[t]})")
                as_mask += tok[t] == MASK
            else:
                check(tok[t] != MASK, f"{what}: sample {i} [MASK] without a label at {t}")
        words += n - 1 - len(seps)
        labelled += sum(lm)
        check(r["sop_label"] in (0, 1) and (binary or r["sop_label"] == 0), f"{what}: sample {i} SOP label")
        sops.add(r["sop_label"])
    check(not binary or sops == {0, 1}, f"{what}: SOP labels met {sops}")
    got = labelled / max(1, words)
    check(share[0] <= got <= share[1], f"{what}: {got:.3f} of the words labelled, want {share}")
    if mask_share:
        check(as_mask / max(1, labelled) >= mask_share, f"{what}: {as_mask} of {labelled} labels are [MASK]")
    print(f"{what}: {len(rows)} samples, {got:.3f} of the words labelled, {as_mask}/{labelled} [MASK]")

bert = load("bert")
check(len(bert) == 200, f"bert: {len(bert)} samples, want 25 x 8")
bert_rows(bert, "bert", 64, 0, 101, 102, 103, True, (0.10, 0.16), 0.7)
check(len({tuple(r["tokens"]) for r in bert}) > 150, "bert: many repeated samples")
bert_rows(load("bert_nb"), "bert without binary head", 64, 0, 101, 102, 103, False, (0.10, 0.16), 0.7)
mock = load("bmock")
check(len(mock) == 200, f"mock bert: {len(mock)} samples")
bert_rows(mock, "mock bert", 32, 0, 1, 2, 3, True, (0.11, 0.19), 1.0)
check(all(16 <= sum(r["padding_mask"]) <= 32 for r in mock), "mock bert: lengths outside [T/2, T]")
check(len({sum(r["padding_mask"]) for r in mock}) > 8, "mock bert: lengths not random")
check(all(4 <= x < 100 for r in mock for x in r["labels"] if x >= 0), "mock bert: label ids")
seed = load("bmock_seed")
check(all(a["tokens"] != b["tokens"] for a, b in zip(seed, mock)), "mock bert: --seed 7 gives the same samples")
bert_rows(load("bmock_nb"), "mock bert without binary head", 32, 0, 1, 2, 3, False, (0.08, 0.22), 1.0)
print("bert ok" if not fail else "FAILED")
sys.exit(fail)
PYEOF
