#!/usr/bin/python3
"""Independent PyTorch reference for loom's T5 (Megatron-LM's pre-LN T5 with learned absolute
positions or T5's relative position bias), in float64.

  t5_ref.py buckets --loom FILE
      FILE: lines "NUM_BUCKETS MAX_DISTANCE BIDIRECTIONAL REL BUCKET" (loom's buckets, from
      t5_buckets_check); each compared with T5's published rule (Hugging Face's
      T5Attention._relative_position_bucket arithmetic, written out below: torch int64 and
      float32 as it computes); every line must match, and every distance in [-300, 300] of both
      directions must be covered for each (NUM_BUCKETS, MAX_DISTANCE).

  t5_ref.py make --ckpt DIR --hidden H --heads NH --ffn F --enc-layers LE --dec-layers LD
                 --vocab V --padded-vocab VP --max-pos P [--relative --buckets NB] [--seed S]
      overwrites DIR/model.safetensors (a loom T5 checkpoint) with random weights of the same
      names: matrices N(0, 0.02) but the attention projections (qkv, cross q and kv) N(0, 1/sqrt H)
      (attention far from uniform, so that a wrong mask shows), the word embedding N(0, 0.1) and
      the relative bias tables N(0, 0.5); biases N(0, 0.1); LayerNorm weights 1 + N(0, 0.1).

  t5_ref.py check --init DIR --samples JSONL --grads DIR --final DIR --metrics JSONL --iters N
                  --micro-batch B --global-batch G --enc-seq TE --lr LR --clip C --wd WD
                  [--relative --buckets NB --max-distance MD] [--gelu tanh|erf] [--eps E]
                  [--tol T] [--final-tol T] [--no-cross-mask]
      trains the model of --init (a loom checkpoint's model.safetensors) N iterations on the
      samples (`loom samples` JSON lines: row = the encoder's TE positions then the decoder's;
      labels -1: no loss; padding_mask 1: a real position) and compares with loom's: each
      iteration's "lm loss" and "grad_norm" (--metrics), every gradient of the first iteration
      (--grads: loom's --save-grads), every weight after the N steps (--final). Losses, grad
      norm and gradients: relative error < --tol (default 1e-5; a gradient's: L2 norm of the
      difference over the reference's); weights: relative L2 error < --final-tol (1e-4).
      The loss: per micro-batch the mean cross-entropy over its positions with a label; the step
      minimises the mean over its micro-batches. AdamW as gpt_ref.py's: decoupled decay on the
      tensors of 2 dimensions, global-norm clipping at --clip (norm + 1e-6).
      --no-cross-mask: a deliberately wrong reference whose cross-attention also sees the
      encoder's padded positions, to show the check fails without the mask.

The model: x_enc = E[tokens] (+ P[t]); encoder layers x += proj(attn(LN1 x)) (keys: the sample's
real encoder positions; + the encoder's relative bias), x += fc2(gelu(fc1(LN2 x))); enc_out =
LN_f(x). Decoder: x_dec = E[tokens] (+ P[t]); layers x += proj(causal attn(LN1 x)) (+ the
decoder's causal relative bias), x += cproj(attn(q = LNc x, k, v = enc_out; real encoder keys
only)), MLP; logits = LN_f(x) E^T + b. Attention: softmax(q k^T / sqrt(HS) + bias) v; the qkv
projection's rows per head [q | k | v], the cross kv's per head [k | v]. Relative bias of query
i, key j: table[bucket(j - i), h]. The key biases only add q.b_k to every score of a query's row,
which the softmax ignores: their gradient is exactly zero, and is set so (as loom does).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as Fn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import rel_err, st_read  # noqa: E402

torch.set_default_dtype(torch.float64)


# ---------------------------------------------------------------- T5's bucket rule

def bucket_rule(rel, bidirectional, num_buckets, max_distance):
    """T5's relative position bucket of key - query distances `rel` (int64 tensor), with the
    published rule's arithmetic (int64, and float32 for the logarithmic part)."""
    out = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0).to(torch.long) * num_buckets
        n = rel.abs()
    else:
        n = -torch.minimum(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.to(torch.float32) / max_exact)
                         / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return out + torch.where(n < max_exact, n, large)


def cmd_buckets(a):
    rows = [tuple(int(x) for x in line.split()) for line in open(a.loom) if line.strip()]
    bad, seen = 0, {}
    for nb, md, bi, rel, b in rows:
        want = bucket_rule(torch.tensor([rel]), bool(bi), nb, md).item()
        seen.setdefault((nb, md, bi), set()).add(rel)
        if want != b:
            bad += 1
            if bad <= 10:
                print(f"FAIL buckets {nb} max {md} bidirectional {bi}: distance {rel}: loom {b}, "
                      f"rule {want}")
    for key, rels in seen.items():
        if not set(range(-300, 301)) <= rels:
            bad += 1
            print(f"FAIL buckets {key}: distances in [-300, 300] missing")
    for bi in (0, 1):
        if not any(k[2] == bi for k in seen):
            bad += 1
            print(f"FAIL buckets: no bidirectional={bi} lines")
    print(f"{'ok  ' if not bad else 'FAIL'} {len(rows)} buckets against T5's rule "
          f"({len(seen)} settings), {bad} differ")
    return 0 if bad == 0 else 1


# ---------------------------------------------------------------- checkpoints

def st_write_loom(path, tensors):
    """safetensors with loom's metadata, written to a temporary name and renamed"""
    header, blobs, off = {"__metadata__": {"format": "loom"}}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def ckpt_file(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):  # --save-grads: the file itself
        return os.path.join(d, "model.safetensors")
    it = open(os.path.join(d, "latest_checkpointed_iteration.txt")).read().strip()
    return os.path.join(d, f"iter_{int(it):07d}", "model.safetensors")


def cmd_make(a):
    path = ckpt_file(a.ckpt)
    names = st_read(path)
    g = torch.Generator().manual_seed(a.seed)
    w = {}
    for name, t in names.items():
        shape = t.shape
        r = torch.randn(shape, generator=g)
        if name.endswith("layernorm.weight"):
            w[name] = 1 + 0.1 * r
        elif name.endswith("relative_attention_bias.weight"):
            w[name] = 0.5 * r
        elif name.endswith(".bias"):
            w[name] = 0.1 * r
        elif "linear_qkv" in name or "linear_q." in name or "linear_kv" in name:
            w[name] = r / math.sqrt(a.hidden)
        elif name == "embedding.word_embeddings.weight":
            w[name] = 0.1 * r
        else:
            w[name] = 0.02 * r
    st_write_loom(path, w)
    print(f"wrote {len(w)} tensors into {path}")
    return 0


# ---------------------------------------------------------------- the model

class Cfg:
    pass


def layer_norm(x, w, p, eps=1e-5):
    return Fn.layer_norm(x, (x.shape[-1],), w[p + ".weight"], w[p + ".bias"], eps)


def linear(x, w, p):
    y = x @ w[p + ".weight"].T
    b = w.get(p + ".bias")
    return y if b is None else y + b


def attention(q, k, v, visible, bias):
    """q [B, Tq, NH, HS], k, v [B, Tk, NH, HS]; visible [B, Tq, Tk] bool; bias [NH, Tq, Tk]"""
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias[None]
    s = s.masked_fill(~visible[:, None], float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v).flatten(2)


def rel_bias(table, T, bidirectional, cfg):
    pos = torch.arange(T)
    b = bucket_rule(pos[None, :] - pos[:, None], bidirectional, cfg.buckets, cfg.max_distance)
    return table[b].permute(2, 0, 1)  # [NH, T, T]


def gelu(cfg, x):
    return Fn.gelu(x, approximate="tanh" if cfg.gelu == "tanh" else "none")


def mlp(cfg, w, p, x):
    return linear(gelu(cfg, linear(layer_norm(x, w, p + "pre_mlp_layernorm"), w, p + "mlp.linear_fc1")),
                  w, p + "mlp.linear_fc2")


def micro_loss(cfg, w, mb):
    tok, lab, pad = mb
    B, Te, NH = tok.shape[0], cfg.enc_seq, cfg.heads
    etok, dtok, dlab = tok[:, :Te], tok[:, Te:], lab[:, Te:]
    Td = dtok.shape[1]
    ekeys = pad[:, :Te].bool()  # the encoder's real positions
    E = w["embedding.word_embeddings.weight"]

    def embed(t):
        x = E[t]
        if not cfg.relative:
            x = x + w["embedding.position_embeddings.weight"][: t.shape[1]][None]
        return x

    def split(y, parts):
        return y.view(y.shape[0], y.shape[1], NH, parts, -1).unbind(3)

    ebias = rel_bias(w["encoder_relative_pos_emb.relative_attention_bias.weight"], Te, True, cfg) \
        if cfg.relative else None
    dbias = rel_bias(w["decoder_relative_pos_emb.relative_attention_bias.weight"], Td, False, cfg) \
        if cfg.relative else None
    x = embed(etok)
    vis = ekeys[:, None, :].expand(B, Te, Te)
    for i in range(cfg.enc_layers):
        p = f"encoder.layers.{i}."
        q, k, v = split(linear(layer_norm(x, w, p + "input_layernorm"), w, p + "self_attention.linear_qkv"), 3)
        x = x + linear(attention(q, k, v, vis, ebias), w, p + "self_attention.linear_proj")
        x = x + mlp(cfg, w, p, x)
    enc = layer_norm(x, w, "encoder.final_layernorm")
    y = embed(dtok)
    causal = torch.tril(torch.ones(Td, Td, dtype=torch.bool))[None].expand(B, Td, Td)
    cvis = (torch.ones_like(ekeys) if cfg.no_cross_mask else ekeys)[:, None, :].expand(B, Td, Te)
    for i in range(cfg.dec_layers):
        p = f"decoder.layers.{i}."
        q, k, v = split(linear(layer_norm(y, w, p + "input_layernorm"), w, p + "self_attention.linear_qkv"), 3)
        y = y + linear(attention(q, k, v, causal, dbias), w, p + "self_attention.linear_proj")
        q = linear(layer_norm(y, w, p + "pre_cross_attn_layernorm"), w, p + "cross_attention.linear_q")
        q = q.view(B, Td, NH, -1)
        k, v = split(linear(enc, w, p + "cross_attention.linear_kv"), 2)
        y = y + linear(attention(q, k, v, cvis, None), w, p + "cross_attention.linear_proj")
        y = y + mlp(cfg, w, p, y)
    h = layer_norm(y, w, "decoder.final_layernorm")
    logits = (h @ E.T + w["lm_head.output_layer.bias"])[..., : cfg.vocab]
    ce = Fn.cross_entropy(logits.reshape(-1, cfg.vocab), dlab.reshape(-1).clamp(min=0),
                          reduction="none")
    m = (dlab.reshape(-1) >= 0).to(ce.dtype)
    return (ce * m).sum() / m.sum()


def batch(rows):
    t = torch.tensor([r["tokens"] for r in rows])
    lab = torch.tensor([r["labels"] for r in rows])
    pad = torch.tensor([r["padding_mask"] for r in rows])
    return t, lab, pad


def train(cfg, w0, samples, a):
    w = {k: v.clone().requires_grad_(True) for k, v in w0.items()}
    groups = [{"params": [p for p in w.values() if p.dim() >= 2], "weight_decay": a.wd},
              {"params": [p for p in w.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=a.lr, betas=(a.beta1, a.beta2),
                            eps=a.eps)
    logs, grads0 = [], None
    B, G = a.micro_batch, a.global_batch
    for it in range(a.iters):
        opt.zero_grad()
        rows = samples[it * G:(it + 1) * G]
        losses = [micro_loss(cfg, w, batch(rows[i:i + B])) for i in range(0, G, B)]
        loss = sum(losses) / len(losses)
        loss.backward()
        for name, p in w.items():  # the key biases: exactly zero (softmax ignores a row's shift)
            if name.endswith("linear_qkv.bias"):
                p.grad.view(cfg.heads, 3, -1)[:, 1].zero_()
            if name.endswith("linear_kv.bias"):
                p.grad.view(cfg.heads, 2, -1)[:, 0].zero_()
        gnorm = math.sqrt(sum((p.grad ** 2).sum().item() for p in w.values()))
        logs.append({"lm": loss.item(), "grad_norm": gnorm})
        if it == 0:
            grads0 = {k: p.grad.detach().clone() for k, p in w.items()}
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(w.values()), a.clip)
        opt.step()
    return logs, grads0, {k: p.detach().clone() for k, p in w.items()}


def cmd_check(a):
    w0 = st_read(ckpt_file(a.init))
    cfg = Cfg()
    cfg.enc_seq, cfg.relative, cfg.buckets, cfg.max_distance = a.enc_seq, a.relative, a.buckets, a.max_distance
    cfg.gelu, cfg.no_cross_mask = a.gelu, a.no_cross_mask
    cfg.enc_layers = len({n.split(".")[2] for n in w0 if n.startswith("encoder.layers.")})
    cfg.dec_layers = len({n.split(".")[2] for n in w0 if n.startswith("decoder.layers.")})
    cfg.heads, cfg.vocab = a.heads, a.vocab
    samples = [json.loads(line) for line in open(a.samples)]
    if len(samples) < a.iters * a.global_batch:
        raise SystemExit(f"{len(samples)} samples, fewer than {a.iters} iterations")
    logs, grads, final = train(cfg, w0, samples, a)
    metrics = {}
    for line in open(a.metrics):
        o = json.loads(line)
        if "iteration" in o and "loss" in o:  # one loss: "loss" (the lm loss)
            metrics[o["iteration"]] = o
    fails, worst = 0, {}

    def check(what, err, tol, kind):
        nonlocal fails
        ok = err < tol
        worst[kind] = max(worst.get(kind, 0.0), err)
        if not ok:
            fails += 1
            print(f"FAIL {what}: relative error {err:.3e} (tolerance {tol:g})")

    for i, lg in enumerate(logs):
        m = metrics.get(i + 1)
        if m is None:
            fails += 1
            print(f"FAIL iteration {i + 1}: not in {a.metrics}")
            continue
        check(f"iteration {i + 1} lm loss {m['loss']} vs {lg['lm']}",
              abs(m["loss"] - lg["lm"]) / abs(lg["lm"]), a.tol, "loss")
        check(f"iteration {i + 1} grad norm", abs(m["grad_norm"] - lg["grad_norm"]) / lg["grad_norm"],
              a.tol, "grad norm")
    for name, want, tol, kind in (("gradient", grads, a.tol, "gradients"),
                                  ("weight", final, a.final_tol, "final weights")):
        got = st_read(ckpt_file(a.grads if kind == "gradients" else a.final))
        if set(got) != set(want):
            fails += 1
            print(f"FAIL {kind}: tensors differ: {sorted(set(got) ^ set(want))[:6]}")
        for n in sorted(set(got) & set(want)):
            g, r = got[n], want[n]
            if n == "embedding.word_embeddings.weight" or n == "lm_head.output_layer.bias":
                g, r = g[: a.vocab], r[: a.vocab]  # padded rows: never used
            check(f"{name} {n}", rel_err(g, r), tol, kind)
    for kind, e in worst.items():
        print(f"     worst {kind}: {e:.2e}")
    print(f"{'ok  ' if not fails else 'FAIL'} T5 against the float64 reference "
          f"({'relative bias' if a.relative else 'learned positions'}"
          f"{', no cross-attention mask' if a.no_cross_mask else ''}): {fails} failed")
    return 0 if fails == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["buckets", "make", "check"])
    ap.add_argument("--loom")
    ap.add_argument("--ckpt")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--init")
    ap.add_argument("--samples")
    ap.add_argument("--grads")
    ap.add_argument("--final")
    ap.add_argument("--metrics")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=4)
    ap.add_argument("--enc-seq", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--relative", action="store_true")
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--max-distance", type=int, default=128)
    ap.add_argument("--gelu", choices=["tanh", "erf"], default="tanh")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--final-tol", type=float, default=1e-4)
    ap.add_argument("--no-cross-mask", action="store_true")
    a = ap.parse_args()
    return {"buckets": cmd_buckets, "make": cmd_make, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
