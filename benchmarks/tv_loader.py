#!/usr/bin/python3
"""torchvision's ImageNet training input pipeline on a folder of JPEGs: the peer of `mntrain bench
loader` in benchmarks/data_scale.sh.

    /usr/bin/python3 benchmarks/tv_loader.py --data ROOT [--size 224] [--workers 1] [--batch 64] [--seconds 6]

ImageFolder(ROOT) with PIL decoding the original files, RandomResizedCrop(size), RandomHorizontalFlip,
ToTensor, Normalize (ImageNet's mean and std): the transform of PyTorch's ImageNet example
(pytorch/examples imagenet/main.py), fed by a torch.utils.data.DataLoader with --workers worker
processes (batch --batch, persistent workers, default prefetch), one torch thread in every process.
The sampler draws permutation after permutation without an epoch's end (as a long ImageNet epoch
is, for a few thousand files), so no measurement catches the workers idle between epochs. The first 2 batches per worker are warm-up (worker start, first file reads); then batches are
counted for --seconds. Prints img/s and img/s per worker in `mntrain bench loader`'s words, so one
parser reads both. Needs torchvision: Debian's python3-torchvision (at /usr/bin/python3), or today's
release in the venv benchmarks/peer_venv.sh makes (what loader_peers.sh runs).
"""
import argparse
import time

import torch
import torchvision
import torchvision.transforms as T


def one_thread(_worker_id):
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder root: ROOT/<class>/<image>")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=1, help="DataLoader worker processes (>= 1)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.workers < 1:
        ap.error("--workers must be at least 1 (the comparison is per worker process)")
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(a.data, transform=tf)
    # one 'epoch' of 1000 permutations (torch 1.13's RandomSampler without replacement concatenates them)
    sampler = torch.utils.data.RandomSampler(ds, num_samples=1000 * len(ds))
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers, drop_last=True,
                                     persistent_workers=True, worker_init_fn=one_thread)
    print(f"# torchvision {torchvision.__version__} (PyTorch {torch.__version__}) ImageFolder: {a.data} "
          f"({len(ds)} files, {len(ds.classes)} classes) -> {a.size} px training, batch {a.batch}, "
          f"{a.workers} workers")
    warm = 2 * a.workers
    seen, n, t0 = 0, 0, None
    while t0 is None or time.perf_counter() - t0 < a.seconds:
        for x, _ in dl:
            seen += 1
            if seen == warm:
                t0 = time.perf_counter()
            elif seen > warm:
                n += 1
                if time.perf_counter() - t0 >= a.seconds:
                    break
    dt = time.perf_counter() - t0
    rate = n * a.batch / dt
    print(f"loader {a.size} px training threads {a.workers}: {rate:.1f} img/s, {rate / a.workers:.1f} img/s per thread "
          f"({n} batches in {dt:.2f} s; {tuple(x.shape)} {x.dtype})")


if __name__ == "__main__":
    main()
