#!/usr/bin/env bash
# 1-bit Adam against an independent PyTorch simulation of W workers (tests/ref/onebit_ref.py) for
# W = 2, 3 and 4: three warmup steps of averaged-gradient Adam without bias correction, then five
# compressed steps; parameters, momentum, variance and every rank's worker and server error
# buffers within 1e-6 relative (L2), and the bytes each rank sends per compressed step counted by
# the comm layer: exactly the packed signs twice and two scales, at most 1/25 of an fp32
# all-reduce's (about 1/32). The helper runs loom's own functions (loom/onebit.h) over MPI.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
PYTHON=${PYTHON:-/usr/bin/python3}
REF="$(dirname "$0")/../ref/onebit_ref.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" "$REF" make "$tmp" 2 3 4 || { echo "FAIL: the inputs"; exit 1; }
for W in 2 3 4; do
  loom_mpirun "$W" "$LOOM_TESTBIN/onebit_check" "$tmp/W$W" "$tmp/W$W/out" > "$tmp/run$W.log" 2>&1 ||
    { echo "FAIL W=$W: the run failed"; tail -3 "$tmp/run$W.log"; }
done
"$PYTHON" "$REF" check "$tmp" 2 3 4
