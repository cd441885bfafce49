#!/usr/bin/python3
"""Independent PyTorch reference for loom's BERT (Megatron-LM's pre-LN BERT, Hugging Face's
MegatronBertForPreTraining), in float64.

  bert_ref.py make --out HF_DIR [--seed S] [--vocab V] [--hidden H] [--layers L] [--heads NH]
                   [--ffn F] [--max-pos P] [--layer-norm-eps E] [--no-binary-head]
                   [--mlp-gelu erf|tanh] [--head-gelu erf|tanh]
      writes a small random model in Hugging Face form (config.json + model.safetensors, float32).
      Matrices and embeddings N(0, 0.02), except the query and key projections, the MLP's first
      dense, the LM head's dense, the pooler and the binary head, N(0, 1/sqrt(H)) (query/key:
      attention far from uniform, so that a wrong padding mask or score scale shows; the two
      GELU inputs: pre-activations of order 1, where the erf and tanh forms differ by up to
      5e-4; pooler and binary head: an SOP loss away from log 2); biases N(0, 0.1) (the two GELU
      inputs' N(0, 0.5)); LayerNorm weights 1 + N(0, 0.1). The tied decoder
      (cls.predictions.decoder.weight / .bias) is not written: it is the word embedding and
      cls.predictions.bias. --no-binary-head: no bert.pooler.* and no cls.seq_relationship.*
      (Megatron-LM builds the pooler only with the binary head). The config's hidden_act is
      "gelu" (erf), or "gelu_new" for tanh; Hugging Face has one hidden_act for both places, so
      either flag alone sets both and a mixed pair is refused.
      Defaults: --seed 7 --vocab 100 --hidden 64 --layers 2 --heads 4 --ffn 128 --max-pos 32
      --layer-norm-eps 1e-5 (Megatron-LM's).

  bert_ref.py check --init HF_DIR --samples JSONL --grads GRADS_HF_DIR --final FINAL_HF_DIR
                    --metrics METRICS_JSONL --iters N --micro-batch B --global-batch G
                    --lr LR --clip C --wd WD [--beta1 B1] [--beta2 B2] [--eps E]
                    [--no-binary-head] [--mlp-gelu erf|tanh] [--head-gelu erf|tanh]
                    [--drop-pooler | --drop-token-types] [--tol T] [--final-tol T]
      trains the model of --init N iterations on the samples of --samples and compares with
      loom's outputs: each iteration's "lm loss", "sop loss" (not with --no-binary-head) and
      "grad_norm" from --metrics (loom's --metrics-file: one JSON object per line, found by its
      "iteration"); every gradient of the first iteration (--grads: loom's --save-grads converted
      to Hugging Face form); every weight after the N steps (--final). Losses, grad norm and
      gradients: relative error < --tol (default 1e-5); final weights: relative L2 error <
      --final-tol (default 1e-4). Each of the two files must hold every tensor of the model and
      nothing else, except the tied decoder's names (cls.predictions.decoder.weight / .bias),
      compared with the word embedding / cls.predictions.bias where present. Exit status 0 only
      if everything matches.
      --samples: JSON lines (`loom samples`), one sample a line in the order consumed, each
        {"tokens", "labels" (-1: no loss), "loss_mask", "token_types", "padding_mask" (1: a real
        token), "sop_label"}; other keys are ignored. Iteration i takes the next G samples,
        micro-batches of B in order.
      The loss (Megatron-LM's BERT): per micro-batch, lm = sum(CE(logits, labels) * loss_mask) /
        sum(loss_mask) over its tokens, sop = the mean over its samples of CE(binary logits,
        sop_label); the micro-batch's loss lm + sop; the step minimises the mean over its
        micro-batches. The logged "lm loss" / "sop loss" are the means over micro-batches.
      The optimizer (as gpt_ref.py's): torch AdamW at a constant --lr, decoupled weight decay
        --wd on the matrices and embeddings (tensors of 2 dimensions or more) only, none on
        biases and LayerNorm weights; before each step, when --clip > 0, every gradient scaled
        by clip / (norm + 1e-6) where the global L2 norm over all parameters exceeds --clip.
        The grad norm compared is that norm before clipping.
      --no-binary-head: no pooler, no binary head, no SOP loss (the model of
        `make --no-binary-head`); the loss is lm alone.
      --mlp-gelu / --head-gelu: the GELU of the layers' MLP / of the LM head's transform; erf is
        PyTorch's exact F.gelu, tanh the tanh approximation. Default: from config.json's
        hidden_act ("gelu": erf; "gelu_new", "gelu_pytorch_tanh", "gelu_fast": tanh).
      --drop-pooler / --drop-token-types: a deliberately wrong reference (the pooler replaced by
        the identity on h[:, 0] / the token type embeddings left out), to show that the check
        fails without them.

  bert_ref.py selftest
      on a tiny random model in float64: autograd's gradients against central finite
      differences for a few entries of many parameters (the step's loss over two micro-batches);
      the padding mask (changing a padded token's id changes no real position's output, and the
      same change does show when the mask is left out); the lm loss against cross_entropy's own
      ignore_index mean; --drop-pooler and --drop-token-types change the loss; --no-binary-head
      leaves lm alone; one AdamW step by hand against torch's; and make + check end to end on
      outputs the reference writes itself, with and without the binary head (passes; fails with
      --drop-pooler, --drop-token-types, the other GELU of either place, or a gradient missing).
      Exit status 0 only if all hold.

The model: embeddings word [V, H] + learned position [P, H] + token type [2, H], summed (no
LayerNorm, no dropout); L pre-LN layers x += attn(LN1(x)), x += mlp(LN2(x)), attention
bidirectional with the keys where padding_mask is 0 hidden from every query, separate q/k/v
projections with biases, output dense with bias, MLP H -> F -> H with biases and a GELU; a final
LayerNorm; LM head dense H -> H, GELU, LayerNorm, logits = h @ word_embeddings^T + bias [V];
pooler tanh(W h[:, 0] + b) on the final hidden state of the first position; binary head
Linear(H, 2) on the pooled output. The key projection's bias only adds q.b_k to every score of a
query's row, which the softmax ignores: its gradient is exactly zero, and is set so (as loom
does). Weights are read and written through gpt_ref.py's minimal safetensors functions.
"""
import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import rel_err, st_read, st_write  # noqa: E402

torch.set_default_dtype(torch.float64)

TANH_ACTS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
HEAD_ONLY = ("bert.pooler.", "cls.seq_relationship.")  # present only with the binary head
# the tied decoder's names, each the same tensor as another one
ALIASES = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
           "cls.predictions.decoder.bias": "cls.predictions.bias"}

# ---------------------------------------------------------------- weights


def param_shapes(cfg, binary_head):
    V, H, P = cfg["vocab_size"], cfg["hidden_size"], cfg["max_position_embeddings"]
    Fd, TV = cfg["intermediate_size"], cfg.get("type_vocab_size", 2)
    s = {"bert.embeddings.word_embeddings.weight": (V, H),
         "bert.embeddings.position_embeddings.weight": (P, H),
         "bert.embeddings.token_type_embeddings.weight": (TV, H)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        s.update({p + "attention.ln.weight": (H,), p + "attention.ln.bias": (H,)})
        for n in ("query", "key", "value"):
            s.update({p + f"attention.self.{n}.weight": (H, H), p + f"attention.self.{n}.bias": (H,)})
        s.update({p + "attention.output.dense.weight": (H, H), p + "attention.output.dense.bias": (H,),
                  p + "ln.weight": (H,), p + "ln.bias": (H,),
                  p + "intermediate.dense.weight": (Fd, H), p + "intermediate.dense.bias": (Fd,),
                  p + "output.dense.weight": (H, Fd), p + "output.dense.bias": (H,)})
    s.update({"bert.encoder.ln.weight": (H,), "bert.encoder.ln.bias": (H,),
              "cls.predictions.transform.dense.weight": (H, H),
              "cls.predictions.transform.dense.bias": (H,),
              "cls.predictions.transform.LayerNorm.weight": (H,),
              "cls.predictions.transform.LayerNorm.bias": (H,),
              "cls.predictions.bias": (V,)})
    if binary_head:
        s.update({"bert.pooler.dense.weight": (H, H), "bert.pooler.dense.bias": (H,),
                  "cls.seq_relationship.weight": (2, H), "cls.seq_relationship.bias": (2,)})
    return s


def make_weights(cfg, binary_head, gen):
    H = cfg["hidden_size"]
    wide = 1.0 / math.sqrt(H)  # inputs of order 1 into the softmax, the GELUs, tanh, the SOP
    w = {}
    for name, shape in param_shapes(cfg, binary_head).items():
        r = torch.randn(*shape, generator=gen)
        if name.endswith(("ln.weight", "LayerNorm.weight")):
            w[name] = 1.0 + 0.1 * r
        elif name.endswith(("intermediate.dense.bias", "transform.dense.bias")):
            w[name] = 0.5 * r
        elif name.endswith("bias"):
            w[name] = 0.1 * r
        elif name.endswith(("self.query.weight", "self.key.weight", "intermediate.dense.weight",
                            "transform.dense.weight", "pooler.dense.weight", "seq_relationship.weight")):
            w[name] = wide * r
        else:
            w[name] = 0.02 * r
    return w


def make_config(vocab, hidden, layers, heads, ffn, max_pos, eps, act):
    return dict(model_type="megatron-bert", architectures=["MegatronBertForPreTraining"],
                vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=ffn, hidden_act=act,
                max_position_embeddings=max_pos, type_vocab_size=2, layer_norm_eps=eps,
                initializer_range=0.02, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                position_embedding_type="absolute", pad_token_id=0, tie_word_embeddings=True,
                torch_dtype="float32")


# ---------------------------------------------------------------- the model


class Opts:
    """what the forward pass builds: mlp_gelu / head_gelu ("erf" | "tanh"), binary_head,
    drop_pooler, drop_token_types (the deliberately wrong variants), use_padding (selftest
    only: False leaves the padding mask out)"""

    def __init__(self, mlp_gelu="erf", head_gelu="erf", binary_head=True, drop_pooler=False,
                 drop_token_types=False, use_padding=True):
        self.mlp_gelu, self.head_gelu, self.binary_head = mlp_gelu, head_gelu, binary_head
        self.drop_pooler, self.drop_token_types, self.use_padding = drop_pooler, drop_token_types, use_padding


def gelu(form, x):
    if form == "erf":
        return F.gelu(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(w, prefix, x):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def encode(cfg, w, opts, tokens, types, pad):
    """-> the final-LayerNormed hidden states [B, T, H]"""
    B, T = tokens.shape
    H, NH, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    HS = H // NH
    ln = lambda x, p: F.layer_norm(x, (H,), w[p + ".weight"], w[p + ".bias"], eps)
    x = w["bert.embeddings.word_embeddings.weight"][tokens] + \
        w["bert.embeddings.position_embeddings.weight"][:T][None]
    if not opts.drop_token_types:
        x = x + w["bert.embeddings.token_type_embeddings.weight"][types]
    hidden_key = (pad == 0)[:, None, None, :]  # [B, 1 (heads), 1 (queries), T (keys)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        h = ln(x, p + "attention.ln")
        q, k, v = [linear(w, p + f"attention.self.{n}", h).view(B, T, NH, HS).transpose(1, 2)
                   for n in ("query", "key", "value")]
        s = q @ k.transpose(-1, -2) / math.sqrt(HS)
        if opts.use_padding:
            s = s.masked_fill(hidden_key, float("-inf"))
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, H)
        x = x + linear(w, p + "attention.output.dense", a)
        h = gelu(opts.mlp_gelu, linear(w, p + "intermediate.dense", ln(x, p + "ln")))
        x = x + linear(w, p + "output.dense", h)
    return ln(x, "bert.encoder.ln")


def heads(cfg, w, opts, h):
    """-> (LM logits [B, T, V], binary logits [B, 2] or None)"""
    eps = cfg["layer_norm_eps"]
    t = gelu(opts.head_gelu, linear(w, "cls.predictions.transform.dense", h))
    t = F.layer_norm(t, t.shape[-1:], w["cls.predictions.transform.LayerNorm.weight"],
                     w["cls.predictions.transform.LayerNorm.bias"], eps)
    logits = t @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    if not opts.binary_head:
        return logits, None
    first = h[:, 0]
    pooled = first if opts.drop_pooler else torch.tanh(linear(w, "bert.pooler.dense", first))
    return logits, linear(w, "cls.seq_relationship", pooled)


def micro_losses(cfg, w, opts, mb):
    """one micro-batch (a dict of tensors) -> (lm, sop or None), Megatron-LM's BERT loss"""
    h = encode(cfg, w, opts, mb["tokens"], mb["token_types"], mb["padding_mask"])
    logits, binary = heads(cfg, w, opts, h)
    V = logits.shape[-1]
    mask = mb["loss_mask"].to(logits.dtype)
    ce = F.cross_entropy(logits.reshape(-1, V), mb["labels"].clamp(min=0).reshape(-1), reduction="none")
    lm = (ce * mask.reshape(-1)).sum() / mask.sum()
    sop = F.cross_entropy(binary, mb["sop_label"]) if binary is not None else None
    return lm, sop


def step_loss(cfg, w, opts, micro):
    """-> (the loss minimised: the mean over micro-batches of lm + sop, the mean lm, the mean sop
    or None)"""
    lms, sops = [], []
    for mb in micro:
        lm, sop = micro_losses(cfg, w, opts, mb)
        lms.append(lm)
        sops.append(sop)
    n = len(micro)
    lm = sum(lms) / n
    sop = sum(sops) / n if opts.binary_head else None
    return (lm + sop if sop is not None else lm), lm, sop


# ---------------------------------------------------------------- data


KEYS = ("tokens", "labels", "loss_mask", "token_types", "padding_mask")


def read_samples(path):
    out = []
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        s = json.loads(line)
        missing = [k for k in KEYS + ("sop_label",) if k not in s]
        if missing:
            raise SystemExit(f"{path}:{n}: no {', '.join(missing)}")
        out.append(s)
    return out


def batch(samples, cfg, where=""):
    """a list of samples -> a dict of tensors, checked against the model's sizes"""
    T = len(samples[0]["tokens"])
    for s in samples:
        for k in KEYS:
            if len(s[k]) != T:
                raise SystemExit(f"samples{where}: {k} of {len(s[k])} entries, not {T}")
    if T > cfg["max_position_embeddings"]:
        raise SystemExit(f"samples{where}: {T} tokens, more than max_position_embeddings "
                         f"{cfg['max_position_embeddings']}")
    b = {k: torch.tensor([s[k] for s in samples], dtype=torch.long) for k in KEYS}
    b["sop_label"] = torch.tensor([int(s["sop_label"]) for s in samples], dtype=torch.long)
    V = cfg["vocab_size"]
    if b["tokens"].min() < 0 or b["tokens"].max() >= V:
        raise SystemExit(f"samples{where}: a token id outside [0, {V})")
    if ((b["loss_mask"] == 1) & ((b["labels"] < 0) | (b["labels"] >= V))).any():
        raise SystemExit(f"samples{where}: a loss_mask of 1 on a label outside [0, {V})")
    if (b["loss_mask"].sum() == 0).item():
        raise SystemExit(f"samples{where}: a micro-batch with no token in its loss")
    if ((b["token_types"] < 0) | (b["token_types"] > 1)).any():
        raise SystemExit(f"samples{where}: a token type other than 0 or 1")
    if (b["padding_mask"][:, 0] == 0).any():
        raise SystemExit(f"samples{where}: a sample whose first ([CLS]) position is padding")
    return b


# ---------------------------------------------------------------- training


def train(cfg, w0, opts, samples, iters, B, G, lr, clip, wd, betas, eps):
    """-> (per iteration {"lm", "sop", "grad_norm"}, the first iteration's gradients, the weights
    after the iterations); w0: float64 tensors, left untouched"""
    if G % B:
        raise SystemExit(f"--global-batch {G} is not a multiple of --micro-batch {B}")
    if len(samples) < iters * G:
        raise SystemExit(f"{len(samples)} samples, fewer than {iters} iterations of {G}")
    w = {k: v.clone().requires_grad_(True) for k, v in w0.items()}
    groups = [{"params": [p for p in w.values() if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in w.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas, eps=eps)
    logs, grads0 = [], None
    for it in range(iters):
        opt.zero_grad()
        base = it * G
        micro = [batch(samples[base + i:base + i + B], cfg, f" {base + i}..{base + i + B - 1}")
                 for i in range(0, G, B)]
        loss, lm, sop = step_loss(cfg, w, opts, micro)
        loss.backward()
        for name, p in w.items():
            if p.grad is None:  # (the pooler's, with --drop-pooler)
                p.grad = torch.zeros_like(p)
            if name.endswith("attention.self.key.bias"):
                p.grad.zero_()  # exactly zero (softmax ignores a row's shift): float64 noise
        gnorm = math.sqrt(sum((p.grad ** 2).sum().item() for p in w.values()))
        logs.append({"lm": lm.item(), "sop": None if sop is None else sop.item(), "grad_norm": gnorm})
        if it == 0:
            grads0 = {k: p.grad.detach().clone() for k, p in w.items()}
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(w.values()), clip)
        opt.step()
    return logs, grads0, {k: p.detach().clone() for k, p in w.items()}


# ---------------------------------------------------------------- check


def load_model(d, binary_head):
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") != "megatron-bert":
        raise SystemExit(f"{d}/config.json: model_type {cfg.get('model_type')!r}, not megatron-bert")
    if cfg.get("type_vocab_size", 2) != 2:
        raise SystemExit(f"{d}/config.json: type_vocab_size {cfg['type_vocab_size']}, not 2")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise SystemExit(f"{d}/config.json: hidden_size not a multiple of num_attention_heads")
    raw = st_read(os.path.join(d, "model.safetensors"))
    shapes = param_shapes(cfg, binary_head)
    w = {}
    for name, shape in shapes.items():
        if name not in raw:
            hint = " (a model without the binary head? give --no-binary-head)" \
                if name.startswith(HEAD_ONLY) else ""
            raise SystemExit(f"{d}: no {name}{hint}")
        if tuple(raw[name].shape) != shape:
            raise SystemExit(f"{d}: {name} of shape {list(raw[name].shape)}, not {list(shape)}")
        w[name] = raw[name]
    for name, t in raw.items():
        if name in shapes:
            continue
        if name in ALIASES:
            if not torch.equal(t, raw[ALIASES[name]]):
                raise SystemExit(f"{d}: {name} differs from {ALIASES[name]} (untied: not this model)")
        elif name.startswith(HEAD_ONLY) and not binary_head:
            print(f"note: {name} in {d} is no part of the model without the binary head")
        else:
            raise SystemExit(f"{d}: unexpected tensor {name}")
    return cfg, w


def gelu_forms(cfg, mlp, head):
    act = cfg.get("hidden_act", "gelu")
    default = "erf" if act == "gelu" else "tanh" if act in TANH_ACTS else None
    if default is None and (mlp is None or head is None):
        raise SystemExit(f"hidden_act {act!r}: not a GELU this reference knows")
    return mlp or default, head or default


class Report:
    def __init__(self):
        self.ok, self.failed = True, 0

    def __call__(self, what, err, tol):
        good = err < tol  # (False for nan)
        self.ok &= good
        self.failed += not good
        print(f"{'ok  ' if good else 'FAIL'} {what}: relative error {err:.3e} (tolerance {tol:g})")

    def fail(self, what):
        self.ok = False
        self.failed += 1
        print(f"FAIL {what}")


def compare_tensors(rep, label, path, want, tol):
    """every tensor of the model (want) against the file; the tied decoder's names, where the
    file has them, against the tensors they alias"""
    got = st_read(os.path.join(path, "model.safetensors"))
    for name in sorted(want):
        if name not in got:
            rep.fail(f"{label} {name}: not in {path}")
        elif tuple(got[name].shape) != tuple(want[name].shape):
            rep.fail(f"{label} {name}: shape {list(got[name].shape)}, not {list(want[name].shape)}")
        else:
            rep(f"{label} {name}", rel_err(got[name], want[name]), tol)
    for name in sorted(set(got) - set(want)):
        if name in ALIASES and ALIASES[name] in want and \
                tuple(got[name].shape) == tuple(want[ALIASES[name]].shape):
            rep(f"{label} {name} (tied: {ALIASES[name]})", rel_err(got[name], want[ALIASES[name]]), tol)
        else:
            rep.fail(f"{label} {name}: in {path}, not a tensor of this model")


def metric(m, key):
    v = m.get(key)
    return float("nan") if v is None else float(v)


def rel_scalar(a, ref):
    return abs(a - ref) / max(abs(ref), 1e-30)


def check(a):
    opts = Opts(binary_head=not a.no_binary_head, drop_pooler=a.drop_pooler,
                drop_token_types=a.drop_token_types)
    if a.drop_pooler and not opts.binary_head:
        raise SystemExit("--drop-pooler: there is no pooler with --no-binary-head")
    cfg, w0 = load_model(a.init, opts.binary_head)
    opts.mlp_gelu, opts.head_gelu = gelu_forms(cfg, a.mlp_gelu, a.head_gelu)
    print(f"model: vocab {cfg['vocab_size']}, hidden {cfg['hidden_size']}, layers "
          f"{cfg['num_hidden_layers']}, heads {cfg['num_attention_heads']}, ffn "
          f"{cfg['intermediate_size']}, positions {cfg['max_position_embeddings']}, LayerNorm eps "
          f"{cfg['layer_norm_eps']:g}, GELU mlp {opts.mlp_gelu} head {opts.head_gelu}, binary head "
          f"{'yes' if opts.binary_head else 'no'}"
          + (", WRONG: no pooler" if a.drop_pooler else "")
          + (", WRONG: no token types" if a.drop_token_types else ""))
    samples = read_samples(a.samples)
    logs, grads0, final = train(cfg, w0, opts, samples, a.iters, a.micro_batch, a.global_batch,
                                a.lr, a.clip, a.wd, (a.beta1, a.beta2), a.eps)
    metrics = {}
    for line in open(a.metrics):
        if line.strip():
            m = json.loads(line)
            metrics[m["iteration"]] = m
    rep = Report()
    for it, lg in enumerate(logs, 1):
        m = metrics.get(it)
        if m is None:
            rep.fail(f"iteration {it}: not in {a.metrics}")
            continue
        checks = [("lm loss", lg["lm"])] + ([("sop loss", lg["sop"])] if opts.binary_head else [])
        checks.append(("grad_norm", lg["grad_norm"]))
        for key, ref in checks:
            got = metric(m, key)
            rep(f"iteration {it} {key} {ref:.8f} vs loom {got:.8f}", rel_scalar(got, ref), a.tol)
    compare_tensors(rep, "gradient", a.grads, grads0, a.tol)
    compare_tensors(rep, f"after {a.iters} steps", a.final, final, a.final_tol)
    print("PASS" if rep.ok else f"FAILED ({rep.failed} checks)")
    return 0 if rep.ok else 1


# ---------------------------------------------------------------- make


def make(a):
    mlp, head = a.mlp_gelu or a.head_gelu or "erf", a.head_gelu or a.mlp_gelu or "erf"
    if mlp != head:
        raise SystemExit("make: Hugging Face's config has one hidden_act for the MLP and the head")
    if a.hidden % a.heads:
        raise SystemExit(f"make: --hidden {a.hidden} is not a multiple of --heads {a.heads}")
    cfg = make_config(a.vocab, a.hidden, a.layers, a.heads, a.ffn, a.max_pos, a.layer_norm_eps,
                      "gelu" if mlp == "erf" else "gelu_new")
    gen = torch.Generator().manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    st_write(os.path.join(a.out, "model.safetensors"), make_weights(cfg, not a.no_binary_head, gen))
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    return 0


# ---------------------------------------------------------------- selftest


def random_samples(gen, n, T, V, lengths=None):
    """n samples of T tokens in the --samples form: [CLS]-like id 1 first, some padding at the end,
    token types 0 then 1, a few positions in the loss"""
    out = []
    for i in range(n):
        L = lengths[i % len(lengths)] if lengths else T
        tokens = torch.randint(2, V, (T,), generator=gen).tolist()
        tokens[0] = 1
        for t in range(L, T):
            tokens[t] = 0
        types = [0 if t < L // 2 else 1 for t in range(L)] + [0] * (T - L)
        pick = (torch.randperm(L - 1, generator=gen)[:max(1, L // 4)] + 1).tolist()
        labels, mask = [-1] * T, [0] * T
        for t in pick:
            labels[t], mask[t] = int(torch.randint(0, V, (1,), generator=gen)), 1
        out.append({"tokens": tokens, "labels": labels, "loss_mask": mask, "token_types": types,
                    "padding_mask": [1] * L + [0] * (T - L),
                    "sop_label": int(torch.randint(0, 2, (1,), generator=gen)), "extra": "ignored"})
    return out


def end_to_end(tmp, binary, gen, say):
    """selftest: make, then check against the reference's own outputs (written in float32, the
    final weights with the tied decoder's duplicate name as well): as written it passes; each
    deliberately wrong reference and the other GELU fail; so does a grads file missing one
    tensor. Without the binary head, a check that expects one stops with an error."""
    run = lambda *argv: main(list(argv))
    nb = [] if binary else ["--no-binary-head"]
    run("make", "--out", f"{tmp}/hf", "--seed", "3", "--vocab", "29", "--hidden", "16",
        "--layers", "2", "--heads", "2", "--ffn", "32", "--max-pos", "16", *nb)
    cfg, w = load_model(f"{tmp}/hf", binary)
    data = random_samples(gen, 12, 12, 29, lengths=[12, 9, 6, 11])
    with open(f"{tmp}/samples.jsonl", "w") as f:
        for s in data:
            f.write(json.dumps(s) + "\n")
    logs, g0, fin = train(cfg, w, Opts(binary_head=binary), data, 3, 2, 4, 1e-3, 0.05, 0.1,
                          (0.9, 0.999), 1e-8)
    for d in ("grads", "final", "grads_short"):
        os.makedirs(f"{tmp}/{d}")
    st_write(f"{tmp}/grads/model.safetensors", g0)
    st_write(f"{tmp}/grads_short/model.safetensors",
             {k: v for k, v in g0.items() if k != "bert.encoder.layer.1.ln.bias"})
    fin["cls.predictions.decoder.weight"] = fin["bert.embeddings.word_embeddings.weight"]
    st_write(f"{tmp}/final/model.safetensors", fin)
    with open(f"{tmp}/metrics.jsonl", "w") as f:
        for it, lg in enumerate(logs, 1):
            m = {"iteration": it, "lm loss": lg["lm"], "grad_norm": lg["grad_norm"]}
            if binary:
                m["sop loss"] = lg["sop"]
            f.write(json.dumps(m) + "\n")
    common = ["check", "--init", f"{tmp}/hf", "--samples", f"{tmp}/samples.jsonl", "--final",
              f"{tmp}/final", "--metrics", f"{tmp}/metrics.jsonl", "--iters", "3", "--micro-batch",
              "2", "--global-batch", "4", "--lr", "1e-3", "--clip", "0.05", "--wd", "0.1", *nb]
    cases = [([], 0), (["--drop-token-types"], 1), (["--mlp-gelu", "tanh"], 1),
             (["--head-gelu", "tanh"], 1)]
    if binary:
        cases.insert(1, (["--drop-pooler"], 1))
    cases.append((["--grads", f"{tmp}/grads_short"], 1))
    what = "" if binary else " --no-binary-head"
    for extra, want in cases:
        if "--grads" not in extra:
            extra = extra + ["--grads", f"{tmp}/grads"]
        label = " ".join(x for x in extra if not x.startswith(tmp)).replace("--grads", "").strip()
        label = "--grads (one tensor missing)" if "grads_short" in " ".join(extra) else label
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run(*common, *extra)
        last = out.getvalue().strip().splitlines()[-1]
        say(rc == want, f"check{what} {label or '(as written)'}: {last}, exit status {rc} (wanted {want})")
    if not binary:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run(*[x for x in common if x != "--no-binary-head"], "--grads", f"{tmp}/grads")
            say(False, "check without --no-binary-head on a model without the head: no error")
        except SystemExit as e:
            say("--no-binary-head" in str(e), f"check without --no-binary-head stops: {e}")


def selftest():
    ok = True

    def say(good, what):
        nonlocal ok
        ok &= bool(good)
        print(f"{'ok  ' if good else 'FAIL'} {what}")

    gen = torch.Generator().manual_seed(11)
    cfg = make_config(23, 16, 2, 4, 24, 12, 1e-5, "gelu")
    w0 = make_weights(cfg, True, gen)
    samples = random_samples(gen, 6, 10, 23, lengths=[10, 7, 5])
    micro = [batch(samples[i:i + 3], cfg) for i in (0, 3)]
    opts = Opts()

    # autograd against central finite differences
    w = {k: v.clone().requires_grad_(True) for k, v in w0.items()}
    loss, lm, sop = step_loss(cfg, w, opts, micro)
    loss.backward()
    print(f"tiny model: loss {loss.item():.10f} (lm {lm.item():.10f}, sop {sop.item():.10f})")
    kb = max(w[f"bert.encoder.layer.{i}.attention.self.key.bias"].grad.abs().max().item() for i in range(2))
    qb = max(w[f"bert.encoder.layer.{i}.attention.self.query.bias"].grad.abs().max().item() for i in range(2))
    say(kb < 1e-13 * max(qb, 1e-30) or kb < 1e-15,
        f"the key bias's gradient is rounding noise ({kb:.1e}; the query bias's {qb:.1e})")
    names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
             "bert.embeddings.token_type_embeddings.weight", "bert.encoder.layer.0.attention.ln.weight",
             "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.1.attention.self.key.weight",
             "bert.encoder.layer.0.attention.self.value.bias", "bert.encoder.layer.1.attention.output.dense.weight",
             "bert.encoder.layer.1.ln.bias", "bert.encoder.layer.0.intermediate.dense.bias",
             "bert.encoder.layer.1.output.dense.weight", "bert.encoder.ln.weight", "bert.encoder.ln.bias",
             "bert.pooler.dense.weight", "bert.pooler.dense.bias", "cls.predictions.transform.dense.weight",
             "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
             "cls.predictions.bias", "cls.seq_relationship.weight", "cls.seq_relationship.bias"]
    h, worst = 1e-5, 0.0
    with torch.no_grad():
        for name in names:
            g = w[name].grad.reshape(-1)
            idx = [int(g.abs().argmax()), int(torch.randint(0, g.numel(), (1,), generator=gen))]
            for j in idx:
                flat = w[name].view(-1)
                keep = flat[j].item()
                flat[j] = keep + h
                up = step_loss(cfg, w, opts, micro)[0].item()
                flat[j] = keep - h
                down = step_loss(cfg, w, opts, micro)[0].item()
                flat[j] = keep
                fd = (up - down) / (2 * h)
                # relative, with a floor of 1e-4 under |g|: the difference's rounding is ~1e-11
                err = abs(fd - g[j].item()) / max(abs(g[j].item()), 1e-4)
                worst = max(worst, err)
                if err > 1e-6:
                    say(False, f"finite difference {name}[{j}]: {fd:.10e} vs autograd {g[j].item():.10e}")
    say(worst <= 1e-6, f"autograd against finite differences: {2 * len(names)} entries of {len(names)} "
        f"parameters, worst relative error {worst:.1e}")

    # the lm loss: Megatron's masked sum / count equals cross_entropy's mean over labels >= 0
    with torch.no_grad():
        mb = micro[0]
        lm, _ = micro_losses(cfg, w0, opts, mb)
        logits, _ = heads(cfg, w0, opts, encode(cfg, w0, opts, mb["tokens"], mb["token_types"], mb["padding_mask"]))
        alt = F.cross_entropy(logits.reshape(-1, 23), mb["labels"].reshape(-1), ignore_index=-1)
        say(abs(lm.item() - alt.item()) < 1e-12, f"lm loss {lm.item():.10f} = cross_entropy ignore_index mean")

        # the padding mask: a padded token's id changes no real position's output
        mb = micro[0]  # samples of 10, 7 and 5 real tokens
        other = dict(mb)
        other["tokens"] = mb["tokens"].clone()
        other["tokens"][1, 8] = 17  # padded (sample 1 has 7 real tokens)
        other["token_types"] = mb["token_types"].clone()
        other["token_types"][2, 6] = 1  # padded too
        real = mb["padding_mask"].bool()
        h1 = encode(cfg, w0, opts, mb["tokens"], mb["token_types"], mb["padding_mask"])
        h2 = encode(cfg, w0, opts, other["tokens"], other["token_types"], other["padding_mask"])
        d_pad = (h1 - h2)[real].abs().max().item()
        say(d_pad == 0.0, f"padding mask: a padded token changed the real positions' outputs by {d_pad:.1e}")
        l1, l2 = micro_losses(cfg, w0, opts, mb), micro_losses(cfg, w0, opts, other)
        say(l1[0].item() == l2[0].item() and l1[1].item() == l2[1].item(), "padding mask: losses unchanged")
        nomask = Opts(use_padding=False)
        d_no = (encode(cfg, w0, nomask, mb["tokens"], mb["token_types"], mb["padding_mask"]) -
                encode(cfg, w0, nomask, other["tokens"], other["token_types"], other["padding_mask"]))[real].abs().max().item()
        say(d_no > 1e-4, f"without the padding mask the same change shows ({d_no:.1e})")
        moved = dict(mb)
        moved["tokens"] = mb["tokens"].clone()
        moved["tokens"][1, 3] = 17 if mb["tokens"][1, 3] != 17 else 18  # a real token
        d_real = (h1 - encode(cfg, w0, opts, moved["tokens"], mb["token_types"], mb["padding_mask"]))
        d_real[1, 3] = 0  # its own position aside
        say(d_real[real].abs().max().item() > 1e-4, "a real token's id reaches the other positions")

        # the deliberately wrong variants, and the model without the binary head
        base, blm, bsop = step_loss(cfg, w0, opts, micro)
        for what, o in (("--drop-pooler", Opts(drop_pooler=True)),
                        ("--drop-token-types", Opts(drop_token_types=True))):
            x = step_loss(cfg, w0, o, micro)[0].item()
            say(abs(x - base.item()) > 1e-3 * base.item(), f"{what} changes the loss: {base.item():.8f} -> {x:.8f}")
        nb = step_loss(cfg, w0, Opts(binary_head=False), micro)
        say(nb[2] is None and nb[0].item() == blm.item(), "without the binary head the loss is lm alone")

    # AdamW: one step by hand (decoupled decay on matrices only, clipping) against torch's
    wd, lr, clip, (b1, b2), e = 0.1, 1e-2, 0.05, (0.9, 0.999), 1e-8
    logs, g0, fin = train(cfg, w0, opts, samples, 1, 3, 6, lr, clip, wd, (b1, b2), e)
    scale = min(1.0, clip / (logs[0]["grad_norm"] + 1e-6))
    worst = 0.0
    for k, p in w0.items():
        g = g0[k] * scale
        m, v = (1 - b1) * g, (1 - b2) * g * g
        upd = (m / (1 - b1)) / ((v / (1 - b2)).sqrt() + e)
        want = p - lr * (upd + (wd * p if p.dim() >= 2 else 0.0))
        worst = max(worst, rel_err(fin[k], want))
    say(worst < 1e-12, f"one AdamW step by hand (decay on matrices only, clipped) = torch's: {worst:.1e}")

    # make + check end to end, on outputs the reference writes itself
    with tempfile.TemporaryDirectory() as tmp:
        for binary in (True, False):
            end_to_end(f"{tmp}/{'sop' if binary else 'nosop'}", binary, gen, say)
    print("SELFTEST PASS" if ok else "SELFTEST FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------- command line


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 PyTorch reference for loom's BERT "
                                 "(see the module docstring)")
    ap.add_argument("cmd", choices=["make", "check", "selftest"])
    ap.add_argument("--out", help="make: the Hugging Face folder to write")
    ap.add_argument("--seed", type=int, default=7, help="make: the weights' random seed")
    ap.add_argument("--vocab", type=int, default=100, help="make: vocab_size")
    ap.add_argument("--hidden", type=int, default=64, help="make: hidden_size")
    ap.add_argument("--layers", type=int, default=2, help="make: num_hidden_layers")
    ap.add_argument("--heads", type=int, default=4, help="make: num_attention_heads")
    ap.add_argument("--ffn", type=int, default=128, help="make: intermediate_size")
    ap.add_argument("--max-pos", type=int, default=32, help="make: max_position_embeddings")
    ap.add_argument("--layer-norm-eps", type=float, default=1e-5, help="make: layer_norm_eps")
    ap.add_argument("--no-binary-head", action="store_true",
                    help="make and check: no pooler, no binary (sentence-order) head, no SOP loss")
    ap.add_argument("--mlp-gelu", choices=["erf", "tanh"], default=None,
                    help="the MLP's GELU (default: from config.json's hidden_act; make: erf)")
    ap.add_argument("--head-gelu", choices=["erf", "tanh"], default=None,
                    help="the LM head transform's GELU (default as --mlp-gelu)")
    ap.add_argument("--init", help="check: the Hugging Face folder loom started from")
    ap.add_argument("--samples", help="check: the samples, JSON lines, in the order consumed")
    ap.add_argument("--grads", help="check: loom's first-iteration gradients, Hugging Face form")
    ap.add_argument("--final", help="check: loom's weights after --iters steps, Hugging Face form")
    ap.add_argument("--metrics", help="check: loom's --metrics-file")
    ap.add_argument("--iters", type=int, default=5, help="check: iterations")
    ap.add_argument("--micro-batch", type=int, default=2, help="check: samples per micro-batch")
    ap.add_argument("--global-batch", type=int, default=4, help="check: samples per iteration")
    ap.add_argument("--lr", type=float, default=1e-3, help="check: the constant learning rate")
    ap.add_argument("--clip", type=float, default=0.0, help="check: global-norm clipping (0: none)")
    ap.add_argument("--wd", type=float, default=0.0, help="check: weight decay (matrices only)")
    ap.add_argument("--beta1", type=float, default=0.9, help="check: AdamW's beta1")
    ap.add_argument("--beta2", type=float, default=0.999, help="check: AdamW's beta2")
    ap.add_argument("--eps", type=float, default=1e-8, help="check: AdamW's epsilon")
    wrong = ap.add_mutually_exclusive_group()
    wrong.add_argument("--drop-pooler", action="store_true",
                       help="check: a wrong reference, the pooler replaced by the identity")
    wrong.add_argument("--drop-token-types", action="store_true",
                       help="check: a wrong reference, the token type embeddings left out")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="check: relative error allowed on losses, grad norms and gradients")
    ap.add_argument("--final-tol", type=float, default=1e-4,
                    help="check: relative L2 error allowed on the final weights")
    a = ap.parse_args(argv)
    if a.cmd == "selftest":
        return selftest()
    if a.cmd == "make":
        if not a.out:
            ap.error("make needs --out")
        return make(a)
    need = [f"--{k}" for k in ("init", "samples", "grads", "final", "metrics") if not getattr(a, k)]
    if need:
        ap.error(f"check needs {' '.join(need)}")
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
