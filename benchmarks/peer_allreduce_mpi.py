#!/usr/bin/env python3
"""Peer for `mntrain bench allreduce`: Open MPI's MPI_Allreduce through mpi4py (what ChainerMN's CPU
communicators call), same sizes, same columns as peer_allreduce_gloo.py.

Started by Slurm exactly like mntrain (Open MPI reads Slurm's PMIx server; no mpirun):
    srun --mpi=pmix -N 2 -n 2 $(benchmarks/peer_venv.sh mpi4py) benchmarks/peer_allreduce_mpi.py -b 64M -e 64M
In place (MPI.IN_PLACE), float sum; the time is the slowest rank's mean; busbw = algbw * 2(n-1)/n as in
nccl-tests. Needs the venv benchmarks/peer_venv.sh makes (mpi4py over Debian's Open MPI 4.1).
"""
import argparse
import time

import numpy as np
from mpi4py import MPI


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--minbytes", default="1K")
    ap.add_argument("-e", "--maxbytes", default="64M")
    ap.add_argument("-f", "--stepfactor", type=float, default=4)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = len(set(comm.allgather(MPI.Get_processor_name())))  # collective: every rank
    if rank == 0:
        lib = MPI.Get_library_version().splitlines()[0]
        print(f"# MPI_Allreduce (mpi4py {__import__('mpi4py').__version__}, {lib}): {size} ranks on "
              f"{hosts} hosts, float sum, in place, iters {a.iters}, "
              f"warm-up {a.warmup_iters}")
        print(f"# {'size':>12} {'count':>12} {'type':>6} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}")
        print(f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}")
    sz, total, rows = float(parse_size(a.minbytes)), 0.0, 0
    while sz <= parse_size(a.maxbytes) * 1.0000001:
        count = int(sz) // 4
        x = np.full(count, float(rank + 1), dtype=np.float32)
        comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        wrong = comm.allreduce(int(np.count_nonzero(x != size * (size + 1) / 2)), op=MPI.SUM)
        for _ in range(a.warmup_iters):
            comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        t = comm.allreduce((time.perf_counter() - t0) / a.iters, op=MPI.MAX)
        algbw = count * 4 / t / 1e9
        busbw = algbw * 2 * (size - 1) / size
        total += busbw
        rows += 1
        if rank == 0:
            print(f"  {count * 4:12d} {count:12d} {'float':>6} {t * 1e6:10.1f} {algbw:8.3f} {busbw:8.3f} {wrong:7d}",
                  flush=True)
        sz *= a.stepfactor
    if rank == 0:
        print(f"# Avg bus bandwidth    : {total / rows:.4f} GB/s")


if __name__ == "__main__":
    main()
