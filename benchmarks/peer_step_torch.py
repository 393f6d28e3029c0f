#!/usr/bin/python3
"""Peer for `mntrain bench step`: PyTorch's training step on the same synthetic problem.

    PYTHON benchmarks/peer_step_torch.py --arch resnet50 --size 224 --batch 16 --steps 5 --threads 2 [--mode M]

torchvision's model, SGD (lr 0.1, momentum 0.9, weight decay 1e-4), cross-entropy, one warm-up
step, then the mean over --steps; same flag names and output line as mntrain. --mode: fp32
(default), channels_last (the model and input in torch.channels_last: oneDNN's blocked-free path),
bf16 (torch.autocast("cpu", dtype=torch.bfloat16) with channels_last: what a PyTorch user turns on
for bf16 on a CPU). PYTHON: Debian's python3 (PyTorch 1.13) or today's release in the venv
benchmarks/peer_venv.sh makes.
"""
import argparse
import resource
import time

import torch
import torch.nn as nn
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--mode", choices=("fp32", "channels_last", "bf16"), default="fp32")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = getattr(torchvision.models, a.arch)(num_classes=a.classes)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.rand(a.batch, 3, a.size, a.size) * 2 - 1
    y = torch.randint(0, a.classes, (a.batch,))
    if a.mode != "fp32":
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16")
    print(f"# PyTorch {torch.__version__} step: {a.arch}, {a.size} px, batch {a.batch}, {a.classes} classes, "
          f"{torch.get_num_threads()} threads, mkldnn {torch.backends.mkldnn.is_available()}, mode {a.mode}")
    total = 0.0
    for k in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp:
            out = m(x)
        loss = nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if k >= a.warmup:
            total += dt
        print(f"{'warm-up' if k < a.warmup else 'step'} {k + 1 if k < a.warmup else k - a.warmup + 1}: "
              f"{dt:.3f} s, {a.batch / dt:.2f} img/s, loss {loss.item():.4f}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{a.arch} {a.size} px batch {a.batch} threads {torch.get_num_threads()}: {a.batch * a.steps / total:.2f} img/s "
          f"(mean of {a.steps} steps), peak memory {peak / a.batch:.1f} MB per image")


if __name__ == "__main__":
    main()
