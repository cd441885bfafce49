#!/usr/bin/env python3
"""Independent safetensors reader/writer (struct + json, numpy/torch for the data), the oracle for
loom's src/ckpt/safetensors.c. Used by tests/ckpt/test_safetensors_py.sh.

  safetensors_ref.py verify-sample FILE     check the file `test_safetensors --write-sample` wrote,
                                            byte by byte, against the sample defined below
  safetensors_ref.py write FILE EXPECT      write a file the way other tools may (header keys in
                                            an order other than the data's, header length not a
                                            multiple of 8 so the data is unaligned, BF16 and F16
                                            including every bit pattern) and describe its content
                                            in EXPECT (JSON) for `test_safetensors --check-python`

Exit status 0 when everything matches; otherwise the first mismatch is printed and it is 1.
"""
import json
import struct
import sys

import numpy as np
import torch

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
            "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
            "BOOL": 1}


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


# ---- reading ----------------------------------------------------------------------------------

def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Mismatch(f"duplicate keys in {keys}")
    return dict(pairs)  # dicts keep insertion order


def read(path):
    """-> (raw bytes, header length, header dict in file order, data section bytes)"""
    with open(path, "rb") as f:
        raw = f.read()
    check(len(raw) >= 8, f"{path}: {len(raw)} bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    check(8 + n <= len(raw), f"{path}: header length {n} past the end ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    check(isinstance(header, dict), "header is not an object")
    return raw, n, header, raw[8 + n:]


# ---- float conversions, by bit formula (cross-checked against torch) --------------------------

def f16_bits_to_f32_bits(h):
    s, e, m = (h >> 15) & 1, (h >> 10) & 31, h & 1023
    if e == 31:
        return (s << 31) | 0x7F800000 | (m << 13)
    if e == 0:
        if m == 0:
            return s << 31
        e2 = -14
        while not m & 0x400:
            m <<= 1
            e2 -= 1
        return (s << 31) | ((e2 + 127) << 23) | ((m & 0x3FF) << 13)
    return (s << 31) | ((e - 15 + 127) << 23) | (m << 13)


def expected_f32_bits(dtype, data):
    """float32 bit patterns of the values of an F32/BF16/F16 tensor's bytes, by formula; the same
    values are also decoded with torch and compared (NaN only as NaN: torch may quiet NaNs)."""
    if dtype == "F32":
        bits = np.frombuffer(data, dtype="<u4").astype(np.int64)
        via_torch = torch.frombuffer(bytearray(data), dtype=torch.float32) if data else None
    else:
        h = np.frombuffer(data, dtype="<u2").astype(np.int64)
        if dtype == "BF16":
            bits = h << 16
        else:
            bits = np.array([f16_bits_to_f32_bits(int(x)) for x in h], dtype=np.int64)
        tdt = torch.bfloat16 if dtype == "BF16" else torch.float16
        via_torch = torch.frombuffer(bytearray(data), dtype=tdt).float() if data else None
    if via_torch is not None:
        formula = torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())
        nan = torch.isnan(formula)
        check(torch.equal(nan, torch.isnan(via_torch)), f"{dtype}: NaN positions differ from torch")
        check(torch.equal(formula[~nan], via_torch[~nan]), f"{dtype}: values differ from torch")
        tbits = via_torch[~nan].view(torch.int32).numpy().astype(np.int64)
        check(np.array_equal(tbits, bits[~nan.numpy()] - ((bits[~nan.numpy()] >> 31) << 32)),
              f"{dtype}: bit patterns differ from torch (signed zeros?)")
    return [int(b) for b in bits]


# ---- the sample written by tests/unit/test_safetensors.c (write_sample) -----------------------

def bf16_bits(values):
    return (np.array(values, dtype=np.float32).view(np.uint32) >> 16).astype("<u2")


def sample():
    """name -> (dtype, shape, data bytes), in the C writer's insertion order, and metadata."""
    t = {}
    t["model.layers.0.norm.weight"] = ("BF16", [10], bf16_bits([(i - 4) * 0.5 for i in range(10)]))
    t["model.embed.weight"] = ("F32", [4, 6],
                               ((np.arange(24) - 11) * 0.375).astype("<f4"))
    t["odd.bf16"] = ("BF16", [3], bf16_bits([1.0, -2.5, 3.140625]))
    t["tokens"] = ("I64", [2, 3], np.arange(6, dtype="<i8") * 1000000007 - 3000000000)
    t["scalar"] = ("F32", [], np.array([2.5], dtype="<f4"))
    t["empty"] = ("F32", [0, 3], np.zeros(0, dtype="<f4"))
    t["half"] = ("F16", [5], np.array([0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00], dtype="<u2"))
    t["bytes"] = ("U8", [7], np.array([i * 37 % 256 for i in range(7)], dtype=np.uint8))
    t = {k: (d, s, a.tobytes()) for k, (d, s, a) in t.items()}
    meta = {"format": "pt", "loom.iteration": "100", "note": "unicode \u00fc \u2713"}
    return t, meta


def verify_sample(path):
    raw, n, header, data = read(path)
    tensors, meta = sample()
    # header: a multiple of 8 bytes, the JSON text then at most 7 spaces
    check(n % 8 == 0, f"header length {n} is not a multiple of 8")
    text = raw[8:8 + n]
    stripped = text.rstrip(b" ")
    check(len(text) - len(stripped) < 8, "more than 7 bytes of padding")
    check(stripped.endswith(b"}") and text.startswith(b"{"), "header is not a bare JSON object")
    json.loads(stripped)  # the padding is all there is after the JSON
    keys = list(header)
    check(keys[0] == "__metadata__", f"first header key is {keys[0]!r}")
    check(header["__metadata__"] == meta, f"metadata {header['__metadata__']} != {meta}")
    check(list(header["__metadata__"]) == list(meta), "metadata order")
    check(set(keys[1:]) == set(tensors), f"tensor names {keys[1:]}")
    # layout: element size descending, then name; header lists tensors in data order
    order = sorted(tensors, key=lambda k: (-ITEMSIZE[tensors[k][0]], k.encode("utf-8")))
    check(keys[1:] == order, f"header order {keys[1:]} != data order {order}")
    off = 0
    for name in order:
        dtype, shape, want = tensors[name]
        e = header[name]
        check(set(e) == {"dtype", "shape", "data_offsets"}, f"{name}: keys {sorted(e)}")
        check(e["dtype"] == dtype, f"{name}: dtype {e['dtype']} != {dtype}")
        check(e["shape"] == shape, f"{name}: shape {e['shape']} != {shape}")
        check(e["data_offsets"] == [off, off + len(want)],
              f"{name}: data_offsets {e['data_offsets']} != {[off, off + len(want)]}")
        check((8 + n + off) % ITEMSIZE[dtype] == 0, f"{name}: misaligned at file offset "
              f"{8 + n + off}")
        got = data[off:off + len(want)]
        check(got == want, f"{name}: data bytes differ: {got.hex()} != {want.hex()}")
        off += len(want)
    check(off == len(data), f"data section is {len(data)} bytes, tensors cover {off}")
    # the values as torch sees them
    norm = torch.frombuffer(bytearray(tensors["model.layers.0.norm.weight"][2]),
                            dtype=torch.bfloat16).float()
    check(torch.equal(norm, (torch.arange(10) - 4).float() * 0.5), "BF16 values via torch")
    half = np.frombuffer(tensors["half"][2], dtype="<f2").astype(np.float32)
    check(list(half[:4]) == [1.0, -2.0, 65504.0, 2.0 ** -24] and np.isposinf(half[4]),
          f"F16 values {half}")
    for name in ("model.layers.0.norm.weight", "odd.bf16", "half", "model.embed.weight"):
        expected_f32_bits(tensors[name][0], tensors[name][2])  # formula vs torch
    print(f"verify-sample: {path}: {len(tensors)} tensors, {len(raw)} bytes all as expected")


# ---- a file written the way other tools may write it ------------------------------------------

def write(path, expect_path):
    g = torch.Generator().manual_seed(1234)
    all16 = np.arange(65536, dtype=np.int64).astype("<u2")
    t = {
        "bf16.randn": ("BF16", [17, 3], torch.randn(17, 3, generator=g).to(torch.bfloat16)
                       .view(torch.int16).numpy().astype("<i2").tobytes()),
        "bf16.all": ("BF16", [65536], all16.tobytes()),
        "f16.all": ("F16", [256, 256], all16.tobytes()),
        "f32.mat": ("F32", [5, 7], torch.randn(5, 7, generator=g).numpy().astype("<f4").tobytes()),
        "f32.scalar": ("F32", [], np.array([-0.0], dtype="<f4").tobytes()),
        "i64.ids": ("I64", [9], (np.array([0, 1, -1, 2 ** 62, -(2 ** 63), 2 ** 63 - 1, 50256,
                                           7, -12345678901], dtype="<i8")).tobytes()),
        "empty.bf16": ("BF16", [3, 0], b""),
        "u8.mask": ("U8", [5], bytes([1, 0, 255, 3, 4])),
        "bool.flags": ("BOOL", [3], bytes([1, 0, 1])),
    }
    # data order: as listed (sizes mixed, so later tensors are unaligned); header order: reversed
    # name order, unrelated to the data order, and "__metadata__" last (any key order is valid)
    data_order = list(t)
    offsets, off = {}, 0
    for name in data_order:
        offsets[name] = [off, off + len(t[name][2])]
        off += len(t[name][2])
    meta = {"format": "pt", "source": "safetensors_ref.py", "emoji": "\u00fc\u2713"}
    full = {name: {"data_offsets": offsets[name], "shape": t[name][1], "dtype": t[name][0]}
            for name in sorted(t, reverse=True)}
    full["__metadata__"] = meta
    chunks = [t[name][2] for name in data_order]
    text = json.dumps(full, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8")
    if (8 + len(text)) % 2 == 0:
        text += b" "  # odd header length: the data section starts at an odd file offset
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))

    expect = {"tensors": {}, "order": data_order, "metadata": meta}
    for name, (dtype, shape, b) in t.items():
        d = {"dtype": dtype, "shape": shape}
        if dtype in ("F32", "BF16", "F16"):
            d["f32_bits"] = expected_f32_bits(dtype, b)
        elif dtype == "I64":
            d["i64"] = [int(x) for x in np.frombuffer(b, dtype="<i8")]
        expect["tensors"][name] = d
    with open(expect_path, "w") as f:
        json.dump(expect, f)
    # read our own file back through the independent reader, as a self-check
    _, n, hdr, data = read(path)
    check(list(hdr)[-1] == "__metadata__" and n % 2 == 1, "writer self-check")
    for name, (dtype, shape, b) in t.items():
        s, e = hdr[name]["data_offsets"]
        check(data[s:e] == b, f"writer self-check {name}")
    print(f"write: {path}: {len(t)} tensors, header {n} bytes, data {len(data)} bytes")


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "verify-sample":
            verify_sample(argv[2])
        elif len(argv) == 4 and argv[1] == "write":
            write(argv[2], argv[3])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Mismatch as e:
        print(f"safetensors_ref.py: MISMATCH: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
