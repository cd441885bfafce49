#!/usr/bin/python3
"""Compare two loom training runs: per-iteration loss (and each named loss, "lm loss" and the
like, where the family logs several) and grad norm (and the parameters' norm
where both logged it: --log-params-norm) from --metrics-file, and the final checkpoints' tensors. Relative tolerance per scalar, and per tensor on the L2 norm.
usage: compare_runs.py REF_METRICS REF_CKPT RUN_METRICS RUN_CKPT TOL LABEL"""
import json
import struct
import sys

import numpy as np


def tensors(root):
    it = open(f"{root}/latest_checkpointed_iteration.txt").read().strip()
    path = f"{root}/iter_{int(it):07d}/model.safetensors"
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, e in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return out


ref_m, ref_c, run_m, run_c, tol, label = sys.argv[1:7]
tol = float(tol)
# the iterations (not the test loss after training)
a = [r for r in map(json.loads, open(ref_m)) if "loss" in r]
b = [r for r in map(json.loads, open(run_m)) if "loss" in r]
worst_loss = worst_gn = worst_p = worst_pn = 0.0
worst_name = ""
ok = len(a) == len(b) and len(a) > 0
for x, y in zip(a, b):
    ok &= x["iteration"] == y["iteration"]
    worst_loss = max(worst_loss, abs(x["loss"] - y["loss"]) / abs(x["loss"]))
    worst_gn = max(worst_gn, abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]))
    # a family's named losses ("lm loss", "sop loss"), where it logs them
    for k in x:
        if k.endswith(" loss"):
            ok &= k in y
            if k in y and x[k] != 0:
                worst_loss = max(worst_loss, abs(x[k] - y[k]) / abs(x[k]))
    ok &= ("params_norm" in x) == ("params_norm" in y)
    if "params_norm" in x and "params_norm" in y:
        worst_pn = max(worst_pn, abs(x["params_norm"] - y["params_norm"]) / abs(x["params_norm"]))
ta, tb = tensors(ref_c), tensors(run_c)
ok &= set(ta) == set(tb)
for k in ta:
    if k in tb:
        e = np.linalg.norm(ta[k] - tb[k]) / max(np.linalg.norm(ta[k]), 1e-30)
        if e > worst_p:
            worst_p, worst_name = e, k
ok &= worst_loss < tol and worst_gn < tol and worst_p < tol and worst_pn < tol
pn = f", params norm {worst_pn:.2e}" if "params_norm" in a[0] else ""
print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(b)} iterations, worst relative difference "
      f"loss {worst_loss:.2e}, grad norm {worst_gn:.2e}{pn}, parameters {worst_p:.2e} ({worst_name}) (tolerance {tol:g})")
sys.exit(0 if ok else 1)
