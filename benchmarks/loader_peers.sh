#!/usr/bin/env bash
# loader_peers.sh — the training input pipeline against today's peers, per thread, on the same
# JPEGs: an ImageNet-like set of real photographs (benchmarks/imagenet_like.py), its images stored
# at a shorter side of 256 px (what the shards hold), decoded, randomly cropped and resized to
# 224 px, flipped and normalised:
#   mntrain   `bench loader` on the format 3 JPEG shards `convert imagenet --resize 256` wrote
#             from the set (quality 90), --loader-threads 1;
#   DALI 2.4  its CPU pipeline (benchmarks/peer_loader_dali.py: fn.readers.file,
#             fn.decoders.image_random_crop, fn.resize, fn.crop_mirror_normalize), one thread,
#             device_id=None, on the 256 px JPEGs;
#   torchvision 0.29 (PyTorch 2.15)  ImageFolder + PIL, RandomResizedCrop, flip, ToTensor, Normalize
#             in a DataLoader with one worker (benchmarks/tv_loader.py), on the 256 px JPEGs.
# The peers come from the venv benchmarks/peer_venv.sh makes. ROUNDS rounds in turn, medians with
# their spread. Run it on a quiet machine.
#   benchmarks/loader_peers.sh [path/to/mntrain] [work dir, default /tmp/mntrain-loader-bench] [rounds, default 3]
# Needs the photographs imagenet_like.py cuts (apt-get install --no-install-recommends
# lomiri-wallpapers-16.04 mate-backgrounds plasma-workspace-wallpapers: done here when run as root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-loader-bench}
rounds=${3:-3}
secs=${SECONDS_PER_RUN:-5}
py=$("$here/peer_venv.sh" torch dali)
if ! /usr/bin/python3 "$here/imagenet_like.py" --list >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends lomiri-wallpapers-16.04 \
      mate-backgrounds plasma-workspace-wallpapers >&2
  else
    echo "loader_peers.sh: the photographs are missing: apt-get install --no-install-recommends" \
      "lomiri-wallpapers-16.04 mate-backgrounds plasma-workspace-wallpapers" >&2
    exit 1
  fi
fi
mkdir -p "$work"
[ -f "$work/src.tsv" ] || /usr/bin/python3 "$here/imagenet_like.py" --out "$work/src" --images 3000 --classes 16 --seed 1 >&2
# the JPEGs at the size the shards store them: shorter side 256 (PIL's Lanczos, quality 90)
if [ ! -f "$work/src256.done" ]; then
  /usr/bin/python3 - "$work/src" "$work/src256" <<'PY'
import os, sys
from PIL import Image
src, dst = sys.argv[1], sys.argv[2]
for d, _, files in os.walk(src):
    for f in files:
        im = Image.open(os.path.join(d, f)).convert("RGB")
        s = 256 / min(im.size)
        if s < 1:
            im = im.resize((max(1, round(im.size[0] * s)), max(1, round(im.size[1] * s))), Image.LANCZOS)
        out = os.path.join(dst, os.path.relpath(d, src))
        os.makedirs(out, exist_ok=True)
        im.save(os.path.join(out, f), quality=90)
PY
  touch "$work/src256.done"
fi
[ -f "$work/shards/index.json" ] || "$m" convert imagenet "$work/src" "$work/shards" --resize 256 --codec jpeg \
  --quality 90 --shards 4 >&2
rate() { awk '/img\/s per thread/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s" && $(i+2) == "per") print $i }'; }
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f (%.0f-%.0f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
declare -A v=()
for r in $(seq 1 "$rounds"); do
  v[m]+="$("$m" bench loader --data "$work/shards" --size 224 --loader-threads 1 --batch 64 --seconds "$secs" | rate) "
  v[d]+="$("$py" "$here/peer_loader_dali.py" --data "$work/src256" --size 224 --threads 1 --batch 64 --seconds "$secs" 2>/dev/null | rate) "
  v[t]+="$("$py" "$here/tv_loader.py" --data "$work/src256" --size 224 --workers 1 --batch 64 --seconds "$secs" 2>/dev/null | rate) "
  echo "#   round $r of $rounds done" >&2
done
vers=$("$py" -c 'import nvidia.dali, torch, torchvision; print("DALI", nvidia.dali.__version__ + ", torchvision", torchvision.__version__, "(PyTorch", torch.__version__ + ")")' 2>/dev/null)
echo "# loader_peers: $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $vers"
echo "# 3000 photographs stored at shorter side 256 (JPEG q90) -> 224 px training crops, batch 64, 1 thread;"
echo "# img/s per thread, median of $rounds rounds (min-max)"
mm=$(awk '{ print $1 }' <<<"$(med <<<"${v[m]}")")
for k in m d t; do
  name=$(case $k in m) echo "mntrain (format 3 jpeg shards)" ;; d) echo "DALI CPU pipeline" ;; t) echo "torchvision DataLoader" ;; esac)
  val=$(med <<<"${v[$k]}")
  printf '%-34s %-22s %s\n' "$name" "$val" "$(awk -v a="$mm" -v b="$(awk '{ print $1 }' <<<"$val")" 'BEGIN { printf "mntrain %.2fx", a / b }')"
done
