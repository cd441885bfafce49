#!/usr/bin/env python3
"""Independent reader and writer of the Megatron indexed dataset (.bin/.idx), written from the
format description in FORMATS.md with nothing but `struct`, to check loom's implementation.

  indexed_ref.py write PREFIX DTYPE DOCS.json [--modes]   DOCS.json: [[[tok, ...], ...], ...]
                                                          (documents -> sequences -> tokens)
  indexed_ref.py dump PREFIX                              canonical JSON on stdout:
                                                          {"dtype":"u16","docs":[...]}
  indexed_ref.py check PREFIX                             exit 0 if valid, else message + exit 1
"""
import json
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
# code -> (name, struct letter, item size)
DTYPES = {
    1: ("u8", "B", 1),
    2: ("i8", "b", 1),
    3: ("i16", "h", 2),
    4: ("i32", "i", 4),
    5: ("i64", "q", 8),
    6: ("f64", "d", 8),
    7: ("f32", "f", 4),
    8: ("u16", "H", 2),
}
CODE_BY_NAME = {v[0]: k for k, v in DTYPES.items()}


class FormatError(Exception):
    pass


def write(prefix, dtype, docs, modes=None):
    """docs: list of documents, each a list of sequences (lists of ints)."""
    code = CODE_BY_NAME[dtype] if isinstance(dtype, str) else dtype
    _, letter, size = DTYPES[code]
    lengths, offsets, doc_index = [], [], [0]
    off = 0
    with open(prefix + ".bin", "wb") as f:
        for doc in docs:
            for seq in doc:
                f.write(struct.pack("<%d%s" % (len(seq), letter), *seq))
                lengths.append(len(seq))
                offsets.append(off)
                off += len(seq) * size
            doc_index.append(len(lengths))
    S, D = len(lengths), len(doc_index)
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", S))
        f.write(struct.pack("<Q", D))
        f.write(struct.pack("<%di" % S, *lengths))
        f.write(struct.pack("<%dq" % S, *offsets))
        f.write(struct.pack("<%dq" % D, *doc_index))
        if modes is not None:
            assert len(modes) == S
            f.write(struct.pack("<%db" % S, *modes))


def read(prefix):
    """Returns (dtype name, documents as lists of sequences, modes or None)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    if len(idx) < 34:
        raise FormatError("truncated .idx header")
    if idx[:9] != MAGIC:
        raise FormatError("bad magic")
    (version,) = struct.unpack_from("<Q", idx, 9)
    if version != 1:
        raise FormatError("version %d" % version)
    code = idx[17]
    if code not in DTYPES:
        raise FormatError("dtype code %d" % code)
    name, letter, size = DTYPES[code]
    S, D = struct.unpack_from("<QQ", idx, 18)
    need = 34 + 12 * S + 8 * D
    if len(idx) == need:
        has_modes = False
    elif len(idx) == need + S and S > 0:
        has_modes = True
    else:
        raise FormatError(".idx size %d vs %d" % (len(idx), need))
    lengths = struct.unpack_from("<%di" % S, idx, 34)
    offsets = struct.unpack_from("<%dq" % S, idx, 34 + 4 * S)
    doc_index = struct.unpack_from("<%dq" % D, idx, 34 + 12 * S)
    modes = list(struct.unpack_from("<%db" % S, idx, need)) if has_modes else None
    off = 0
    for i in range(S):
        if lengths[i] < 0 or offsets[i] != off:
            raise FormatError("offset/length of sequence %d" % i)
        off += lengths[i] * size
    if len(data) != off:
        raise FormatError(".bin size %d vs %d" % (len(data), off))
    if D < 1 or doc_index[0] != 0 or doc_index[-1] != S:
        raise FormatError("document index bounds")
    if any(doc_index[k] > doc_index[k + 1] for k in range(D - 1)):
        raise FormatError("document index decreases")
    seqs = [list(struct.unpack_from("<%d%s" % (lengths[i], letter), data, offsets[i]))
            for i in range(S)]
    docs = [seqs[doc_index[k]:doc_index[k + 1]] for k in range(D - 1)]
    return name, docs, modes


def canonical(dtype, docs):
    return json.dumps({"dtype": dtype, "docs": docs}, separators=(",", ":"))


def main(argv):
    if len(argv) >= 4 and argv[1] == "write":
        with open(argv[4]) as f:
            docs = json.load(f)
        modes = None
        if "--modes" in argv[5:]:
            modes = [i % 3 for i in range(sum(len(d) for d in docs))]
        write(argv[2], argv[3], docs, modes)
        return 0
    if len(argv) == 3 and argv[1] == "dump":
        name, docs, _ = read(argv[2])
        print(canonical(name, docs))
        return 0
    if len(argv) == 3 and argv[1] == "check":
        try:
            read(argv[2])
        except (FormatError, OSError, struct.error) as e:
            print("invalid: %s" % e)
            return 1
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
