#!/usr/bin/python3
"""Compare a run split in two halves (saved under one parallel layout, resumed under another)
with a straight run: per-iteration loss and grad norm from --metrics-file, and the final
checkpoints' model and optimizer tensors.

usage: compare_resume.py REF_METRICS REF_CKPT FIRST_METRICS SECOND_METRICS RUN_CKPT SPLIT TOL LABEL

FIRST_METRICS must hold iterations 1..SPLIT and SECOND_METRICS SPLIT+1..N (so a resume that
silently started over from iteration 1 fails). Tolerances are relative: per scalar, and per tensor
on the L2 norm of the difference. Tensors with a row per entry of the padded vocabulary are
compared on the real vocabulary rows only: the padding depends on the tensor-parallel size
(a multiple of --make-vocab-size-divisible-by x TP), so two layouts may pad differently.
"""
import json
import struct
import sys

import numpy as np

VOCAB_ROWS = ("embedding.word_embeddings.weight", "output_layer.weight")


def checkpoint_dir(root):
    it = int(open(f"{root}/latest_checkpointed_iteration.txt").read().strip())
    return f"{root}/iter_{it:07d}"


def tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, e in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        t = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4").reshape(e["shape"])
        out[name] = t.astype(np.float64)
    return out


def load(root):
    d = checkpoint_dir(root)
    meta = json.load(open(f"{d}/meta.json"))
    vocab = meta["model"]["vocab_size"]
    out = tensors(f"{d}/model.safetensors")
    out.update(tensors(f"{d}/optim.safetensors"))
    for k in out:
        if k.split(".", 1)[-1] in VOCAB_ROWS or k in VOCAB_ROWS:
            out[k] = out[k][:vocab]
    return meta, out


def metrics(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in rows if "loss" in r]  # iterations, not the test loss after training


ref_m, ref_c, first_m, second_m, run_c, split, tol, label = sys.argv[1:9]
split, tol = int(split), float(tol)
a = metrics(ref_m)
first, second = metrics(first_m), metrics(second_m)
problems = []
if [x["iteration"] for x in first] != list(range(1, split + 1)):
    problems.append(f"first half logged iterations {[x['iteration'] for x in first]}")
if [x["iteration"] for x in second] != list(range(split + 1, len(a) + 1)):
    problems.append(f"resumed half logged iterations {[x['iteration'] for x in second]}")
b = first + second
worst_loss = worst_gn = worst_lr = 0.0
for x, y in zip(a, b):
    worst_loss = max(worst_loss, abs(x["loss"] - y["loss"]) / abs(x["loss"]))
    worst_gn = max(worst_gn, abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]))
    worst_lr = max(worst_lr, abs(x["lr"] - y["lr"]) / max(abs(x["lr"]), 1e-30))
ref_meta, ta = load(ref_c)
run_meta, tb = load(run_c)
for key in ("iteration", "consumed_samples", "optimizer_step"):
    if ref_meta.get(key) != run_meta.get(key):
        problems.append(f"meta.json {key}: {run_meta.get(key)} (straight run: {ref_meta.get(key)})")
if set(ta) != set(tb):
    problems.append(f"tensor names differ: {sorted(set(ta) ^ set(tb))[:4]}")
worst_p, worst_name = 0.0, ""
for k in ta:
    if k not in tb:
        continue
    if ta[k].shape != tb[k].shape:
        problems.append(f"{k}: shape {tb[k].shape}, straight run {ta[k].shape}")
        continue
    e = np.linalg.norm(ta[k] - tb[k]) / max(np.linalg.norm(ta[k]), 1e-30)
    if e > worst_p:
        worst_p, worst_name = e, k
ok = not problems and worst_loss < tol and worst_gn < tol and worst_lr < tol and worst_p < tol
print(f"{'ok  ' if ok else 'FAIL'} {label}: iterations 1-{split} + {split + 1}-{len(b)}, worst relative "
      f"difference loss {worst_loss:.2e}, grad norm {worst_gn:.2e}, lr {worst_lr:.1e}, "
      f"weights and moments {worst_p:.2e} ({worst_name}) (tolerance {tol:g})")
for p in problems:
    print(f"     {p}")
sys.exit(0 if ok else 1)
