#!/usr/bin/env python3
"""Peer for `mntrain bench step --device cuda`: PyTorch's training step on one GPU, same problem.

    python3 benchmarks/peer_step_torch_gpu.py --arch resnet50 --size 224 --batch 256 --seconds 45

torchvision's model in channels_last, torch.autocast(dtype=torch.bfloat16) (--precision fp32 to
turn it off), SGD (lr 0.1, momentum 0.9, weight decay 1e-4), cross-entropy, synthetic data made
on the GPU once, cudnn.benchmark on (PyTorch's usual setting for fixed shapes; --no-cudnn-benchmark
to turn it off), no torch.compile. Warm-up steps (at least --warmup steps and --warmup-seconds),
then steps until --seconds have passed (or --steps, if given), each step synchronised, so the
rate is what a training loop that reads its loss each step gets. The last line is parseable:

    peer_step_torch_gpu: resnet50 224 px batch 256 bf16: 1234.56 img/s (N steps, S s, peak M GiB)

Needs a CUDA GPU, torch and torchvision (the GPU machine's python3 has them). The CPU peer,
peer_step_torch.py (Debian's PyTorch), is left as it is.
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--seconds", type=float, default=45.0, help="timed duration (default 45)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps instead of --seconds")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first, at least (default 10)")
    ap.add_argument("--warmup-seconds", type=float, default=5.0, help="untimed seconds first, at least (default 5)")
    ap.add_argument("--no-cudnn-benchmark", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: only to try this script out")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("peer_step_torch_gpu: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cudnn.benchmark = not a.no_cudnn_benchmark
    torch.manual_seed(a.seed)
    m = getattr(torchvision.models, a.arch)(num_classes=a.classes).to(dev, memory_format=torch.channels_last)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = (torch.rand(a.batch, 3, a.size, a.size, device=dev) * 2 - 1).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)
    bf16 = a.precision == "bf16"
    name = torch.cuda.get_device_properties(dev).name if cuda else "CPU"
    print(f"# PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) on "
          f"{name}: {a.arch}, {a.size} px, batch {a.batch}, {a.classes} classes, {a.precision} "
          f"(autocast {bf16}), channels_last, cudnn.benchmark {torch.backends.cudnn.benchmark}", flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    k = 0
    while k < a.warmup or time.perf_counter() - t0 < a.warmup_seconds:
        loss = step()
        sync()
        k += 1
    print(f"warm-up: {k} steps, {time.perf_counter() - t0:.1f} s, loss {loss.item():.4f}", flush=True)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    n = 0
    t0 = time.perf_counter()
    last = t0
    while (a.steps and n < a.steps) or (not a.steps and time.perf_counter() - t0 < a.seconds):
        loss = step()
        sync()
        n += 1
        now = time.perf_counter()
        if now - last >= 5.0:
            print(f"step {n}: {n * a.batch / (now - t0):.2f} img/s so far, loss {loss.item():.4f}", flush=True)
            last = now
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    print(f"peer_step_torch_gpu: {a.arch} {a.size} px batch {a.batch} {a.precision}: {n * a.batch / dt:.2f} img/s "
          f"({n} steps, {dt:.1f} s, peak {peak:.1f} GiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
