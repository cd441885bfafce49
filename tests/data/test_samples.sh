#!/usr/bin/env bash
# `loom samples`: the samples a training run with the same flags consumes, as JSON lines, in
# consumption order. Checked on the mock data and on a real dataset (Shakespeare, preprocessed
# here): one line per sample of every global batch, iteration by iteration (with the batch
# ramp-up, as many as each iteration's batch), sample indices consecutive from 0; GPT labels are
# the tokens shifted by one (the sample's T + 1 tokens), -1 exactly where the input is the
# end-of-document token under --eod-mask-loss, loss_mask = labels >= 0; the same output twice;
# and the samples a run logs as consumed (its consumed_samples) equal the lines printed.
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
print("ok" if not fail else "FAILED")
sys.exit(fail)
PYEOF
