#!/usr/bin/env bash
# --init-method-xavier-uniform (Megatron-LM's, torch's xavier_uniform_ of each whole matrix): after
# one iteration at learning rate 0 the checkpoint holds the initial weights; every matrix (the
# embeddings and the output layer among them) must lie within +-sqrt(6 / (rows + columns)), reach
# near that bound, and have its variance, bound^2 / 3, within 10%, and norm weights and biases
# keep their 1 and 0; without the flag the matrices are normal with --init-method-std (which the
# same checks reject). Tensor parallelism draws the same values: TP=2 saves the same weights, bit
# for bit.
source "$(dirname "$0")/runs.sh"
base=(train --mock-data --num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 16
      --vocab-size 200 --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --lr 0
      --min-lr 0 --eval-iters 0 --untie-embeddings-and-output-weights --seed 5)
check() { # DIR xavier|normal
  "$PY" - "$1" "$2" <<'PYEOF'
import json, math, os, struct, sys
import torch
d, want = sys.argv[1], sys.argv[2]
d = os.path.join(d, "iter_%07d" % int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read()))
with open(os.path.join(d, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head, data = json.loads(f.read(n)), f.read()
bad, seen = [], 0
for name, t in head.items():
    if name == "__metadata__":
        continue
    a, b = t["data_offsets"]
    x = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).double()
    if len(t["shape"]) == 1:  # norm weights 1, biases 0
        if not (torch.all(x == 1) or torch.all(x == 0)):
            bad.append(f"{name}: a vector neither all 1 nor all 0")
        continue
    rows, cols = t["shape"]
    bound = math.sqrt(6.0 / (rows + cols))
    if name == "embedding.word_embeddings.weight" or name == "output_layer.weight":
        x = x.view(rows, cols)[:200].reshape(-1)  # the padded vocabulary's rows too are drawn
    seen += 1
    top, var = x.abs().max().item(), x.var().item()
    ok = top <= bound and top >= 0.9 * bound and abs(var / (bound * bound / 3) - 1) < 0.1
    if ok != (want == "xavier"):
        bad.append(f"{name} [{rows}, {cols}]: max |w| {top:.4f}, var {var:.3e}, bound {bound:.4f}")
assert seen >= 8, seen
print(("ok   " if not bad else "FAIL ") + f"{want}: {seen} matrices" + "".join("\n  " + b for b in bad))
sys.exit(1 if bad else 0)
PYEOF
}
run xavier --init-method-xavier-uniform --save "$tmp/xavier"
check "$tmp/xavier" xavier || fail=1
run normal --save "$tmp/normal"
check "$tmp/normal" normal || fail=1
# two tensor-parallel ranks (when MPI is built in): the same initial weights
if command -v mpirun > /dev/null && ! grep -q '^LOOM_MPI:BOOL=OFF' "${LOOM_BUILD:-build}/CMakeCache.txt" 2> /dev/null; then
  source "$SRC/tests/dist/mpi_env.sh"
  if loom_mpirun 2 "$LOOM" "${base[@]}" --init-method-xavier-uniform --tensor-model-parallel-size 2 \
       --save "$tmp/tp2" --metrics-file "$tmp/tp2.jsonl" > "$tmp/tp2.log" 2>&1 &&
     "$PY" "$SRC/tests/ref/compare_runs.py" "$tmp/xavier.jsonl" "$tmp/xavier" "$tmp/tp2.jsonl" \
       "$tmp/tp2" 1e-6 "--init-method-xavier-uniform TP=2" | tee "$tmp/tp2.cmp" &&
     grep -q 'parameters 0.00e+00' "$tmp/tp2.cmp"; then
    echo "ok   TP=2: the same weights, bit for bit (the loss within its sums' rounding)"
  else
    tail -3 "$tmp/tp2.log"; fail=1
  fi
fi
exit $fail
