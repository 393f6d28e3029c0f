#!/usr/bin/python3
"""`mntrain convert idx` on Fashion-MNIST's test split, read back with h5py (the real IDX files
of Debian's dataset-fashion-mnist): every shard's images and labels equal the IDX samples named by
its source_index, the source indices are a permutation of all samples, index.json agrees, and
`mntrain inspect --verify` passes.  usage: convert_h5py.py path/to/mntrain"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-numpy)")
    sys.exit(77)

SRC = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    mntrain = sys.argv[1]
    img, lab = f"{SRC}/t10k-images-idx3-ubyte.gz", f"{SRC}/t10k-labels-idx1-ubyte.gz"
    if not os.path.exists(img):
        print("SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
        return 77
    images, labels = idx(img), idx(lab)
    fails = []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "fm")
        subprocess.run([mntrain, "convert", "idx", img, lab, out, "--shards", "3", "--seed", "7"], check=True)
        index = json.load(open(os.path.join(out, "index.json")))
        seen = []
        for sh in index["shards"]:
            with h5py.File(os.path.join(out, sh["file"]), "r") as f:
                src = f["source_index"][:]
                if f["images"].shape != (sh["samples"], 28, 28, 1) or f["images"].dtype != np.uint8:
                    fails.append(f"{sh['file']}: images {f['images'].shape} {f['images'].dtype}")
                if not np.array_equal(f["images"][:, :, :, 0], images[src]):
                    fails.append(f"{sh['file']}: pixels differ from the IDX samples")
                if not np.array_equal(f["labels"][:], labels[src].astype(np.int32)):
                    fails.append(f"{sh['file']}: labels differ from the IDX labels")
                if f.attrs["samples"] != sh["samples"] or f.attrs["num_classes"] != 10:
                    fails.append(f"{sh['file']}: attributes disagree with index.json")
                seen.append(src)
        seen = np.concatenate(seen)
        if not np.array_equal(np.sort(seen), np.arange(len(images))):
            fails.append("source indices are not a permutation of the IDX samples")
        if np.array_equal(seen, np.arange(len(images))):
            fails.append("samples were written in source order, not in a seeded random order")
        if index["samples"] != len(images) or index["classes"][9] != "Ankle boot" or index["image_size"] != 28:
            fails.append(f"index.json: {index['samples']} samples, classes {index['classes']}")
        if abs(index["mean"][0] - images.mean() / 255) > 1e-4 or abs(index["std"][0] - images.std() / 255) > 1e-4:
            fails.append(f"index.json mean/std {index['mean']} {index['std']} vs {images.mean() / 255} {images.std() / 255}")
        r = subprocess.run([mntrain, "inspect", out, "--verify"], capture_output=True, text=True)
        if r.returncode != 0 or "verify: 10000 samples read and their checksums checked, 0 bad" not in r.stdout:
            fails.append(f"inspect --verify: exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
        # a second run with the same arguments keeps the finished shards
        r = subprocess.run([mntrain, "convert", "idx", img, lab, out, "--shards", "3", "--seed", "7"], capture_output=True, text=True)
        if r.returncode != 0 or "(3 already there)" not in r.stdout:
            fails.append(f"a rerun did not skip the finished shards: {r.stdout}")
        again = json.load(open(os.path.join(out, "index.json")))
        if again != index:
            fails.append(f"a rerun changed index.json: {again} vs {index}")
    for f in fails:
        print("FAIL:", f)
    print(f"convert_h5py: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
