#!/usr/bin/python3
"""`mntrain convert imagenet` on a small ImageNet-layout tree of real JPEGs made here with PIL:
three classes, several sizes and aspect ratios, one grayscale and one CMYK JPEG, one corrupt file.
Checks: labels in torchvision ImageFolder's order, the corrupt file reported by path and skipped,
every stored image close to PIL's resize-shorter-side + centre crop of the same file (mean
absolute difference under 4/255: JPEG decoders and filters differ slightly), h5py reads what mntrain wrote, the
flat-folder + labels-file validation layout gives the same labels, and a rerun keeps the shards.
usage: convert_imagenet.py path/to/mntrain"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    from PIL import Image
    import torchvision
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-pil python3-torchvision)")
    sys.exit(77)

S = 32


def reference(path):
    """PIL: the centre square of side min(w, h), resized to S×S (BOX when shrinking, bilinear when
    enlarging) — resize-shorter-side-then-centre-crop without rounding the intermediate size."""
    im = Image.open(path).convert("RGB")
    w, h = im.size
    side = min(w, h)
    box = ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
    return np.asarray(im.resize((S, S), Image.BOX if side > S else Image.BILINEAR, box=box), dtype=np.float64)


def main():
    mntrain = sys.argv[1]
    rng = np.random.default_rng(3)
    fails = []
    with tempfile.TemporaryDirectory() as d:
        train = os.path.join(d, "train")
        files = []
        for c, wnid in enumerate(["n01440764", "n01443537", "n01484850"]):
            os.makedirs(os.path.join(train, wnid))
            for i, (w, h) in enumerate([(64, 48), (40, 90), (33, 33), (120, 80)]):
                yy, xx = np.mgrid[0:h, 0:w]
                arr = np.stack([(xx * (3 + c) + yy) % 256, (yy * 2 + 40 * c) % 256, (xx + yy * (c + 1)) % 256], -1)
                arr = (arr + rng.integers(0, 20, arr.shape)).clip(0, 255).astype(np.uint8)
                im = Image.fromarray(arr)
                p = os.path.join(train, wnid, f"{wnid}_{i}.JPEG")
                if c == 1 and i == 0:
                    im = im.convert("L")  # grayscale JPEG
                if c == 2 and i == 1:
                    im = im.convert("CMYK")  # CMYK JPEG
                im.save(p, quality=95)
        bad = os.path.join(train, "n01443537", "n01443537_zz_corrupt.JPEG")
        with open(bad, "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 this is not a jpeg" + bytes(rng.integers(0, 256, 200, dtype=np.uint8)))
        folder = torchvision.datasets.ImageFolder(train)  # the order labels must follow
        out = os.path.join(d, "out")
        r = subprocess.run([mntrain, "convert", "imagenet", train, out, "--size", str(S), "--shards", "2"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fails.append(f"convert failed: {r.stdout} {r.stderr}")
        if bad not in r.stderr or "1 unreadable inputs skipped" not in r.stdout:
            fails.append(f"the corrupt file was not reported by path and counted: {r.stdout} {r.stderr}")
        index = json.load(open(os.path.join(out, "index.json")))
        if index["classes"] != folder.classes or index["samples"] != len(folder.samples) - 1:
            fails.append(f"index: classes {index['classes']} vs {folder.classes}, {index['samples']} samples")
        worst = 0.0
        for sh in index["shards"]:
            with h5py.File(os.path.join(out, sh["file"]), "r") as f:
                for img, lab, src in zip(f["images"][:], f["labels"][:], f["source_index"][:]):
                    path, want = folder.samples[src]
                    if lab != want:
                        fails.append(f"{path}: label {lab}, ImageFolder says {want}")
                    diff = np.abs(img.astype(np.float64) - reference(path)).mean()
                    worst = max(worst, diff)
                    if diff > 4:
                        fails.append(f"{path}: differs from PIL's resize + centre crop by {diff:.2f}/255 on average")
        # validation layout: a flat folder and "FILE WNID" lines, same classes, same labels
        val = os.path.join(d, "val")
        os.makedirs(val)
        lines = []
        for path, lab in folder.samples:
            if path == bad:
                continue
            name = os.path.basename(path)
            os.link(path, os.path.join(val, name))
            lines.append(f"{name} {folder.classes[lab]}")
        with open(os.path.join(d, "val.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        vout = os.path.join(d, "vout")
        r = subprocess.run([mntrain, "convert", "imagenet", val, vout, "--size", str(S), "--shards", "1", "--val",
                            "--labels", os.path.join(d, "val.txt")], capture_output=True, text=True)
        vindex = json.load(open(os.path.join(vout, "index.json"))) if r.returncode == 0 else {}
        if r.returncode != 0 or vindex.get("classes") != folder.classes:
            fails.append(f"flat validation layout: {r.stdout} {r.stderr}")
        r = subprocess.run([mntrain, "convert", "imagenet", train, out, "--size", str(S), "--shards", "2"],
                           capture_output=True, text=True)
        if "(2 already there)" not in r.stdout:
            fails.append(f"a rerun did not keep the shards: {r.stdout}")
    for f in fails:
        print("FAIL:", f)
    print(f"convert_imagenet: worst mean difference to PIL {worst:.2f}/255, {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
