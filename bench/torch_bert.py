#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_bert_vs_torch.sh: trains a BERT of Megatron-LM's form (the model
`loom train --model bert` builds) and prints one JSON line of figures per run.

Model: word, learned position and token-type (2) embeddings summed; --layers pre-LN encoder
layers (LayerNorm, fused QKV with biases, bidirectional attention that ignores the padded keys,
output projection, residual; LayerNorm, GELU (tanh form, as Megatron-LM's fused bias-GELU and
loom's default) MLP of --ffn, residual); final LayerNorm. Heads: the language-model head (dense
H x H, GELU (erf form), LayerNorm, output layer tied to the word embedding plus a bias over the
padded vocabulary) on every position, and, unless --no-binary-head, the pooler (tanh of a dense
layer on the first ([CLS]) position) and the binary (sentence-order) head. Loss: mean
cross-entropy over the positions that carry a label (about 15% of the words) plus the
sentence-order cross-entropy. Vocabulary padded to a multiple of 128 as loom pads it; no dropout.

Attention: F.scaled_dot_product_attention with the padding mask (boolean, or additive with
--mask additive) where PyTorch has it (>= 2.0), else an explicit softmax(q k^T / sqrt(d) + mask) v.
Padded query rows still attend to the real keys (their outputs carry no loss).

Training: bf16 autocast (--fp32 turns it off), fp32 master weights, AdamW (lr 1e-4, betas
0.9/0.999, eps 1e-8, weight decay 0.01 on matrices; fused on CUDA where PyTorch has it, else
foreach), gradient clipping at 1.0. Data: random batches made before timing, as loom's mock BERT
batches: lengths uniform in [T/2, T], [CLS] (id 1) first, two segments each closed by [SEP]
(id 2), the second with token type 1, [PAD] (id 0) after the length, random words (ids >= 4)
elsewhere, of which about 15% are labelled with their id and replaced by [MASK] (id 3), and a
random sentence-order label. Eager, or with torch.compile (--compile; PyTorch >= 2.0).

Figures: tokens/s over the timed steps (B x T a step, padding included, as loom counts them;
after the warm-up, which includes compilation), model TFLOP/s with FLOPs per token
6 N + 12 L H T (N = every parameter, the tied embedding once: loom's count), MFU against
--peak-tflops, and the peak memory: torch.cuda.max_memory_allocated on CUDA, the process's peak
resident set on the CPU ("peak_mem_kind" says which).

usage: torch_bert.py [--device cuda --layers 24 --hidden 1024 --heads 16 --ffn 4096 --seq 512
                      --batch 8 --vocab 30522 --steps 20 --warmup 5 --compile --peak-tflops 989
                      --no-binary-head --mask bool|additive --fp32 --threads N]
"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
PAD, CLS, SEP, MASK = 0, 1, 2, 3


class Layer(nn.Module):
    def __init__(self, H, NH, FFN, eps, mask_kind):
        super().__init__()
        self.NH = NH
        self.mask_kind = mask_kind
        self.ln1 = nn.LayerNorm(H, eps=eps)
        self.qkv = nn.Linear(H, 3 * H)
        self.proj = nn.Linear(H, H)
        self.ln2 = nn.LayerNorm(H, eps=eps)
        self.fc1 = nn.Linear(H, FFN)
        self.fc2 = nn.Linear(FFN, H)

    def attend(self, q, k, v, keep, bias):
        """q, k, v [B, NH, T, HS]; keep [B, 1, 1, T] True on real keys; bias the same mask as
        0 / -inf-like additive values in q's type"""
        if HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep if self.mask_kind == "bool" else bias.to(q.dtype))
        s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        p = torch.softmax(s.float() + bias, dim=-1).to(v.dtype)
        return torch.matmul(p, v)

    def forward(self, x, keep, bias):
        B, T, H = x.shape
        HS = H // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(H, dim=2)
        q = q.view(B, T, self.NH, HS).transpose(1, 2)
        k = k.view(B, T, self.NH, HS).transpose(1, 2)
        v = v.view(B, T, self.NH, HS).transpose(1, 2)
        a = self.attend(q, k, v, keep, bias)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Bert(nn.Module):
    def __init__(self, L, H, NH, FFN, V, T, binary_head=True, eps=1e-5, mask_kind="bool"):
        super().__init__()
        self.wte = nn.Embedding(V, H)
        self.wpe = nn.Embedding(T, H)
        self.tte = nn.Embedding(2, H)
        self.layers = nn.ModuleList(Layer(H, NH, FFN, eps, mask_kind) for _ in range(L))
        self.lnf = nn.LayerNorm(H, eps=eps)
        self.lm_dense = nn.Linear(H, H)
        self.lm_ln = nn.LayerNorm(H, eps=eps)
        self.out_bias = nn.Parameter(torch.zeros(V))
        self.binary_head = binary_head
        if binary_head:
            self.pooler = nn.Linear(H, H)
            self.binary = nn.Linear(H, 2)
        self.init_weights(L)

    def init_weights(self, L, std=0.02):
        """Matrices and embeddings normal(0, std), the residual branches' output layers (proj, fc2)
        std / sqrt(2 L) (Megatron-LM's scaled init); biases 0, norms 1 and 0"""
        for n, p in self.named_parameters():
            if p.dim() == 2:
                scaled = n.endswith(("proj.weight", "fc2.weight"))
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * L) if scaled else std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, types, padding, labels, sop):
        """tokens, types [B, T] ids; padding [B, T] bool (True on real tokens); labels [B, T]
        (-1 where no loss); sop [B] -> stacked (total, lm, sop) losses"""
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)[None] + self.tte(types)
        keep = padding[:, None, None, :]
        bias = torch.zeros(B, 1, 1, T, device=tokens.device, dtype=torch.float32)
        bias = bias.masked_fill(~keep, -1e4)
        for layer in self.layers:
            x = layer(x, keep, bias)
        x = self.lnf(x)
        # LayerNorm in fp32, as CUDA's autocast runs it (the CPU's autocast of PyTorch 1.13 would
        # hand it the bf16 GELU output with fp32 weights)
        h = self.lm_ln(F.gelu(self.lm_dense(x)).float())
        logits = F.linear(h, self.wte.weight, self.out_bias)
        lm = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1),
                             ignore_index=-1)
        if not self.binary_head:
            return torch.stack((lm, lm, torch.zeros_like(lm)))
        pooled = torch.tanh(self.pooler(x[:, 0]))
        s = F.cross_entropy(self.binary(pooled).float(), sop)
        return torch.stack((lm + s, lm, s))


def make_batches(n, B, T, vocab, binary_head, seed=1):
    """n random BERT batches on the CPU: tokens, types, padding, labels [n, B, T], sop [n, B]"""
    g = torch.Generator()
    g.manual_seed(seed)
    pos = torch.arange(T)
    length = torch.randint(T // 2, T + 1, (n, B, 1), generator=g)
    if binary_head:  # the first segment's [SEP] somewhere in the middle
        split = (length.float() * (0.25 + 0.5 * torch.rand(n, B, 1, generator=g))).long().clamp(min=2)
    else:
        split = length - 1
    tokens = torch.randint(4, vocab, (n, B, T), generator=g)
    valid = pos < length
    special = (pos == 0) | (pos == split) | (pos == length - 1)
    words = valid & ~special
    labelled = words & (torch.rand(n, B, T, generator=g) < 0.15)
    labels = torch.where(labelled, tokens, torch.full_like(tokens, -1))
    tokens = torch.where(labelled, torch.full_like(tokens, MASK), tokens)
    tokens = torch.where(pos == 0, torch.full_like(tokens, CLS), tokens)
    tokens = torch.where(valid & (pos != 0) & special, torch.full_like(tokens, SEP), tokens)
    tokens = torch.where(valid, tokens, torch.full_like(tokens, PAD))
    types = ((pos > split) & valid).long() if binary_head else torch.zeros_like(tokens)
    sop = torch.randint(0, 2, (n, B), generator=g)
    return tokens, types, valid, labels, sop


def make_optimizer(model, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError, ValueError):
            pass
    try:
        return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"
    except TypeError:
        return torch.optim.AdamW(groups, **kw), "default"


def peak_memory(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return rss * 1024, "process peak RSS"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=0, help="MLP width (0: 4 x hidden)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--divisible-by", type=int, default=128, help="vocabulary padding multiple")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-binary-head", action="store_true")
    ap.add_argument("--mask", choices=("bool", "additive"), default="bool",
                    help="the padding mask given to scaled_dot_product_attention")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    if a.hidden % a.heads:
        ap.error("--hidden must be a multiple of --heads")

    dev = torch.device(a.device)
    if a.compile and not hasattr(torch, "compile"):
        print(f"torch {torch.__version__} has no torch.compile", file=sys.stderr)
        sys.exit(2)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 work stays fp32, as in loom
        torch.backends.cudnn.allow_tf32 = False
    Vp = (a.vocab + a.divisible_by - 1) // a.divisible_by * a.divisible_by
    binary = not a.no_binary_head
    model = Bert(a.layers, a.hidden, a.heads, a.ffn or 4 * a.hidden, Vp, a.seq, binary,
                 mask_kind=a.mask).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    opt, opt_kind = make_optimizer(model, dev)
    step_fn = torch.compile(model) if a.compile else model

    n = a.warmup + a.steps
    data = [t.to(dev) for t in make_batches(n, a.batch, a.seq, a.vocab, binary)]
    use_autocast = not a.fp32

    def step(i):
        tokens, types, padding, labels, sop = (t[i] for t in data)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_autocast):
            losses = step_fn(tokens, types, padding, labels, sop)
        losses[0].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return losses

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.time()
    for i in range(a.warmup):
        step(i)
    sync()
    warm_s = time.time() - t0
    t0 = time.time()
    for i in range(a.warmup, n):
        losses = step(i)
    sync()
    dt = time.time() - t0
    total, lm, sop = (float(v) for v in losses.detach().float().cpu())
    tokens = a.batch * a.seq * a.steps
    tps = tokens / dt
    fpt = 6.0 * nparams + 12.0 * a.layers * a.hidden * a.seq
    tflops = tps * fpt / 1e12
    mem, mem_kind = peak_memory(dev)
    out = {
        "impl": "torch " + ("compile" if a.compile else "eager"), "model": "bert",
        "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "ffn": a.ffn or 4 * a.hidden,
        "seq": a.seq, "batch": a.batch, "vocab": a.vocab, "padded_vocab": Vp,
        "binary_head": binary, "params": nparams, "steps": a.steps, "warmup_s": round(warm_s, 2),
        "ms_per_iter": round(1000.0 * dt / a.steps, 3), "tokens_per_s": round(tps, 1),
        "tflops": round(tflops, 4), "mfu": round(tflops / a.peak_tflops, 6),
        "peak_mem_bytes": mem, "peak_mem_kind": mem_kind, "loss": round(total, 4),
        "lm_loss": round(lm, 4), "sop_loss": round(sop, 4),
        "attention": ("sdpa " + a.mask + " mask") if HAVE_SDPA else "explicit masked softmax",
        "autocast": "bf16" if use_autocast else "off", "adamw": opt_kind,
        "torch": torch.__version__, "device": str(dev),
    }
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(dev)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
