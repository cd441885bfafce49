#!/usr/bin/env bash
# `loom train --device cuda` against `--device cpu`: a small GPT-2-style and a small Llama-style
# model (RMSNorm, SwiGLU, rotary, grouped-query attention, no biases, untied) train 5 iterations
# with dropout on; loss and grad norm of every iteration, and every parameter after training,
# must agree within 1e-4 relative (fp32 on both; only the order of sums differs). The cuda runs
# must report "peak_mem_bytes" in the metrics and allocate no device memory after the first
# iteration. A --bf16 run of the GPT model must stay within 2e-2 of the fp32 loss. Both models
# again with head size 64 and documents packed into samples (--reset-position-ids and
# --reset-attention-mask; NullTokenizer's end-of-document id 6 of 7, samples of 256: documents
# of 1 to 7 tokens, or one of 256), the same checks, and in --bf16 (loom's tensor-core kernel
# with the document mask) within 2e-2 of the fp32 CPU run; the Llama-style one of these with
# zero-centred norm weights (--apply-layernorm-1p). Query-key norms (--qk-layernorm): the
# Llama-style model (RMSNorm; head size 64, as the bf16 attention kernels take) and the
# GPT-2-style one (LayerNorm with biases) against the CPU, the same checks, and the Llama-style
# one in --bf16 (the heads gathered from bf16 qkv rows) within 2e-2 of the fp32 CPU run. The
# Llama-style model again with heads of 24 columns (--kv-channels 24 on hidden 64 with 8 heads:
# loom's fp32 kernels in fp32, cuDNN's with --bf16), the same checks.
#
# Exit 77 (skipped) when loom has no CUDA or no device is visible, unless LOOM_REQUIRE_CUDA=1.
set -uo pipefail
LOOM=${LOOM:-$LOOM_BUILD/loom}
SRC=${LOOM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# a python3 with numpy (for the parameter comparison) if there is one, else any python3
PY= NUMPY=0
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 || continue
  if "$p" -c 'import numpy' 2>/dev/null; then PY=$p NUMPY=1; break; fi
  [ -z "$PY" ] && "$p" -c 'import json' 2>/dev/null && PY=$p
done
[ -n "$PY" ] || { echo "FAIL: no python3"; exit 1; }

common=(--mock-data --num-layers 4 --seq-length 64 --vocab-size 211 --make-vocab-size-divisible-by 32
        --micro-batch-size 4 --global-batch-size 8 --train-iters 5 --lr 3e-3 --min-lr 3e-4
        --lr-decay-style cosine --lr-warmup-iters 1 --weight-decay 0.1 --clip-grad 1.0
        --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-iters 0 --seed 5)
gpt=(--hidden-size 64 --num-attention-heads 4)
llama=(--hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 2
       --ffn-hidden-size 160 --normalization RMSNorm --swiglu --position-embedding-type rope
       --disable-bias-linear --untie-embeddings-and-output-weights)
docs=(--seq-length 256 --tokenizer-type NullTokenizer --vocab-size 6 --reset-position-ids
      --reset-attention-mask)
gptdocs=(--hidden-size 128 --num-attention-heads 2 "${docs[@]}")
llamadocs=(--hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
           --ffn-hidden-size 320 --normalization RMSNorm --swiglu --position-embedding-type rope
           --disable-bias-linear --untie-embeddings-and-output-weights --apply-layernorm-1p
           "${docs[@]}")
llamaqk=(--hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
         --ffn-hidden-size 320 --normalization RMSNorm --swiglu --position-embedding-type rope
         --disable-bias-linear --untie-embeddings-and-output-weights --qk-layernorm)
gptqk=("${gpt[@]}" --qk-layernorm)
llamahd=("${llama[@]}" --kv-channels 24)

probe="$tmp/probe.log"
if ! "$LOOM" train "${common[@]}" "${gpt[@]}" --train-iters 1 --device cuda > "$probe" 2>&1; then
  if grep -qE "no CUDA device|built without CUDA|driver version is insufficient" "$probe"; then
    if [ "${LOOM_REQUIRE_CUDA:-0}" = "1" ]; then cat "$probe"; echo "FAIL: no CUDA device"; exit 1; fi
    echo "skipped: $(grep -m1 -oE "(no CUDA device[^)]*\)?|built without CUDA)" "$probe")"
    exit 77
  fi
  cat "$probe"; echo "FAIL: loom train --device cuda failed"; exit 1
fi

# compare.py REF RUN TOL LABEL: per-iteration loss and grad norm
cat > "$tmp/compare.py" <<'EOF'
import json, sys
ref, run, tol, label = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
a = [r for r in map(json.loads, open(ref)) if "loss" in r]  # iterations, not the test loss
b = [r for r in map(json.loads, open(run)) if "loss" in r]
ok = len(a) == len(b) == 5
wl = wg = 0.0
for x, y in zip(a, b):
    wl = max(wl, abs(x["loss"] - y["loss"]) / abs(x["loss"]))
    wg = max(wg, abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]))
ok = ok and wl <= tol and wg <= tol
print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(b)} iterations, worst relative difference loss {wl:.2e}, grad norm {wg:.2e} (tolerance {tol:g})")
sys.exit(0 if ok else 1)
EOF

fail=0 pass=0
for model in gpt llama gptdocs llamadocs llamaqk gptqk llamahd; do
  declare -n margs=$model
  for dev in cpu cuda; do
    out="$tmp/$model-$dev"
    if ! "$LOOM" train "${common[@]}" "${margs[@]}" --device "$dev" --save "$out" \
        --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
      echo "FAIL $model $dev: the run failed"; tail -5 "$out.log"; fail=$((fail + 1)); continue 2
    fi
  done
  ref="$tmp/$model-cpu" run="$tmp/$model-cuda"
  if "$PY" "$tmp/compare.py" "$ref.jsonl" "$run.jsonl" 1e-4 "$model cuda vs cpu"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); fi
  if [ "$NUMPY" = 1 ]; then
    if "$PY" "$SRC/tests/ref/compare_runs.py" "$ref.jsonl" "$ref" "$run.jsonl" "$run" 1e-4 \
        "$model cuda vs cpu, parameters"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
  fi
  if grep -q '"peak_mem_bytes": [1-9]' "$run.jsonl" && ! grep -q "allocated after the first iteration" "$run.log"; then
    echo "ok   $model cuda: peak_mem_bytes reported ($(grep -o '"peak_mem_bytes": [0-9]*' "$run.jsonl" | tail -1)), no allocation after iteration 1"
    pass=$((pass + 1))
  else
    echo "FAIL $model cuda: peak_mem_bytes missing or device memory allocated after iteration 1"
    grep -E "peak|allocated" "$run.log" | head -3
    fail=$((fail + 1))
  fi
done

for model in gpt gptdocs llamadocs llamaqk llamahd; do
  declare -n margs=$model
  out="$tmp/$model-bf16"
  if "$LOOM" train "${common[@]}" "${margs[@]}" --device cuda --bf16 --metrics-file "$out.jsonl" > "$out.log" 2>&1; then
    if "$PY" "$tmp/compare.py" "$tmp/$model-cpu.jsonl" "$out.jsonl" 2e-2 "$model cuda --bf16 vs cpu fp32"; then
      pass=$((pass + 1)); else fail=$((fail + 1)); fi
  else
    echo "FAIL $model --bf16: the run failed"; tail -5 "$out.log"; fail=$((fail + 1))
  fi
done
if "$LOOM" train "${common[@]}" "${gpt[@]}" --device cpu --bf16 > "$tmp/cpu-bf16.log" 2>&1; then
  echo "FAIL --device cpu --bf16 was accepted"; fail=$((fail + 1))
elif grep -q -- "--bf16" "$tmp/cpu-bf16.log"; then
  echo "ok   --device cpu --bf16 refused: $(grep -m1 -- "--bf16" "$tmp/cpu-bf16.log")"; pass=$((pass + 1))
else
  echo "FAIL --device cpu --bf16: unclear error"; cat "$tmp/cpu-bf16.log"; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
