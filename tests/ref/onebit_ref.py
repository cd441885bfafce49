#!/usr/bin/python3
"""1-bit Adam (Tang et al. 2021; DeepSpeed's OnebitAdam) simulated for W workers in PyTorch, the
oracle of loom's implementation (tests/dist/onebit_check.c under test_onebit.sh).

usage: onebit_ref.py make DIR W...   write DIR/W<w>/config, p0.bin, grads.bin for each W
       onebit_ref.py check DIR W...  compare DIR/W<w>/out/rank<r>.bin and bytes<r>.txt with the
                                     simulation

The simulation: warmup steps average the workers' gradients and take Adam without bias
correction (m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= lr (m / (sqrt(v) + eps) + wd p));
later steps form each worker's momentum from its own gradient, freeze v, and replace the momentum
by the error-compensated 1-bit all-reduce: each worker adds its error, scales its signs by
||x|| / sqrt(n) (n padded with zeros to a multiple of 8 W) and keeps the difference as its new
error; the signs travel packed in bits (numpy's packbits here), chunk j to worker j, which
averages the W decompressed chunks, adds its server error and compresses again the same way;
every worker ends with every server's signs times its scale.
"""
import math
import os
import sys

import numpy as np
import torch

N, STEPS, FREEZE = 10007, 8, 3
LR, B1, B2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.01


def rms(x):
    """||x|| / sqrt(n), summed in float64 and rounded once to float32 (the exact scale)"""
    return (torch.linalg.norm(x.double()) / math.sqrt(x.numel())).float()


def sign(x):
    """+1 where x >= 0 (zero included), -1 elsewhere, as the packed bit (x >= 0) decodes."""
    return torch.where(x < 0, -1.0, 1.0).to(torch.float32)


def bits_of(x):
    return np.packbits((x >= 0).numpy().astype(np.uint8))  # first element in the high bit


def unbits(b, n):
    return torch.from_numpy(np.unpackbits(b)[:n].astype(np.float32) * 2 - 1)


def compressed_allreduce(xs, werr, serr):
    W = len(xs)
    n = xs[0].numel()
    npad = (n + 8 * W - 1) // (8 * W) * (8 * W)
    chunk = npad // W
    sent, scales = [], []
    for w in range(W):
        b = torch.nn.functional.pad(xs[w], (0, npad - n)) + werr[w]
        s = rms(b)
        werr[w] = b - s * sign(b)
        sent.append(bits_of(b))
        scales.append(s)
    out = []
    for j in range(W):  # server j: chunk j of every worker
        parts = torch.stack([unbits(sent[w][j * chunk // 8:(j + 1) * chunk // 8], chunk) * scales[w]
                             for w in range(W)])
        y = parts.sum(0) * (1.0 / W) + serr[j]
        t = rms(y)
        serr[j] = y - t * sign(y)
        out.append(unbits(bits_of(y), chunk) * t)
    return torch.cat(out)[:n]


def simulate(p0, grads, W):
    p = p0.clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    npad = (N + 8 * W - 1) // (8 * W) * (8 * W)
    werr = [torch.zeros(npad) for _ in range(W)]
    serr = [torch.zeros(npad // W) for _ in range(W)]
    for s in range(1, STEPS + 1):
        g = grads[s - 1]
        if s <= FREEZE:
            ga = g.mean(0)
            m = B1 * m + (1 - B1) * ga
            v = B2 * v + (1 - B2) * ga * ga
        else:
            m = compressed_allreduce([B1 * m + (1 - B1) * g[w] for w in range(W)], werr, serr)
        p = p - LR * (m / (v.sqrt() + EPS) + WD * p)
    return p, m, v, werr, serr


def make(d, W):
    gen = torch.Generator().manual_seed(7 + W)
    p0 = torch.randn(N, generator=gen)
    # a shared direction that drifts, plus each worker's own noise
    base = torch.randn(N, generator=gen)
    grads = torch.stack([torch.stack([base * (1 + 0.1 * s) + 0.5 * torch.randn(N, generator=gen)
                                      for _ in range(W)]) for s in range(STEPS)]) * 1e-2
    os.makedirs(f"{d}/out", exist_ok=True)
    open(f"{d}/config", "w").write(f"{N} {STEPS} {FREEZE} {LR} {B1} {B2} {EPS} {WD}\n")
    p0.numpy().astype("<f4").tofile(f"{d}/p0.bin")
    grads.numpy().astype("<f4").tofile(f"{d}/grads.bin")


def check(d, W):
    out = f"{d}/out"
    p0 = torch.from_numpy(np.fromfile(f"{d}/p0.bin", dtype="<f4"))
    grads = torch.from_numpy(np.fromfile(f"{d}/grads.bin", dtype="<f4")).reshape(STEPS, W, N)
    p, m, v, werr, serr = simulate(p0, grads, W)
    npad = werr[0].numel()
    ok = True
    worst = {}
    for r in range(W):
        try:
            a = np.fromfile(f"{out}/rank{r}.bin", dtype="<f4")
            sent, fp32 = map(int, open(f"{out}/bytes{r}.txt").read().split())
        except (OSError, ValueError):
            print(f"FAIL 1-bit Adam, {W} workers: rank {r} wrote no results")
            return False
        got = {"params": a[:N], "m": a[N:2 * N], "v": a[2 * N:3 * N],
               "worker error": a[3 * N:3 * N + npad], "server error": a[3 * N + npad:]}
        want = {"params": p, "m": m, "v": v, "worker error": werr[r], "server error": serr[r]}
        for k in want:
            ref = want[k].numpy().astype(np.float64)
            x = got[k].astype(np.float64)
            if x.shape != ref.shape or not np.linalg.norm(ref) > 0:
                ok = False
                worst[k] = float("inf")
                continue
            e = np.linalg.norm(x - ref) / np.linalg.norm(ref)
            worst[k] = max(worst.get(k, 0.0), e)
            ok &= e <= 1e-6
        # per compressed step: the signs twice ((W - 1) chunks of npad / (8 W) bytes) and the
        # scales twice ((W - 1) floats)
        want_bytes = 2 * (W - 1) * (npad // W // 8) + 2 * (W - 1) * 4
        ok &= sent == want_bytes and sent * 25 <= fp32
    print(f"{'ok  ' if ok else 'FAIL'} 1-bit Adam, {W} workers, {FREEZE} warmup + {STEPS - FREEZE} "
          f"compressed steps against the PyTorch simulation: worst relative difference "
          + ", ".join(f"{k} {e:.2e}" for k, e in worst.items())
          + f" (tolerance 1e-6); bytes sent per compressed step {sent} (expected {want_bytes}) = "
          f"1/{fp32 / sent:.1f} of an fp32 all-reduce's {fp32}")
    return ok


def main():
    cmd, d, ws = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3:]]
    if cmd == "make":
        for W in ws:
            make(f"{d}/W{W}", W)
        return 0
    return 0 if all([check(f"{d}/W{W}", W) for W in ws]) else 1


sys.exit(main())
