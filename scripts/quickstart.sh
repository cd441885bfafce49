#!/usr/bin/env bash
# The main job on its embedded default: install what is missing, build, fetch the bundled data,
# turn Shakespeare's plays into a Megatron dataset, train a small GPT on the CPU for a few minutes,
# report train/validation loss against the unigram entropy, and print a generated sample.
#   scripts/quickstart.sh [extra loom train flags, e.g. --train-iters 50]
# About 4 minutes on 2 cores of an AMD EPYC with AVX-512 (figures in docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# loom makes OpenBLAS use its AVX-512 kernels where the CPU has them, unless OPENBLAS_CORETYPE
# names other kernels: that choice is kept, so say what it costs.
case "${OPENBLAS_CORETYPE:-}" in
  "" | [Ss][Kk][Yy][Ll][Aa][Kk][Ee][Xx] | [Cc][Oo][Oo][Pp][Ee][Rr][Ll][Aa][Kk][Ee] | [Ss][Aa][Pp][Pp][Hh][Ii][Rr][Ee][Rr][Aa][Pp][Ii][Dd][Ss]) ;;
  *) if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
       echo "quickstart: note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE keeps OpenBLAS on kernels without AVX-512 on this AVX-512 CPU (matrix products about half as fast); unset it for the usual speed"
     fi ;;
esac
bash scripts/setup.sh --data
bash scripts/build.sh
LOOM=build/loom
RUN=runs/shakespeare
mkdir -p "$RUN"
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt)
$LOOM preprocess --input data/shakespeare.jsonl --output-prefix "$RUN/shakespeare" "${TOK[@]}" \
    --append-eod --workers "$(nproc)"
DATA="$RUN/shakespeare_text_document"
rm -rf "$RUN/ckpt"
$LOOM train --data-path "$DATA" --split 10,1,1 "${TOK[@]}" \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
    --micro-batch-size 16 --global-batch-size 32 --train-iters 300 \
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 20 --weight-decay 0.1 \
    --clip-grad 1.0 --hidden-dropout 0.1 --attention-dropout 0.1 \
    --log-interval 20 --eval-interval 100 --eval-iters 4 --seed 1234 \
    --save "$RUN/ckpt" --metrics-file "$RUN/metrics.jsonl" "$@"
H=$(/usr/bin/python3 scripts/unigram_entropy.py "$DATA")
/usr/bin/python3 - "$RUN/metrics.jsonl" "$H" <<'PY'
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in objs if "loss" in r]  # the iterations (not the test loss after training)
val = [r for r in rows if "val_loss" in r]
test = [r for r in objs if "test_loss" in r]
print(f"\nunigram entropy of the text: {float(sys.argv[2]):.3f} nats/token")
print(f"train loss: {rows[0]['loss']:.3f} at iteration {rows[0]['iteration']} -> {rows[-1]['loss']:.3f} at iteration {rows[-1]['iteration']}")
if val:
    print(f"validation loss: {val[-1]['val_loss']:.3f} at iteration {val[-1]['iteration']}")
if test:
    print(f"test loss (--split's third part): {test[-1]['test_loss']:.3f} after training")
PY
echo
echo "sample (loom generate --prompt 'ROMEO:'):"
$LOOM generate --load "$RUN/ckpt" "${TOK[@]}" --prompt "ROMEO:" --max-new-tokens 80 \
    --temperature 0.8 --top-k 40 --seed 7
