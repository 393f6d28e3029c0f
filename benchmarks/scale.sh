#!/usr/bin/env bash
# scale.sh — what each rank costs as ranks grow, on the local cluster of 16 nodes
# (job_templates/tools/local-cluster.sh up --nodes 16 --cpus-per-node 8 --gluster: 8 ranks per node at
# 128 need 8 CPUs declared, Slurm refuses more tasks per node than CPUs even with -O), oversubscribed: a correctness and
# cost-growth measurement, not a speed one.
#   benchmarks/scale.sh [path/to/mntrain] [work dir] [RANKS, default "2 8 32 64 128"]
# For each rank count N (on min(N, 16) nodes, N/nodes ranks per node) it runs
#  - `train --arch resnet8` for a few steps: the set-up's phases (the slowest rank's: PMIx init,
#    identities (from PMIx's job information, or a fence), the communicator's secret, shared
#    memory, addresses + TCP, the first step; train prints them, with the most PMIx records one
#    rank read), and, sampled from /proc while the job runs (the nodes share this machine's
#    process table): file descriptors, sockets and established TCP connections per rank, resident
#    memory per rank, and the shared-memory segments mapped on each node with their bytes;
#  - `bench allreduce` at 8 B (latency: time in us) and 64 MiB (bus bandwidth, GB/s).
# Then, with MNT_SCALE_TESTS=1 (default), the scale tests at 128 ranks on 16 nodes
# (MNT_SCALE_RANKS=128 MNT_SCALE_NODES=16 ctest -L scale). Prints one table; results belong in
# benchmarks/README.md with the machine and the date.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=$(realpath "${1:-$here/../build-cpu/mntrain}")
work=${2:-/tmp/mntrain-scale}
ranks=${3:-2 8 32 64 128}
maxnodes=${MNT_SCALE_NODES:-16}
scontrol ping >/dev/null 2>&1 || { echo "scale.sh: no Slurm cluster (job_templates/tools/local-cluster.sh up --nodes $maxnodes --cpus-per-node 8 --gluster)" >&2; exit 1; }
have=$(sinfo -h -N -o '%N' | sort -u | wc -l)
[ "$have" -ge "$maxnodes" ] || { echo "scale.sh: needs $maxnodes nodes, the cluster has $have" >&2; exit 1; }
mkdir -p "$work"
[ -f "$work/data/index.json" ] || "$m" convert synth "$work/data" --classes 10 --images 2048 --size 16 --shards 2 >/dev/null

# sample PIDS...: one line "fds sockets tcp rss_mb" per process, then per node "shm NODE SEGMENTS BYTES"
sample() {
  local p
  for p in "$@"; do
    [ -d "/proc/$p" ] || continue
    local fds socks tcp rss node
    fds=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    socks=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -lname 'socket:*' 2>/dev/null | wc -l)
    # established TCP connections of this process: its socket inodes in its net namespace's table
    tcp=$(awk -v ino="$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -lname 'socket:*' -printf '%l\n' 2>/dev/null |
      tr -dc '0-9\n' | paste -sd, -)" 'BEGIN { n = split(ino, a, ","); for (i = 1; i <= n; i++) want[a[i]] = 1 }
      NR > 1 && $4 == "01" && ($10 in want) { c++ } END { print c + 0 }' "/proc/$p/net/tcp" 2>/dev/null || echo 0)
    rss=$(awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$p/status" 2>/dev/null || echo 0)
    node=$( { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | sed -n 's/^SLURMD_NODENAME=//p' || true)
    echo "rank $fds $socks $tcp $rss"
    # shared-memory mappings: the segment's name (unlinked once mapped: "(deleted)") and its size
    local range path rest
    while read -r range _ _ _ _ path rest; do
      case $path in /dev/shm/mntrain*) echo "shm $node $path $((16#${range#*-} - 16#${range%-*}))" ;; esac
    done < <(cat "/proc/$p/maps" 2>/dev/null || true)
  done
}

printf '# scale.sh: %s, %s, %s\n' "$(date -u +%FT%TZ)" "$(nproc) cores" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
printf '# %5s %5s | %-66s | %7s | %5s %5s %5s %7s | %4s %8s | %9s %9s\n' ranks nodes \
  "set-up, slowest rank (s): init ident secret shm tcp first total" "records" "fds" "socks" "tcp" "rss MB" "shm" "shm MiB" "8B us" "64M GB/s"
for n in $ranks; do
  nodes=$((n < maxnodes ? n : maxnodes))
  out="$work/r$n"
  rm -rf "$out"
  # a run long enough to be looked at: sampled two seconds after its first step, then stopped
  srun --mpi=pmix -N "$nodes" -n "$n" -O "$m" train --data "$work/data" --arch resnet8 --size 16 --batch-per-rank 2 \
    --steps 1000000 --threads 1 --loader-threads 1 --log-every 1000 --out "$out" --force >"$work/r$n.log" 2>&1 &
  job=$!
  for _ in $(seq 1500); do grep -q "set-up (slowest rank)" "$work/r$n.log" 2>/dev/null && break; sleep 0.2; done
  grep -q "set-up (slowest rank)" "$work/r$n.log" || { echo "scale.sh: train at $n ranks did not start:" >&2; tail -20 "$work/r$n.log" >&2; exit 1; }
  sleep 2
  mapfile -t pids < <(pgrep -f -- "^$m train .*--out $out " || true)
  sample "${pids[@]}" >"$work/r$n.sample"
  grep -q "died during\|error" "$work/r$n.log" && { echo "scale.sh: train at $n ranks failed:" >&2; tail -20 "$work/r$n.log" >&2; exit 1; }
  kill -INT "$job" 2>/dev/null; sleep 0.5; kill -INT "$job" 2>/dev/null || true # srun: two ^C end the step
  wait "$job" 2>/dev/null || true
  phases=$(sed -n 's/.*set-up (slowest rank): //p' "$work/r$n.log" | head -n1)
  ph() { echo "$phases" | grep -oE "$1 [0-9.]+ s" | grep -oE '[0-9.]+' || echo 0; }
  lat=$(srun --mpi=pmix -N "$nodes" -n "$n" -O "$m" bench allreduce -b 8 -e 8 -n 20 -w 5 2>&1 |
    awk '$1 == 8 && $3 == "float" { print $6 }')
  bw=$(srun --mpi=pmix -N "$nodes" -n "$n" -O "$m" bench allreduce -b 64M -e 64M -n 3 -w 1 2>&1 |
    awk '/Avg bus bandwidth/ { print $NF }')
  awk -v n="$n" -v nodes="$nodes" -v init="$(ph 'PMIx init')" -v ident="$(ph identities)" -v secret="$(ph secret)" \
    -v shm="$(ph 'shared memory')" -v tcp="$(ph TCP)" -v first="$(ph 'first step')" \
    -v total="$(echo "$phases" | grep -oE 'total [0-9.]+' | grep -oE '[0-9.]+' || echo 0)" -v lat="${lat:-nan}" -v bw="${bw:-nan}" \
    -v rec="$(echo "$phases" | grep -oE '[0-9]+ PMIx records' | grep -oE '^[0-9]+' || echo nan)" '
    $1 == "rank" { k++; fd += $2; so += $3; tc += $4; rs += $5; if ($5 > rmax) rmax = $5 }
    $1 == "shm" { seg[$2 " " $3] = $4; }
    END {
      for (s in seg) { split(s, a, " "); nseg[a[1]]++; bytes[a[1]] += seg[s] }
      for (x in nseg) { if (nseg[x] > smax) smax = nseg[x]; if (bytes[x] > bmax) bmax = bytes[x] }
      printf "  %5d %5d | %5.2f %5.2f %6.2f %5.2f %5.2f %5.2f %5.2f %24s | %7s | %5.1f %5.1f %5.1f %7.1f | %4d %8.1f | %9s %9s\n",
        n, nodes, init, ident, secret, shm, tcp, first, total, "", rec, fd / k, so / k, tc / k, rs / k, smax, bmax / 1048576, lat, bw
    }' "$work/r$n.sample"
done
echo "# per rank: mean over ranks (rss: resident set mid-run); shm: segments and MiB mapped on the busiest node"
if [ "${MNT_SCALE_TESTS:-1}" = 1 ] && [ -d "$here/../build-cpu" ]; then
  echo "# the scale tests at 128 ranks on $maxnodes nodes:"
  MNT_SCALE_RANKS=128 MNT_SCALE_NODES=$maxnodes MNT_SCALE_AR_TIMEOUT=${MNT_SCALE_AR_TIMEOUT:-850} ctest --test-dir "$here/../build-cpu" -L scale --output-on-failure | tail -n 25
fi
