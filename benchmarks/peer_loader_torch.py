#!/usr/bin/python3
"""Peer for `mntrain bench loader`: a PyTorch DataLoader over the same HDF5 shards, read with h5py
and transformed by torchvision (RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize with
the index's mean/std) — the usual way to feed PyTorch from HDF5.

    /usr/bin/python3 benchmarks/peer_loader_torch.py --data DIR --size 224 --threads 1 --batch 64

--threads is the DataLoader's num_workers (0 reads in the main process). Prints img/s and img/s
per worker, like mntrain. Needs python3-torch, python3-torchvision, python3-h5py.
"""
import argparse
import bisect
import json
import os
import time

import h5py
import numpy as np
import torch
import torchvision.transforms as T


class Shards(torch.utils.data.Dataset):
    def __init__(self, d, transform):
        self.index = json.load(open(os.path.join(d, "index.json")))
        self.paths = [os.path.join(d, s["file"]) for s in self.index["shards"]]
        self.starts = list(np.cumsum([0] + [s["samples"] for s in self.index["shards"]]))
        self.files = None  # opened lazily, once per worker process
        self.transform = transform

    def __len__(self):
        return self.starts[-1]

    def __getitem__(self, g):
        if self.files is None:
            self.files = [h5py.File(p, "r") for p in self.paths]
        k = bisect.bisect_right(self.starts, g) - 1
        f, i = self.files[k], g - self.starts[k]
        img = f["images"][i]
        if img.shape[2] == 1:
            img = img[:, :, 0]
        return self.transform(img), int(f["labels"][i])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    idx = json.load(open(os.path.join(a.data, "index.json")))
    tf = T.Compose([T.ToPILImage(), T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(idx["mean"], idx["std"])])
    ds = Shards(a.data, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.threads, drop_last=True,
                                     persistent_workers=a.threads > 0)
    print(f"# PyTorch {torch.__version__} DataLoader: {a.data} -> {a.size} px training, batch {a.batch}, "
          f"{a.threads} workers")
    n, t0 = 0, None
    while True:
        for k, (x, y) in enumerate(dl):
            if t0 is None:  # the first batch is warm-up
                t0 = time.perf_counter()
                continue
            n += 1
            if time.perf_counter() - t0 >= a.seconds:
                break
        if t0 is not None and time.perf_counter() - t0 >= a.seconds:
            break
    dt = time.perf_counter() - t0
    rate = n * a.batch / dt
    per = rate / max(a.threads, 1)
    print(f"loader {a.size} px training threads {a.threads}: {rate:.1f} img/s, {per:.1f} img/s per thread "
          f"({n} batches in {dt:.2f} s)")


if __name__ == "__main__":
    main()
