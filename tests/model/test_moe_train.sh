#!/usr/bin/env bash
# MoE layers in the GPT decoder, trained end to end on the cpu:
# - a model whose MoE layers have one expert (top-1: its probability is 1) trains exactly as the
#   dense model with that expert's weights (a dense checkpoint's MLP renamed to
#   mlp.experts.local_experts.0.*, a router added): the MoE layer is the decoder's MLP choice;
# - the balancing loss goes into the gradient only: with --moe-aux-loss-coeff the first
#   iteration's lm loss is the one without it, the gradient norm is not; load_balancing_loss and
#   z_loss are logged on their own line and in the metrics file, with each MoE layer's expert load
#   (shares summing to 1);
# - --moe-layer-freq as a list leaves the layers it marks 0 dense (in the checkpoint and the log);
#   such a checkpoint's export to Hugging Face is a one-line error;
# - the expert bias (sigmoid scores, --moe-router-enable-expert-bias) moves, is kept in
#   checkpoints, and a run resumed from one trains as the straight run, bit for bit;
# - capacity with padding and group-limited routing train.
. "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 97 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --hidden-dropout 0
      --attention-dropout 0 --log-interval 1 --eval-iters 0 --seed 7)
ITERS=4

# one expert = the dense MLP
"$LOOM" "${base[@]}" --train-iters 1 --save "$tmp/d0" > /dev/null
mkdir -p "$tmp/m0/iter_0000001"
cp "$tmp/d0/latest_checkpointed_iteration.txt" "$tmp/m0/"
"$PY" - "$tmp/d0/iter_0000001" "$tmp/m0/iter_0000001" <<'PYEOF'
import json, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
data = open(src + "/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
tensors = {}
for name, e in header.items():
    if name == "__metadata__":
        continue
    b, en = e["data_offsets"]
    a = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4").reshape(e["shape"])
    tensors[name.replace(".mlp.linear_fc", ".mlp.experts.local_experts.0.linear_fc")] = a
C = tensors["decoder.final_layernorm.weight"].shape[0]
for l in range(2):
    tensors[f"decoder.layers.{l}.mlp.router.weight"] = np.zeros((1, C), "<f4")
out, blobs, off = {"__metadata__": header.get("__metadata__", {})}, [], 0
for name in sorted(tensors):
    a = np.ascontiguousarray(tensors[name])
    out[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
    blobs.append(a.tobytes())
    off += a.nbytes
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
meta = json.load(open(src + "/meta.json"))
meta["model"].update(num_experts=1, moe_router_topk=1,
                     moe_ffn_hidden_size=meta["model"]["ffn_hidden_size"])
json.dump(meta, open(dst + "/meta.json", "w"))
PYEOF
run dense --train-iters 4 --load "$tmp/d0" --finetune
run one_expert --train-iters 4 --load "$tmp/m0" --finetune
grep -q "MoE: 1 experts" "$tmp/one_expert.log" ||
  { echo "FAIL: the one-expert run does not say it has MoE layers"; fail=1; }
same dense one_expert

# the balancing loss: in the gradient, not in the lm loss
moe=(--num-experts 4 --moe-router-topk 2 --moe-z-loss-coeff 1e-3 --train-iters 4)
run noaux "${moe[@]}"
run aux "${moe[@]}" --moe-aux-loss-coeff 0.5
l0=$(head -1 "$tmp/noaux.txt") l1=$(head -1 "$tmp/aux.txt")
if [ "${l0% *}" = "${l1% *}" ] && [ "${l0#* }" != "${l1#* }" ]; then
  echo "ok   the balancing loss changes the gradient (norm ${l0#* } -> ${l1#* }), not the lm loss (${l0% *})"
else
  echo "FAIL: iteration 1 without / with the balancing loss: $l0 / $l1"; fail=1
fi
grep -qE '^ load_balancing_loss: [0-9.E+-]+ \| z_loss: [0-9.E+-]+$' "$tmp/aux.log" ||
  { echo "FAIL: no load_balancing_loss / z_loss line"; fail=1; }
[ "$(grep -c '^ expert load layer [01]:\( 0\.[0-9]*\)\{4\}$' "$tmp/aux.log")" = 8 ] ||
  { echo "FAIL: not 4 expert load lines of 4 experts for each of 2 layers"; fail=1; }
"$PY" - "$tmp/aux.jsonl" <<'PYEOF' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
for r in rows:
    assert r["load_balancing_loss"] > 0 and r["z_loss"] > 0, r
    assert len(r["expert_load"]) == 2 and all(len(x) == 4 for x in r["expert_load"]), r
    assert all(abs(sum(x) - 1) < 1e-5 for x in r["expert_load"]), r
print(f"ok   metrics: load_balancing_loss {rows[-1]['load_balancing_loss']:.4f}, z_loss "
      f"{rows[-1]['z_loss']:.4f}, expert load {rows[-1]['expert_load']}")
PYEOF

# --moe-layer-freq as a list: the first layer dense
run freq --num-experts 4 --moe-layer-freq "([0]*1+[1]*1)" --train-iters 4 --save "$tmp/freq"
if grep -q "expert load layer 1" "$tmp/freq.log" && ! grep -q "expert load layer 0" "$tmp/freq.log" &&
   grep -q "decoder.layers.1.mlp.router.weight" "$tmp/freq/iter_0000004/model.safetensors" &&
   ! grep -q "decoder.layers.0.mlp.router.weight" "$tmp/freq/iter_0000004/model.safetensors" &&
   grep -q "decoder.layers.0.mlp.linear_fc1.weight" "$tmp/freq/iter_0000004/model.safetensors"; then
  echo "ok   --moe-layer-freq ([0]*1+[1]*1): layer 0 dense, layer 1 MoE"
else
  echo "FAIL: --moe-layer-freq ([0]*1+[1]*1)"; fail=1
fi

# no Hugging Face form yet: a one-line error, nothing written
out=$("$LOOM" convert --loader loom --saver hf --load-dir "$tmp/freq" --save-dir "$tmp/freq_hf" 2>&1)
if [ $? -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && printf '%s' "$out" | grep -q -- "--num-experts" &&
   [ ! -e "$tmp/freq_hf/model.safetensors" ]; then
  echo "ok   export to Hugging Face refused: $out"
else
  echo "FAIL: export of an MoE checkpoint: $out"; fail=1
fi

# the expert bias: moves, is kept, resumes
bias=(--num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid
      --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --train-iters 8)
ITERS=8
run straight "${bias[@]}" --save "$tmp/s"
run first "${bias[@]}" --exit-interval 4 --save "$tmp/r"
run resumed "${bias[@]}" --load "$tmp/r" --save "$tmp/r"
cat "$tmp/first.txt" "$tmp/resumed.txt" > "$tmp/both.txt"
same straight both
"$PY" - "$tmp/r/iter_0000004/model.safetensors" "$tmp/s/iter_0000008/model.safetensors" "$tmp/r/iter_0000008/model.safetensors" <<'PYEOF' || fail=1
import json, struct, sys
import numpy as np
def bias(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    e = json.loads(data[8:8 + n])["decoder.layers.1.mlp.router.expert_bias"]
    b, en = e["data_offsets"]
    return np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4")
b4, s8, r8 = (bias(p) for p in sys.argv[1:])
assert np.abs(b4).max() > 0 and not np.array_equal(b4, s8), (b4, s8)
assert np.array_equal(s8, r8), (s8, r8)
print(f"ok   expert bias kept in checkpoints: {b4} after 4 steps, {s8} after 8 (resumed: equal)")
PYEOF

# capacity with padding, group-limited routing
ITERS=4
run capacity --num-experts 4 --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity \
    --moe-token-drop-policy position --train-iters 4
run groups --num-experts 8 --moe-router-topk 4 --moe-router-num-groups 4 --moe-router-group-topk 2 \
    --moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5 --swiglu \
    --moe-ffn-hidden-size 16 --moe-shared-expert-intermediate-size 24 --moe-shared-expert-gate \
    --train-iters 4
for r in capacity groups; do
  [ "$(wc -l < "$tmp/$r.txt")" = 4 ] && echo "ok   $r trains" || { echo "FAIL $r"; fail=1; }
done
exit $fail
