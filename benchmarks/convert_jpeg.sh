#!/usr/bin/env bash
# convert_jpeg.sh — `mntrain convert imagenet` speed on JPEGs of two sizes, with PIL (what
# torchvision's ImageFolder decodes with: full-size decode, resize of the shorter side to 256 with
# a box filter, centre crop) as the peer in the same run: typical ImageNet photos (500x375) and
# the long tail of large ones (4000x3000), to 256 px. Large JPEGs gain from libjpeg-turbo's DCT
# scaling (decoded at 1/8 here); typical ones cannot (1/2 would leave 187 px < 256). Pass a second
# binary (e.g. one built before a change) to measure it beside the first. Quiet machine only.
#   benchmarks/convert_jpeg.sh [path/to/mntrain] [other mntrain] [work dir, default /tmp/mntrain-jpeg-bench]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
other=${2:-}
work=${3:-/tmp/mntrain-jpeg-bench}
py=/usr/bin/python3
mkdir -p "$work"
"$py" - "$work" <<'PY'
import os, sys
import numpy as np
from PIL import Image
w = sys.argv[1]
rng = np.random.default_rng(1)
for name, (W, H), n in (("typical", (500, 375), 400), ("large", (4000, 3000), 24)):
    d = os.path.join(w, name, "c0")
    if os.path.isdir(d) and len(os.listdir(d)) == n:
        continue
    os.makedirs(d, exist_ok=True)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    for i in range(n):  # smooth shapes and texture, JPEG quality 90: photo-like entropy
        f = rng.uniform(0.002, 0.02, 3)
        img = np.stack([127 + 100 * np.sin(xx * f[c] + yy * f[(c + 1) % 3] + i) for c in range(3)], -1)
        img += rng.normal(0, 12, img.shape)
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(os.path.join(d, f"{i:04d}.jpg"), quality=90)
PY
peer() { # peer DIR: PIL images/s (1 process)
  "$py" - "$1" <<'PY'
import os, sys, time
from PIL import Image
d = os.path.join(sys.argv[1], "c0")
files = sorted(os.listdir(d))
t = time.time()
for f in files:
    im = Image.open(os.path.join(d, f)).convert("RGB")
    w, h = im.size
    s = 256 / min(w, h)
    im = im.resize((round(w * s), round(h * s)), Image.BOX)
    w, h = im.size
    im.crop(((w - 256) // 2, (h - 256) // 2, (w - 256) // 2 + 256, (h - 256) // 2 + 256)).tobytes()
print(f"{len(files) / (time.time() - t):.1f}")
PY
}
rate() { # rate MNTRAIN DIR THREADS: images/s of a conversion to 256 px
  rm -rf "$work/out"
  local t0 t1
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=$3 "$1" convert imagenet "$2" "$work/out" --size 256 --shards 1 >/dev/null 2>&1
  t1=$(date +%s.%N)
  awk -v n="$(find "$2/c0" -name "*.jpg" | wc -l)" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }'
}
echo "# convert_jpeg: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf '%-26s %8s %14s %14s %12s\n' "# JPEGs -> 256 px" "threads" "mntrain img/s" "${other:+other img/s}" "PIL img/s"
for set in typical large; do
  p=$(peer "$work/$set")
  for t in 1 2; do
    a=$(rate "$m" "$work/$set" "$t")
    b=""
    [ -n "$other" ] && b=$(rate "$other" "$work/$set" "$t")
    printf '%-26s %8s %14s %14s %12s\n' "$set ($(find "$work/$set/c0" -name "*.jpg" | wc -l) files)" "$t" "$a" "$b" "$([ "$t" = 1 ] && echo "$p")"
  done
done
