#!/usr/bin/python3
"""Compare id files of the tokenizer tests in one process.

    compare_ids.py WANT_DIR GOT_DIR FILE...

For each FILE (only its basename is used) compares WANT_DIR/<name>.ids (or, when that does not
exist, the concatenation of WANT_DIR/<name>.ids.0, .ids.1, ...: an oracle's shards) with
GOT_DIR/<name>.ids. Prints the first difference of the first few mismatching files, then
"<equal> of <total> files equal (<tokens> tokens)"; exits 1 when any differs.
"""
import os
import sys


def read_ids(d, name):
    p = os.path.join(d, name + ".ids")
    if os.path.exists(p):
        return open(p).read().split()
    out, k = [], 0
    while os.path.exists("%s.%d" % (p, k)):
        out += open("%s.%d" % (p, k)).read().split()
        k += 1
    if k == 0:
        raise SystemExit("compare_ids: no %s" % p)
    return out


def main():
    want_dir, got_dir = sys.argv[1:3]
    names = [os.path.basename(f) for f in sys.argv[3:]]
    bad = tokens = 0
    for name in names:
        want, got = read_ids(want_dir, name), read_ids(got_dir, name)
        tokens += len(got)
        if want != got:
            bad += 1
            if bad <= 5:
                i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
                print("MISMATCH %s: %d vs %d ids; first difference at id #%d: want %s, got %s"
                      % (name, len(want), len(got), i, want[i:i + 8], got[i:i + 8]), file=sys.stderr)
    print("%d of %d files equal (%d tokens)" % (len(names) - bad, len(names), tokens))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
