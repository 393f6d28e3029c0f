#!/usr/bin/python3
"""Peer for `mntrain bench allreduce`: PyTorch's gloo allreduce, same sizes, same columns.

Run it under Slurm exactly like mntrain, side by side:
    srun --mpi=none -N 1 -n 2 /usr/bin/python3 benchmarks/peer_allreduce_gloo.py -b 1M -e 64M -f 4
Ranks meet through a file in a directory every node sees (default /tmp; --rendezvous DIR).
busbw = algbw * 2(n-1)/n as in nccl-tests. Needs PyTorch: Debian's python3-torch (1.13), or today's
release in the venv benchmarks/peer_venv.sh makes (what allreduce_peers.sh runs).
"""
import argparse
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist


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
    ap.add_argument("--rendezvous", default="/tmp")
    a = ap.parse_args()
    rank = int(os.environ["SLURM_PROCID"])
    size = int(os.environ["SLURM_NTASKS"])
    job = os.environ.get("SLURM_JOB_ID", "0") + "." + os.environ.get("SLURM_STEP_ID", "0")
    path = os.path.join(a.rendezvous, f"gloo-rendezvous-{job}")
    torch.set_num_threads(1)
    # gloo binds to the address the hostname resolves to; the local cluster's nodes share the
    # hostname but not the network namespace, so name the node's own interface
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        names = [n for _, n in socket.if_nameindex() if n != "lo"]
        if names:
            os.environ["GLOO_SOCKET_IFNAME"] = names[0]
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    if rank == 0:
        print(f"# gloo allreduce (PyTorch {torch.__version__}): {size} ranks on "
              f"{os.environ.get('SLURM_NNODES', '?')} nodes, float sum, iters {a.iters}, warm-up {a.warmup_iters}")
        print(f"# {'size':>12} {'count':>12} {'type':>6} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}")
        print(f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}")
    sz, total, rows = float(parse_size(a.minbytes)), 0.0, 0
    while sz <= parse_size(a.maxbytes) * 1.0000001:
        count = int(sz) // 4
        x = torch.full((count,), float(rank + 1))
        dist.all_reduce(x)
        want = size * (size + 1) / 2
        wrong = torch.tensor([int((x != want).sum())])
        for _ in range(a.warmup_iters):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        algbw = count * 4 / t.item() / 1e9
        busbw = algbw * 2 * (size - 1) / size
        total += busbw
        rows += 1
        if rank == 0:
            print(f"  {count * 4:12d} {count:12d} {'float':>6} {t.item() * 1e6:10.1f} {algbw:8.3f} {busbw:8.3f} {int(wrong):7d}",
                  flush=True)
        sz *= a.stepfactor
    if rank == 0:
        print(f"# Avg bus bandwidth    : {total / rows:.4f} GB/s")
    dist.destroy_process_group()
    if rank == 0:
        try:
            os.unlink(path)
        except OSError:
            pass


if __name__ == "__main__":
    main()
