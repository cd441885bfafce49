#!/usr/bin/env bash
# The GPT sample order against an independent reference of Megatron-core's dataset code
# (tests/ref/megatron_data_ref.py, numpy's own RandomState): the tokens, source dataset and
# unshuffled sample of the first 10,000 training samples and of every validation and test sample
# agree, on four Gutenberg books preprocessed here with `loom preprocess` (GPT-2 BPE, one document
# per paragraph), for: one dataset; several epochs with and without the separate last epoch; a
# 3-way blend; datasets per split (a blend for training, single datasets for validation and
# test); 3 seeds; and `loom samples` (the CLI) on the blend. Then the index cache
# (--data-cache-path): loom's cache files are found by the reference under Megatron's names and
# hold its arrays; the reference's cache is read by loom; a damaged or foreign cache is rebuilt.
set -euo pipefail
LOOM=${LOOM:-build/loom}
PY=${PYTHON:-/usr/bin/python3}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${LOOM_BUILD:-$SRC/build}
CHECK=$BUILD/tests/gpt_order_check
REF=$SRC/tests/ref/megatron_data_ref.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
"$PY" - "$SRC/data/gutenberg" <<'PY'
import json, re, sys
for name in ["austen-emma", "carroll-alice", "shakespeare-hamlet", "blake-poems"]:
    text = open(f"{sys.argv[1]}/{name}.txt", encoding="utf-8", errors="replace").read()
    with open(f"{name}.jsonl", "w") as f:
        for p in re.split(r"\n\s*\n", text):
            if p.strip():
                f.write(json.dumps({"text": p.strip()}) + "\n")
PY
for b in austen-emma carroll-alice shakespeare-hamlet blake-poems; do
    "$LOOM" preprocess --input "$b.jsonl" --output-prefix "$b" --tokenizer-type GPT2BPETokenizer \
        --vocab-file "$SRC/data/gpt2/vocab.json" --merge-file "$SRC/data/gpt2/merges.txt" \
        --append-eod --workers 2 > /dev/null
done
E=$tmp/austen-emma_text_document A=$tmp/carroll-alice_text_document
H=$tmp/shakespeare-hamlet_text_document B=$tmp/blake-poems_text_document
T=64
# samples per epoch of Emma's training split (969,30,1): pick requests whose last epoch is below
# and above Megatron's 80% threshold
per_epoch=$("$PY" -c "
import sys; sys.path.insert(0, '$SRC/tests/ref'); import megatron_data_ref as m
d = m.Indexed('$E'); n = d.sequence_lengths.shape[0]; mt = m.split_matrix('969,30,1')
b, e = int(round(mt[0][0] * n)), int(round(mt[0][1] * n))
print((int(d.sequence_lengths[b:e].sum()) - 1) // $T)")
n_sep=$((2 * per_epoch + per_epoch / 4))
n_nosep=$((2 * per_epoch + per_epoch * 9 / 10))
count=0
compare() { # NAME DATA_PATH SPLIT WHICH N SEED PER_SPLIT [CACHE [REF_ARGS...]]
    local name=$1 path=$2 split=$3 which=$4 n=$5 seed=$6 per=$7
    shift 7
    local cache=() refargs=()
    if [ $# -gt 0 ]; then cache=("$1"); refargs=(--cache-path "$1"); shift; refargs+=("$@"); fi
    # a damaged cache: the reference (which, as Megatron, trusts a cache) builds afresh
    [ -n "${REF_FRESH:-}" ] && refargs=()
    "$CHECK" "$path" "$split" "$which" "$n" $T "$seed" "$per" 10000 "${cache[@]}" \
        | grep -v '^loom:' > "$name.loom"
    local ps=(); [ "$per" = 1 ] && ps=(--per-split)
    "$PY" "$REF" --data-path "$path" --split "${split/-/969,30,1}" --which "$which" \
        --num-samples "$n" --seq-length $T --seed "$seed" --count 10000 "${ps[@]}" \
        "${refargs[@]}" > "$name.ref"
    if ! cmp -s <(tail -n +2 "$name.loom") <(tail -n +2 "$name.ref") ||
       [ "$(head -1 "$name.loom" | cut -d' ' -f2)" != "$(head -1 "$name.ref" | cut -d' ' -f2)" ]; then
        echo "FAIL $name: loom and the reference differ"
        head -1 "$name.loom" "$name.ref"
        diff <(tail -n +2 "$name.loom" | cut -c1-80) <(tail -n +2 "$name.ref" | cut -c1-80) | head -5
        exit 1
    fi
    count=$((count + $(tail -n +2 "$name.loom" | wc -l)))
}
for seed in 1234 7 4294967295; do
    for which in train valid test; do
        n=10000; [ $which != train ] && n=320
        compare "one-$which-$seed" "$E" 969,30,1 $which $n $seed 0
        compare "blend-$which-$seed" "5 $E 3 $A 2 $H" 969,30,1 $which $n $seed 0
    done
    compare "sep-$seed" "$E" 969,30,1 train $n_sep $seed 0
    compare "nosep-$seed" "$E" 969,30,1 train $n_nosep $seed 0
    compare "per-train-$seed" "2 $A 1 $H" - train 10000 $seed 1
    compare "per-valid-$seed" "$B" - valid 320 $seed 1
    compare "per-test-$seed" "$H" - test 320 $seed 1
done
echo "$count samples equal to the reference's (one dataset, blend, per-split, separate and joint last epoch, 3 seeds)"
# the two epoch scenarios are 3 epochs each, on both sides of the 80% threshold
"$PY" -c "
tpe = $per_epoch * $T + 1  # a lower bound of the split's tokens: (tpe - 1) // T = per_epoch
import sys; sys.path.insert(0, '$SRC/tests/ref'); import megatron_data_ref as m
d = m.Indexed('$E'); n = d.sequence_lengths.shape[0]; mt = m.split_matrix('969,30,1')
tpe = int(d.sequence_lengths[int(round(mt[0][0] * n)):int(round(mt[0][1] * n))].sum())
for N, sep in (($n_sep, True), ($n_nosep, False)):
    E = -(-(N * $T + 1) // tpe)
    last = N - ((E - 1) * tpe - 1) // $T
    assert E == 3 and (last < int(0.8 * ((tpe - 1) // $T))) == sep, (N, E, last)
" || { echo "FAIL: the epoch scenarios are not where they should be"; exit 1; }
# `loom samples` over the blend: the CLI's first 200 training samples (4 iterations of 50)
"$LOOM" samples --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length $T \
    --micro-batch-size 5 --global-batch-size 50 --train-iters 4 --eval-iters 0 --lr 1e-3 \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$SRC/data/gpt2/vocab.json" \
    --merge-file "$SRC/data/gpt2/merges.txt" --data-path "5 $E 3 $A 2 $H" --seed 7 > cli.jsonl
"$PY" "$REF" --data-path "5 $E 3 $A 2 $H" --num-samples 200 --seq-length $T --seed 7 --count 200 > cli.ref
"$PY" - cli.jsonl cli.ref <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
ref = [list(map(int, l.split(":")[1].split())) for l in open(sys.argv[2]).readlines()[1:]]
assert len(got) == 200 == len(ref), (len(got), len(ref))
for g, r in zip(got, ref):
    assert g["tokens"] == r[:-1] and g["labels"] == r[1:], g["sample"]
print("loom samples: 200 samples equal to the reference's")
PY
# the index cache
mkdir cache
compare cache-write "5 $E 3 $A 2 $H" 969,30,1 train 2000 11 0 "$tmp/cache"
grep -q "cached 0" cache-write.loom
[ "$(ls cache | wc -l)" = 15 ] || { echo "FAIL: expected 3 x 4 GPT + 3 blend files"; ls cache; exit 1; }
grep -q "cached 1" cache-write.ref || { echo "FAIL: the reference did not find loom's cache"; exit 1; }
compare cache-read "5 $E 3 $A 2 $H" 969,30,1 train 2000 11 0 "$tmp/cache"
grep -q "cached 1" cache-read.loom || { echo "FAIL: loom did not read its own cache"; exit 1; }
mkdir refcache
"$PY" "$REF" --data-path "$E" --num-samples 3000 --seq-length $T --seed 5 --count 0 \
    --cache-path "$tmp/refcache" --write-cache > /dev/null
compare refcache "$E" 969,30,1 train 3000 5 0 "$tmp/refcache"
grep -q "cached 1" refcache.loom || { echo "FAIL: loom did not read the reference's cache"; exit 1; }
# damaged: a shuffle index that is not a permutation -> rebuilt, the same samples
"$PY" -c "
import glob, numpy; f = glob.glob('$tmp/refcache/*shuffle_index.npy')[0]
a = numpy.load(f); a[1] = a[0]; numpy.save(f, a)"
REF_FRESH=1 compare damaged "$E" 969,30,1 train 3000 5 0 "$tmp/refcache"
grep -q "cached 0" damaged.loom || { echo "FAIL: loom trusted a damaged cache"; exit 1; }
# a sample index shifted by one token, and a truncated document index -> rebuilt
"$PY" -c "
import glob, numpy; f = glob.glob('$tmp/refcache/*sample_index.npy')[0]
a = numpy.load(f); a[5:, 1] += 1; numpy.save(f, a)"
REF_FRESH=1 compare shifted "$E" 969,30,1 train 3000 5 0 "$tmp/refcache"
grep -q "cached 0" shifted.loom || { echo "FAIL: loom trusted a shifted sample index"; exit 1; }
f=$(ls "$tmp"/refcache/*document_index.npy); head -c 1000 "$f" > "$f.x"; mv "$f.x" "$f"
REF_FRESH=1 compare truncated "$E" 969,30,1 train 3000 5 0 "$tmp/refcache"
grep -q "cached 0" truncated.loom || { echo "FAIL: loom trusted a truncated file"; exit 1; }
# a description from another request under this request's name -> rebuilt
d=$(ls "$tmp"/refcache/*description.txt | head -1); sed -i 's/"random_seed": 5/"random_seed": 6/' "$d"
REF_FRESH=1 compare foreign "$E" 969,30,1 train 3000 5 0 "$tmp/refcache"
grep -q "cached 0" foreign.loom || { echo "FAIL: loom took another request's cache"; exit 1; }
[ -z "$(find cache refcache -name '*.tmp.*')" ] || { echo "FAIL: temporaries left"; exit 1; }
echo "cache: loom's read by the reference and by loom, the reference's by loom; damaged, shifted, truncated and foreign entries rebuilt"
