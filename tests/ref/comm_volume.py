#!/usr/bin/python3
"""Analytic communication volume of one loom training step on world rank 0, from the model's
structure and the ring-algorithm accounting of include/loom/comm.h, compared with what the comm
layer counted (the "comm_bytes" of the metrics file's last line).

usage: comm_volume.py METRICS KIND   (KIND: tp | sp | pp | dp; the model of test_comm_volume.sh)
"""
import json
import sys

# the model of tests/dist/test_comm_volume.sh (GPT-2 style: LayerNorm with bias, GELU, tied)
L, C, NH, F, T, V, MAXPOS = 4, 32, 4, 128, 16, 97, 16
B, GB = 2, 8
VP = 128  # 97 padded to a multiple of 32 * TP (TP <= 2)
F32, F64 = 4, 8


def ar(n, s):  # all-reduce of s bytes over n ranks
    return 0 if n == 1 else 2 * (n - 1) * s // n


def rs(n, s):  # reduce-scatter, s = the received block
    return 0 if n == 1 else (n - 1) * s


def ag(n, s):  # all-gather, s = this rank's block
    return 0 if n == 1 else (n - 1) * s


def params():
    """(name, elements, layer) in table order for TP = 1."""
    p = [("wte", VP * C, -1), ("wpe", MAXPOS * C, -1)]
    for l in range(L):
        for name, n in [("ln1.w", C), ("ln1.b", C), ("qkv.w", 3 * C * C), ("qkv.b", 3 * C),
                        ("proj.w", C * C), ("proj.b", C), ("ln2.w", C), ("ln2.b", C),
                        ("fc1.w", F * C), ("fc1.b", F), ("fc2.w", C * F), ("fc2.b", C)]:
            p.append((name, n, l))
    p += [("lnf.w", C, -1), ("lnf.b", C, -1)]
    return p


def expected(kind):
    N = B * T
    out = {"tp": 0, "pp": 0, "dp": 0, "embedding": 0}
    if kind in ("tp", "sp"):
        tp, micro = 2, GB // B
        xent = ar(tp, N * F32) + ar(tp, 2 * N * F32)  # max, then (sum of exp, target logit)
        if kind == "tp":
            act = ar(tp, N * C * F32)
            per_micro = act + 2 * L * act + xent + act + 2 * L * act  # fwd: embed, layers; bwd: head, layers
            norm_sync = 0
        else:
            shard = N // tp * C * F32
            layer = 2 * ag(tp, shard) + 2 * rs(tp, shard)  # into qkv/fc1, out of proj/fc2
            forward = rs(tp, shard) + L * layer + ag(tp, shard) + xent  # embed, layers, head
            backward = rs(tp, shard) + L * layer + ag(tp, shard)  # head, layers, embed
            per_micro = forward + backward
            # norm weights' gradients summed over TP once per step: 4 per layer + the final norm's 2
            norm_sync = (4 * L + 2) * ar(tp, C * F32)
        out["tp"] = micro * per_micro + norm_sync + ar(tp, F64)  # + the grad-norm reduction
    elif kind == "pp":
        pp, micro = 2, GB // B
        out["pp"] = micro * N * C * F32 + ar(pp, 2 * F64) + ar(pp, F64)  # activations, loss, norm
        out["embedding"] = ar(2, VP * C * F32)  # the tied embedding's gradient
    elif kind == "dp":
        dp = 2
        total = 0
        layer_floats = {}
        for name, n, layer in params():
            if layer >= 0:
                layer_floats[layer] = layer_floats.get(layer, 0) + (n + 15) // 16 * 16
            else:
                total += ar(dp, n * F32)  # non-layer parameters: one reduction each, exact size
        # the layers' ranges (padding included) go out in buckets; a sum of all-reduces over
        # two ranks moves their total size whatever the bucketing
        total += ar(dp, sum(layer_floats.values()) * F32)
        out["dp"] = total + ar(dp, 2 * F64)  # + the loss reduction
    return out


metrics, kind = sys.argv[1], sys.argv[2]
got = json.loads(open(metrics).read().strip().splitlines()[-1])["comm_bytes"]
want = expected(kind)
ok = got == want
print(f"{'ok  ' if ok else 'FAIL'} {kind}: measured {got} analytic {want}")
sys.exit(0 if ok else 1)
