#!/bin/bash
# Cross-check of the CPU attention and rotary embedding against PyTorch in float64:
# test_attention writes cases (rope -> attention forward -> attention backward -> inverse rope,
# dropout included, grouped heads, a head0/sample0 offset), tests/ref/attention_ref.py recomputes
# them with autograd and compares.
set -euo pipefail
: "${LOOM_BUILD:?LOOM_BUILD must name the build directory}"
: "${LOOM_SRC:?LOOM_SRC must name the source directory}"
PYTHON=${PYTHON:-/usr/bin/python3}
dir=$(mktemp -d "${TMPDIR:-/tmp}/loom-attn-torch.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$LOOM_BUILD/tests/test_attention" dump "$dir"
"$PYTHON" "$LOOM_SRC/tests/ref/attention_ref.py" "$dir"
