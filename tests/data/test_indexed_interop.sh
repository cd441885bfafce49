#!/usr/bin/env bash
# Indexed datasets written by loom are read identically by an independent Python reader
# (tests/ref/indexed_ref.py, plain struct), files written by that Python writer are read
# identically by loom, and damaged files give a one-line error (exit 1, never a crash).
set -euo pipefail
: "${LOOM_BUILD:?}" "${LOOM_SRC:?}"
PY=${PYTHON:-python3}
REF="$LOOM_SRC/tests/ref/indexed_ref.py"
TOOL="$LOOM_BUILD/tests/test_indexed"
[ -x "$TOOL" ] || TOOL=$(find "$LOOM_BUILD" -name test_indexed -type f -perm -u+x | head -1)
[ -x "$TOOL" ] || { echo "test_indexed executable not found under $LOOM_BUILD"; exit 1; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Random documents for a dtype: some empty documents, some empty sequences, values spanning the
# dtype's range (the extremes included).
gen_docs() { # dtype seed out.json
  "$PY" - "$1" "$2" "$3" <<'EOF'
import json, random, sys
dtype, seed, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lo, hi = {"u8": (0, 255), "i8": (-128, 127), "i16": (-32768, 32767), "u16": (0, 65535),
          "i32": (-2**31, 2**31 - 1), "i64": (-2**31, 2**31 - 1)}[dtype]
r = random.Random(seed)
docs = []
for d in range(40):
    nseq = r.choice([0, 1, 1, 1, 2, 3])
    doc = []
    for s in range(nseq):
        n = r.choice([0, 1, 5, 17, 100])
        doc.append([r.choice([lo, hi, r.randint(lo, hi)]) for _ in range(n)])
    docs.append(doc)
json.dump(docs, open(out, "w"))
EOF
}

canon() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[2])); print(json.dumps({"dtype":sys.argv[1],"docs":d},separators=(",",":")))' "$1" "$2"; }

for dt in u16 i32 u8 i8 i16 i64; do
  gen_docs "$dt" 7 "$W/docs_$dt.json"
  want=$(canon "$dt" "$W/docs_$dt.json")

  # Python writes, loom reads
  "$PY" "$REF" write "$W/py_$dt" "$dt" "$W/docs_$dt.json"
  got=$("$TOOL" dump "$W/py_$dt") || bad "loom cannot read Python-written $dt: $got"
  [ "$got" = "$want" ] || bad "loom reads Python-written $dt differently"

  # loom writes, Python reads; byte-identical to the Python writer's files
  "$TOOL" write "$W/lm_$dt" "$dt" "$W/docs_$dt.json" || bad "loom cannot write $dt"
  got=$("$PY" "$REF" dump "$W/lm_$dt") || bad "Python cannot read loom-written $dt"
  [ "$got" = "$want" ] || bad "Python reads loom-written $dt differently"
  cmp -s "$W/py_$dt.bin" "$W/lm_$dt.bin" || bad "$dt .bin differs between the writers"
  cmp -s "$W/py_$dt.idx" "$W/lm_$dt.idx" || bad "$dt .idx differs between the writers"
  left=$(ls "$W" | grep -c '\.tmp\.' || true)
  [ "$left" = 0 ] || bad "temporaries left behind after writing $dt"
done

# the optional modes array (multimodal datasets) is accepted
"$PY" "$REF" write "$W/modes" u16 "$W/docs_u16.json" --modes
got=$("$TOOL" dump "$W/modes") || bad "loom cannot read a dataset with modes: $got"
[ "$got" = "$(canon u16 "$W/docs_u16.json")" ] || bad "modes dataset read differently"

# Damaged files: each gives exit 1 and a one-line message naming the file and the problem.
echo '[[[1,2,3]],[[4],[5,6]],[[7,8,9,10]]]' > "$W/small.json"
corrupt() { # name python-statement-on-(idx,bin)-bytearrays expected-text
  local p="$W/bad_$1"
  "$PY" "$REF" write "$p" u16 "$W/small.json"
  "$PY" - "$p" "$2" <<'EOF'
import sys
p, stmt = sys.argv[1], sys.argv[2]
idx = bytearray(open(p + ".idx", "rb").read())
bin_ = bytearray(open(p + ".bin", "rb").read())
exec(stmt)
open(p + ".idx", "wb").write(idx)
open(p + ".bin", "wb").write(bin_)
EOF
  set +e
  out=$("$TOOL" open "$p" 2>&1)
  rc=$?
  set -e
  if [ $rc -ne 1 ]; then bad "$1: exit $rc (want 1): $out"; return; fi
  case "$out" in *"$3"*) ;; *) bad "$1: message '$out' lacks '$3'";; esac
  case "$out" in *"bad_$1."*) ;; *) bad "$1: message '$out' does not name the file";; esac
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || bad "$1: message is not one line: $out"
}
# layout of this .idx: S=4, D=4; lengths at 34, offsets at 50, doc index at 82; 114 bytes
corrupt magic        'idx[0:9] = b"MMIDIDY\0\0"'                    "bad magic"
corrupt version      'idx[9] = 2'                                   "unsupported version 2"
corrupt dtype        'idx[17] = 11'                                 "bad dtype code 11"
corrupt idx_trunc    'del idx[100:]'                                "truncated .idx"
corrupt idx_header   'del idx[30:]'                                 "truncated .idx"
corrupt idx_extra    'idx += b"\0\0"'                               "size mismatch"
corrupt count_S      'idx[18] = 200'                                "truncated .idx"
corrupt count_D      'idx[26] = 3'                                  "size mismatch"
corrupt bin_trunc    'del bin_[-1:]'                                "truncated .bin"
corrupt bin_extra    'bin_ += b"\0\0"'                              "size mismatch"
corrupt bin_empty    'del bin_[:]'                                  "truncated .bin"
corrupt offsets      'idx[50 + 8] = 4'                              "offset of sequence 1"
corrupt lengths      'idx[34] = 2'                                  "offset of sequence 1"
corrupt doc_start    'idx[82] = 1'                                  "document index starts at 1"
corrupt doc_order    'idx[82 + 16] = 0'                             "document index decreases"
corrupt doc_end      'idx[82 + 24] = 3'                             "document index ends at 3"
# both files fine for the reference reader
"$PY" "$REF" check "$W/py_u16" || bad "reference rejects a valid file"

if [ $fail -ne 0 ]; then echo "test_indexed_interop: FAILED"; exit 1; fi
echo "test_indexed_interop: ok"
