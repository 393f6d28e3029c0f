#!/usr/bin/env bash
# allreduce_peers.sh — mntrain's allreduce and its peers, side by side in one run, on the local
# cluster (job_templates/tools/local-cluster.sh up). Run it on a quiet machine: an apt-get or a build
# beside it cuts every figure here by up to two thirds.
#   benchmarks/allreduce_peers.sh [path/to/mntrain]   (default build/mntrain)
# Rows (fp32 sum, 64 MiB, in-place busbw as nccl-tests):
#   1 node  x 2 ranks: mntrain (shared memory)   vs  PyTorch gloo (loopback TCP)  target >= 2x
#   2 nodes x 1 rank : mntrain (TCP)              vs  two TCP streams at once, node1 -> node2 and
#                      node2 -> node1 (the slower direction): a 2-rank allreduce moves its bytes
#                      both ways at the same time, so this is its ceiling; and, for comparison
#                      with earlier runs, vs one TCP stream node1 -> node2 alone (which overstates it)
#   1 node  x 4 ranks and 2 nodes x 2 ranks: mntrain vs gloo, for the record
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
py=/usr/bin/python3
iters=${ITERS:-20}
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
# mntrain prints nccl-tests' layout: size count type redop root, then time algbw busbw #wrong out of
# place ($6-$9) and in place ($10-$13); gloo's peer prints size count type time algbw busbw #wrong
busbw_mnt() { awk '$1 == 67108864 { print $12 }'; }
busbw_gloo() { awk '$1 == 67108864 { print $6 }'; }
run_mnt() { # run_mnt TOPOLOGY SRUN_ARGS...
  local topo=$1
  shift
  timeout 300 srun --mpi=pmix "$@" "$m" bench allreduce -b 64M -e 64M -n "$iters" -w 3 --topology "$topo" | busbw_mnt
}
run_gloo() { timeout 300 srun --mpi=none "$@" "$py" "$here/peer_allreduce_gloo.py" -b 64M -e 64M -n "$iters" -w 3 | busbw_gloo; }
echo "# allreduce_peers: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
tcp=$(timeout 120 srun --mpi=none -N2 -n2 "$py" "$here/tcp_stream.py" --seconds 3 | awk '{ print $(NF-1) }')
# one line per direction; the allreduce waits for the slower one
tcp2=$(timeout 120 srun --mpi=none -N2 -n2 "$py" "$here/tcp_stream.py" --seconds 3 --both |
  awk 'NR == 1 || $(NF-1) < min { min = $(NF-1) } END { if (NR == 2) print min; else print "nan" }')
m12=$(run_mnt flat -N1 -n2); g12=$(run_gloo -N1 -n2)
m21=$(run_mnt flat -N2 -n2); g21=$(run_gloo -N2 -n2)
m14=$(run_mnt flat -N1 -n4); g14=$(run_gloo -N1 -n4)
m22=$(run_mnt flat -N2 -n4 --ntasks-per-node=2); m22h=$(run_mnt hier -N2 -n4 --ntasks-per-node=2)
g22=$(run_gloo -N2 -n4 --ntasks-per-node=2)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else printf "n/a" }'; }
printf '%-50s %12s %12s %8s\n' "# layout (fp32, 64 MiB, busbw GB/s)" "mntrain" "peer" "ratio"
printf '%-50s %12s %12s %8s\n' "1 node x 2 ranks (peer: gloo)" "$m12" "$g12" "$(ratio "$m12" "$g12")"
printf '%-50s %12s %12s %8s\n' "2 nodes x 1 rank (peer: 2 TCP streams, both ways)" "$m21" "$tcp2" "$(ratio "$m21" "$tcp2")"
printf '%-50s %12s %12s %8s\n' "2 nodes x 1 rank (peer: 1 TCP stream, one way)" "$m21" "$tcp" "$(ratio "$m21" "$tcp")"
printf '%-50s %12s %12s %8s\n' "2 nodes x 1 rank (peer: gloo)" "$m21" "$g21" "$(ratio "$m21" "$g21")"
printf '%-50s %12s %12s %8s\n' "1 node x 4 ranks (peer: gloo)" "$m14" "$g14" "$(ratio "$m14" "$g14")"
printf '%-50s %12s %12s %8s\n' "2 nodes x 2 ranks flat (gloo)" "$m22" "$g22" "$(ratio "$m22" "$g22")"
printf '%-50s %12s %12s %8s\n' "2 nodes x 2 ranks hier (gloo)" "$m22h" "$g22" "$(ratio "$m22h" "$g22")"
