#!/usr/bin/env bash
# allreduce_peers.sh — mntrain's allreduce and today's peers, side by side in one run, on the local
# cluster (job_templates/tools/local-cluster.sh up): Open MPI's MPI_Allreduce through mpi4py (what
# ChainerMN's CPU communicators call; Debian's Open MPI 4.1, started by `srun --mpi=pmix` like
# mntrain), PyTorch 2.15's gloo, and the network itself (TCP streams). The peers come from the venv
# benchmarks/peer_venv.sh makes. ROUNDS rounds, each running every row once in turn; medians with
# their spread. Run it on a quiet machine: an apt-get or a build beside it cuts every figure by up
# to two thirds.
#   benchmarks/allreduce_peers.sh [path/to/mntrain] [rounds, default 3]
# Rows (fp32 sum, 64 MiB, in place, busbw as nccl-tests):
#   1 node  x 2 ranks: mntrain (shared memory) vs Open MPI, gloo
#   2 nodes x 1 rank : mntrain (TCP) vs Open MPI, gloo, and two TCP streams at once, node1 -> node2
#                      and node2 -> node1 (the slower direction): a 2-rank allreduce moves its bytes
#                      both ways at the same time, so this is its ceiling
#   1 node  x 4 ranks and 2 nodes x 2 ranks (flat and hier): mntrain vs Open MPI, gloo
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
rounds=${2:-3}
iters=${ITERS:-20}
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
py=$("$here/peer_venv.sh" torch mpi4py)
# mntrain prints nccl-tests' layout: size count type redop root, then time algbw busbw #wrong out of
# place ($6-$9) and in place ($10-$13); the peers print size count type time algbw busbw #wrong
busbw_mnt() { awk '$1 == 67108864 { print $12 }'; }
busbw_peer() { awk '$1 == 67108864 { print $6 }'; }
run_mnt() { # run_mnt TOPOLOGY SRUN_ARGS...
  local topo=$1
  shift
  timeout 300 srun --mpi=pmix "$@" "$m" bench allreduce -b 64M -e 64M -n "$iters" -w 3 --topology "$topo" | busbw_mnt ||
    true
}
# Open MPI decides which ranks share a node by their hostnames: the local cluster's nodes are network
# and mount namespaces of one host, all named alike, so across nodes it would take its shared-memory
# transport (vader) between namespaces and crash (a segfault in mca_btl_vader_poll_handle_frag, seen
# here). Steps over more than one node therefore run it with TCP only (OMPI_MCA_btl=self,tcp), as
# separate hosts would between nodes; within a node of such a step it then uses TCP over loopback
# too, where real nodes would use shared memory (the 2 x 2 rows understate it there).
run_mpi() {
  local env=()
  case " $* " in *" -N2 "*) env=("OMPI_MCA_btl=self,tcp") ;; esac
  env "${env[@]}" timeout 300 srun --mpi=pmix "$@" "$py" "$here/peer_allreduce_mpi.py" -b 64M -e 64M -n "$iters" \
    -w 3 | busbw_peer || true
}
run_gloo() {
  timeout 300 srun --mpi=none "$@" "$py" "$here/peer_allreduce_gloo.py" -b 64M -e 64M -n "$iters" -w 3 | busbw_peer ||
    true
}
tcp_both() { # the slower direction of two streams at once
  timeout 120 srun --mpi=none -N2 -n2 "$py" "$here/tcp_stream.py" --seconds 3 --both |
    awk 'NR == 1 || $(NF-1) < min { min = $(NF-1) } END { if (NR == 2) print min; else print "nan" }' || true
}
med() { # a run that failed left nothing: "n/a" when none is left
  tr ' ' '\n' | { grep -v '^$' || true; } | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR]; else printf "n/a" }'
}
first() { awk '{ print $1 }'; }
ratio() { awk -v a="$(first <<<"$1")" -v b="$(first <<<"$2")" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else printf "n/a" }'; }
echo "# allreduce_peers: $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
  "$("$py" -c 'import re, mpi4py, torch; from mpi4py import MPI; v = re.search(r"v([0-9.]+)", MPI.Get_library_version()); print("Open MPI", v.group(1) if v else "?", "(mpi4py", mpi4py.__version__ + "), PyTorch", torch.__version__)' 2>/dev/null)"
declare -A v=()
for r in $(seq 1 "$rounds"); do
  v[m12]+="$(run_mnt flat -N1 -n2) "; v[o12]+="$(run_mpi -N1 -n2) "; v[g12]+="$(run_gloo -N1 -n2) "
  v[m21]+="$(run_mnt flat -N2 -n2) "; v[o21]+="$(run_mpi -N2 -n2) "; v[g21]+="$(run_gloo -N2 -n2) "; v[t21]+="$(tcp_both) "
  v[m14]+="$(run_mnt flat -N1 -n4) "; v[o14]+="$(run_mpi -N1 -n4) "; v[g14]+="$(run_gloo -N1 -n4) "
  v[m22]+="$(run_mnt flat -N2 -n4 --ntasks-per-node=2) "; v[m22h]+="$(run_mnt hier -N2 -n4 --ntasks-per-node=2) "
  v[o22]+="$(run_mpi -N2 -n4 --ntasks-per-node=2) "; v[g22]+="$(run_gloo -N2 -n4 --ntasks-per-node=2) "
  echo "#   round $r of $rounds done" >&2
done
for k in "${!v[@]}"; do v[$k]=$(med <<<"${v[$k]}"); done
echo "# busbw GB/s, fp32, 64 MiB, in place: median of $rounds rounds (min-max)"
printf '%-28s %-20s %-20s %-20s %-20s %s\n' "# layout" "mntrain" "Open MPI" "gloo" "2 TCP streams" "mntrain / Open MPI, / gloo, / TCP"
row() { printf '%-28s %-20s %-20s %-20s %-20s %s\n' "$1" "$2" "$3" "$4" "${5:--}" \
  "$(ratio "$2" "$3"), $(ratio "$2" "$4")${5:+, $(ratio "$2" "$5")}"; }
row "1 node x 2 ranks" "${v[m12]}" "${v[o12]}" "${v[g12]}"
row "2 nodes x 1 rank" "${v[m21]}" "${v[o21]}" "${v[g21]}" "${v[t21]}"
row "1 node x 4 ranks" "${v[m14]}" "${v[o14]}" "${v[g14]}"
row "2 nodes x 2 ranks flat" "${v[m22]}" "${v[o22]}" "${v[g22]}"
row "2 nodes x 2 ranks hier" "${v[m22h]}" "${v[o22]}" "${v[g22]}"
