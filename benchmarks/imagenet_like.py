#!/usr/bin/python3
"""An ImageNet-like set of JPEGs made from real photographs that Debian packages ship.

    /usr/bin/python3 benchmarks/imagenet_like.py --out ROOT [--images 3000] [--classes 16] [--seed 1]

Writes ROOT/class_KK/img_NNNNNN.JPEG (torchvision ImageFolder's layout; what `mntrain convert
imagenet` reads) and a manifest (--manifest, default ROOT.tsv: one line per file with its source
photo and crop box, the options in its header; written last, so its presence means the set is whole).

Each file is a random region of one of 35 photographs, cut at an ImageNet-like aspect ratio (4:3
mostly, 3:4, 3:2, 2:3, squares and a continuous spread from 0.6 to 1.8) and a random scale (15-100%
of the largest such region), resized (Lanczos, never enlarged) so that the longer side is 500 px for
80% of the files (so the shorter side is 375, 333, 500, ...), 300-499 px for 15% and 501-800 px for
5%, and saved by PIL as JPEG quality 90 (4:2:0), like ImageNet's Flickr photos (typically 500x375,
~110 KB at their varied qualities). The same options give the same files (numpy's default_rng).

The photographs (their licences: /usr/share/doc/PACKAGE/copyright):
  lomiri-wallpapers-16.04  13 photos, 1365x1074 to 5312x2988 (Ubuntu's wallpaper contests)
  mate-backgrounds         11 photos, 1280x1024 to 2560x1920 (nature/)
  plasma-workspace-wallpapers  11 photos, 2560x1600 (KDE's photographic wallpapers)
Install them with: apt-get install --no-install-recommends lomiri-wallpapers-16.04 mate-backgrounds
plasma-workspace-wallpapers (about 155 MB; nothing else is pulled in). --list prints the files.
"""
import argparse
import os
import sys
import time

import numpy as np
from PIL import Image

PACKAGES = {
    "lomiri-wallpapers-16.04": ["/usr/share/backgrounds/%s.jpg" % n for n in (
        "Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Picture_0B_by_freespace",
        "Picture_1A_by_freespace", "Wine_by_Jakkub_Mede", "aitzgorri_by_Aitzol_Berasategi",
        "free_by_Peter_Nerlich", "friends_by_Aitzol_Berasategi", "greentock_by_Peter_Nerlich",
        "life_by_Aitzol_Berasategi", "picosdeeuropa_by_Aitzol_Berasategi",
        "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi")],
    "mate-backgrounds": ["/usr/share/backgrounds/mate/nature/%s.jpg" % n for n in (
        "Aqua", "Blinds", "Dune", "Garden", "GreenMeadow", "LadyBird", "RainDrops", "Storm",
        "TwoWings", "Wood", "YellowFlower")],
    "plasma-workspace-wallpapers": ["/usr/share/wallpapers/%s/contents/images/2560x1600.jpg" % n for n in (
        "BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow", "FallenLeaf", "Grey",
        "Kite", "OneStandsOut", "Path", "summer_1am")],
}
PHOTOS = [p for ps in PACKAGES.values() for p in ps]

# aspect ratios (width / height) and their weights; "spread" draws log-uniformly from 0.6 to 1.8
ASPECTS = [(4 / 3, 0.45), (3 / 4, 0.15), (3 / 2, 0.10), (2 / 3, 0.05), (1.0, 0.10), ("spread", 0.15)]


def plan(n, classes, seed):
    """The files to write: (index, class, photo, crop box in the photo, output size), from the seed alone."""
    rng = np.random.default_rng(seed)
    sizes = {}
    for p in PHOTOS:
        with Image.open(p) as im:
            sizes[p] = im.size
    kinds, weights = zip(*ASPECTS)
    out = []
    for i in range(n):
        photo = PHOTOS[rng.integers(len(PHOTOS))]
        W, H = sizes[photo]
        k = rng.choice(len(kinds), p=np.array(weights) / sum(weights))
        r = float(np.exp(rng.uniform(np.log(0.6), np.log(1.8)))) if kinds[k] == "spread" else kinds[k]
        u = rng.uniform()
        longer = 500 if u < 0.80 else int(rng.integers(300, 500)) if u < 0.95 else int(rng.integers(501, 801))
        ow, oh = (longer, round(longer / r)) if r >= 1 else (round(longer * r), longer)
        # the largest region of aspect r in the photo, then a random share of its area
        mw, mh = (H * r, H) if W / H > r else (W, W / r)
        s = np.sqrt(rng.uniform(0.15, 1.0))
        cw = min(mw, max(mw * s, ow))  # never enlarge (every photo here is larger than 800 px)
        ch = cw / r
        x = rng.uniform(0, W - cw)
        y = rng.uniform(0, H - ch)
        out.append((i, i % classes, photo, (x, y, x + cw, y + ch), (ow, oh)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="root of the ImageFolder tree (made; must not hold another set)")
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--manifest", help="default: ROOT.tsv")
    ap.add_argument("--list", action="store_true", help="print the photographs and their packages, and exit")
    a = ap.parse_args()
    missing = sorted({pkg for pkg, ps in PACKAGES.items() for p in ps if not os.path.isfile(p)})
    if a.list:
        for pkg, ps in PACKAGES.items():
            for p in ps:
                print(f"{pkg}\t{p}")
    if missing:
        sys.exit("imagenet_like.py: the photographs come from Debian packages not installed here: "
                 + " ".join(missing) + "\n  apt-get install --no-install-recommends " + " ".join(missing))
    if a.list:
        return
    if not a.out:
        ap.error("--out ROOT is required")
    if a.images < 1 or a.classes < 1 or a.classes > a.images:
        ap.error("need 1 <= --classes <= --images")
    root = os.path.abspath(a.out)
    manifest = a.manifest or root.rstrip("/") + ".tsv"
    header = f"# imagenet_like.py --images {a.images} --classes {a.classes} --seed {a.seed} --quality {a.quality}"
    if os.path.isfile(manifest):
        with open(manifest) as f:
            if f.readline().rstrip("\n") == header:
                print(f"imagenet_like.py: {root} is already made ({manifest})", file=sys.stderr)
                return
    if os.path.isdir(root) and os.listdir(root):
        sys.exit(f"imagenet_like.py: {root} is not empty and holds no set made with these options "
                 f"(no {manifest} saying so): remove it first")
    for c in range(a.classes):
        os.makedirs(os.path.join(root, f"class_{c:02d}"), exist_ok=True)
    todo = plan(a.images, a.classes, a.seed)
    lines = [None] * len(todo)
    t0, done = time.time(), 0
    for photo in PHOTOS:  # decode each photograph once
        mine = [t for t in todo if t[2] == photo]
        if not mine:
            continue
        with Image.open(photo) as im:
            im = im.convert("RGB")
            im.load()
            for i, c, _, box, size in mine:
                name = os.path.join(f"class_{c:02d}", f"img_{i:06d}.JPEG")
                im.resize(size, Image.LANCZOS, box=box).save(os.path.join(root, name), quality=a.quality)
                lines[i] = "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f" % ((name, photo) + size + box)
                done += 1
                if done % 500 == 0:
                    print(f"imagenet_like.py: {done}/{len(todo)} files, {done / (time.time() - t0):.0f}/s",
                          file=sys.stderr)
    tmp = manifest + ".partial"
    with open(tmp, "w") as f:
        f.write(header + "\n# file\tphoto\twidth\theight\tx0\ty0\tx1\ty1\n")
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, manifest)
    total = sum(os.path.getsize(os.path.join(root, ln.split("\t")[0])) for ln in lines)
    short = np.array([min(t[4]) for t in todo])
    print(f"imagenet_like.py: {len(todo)} files in {a.classes} classes, {total / 1e6:.1f} MB "
          f"({total / len(todo) / 1e3:.1f} kB per file), shorter side {short.min()}-{short.max()} "
          f"(333-500: {np.mean((short >= 333) & (short <= 500)) * 100:.0f}%), "
          f"from {len({t[2] for t in todo})} photos, {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
