#!/usr/bin/python3
"""`mntrain convert imagenet` on a small ImageNet-layout tree made here with PIL, against
torchvision's ImageFolder: three classes; JPEGs of several sizes (one grayscale, one CMYK, one
large enough for DCT-scaled decoding); PNGs (RGB, grey, palette, RGBA) and a PNG named .JPEG; BMP and
PPM; files in nested folders; a TIFF (refused by name); a corrupt JPEG and a 'JPEG bomb' whose
header claims 65500x65500 pixels (both reported and skipped, the bomb at once); a text file
(reported and ignored).
Checks: ImageFolder's classes, samples and labels; every stored image close to PIL's
resize-shorter-side + centre crop of the same file (mean absolute difference under 4/255: decoders
and filters differ slightly); the summary line's counts; a class folder without images refused;
the flat-folder + labels-file validation layout; a rerun keeps the shards; another source into the
same directory is refused naming the clash, and --force starts over.
usage: convert_imagenet.py path/to/mntrain"""
import json
import os
import subprocess
import sys
import tempfile
import time

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


def picture(rng, w, h, c):
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * (3 + c) + yy) % 256, (yy * 2 + 40 * c) % 256, (xx + yy * (c + 1)) % 256], -1)
    return Image.fromarray((arr + rng.integers(0, 20, arr.shape)).clip(0, 255).astype(np.uint8))


def jpeg_bomb(path):
    """a valid tiny JPEG whose frame header is patched to claim 65500x65500 pixels"""
    tmp = path + ".tmp"
    Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp, "JPEG")
    data = bytearray(open(tmp, "rb").read())
    os.unlink(tmp)
    i = data.index(b"\xff\xc0")  # SOF0: length(2) precision(1) height(2) width(2)
    data[i + 5:i + 7] = (65500).to_bytes(2, "big")
    data[i + 7:i + 9] = (65500).to_bytes(2, "big")
    open(path, "wb").write(bytes(data))


def run(*args):
    t = time.time()
    r = subprocess.run(list(args), capture_output=True, text=True)
    return r, time.time() - t


def main():
    mntrain = sys.argv[1]
    rng = np.random.default_rng(3)
    fails = []
    with tempfile.TemporaryDirectory() as d:
        train = os.path.join(d, "train")
        wnids = ["n01440764", "n01443537", "n01484850"]
        for c, wnid in enumerate(wnids):
            os.makedirs(os.path.join(train, wnid))
            for i, (w, h) in enumerate([(64, 48), (40, 90), (33, 33), (120, 80)]):
                im = picture(rng, w, h, c)
                if c == 1 and i == 0:
                    im = im.convert("L")  # grayscale JPEG
                if c == 2 and i == 1:
                    im = im.convert("CMYK")  # CMYK JPEG
                im.save(os.path.join(train, wnid, f"{wnid}_{i}.JPEG"), quality=95)
        c0, c1, c2 = (os.path.join(train, w) for w in wnids)
        picture(rng, 1400, 1000, 0).save(os.path.join(c0, "large.jpg"), quality=92)  # decoded at 1/8 by the DCT
        picture(rng, 50, 40, 0).save(os.path.join(c0, "rgb.png"))
        picture(rng, 36, 60, 1).convert("L").save(os.path.join(c0, "grey.png"))
        picture(rng, 45, 45, 2).convert("P", palette=Image.ADAPTIVE, colors=64).save(os.path.join(c0, "palette.PNG"))
        picture(rng, 40, 52, 0).convert("RGBA").save(os.path.join(c1, "alpha.png"))
        picture(rng, 48, 40, 1).save(os.path.join(c1, "really_a_png.JPEG"), "PNG")  # ImageNet has one of these
        picture(rng, 44, 38, 2).save(os.path.join(c1, "bitmap.bmp"))
        picture(rng, 38, 44, 0).save(os.path.join(c2, "netpbm.ppm"))
        os.makedirs(os.path.join(c2, "extra", "deeper"))
        picture(rng, 50, 50, 2).save(os.path.join(c2, "extra", "nested.jpeg"))
        picture(rng, 60, 34, 2).save(os.path.join(c2, "extra", "deeper", "nested.png"))
        tiff = os.path.join(c2, "scan.tif")
        picture(rng, 30, 30, 2).save(tiff)
        with open(os.path.join(c2, "extra", "notes.txt"), "w") as f:
            f.write("not an image\n")
        bad = os.path.join(c1, "n01443537_zz_corrupt.JPEG")
        with open(bad, "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 this is not a jpeg" + bytes(rng.integers(0, 256, 200, dtype=np.uint8)))
        bomb = os.path.join(c1, "bomb.jpg")
        jpeg_bomb(bomb)
        skipped = {bad, bomb, tiff}
        folder = torchvision.datasets.ImageFolder(train)  # the order and labels to follow
        out = os.path.join(d, "out")
        r, secs = run(mntrain, "convert", "imagenet", train, out, "--size", str(S), "--shards", "2")
        if r.returncode != 0:
            fails.append(f"convert failed: {r.stdout} {r.stderr}")
        for p, why in [(bad, "not a readable JPEG"), (bomb, "65500x65500"), (tiff, "TIFF is not supported"),
                       (os.path.join(c2, "extra", "notes.txt"), "ignored")]:
            if not any(p in line and why in line for line in r.stderr.splitlines()):
                fails.append(f"{p} was not reported ({why}): {r.stderr}")
        if "3 unreadable inputs skipped, 1 other files ignored" not in r.stdout:
            fails.append(f"the summary line does not count the skipped and ignored files: {r.stdout}")
        if secs > 20:
            fails.append(f"the conversion took {secs:.0f} s: the bomb was not refused at its header")
        index = json.load(open(os.path.join(out, "index.json")))
        if index["classes"] != folder.classes or index["samples"] != len(folder.samples) - len(skipped):
            fails.append(f"index: classes {index['classes']} vs {folder.classes}, {index['samples']} samples vs "
                         f"{len(folder.samples)} - {len(skipped)}")
        worst, seen = 0.0, set()
        for sh in index["shards"]:
            with h5py.File(os.path.join(out, sh["file"]), "r") as f:
                if f["images"].id.get_create_plist().get_nfilters() < 1:
                    fails.append(f"{sh['file']}: images without the Fletcher-32 filter")
                for img, lab, src in zip(f["images"][:], f["labels"][:], f["source_index"][:]):
                    path, want = folder.samples[src]
                    seen.add(path)
                    if path in skipped:
                        fails.append(f"{path} should have been skipped")
                        continue
                    if lab != want:
                        fails.append(f"{path}: label {lab}, ImageFolder says {want}")
                    diff = np.abs(img.astype(np.float64) - reference(path)).mean()
                    worst = max(worst, diff)
                    if diff > 4:
                        fails.append(f"{path}: differs from PIL's resize + centre crop by {diff:.2f}/255 on average")
        missing = {p for p, _ in folder.samples} - skipped - seen
        if missing:
            fails.append(f"left out: {sorted(missing)}")
        # a class folder without images is an error (ImageFolder's too), naming it
        empty_tree = os.path.join(d, "empty")
        os.makedirs(os.path.join(empty_tree, "a"))
        os.makedirs(os.path.join(empty_tree, "b", "sub"))
        picture(rng, 40, 40, 0).save(os.path.join(empty_tree, "a", "x.jpg"))
        open(os.path.join(empty_tree, "b", "sub", "readme.txt"), "w").write("x")
        r, _ = run(mntrain, "convert", "imagenet", empty_tree, os.path.join(d, "eout"), "--size", str(S))
        if r.returncode != 2 or "without any image (b)" not in r.stderr or os.path.exists(os.path.join(d, "eout", "index.json")):
            fails.append(f"an empty class folder: exit {r.returncode}: {r.stderr}")
        # validation layout: a flat folder and "FILE WNID" lines, same classes, same labels
        val = os.path.join(d, "val")
        os.makedirs(val)
        lines = []
        for path, lab in folder.samples:
            if path in skipped:
                continue
            name = f"{len(lines):03d}_{os.path.basename(path)}"
            os.link(path, os.path.join(val, name))
            lines.append(f"{name} {folder.classes[lab]}")
        with open(os.path.join(d, "val.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        vout = os.path.join(d, "vout")
        r, _ = run(mntrain, "convert", "imagenet", val, vout, "--size", str(S), "--shards", "1", "--val",
                   "--labels", os.path.join(d, "val.txt"))
        vindex = json.load(open(os.path.join(vout, "index.json"))) if r.returncode == 0 else {}
        if r.returncode != 0 or vindex.get("classes") != folder.classes or vindex.get("samples") != len(lines):
            fails.append(f"flat validation layout: {r.stdout} {r.stderr}")
        # a rerun with the same inputs keeps the shards
        r, _ = run(mntrain, "convert", "imagenet", train, out, "--size", str(S), "--shards", "2")
        if "(2 already there)" not in r.stdout:
            fails.append(f"a rerun did not keep the shards: {r.stdout} {r.stderr}")
        # another source, or another size, into the same directory: refused, naming a file; --force starts over
        for extra in (["--size", str(S)], ["--size", str(S + 8)]):
            src = empty_tree if extra[1] == str(S) else train
            if src == empty_tree:
                os.unlink(os.path.join(empty_tree, "b", "sub", "readme.txt"))
                picture(rng, 40, 40, 1).save(os.path.join(empty_tree, "b", "sub", "y.png"))
            r, _ = run(mntrain, "convert", "imagenet", src, out, "--shards", "2", *extra)
            if r.returncode != 2 or "another conversion" not in r.stderr or "--force" not in r.stderr:
                fails.append(f"another conversion into {out} ({src}, {extra}) was not refused: {r.returncode} {r.stderr}")
        before = json.load(open(os.path.join(out, "index.json")))["fingerprint"]
        r, _ = run(mntrain, "convert", "imagenet", empty_tree, out, "--shards", "2", "--size", str(S), "--force")
        after = json.load(open(os.path.join(out, "index.json"))) if r.returncode == 0 else {}
        if r.returncode != 0 or after.get("fingerprint") == before or after.get("samples") != 2:
            fails.append(f"--force did not start over: {r.returncode} {r.stdout} {r.stderr}")
    for f in fails:
        print("FAIL:", f)
    print(f"convert_imagenet: worst mean difference to PIL {worst:.2f}/255, {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
