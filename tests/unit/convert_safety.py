#!/usr/bin/python3
"""Conversions that must never produce a silently wrong or corrupt dataset (real Fashion-MNIST IDX
files; a synthetic set for training):
- the test split converted into a directory that holds the training split (same shard count or
  not), or a rerun with another --seed, is refused naming the clash and changes nothing; --force
  starts over; a rerun with the same inputs keeps the shards;
- an IDX file without images is refused, and nothing that looks like a dataset is left;
- a write that fails half-way (a file size limit, as a full disk does) ends with exit 1 and the file
  named, no crash, nothing that looks valid, and a later run completes the conversion;
- a directory without room for the shards is refused before anything is written (tmpfs; root);
- progress lines with rate and ETA appear when stderr is not a terminal;
- a flipped byte in one image: `inspect --verify` exits 1 naming the shard and the sample, and
  training on it stops naming them too.
usage: convert_safety.py path/to/mntrain"""
import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

try:
    import h5py
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py)")
    sys.exit(77)

SRC = "/usr/share/datasets/fashion-mnist"


def run(*args, env=None, limit=None):
    def pre():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    e = dict(os.environ, **(env or {}))
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=e, preexec_fn=pre)


def main():
    m = sys.argv[1]
    train = (f"{SRC}/train-images-idx3-ubyte.gz", f"{SRC}/train-labels-idx1-ubyte.gz")
    test = (f"{SRC}/t10k-images-idx3-ubyte.gz", f"{SRC}/t10k-labels-idx1-ubyte.gz")
    if not os.path.exists(train[0]):
        print("SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
        return 77
    fails = []

    def expect(cond, what):
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "fm")
        r = run(m, "convert", "idx", *test, out, "--shards", "2", env={"MNT_PROGRESS_INTERVAL": "0.01"})
        expect(r.returncode == 0, f"convert the test split: {r.stderr}")
        prog = [l for l in r.stderr.splitlines() if l.startswith("convert: shard ")]
        expect(len(prog) >= 2 and "images/s" in prog[-1] and "ETA" in prog[-1] and "\r" not in r.stderr,
               f"no progress lines on a non-terminal stderr: {r.stderr[-400:]}")
        index = json.load(open(os.path.join(out, "index.json")))
        expect(len(index.get("fingerprint", "")) == 16 and index.get("version") == 2, f"index.json: {index}")
        listing = sorted(os.listdir(out))
        for shards in ("2", "4"):  # the training split into the test split's directory
            r = run(m, "convert", "idx", *train, out, "--shards", shards)
            expect(r.returncode == 2 and "another conversion" in r.stderr and "--force" in r.stderr,
                   f"train into test (--shards {shards}) not refused: {r.returncode} {r.stdout} {r.stderr}")
        r = run(m, "convert", "idx", *test, out, "--shards", "2", "--seed", "2")
        expect(r.returncode == 2 and "another conversion" in r.stderr, f"another --seed not refused: {r.stderr}")
        expect(sorted(os.listdir(out)) == listing and json.load(open(os.path.join(out, "index.json"))) == index,
               f"a refused conversion changed {out}: {sorted(os.listdir(out))}")
        r = run(m, "convert", "idx", *test, out, "--shards", "2")
        expect(r.returncode == 0 and "(2 already there)" in r.stdout, f"a rerun did not keep the shards: {r.stdout}")
        r = run(m, "convert", "idx", *train, out, "--shards", "4", "--force")
        new = json.load(open(os.path.join(out, "index.json"))) if r.returncode == 0 else {}
        expect(new.get("samples") == 60000 and new.get("fingerprint") != index["fingerprint"] and
               sorted(os.listdir(out)) == ["index.json"] + [f"shard-{k:05d}-of-00004.h5" for k in range(4)],
               f"--force did not start over: {r.returncode} {r.stderr} {os.listdir(out)}")

        # an IDX file without images
        empty = os.path.join(d, "empty-images-idx3-ubyte.gz")
        with gzip.open(empty, "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + (0).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2)
        elab = os.path.join(d, "empty-labels-idx1-ubyte.gz")
        with gzip.open(elab, "wb") as f:
            f.write(bytes([0, 0, 8, 1]) + (0).to_bytes(4, "big"))
        eout = os.path.join(d, "eout")
        r = run(m, "convert", "idx", empty, elab, eout)
        expect(r.returncode == 2 and "no images" in r.stderr and not os.path.exists(os.path.join(eout, "index.json")),
               f"an empty IDX: {r.returncode} {r.stderr}")

        # a write that fails half-way: exit 1 naming the file; nothing left that looks valid; resumable
        wout = os.path.join(d, "wfail")
        r = run(m, "convert", "idx", *test, wout, "--shards", "4", limit=500_000)
        left = sorted(os.listdir(wout)) if os.path.isdir(wout) else []
        expect(r.returncode == 1 and ".partial" in r.stderr and ("writing sample" in r.stderr or "closing" in r.stderr),
               f"a failed write: exit {r.returncode}, {r.stderr[-500:]}")
        expect("index.json" not in left and not any(f.endswith(".partial") for f in left),
               f"a failed write left {left}")
        r = run(m, "convert", "idx", *test, wout, "--shards", "4")
        expect(r.returncode == 0 and "already there" in r.stdout, f"the conversion after the failure: {r.stdout} {r.stderr}")

        # no room: refused before anything is written (needs root for the tmpfs)
        tiny = os.path.join(d, "tiny")
        os.makedirs(tiny)
        if os.geteuid() == 0 and shutil.which("mount") and \
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", tiny]).returncode == 0:
            try:
                r = run(m, "convert", "idx", *train, os.path.join(tiny, "out"), "--shards", "8")
                expect(r.returncode == 2 and "free" in r.stderr and "need about" in r.stderr and
                       os.listdir(os.path.join(tiny, "out")) == [], f"a full disk: {r.returncode} {r.stderr}")
            finally:
                subprocess.run(["umount", tiny])
        else:
            print("note: not root (or no mount): the tmpfs case is left out")

        # a flipped byte in one image
        syn = os.path.join(d, "syn")
        r = run(m, "convert", "synth", syn, "--classes", "4", "--images", "48", "--size", "16", "--shards", "1")
        shard = os.path.join(syn, "shard-00000-of-00001.h5")
        with h5py.File(shard, "r") as f:
            info = f["images"].id.get_chunk_info_by_coord((20, 0, 0, 0))
        with open(shard, "r+b") as f:
            f.seek(info.byte_offset + 100)
            b = f.read(1)
            f.seek(info.byte_offset + 100)
            f.write(bytes([b[0] ^ 0x01]))
        r = run(m, "inspect", syn)
        expect(r.returncode == 0, f"inspect without --verify reads the labels only: {r.returncode} {r.stderr}")
        r = run(m, "inspect", syn, "--verify")
        expect(r.returncode == 1 and "1 bad" in r.stdout and "shard-00000-of-00001.h5: sample 20" in r.stderr and
               "checksum" in r.stderr, f"inspect --verify on a flipped byte: {r.returncode} {r.stdout[-200:]} {r.stderr}")
        r = run(m, "train", "--data", syn, "--arch", "resnet8", "--size", "16", "--batch-per-rank", "48", "--steps", "2",
                "--threads", "1", "--out", os.path.join(d, "tout"))
        expect(r.returncode == 1 and "shard-00000-of-00001.h5: sample 20" in r.stderr,
               f"training on a flipped byte: {r.returncode} {r.stderr[-500:]}")
    for f in fails:
        print("FAIL:", f)
    print(f"convert_safety: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
