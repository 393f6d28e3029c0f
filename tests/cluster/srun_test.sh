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
  echo "SKIP: srun not found (apt-get install slurm-wlm, then job_templates/local-cluster.sh up)"
  exit 77
fi
if ! scontrol ping >/dev/null 2>&1; then
  echo "SKIP: no Slurm cluster answers (start one: job_templates/local-cluster.sh up)"
  exit 77
fi
nodes=$(sinfo -h -o '%D' 2>/dev/null | head -n1)
for a in "${srun_args[@]}"; do
  case $a in
    -N2|--nodes=2)
      if [ "${nodes:-0}" -lt 2 ]; then
        echo "SKIP: this test needs 2 nodes; the cluster has ${nodes:-0} (network namespaces not permitted?)"
        exit 77
      fi ;;
  esac
done
exec timeout --kill-after=10 "$timeout_s" srun --mpi=pmix --job-name=mntrain-test "${srun_args[@]}" "$@"
