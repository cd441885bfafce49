#!/usr/bin/env bash
# The MoE layer against an independent PyTorch reference (tests/ref/moe_ref.py, float64, a dense
# loop over the experts): loom's layer (tests/model/moe_layer_check.c, fp32 on the cpu backend) on
# the same random weights and inputs, exchanged through safetensors. Routing maps equal exactly;
# the output, the input gradient, the balancing measure, the z-loss and the router's and experts'
# weight gradients within 1e-5 (relative), for softmax top-k (the router in fp32 and, top-3 with
# the sequence-level balancing loss, in fp64: --moe-router-dtype), pre-softmax (with SwiGLU experts and
# the sequence-level balancing loss), sigmoid with the expert bias (and the bias equal after 10
# updates), group-limited routing, capacity with either drop policy (and padding), and shared
# experts with their gate. A reference that leaves the balancing loss out of its gradient must
# fail.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
CHECK=${LOOM_BUILD:-build}/tests/moe_layer_check
REF="$(dirname "$0")/../ref/moe_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" "$REF" --check "$CHECK" --dir "$tmp" --case softmax softmax_fp64 pre_softmax sigmoid_bias groups \
    capacity_probs capacity_position_pad shared
echo "== the reference without the balancing loss (must fail)"
if "$PYTHON" "$REF" --check "$CHECK" --case softmax --dir "$tmp/noaux" --no-aux > "$tmp/noaux.log"; then
  cat "$tmp/noaux.log"
  echo "FAIL: a reference without the balancing loss matched"
  exit 1
fi
grep FAIL "$tmp/noaux.log"
echo "ok   the reference without the balancing loss fails"
