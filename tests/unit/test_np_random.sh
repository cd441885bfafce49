#!/bin/bash
# loom's numpy RandomState stream (src/core/np_random.c) against numpy itself: raw 32- and 64-bit
# outputs across several state regenerations, bounded integers (masked rejection, 32- and 64-bit
# paths), randint, shuffle of int32 arrays and permutation, interleaved on one stream, 4 seeds.
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
CHECK=${LOOM_BUILD:?}/tests/np_random_check
[ -x "$CHECK" ] || CHECK=$(find "$LOOM_BUILD" -name np_random_check -type f -perm -u+x | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for seed in 0 1 1234 4294967295; do
    "$CHECK" "$seed" >"$tmp/loom.txt"
    "$PYTHON" - "$seed" >"$tmp/numpy.txt" <<'PY'
import sys
import numpy as np
rs = np.random.RandomState(int(sys.argv[1]))
out = []
out.append("u32 " + " ".join(str(v) for v in rs.randint(0, 2**32, size=1500, dtype=np.uint64)))
out.append("u64 " + " ".join(str(v) for v in rs.randint(0, 2**64, size=10, dtype=np.uint64)))
maxes = [1, 2, 3, 5, 7, 100, 1000, 65535, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**40 + 3, 2**63 - 1]
vals = []
for m in maxes:
    for _ in range(3):
        vals.append(str(rs.randint(0, m + 1, dtype=np.uint64)))
out.append("interval " + " ".join(vals))
out.append("randint " + " ".join(str(rs.randint(-7, 1000003)) for _ in range(5)))
for n in [0, 1, 2, 7, 1000, 70000]:
    a = np.arange(5, n + 5, dtype=np.int32)
    rs.shuffle(a)
    b = rs.permutation(n)
    out.append(f"shuffle{n}" + "".join(" " + str(v) for v in a))
    out.append(f"permutation{n}" + "".join(" " + str(v) for v in b))
print("\n".join(out))
PY
    if ! cmp -s "$tmp/loom.txt" "$tmp/numpy.txt"; then
        echo "seed $seed: loom's stream differs from numpy's RandomState:"
        diff <(tr ' ' '\n' <"$tmp/loom.txt") <(tr ' ' '\n' <"$tmp/numpy.txt") | head -20
        exit 1
    fi
    echo "seed $seed: $(wc -w <"$tmp/loom.txt") values equal to numpy's"
done
