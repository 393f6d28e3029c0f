#!/usr/bin/env bash
# loader_peers.sh — `mntrain bench loader` against a PyTorch DataLoader over the same shards
# (benchmarks/peer_loader_torch.py), side by side: 224 px crops from a 256 px synthetic set and
# 28 px Fashion-MNIST, with 1 and 2 threads/workers. Run it on a quiet machine.
#   benchmarks/loader_peers.sh [path/to/mntrain] [work dir, default /tmp/mntrain-loader-bench]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-loader-bench}
py=/usr/bin/python3
fm=/usr/share/datasets/fashion-mnist
mkdir -p "$work"
[ -f "$work/synth256/index.json" ] || "$m" convert synth "$work/synth256" --classes 100 --images 3000 --size 256 --shards 4
[ -f "$work/fmnist/index.json" ] || "$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$work/fmnist" --shards 4
rate() { awk '/img\/s per thread/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s" && $(i+2) == "per") print $i }'; }
# the widest of mntrain's variants (src/simd.h) this CPU runs: what the loader uses unless MNT_SIMD says less
isa=sse2
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && isa=avx2
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw $f /proc/cpuinfo || break; [ $f = avx512vl ] && [ $isa = avx2 ] && isa=avx512; done
echo "# loader_peers: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), vector ISA $isa${MNT_SIMD:+, MNT_SIMD=$MNT_SIMD}"
printf '%-34s %8s %16s %16s %7s\n' "# data -> crop, batch 64" "threads" "mntrain img/s/t" "pytorch img/s/t" "ratio"
for cfg in "synth256 224" "fmnist 28"; do
  read -r data size <<<"$cfg"
  for t in 1 2; do
    a=$("$m" bench loader --data "$work/$data" --size "$size" --loader-threads "$t" --batch 64 --seconds 4 | rate)
    b=$("$py" "$here/peer_loader_torch.py" --data "$work/$data" --size "$size" --threads "$t" --batch 64 --seconds 4 | rate)
    printf '%-34s %8s %16s %16s %7s\n' "$data -> $size px" "$t" "$a" "$b" "$(awk -v x="$a" -v y="$b" 'BEGIN { printf "%.1f", x / y }')"
  done
done
