#!/usr/bin/python3
"""PyTorch side of bench/cpu_vs_torch.sh: the GPT that `loom train` builds, trained on the CPU.

Same model as loom's defaults (GPT-2 layout: learned positions, pre-LayerNorm, tanh-GELU MLP of
4 x hidden, biases, output layer tied to the word embedding, vocabulary padded to a multiple of
128 like --make-vocab-size-divisible-by 128), fp32, no dropout, AdamW with weight decay on
matrices only, global-norm clipping at 1.0, one micro-batch per step. Eager mode with
F.scaled_dot_product_attention (causal) where this PyTorch has it, a hand-written causal
attention otherwise; AdamW with foreach=True. --compile tries torch.compile.

Prints one JSON line: {"tokens_per_s": median, "ms": [per measured step], ...}.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, attn):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc1 = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)
        self.attn = attn

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        a = self.attn(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def manual_causal_attention(q, k, v):
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    return s.masked_fill(mask, float("-inf")).softmax(-1) @ v


def sdpa_causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V, attn):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH, attn) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets, vocab):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        # tied output layer over the real rows only: padded columns never enter the softmax
        # (as in loom), and the logits come out contiguous
        logits = F.linear(self.lnf(x), self.wte.weight[:vocab])
        return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()

    torch.manual_seed(1234)
    torch.set_num_threads(a.threads)
    padded = (a.vocab + 127) // 128 * 128
    have_sdpa = hasattr(F, "scaled_dot_product_attention")
    attn = sdpa_causal_attention if have_sdpa else manual_causal_attention
    model = GPT(a.layers, a.hidden, a.heads, a.seq, padded, attn)
    step_fn = model
    note = []
    if not have_sdpa:
        note.append(f"torch {torch.__version__} has no F.scaled_dot_product_attention: "
                    "explicit causal softmax(q k^T) v")
    if a.compile:
        if not hasattr(torch, "compile"):
            print(json.dumps({"error": f"torch {torch.__version__} has no torch.compile"}))
            return 3
        try:
            step_fn = torch.compile(model)
        except Exception as e:  # noqa: BLE001 - report whatever the compiler raises
            print(json.dumps({"error": f"torch.compile failed: {type(e).__name__}: {e}"[:300]}))
            return 3
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    except TypeError:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
        note.append("AdamW without foreach")

    gen = torch.Generator().manual_seed(1)
    ms, losses = [], []
    for it in range(a.warmup + a.iters):
        data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        idx, tgt = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        t0 = time.perf_counter()
        try:
            loss = step_fn(idx, tgt, a.vocab)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        except Exception as e:  # noqa: BLE001 - a failing compiled graph shows up here
            print(json.dumps({"error": f"step failed: {type(e).__name__}: {e}"[:300]}))
            return 3
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if it >= a.warmup:
            ms.append(1000.0 * dt)
    med = statistics.median(ms)
    print(json.dumps({
        "tokens_per_s": a.batch * a.seq / (med / 1000.0),
        "median_ms": med, "ms": [round(x, 1) for x in ms],
        "params": sum(p.numel() for p in model.parameters()),
        "first_loss": losses[0], "last_loss": losses[-1],
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "sdpa": have_sdpa, "compiled": a.compile, "note": "; ".join(note),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
