"""Summarise a loom metrics file (--metrics-file, one JSON object per iteration) over the
iterations after a warm-up: mean ms per iteration and the throughput figures rescaled to it.

    python3 bench/loom_metrics.py METRICS WARMUP LABEL [GPUS]   -> one JSON line
"""
import json
import sys


def summarise(path, warmup, label, gpus=None):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    rows = [r for r in rows if "loss" in r]  # iterations, not evaluations after training
    timed = [r for r in rows if r["iteration"] > warmup]
    if not timed:
        raise SystemExit(f"{path}: no iteration after the {warmup} warm-up iterations")
    ms = sum(r["ms_per_iter"] for r in timed) / len(timed)
    last = timed[-1]
    k = last["ms_per_iter"] / ms  # the last row's figures, rescaled to the mean step time
    out = {"impl": label, "ms_per_iter": round(ms, 3), "tokens_per_s": round(last["tokens_per_s"] * k, 1),
           "tflops": round(last["tflops_per_rank"] * k, 2), "mfu": round(last["mfu"] * k, 4),
           "peak_mem_bytes": last.get("peak_mem_bytes", 0), "loss": round(last["loss"], 4)}
    if "pipeline_wait_fraction" in last:
        out["pipeline_wait_fraction"] = round(last["pipeline_wait_fraction"], 4)
    if gpus is not None:
        out["gpus"] = gpus
    return out


if __name__ == "__main__":
    gpus = int(sys.argv[4]) if len(sys.argv) > 4 else None
    print(json.dumps(summarise(sys.argv[1], int(sys.argv[2]), sys.argv[3], gpus)))
