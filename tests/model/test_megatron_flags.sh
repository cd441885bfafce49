#!/usr/bin/env bash
# Megatron-LM flags without a setting of their own in loom: those asking for what loom always does
# are taken, named in one "loom: note:" line, and change nothing (the same losses and gradient
# norms bit for bit); the older position-embedding flags are the same as the newer one
# (--use-rotary-position-embeddings --no-position-embedding as --position-embedding-type rope,
# --no-position-embedding alone as none); --tokenizer-type NullTokenizer --vocab-size 63 is a
# vocabulary of 64, as Megatron-LM's (63 ids and the end-of-document one); --log-params-norm logs
# the norm of the weights, and changes nothing else. The flags asking for what loom does not do are errors:
# tests/model/test_cli_errors.sh.
set -uo pipefail
LOOM=${LOOM:-build/loom}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
base=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --eval-iters 0
      --log-interval 1 --lr 1e-3 --seed 11)
source "$(dirname "$0")/runs.sh"
noop=(--use-flash-attn --use-mcore-models --transformer-impl transformer_engine --overlap-grad-reduce
      --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32 --no-masked-softmax-fusion
      --no-bias-gelu-fusion --no-bias-swiglu-fusion --no-bias-dropout-fusion
      --no-gradient-accumulation-fusion --no-rope-fusion --no-persist-layer-norm
      --no-async-tensor-model-parallel-allreduce --log-throughput --no-load-rng --no-save-rng
      --data-impl mmap --num-workers 2 --distributed-backend nccl --rotary-percent 1.0
      --context-parallel-size 1 --expert-model-parallel-size 1 --fp32-residual-connection
      --use-checkpoint-args --data-cache-path "$tmp/cache" --dataloader-type single
      --optimizer adam --main-grads-dtype fp32 --exp-avg-dtype fp32 --exp-avg-sq-dtype fp32
      --DDP-impl local --timing-log-level 2 --log-timers-to-tensorboard
      --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard
      --log-world-size-to-tensorboard --log-loss-scale-to-tensorboard --tensorboard-log-interval 1
      --wandb-exp-name x --wandb-save-dir "$tmp/wandb" --manual-gc --manual-gc-interval 10
      --empty-unused-memory-level 1 --distributed-timeout-minutes 60 --cross-entropy-loss-fusion
      --calculate-per-token-loss --check-for-nan-in-loss-and-grad
      --no-create-attention-mask-in-dataloader --exit-on-missing-checkpoint
      --use-cpu-initialization --ddp-average-in-collective --align-grad-reduce --legacy-tokenizer
      --sgd-momentum 0.9 --mmap-bin-files --no-mmap-bin-files --openai-gelu)
run plain
run megatron "${noop[@]}"
same plain megatron
notes=$(grep -c '^loom: note: flags with no effect:' "$tmp/megatron.log")
missing=""
for fl in "${noop[@]}"; do
  case $fl in
    --rotary-percent|--context-parallel-size|--expert-model-parallel-size) continue ;; # loom's own
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
PY=${PYTHON:-python3}
if "$PY" - "$tmp/pnorm.jsonl" "$tmp/pnorm-ckpt" <<'PYEOF'
import array, json, math, struct, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
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
if cmp -s "$tmp/rope.txt" "$tmp/plain.txt" || cmp -s "$tmp/none.txt" "$tmp/rope.txt"; then
  echo "FAIL the position embeddings made no difference"; fail=1
fi
exit $fail
