#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_vs_torch.sh: trains the same model as `loom train --device cuda
--bf16` on one GPU and prints one JSON line of figures per run.

Model --arch gpt (as loom's GPT-2 layout): learned positions, pre-norm LayerNorm blocks, fused QKV
with biases, causal attention through F.scaled_dot_product_attention, GELU (tanh) MLP of
4 x hidden, final LayerNorm, output layer tied to the word embedding. --arch llama (loom's
`--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
--disable-bias-linear --untie-embeddings-and-output-weights`): RMSNorm (eps 1e-5), fused QKV
without biases with --groups key/value heads (SDPA's enable_gqa), rotary embeddings (rotate-half
pairs, base 10000) on q and k, SwiGLU MLP of --ffn, no biases, untied output layer. Vocabulary
padded to a multiple of 128 as loom pads it; no dropout. Training: bf16 autocast, fp32 master weights, fused AdamW
(lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on matrices), gradient clipping at 1.0,
random tokens. Eager, or with torch.compile (--compile).

Figures: tokens/s over the timed steps (after the warm-up, which includes compilation), model
TFLOP/s with FLOPs per token 6 N + 12 L C T (N = every parameter, the tied embedding once), MFU
against --peak-tflops, and torch.cuda.max_memory_allocated (the caching allocator's peak of
live tensors, comparable to loom's peak of its own allocations).

usage: torch_gpt.py --layers 12 --hidden 768 --heads 12 [--seq 1024 --batch 16 --vocab 50257
                    --steps 20 --warmup 5 --compile --peak-tflops 989]
                    [--arch llama --groups 8 --ffn 5632]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc1 = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def init_weights(model, L, std=0.02):
    """Matrices normal(0, std), the residual branches' output layers (proj, fc2) std/sqrt(2L);
    biases 0"""
    for n, p in model.named_parameters():
        if p.dim() == 2:
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * L) if n.endswith(("proj.weight", "fc2.weight")) else std)
        elif n.endswith("bias"):
            nn.init.zeros_(p)


def rotate(x, cos, sin):
    """Rotary embedding of x [B, heads, T, HS]: pairs (i, i + HS/2) rotated by the angles whose
    cosines and sines cos, sin [T, HS] hold (each twice), in x's type"""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, NKV, F_):
        super().__init__()
        self.NH, self.NKV, self.HS = NH, NKV, C // NH
        self.ln1 = nn.RMSNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * self.HS, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.ln2 = nn.RMSNorm(C, eps=1e-5)
        self.fc1 = nn.Linear(C, 2 * F_, bias=False)
        self.fc2 = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        HS = self.HS
        q, k, v = self.qkv(self.ln1(x)).split([self.NH * HS, self.NKV * HS, self.NKV * HS], dim=2)
        q = rotate(q.view(B, T, self.NH, HS).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, self.NKV, HS).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.NKV, HS).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.NKV != self.NH)
        x = x + self.proj(a.transpose(1, 2).contiguous().view(B, T, C))
        gate, up = self.fc1(self.ln2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, C, NH, NKV, F_, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, NH, NKV, F_) for _ in range(L))
        self.lnf = nn.RMSNorm(C, eps=1e-5)
        self.out = nn.Linear(C, V, bias=False)
        HS = C // NH
        freq = 10000.0 ** (-torch.arange(0, HS // 2, dtype=torch.float64) * 2.0 / HS)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
        self.register_buffer("cos", torch.cat([ang.cos()] * 2, dim=-1).float(), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin()] * 2, dim=-1).float(), persistent=False)
        init_weights(self, L)

    def forward(self, idx, targets):
        x = self.wte(idx)
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin)
        logits = self.out(self.lnf(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        init_weights(self, L)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--groups", type=int, default=0, help="key/value heads (llama; 0: --heads)")
    ap.add_argument("--ffn", type=int, default=0, help="SwiGLU width (llama; 0: 4 x hidden)")
    a = ap.parse_args()

    torch.manual_seed(1234)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 work stays fp32, as in loom
    torch.backends.cudnn.allow_tf32 = False
    Vp = (a.vocab + 127) // 128 * 128
    if a.arch == "llama":
        model = Llama(a.layers, a.hidden, a.heads, a.groups or a.heads, a.ffn or 4 * a.hidden, Vp,
                      a.seq).to(dev)
    else:
        model = GPT(a.layers, a.hidden, a.heads, Vp, a.seq).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    data = torch.randint(0, a.vocab, (a.warmup + a.steps, a.batch, a.seq + 1), device=dev, generator=g)

    def step(i):
        x, y = data[i, :, :-1], data[i, :, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    for i in range(a.warmup):
        loss = step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    t0 = time.time()
    for i in range(a.warmup, a.warmup + a.steps):
        loss = step(i)
    torch.cuda.synchronize()
    dt = time.time() - t0
    tokens = a.batch * a.seq * a.steps
    tps = tokens / dt
    fpt = 6.0 * nparams + 12.0 * a.layers * a.hidden * a.seq
    tflops = tps * fpt / 1e12
    print(json.dumps({
        "impl": "torch " + ("compile" if a.compile else "eager"), "arch": a.arch,
        "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq, "batch": a.batch,
        "params": nparams, "steps": a.steps, "warmup_s": round(warm_s, 2),
        "ms_per_iter": round(1000.0 * dt / a.steps, 3), "tokens_per_s": round(tps, 1),
        "tflops": round(tflops, 2), "mfu": round(tflops / a.peak_tflops, 4),
        "peak_mem_bytes": torch.cuda.max_memory_allocated(), "loss": round(loss.item(), 4),
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
    }), flush=True)


if __name__ == "__main__":
    main()
