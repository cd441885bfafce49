#!/usr/bin/env python3
"""Independent reference of Megatron-core's GPT sample order (megatron/core/datasets, 2025):
GPTDataset's document, sample and shuffle indices, BlendedDataset's indices, the split matrix,
the blend sizes, and the index cache (description, MD5, .npy files), written from Megatron's
documented algorithm with numpy's real RandomState. Reads Megatron .idx/.bin files itself.

    megatron_data_ref.py --data-path "W1 P1 W2 P2 ..." --split 969,30,1 --which train \
        --num-samples N --seq-length T --seed S [--per-split] --count K \
        [--cache-path DIR [--write-cache]]

prints the same lines as tests/data/gpt_order_check.c: "len L cached C" then
"k dataset unshuffled_sample: tokens". With --cache-path the indices are read from Megatron's
cache files when they exist under this request's name (cached 1), else built (and written with
--write-cache). Tokenizer named in the description: GPT2BPETokenizer, vocab.json, merges.txt.
"""
import argparse
import functools
import hashlib
import json
import math
import os
import re
import struct
import sys
from collections import OrderedDict

import numpy

SPLITS = ["train", "valid", "test"]
DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


class Indexed:
    """A Megatron indexed dataset (.idx header, sequence lengths and pointers, .bin tokens)."""

    def __init__(self, prefix):
        with open(prefix + ".idx", "rb") as f:
            assert f.read(9) == b"MMIDIDX\x00\x00"
            assert struct.unpack("<Q", f.read(8))[0] == 1
            self.dtype = DTYPES[struct.unpack("<B", f.read(1))[0]]
            n = struct.unpack("<Q", f.read(8))[0]
            struct.unpack("<Q", f.read(8))
            off = f.tell()
        idx = numpy.memmap(prefix + ".idx", mode="r", order="C")
        self.sequence_lengths = numpy.frombuffer(idx, dtype=numpy.int32, count=n, offset=off)
        self.pointers = numpy.frombuffer(idx, dtype=numpy.int64, count=n, offset=off + 4 * n)
        self.bin = numpy.memmap(prefix + ".bin", mode="r", dtype=self.dtype)
        self.itemsize = numpy.dtype(self.dtype).itemsize

    def get(self, i, offset=0, length=None):
        if length is None:
            length = int(self.sequence_lengths[i]) - offset
        start = int(self.pointers[i]) // self.itemsize + offset
        return numpy.array(self.bin[start:start + length], dtype=numpy.int64)


def normalize(w):
    w = numpy.array(w, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    v = list(map(float, re.findall(r"[.0-9]+", split)))
    v = normalize(v + [0.0] * (3 - len(v)))
    ends = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *v])
    return [None if ends[i + 1] <= ends[i] else (ends[i], ends[i + 1]) for i in range(3)]


def tokenizer_ids():
    return OrderedDict([("class", "_GPT2BPETokenizer"), ("tokenizer_path", ["vocab.json", "merges.txt"])])


class GPT:
    """One GPTDataset: a split of one indexed dataset."""

    def __init__(self, prefix, split, matrix, which, num_samples, T, seed, cache, write, tok):
        self.ds = Indexed(prefix)
        self.T = T
        n = self.ds.sequence_lengths.shape[0]
        beg, end = (int(round(matrix[which][0] * float(n))), int(round(matrix[which][1] * float(n))))
        self.indices = numpy.arange(beg, end, dtype=numpy.int32)
        ids = OrderedDict()
        ids["class"] = "GPTDataset"
        ids["dataset_path"] = prefix
        ids["num_samples"] = num_samples
        ids["index_split"] = SPLITS[which]
        ids["random_seed"] = seed
        ids["sequence_length"] = T
        ids["split"] = split
        ids["split_matrix"] = None if split is None else matrix
        ids["tokenizer"] = tok
        self.unique_identifiers = ids
        desc = json.dumps(ids, indent=4)
        self.cached = False
        base = None
        if cache:
            h = hashlib.md5(desc.encode("utf-8")).hexdigest()
            base = os.path.join(cache, f"{h}-GPTDataset-{SPLITS[which]}-")
            names = [base + s for s in ("description.txt", "document_index.npy",
                                        "sample_index.npy", "shuffle_index.npy")]
            if all(map(os.path.isfile, names)):
                assert open(names[0]).read() == desc, "description differs"
                self.doc = numpy.load(names[1])
                self.sample = numpy.load(names[2])
                self.shuffle = numpy.load(names[3])
                self.cached = True
                return
        self.build(num_samples, seed)
        if cache and write:
            os.makedirs(cache, exist_ok=True)
            numpy.save(base + "document_index.npy", self.doc)
            numpy.save(base + "sample_index.npy", self.sample)
            numpy.save(base + "shuffle_index.npy", self.shuffle)
            with open(base + "description.txt", "wt") as f:
                f.write(desc)

    def build(self, num_samples, seed):
        T = self.T
        sizes = self.ds.sequence_lengths
        tpe = int(numpy.sum(sizes[self.indices]))
        epochs, tokens = 1, tpe
        while tokens < num_samples * T + 1:
            epochs += 1
            tokens += tpe
        separate = False
        if epochs > 1:
            sans_final = ((epochs - 1) * tpe - 1) // T
            from_final = num_samples - sans_final
            per_epoch = (tpe - 1) // T
            assert 0 <= from_final <= per_epoch + 1
            separate = from_final < int(0.80 * per_epoch)
        rs = numpy.random.RandomState(seed)

        def doc_index(e):
            d = numpy.mgrid[0:e, 0:len(self.indices)][1]
            d[:] = self.indices
            d = d.reshape(-1).astype(numpy.int32)
            rs.shuffle(d)
            return d

        if separate:
            self.doc = numpy.concatenate((doc_index(epochs - 1), doc_index(1)))
        else:
            self.doc = doc_index(epochs)
        # sample index: sample j starts at token j*T of the documents concatenated in document
        # index order (T + 1 tokens a sample, the last partial one dropped), given as (position
        # in the document index, offset), the position that of the document holding that token
        ns = (epochs * tpe - 1) // T
        cum = numpy.concatenate(([0], numpy.cumsum(sizes[self.doc].astype(numpy.int64))))
        start = numpy.arange(ns + 1, dtype=numpy.int64) * T
        pos = numpy.searchsorted(cum, start, side="right") - 1
        sample = numpy.stack((pos, start - cum[pos]), axis=1)
        self.sample = sample
        first = sans_final if separate else ns
        dt = numpy.uint32 if ns < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
        a = numpy.arange(0, first, dtype=dt)
        rs.shuffle(a)
        b = numpy.arange(first, ns, dtype=dt)
        if first != ns:
            rs.shuffle(b)
        self.shuffle = numpy.concatenate((a, b)) if first != ns else a

    def __len__(self):
        return self.sample.shape[0] - 1

    def tokens(self, k):
        j = int(self.shuffle[k])
        (b, bo), (e, eo) = self.sample[j], self.sample[j + 1]
        if b == e:
            return j, self.ds.get(int(self.doc[b]), int(bo), int(eo - bo + 1))
        parts = []
        for i in range(int(b), int(e) + 1):
            parts.append(self.ds.get(int(self.doc[i]), int(bo) if i == b else 0,
                                     None if i < e else int(eo) + 1))
        return j, numpy.concatenate(parts)


def blending(weights, size):
    index = numpy.zeros(size, dtype=numpy.int16)
    sample = numpy.zeros(size, dtype=numpy.int64)
    drawn = [0] * len(weights)
    for i in range(size):
        x = max(float(i), 1.0)
        errs = [weights[d] * x - float(drawn[d]) for d in range(len(weights))]
        best = 0
        for d in range(1, len(weights)):
            if errs[d] > errs[best]:
                best = d
        index[i] = best
        sample[i] = drawn[best]
        drawn[best] += 1
    return index, sample


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-path", required=True)
    ap.add_argument("--split", default="969,30,1")
    ap.add_argument("--which", choices=SPLITS, default="train")
    ap.add_argument("--num-samples", type=int, required=True)
    ap.add_argument("--seq-length", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--per-split", action="store_true")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--cache-path")
    ap.add_argument("--write-cache", action="store_true")
    a = ap.parse_args()
    which = SPLITS.index(a.which)
    words = a.data_path.split()
    split = None if a.per_split else a.split
    matrix = [None, None, None]
    if a.per_split:
        matrix[which] = (0.0, 1.0)
    else:
        matrix = split_matrix(a.split)
        assert matrix[which] is not None, "split absent"
    tok = tokenizer_ids() if a.cache_path else None
    N = a.num_samples
    mk = lambda p, n: GPT(p, split, matrix, which, n, a.seq_length, a.seed, a.cache_path,
                          a.write_cache, tok)
    if len(words) == 1:
        ds = mk(words[0], N)
        L = len(ds)
        print(f"len {L} cached {int(ds.cached)}")
        for k in range(min(L, a.count)):
            j, t = ds.tokens(k)
            print(f"{k} 0 {j}: " + " ".join(map(str, t.tolist())))
        return
    prefixes = words[1::2]
    w = normalize([float(x) for x in words[0::2]])
    targets = [int(math.ceil(N * x)) for x in w]
    asked = [int(math.ceil(math.ceil(N * x) * (1 + 0.005))) for x in w]
    dss = [mk(p, n) for p, n in zip(prefixes, asked)]
    size = sum(targets)
    w2 = normalize(w)
    ids = OrderedDict([("class", "BlendedDataset"),
                       ("datasets", [d.unique_identifiers for d in dss]),
                       ("split", SPLITS[which]), ("weights", w2), ("size", size)])
    desc = json.dumps(ids, indent=4)
    index, sample = blending(w2, size)
    cached = all(d.cached for d in dss)
    if a.cache_path:
        h = hashlib.md5(desc.encode("utf-8")).hexdigest()
        base = os.path.join(a.cache_path, f"{h}-BlendedDataset-{SPLITS[which]}-")
        names = [base + s for s in ("description.txt", "dataset_index.npy", "dataset_sample_index.npy")]
        if all(map(os.path.isfile, names)):
            assert open(names[0]).read() == desc
            assert numpy.array_equal(numpy.load(names[1]), index)
            assert numpy.array_equal(numpy.load(names[2]), sample)
        else:
            cached = False
            if a.write_cache:
                numpy.save(names[1], index)
                numpy.save(names[2], sample)
                with open(names[0], "wt") as f:
                    f.write(desc)
    for d in range(len(dss)):
        assert int(numpy.sum(index == d)) <= len(dss[d])
    print(f"len {size} cached {int(cached)}")
    for k in range(min(size, a.count)):
        d = int(index[k])
        j, t = dss[d].tokens(int(sample[k]))
        print(f"{k} {d} {j}: " + " ".join(map(str, t.tolist())))


if __name__ == "__main__":
    sys.exit(main())
