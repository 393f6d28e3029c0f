#!/usr/bin/env bash
# step_peers.sh — `mntrain bench step` against PyTorch (benchmarks/peer_step_torch.py), side by
# side, alternating, on the two configurations of its target (>= 1.2x PyTorch: ResNet-50 at 224 px
# batch 16, ResNet-18 at 64 px batch 64; benchmarks/README.md). Run it on a quiet machine.
#   benchmarks/step_peers.sh [path/to/mntrain] [rounds, default 2]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
rounds=${2:-2}
py=/usr/bin/python3
imgs() { awk '/img\/s \(mean/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s") print $i }'; }
mem() { awk '/MB per image/ { for (i = 1; i <= NF; i++) if ($(i+1) == "MB") print $i }'; }
echo "# step_peers: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf '%-32s %6s %10s %10s %7s %12s %12s\n' "# config (2 threads)" "round" "mntrain" "pytorch" "ratio" "mnt MB/img" "torch MB/img"
for cfg in "resnet50 224 16 3" "resnet18 64 64 5"; do
  read -r arch size batch steps <<<"$cfg"
  for r in $(seq 1 "$rounds"); do
    a=$("$m" bench step --arch "$arch" --size "$size" --batch "$batch" --steps "$steps" --threads 2)
    b=$("$py" "$here/peer_step_torch.py" --arch "$arch" --size "$size" --batch "$batch" --steps "$steps" --threads 2)
    ma=$(imgs <<<"$a"); pb=$(imgs <<<"$b")
    printf '%-32s %6s %10s %10s %7s %12s %12s\n' "$arch ${size}px batch $batch" "$r" "$ma" "$pb" \
      "$(awk -v x="$ma" -v y="$pb" 'BEGIN { printf "%.2f", x / y }')" "$(mem <<<"$a")" "$(mem <<<"$b")"
  done
done
