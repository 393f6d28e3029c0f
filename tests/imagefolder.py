#!/usr/bin/python3
"""imagefolder.py — a tiny ImageFolder tree of non-square JPEGs that a small ResNet learns from: the
training set of the tests that train on format 3 (tests/lib.sh: train_set).
  imagefolder.py OUT [--classes C] [--per-class N] [--val N] [--seed S]
Writes OUT/train/cNN/NNNN.jpg: C classes (10) x N pictures (12), and with --val N a flat folder
OUT/val/ of N pictures per class and OUT/val_labels.txt ("FILE WNID" lines, as convert imagenet --val
--labels reads them). The sizes cycle through landscape, portrait and square ones (40x30, 30x44,
36x36, 48x36, 28x40, 64x40, 44x33): with --resize 32 some are kept at their size (shorter side <= 32)
and some are scaled. Each picture: the class's colour, modulated by a wave of 3 periods along the
class's direction, a random phase, contrast and offset per picture, and noise (sigma 10 grey levels:
without it a small RandomResizedCrop box is nearly flat, batch norm over 4 such crops divides by a
variance near 0, and float rounding grows fast enough to move an elastic run off the straight one);
quality 92.
Deterministic for a seed. Exit 77 (a test's skip) without numpy or PIL."""
import argparse
import math
import os
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-pil python3-numpy)")
    sys.exit(77)

SIZES = ((40, 30), (30, 44), (36, 36), (48, 36), (28, 40), (64, 40), (44, 33))


def picture(rng, c, classes, w, h):
    """class c's picture of w x h: its colour and stripe direction, the rest random"""
    hue = 2 * math.pi * c / classes
    colour = 127 + 100 * np.array([math.cos(hue), math.cos(hue - 2.1), math.cos(hue + 2.1)])
    angle = math.pi * c / classes
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    t = (x * math.cos(angle) + y * math.sin(angle)) / max(w, h)
    wave = np.sin(2 * math.pi * (3 * t + rng.uniform())) * rng.uniform(0.5, 1.0)
    img = colour[None, None, :] * (0.75 + 0.25 * wave[:, :, None]) + rng.uniform(-20, 20, 3)[None, None, :]
    img += rng.normal(0, 10, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--per-class", type=int, default=12)
    p.add_argument("--val", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    n = 0
    for c in range(a.classes):
        d = os.path.join(a.out, "train", f"c{c:02d}")
        os.makedirs(d, exist_ok=True)
        for i in range(a.per_class):
            w, h = SIZES[(c + i) % len(SIZES)]
            picture(rng, c, a.classes, w, h).save(os.path.join(d, f"{i:04d}.jpg"), quality=92)
            n += 1
    if a.val:
        d = os.path.join(a.out, "val")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(a.out, "val_labels.txt"), "w") as f:
            for c in range(a.classes):
                for i in range(a.val):
                    w, h = SIZES[(2 * c + i + 3) % len(SIZES)]
                    name = f"v{c:02d}_{i:04d}.jpg"
                    picture(rng, c, a.classes, w, h).save(os.path.join(d, name), quality=92)
                    f.write(f"{name} c{c:02d}\n")
    print(f"imagefolder: {n} training pictures in {a.classes} classes" +
          (f", {a.val * a.classes} validation pictures" if a.val else "") + f" in {a.out}")


if __name__ == "__main__":
    main()
