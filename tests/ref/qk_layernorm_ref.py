#!/usr/bin/python3
"""Independent PyTorch reference for a GPT-2-style loom model with query-key LayerNorms
(Megatron-LM's --qk-layernorm with --normalization LayerNorm), in float64, on loom's own
checkpoint names (Hugging Face has no such GPT-2).

  qk_layernorm_ref.py perturb --ckpt DIR --out DIR [--seed S]
      rewrites the parameters of loom checkpoint DIR (its meta.json kept) with random values
      into DIR --out: matrices N(0, 0.02) (the qkv product's N(0, 0.25), so that the heads'
      vectors are of order 1), biases N(0, 0.1), norm weights N(0, 0.3) (zero-centred:
      the norms scale by 1 + w) or 1 + N(0, 0.1)
  qk_layernorm_ref.py check --init DIR --grads DIR --final DIR --metrics JSONL --iters N
                      --micro-batch B --global-batch G --seq T --lr LR --clip C --wd WD
      the losses and grad norms of N iterations on loom's --mock-data batches, the first
      iteration's gradients and the parameters after N AdamW steps, each within --tol relative
      (L2 per tensor). Exit status 0 only if everything matches.

The model (loom's, as Megatron-LM's): learned positions, pre-norm LayerNorm blocks with biases, a
tanh GELU MLP, tied embeddings, the qkv rows grouped per key/value head as [NH/NKV query heads |
key | value], and each head's query and key vectors LayerNorm-ed over the head size with the
layer's q_layernorm / k_layernorm weight and bias before attention. The vocabulary's padded rows
never enter the softmax. Only the mock-data recipe and the Philox generator come from
gpt_ref.py, written from their definitions.
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import causal_attention, mock_sample, rel_err, st_read, st_write  # noqa: E402

torch.set_default_dtype(torch.float64)


def files(d):
    """model.safetensors and meta.json of a loom checkpoint folder (or its latest iteration)"""
    latest = os.path.join(d, "latest_checkpointed_iteration.txt")
    if os.path.exists(latest):
        d = os.path.join(d, "iter_%07d" % int(open(latest).read().strip()))
    return os.path.join(d, "model.safetensors"), os.path.join(d, "meta.json")


def forward(mc, w, tokens, targets):
    B, T = tokens.shape
    C, NH, NKV = mc["hidden_size"], mc["num_attention_heads"], mc["num_query_groups"]
    HS = mc.get("kv_channels") or C // NH
    R, V, eps = NH // NKV, mc["vocab_size"], mc["norm_epsilon"]
    one = 1.0 if mc.get("apply_layernorm_1p") else 0.0

    def ln(x, p, n):
        return torch.nn.functional.layer_norm(x, (n,), one + w[p + ".weight"], w[p + ".bias"], eps)

    wte = w["embedding.word_embeddings.weight"]
    x = wte[tokens] + w["embedding.position_embeddings.weight"][torch.arange(T)]
    for i in range(mc["num_layers"]):
        p = f"decoder.layers.{i}."
        h = ln(x, p + "input_layernorm", C)
        qkv = (h @ w[p + "self_attention.linear_qkv.weight"].T + w[p + "self_attention.linear_qkv.bias"])
        g = qkv.view(B, T, NKV, R + 2, HS)
        q = g[:, :, :, :R].reshape(B, T, NH, HS)
        k, v = g[:, :, :, R], g[:, :, :, R + 1]
        q = ln(q, p + "self_attention.q_layernorm", HS)
        k = ln(k, p + "self_attention.k_layernorm", HS)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(R, 1), v.repeat_interleave(R, 1)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + a @ w[p + "self_attention.linear_proj.weight"].T + w[p + "self_attention.linear_proj.bias"]
        h = ln(x, p + "pre_mlp_layernorm", C)
        f = h @ w[p + "mlp.linear_fc1.weight"].T + w[p + "mlp.linear_fc1.bias"]
        f = 0.5 * f * (1 + torch.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ w[p + "mlp.linear_fc2.weight"].T + w[p + "mlp.linear_fc2.bias"]
    logits = ln(x, "decoder.final_layernorm", C) @ wte[:V].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def perturb(a):
    src, meta = files(a.ckpt)
    mc = json.load(open(meta))["model"]
    gen = torch.Generator().manual_seed(a.seed)
    out = {}
    for name, t in st_read(src).items():
        r = torch.randn(t.shape, generator=gen)
        if name.endswith("layernorm.weight"):
            out[name] = 0.3 * r if mc.get("apply_layernorm_1p") else 1 + 0.1 * r
        elif t.dim() == 1:
            out[name] = 0.1 * r
        else:
            out[name] = (0.25 if "linear_qkv" in name else 0.02) * r
    os.makedirs(a.out, exist_ok=True)
    st_write(os.path.join(a.out, "model.safetensors"), out)
    shutil.copy(meta, os.path.join(a.out, "meta.json"))
    return 0


def check(a):
    src, meta = files(a.init)
    mc = json.load(open(meta))["model"]
    assert mc["normalization"] == "LayerNorm" and mc.get("qk_layernorm"), "a LayerNorm model with qk_layernorm"
    assert mc["add_bias_linear"] and not mc["untie_embeddings_and_output_weights"]
    assert mc["position_embedding_type"] == "learned_absolute" and not mc["swiglu"] and mc["gelu"] == "tanh"
    w = {k: v.clone().requires_grad_(True) for k, v in st_read(src).items()}
    V = mc["vocab_size"]
    groups = [{"params": [p for p in w.values() if p.dim() >= 2], "weight_decay": a.wd},
              {"params": [p for p in w.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    metrics = [json.loads(l) for l in open(a.metrics)]
    ok = True

    def report(what, err):
        nonlocal ok
        good = err < a.tol
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {what}: relative error {err:.3e} (tolerance {a.tol:g})")

    for it in range(1, a.iters + 1):
        opt.zero_grad()
        base = (it - 1) * a.global_batch
        s = torch.tensor([mock_sample(a.data_seed, 0, base + i, V, a.seq) for i in range(a.global_batch)])
        loss = forward(mc, w, s[:, :-1], s[:, 1:])
        loss.backward()
        for p in w.values():  # unused by the forward: no gradient (the check then fails on it)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        kb = {n: w[n].grad.abs().max().item() for n in w if n.endswith("k_layernorm.bias")}
        for n in kb:  # its gradient is exactly zero (rounding noise here, which Adam would scale up)
            w[n].grad.zero_()
        m = next(x for x in metrics if x.get("iteration") == it and "loss" in x)
        report(f"iteration {it} loss {loss.item():.8f} vs loom {m['loss']:.8f}", abs(loss.item() - m["loss"]) / loss.item())
        gnorm = math.sqrt(sum((p.grad ** 2).sum().item() for p in w.values()))
        report(f"iteration {it} grad norm {gnorm:.6f} vs loom {m['grad_norm']:.6f}", abs(gnorm - m["grad_norm"]) / gnorm)
        if it == 1:
            g = st_read(files(a.grads)[0])
            assert set(g) == set(w), sorted(set(g) ^ set(w))
            for name in sorted(w):
                if name.endswith("k_layernorm.bias"):  # exactly zero: q.b shifts a whole score row
                    report(f"gradient {name} (zero; reference's rounding {kb[name]:.1e})",
                           g[name].abs().max().item())
                    continue
                # the padded vocabulary rows get no gradient in either
                report(f"gradient {name}", rel_err(g[name], w[name].grad))
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(w.values()), a.clip)
        opt.step()
    final = st_read(files(a.final)[0])
    for name in sorted(w):
        report(f"after {a.iters} steps {name}", rel_err(final[name], w[name].detach()))
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["perturb", "check"])
    ap.add_argument("--ckpt"), ap.add_argument("--out"), ap.add_argument("--init")
    ap.add_argument("--grads"), ap.add_argument("--final"), ap.add_argument("--metrics")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--data-seed", type=int, default=1234)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    return perturb(a) if a.cmd == "perturb" else check(a)


if __name__ == "__main__":
    sys.exit(main())
