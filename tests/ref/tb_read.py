"""Reads a TensorBoard event file from the format's definition alone (no TensorFlow, no
TensorBoard): TFRecords (uint64 length, masked CRC-32C of it, data, masked CRC-32C of the data)
holding tensorflow.Event protocol buffers. Every checksum is verified; a torn or corrupt record is
an error. Prints one JSON object per event: {"wall_time", "step", "file_version"} or
{"wall_time", "step", "tag", "value"} per scalar.

usage: tb_read.py EVENTFILE
"""
import json
import struct
import sys


def crc32c(data):
    # bit by bit, from the Castagnoli polynomial (reflected 0x82F63B78)
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def fields(b):
    """(field number, wire type, value) of a message; value: int, bytes, or raw 4/8 bytes"""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {w}")
        yield f, w, v


def events(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError(f"torn record header at byte {i}")
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        if masked(crc32c(head)) != hc:
            raise ValueError(f"bad length checksum at byte {i}")
        if len(data) - i < 16 + n:
            raise ValueError(f"torn record at byte {i}")
        body = data[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if masked(crc32c(body)) != dc:
            raise ValueError(f"bad data checksum at byte {i}")
        i += 16 + n
        ev = {"wall_time": None, "step": 0}
        scalars = []
        for f, w, v in fields(body):
            if f == 1 and w == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif f == 2 and w == 0:
                ev["step"] = v
            elif f == 3 and w == 2:
                ev["file_version"] = v.decode()
            elif f == 5 and w == 2:  # Summary
                for sf, sw, sv in fields(v):
                    if sf == 1 and sw == 2:  # Summary.Value
                        tag, val = None, None
                        for vf, vw, vv in fields(sv):
                            if vf == 1 and vw == 2:
                                tag = vv.decode()
                            elif vf == 2 and vw == 5:
                                val = struct.unpack("<f", vv)[0]
                        scalars.append((tag, val))
            else:
                raise ValueError(f"unexpected Event field {f} (wire type {w})")
        if scalars:
            for tag, val in scalars:
                yield dict(ev, tag=tag, value=val)
        else:
            yield ev


if __name__ == "__main__":
    for e in events(sys.argv[1]):
        print(json.dumps(e))
