#!/usr/bin/python3
"""Independent PyTorch reference for loom's GPT models (GPT-2 and Llama-style), in float64.

  gpt_ref.py make  --arch gpt2|llama --out HF_DIR [--seed S] [--vocab V] [--head-dim D]
      writes a small random model in Hugging Face form (config.json + model.safetensors);
      --head-dim (llama): heads of D columns, not hidden_size / num_attention_heads, written to
      config.json as Hugging Face's head_dim (give it to check as well)
  gpt_ref.py check --arch gpt2|llama --init HF_DIR --grads GRADS_HF_DIR --final FINAL_HF_DIR
                   --metrics METRICS_JSONL --iters N --micro-batch B --global-batch G
                   --lr LR --clip C --wd WD [--beta1 --beta2 --eps]
      recomputes the losses, the first iteration's gradients and the weights after N AdamW steps
      on loom's --mock-data batches and compares them with loom's outputs (relative L2 error per
      tensor < 1e-4). Exit status 0 only if everything matches.
      --doc-eod ID --reset-position-ids / --reset-attention-mask: documents packed into a sample, as
      Megatron-LM's get_ltor_masks_and_position_ids makes them: after each input token ID the
      position ids drop back to 0, and the attention mask hides every earlier key from the
      queries after it.
      --qk-norm (llama only, make and check): Qwen3's form, each head's query and key vectors
      RMS-normalised over the head size (self_attn.q_norm.weight, k_norm.weight [head_dim], shared
      by the heads) after their projections and before the rotary embedding.
      --qkv-bias (llama only, make and check): Qwen2's form, biases on the query, key and value
      projections only (self_attn.q_proj.bias, k_proj.bias, v_proj.bias; config model_type qwen2).
      --rope-scaling F (llama only, make and check): Llama 3.1's rescaled rotary frequencies
      (config rope_scaling of rope_type llama3, factor F, low and high frequency factors 1 and 4,
      an original context of 32 so that the head's 8 frequencies fall in all three of its bands).
      --rope-linear F (llama only, make and check): rotary positions divided by F (config
      rope_scaling of rope_type linear: Megatron-LM's --rotary-seq-len-interpolation-factor).

Nothing here is derived from loom's code paths except the documented mock-data recipe and the
Philox4x32-10 generator, re-implemented from their definitions.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
M32, M64 = (1 << 32) - 1, (1 << 64) - 1

# ---------------------------------------------------------------- random numbers (Philox4x32-10)


def philox(c, k0, k1):
    c = list(c)
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        n0 = (p1 >> 32) ^ c[1] ^ k0
        n2 = (p0 >> 32) ^ c[3] ^ k1
        c = [n0 & M32, p1 & M32, n2 & M32, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c


def rng_u32x4(seed, purpose, index):
    return philox([index & M32, index >> 32, purpose & M32, purpose >> 32], seed & M32, seed >> 32)


def hash_str(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def hash_mix(h, v):
    h ^= (v + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & M64
    h ^= h >> 31
    return h


def mock_sample(seed, split, index, vocab, T):
    """loom --mock-data: arithmetic sequence, start and stride from (seed, split, index)."""
    w = rng_u32x4(seed, hash_mix(hash_str("mock-data"), split), index)
    start, stride = w[0] % vocab, 1 + w[1] % 7
    return [(start + t * stride) % vocab for t in range(T + 1)]


# ---------------------------------------------------------------- safetensors (minimal, float32)


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
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
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, en = e["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4").reshape(e["shape"])
        out[name] = torch.tensor(a.astype(np.float64))
    return out


# ---------------------------------------------------------------- models

CONFIGS = {
    "gpt2": dict(model_type="gpt2", n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=100,
                 layer_norm_epsilon=1e-5, activation_function="gelu_new", tie_word_embeddings=True),
    "llama": dict(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=32,
                  vocab_size=100, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, hidden_act="silu"),
}


def make_weights(arch, cfg, gen):
    def n(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    def around1(c):  # norm weights near 1, so a wrong mapping shows
        return 1.0 + 0.1 * torch.randn(c, generator=gen)

    w = {}
    if arch == "gpt2":
        C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
        w["wte.weight"], w["wpe.weight"] = n(V, C), n(T, C)
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            w[p + "ln_1.weight"], w[p + "ln_1.bias"] = around1(C), n(C, std=0.1)
            w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = n(C, 3 * C), n(3 * C, std=0.1)
            w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = n(C, C), n(C, std=0.1)
            w[p + "ln_2.weight"], w[p + "ln_2.bias"] = around1(C), n(C, std=0.1)
            # pre-activations of order 1 (std 0.25 x sqrt(64) = 2): where the GELU's two forms
            # differ (by up to 5e-4), so a run of the other form fails the checks
            w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = n(C, 4 * C, std=0.25), n(4 * C, std=0.5)
            w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = n(4 * C, C), n(C, std=0.1)
        w["ln_f.weight"], w["ln_f.bias"] = around1(C), n(C, std=0.1)
    else:
        C, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
        NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        HS = cfg.get("head_dim") or C // NH
        w["model.embed_tokens.weight"] = n(V, C)
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = around1(C)
            w[p + "self_attn.q_proj.weight"] = n(NH * HS, C)
            w[p + "self_attn.k_proj.weight"] = n(NKV * HS, C)
            w[p + "self_attn.v_proj.weight"] = n(NKV * HS, C)
            w[p + "self_attn.o_proj.weight"] = n(C, NH * HS)
            if cfg.get("model_type") == "qwen2":  # biases of order 1: their gradients matter
                w[p + "self_attn.q_proj.bias"] = n(NH * HS, std=0.5)
                w[p + "self_attn.k_proj.bias"] = n(NKV * HS, std=0.5)
                w[p + "self_attn.v_proj.bias"] = n(NKV * HS, std=0.5)
            if cfg.get("model_type") == "qwen3":
                w[p + "self_attn.q_norm.weight"] = around1(HS)
                w[p + "self_attn.k_norm.weight"] = around1(HS)
            w[p + "post_attention_layernorm.weight"] = around1(C)
            w[p + "mlp.gate_proj.weight"] = n(F, C)
            w[p + "mlp.up_proj.weight"] = n(F, C)
            w[p + "mlp.down_proj.weight"] = n(C, F)
        w["model.norm.weight"] = around1(C)
        w["lm_head.weight"] = n(V, C)
    return w


def causal_attention(q, k, v, keep=None):
    # q [B,NH,T,HS], k/v [B,NH,T,HS]; keep [B,T,T] (True: the query may see the key) or None
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    if keep is not None:
        mask = mask[None, None] | ~keep[:, None]
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def ltor_masks_and_positions(tokens, eod, reset_position_ids, reset_attention_mask):
    """Megatron-LM's get_ltor_masks_and_position_ids, per sample of tokens [B, T]: the position
    ids [B, T] and the attention mask [B, T, T] (True: seen; causal is applied on top). Each
    end-of-document index i hides keys [0, i] from the queries after i, and the positions after i
    restart at 0."""
    B, T = tokens.shape
    keep = torch.ones(B, T, T, dtype=torch.bool)
    pos = torch.arange(T).repeat(B, 1)
    for b in range(B):
        prev = 0
        for i in (tokens[b] == eod).nonzero().flatten().tolist():
            if reset_attention_mask:
                keep[b, i + 1:, :i + 1] = False
            if reset_position_ids:
                pos[b, i + 1:] -= i + 1 - prev
                prev = i + 1
    return pos, keep


def gelu(cfg, x):
    if cfg["activation_function"] == "gelu":  # Hugging Face's name of the exact form
        return torch.nn.functional.gelu(x)
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(arch, cfg, w, tokens, targets, docs=None):
    """docs: None, or (eod, reset_position_ids, reset_attention_mask)"""
    B, T = tokens.shape
    pos, keep = torch.arange(T).repeat(B, 1), None
    if docs is not None:
        pos, keep = ltor_masks_and_positions(tokens, *docs)
        if not docs[2]:
            keep = None
    if arch == "gpt2":
        C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
        HS = C // NH
        x = w["wte.weight"][tokens] + w["wpe.weight"][pos]
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = [t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, -1)]
            a = causal_attention(q, k, v, keep).transpose(1, 2).reshape(B, T, C)
            x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = gelu(cfg, ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        logits = ln(x, "ln_f") @ w["wte.weight"].T
    else:
        C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        # Hugging Face's head_dim where given (q/k/v of NH, NKV heads of HS; o_proj reads NH HS)
        HS, eps, theta = cfg.get("head_dim") or C // NH, cfg["rms_norm_eps"], cfg["rope_theta"]
        rms = lambda x, wt: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * wt
        inv = theta ** (-torch.arange(0, HS, 2) / HS)
        rs = cfg.get("rope_scaling")
        if rs and rs["rope_type"] == "linear":  # positions p / factor
            inv = inv / rs["factor"]
        elif rs:  # Llama 3.1's rule, from its published definition (rope_type "llama3")
            L, lo, hi, fac = (rs["original_max_position_embeddings"], rs["low_freq_factor"],
                              rs["high_freq_factor"], rs["factor"])
            wavelen = 2 * math.pi / inv
            smooth = (L / wavelen - lo) / (hi - lo)
            inv = torch.where(wavelen < L / hi, inv,
                              torch.where(wavelen > L / lo, inv / fac,
                                          (1 - smooth) * inv / fac + smooth * inv))
        ang = pos[:, None, :, None] * inv  # [B, 1 (heads), T, HS/2]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

        def rope(t):
            t1, t2 = t[..., :HS // 2], t[..., HS // 2:]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        x = w["model.embed_tokens.weight"][tokens]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms(x, w[p + "input_layernorm.weight"])
            def proj(name, heads):  # with Qwen2's bias where there is one
                y = h @ w[p + f"self_attn.{name}.weight"].T
                if p + f"self_attn.{name}.bias" in w:
                    y = y + w[p + f"self_attn.{name}.bias"]
                return y.view(B, T, heads, HS).transpose(1, 2)

            q, k, v = proj("q_proj", NH), proj("k_proj", NKV), proj("v_proj", NKV)
            if cfg.get("model_type") == "qwen3":  # per-head RMSNorm over HS, before rotary
                q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
            q, k = rope(q), rope(k)
            k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
            a = causal_attention(q, k, v, keep).transpose(1, 2).reshape(B, T, NH * HS)
            x = x + a @ w[p + "self_attn.o_proj.weight"].T
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + g @ w[p + "mlp.down_proj.weight"].T
        out = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        logits = rms(x, w["model.norm.weight"]) @ out.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def rel_err(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["make", "check"])
    ap.add_argument("--arch", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--out"), ap.add_argument("--init"), ap.add_argument("--grads"), ap.add_argument("--final")
    ap.add_argument("--metrics")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-seed", type=int, default=1234)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--eod", type=int, default=-1,
                    help="Megatron-LM's --eod-mask-loss: no loss where the input token is this id")
    ap.add_argument("--micro-mean", action="store_true",
                    help="the loss minimised is the mean over micro-batches of each one's mean "
                         "(with --eod: Megatron-LM's default; without --calculate-per-token-loss); "
                         "the loss logged is the mean per token either way")
    ap.add_argument("--decoupled-lr", type=float, default=None,
                    help="Megatron-LM's --decoupled-lr: the word embedding's and output layer's "
                         "learning rate")
    ap.add_argument("--gelu", choices=["tanh", "erf"], default="tanh",
                    help="gpt2: the GELU's form (config activation_function gelu_new or gelu)")
    ap.add_argument("--vocab", type=int, default=0, help="the vocabulary's size (0: 100)")
    ap.add_argument("--head-dim", type=int, default=0,
                    help="llama: the head size (Hugging Face's head_dim; 0: hidden_size / "
                         "num_attention_heads)")
    ap.add_argument("--doc-eod", type=int, default=-1,
                    help="the end-of-document id of --reset-position-ids / --reset-attention-mask")
    ap.add_argument("--reset-position-ids", action="store_true",
                    help="Megatron-LM's: positions restart after each --doc-eod input token")
    ap.add_argument("--reset-attention-mask", action="store_true",
                    help="Megatron-LM's: no attention across --doc-eod input tokens")
    ap.add_argument("--qk-norm", action="store_true",
                    help="llama: Qwen3's query and key RMSNorm per head (config model_type qwen3)")
    ap.add_argument("--qkv-bias", action="store_true",
                    help="llama: Qwen2's biases on q, k and v (config model_type qwen2)")
    ap.add_argument("--rope-scaling", type=float, default=0.0,
                    help="llama: Llama 3.1's rotary scaling by this factor (config rope_scaling)")
    ap.add_argument("--rope-linear", type=float, default=0.0,
                    help="llama: rotary positions divided by this (config rope_scaling linear)")
    a = ap.parse_args()
    cfg = dict(CONFIGS[a.arch])
    if a.vocab:
        cfg["vocab_size"] = a.vocab
    if a.head_dim:
        if a.arch != "llama":
            ap.error("--head-dim: Hugging Face's GPT-2 has no head_dim (llama only)")
        cfg["head_dim"] = a.head_dim
    docs = None
    if a.reset_position_ids or a.reset_attention_mask:
        assert a.doc_eod >= 0, "--reset-position-ids and --reset-attention-mask need --doc-eod"
        docs = (a.doc_eod, a.reset_position_ids, a.reset_attention_mask)
    if a.arch == "gpt2" and a.gelu == "erf":
        cfg["activation_function"] = "gelu"
    if a.qk_norm:
        assert a.arch == "llama", "--qk-norm is for --arch llama (Qwen3's form)"
        cfg.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                   head_dim=cfg["hidden_size"] // cfg["num_attention_heads"])
    if a.qkv_bias:
        assert a.arch == "llama" and not a.qk_norm, "--qkv-bias is for --arch llama (Qwen2's form)"
        cfg.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=False)
    if a.rope_scaling:
        assert a.arch == "llama", "--rope-scaling is for --arch llama"
        cfg["rope_scaling"] = dict(rope_type="llama3", factor=a.rope_scaling, low_freq_factor=1.0,
                                   high_freq_factor=4.0, original_max_position_embeddings=32)
    if a.rope_linear:
        assert a.arch == "llama" and not a.rope_scaling, "--rope-linear is for --arch llama"
        cfg["rope_scaling"] = dict(rope_type="linear", factor=a.rope_linear)
    if a.cmd == "make":
        import os
        os.makedirs(a.out, exist_ok=True)
        gen = torch.Generator().manual_seed(a.seed)
        st_write(f"{a.out}/model.safetensors", make_weights(a.arch, cfg, gen))
        json.dump(cfg, open(f"{a.out}/config.json", "w"), indent=2)
        return 0

    V = cfg["vocab_size"]
    w = {k: v.clone().requires_grad_(True) for k, v in st_read(f"{a.init}/model.safetensors").items()}
    # Megatron-LM's embedding-or-output parameters: the word embedding and the output layer
    outer = {"wte.weight", "model.embed_tokens.weight", "lm_head.weight"} if a.decoupled_lr else set()
    groups = []
    for lr, names in ((a.lr, [k for k in w if k not in outer]), (a.decoupled_lr, [k for k in w if k in outer])):
        for wd, pick in ((a.wd, lambda p: p.dim() >= 2), (0.0, lambda p: p.dim() < 2)):
            ps = [w[k] for k in names if pick(w[k])]
            if ps:
                groups.append({"params": ps, "weight_decay": wd, "lr": lr})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    metrics = [json.loads(l) for l in open(a.metrics)]
    ok = True

    def report(what, err, tol):
        nonlocal ok
        good = err < tol
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {what}: relative error {err:.3e} (tolerance {tol:g})")

    for it in range(1, a.iters + 1):
        opt.zero_grad()
        base = (it - 1) * a.global_batch
        samples = torch.tensor([mock_sample(a.data_seed, 0, base + i, V, a.seq) for i in range(a.global_batch)])
        tokens, targets = samples[:, :-1], samples[:, 1:].clone()
        if a.eod >= 0:
            targets[tokens == a.eod] = -100  # cross_entropy's ignore_index: the mean is over the rest
        if it == 1 and docs is not None:
            n = [int((tokens[i, :-1] == a.doc_eod).sum()) + 1 for i in range(a.global_batch)]
            print(f"documents per sample (iteration 1): {n}")
        # the loss logged: the mean over the batch's tokens that carry a loss, either way
        with torch.no_grad():
            logged = forward(a.arch, cfg, w, tokens, targets, docs).item()
        if a.micro_mean:  # Megatron-LM's default with a loss mask: the mean of micro-batch means
            mb = [forward(a.arch, cfg, w, tokens[i:i + a.micro_batch], targets[i:i + a.micro_batch],
                          docs) for i in range(0, a.global_batch, a.micro_batch)]
            loss = sum(mb) / len(mb)
        else:
            loss = forward(a.arch, cfg, w, tokens, targets, docs)
        loss.backward()
        for p in w.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        # Qwen2's key bias only adds q.b_k to every score of a query's row, which the softmax
        # ignores: its gradient is exactly zero (here float64 rounding noise of about 1e-18)
        for name in w:
            if name.endswith("self_attn.k_proj.bias"):
                w[name].grad.zero_()
        m = next(x for x in metrics if x["iteration"] == it)
        report(f"iteration {it} loss {logged:.8f} vs loom {m['loss']:.8f}", abs(logged - m["loss"]) / abs(logged), a.tol)
        gnorm = math.sqrt(sum((p.grad ** 2).sum().item() for p in w.values()))
        report(f"iteration {it} grad norm {gnorm:.6f} vs loom {m['grad_norm']:.6f}", abs(gnorm - m["grad_norm"]) / gnorm, a.tol)
        if it == 1:
            g = st_read(f"{a.grads}/model.safetensors")
            assert set(g) == set(w), sorted(set(g) ^ set(w))
            for name in sorted(w):
                report(f"gradient {name}", rel_err(g[name], w[name].grad), a.tol)
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(w.values()), a.clip)
        opt.step()
    final = st_read(f"{a.final}/model.safetensors")
    for name in sorted(w):
        report(f"after {a.iters} steps {name}", rel_err(final[name], w[name].detach()), a.tol)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
