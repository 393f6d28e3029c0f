#!/usr/bin/env python3
"""augment_torchvision.py — mntrain's augmentation (io/data/augment.h, through tests/unit/aug_tool.c)
against torchvision 0.14 on images of their own sizes (format 3):

  pixels      at the same integer boxes, our crop + resize + flip + normalise equals
              torchvision.transforms.functional.resized_crop(x, i, j, h, w, [out, out],
              antialias=False) + hflip + normalize on the float image x = pixels / 255
              (a smooth image: within 1e-5; a noise image: within the float32 rounding of the
              sampling position, see NOISE_TOL), for boxes smaller and larger than the output
  validation  Resize(out / 0.875, antialias=False) + CenterCrop(out) equals our one-box transform
  the boxes   (RandomResizedCrop.get_params) for many samples of several W x H: whole pixels inside
              the image, the accepted ones reachable by the 10 tries' rule (area fraction in
              [0.08, 1], ratio in [3/4, 4/3], up to rounding), placed uniformly, flipped half the
              time; the fallback rate and the size distribution against torchvision's own draws
              (two-sample Kolmogorov-Smirnov); images too elongated for any try (1000x50, 50x1000)
              get exactly torchvision's fallback box, every time.

  augment_torchvision.py AUG_TOOL     (exit 77 without torch/torchvision/numpy)
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (Debian: python3-torch python3-torchvision python3-numpy)")
    sys.exit(77)

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SMOOTH_TOL = 1e-5
# PyTorch computes each sampling position in float32 ((o + 0.5) * h / out - 0.5 within the crop),
# we in float64: up to ~2^-23 * 2 * 512 px = 1.2e-4 px apart on these sizes; on a noise image one
# pixel to the next moves a value by up to 1.0 (255 / 255), after normalising by 1 / 0.224, so
# ~5.5e-4 at worst, plus float rounding
NOISE_TOL = 6e-4
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL", msg)


def tool(*args, binary=False):
    r = subprocess.run([AUG_TOOL, *map(str, args)], capture_output=True, check=True)
    return r.stdout if binary else r.stdout.decode()


def boxes(W, H, seed, epoch, n):
    out = []
    for line in tool("boxes", W, H, seed, epoch, n).split("\n"):
        if line:
            x0, y0, w, h, flip = line.split()
            out.append((float(x0), float(y0), float(w), float(h), int(flip)))
    return out


def image(W, H, kind, seed):
    rng = np.random.default_rng(seed)
    if kind == "noise":
        return rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    img = np.stack([120 + 80 * np.sin(x / 37 + c) * np.cos(y / 23 - c) + 0.1 * x - 0.05 * y for c in range(3)], -1)
    return np.clip(img, 0, 255).round().astype(np.uint8)


def ours(path, W, H, out, box):
    raw = tool("crop", path, W, H, out, *box, binary=True)
    return np.frombuffer(raw, dtype=np.float32).reshape(3, out, out)


def check_pixels(tmp):
    worst = {"smooth": 0.0, "noise": 0.0}
    n = 0
    for (W, H) in ((341, 256), (256, 341), (257, 199), (500, 375)):
        for kind in ("smooth", "noise"):
            img = image(W, H, kind, W * H)
            path = os.path.join(tmp, f"{W}x{H}{kind}.rgb")
            img.tofile(path)
            x = torch.from_numpy(img).permute(2, 0, 1).float() / 255
            for out in (224, 112, 37):
                for (x0, y0, w, h, flip) in boxes(W, H, 7, out, 12):
                    i, j, hh, ww = int(y0), int(x0), int(h), int(w)
                    if (i, j, hh, ww) != (y0, x0, h, w):
                        fail(f"{W}x{H}: box ({x0} {y0} {w} {h}) is not whole pixels")
                    want = F.resized_crop(x, i, j, hh, ww, [out, out], antialias=False)
                    if flip:
                        want = F.hflip(want)
                    want = F.normalize(want, MEAN, STD).numpy()
                    got = ours(path, W, H, out, (x0, y0, w, h, flip))
                    d = float(np.abs(got - want).max())
                    worst[kind] = max(worst[kind], d)
                    tol = SMOOTH_TOL if kind == "smooth" else NOISE_TOL
                    n += 1
                    if d > tol:
                        fail(f"{W}x{H} {kind}: box ({j} {i} {ww} {hh}) flip {flip} to {out}: max |ours - torchvision| "
                             f"{d:.3g} > {tol}")
    print(f"  pixels: {n} boxes (4 sizes x smooth/noise x out 224/112/37): max |ours - torchvision| "
          f"{worst['smooth']:.2g} (smooth, tolerance {SMOOTH_TOL}), {worst['noise']:.2g} (noise, {NOISE_TOL})")


def check_val(tmp):
    worst = 0.0
    for (W, H) in ((341, 256), (256, 341), (257, 199), (500, 375), (256, 256), (300, 1000)):
        img = image(W, H, "smooth", W + H)
        path = os.path.join(tmp, f"val{W}x{H}.rgb")
        img.tofile(path)
        x = torch.from_numpy(img).permute(2, 0, 1).float() / 255
        for out in (224, 160, 32):
            R = int(math.floor(out / 0.875 + 1e-9))
            want = F.normalize(F.center_crop(F.resize(x, R, antialias=False), out), MEAN, STD).numpy()
            got = np.frombuffer(tool("val", path, W, H, out, 0.875, binary=True), dtype=np.float32).reshape(3, out, out)
            d = float(np.abs(got - want).max())
            worst = max(worst, d)
            if d > SMOOTH_TOL:
                fail(f"validation {W}x{H} -> Resize({R}) + CenterCrop({out}): max difference {d:.3g}")
    print(f"  validation: Resize(out/0.875) + CenterCrop(out) of 6 sizes x out 224/160/32: max difference {worst:.2g}")


def tv_fallback(W, H):
    """torchvision's fallback box (i, j, h, w) for a W x H image: what get_params returns after 10 misses"""
    in_ratio = float(W) / float(H)
    ratio = (3.0 / 4.0, 4.0 / 3.0)
    if in_ratio < min(ratio):
        w, h = W, int(round(W / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = H, int(round(H * max(ratio)))
    else:
        w, h = W, H
    return ((H - h) // 2, (W - w) // 2, h, w)


def ks(a, b):
    """two-sample Kolmogorov-Smirnov statistic"""
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, v, side="right") / len(a) - np.searchsorted(b, v, side="right") / len(b))))


def check_boxes():
    N = 4000
    torch.manual_seed(0)
    for (W, H) in ((341, 256), (256, 341), (500, 375), (64, 48), (256, 256), (300, 60), (60, 300), (1000, 50), (50, 1000)):
        ob = boxes(W, H, 3, 1, N)
        fb = tv_fallback(W, H)
        img = torch.empty(3, H, W)
        tv = [T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0]) for _ in range(N)]
        nfb = tvfb = bad = 0
        pos = []
        for (x0, y0, w, h, _) in ob:
            if not (x0 == int(x0) and y0 == int(y0) and w == int(w) and h == int(h) and 0 < w <= W and 0 < h <= H and
                    0 <= x0 <= W - w and 0 <= y0 <= H - h):
                bad += 1
                continue
            if (y0, x0, h, w) == fb:
                nfb += 1
                continue
            # reachable by a try: some area in [0.08 A, A] and ratio in [3/4, 4/3] round to (w, h)
            A = W * H
            if not ((w + .5) * (h + .5) >= 0.08 * A and (w - .5) * (h - .5) <= A and
                    (w + .5) / (h - .5) >= 0.75 and (w - .5) / (h + .5) <= 4.0 / 3.0):
                bad += 1
            if W > w:
                pos.append(x0 / (W - w))
            if H > h:
                pos.append(y0 / (H - h))
        tvfb = sum(1 for p in tv if p == fb)
        flips = sum(b[4] for b in ob) / N
        if bad:
            fail(f"{W}x{H}: {bad} of {N} boxes outside the image or not reachable by RandomResizedCrop's rule")
        # the fallback's frequency: binomial, 5 standard errors
        p = (nfb + tvfb) / (2 * N)
        se = math.sqrt(max(p * (1 - p), 1e-12) * 2 / N)
        if abs(nfb - tvfb) / N > 5 * se + 1e-9:
            fail(f"{W}x{H}: the fallback in {nfb} of {N} samples, torchvision's in {tvfb}")
        if abs(flips - 0.5) > 5 * 0.5 / math.sqrt(N):
            fail(f"{W}x{H}: {flips:.3f} of the boxes flipped")
        if pos and (abs(np.mean(pos) - 0.5) > 5 * 0.29 / math.sqrt(len(pos))):
            fail(f"{W}x{H}: positions not uniform (mean {np.mean(pos):.3f} of the free range)")
        d_w = ks([b[2] for b in ob], [p[3] for p in tv])
        d_h = ks([b[3] for b in ob], [p[2] for p in tv])
        crit = 1.95 * math.sqrt(2.0 / N)  # alpha = 0.001
        if nfb < N and (d_w > crit or d_h > crit):
            fail(f"{W}x{H}: box sizes differ from torchvision's draws (KS D {d_w:.3f} / {d_h:.3f} > {crit:.3f})")
        if tvfb == N and nfb != N:
            fail(f"{W}x{H}: torchvision always falls back to {fb} (i, j, h, w); we did {nfb} of {N} times")
        print(f"  boxes {W}x{H}: {N} draws, fallback {nfb} (torchvision {tvfb}) = (i, j, h, w) {fb}, flipped "
              f"{flips:.3f}, KS D of w / h against torchvision {d_w:.3f} / {d_h:.3f} (critical {crit:.3f})")


def main():
    global AUG_TOOL
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    AUG_TOOL = sys.argv[1]
    print(f"  torch {torch.__version__}, torchvision {torchvision.__version__}")
    with tempfile.TemporaryDirectory(prefix="mntrain-aug-") as tmp:
        check_pixels(tmp)
        check_val(tmp)
    check_boxes()
    print(f"augment_torchvision: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
