#!/usr/bin/python3
"""Analytic communication volume of one loom training step on world rank 0, derived from the
model's structure and the ring-algorithm accounting of include/loom/comm.h, compared with what
the comm layer counted ("comm_bytes" of every line of the metrics file).

usage: comm_volume.py flags MODEL CASE          ranks, then the train flags of the case (one line)
       comm_volume.py check METRICS MODEL CASE  exit 0 when every iteration matches
       comm_volume.py table                     markdown rows of every case (for the docs)
MODEL: gpt | llama.  CASE: tp sp pp vpp dp tp+dp tp+pp+sp (see CASES).

Rank 0 has coordinates tp = dp = pp = 0: it is pipeline stage 0 and, under TP, holds vocabulary
shard 0. Its bytes per process group, per step (m micro-batches of B samples of T tokens on this
rank, N = B T rows, Nr = N / t rows of the residual stream under sequence parallelism, else N):

TP group (t ranks), per micro-batch:
  forward   the embedding's output leaves the TP region (all-reduce of N C floats; SP: a
            reduce-scatter into Nr C); per local layer the attention and MLP outputs leave it
            the same way and, under SP, the inputs of qkv and fc1 enter by all-gather of Nr C;
            on the last stage the output layer's input enters (SP: all-gather) and the
            vocabulary-parallel cross-entropy all-reduces the row maxima (N floats) and the
            sums of exponentials with the target logits (2N floats)
  backward  the mirror image: the output layer's input gradient and, per layer, the inputs
            of qkv and fc1 are all-reduced (SP: reduce-scattered); under SP the gradients of the
            row-parallel outputs and of the embedding's output are all-gathered
  per step  under SP the norm weights' gradients (each norm tensor, C floats) are all-reduced;
            the global grad norm's partial sum (1 double) is all-reduced
PP group (p ranks, v virtual stages): stage 0 sends each micro-batch's activation (Nr C floats)
  out of each of its v chunks and the input gradient of each chunk but the first (v - 1); the
  loss (sum, count: 2 doubles) and the grad norm's partial sum (1 double) are all-reduced.
Embedding group (first and last stage, tied embedding, p > 1): the word embedding's gradient
  (this rank's vocabulary shard, Vp / t rows of C floats) is all-reduced.
DP group (d ranks): the flat gradient buffer is all-reduced once, in buckets: every tensor
  padded to a multiple of 16 floats (the parameter table's alignment), the whole rounded up to a
  multiple of 16 d floats; and the loss (2 doubles). With the distributed optimizer ("-dist"
  cases) the buckets are reduce-scattered instead (each rank receives 1 / d of the buffer), the
  updated parameters all-gathered the same way, and the grad norm's partial sum (1 double)
  all-reduced.
Collective volumes (S bytes, n ranks): all-reduce 2 (n-1) S / n; reduce-scatter (n-1) S with S the
received block; all-gather (n-1) S with S this rank's block; a send S.
"""
import json
import sys

MODELS = {
    # GPT-2 style: LayerNorm with bias, GELU, biases, learned positions, tied embedding. C = 40 is
    # not a multiple of 16, so the norm and bias gradients carry alignment padding.
    "gpt": dict(L=4, C=40, NH=4, NKV=4, F=160, T=16, V=97, div=128, B=2, GB=8,
                layernorm=True, swiglu=False, bias=True, untie=False, learned_pos=True),
    # Llama style: RMSNorm, SwiGLU, rotary, grouped-query attention, no biases, untied output.
    "llama": dict(L=4, C=40, NH=4, NKV=2, F=72, T=16, V=97, div=128, B=2, GB=8,
                  layernorm=False, swiglu=True, bias=False, untie=True, learned_pos=False),
}

# case -> (tp, pp, virtual stages, dp, sequence parallel); "-dist": with the distributed optimizer
CASES = {
    "tp": (2, 1, 1, 1, False),
    "sp": (2, 1, 1, 1, True),
    "pp": (1, 2, 1, 1, False),
    "vpp": (1, 2, 2, 1, False),
    "dp": (1, 1, 1, 2, False),
    "tp+dp": (2, 1, 1, 2, False),
    "tp+pp+sp": (2, 2, 1, 1, True),
    "dp-dist": (1, 1, 1, 2, False),
    "tp+dp-dist": (2, 1, 1, 2, False),
    "dp-zero2": (1, 1, 1, 2, False),
    "dp-zero3": (1, 1, 1, 2, False),
    "tp+dp-zero3": (2, 1, 1, 2, False),
}
# the data-parallel sharding of a case (--data-parallel-sharding-strategy): what its name ends with
SHARDING = {"-dist": "optim", "-zero2": "optim_grads", "-zero3": "optim_grads_params"}


def sharding(case):
    return next((v for k, v in SHARDING.items() if case.endswith(k)), "no_shard")

F32, F64 = 4, 8


def ar(n, s):
    return 0 if n == 1 else 2 * (n - 1) * s // n


def rs(n, s):
    return 0 if n == 1 else (n - 1) * s


def ag(n, s):
    return 0 if n == 1 else (n - 1) * s


def flags(model, case):
    c = MODELS[model]
    tp, pp, v, dp, sp = CASES[case]
    f = ["--mock-data", "--num-layers", c["L"], "--hidden-size", c["C"], "--num-attention-heads", c["NH"],
         "--ffn-hidden-size", c["F"], "--seq-length", c["T"], "--vocab-size", c["V"],
         "--make-vocab-size-divisible-by", c["div"], "--micro-batch-size", c["B"],
         "--global-batch-size", c["GB"], "--train-iters", 2, "--log-interval", 1, "--eval-iters", 0]
    if c["NKV"] != c["NH"]:
        f += ["--group-query-attention", "--num-query-groups", c["NKV"]]
    if not c["layernorm"]:
        f += ["--normalization", "RMSNorm"]
    if c["swiglu"]:
        f += ["--swiglu"]
    if not c["bias"]:
        f += ["--disable-bias-linear"]
    if c["untie"]:
        f += ["--untie-embeddings-and-output-weights"]
    if not c["learned_pos"]:
        f += ["--position-embedding-type", "rope"]
    f += ["--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size", pp]
    if v > 1:
        f += ["--num-layers-per-virtual-pipeline-stage", c["L"] // (pp * v)]
    if sp:
        f += ["--sequence-parallel"]
    if case.endswith("-dist"):
        f += ["--use-distributed-optimizer"]
    elif sharding(case) != "no_shard":
        f += ["--data-parallel-sharding-strategy", sharding(case)]
    return tp * pp * dp, " ".join(str(x) for x in f)


def local_params(c, tp, pp, v, stage):
    """(elements on this rank, layer or -1) of every parameter stage `stage` holds, in table order."""
    C, HS = c["C"], c["C"] // c["NH"]
    QKV = (c["NH"] + 2 * c["NKV"]) * HS
    F1 = 2 * c["F"] if c["swiglu"] else c["F"]
    m = c["div"] * tp
    Vp = (c["V"] + m - 1) // m * m
    first, last = stage == 0, stage == pp - 1
    chunk = c["L"] // (pp * v)
    out = []
    if first or (last and not c["untie"]):
        out.append((Vp // tp * C, -1))  # word embedding (the last stage's tied copy)
    if first and c["learned_pos"]:
        out.append((c["T"] * C, -1))  # position embedding (max positions = seq length)
    for l in range(c["L"]):
        if (l // chunk) % pp != stage:
            continue
        norm = [C, C] if c["layernorm"] else [C]
        t = norm + [QKV // tp * C] + ([QKV // tp] if c["bias"] else [])
        t += [C * (c["NH"] * HS // tp)] + ([C] if c["bias"] else [])
        t += norm + [F1 // tp * C] + ([F1 // tp] if c["bias"] else [])
        t += [C * (c["F"] // tp)] + ([C] if c["bias"] else [])
        out += [(n, l) for n in t]
    if last:
        out += [(C, -1)] * (2 if c["layernorm"] else 1)  # final norm
        if c["untie"]:
            out.append((Vp // tp * C, -1))
    return out, Vp


def expected(model, case):
    c = MODELS[model]
    tp, pp, v, dp, sp = CASES[case]
    sp = sp and tp > 1
    C, T, B = c["C"], c["T"], c["B"]
    N = B * T
    Nr = N // tp if sp else N
    micro = c["GB"] // (B * dp)
    first, last = True, pp == 1  # rank 0 is stage 0
    params, Vp = local_params(c, tp, pp, v, 0)
    layers = sorted({l for _, l in params if l >= 0})
    act = N * C * F32  # a full activation
    shard = Nr * C * F32  # a sequence shard
    # TP
    if sp:
        leave, enter, leave_bwd, enter_bwd = rs(tp, shard), ag(tp, shard), ag(tp, shard), rs(tp, shard)
    else:
        leave, enter, leave_bwd, enter_bwd = ar(tp, act), 0, 0, ar(tp, act)
    fwd = (leave if first else 0) + len(layers) * 2 * (enter + leave)
    bwd = (leave_bwd if first else 0) + len(layers) * 2 * (leave_bwd + enter_bwd)
    if last:
        fwd += enter + ar(tp, N * F32) + ar(tp, 2 * N * F32)
        bwd += enter_bwd
    norms_per_layer = 2 if c["layernorm"] else 1
    norm_sync = 0
    if sp:
        n_norms = 2 * norms_per_layer * len(layers) + (norms_per_layer if last else 0)
        norm_sync = n_norms * ar(tp, C * F32)
    out = {"tp": micro * (fwd + bwd) + norm_sync + ar(tp, F64)}
    # PP
    out["pp"] = 0 if pp == 1 else micro * (2 * v - 1) * Nr * C * F32 + ar(pp, 2 * F64) + ar(pp, F64)
    out["embedding"] = ar(2, Vp // tp * C * F32) if pp > 1 and not c["untie"] else 0
    # DP
    assert dp <= 2, "bucketed all-reduces add up to one only for 2 ranks (integer division)"
    floats = flat_floats(params, dp)
    shard = sharding(case)
    if shard == "optim":
        piece = floats // dp * F32
        out["dp"] = rs(dp, piece) + ag(dp, piece) + ar(dp, 2 * F64) + ar(dp, F64)
    elif shard != "no_shard":
        # one bucket of every layer (the default bucket size holds them all) cut at multiples of
        # 16 d floats, reduce-scattered every micro-batch; the buckets below it (embeddings) and
        # above it (final norm, head) once a step. optim_grads gathers the parameters after the
        # step; optim_grads_params gathers every bucket before each micro-batch's forward and
        # again before its backward, and never after the step.
        g = 16 * dp
        lo, hi = layer_extent(params)
        mid = max(0, hi // g * g - (lo + g - 1) // g * g)
        gathers = 1 if shard == "optim_grads" else 2 * micro
        out["dp"] = (micro * rs(dp, mid // dp * F32) + rs(dp, (floats - mid) // dp * F32)
                     + gathers * ag(dp, floats // dp * F32) + ar(dp, 2 * F64) + ar(dp, F64))
    else:
        out["dp"] = ar(dp, floats * F32) + ar(dp, 2 * F64)
    return out


def flat_floats(params, dp):
    """P: floats of the flat buffers: every tensor padded to 16 floats, the whole to 16 d."""
    floats = sum((n + 15) // 16 * 16 for n, l in params)
    return (floats + 16 * dp - 1) // (16 * dp) * (16 * dp)


def layer_extent(params):
    """[lo, hi) floats of the flat buffer that the layers' tensors (padded) take."""
    off, lo, hi = 0, None, 0
    for n, l in params:
        if l >= 0:
            lo = off if lo is None else lo
            hi = off + (n + 15) // 16 * 16
        off += (n + 15) // 16 * 16
    return lo, hi


def state_bytes(model, case):
    """The bytes rank 0 keeps between steps, by ZeRO's formulas on P (fp32 parameters,
    gradients, two moments): the sharded ones 1 / d of the whole."""
    c = MODELS[model]
    tp, pp, v, dp, sp = CASES[case]
    params = local_params(c, tp, pp, v, 0)[0]
    P = flat_floats(params, dp) * F32
    shard = sharding(case)
    # unsharded moments cover the tensors only, not the padding of the whole to 16 d floats
    whole = sum((n + 15) // 16 * 16 for n, l in params) * F32
    return {"params": P // dp if shard == "optim_grads_params" else P,
            "grads": P // dp if shard in ("optim_grads", "optim_grads_params") else P,
            "optim": 2 * P // dp if shard != "no_shard" else 2 * whole}


def main():
    cmd = sys.argv[1]
    if cmd == "flags":
        n, f = flags(sys.argv[2], sys.argv[3])
        print(n, f)
        return 0
    if cmd == "table":
        for model in MODELS:
            for case in CASES:
                e = expected(model, case)
                print(f"| {model} | {case} | " + " | ".join(f"{e[k]:,}" for k in ("tp", "pp", "dp", "embedding")) + " |")
        return 0
    metrics, model, case = sys.argv[2:5]
    want = expected(model, case)
    recs = [r for r in map(json.loads, filter(str.strip, open(metrics))) if "loss" in r]
    lines = [r["comm_bytes"] for r in recs]
    ok = len(lines) > 0 and all(got == want for got in lines)
    print(f"{'ok  ' if ok else 'FAIL'} {model} {case}: measured {lines[-1] if lines else None} analytic {want}")
    state = state_bytes(model, case)
    ok_state = len(recs) > 0 and all(r.get("state_bytes") == state for r in recs)
    print(f"{'ok  ' if ok_state else 'FAIL'} {model} {case}: bytes kept {recs[-1].get('state_bytes') if recs else None} formula {state}")
    return 0 if ok and ok_state else 1


sys.exit(main())
