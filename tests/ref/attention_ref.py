"""PyTorch reference for the CPU attention and rotary embedding (tests/ops/test_attention_torch.sh).

Reads the cases written by `test_attention dump DIR` and recomputes each one in float64 with
PyTorch autograd:
    qkv = rope(x)                      (Hugging Face style: cat(cos, cos), rotate_half)
    out = attention(qkv)               (grouped heads through repeat_interleave; causal mask;
                                        dropout mask from a NumPy Philox4x32-10)
With documents packed into a sample (cases with doc_<i>.i32: the first position of each
token's document), the attention mask is an explicit boolean [B, 1, T, T] tensor (causal and
key >= its query's document start, passed to PyTorch's own kernel as attn_mask) and each
token's rotary position is its place in its document, t - doc_start. With key ends (cases with
kend_<i>.i32: padding, or each document's end) the boolean mask also holds key < kend[b, query],
bidirectional or causal, and goes to PyTorch's scaled_dot_product_attention as attn_mask.
    dx  = d(sum(out * dout)) / dx      (autograd through attention and rope)
and compares rope(x), out, lse and dx with what loom computed. Exit status 1 on a mismatch.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

M32 = np.uint64(0xFFFFFFFF)


def philox_word0(seed, purpose, idx):
    """First 32-bit word of Philox4x32-10 for counters (idx, purpose) and key seed."""
    idx = idx.astype(np.uint64)
    c0 = idx & M32
    c1 = idx >> np.uint64(32)
    c2 = np.full_like(idx, np.uint64(purpose & 0xFFFFFFFF))
    c3 = np.full_like(idx, np.uint64(purpose >> 32))
    k0 = seed & 0xFFFFFFFF
    k1 = seed >> 32
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        n0 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0)
        n2 = (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c1 = p1 & M32
        c3 = p0 & M32
        c0 = n0
        c2 = n2
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0


def dropout_multiplier(c, b_count, nh, t):
    """[B, NH, T, T] tensor of keep/(1-p) (or ones when p == 0)."""
    if c["p"] <= 0:
        return torch.ones(b_count, nh, t, t, dtype=torch.float64)
    b = np.arange(b_count, dtype=np.uint64)[:, None, None, None]
    h = np.arange(nh, dtype=np.uint64)[None, :, None, None]
    tq = np.arange(t, dtype=np.uint64)[None, None, :, None]
    tk = np.arange(t, dtype=np.uint64)[None, None, None, :]
    T = np.uint64(t)
    idx = (((np.uint64(c["sample0"]) + b) * np.uint64(c["NH_global"]) + np.uint64(c["head0"]) + h)
           * T + tq) * T + tk
    w = philox_word0(c["seed"], c["key"], idx)
    u = ((w >> np.uint64(8)).astype(np.float32) + np.float32(1.0)) * np.float32(1.0 / 16777216.0)
    keep = u > np.float32(c["p"])
    return torch.from_numpy(keep.astype(np.float64)) / (1.0 - float(np.float32(c["p"])))


def rope_ref(x, c, doc=None):
    """Rotary embedding of the q and k heads of x[B, T, NKV, Q+2, HS]; with doc [B, T], token t
    is at position pos0 + t - doc[b, t]."""
    hs, q = c["HS"], c["NH"] // c["NKV"]
    half = hs // 2
    inv_freq = 1.0 / (c["theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    t = torch.arange(c["T"], dtype=torch.float64)
    pos = (t[None, :] - doc.double() if doc is not None else t[None, :]) + c["pos0"]  # [B|1, T]
    ang = pos[..., None] * inv_freq                       # [B|1, T, half]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, :, None, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, :, None, None, :]
    qk = x[:, :, :, : q + 1, :]
    rot = torch.cat([-qk[..., half:], qk[..., :half]], -1)
    return torch.cat([qk * cos + rot * sin, x[:, :, :, q + 1:, :]], 3)


def attention_ref(qkv, c, doc=None, kend=None):
    B, T, NH, NKV, HS = c["B"], c["T"], c["NH"], c["NKV"], c["HS"]
    Q = NH // NKV
    q = qkv[:, :, :, :Q, :].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[:, :, :, Q, :].transpose(1, 2)                # [B, NKV, T, HS]
    v = qkv[:, :, :, Q + 1, :].transpose(1, 2)
    kr, vr = k.repeat_interleave(Q, 1), v.repeat_interleave(Q, 1)   # head h reads group h // Q
    s = (q @ kr.transpose(-1, -2)) * c["scale"]
    mask = None                                           # True: the key is seen
    if c["causal"]:
        mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    if doc is not None:                                   # keys from the query's document on
        same_doc = torch.arange(T)[None, None, :] >= doc[:, :, None]   # [B, T(query), T(key)]
        mask = same_doc[:, None] if mask is None else mask & same_doc[:, None]
    if kend is not None:                                  # keys before the query's end
        before = torch.arange(T)[None, None, :] < kend[:, :, None]
        mask = before[:, None] if mask is None else mask & before[:, None]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)                          # [B, NH, T]
    out = None
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None and c["p"] <= 0:                  # PyTorch's own kernel where it has one
        try:
            if doc is not None or kend is not None:
                out = sdpa(q, kr, vr, attn_mask=mask, scale=c["scale"])
            else:
                out = sdpa(q, kr, vr, is_causal=bool(c["causal"]), scale=c["scale"])
        except TypeError:                                 # no scale argument before 2.1
            out = None
    if out is None:
        out = (torch.softmax(s, -1) * dropout_multiplier(c, B, NH, T)) @ vr
    return out.transpose(1, 2).reshape(B, T, NH * HS), lse


def count_docs(doc):
    """documents per sample: the positions t where doc[b, t] == t"""
    t = torch.arange(doc.shape[1])
    return [int((doc[b] == t).sum()) for b in range(doc.shape[0])]


def load(d, name, i, shape):
    a = np.fromfile(os.path.join(d, f"{name}_{i}.f32"), dtype=np.float32)
    assert a.size == math.prod(shape), (name, a.size, shape)
    return torch.from_numpy(a.astype(np.float64)).reshape(shape)


def compare(what, got, want, atol, rtol):
    err = (got - want).abs()
    lim = atol + rtol * want.abs()
    worst = (err / lim).max().item()
    ok = bool((err <= lim).all())
    print(f"    {what:5s} max abs err {err.max().item():.3g}  (worst/limit {worst:.3f})")
    return ok


def main():
    d = sys.argv[1]
    failures = 0
    with open(os.path.join(d, "cases.txt")) as f:
        lines = [l.split() for l in f if l.strip()]
    for w in lines:
        names = ["i", "B", "T", "NH", "NKV", "HS", "causal"]
        c = {n: int(v) for n, v in zip(names, w[:7])}
        c["scale"], c["p"] = float(w[7]), float(w[8])
        c["seed"], c["key"] = int(w[9]), int(w[10])
        c["sample0"], c["head0"], c["NH_global"], c["pos0"] = map(int, w[11:15])
        c["theta"] = float(w[15])
        docs = len(w) > 16 and int(w[16]) != 0
        ends = len(w) > 17 and int(w[17]) != 0
        B, T, NH, NKV, HS, i = c["B"], c["T"], c["NH"], c["NKV"], c["HS"], c["i"]
        Q = NH // NKV
        shape = (B, T, NKV, Q + 2, HS)
        x = load(d, "x", i, shape).requires_grad_(True)
        dout = load(d, "dout", i, (B, T, NH * HS))
        doc = None
        if docs:
            doc = torch.from_numpy(np.fromfile(os.path.join(d, f"doc_{i}.i32"), dtype=np.int32)
                                   .astype(np.int64)).reshape(B, T)
        kend = None
        if ends:
            kend = torch.from_numpy(np.fromfile(os.path.join(d, f"kend_{i}.i32"), dtype=np.int32)
                                    .astype(np.int64)).reshape(B, T)
        qkv = rope_ref(x, c, doc)
        out, lse = attention_ref(qkv, c, doc, kend)
        (out * dout).sum().backward()
        print(f"case {i}: B={B} T={T} NH={NH} NKV={NKV} HS={HS} causal={c['causal']} "
              f"p={c['p']:.2f} head0={c['head0']}/{c['NH_global']} sample0={c['sample0']} "
              f"pos0={c['pos0']}" + (f" documents {count_docs(doc)}" if docs else "")
              + (f" key ends (first row's) {kend[:, 0].tolist()}" if ends else ""))
        ok = compare("rope", load(d, "rope", i, shape), qkv.detach(), 2e-6, 2e-6)
        ok &= compare("out", load(d, "out", i, (B, T, NH * HS)), out.detach(), 5e-6, 2e-5)
        ok &= compare("lse", load(d, "lse", i, (B, NH, T)), lse.detach(), 5e-6, 5e-6)
        ok &= compare("dx", load(d, "dx", i, shape), x.grad, 2e-5, 2e-4)
        if not ok:
            print("    MISMATCH")
            failures += 1
    print(f"{len(lines) - failures} of {len(lines)} cases agree with PyTorch")
    return 1 if failures or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
