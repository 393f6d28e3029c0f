#!/usr/bin/python3
"""allreduce_bf16_error.py -- how far a bf16 gradient allreduce (--grad-dtype bf16) lands from the
exact average, against fp32, at 2..128 ranks: the arithmetic of each communicator replayed in its
ring order on the same gradients (numpy; float64 for the exact average).

  mntrain cpu   src/dtype.c mnt_reduce on each ring step: dst = (dst + src) / div in fp32, rounded
                to the element type at every step (N-1 roundings of the partial sum), the division
                by N in fp32 at the last reducing step
  NCCL bf16     ncclAvg on bf16 (reduce_kernel.h, FuncPreMulSum<__nv_bfloat16>, sm_80+): every
                input multiplied by 1/N held as a bf16 scalar (__hmul2, rounded), then pairwise
                bf16 sums (__hadd2, each rounded): N-1 roundings, and 1/N itself rounded to bf16
                (for N not a power of two a bias of the whole average, e.g. +0.195% at N = 3)
  fp32          the fp32 ring: the same order, fp32 roundings

The ring order is what both run for large buckets (NCCL may pick a tree or NVLS for other sizes and
machines: other orders, other error). Gradients per element: 'independent' ranks (each rank's
value N(0,1): the average is small against its terms, the hard case) and 'correlated' ranks
(0.7 common + 0.3 own). Printed: the relative L2 error of the average against float64, and the
floor: the exact average rounded to bf16 once.

usage: benchmarks/allreduce_bf16_error.py [--elements N] [--seed S]
"""
import argparse

import numpy as np


def bf16(x):
    """round float32 values to the nearest bf16 (ties to even), returned as float32"""
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    s16 = np.uint64(16)
    rounded = ((u + np.uint64(0x7FFF) + ((u >> s16) & np.uint64(1))) >> s16) << s16
    return rounded.astype(np.uint32).view(np.float32)


def ring_cpu(g, dtype):
    """mntrain's cpu ring: sequential sum, each step in fp32 rounded to the element type, / N last"""
    n = g.shape[0]
    acc = g[0].astype(np.float32)
    for r in range(1, n):
        s = acc + g[r].astype(np.float32)
        if r == n - 1:
            s = s / np.float32(n)
        acc = bf16(s) if dtype == "bf16" else s.astype(np.float32)
    return acc


def ring_nccl_bf16(g):
    """NCCL's bf16 ncclAvg in ring order: x * bf16(1/N) rounded, then bf16 sums"""
    n = g.shape[0]
    scale = bf16(np.float32(1.0 / n))[0]
    acc = bf16(g[0] * scale)
    for r in range(1, n):
        acc = bf16(acc + bf16(g[r] * scale))
    return acc


def rel(a, exact):
    return float(np.linalg.norm(a.astype(np.float64) - exact) / np.linalg.norm(exact))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elements", type=int, default=1 << 16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    print("# relative L2 error of the averaged gradient against float64 (%d elements per rank, seed %d)" %
          (a.elements, a.seed))
    print("# %-12s %6s %12s %12s %12s %12s %12s" % ("gradients", "ranks", "fp32 ring", "bf16 cpu", "bf16 nccl",
                                                   "bf16 floor", "nccl/floor"))
    for kind in ("independent", "correlated"):
        for n in (2, 3, 4, 8, 16, 32, 64, 96, 128):
            z = rng.standard_normal((n, a.elements))
            if kind == "correlated":
                z = 0.7 * rng.standard_normal(a.elements) + 0.3 * z
            g = bf16(z.astype(np.float32))  # what each rank casts its fp32 gradient to
            exact = g.astype(np.float64).mean(axis=0)
            f32 = ring_cpu(g, "fp32")
            cpu = ring_cpu(g, "bf16")
            nccl = ring_nccl_bf16(g)
            floor = bf16(exact.astype(np.float32))
            print("  %-12s %6d %12.2e %12.2e %12.2e %12.2e %12.1f" % (kind, n, rel(f32, exact), rel(cpu, exact),
                                                                   rel(nccl, exact), rel(floor, exact),
                                                                   rel(nccl, exact) / rel(floor, exact)))


if __name__ == "__main__":
    main()
