#!/usr/bin/env bash
# step_peers.sh — `mntrain bench step` against today's PyTorch (benchmarks/peer_step_torch.py in the
# venv benchmarks/peer_venv.sh makes), side by side in one run: ResNet-50 at 224 px batch 16 and
# ResNet-18 at 64 px batch 64, 2 threads, mntrain in fp32 and bf16 against PyTorch in fp32,
# channels_last fp32 and bf16 autocast + channels_last. ROUNDS alternating rounds (each round runs
# every one of the five once, in turn), the median of each printed with its spread.
# Targets (benchmarks/README.md): on a CPU with AMX, bf16 >= 2.0x PyTorch's bf16 (ResNet-50) and
# >= 1.5x (ResNet-18); fp32 >= 1.3x PyTorch's best fp32 mode. Run it on a quiet machine.
#   benchmarks/step_peers.sh [path/to/mntrain] [rounds, default 3]
# MNT_PEER_PYTHON: the peer's python (default: the venv's, made or reused on first use).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
rounds=${2:-3}
py=${MNT_PEER_PYTHON:-$("$here/peer_venv.sh" torch)}
imgs() { awk '/img\/s \(mean/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s") print $i }'; }
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
first() { awk '{ print $1 }'; }
tv=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { if grep -qw "$1" <<<"$flags"; then echo yes; else echo no; fi; }
echo "# step_peers: $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "(amx_bf16 $(has amx_bf16), avx512_bf16 $(has avx512_bf16)), mntrain $("$m" --version | head -1 | awk '{ print $2 }'), PyTorch $tv"
echo "# img/s, median of $rounds alternating rounds (min-max); 2 threads"
printf '%-24s %-20s %-20s %-20s %-20s %-20s\n' "# config" "mntrain fp32" "mntrain bf16" "torch fp32" "torch fp32 cl" "torch bf16 cl"
for cfg in "resnet50 224 16 3" "resnet18 64 64 5"; do
  read -r arch size batch steps <<<"$cfg"
  declare -A v=()
  for r in $(seq 1 "$rounds"); do
    for p in fp32 bf16; do
      v[m$p]+="$("$m" bench step --arch "$arch" --size "$size" --batch "$batch" --steps "$steps" --threads 2 \
        --precision "$p" 2>/dev/null | imgs) "
    done
    for mode in fp32 channels_last bf16; do
      v[t$mode]+="$("$py" "$here/peer_step_torch.py" --arch "$arch" --size "$size" --batch "$batch" --steps "$steps" \
        --threads 2 --mode "$mode" 2>/dev/null | imgs) "
    done
    echo "#   $arch round $r of $rounds done" >&2
  done
  mf=$(med <<<"${v[mfp32]}"); mb=$(med <<<"${v[mbf16]}")
  tf=$(med <<<"${v[tfp32]}"); tc=$(med <<<"${v[tchannels_last]}"); tb=$(med <<<"${v[tbf16]}")
  printf '%-24s %-20s %-20s %-20s %-20s %-20s\n' "$arch ${size}px b$batch" "$mf" "$mb" "$tf" "$tc" "$tb"
  best=$(printf '%s\n%s\n' "$(first <<<"$tf")" "$(first <<<"$tc")" | sort -g | tail -1)
  awk -v mf="$(first <<<"$mf")" -v mb="$(first <<<"$mb")" -v best="$best" -v tb="$(first <<<"$tb")" -v a="$arch" \
    'BEGIN { printf "#   %s: mntrain fp32 / torch best fp32 %.2fx; mntrain bf16 / torch bf16 %.2fx; mntrain bf16 / fp32 %.2fx\n",
             a, mf / best, mb / tb, mb / mf }'
  unset v
done
