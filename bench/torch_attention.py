#!/usr/bin/env python3
"""The PyTorch peer of bench_cuda_attention: causal bf16 attention through
F.scaled_dot_product_attention at the same shapes (B 16, T 1024; 12 heads of 64, 16 of 64,
16 of 128; B 4, T 2048, 32 query heads of 128 on 8 key/value heads through enable_gqa), once per
SDPA backend that PyTorch offers on this GPU (flash, cuDNN, memory-
efficient), forward and backward timed apart with CUDA events. Inputs in PyTorch's layout
[B, heads, T, head size], already bf16 (no conversions counted); the backward is
torch.autograd.grad of the output against q, k and v with a fixed output gradient. TFLOP/s use
bench_cuda_attention's causal count: forward 4 B NH T^2 HS / 2, backward 2.5 times that.

usage: torch_attention.py [calls]      (default 50)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [("124M", 16, 1024, 12, 12, 64), ("350M", 16, 1024, 16, 16, 64),
          ("HS128", 16, 1024, 16, 16, 128), ("GQA", 4, 2048, 32, 8, 128)]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def mean_ms(fn, calls):
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / calls


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 SDPA, causal, "
          f"mean of {calls} calls after 3 warm-up calls")
    print(f"{'shape':6} {'backend':9} | {'fwd ms':>8} {'TFLOP/s':>8} | {'bwd ms':>8} {'TFLOP/s':>8}")
    for name, B, T, NH, NKV, HS in SHAPES:
        q, k, v = (torch.randn(B, heads, T, HS, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for heads in (NH, NKV, NKV))
        dout = 0.1 * torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * B * NH * T * T * HS / 2
        gqa = NKV != NH

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        for bname, backend in BACKENDS:
            try:
                with sdpa_kernel([backend]):
                    out = sdpa()
                    fwd = mean_ms(sdpa, calls)
                    bwd = mean_ms(lambda: torch.autograd.grad(out, (q, k, v), dout,
                                                              retain_graph=True), calls)
            except RuntimeError as e:
                print(f"{name:6} {bname:9} | not available: {str(e).splitlines()[0][:60]}")
                continue
            print(f"{name:6} {bname:9} | {fwd:8.4f} {flops / (fwd * 1e9):8.1f} | "
                  f"{bwd:8.4f} {2.5 * flops / (bwd * 1e9):8.1f}")


if __name__ == "__main__":
    main()
