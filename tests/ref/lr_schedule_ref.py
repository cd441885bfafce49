"""Megatron-LM's learning-rate schedule (megatron/core/optimizer_param_scheduler.py's get_lr, and
the steps that training.py's get_optimizer_param_scheduler gives it), written again here from
those semantics as the oracle of tests/model/test_lr_schedule.sh.

The scheduler counts samples: it starts at 0 steps and each optimizer step adds the global batch
size. Iteration-based flags are turned into samples (decay = lr_decay_iters x global batch,
warmup = lr_warmup_iters x global batch); sample-based flags are taken as they are; a warmup
fraction is a fraction of the decay. The learning rate that iteration i's optimizer step uses is
the one after i - 1 steps.

    lr_schedule_ref.py METRICS.jsonl KEY=VALUE...   (keys: lr, min_lr, init, style, gbs,
        train_iters | train_samples, warmup_iters | warmup_samples | warmup_fraction,
        decay_iters | decay_samples, wsd_iters | wsd_samples, wsd_style; and for the weight decay
        (get_wd, over the training length in samples, checked against "weight_decay"):
        wd_start, wd_end, wd_style; rampup=START,INCREMENT,SAMPLES with train_samples: the global
        batch ramp-up of --rampup-batch-size; decoupled_lr, decoupled_min_lr (default min_lr):
        the word embedding's and output layer's rates on the same warmup and decay, checked
        against "decoupled_lr")

Checks every row's "lr" against the schedule (relative 1e-12) and that there is one row per
iteration; prints the first mismatch and exits 1, else prints the count.

The batch ramp-up (megatron/core/num_microbatches_calculator.py's ramp-up calculator, and
training.py's update_train_iters): n = (gbs - START) / INCREMENT ramp steps share SAMPLES
samples; after c consumed samples the batch is START + INCREMENT * int(c / (SAMPLES / n)), or gbs
once c > SAMPLES. The training length is the iterations taken while c <= SAMPLES plus the whole
gbs batches left of train_samples. Each row's "global_batch_size" and "consumed_samples" are
checked too, and the schedule advances by each iteration's batch.
"""
import json
import math
import sys


def ramp_batches(o, gbs):
    """The global batch of every iteration, or None without a ramp-up."""
    if "rampup" not in o:
        return None
    start, incr, samples = (int(v) for v in o["rampup"].split(","))
    per_step = samples / ((gbs - start) // incr)

    def batch(c):
        return gbs if c > samples else start + incr * int(c / per_step)

    batches, c = [], 0
    while c <= samples:
        batches.append(batch(c))
        c += batches[-1]
    batches += [gbs] * ((int(o["train_samples"]) - c) // gbs)
    return batches


def schedule(o):
    gbs = int(o["gbs"])
    batches = ramp_batches(o, gbs)
    if "train_samples" in o:
        iters = len(batches) if batches else int(o["train_samples"]) // gbs
        decay = int(o.get("decay_samples", o["train_samples"]))
        warmup = float(o.get("warmup_samples", 0))
        wsd = int(o.get("wsd_samples", 0))
    else:
        iters = int(o["train_iters"])
        decay = int(o.get("decay_iters", iters)) * gbs
        warmup = float(o.get("warmup_iters", 0)) * gbs
        wsd = int(o.get("wsd_iters", 0)) * gbs
    if "warmup_fraction" in o:
        warmup = float(o["warmup_fraction"]) * decay
    init = float(o.get("init", 0))
    style, wsd_style = o.get("style", "linear"), o.get("wsd_style", "exponential")

    def lr_at(n, max_lr, min_lr):
        if warmup > 0 and n <= warmup:
            return init + (max_lr - init) * n / warmup
        if style == "constant":
            return max_lr
        if n > decay:
            return min_lr
        if style == "inverse-square-root":
            return max(min_lr, max_lr * math.sqrt(max(warmup, 1)) / math.sqrt(max(n, 1)))
        ratio = (n - warmup) / (decay - warmup)
        if style == "linear":
            coeff = 1.0 - ratio
        elif style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:  # WSD
            start = decay - wsd
            r = (n - start) / wsd
            coeff = (1.0 if n <= start else
                     1.0 - r if wsd_style == "linear" else
                     0.5 * (math.cos(math.pi * r) + 1.0) if wsd_style == "cosine" else
                     1.0 - math.sqrt(r) if wsd_style == "minus_sqrt" else
                     2.0 * math.pow(0.5, r) - 1.0)
        return min_lr + coeff * (max_lr - min_lr)

    incr = int(o["train_samples"]) if "train_samples" in o else iters * gbs
    wd_start, wd_end, wd_style = float(o.get("wd_start", 0)), float(o.get("wd_end", 0)), o.get("wd_style")

    def wd_at(n):
        if n > incr or wd_style == "constant":
            return wd_end
        r = n / incr
        coeff = r if wd_style == "linear" else 0.5 * (math.cos(math.pi * (1 - r)) + 1.0)
        return wd_start + coeff * (wd_end - wd_start)

    batches = batches or [gbs] * iters
    steps = [sum(batches[:i]) for i in range(iters)]
    min_lr = float(o.get("min_lr", 0))
    lrs = [lr_at(n, float(o["lr"]), min_lr) for n in steps]
    dec = None
    if "decoupled_lr" in o:
        dmin = float(o.get("decoupled_min_lr", min_lr))
        dec = [lr_at(n, float(o["decoupled_lr"]), dmin) for n in steps]
    return iters, lrs, ([wd_at(n) for n in steps] if wd_style else None), batches, dec


def main():
    path = sys.argv[1]
    opts = dict(a.split("=", 1) for a in sys.argv[2:])
    iters, want, want_wd, batches, want_dec = schedule(opts)
    rows = [r for r in map(json.loads, open(path)) if "loss" in r]  # not the test loss after training
    if [r["iteration"] for r in rows] != list(range(1, iters + 1)):
        print(f"{path}: iterations {[r['iteration'] for r in rows]}, expected 1..{iters}")
        return 1
    for k, r in enumerate(rows):
        consumed = sum(batches[:k + 1])
        if r["consumed_samples"] != consumed or r.get("global_batch_size", batches[k]) != batches[k]:
            print(f"{path}: iteration {r['iteration']}: global batch {r.get('global_batch_size')}, "
                  f"consumed {r['consumed_samples']}; Megatron's ramp: {batches[k]}, {consumed}")
            return 1
        if "rampup" in opts and "global_batch_size" not in r:
            print(f"{path}: iteration {r['iteration']}: no global_batch_size with a ramp-up")
            return 1
        for key, ws in (("lr", want), ("weight_decay", want_wd), ("decoupled_lr", want_dec)):
            if ws is None:
                continue
            got, w = r.get(key), ws[k]
            if got is None or (abs(got - w) > 1e-12 * max(abs(w), 1e-30) and not (w == 0 and got == 0)):
                print(f"{path}: iteration {r['iteration']}: {key} {got!r}, Megatron's schedule {w!r}")
                return 1
    print(f"{path}: {iters} iterations match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
