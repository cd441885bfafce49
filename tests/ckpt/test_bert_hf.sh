#!/usr/bin/env bash
# `loom convert` for Hugging Face's Megatron-BERT (model_type "megatron-bert"): random models
# written by the independent PyTorch reference (tests/ref/bert_ref.py make; vocabulary 100, which
# loom pads to 128) go hf -> loom -> hf, and must come back bit for bit: every tensor equal to the
# original (read with gpt_ref.py's safetensors reader), the same tensor names, the same
# config.json keys and values (pad_token_id is the tokenizer's and not kept; without the binary
# head the architecture written is MegatronBertForMaskedLM). The loom checkpoint in between is
# checked against Megatron's layout computed here: the family "bert" with its encoder-form
# settings, the q/k/v rows grouped per head (query, key, value), the padded vocabulary rows zero.
# Cases: with the binary head (MegatronBertForPreTraining), without it (--no-binary-head: no
# pooler, no cls.seq_relationship), the tanh GELU (hidden_act gelu_new), and a file that carries
# the tied decoder's copies. Refusals (one line "loom: error: ...", exit 1): model_type "bert"
# (post-LN), type_vocab_size 3, a loom model whose MLP and LM head GELUs differ, a decoder copy
# that differs from the word embedding, a pooler without the binary head.
set -uo pipefail
LOOM=${LOOM:-build/loom}
PYTHON=${PYTHON:-/usr/bin/python3}
REFDIR="$(cd "$(dirname "$0")/../ref" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# the round trip of HF_DIR through loom; $2: the case's name; the rest: the checker's options
roundtrip() {
  local hf=$1 name=$2
  shift 2
  local ck="$tmp/$name.ck" back="$tmp/$name.back"
  if ! "$LOOM" convert --loader hf --saver loom --load-dir "$hf" --save-dir "$ck" >/dev/null 2>"$tmp/err"; then
    bad "$name: hf -> loom: $(cat "$tmp/err")"
    return
  fi
  if ! "$LOOM" convert --loader loom --saver hf --load-dir "$ck" --save-dir "$back" >/dev/null 2>"$tmp/err"; then
    bad "$name: loom -> hf: $(cat "$tmp/err")"
    return
  fi
  if "$PYTHON" - "$hf" "$ck" "$back" "$@" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[-1])
from gpt_ref import st_read
hf, ck, back = sys.argv[1:4]
opts = sys.argv[4:-1]
binary = "--no-binary-head" not in opts
errs = []
orig, out = st_read(hf + "/model.safetensors"), st_read(back + "/model.safetensors")
# the tied decoder's copies are not written back
tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
want = set(orig) - tied
if set(out) != want:
    errs.append(f"tensor names: missing {sorted(want - set(out))}, extra {sorted(set(out) - want)}")
for n in sorted(want & set(out)):
    a, b = orig[n], out[n]
    if a.shape != b.shape or not bool((a == b).all()):  # float32 values held exactly in float64
        errs.append(f"{n}: not bit for bit equal")
c0, c1 = (json.load(open(d + "/config.json")) for d in (hf, back))
skip = {"pad_token_id"} | (set() if binary else {"architectures"})
for k in sorted((set(c0) | set(c1)) - skip):
    if c0.get(k) != c1.get(k):
        errs.append(f"config {k}: {c0.get(k)!r} -> {c1.get(k)!r}")
arch = ["MegatronBertForPreTraining" if binary else "MegatronBertForMaskedLM"]
if c1.get("architectures") != arch:
    errs.append(f"architectures {c1.get('architectures')} (expected {arch})")
# the loom checkpoint against Megatron's layout
meta = json.load(open(ck + "/meta.json"))
m = meta["model"]
if meta.get("family") != "bert":
    errs.append(f"meta.json family {meta.get('family')!r}")
for k, v in {"encoder": True, "num_tokentypes": 2, "lm_head_transform": True, "output_bias": True,
             "binary_head": binary, "vocab_size": c0["vocab_size"], "padded_vocab_size": 128,
             "num_layers": c0["num_hidden_layers"], "hidden_size": c0["hidden_size"],
             "ffn_hidden_size": c0["intermediate_size"]}.items():
    if m.get(k) != v:
        errs.append(f"meta.json {k}: {m.get(k)!r}, expected {v!r}")
gelu = "erf" if c0["hidden_act"] == "gelu" else "tanh"
if m.get("gelu") != gelu or m.get("head_gelu") != gelu:
    errs.append(f"meta.json GELUs {m.get('gelu')}/{m.get('head_gelu')}, expected {gelu}")
L = st_read(ck + "/model.safetensors")
V, H, NH = c0["vocab_size"], c0["hidden_size"], c0["num_attention_heads"]
HS = H // NH
for ln, hn in (("embedding.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"),
               ("output_layer.bias", "cls.predictions.bias")):
    t = L[ln]
    if t.shape[0] != 128 or not bool((t[:V] == orig[hn]).all()) or bool(t[V:].abs().sum() != 0):
        errs.append(f"{ln}: not the {V} rows of {hn} then zero rows to 128")
for i in range(c0["num_hidden_layers"]):
    for what in ("weight", "bias"):
        qkv = L[f"encoder.layers.{i}.self_attention.linear_qkv.{what}"]
        for h in range(NH):
            for j, part in enumerate(("query", "key", "value")):
                src = orig[f"bert.encoder.layer.{i}.attention.self.{part}.{what}"][h * HS:(h + 1) * HS]
                got = qkv[(3 * h + j) * HS:(3 * h + j + 1) * HS]
                if not bool((got == src).all()):
                    errs.append(f"layer {i} qkv {what}: head {h} {part} rows out of place")
for e in errs[:10]:
    print("  " + e)
sys.exit(1 if errs else 0)
EOF
  then ok; else bad "$name: round trip"; fi
}

# expect_error "what" "text the message must contain" command...
expect_error() {
  local what=$1 needle=$2
  shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c '^loom: error:')" -eq 1 ] &&
     [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && grep -qF -- "$needle" <<< "$out"; then
    ok
  else
    bad "$what (exit $rc): $out"
  fi
}

make_ref() { "$PYTHON" "$REFDIR/bert_ref.py" make --vocab 100 "$@" >/dev/null; }

make_ref --out "$tmp/pre" --seed 3
roundtrip "$tmp/pre" pretraining "$REFDIR"
make_ref --out "$tmp/mlm" --seed 4 --no-binary-head
roundtrip "$tmp/mlm" masked-lm --no-binary-head "$REFDIR"
make_ref --out "$tmp/tanh" --seed 5 --mlp-gelu tanh --layers 3 --heads 2
roundtrip "$tmp/tanh" tanh-gelu "$REFDIR"
grep -q '"hidden_act": "gelu_new"' "$tmp/tanh-gelu.back/config.json" || bad "tanh: hidden_act not gelu_new"

# the tied decoder written out (as some files have it): taken; changed: refused
"$PYTHON" - "$tmp/pre" "$tmp/dec" "$tmp/decbad" "$REFDIR" <<'EOF'
import json, os, shutil, sys
sys.path.insert(0, sys.argv[4])
from gpt_ref import st_read, st_write
src, good, badd = sys.argv[1:4]
w = st_read(src + "/model.safetensors")
w["cls.predictions.decoder.weight"] = w["bert.embeddings.word_embeddings.weight"].clone()
w["cls.predictions.decoder.bias"] = w["cls.predictions.bias"].clone()
for d in (good, badd):
    os.makedirs(d)
    shutil.copy(src + "/config.json", d)
st_write(good + "/model.safetensors", w)
w["cls.predictions.decoder.weight"][3, 5] += 1.0
st_write(badd + "/model.safetensors", w)
EOF
roundtrip "$tmp/dec" tied-decoder "$REFDIR"
expect_error "untied decoder" "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight" \
  "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/decbad" --save-dir "$tmp/out"

# refusals
mkdir -p "$tmp/bert"
"$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model_type"]="bert"; json.dump(c, open(sys.argv[2], "w"))' \
  "$tmp/pre/config.json" "$tmp/bert/config.json"
cp "$tmp/pre/model.safetensors" "$tmp/bert/"
expect_error "post-LN bert" "model_type \"bert\" is Hugging Face's post-LN BERT; loom's BERT is Megatron-LM's pre-LN one, model_type \"megatron-bert\"" \
  "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/bert" --save-dir "$tmp/out"
mkdir -p "$tmp/tv3"
"$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["type_vocab_size"]=3; json.dump(c, open(sys.argv[2], "w"))' \
  "$tmp/pre/config.json" "$tmp/tv3/config.json"
cp "$tmp/pre/model.safetensors" "$tmp/tv3/"
expect_error "type_vocab_size 3" "type_vocab_size 3: loom's BERT has 2 token types" \
  "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/tv3" --save-dir "$tmp/out"
# a loom BERT whose LM head has the tanh GELU and whose MLP has the erf one
cp -r "$tmp/pretraining.ck" "$tmp/mixed"
"$PYTHON" -c 'import json,sys; p=sys.argv[1]; m=json.load(open(p)); m["model"]["head_gelu"]="tanh"; json.dump(m, open(p, "w"))' \
  "$tmp/mixed/meta.json"
expect_error "mixed GELUs" "its MLP's GELU is the erf form and its LM head's the tanh form" \
  "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/mixed" --save-dir "$tmp/out"
# a pooler without cls.seq_relationship
mkdir -p "$tmp/pool"
cp "$tmp/pre/config.json" "$tmp/pool/"
"$PYTHON" - "$tmp/pre/model.safetensors" "$tmp/pool/model.safetensors" "$REFDIR" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from gpt_ref import st_read, st_write
w = st_read(sys.argv[1])
st_write(sys.argv[2], {k: v for k, v in w.items() if not k.startswith("cls.seq_relationship.")})
EOF
expect_error "pooler alone" "bert.pooler.* but no cls.seq_relationship.*" \
  "$LOOM" convert --loader hf --saver loom --load-dir "$tmp/pool" --save-dir "$tmp/out"
[ ! -e "$tmp/out/model.safetensors" ] || bad "a refused conversion left a file"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
