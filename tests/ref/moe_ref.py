#!/usr/bin/python3
"""Independent PyTorch reference for one mixture-of-experts layer, in float64.

  moe_ref.py --check BIN --case NAME [NAME...] --dir DIR [--no-aux]

for each case writes a random layer and its inputs (rounded to float32) to DIR/NAME/in.safetensors,
runs `BIN DIR/NAME/in.safetensors DIR/NAME/out.safetensors` (tests/model/moe_layer_check.c: loom's layer, fp32,
cpu) and compares: the routing (chosen experts and which pairs survived the capacity) equal
exactly; the output, the input gradient, the balancing measure, the z-loss and the gradients of the
router and expert weights within a relative error of 1e-5 (L2 norm of the difference over that of
the reference's tensor); the expert bias after its updates equal exactly.
--no-aux leaves the balancing loss out of the reference's gradient (the check must then fail).

The layer, as Megatron-LM defines it: logits = x W^T; scores and top-k by the score function
(softmax over the chosen logits; --pre-softmax: softmax over all, not renormalised; sigmoid:
selection on scores + expert bias, probabilities renormalised over the k), group-limited selection,
the top-k scaling factor, capacity (cap = ceil(N k / E f), drop by probability or by position), and
y = sum over the kept (token, expert) pairs of p * expert(x) computed densely for every expert and
every token, plus the shared experts' MLP (times sigmoid(x . g) with the gate). The balancing loss
aux_loss = E / (k T^2) sum_e (sum_t s_te) N_e (seq_aux_loss: per sequence, averaged), s the
softmax over all experts (sigmoid: normalised over the experts), N_e the tokens choosing e before
any drop; z = mean_t logsumexp(logits_t)^2. The gradient is that of
sum(y * dy) + scale * (aux_coeff * aux + z_coeff * z).
Nothing here is derived from loom's code.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

CASES = {
    # name: the layer's settings (metadata of in.safetensors, as moe_layer_check reads them)
    "softmax": dict(num_experts=8, topk=2, aux_coeff=1e-1, z_coeff=1e-3),
    "softmax_fp64": dict(num_experts=8, topk=3, router_dtype="fp64", aux_coeff=1e-1,
                         balance="seq_aux_loss"),
    "pre_softmax": dict(num_experts=8, topk=2, pre_softmax=1, swiglu=1, balance="seq_aux_loss",
                        aux_coeff=1e-2),
    "sigmoid_bias": dict(num_experts=8, topk=2, score="sigmoid", expert_bias=1, topk_scaling=2.5,
                         aux_coeff=1e-2, bias_steps=10, bias_rate=1e-2),
    "groups": dict(num_experts=8, topk=4, score="sigmoid", num_groups=4, group_topk=2,
                   topk_scaling=2.5, aux_coeff=1e-2, z_coeff=1e-3),
    "capacity_probs": dict(num_experts=4, topk=2, capacity_factor=0.5, aux_coeff=1e-2),
    "capacity_position_pad": dict(num_experts=4, topk=2, capacity_factor=0.75,
                                  drop_policy="position", pad_to_capacity=1, aux_coeff=1e-2),
    "shared": dict(num_experts=4, topk=2, swiglu=1, shared_ffn=12, shared_gate=1, aux_coeff=1e-2,
                   z_coeff=1e-3),
}
BASE = dict(B=2, T=16, C=16, ffn_hidden=8, scale=0.5)


def st_write(path, tensors, meta):
    header, blobs, off = {"__metadata__": {k: str(v) for k, v in meta.items()}}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4").reshape(e["shape"])
        out[name] = torch.tensor(a.astype(np.float64))
    return out


def f32(t):
    return t.float().double()


def make(cfg, gen):
    E, C, F = cfg["num_experts"], cfg["C"], cfg["ffn_hidden"]
    F1 = 2 * F if cfg.get("swiglu") else F
    N = cfg["B"] * cfg["T"]
    r = lambda *s, std=1.0: f32(torch.randn(*s, generator=gen) * std)
    t = {"x": r(N, C), "dy": r(N, C), "router.weight": r(E, C, std=0.5)}
    if cfg.get("expert_bias"):
        t["router.expert_bias"] = r(E, std=0.05)
    for e in range(E):
        t[f"experts.{e}.fc1"] = r(F1, C, std=0.3)
        t[f"experts.{e}.fc2"] = r(C, F, std=0.3)
    Fs = cfg.get("shared_ffn", 0)
    if Fs:
        t["shared.fc1"] = r(2 * Fs if cfg.get("swiglu") else Fs, C, std=0.3)
        t["shared.fc2"] = r(C, Fs, std=0.3)
        if cfg.get("shared_gate"):
            t["shared.gate"] = r(1, C, std=0.3)
    for s in range(cfg.get("bias_steps", 0)):
        t[f"bias_x.{s}"] = r(N, C)
    return t


def mlp(cfg, x, fc1, fc2):
    h = x @ fc1.T
    if cfg.get("swiglu"):
        g, u = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(g) * u
    else:
        a = torch.nn.functional.gelu(h, approximate="tanh")
    return a @ fc2.T


def route(cfg, logits, bias):
    """the chosen experts [N, k] (selection order), their probabilities (differentiable)"""
    N, E = logits.shape
    K = cfg["topk"]
    sigmoid = cfg.get("score") == "sigmoid"
    if sigmoid:
        scores = torch.sigmoid(logits)
        sel = scores + (bias if bias is not None else 0)
    elif cfg.get("pre_softmax"):
        scores = torch.softmax(logits, dim=-1)
        sel = scores
    else:
        sel = logits
    sel = sel.detach().clone()
    G = cfg.get("num_groups", 0)
    if G:
        gk = cfg["group_topk"]
        gscore = sel.view(N, G, E // G).topk(K // gk, dim=-1).values.sum(-1)
        keep = torch.zeros(N, G).scatter(1, gscore.topk(gk, dim=-1).indices, 1.0)
        sel = sel.masked_fill(keep.repeat_interleave(E // G, dim=1) == 0, -math.inf)
    idx = sel.topk(K, dim=-1).indices
    if sigmoid:
        p = scores.gather(1, idx)
        if K > 1:
            p = p / (p.sum(-1, keepdim=True) + 1e-20)
    elif cfg.get("pre_softmax"):
        p = scores.gather(1, idx)
    else:
        p = torch.softmax(logits.gather(1, idx), dim=-1)
    if cfg.get("topk_scaling"):
        p = p * cfg["topk_scaling"]
    return idx, p


def capacity_mask(cfg, idx, p):
    N, K = idx.shape
    E = cfg["num_experts"]
    kept = torch.ones(N, K, dtype=torch.bool)
    f = cfg.get("capacity_factor", 0)
    if not f:
        return kept
    cap = math.ceil(N * K / E * f)
    for e in range(E):
        pairs = [(t, k) for t in range(N) for k in range(K) if idx[t, k] == e]
        if cfg.get("drop_policy") != "position":
            pairs.sort(key=lambda tk: (-float(p[tk]), tk[0]))
        for t, k in pairs[cap:]:
            kept[t, k] = False
    return kept


def balance(cfg, logits, idx):
    """the balancing measure (without its coefficient) and the z-loss"""
    N, E = logits.shape
    K = cfg["topk"]
    if cfg.get("score") == "sigmoid":
        s = torch.sigmoid(logits)
        s = s / (s.sum(-1, keepdim=True) + 1e-20)
    else:
        s = torch.softmax(logits, dim=-1)
    counts = torch.zeros(N, E).scatter(1, idx, 1.0)  # constants
    seqs = cfg["B"] if cfg.get("balance") == "seq_aux_loss" else 1
    S = N // seqs
    aux = 0
    for b in range(seqs):
        rows = slice(b * S, (b + 1) * S)
        aux = aux + (s[rows].sum(0) * counts[rows].sum(0)).sum() * E / (K * S * S)
    aux = aux / seqs
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    return aux, z


def layer(cfg, t, no_aux):
    E = cfg["num_experts"]
    w = {k: v.clone().requires_grad_(True) for k, v in t.items()
         if not k.startswith("bias_x") and k != "dy" and k != "router.expert_bias"}
    x = w["x"]
    logits = x @ w["router.weight"].T
    idx, p = route(cfg, logits, t.get("router.expert_bias"))
    kept = capacity_mask(cfg, idx, p)
    comb = torch.zeros(x.shape[0], E).scatter(1, idx, p * kept)  # differentiable in p
    y = torch.zeros_like(x)
    for e in range(E):  # every expert on every token, weighted by its combine weight
        y = y + comb[:, e:e + 1] * mlp(cfg, x, w[f"experts.{e}.fc1"], w[f"experts.{e}.fc2"])
    if cfg.get("shared_ffn"):
        sh = mlp(cfg, x, w["shared.fc1"], w["shared.fc2"])
        if cfg.get("shared_gate"):
            sh = sh * torch.sigmoid(x @ w["shared.gate"].T)
        y = y + sh
    aux, z = balance(cfg, logits, idx)
    loss = (y * t["dy"]).sum()
    if cfg.get("balance", "aux_loss") != "none" and not no_aux:
        loss = loss + cfg["scale"] * cfg.get("aux_coeff", 0) * aux
    loss = loss + cfg["scale"] * cfg.get("z_coeff", 0) * z
    loss.backward()
    grads = {"grad." + k: v.grad for k, v in w.items() if k != "x"}
    return dict(y=y.detach(), dx=x.grad, expert=idx.double(), kept=kept.double(),
                prob=(p * kept).detach(), aux=aux.detach().reshape(1, 1),
                z=z.detach().reshape(1, 1), **grads)


def bias_steps(cfg, t):
    E, K = cfg["num_experts"], cfg["topk"]
    bias = t["router.expert_bias"].float()
    rate = torch.tensor(cfg["bias_rate"], dtype=torch.float32)
    for s in range(cfg["bias_steps"]):
        logits = t[f"bias_x.{s}"] @ t["router.weight"].T
        idx, p = route(cfg, logits, bias.double())
        kept = capacity_mask(cfg, idx, p)
        counts = torch.zeros(E)
        for tk in zip(*torch.nonzero(kept, as_tuple=True)):
            counts[idx[tk]] += 1
        bias = bias + torch.sign(counts.mean() - counts).float() * rate
    return bias.double().reshape(1, E)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", required=True)
    ap.add_argument("--case", required=True, nargs="+", choices=sorted(CASES))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--no-aux", action="store_true")
    a = ap.parse_args()
    bad = sum(run_case(a, case) for case in a.case)
    sys.exit(1 if bad else 0)


def run_case(a, case):
    """compare one case; returns the number of failed checks"""
    print(f"== {case}")
    cfg = dict(BASE, **CASES[case])
    gen = torch.Generator().manual_seed(1234 + sorted(CASES).index(case))
    t = make(cfg, gen)
    d = os.path.join(a.dir, case)
    os.makedirs(d, exist_ok=True)
    inp, out = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
    st_write(inp, t, {k: v for k, v in cfg.items() if k != "C"})
    subprocess.run([a.check, inp, out], check=True)
    got = st_read(out)
    ref = layer(cfg, t, a.no_aux)
    if cfg.get("bias_steps"):
        ref["bias_final"] = bias_steps(cfg, t)
    bad = 0
    for name in sorted(ref):
        r, g = ref[name], got.get(name)
        if g is None or tuple(g.shape) != tuple(r.shape):
            print(f"FAIL {case} {name}: missing or shape {None if g is None else tuple(g.shape)}"
                  f" != {tuple(r.shape)}")
            bad += 1
            continue
        if name in ("expert", "kept", "bias_final"):  # exactly
            diff = int((g != r).sum())
            ok = diff == 0
            print(f"{'ok  ' if ok else 'FAIL'} {case} {name}: {diff} differ (exact)")
        else:
            err = float((g - r).norm() / max(float(r.norm()), 1e-30))
            ok = err < 1e-5
            print(f"{'ok  ' if ok else 'FAIL'} {case} {name}: rel err {err:.2e}")
        bad += not ok
    dropped = int((ref["kept"] == 0).sum())
    print(f"{case}: {dropped} of {ref['kept'].numel()} pairs dropped by the capacity")
    # what the case exercises: choices the groups or the bias change, the bias's movement
    logits = t["x"] @ t["router.weight"].T
    if cfg.get("num_groups") or cfg.get("expert_bias"):
        plain = dict(cfg, num_groups=0)
        idx0, _ = route(plain, logits, None)
        changed = int((idx0.sort(-1).values != ref["expert"].long().sort(-1).values).any(-1).sum())
        print(f"{case}: {changed} of {logits.shape[0]} tokens choose otherwise than the plain "
              f"top-k (groups / expert bias)")
    if cfg.get("bias_steps"):
        moved = float((ref["bias_final"] - t["router.expert_bias"].reshape(1, -1)).abs().max())
        print(f"{case}: the expert bias moved by up to {moved:.4g} in {cfg['bias_steps']} "
              f"updates")
    return bad


if __name__ == "__main__":
    main()
