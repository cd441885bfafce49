#!/usr/bin/env bash
# safetensors interchange with an independent implementation (tests/ref/safetensors_ref.py:
# struct + json, numpy/torch for the data):
#   C writes  -> Python checks every byte against its own definition of the sample;
#   Python writes (header keys out of data order, odd header length, every F16/BF16 pattern)
#             -> C reads and compares every value.
# Each direction is also run once on deliberately damaged input, which must fail, so that a
# checker that accepts anything cannot pass.
# Environment (set by CTest): LOOM_BUILD (build dir), LOOM_SRC (source dir), PYTHON.
set -euo pipefail
: "${LOOM_BUILD:?LOOM_BUILD must name the build directory}"
: "${LOOM_SRC:?LOOM_SRC must name the source directory}"
PYTHON=${PYTHON:-/usr/bin/python3}
BIN="$LOOM_BUILD/tests/test_safetensors"
REF="$LOOM_SRC/tests/ref/safetensors_ref.py"
[ -x "$BIN" ] || { echo "missing $BIN (build the test_safetensors target)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom_st_py.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== C writes, Python verifies"
"$BIN" --write-sample "$tmp/c.safetensors"
"$PYTHON" "$REF" verify-sample "$tmp/c.safetensors"

echo "== Python writes, C reads"
"$PYTHON" "$REF" write "$tmp/py.safetensors" "$tmp/py.expect.json"
"$BIN" --check-python "$tmp/py.safetensors" "$tmp/py.expect.json"

echo "== damaged inputs must be caught"
# one flipped bit in the last data byte of the C file
cp "$tmp/c.safetensors" "$tmp/c_bad.safetensors"
"$PYTHON" - "$tmp/c_bad.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-1] ^= 1
open(p, "wb").write(bytes(b))
PY
if "$PYTHON" "$REF" verify-sample "$tmp/c_bad.safetensors" 2>"$tmp/err"; then
    echo "FAIL: the Python verifier accepted a damaged file" >&2; exit 1
fi
grep -q MISMATCH "$tmp/err" || { cat "$tmp/err" >&2; echo "FAIL: no MISMATCH line" >&2; exit 1; }

# one expected BF16 value off by one bit
"$PYTHON" - "$tmp/py.expect.json" "$tmp/py_bad.expect.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
e["tensors"]["bf16.randn"]["f32_bits"][5] ^= 1 << 16
json.dump(e, open(sys.argv[2], "w"))
PY
if "$BIN" --check-python "$tmp/py.safetensors" "$tmp/py_bad.expect.json" 2>"$tmp/err"; then
    echo "FAIL: the C checker accepted a wrong value" >&2; exit 1
fi
grep -q "bf16.randn" "$tmp/err" || { cat "$tmp/err" >&2; echo "FAIL: tensor not named" >&2; exit 1; }

# a Python-written file truncated by one byte: C must refuse it with a message naming the file
head -c -1 "$tmp/py.safetensors" >"$tmp/py_trunc.safetensors"
if "$BIN" --check-python "$tmp/py_trunc.safetensors" "$tmp/py.expect.json" 2>"$tmp/err"; then
    echo "FAIL: C accepted a truncated file" >&2; exit 1
fi
grep -q "py_trunc.safetensors.*past the end of the data section" "$tmp/err" ||
    { cat "$tmp/err" >&2; echo "FAIL: unexpected message for a truncated file" >&2; exit 1; }

echo "test_safetensors_py: all passed"
