#!/usr/bin/env bash
# ckpt.sh — `mntrain bench ckpt` with 1, 2 and 4 ranks on the local cluster, on the local disk (a
# directory both nodes see) and on the GlusterFS volume (local-cluster.sh up --gluster; skipped
# when it is not up), each line next to `dd conv=fsync` (write) and dd's cold read of that file (its pages
# dropped) on the same filesystem in the same run.
# Quiet machine only.
#   benchmarks/ckpt.sh [path/to/mntrain] [MB, default: ResNet-50 with momentum, about 205]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
m=$(cd "$(dirname "$m")" && pwd)/$(basename "$m")
mb=${2:-}
local_dir=/var/tmp/mntrain-bench-ckpt
mkdir -p "$local_dir"
trap 'rm -rf "$local_dir"' EXIT
echo "# ckpt: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
fss=("local:$local_dir")
if [ -f /run/mntrain-cluster/gluster ]; then fss+=("gluster:$(head -n1 /run/mntrain-cluster/gluster)"); fi
for fs in "${fss[@]}"; do
  name=${fs%%:*}
  dir=${fs#*:}
  for layout in "-N1 -n1" "-N2 -n2" "-N2 -n4 --ntasks-per-node=2"; do
    echo "## $name ($dir), srun $layout"
    # shellcheck disable=SC2086
    timeout 600 srun --mpi=pmix $layout "$m" bench ckpt --dir "$dir" ${mb:+--mb "$mb"} --repeat 5 2>&1 |
      grep -v "^mntrain: no PMIx"
  done
done
