#!/usr/bin/env bash
# srun_test.sh — run a test program as a Slurm job step on the local cluster.
#   srun_test.sh TIMEOUT_S SRUN_ARGS... -- PROGRAM ARGS...
# Exits 77 (CTest: skipped) with the reason when no Slurm cluster answers; otherwise the step's
# exit status (124 if it ran past TIMEOUT_S).
set -u
timeout_s=$1
shift
srun_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do srun_args+=("$1"); shift; done
shift
if ! command -v srun >/dev/null 2>&1; then
  echo "SKIP: srun not found (apt-get install slurm-wlm, then job_templates/tools/local-cluster.sh up)"
  exit 77
fi
if ! scontrol ping >/dev/null 2>&1; then
  echo "SKIP: no Slurm cluster answers (start one: job_templates/tools/local-cluster.sh up)"
  exit 77
fi
# shellcheck source=/dev/null
. "$(dirname "$0")/lib.sh" # cluster_node_count
nodes=$(cluster_node_count)
want=0 # the nodes the step asks for: -N K, -NK, --nodes K, --nodes=K (K or MIN-MAX: MIN)
prev=""
for a in "${srun_args[@]}"; do
  k=""
  case $prev in -N | --nodes) k=$a ;; esac
  case $a in -N?*) k=${a#-N} ;; --nodes=*) k=${a#--nodes=} ;; esac
  k=${k%%-*}
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -gt "$want" ] && want=$k
  prev=$a
done
if [ "$want" -gt "${nodes:-0}" ]; then
  echo "SKIP: this test needs $want nodes; the cluster has ${nodes:-0} (network namespaces not permitted? job_templates/tools/local-cluster.sh up --nodes $want)"
  exit 77
fi
exec timeout --kill-after=10 "$timeout_s" srun --mpi=pmix --job-name=mntrain-test "${srun_args[@]}" "$@"
