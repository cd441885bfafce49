#!/usr/bin/env bash
# Megatron-LM flags without a setting of their own in loom: those asking for what loom always does
# are taken, named in one "loom: note:" line, and change nothing (the same losses and gradient
# norms bit for bit); the older position-embedding flags are the same as the newer one
# (--use-rotary-position-embeddings --no-position-embedding as --position-embedding-type rope,
# --no-position-embedding alone as none); --tokenizer-type NullTokenizer --vocab-size 63 is a
# vocabulary of 64, as Megatron-LM's (63 ids and the end-of-document one); --log-params-norm logs
# the norm of the weights, and changes nothing else; --reset-position-ids and
# --reset-attention-mask change nothing on data without an end-of-document token, and on data with
# several a sample each changes the losses (their values: tests/model/test_torch_parity.sh).
# The flags asking for what loom does not do are errors: tests/model/test_cli_errors.sh.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --eval-iters 0
      --log-interval 1 --lr 1e-3 --seed 11)
noop=(--use-flash-attn --use-mcore-models --transformer-impl transformer_engine --overlap-grad-reduce
      --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32 --no-masked-softmax-fusion
      --no-bias-swiglu-fusion --no-bias-dropout-fusion
      --no-gradient-accumulation-fusion --no-rope-fusion --no-persist-layer-norm
      --no-async-tensor-model-parallel-allreduce --log-throughput --no-load-rng --no-save-rng
      --data-impl mmap --num-workers 2 --distributed-backend nccl --rotary-percent 1.0
      --context-parallel-size 1 --expert-model-parallel-size 1 --fp32-residual-connection
      --use-checkpoint-args --data-cache-path "$tmp/cache" --dataloader-type single
      --optimizer adam --main-grads-dtype fp32 --exp-avg-dtype fp32 --exp-avg-sq-dtype fp32
      --DDP-impl local --timing-log-level 2 --timing-log-option minmax --vocab-extra-ids 0
      --defer-embedding-wgrad-compute --log-loss-scale-to-tensorboard --kv-channels 8
      --overlap-p2p-communication --no-overlap-grad-reduce
      --bias-gelu-fusion --no-check-for-nan-in-loss-and-grad --log-straggler
      --disable-straggler-on-startup --num-distributed-optimizer-instances 1
      --num-dataset-builder-threads 2 --local-rank 0 --no-initialization --train-sync-interval 1
      --apply-query-key-layer-scaling
      --encoder-seq-length 16
      --tensorboard-queue-size 1000
      --wandb-exp-name x --wandb-save-dir "$tmp/wandb" --manual-gc --manual-gc-interval 10
      --empty-unused-memory-level 1 --distributed-timeout-minutes 60 --cross-entropy-loss-fusion
      --no-create-attention-mask-in-dataloader --exit-on-missing-checkpoint
      --use-cpu-initialization --ddp-average-in-collective --align-grad-reduce --legacy-tokenizer
      --sgd-momentum 0.9 --mmap-bin-files --no-mmap-bin-files --recompute-activations
      --recompute-granularity selective)
run plain
run megatron "${noop[@]}"
same plain megatron
notes=$(grep -c '^loom: note: flags with no effect:' "$tmp/megatron.log")
missing=""
for fl in "${noop[@]}"; do
  case $fl in
    --rotary-percent|--context-parallel-size|--expert-model-parallel-size|--kv-channels|\
      --encoder-seq-length|--data-cache-path|--optimizer|--vocab-extra-ids) continue ;; # loom's own
    --*) grep -q -- "$fl: " "$tmp/megatron.log" || missing="$missing $fl" ;;
  esac
done
if [ "$notes" = 1 ] && [ -z "$missing" ] && ! grep -q "note:" "$tmp/plain.log"; then
  echo "ok   one note names every flag with no effect"
else
  echo "FAIL the note: $notes lines, not named:$missing"; fail=1
fi
run rope --position-embedding-type rope
run rope-old --use-rotary-position-embeddings --no-position-embedding
same rope rope-old
run none --position-embedding-type none
run none-old --no-position-embedding
same none none-old
# Megatron-LM's NullTokenizer: --vocab-size ids and an end-of-document one (64 in all, as plain)
run null --tokenizer-type NullTokenizer --vocab-size 63
same plain null
# --log-params-norm: the same training, and the last logged norm is the L2 norm of the saved
# weights (every tensor of the checkpoint once, read here without loom)
run pnorm --log-params-norm --save "$tmp/pnorm-ckpt"
same plain pnorm
if "$PY" - "$tmp/pnorm.jsonl" "$tmp/pnorm-ckpt" <<'PYEOF'
import array, json, math, struct, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
it = open(sys.argv[2] + "/latest_checkpointed_iteration.txt").read().strip()
data = open(f"{sys.argv[2]}/iter_{int(it):07d}/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
ss = 0.0
for name, e in json.loads(data[8:8 + n]).items():
    if name == "__metadata__":
        continue
    assert e["dtype"] == "F32", e
    b, en = e["data_offsets"]
    ss += sum(float(v) * float(v) for v in array.array("f", data[8 + n + b:8 + n + en]))
want, got = math.sqrt(ss), rows[-1]["params_norm"]
print(f"params norm logged {got!r}, of the saved weights {want!r}")
sys.exit(0 if all("params_norm" in r for r in rows) and abs(got - want) <= 1e-9 * want else 1)
PYEOF
then
  echo "ok   --log-params-norm logs the norm of the weights"
else
  echo "FAIL --log-params-norm"; fail=1
fi
# --apply-layernorm-1p (zero-centred norm weights w, the norms scaling by 1 + w): the same model
# as plain. Its first two iterations are plain's bit for bit (1 + 0 is 1; after one step
# 1 + (-u) rounds as 1 - u), the others within 1e-6 (later steps round differently); the
# checkpoint holds w = gamma - 1 (within 1e-6 of plain's gamma - 1); Hugging Face's export holds
# 1 + w; a resume keeps the checkpoint's choice, and the flag against a plain checkpoint is refused
run ln1p --apply-layernorm-1p --save "$tmp/ln1p-ckpt"
for c in pnorm ln1p; do
  "$LOOM" convert --loader loom --saver hf --load-dir "$tmp/$c-ckpt" --save-dir "$tmp/$c-hf" > /dev/null 2>&1
done
if "$PY" - "$tmp" <<'PYEOF'
import array, json, struct, sys
t = sys.argv[1]
def tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, e in json.loads(data[8:8 + n]).items():
        if name != "__metadata__":
            b, en = e["data_offsets"]
            out[name] = array.array("f", data[8 + n + b:8 + n + en])
    return out
la = [float(l.split()[0]) for l in open(f"{t}/pnorm.txt")]
lb = [float(l.split()[0]) for l in open(f"{t}/ln1p.txt")]
assert len(la) == len(lb) == 4 and la[:2] == lb[:2], (la, lb)
assert all(abs(a - b) <= 1e-6 * abs(a) for a, b in zip(la, lb)), (la, lb)
pa = tensors(f"{t}/pnorm-ckpt/iter_0000004/model.safetensors")
pb = tensors(f"{t}/ln1p-ckpt/iter_0000004/model.safetensors")
norms = [k for k in pa if k.endswith("layernorm.weight")]
assert len(norms) == 5, norms
for k in norms:  # plain's gamma - 1 against the stored w: near 0, not near 1
    assert all(abs((x - 1.0) - y) <= 1e-6 for x, y in zip(pa[k], pb[k])), k
    assert max(abs(y) for y in pb[k]) < 0.1, k
ha, hb = tensors(f"{t}/pnorm-hf/model.safetensors"), tensors(f"{t}/ln1p-hf/model.safetensors")
for k in ("ln_f.weight", "h.0.ln_1.weight", "h.1.ln_2.weight"):
    assert all(abs(x - y) <= 1e-6 for x, y in zip(ha[k], hb[k])), k
meta = json.load(open(f"{t}/ln1p-ckpt/iter_0000004/meta.json"))
assert meta["model"].get("apply_layernorm_1p") is True, meta["model"]
print(f"losses {la} and {lb}")
PYEOF
then
  echo "ok   --apply-layernorm-1p trains as plain (the first two iterations bit for bit), stores gamma - 1, exports gamma"
else
  echo "FAIL --apply-layernorm-1p"; fail=1
fi
out=$("$LOOM" "${base[@]}" --train-iters 5 --load "$tmp/pnorm-ckpt" --apply-layernorm-1p 2>&1) && rc=0 || rc=$?
if [ $rc -ne 0 ] && grep -q "apply-layernorm-1p contradicts the checkpoint" <<< "$out" &&
   "$LOOM" "${base[@]}" --train-iters 5 --override-opt_param-scheduler --load "$tmp/ln1p-ckpt" > "$tmp/ln1p-resume.log" 2>&1 &&
   grep -q "iteration        5/" "$tmp/ln1p-resume.log" &&
   grep -q "norms zero-centred (1 + w)" "$tmp/ln1p-resume.log"; then
  echo "ok   --apply-layernorm-1p against a plain checkpoint is refused; a 1p checkpoint resumes without it"
else
  echo "FAIL --apply-layernorm-1p resume: $out"; fail=1
fi
if cmp -s "$tmp/rope.txt" "$tmp/plain.txt" || cmp -s "$tmp/none.txt" "$tmp/rope.txt"; then
  echo "FAIL the position embeddings made no difference"; fail=1
fi
# The GELU's form by Megatron-LM's rule: the tanh form with biases (its fused bias-GELU, on by
# default) or with --openai-gelu, the exact (erf) one without biases or with --no-bias-gelu-fusion
# (the forms' values: tests/ops/test_ops_act.c; a model of each against PyTorch:
# tests/model/test_torch_parity.sh)
run openai --openai-gelu
same plain openai
run per-token --calculate-per-token-loss # without a loss mask, the two normalisations agree
same plain per-token
run erf --no-bias-gelu-fusion
run nobias --disable-bias-linear
run nobias-tanh --disable-bias-linear --openai-gelu
form_of() { grep -o 'MLP GELU ([a-z]*)' "$tmp/$1.log" | head -1; }
forms="$(form_of plain), $(form_of openai), $(form_of erf), $(form_of nobias), $(form_of nobias-tanh)"
if [ "$forms" = "MLP GELU (tanh), MLP GELU (tanh), MLP GELU (erf), MLP GELU (erf), MLP GELU (tanh)" ] &&
   ! cmp -s "$tmp/plain.txt" "$tmp/erf.txt" && ! cmp -s "$tmp/nobias.txt" "$tmp/nobias-tanh.txt"; then
  echo "ok   the GELU's form: tanh by default and with --openai-gelu, erf without biases or the fusion"
else
  echo "FAIL the GELU's form: $forms"; fail=1
fi
# a checkpoint keeps its form: resumed without the flag it trains on in the erf form (the same
# losses as the straight run); a flag asking for the other form is an error
ITERS=6 run erf6 --no-bias-gelu-fusion --train-iters 6
run erf-save --no-bias-gelu-fusion --train-iters 6 --exit-interval 4 --save "$tmp/erf-ckpt"
run erf-resumed --load "$tmp/erf-ckpt" --train-iters 6
if [ "$(tail -2 "$tmp/erf6.txt")" = "$(cat "$tmp/erf-resumed.txt")" ] &&
   [ "$(form_of erf-resumed)" = "MLP GELU (erf)" ]; then
  echo "ok   resumed without --no-bias-gelu-fusion, the checkpoint's erf form goes on"
else
  echo "FAIL the resumed run's GELU: $(form_of erf-resumed)"; fail=1
fi
out=$("$LOOM" "${base[@]}" --load "$tmp/erf-ckpt" --train-iters 6 --openai-gelu 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . <<< "$out")" = 1 ] && grep -q -- '--openai-gelu' <<< "$out" &&
   grep -q 'erf form' <<< "$out"; then
  echo "ok   --openai-gelu against an erf checkpoint: $out"
else
  echo "FAIL --openai-gelu against an erf checkpoint (exit $rc): $out"; fail=1
fi
# Megatron-LM's documents packed into samples. GPT-2's end-of-document id 50256 lies outside the
# vocabulary of 64 that the mock data draws from: one document a sample, and both flags give the
# same bits as without them
SRC=${LOOM_SRC:-$(dirname "$0")/../..}
gpt2tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$SRC/data/gpt2/vocab.json"
         --merge-file "$SRC/data/gpt2/merges.txt")
run docs-none "${gpt2tok[@]}" --reset-position-ids --reset-attention-mask
same plain docs-none
# NullTokenizer's end-of-document id 6 of a vocabulary of 7: 2 to 3 documents in a sample of 16
null7=(--tokenizer-type NullTokenizer --vocab-size 6)
run docs-off "${null7[@]}"
run docs-both "${null7[@]}" --reset-position-ids --reset-attention-mask
run docs-pos "${null7[@]}" --reset-position-ids
run docs-mask "${null7[@]}" --reset-attention-mask
docs_of() { grep -o 'documents isolated at end-of-document id [0-9]* ([a-z ,]*)' "$tmp/$1.log" | head -1; }
differ=1
for a in docs-off docs-both docs-pos docs-mask; do
  for b in docs-off docs-both docs-pos docs-mask; do
    [[ "$a" < "$b" ]] && cmp -s "$tmp/$a.txt" "$tmp/$b.txt" && { echo "FAIL $a and $b train alike"; differ=0; }
  done
done
logged="$(docs_of docs-both); $(docs_of docs-pos); $(docs_of docs-mask)"
want="documents isolated at end-of-document id 6 (positions reset, attention masked); documents isolated at end-of-document id 6 (positions reset); documents isolated at end-of-document id 6 (attention masked)"
if [ $differ = 1 ] && [ "$logged" = "$want" ] && [ -z "$(docs_of docs-off)" ] &&
   [ "$(docs_of docs-none)" = "documents isolated at end-of-document id 50256 (positions reset, attention masked)" ]; then
  echo "ok   --reset-position-ids and --reset-attention-mask each change training, and the log says so"
else
  echo "FAIL the document flags' effect or log line: $logged"; fail=1
fi
# data options, not the model's: a checkpoint does not keep them (as Megatron-LM's); resumed with
# them, training goes on as the straight run
ITERS=6 run docs6 "${null7[@]}" --reset-position-ids --reset-attention-mask --train-iters 6
run docs-save "${null7[@]}" --reset-position-ids --reset-attention-mask --train-iters 6 \
    --exit-interval 4 --save "$tmp/docs-ckpt"
run docs-resumed "${null7[@]}" --reset-position-ids --reset-attention-mask --train-iters 6 \
    --load "$tmp/docs-ckpt"
if [ "$(tail -2 "$tmp/docs6.txt")" = "$(cat "$tmp/docs-resumed.txt")" ] &&
   ! grep -q 'reset' "$tmp/docs-ckpt/iter_0000004/meta.json"; then
  echo "ok   resumed with the document flags, the straight run's losses (the checkpoint has none)"
else
  echo "FAIL resuming with the document flags"; fail=1
fi
exit $fail
