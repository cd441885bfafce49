#!/usr/bin/python3
"""Unigram entropy (nats per token) of a Megatron indexed dataset's tokens: the loss of a model
that knows only token frequencies, the bar a language model must get well below.
usage: unigram_entropy.py PREFIX"""
import math
import struct
import sys
from collections import Counter

prefix = sys.argv[1]
idx = open(prefix + ".idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00", "not a Megatron .idx"
code = idx[17]
fmt = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[code]
data = open(prefix + ".bin", "rb").read()
n = len(data) // struct.calcsize(fmt)
counts = Counter(struct.unpack("<%d%s" % (n, fmt), data))
print("%.4f" % -sum(c / n * math.log(c / n) for c in counts.values()))
