#!/usr/bin/env bash
# onednn_versions.sh — the same mntrain source built against different oneDNN releases, side by side
# on one machine: `mntrain bench step` of each build, ResNet-50 at 224 px batch 16 and ResNet-18 at
# 64 px batch 64, 2 threads, fp32, and bf16 where the CPU has bf16 instructions (avx512_bf16 or
# AMX); ROUNDS alternating rounds (each round runs every build once per setting, in turn), the
# median of each printed with its spread and its ratio to the first build's.
#   benchmarks/onednn_versions.sh 'CMD' 'CMD' ...
# Each CMD runs one build's mntrain; it is split into words, so it may carry a prefix, e.g. a build
# of the same commit inside a Debian 13 root:
#   benchmarks/onednn_versions.sh build/mntrain 'chroot /var/tmp/trixie /src/build/mntrain'
# Each column is named by what that binary reports at run time (mntrain --version: the oneDNN
# release, and the one it was built with when they differ). Environment: ROUNDS (default 3),
# THREADS (default 2), and ONEDNN_MAX_CPU_ISA, which caps every build alike (e.g. AVX2 on an
# AVX-512 machine). Run it on a quiet machine: nothing else beside it.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
builds=("$@")
imgs() { awk '/img\/s \(mean/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s") print $i }'; }
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR]; else printf "failed" }'; }
first() { awk '{ print $1 }'; }
names=()
for b in "${builds[@]}"; do
  read -r -a cmd <<<"$b"
  v=$("${cmd[@]}" --version 2>/dev/null | sed -n 's/^libraries: oneDNN \([^,]*\),.*/\1/p') ||
    { echo "onednn_versions: '$b --version' failed" >&2; exit 1; }
  [ -n "$v" ] || { echo "onednn_versions: '$b --version' names no oneDNN release" >&2; exit 1; }
  names+=("oneDNN $v")
done
flags=$(grep -m1 '^flags' /proc/cpuinfo)
precisions=(fp32)
if grep -qwE 'avx512_bf16|amx_bf16' <<<"$flags" && [ -z "${ONEDNN_MAX_CPU_ISA:-}" ]; then precisions+=(bf16); fi
has() { if grep -qw "$1" <<<"$flags"; then echo yes; else echo no; fi; }
echo "# onednn_versions: $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "(avx512f $(has avx512f), avx512_bf16 $(has avx512_bf16), amx_bf16 $(has amx_bf16))${ONEDNN_MAX_CPU_ISA:+, ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA}"
echo "# mntrain bench step img/s, median of $rounds alternating rounds (min-max); $threads threads"
for i in "${!builds[@]}"; do echo "#   ${names[$i]}: ${builds[$i]}"; done
printf '%-22s %-6s' "# config" "prec"
for n in "${names[@]}"; do printf ' %-24s' "$n"; done
echo " ratio to the first"
for cfg in "resnet50 224 16 3" "resnet18 64 64 5"; do
  read -r arch size batch steps <<<"$cfg"
  for p in "${precisions[@]}"; do
    declare -A v=()
    for r in $(seq 1 "$rounds"); do
      for i in "${!builds[@]}"; do
        read -r -a cmd <<<"${builds[$i]}"
        v[$i]+="$("${cmd[@]}" bench step --arch "$arch" --size "$size" --batch "$batch" --steps "$steps" \
          --threads "$threads" --precision "$p" 2>/dev/null | imgs) "
      done
      echo "#   $arch $p round $r of $rounds done" >&2
    done
    printf '%-22s %-6s' "$arch ${size}px b$batch" "$p"
    base=""
    ratios=""
    for i in "${!builds[@]}"; do
      m=$(med <<<"${v[$i]}")
      printf ' %-24s' "$m"
      x=$(first <<<"$m")
      if [ -z "$base" ]; then base=$x; else ratios+=$(awk -v a="$x" -v b="$base" 'BEGIN { if (b + 0 > 0) printf " %.2fx", a / b }'); fi
    done
    echo "${ratios:- -}"
    unset v
  done
done
