# shellcheck shell=bash
# lib.sh — helpers for cluster test scripts, sourced:  . "$(dirname "$0")/lib.sh"
# It brings tests/lib.sh (ok, bad, fail, skip, left_out, finish: every shell test's helpers) and adds:
#
#   ckpt=$(ckpt_fs_or_skip) || exit 77   the GlusterFS checkpoint volume's mount path (shared by
#                                        all nodes), or "SKIP: <reason>" on stderr and exit 77
#                                        (CTest: skipped). Called without $( ), it exits the script.
#   cluster_nodes                        2 or 1: whether the cluster has two nodes (or more)
#   cluster_node_count                   the cluster's nodes: the local cluster's (local-cluster.sh
#                                        records them), else as many as sinfo lists; 0 without one
#   slurm_or_skip [2]                    sbatch and a Slurm cluster that answers (with 2: of 2
#                                        nodes), or "SKIP: <reason>" and exit 77
#   nodes_or_skip K                      the same, with K nodes or more; else "SKIP: needs a cluster
#                                        of K nodes, this one has N (local-cluster.sh down; up ...)"
#   fashion_mnist_sets MNTRAIN DIR       Fashion-MNIST (Debian's dataset-fashion-mnist) converted
#                                        into DIR/train (4 shards) and DIR/test (2); "SKIP: ..." and
#                                        exit 77 without the package, exit 1 when a conversion fails
#   node_tmpfs_mount DIR SIZE            a tmpfs of SIZE (e.g. 8m) at DIR inside every node, seen
#                                        by the jobs only (not by this shell); a full disk on demand
#   node_tmpfs_umount DIR                and away again
#
# The volume comes from 'job_templates/tools/local-cluster.sh up --gluster', which records its mount
# path in /run/mntrain-cluster/gluster (or the reason it is missing in gluster-unavailable); it is
# re-checked with srun, because a path that is not mounted in the jobs' namespaces is a plain
# directory there and writes to it would silently land on the local disk.
# The tmpfs helpers need root and the local cluster (local-cluster.sh nsexec); without them they
# print "SKIP: ..." and exit 77; a failing mount or unmount returns its status.

MNT_CLUSTER_STATE=${MNT_CLUSTER_STATE:-/run/mntrain-cluster}
MNT_LOCAL_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/job_templates/tools/local-cluster.sh

cluster_node_count() {
  local n
  n=$(cat "$MNT_CLUSTER_STATE/nodes" 2>/dev/null)
  if ! [[ $n =~ ^[0-9]+$ ]]; then
    case $(cat "$MNT_CLUSTER_STATE/mode" 2>/dev/null) in
      two) n=2 ;; # a local cluster started before it recorded its nodes
      one) n=1 ;;
      *) n=$(sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l) ;;
    esac
  fi
  echo "${n:-0}"
}

cluster_nodes() {
  if [ "$(cluster_node_count)" -ge 2 ]; then echo 2; else echo 1; fi
}

# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

_lib_skip() { skip "$@"; } # SKIP: on stderr, exit 77 (tests/lib.sh)

slurm_or_skip() {
  if ! command -v sbatch >/dev/null 2>&1 || ! scontrol ping >/dev/null 2>&1; then
    _lib_skip "no Slurm cluster answers (job_templates/tools/local-cluster.sh up)"
  fi
  if [ "${1:-1}" -eq 2 ] && [ "$(cluster_nodes)" -ne 2 ]; then _lib_skip "needs the 2-node local cluster"; fi
}

nodes_or_skip() {
  slurm_or_skip 1
  local have
  have=$(cluster_node_count)
  [ "$have" -ge "$1" ] || _lib_skip "needs a cluster of $1 nodes, this one has $have (job_templates/tools/local-cluster.sh down; job_templates/tools/local-cluster.sh up --nodes $1 --gluster)"
}

ckpt_fs_or_skip() {
  command -v srun >/dev/null 2>&1 || _lib_skip "srun not found (apt-get install slurm-wlm, then job_templates/tools/local-cluster.sh up --gluster)"
  scontrol ping >/dev/null 2>&1 || _lib_skip "no Slurm cluster answers (start one: job_templates/tools/local-cluster.sh up --gluster)"
  if ! [ -f "$MNT_CLUSTER_STATE/gluster" ]; then
    if [ -f "$MNT_CLUSTER_STATE/gluster-unavailable" ]; then
      _lib_skip "no GlusterFS checkpoint volume: $(head -n1 "$MNT_CLUSTER_STATE/gluster-unavailable")"
    fi
    _lib_skip "no GlusterFS checkpoint volume (start the cluster with: job_templates/tools/local-cluster.sh up --gluster)"
  fi
  local path nodes got
  path=$(head -n1 "$MNT_CLUSTER_STATE/gluster")
  nodes=$(cluster_node_count) # every node: a scale test's job spans them all
  got=$(timeout 60 srun --mpi=none -N "$nodes" -n "$nodes" --job-name=mntrain-ckpt-check \
    findmnt -n -o FSTYPE "$path" 2>/dev/null | grep -cx fuse.glusterfs || true)
  [ "${got:-0}" -eq "$nodes" ] ||
    _lib_skip "the GlusterFS volume is not mounted at $path on every node (srun findmnt: ${got:-0} of $nodes)"
  echo "$path"
}

_lib_nsexec_ready() {
  [ "$(id -u)" -eq 0 ] || _lib_skip "mounting inside the nodes needs root"
  [ -f "$MNT_CLUSTER_STATE/up" ] || _lib_skip "the local cluster is not up (job_templates/tools/local-cluster.sh up)"
}

node_tmpfs_mount() {
  [ $# -eq 2 ] || { echo "usage: node_tmpfs_mount DIR SIZE" >&2; return 2; }
  _lib_nsexec_ready
  # shellcheck disable=SC2016
  "$MNT_LOCAL_CLUSTER" nsexec all -- sh -c 'mkdir -p "$1" && mount -t tmpfs -o "size=$2" tmpfs "$1"' sh "$1" "$2"
}

node_tmpfs_umount() {
  [ $# -eq 1 ] || { echo "usage: node_tmpfs_umount DIR" >&2; return 2; }
  _lib_nsexec_ready
  "$MNT_LOCAL_CLUSTER" nsexec all -- umount "$1"
}

fashion_mnist_sets() {
  local m=$1 dir=$2 fm=/usr/share/datasets/fashion-mnist
  [ -f "$fm/train-images-idx3-ubyte.gz" ] || { echo "SKIP: apt-get install dataset-fashion-mnist"; exit 77; }
  "$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$dir/train" --shards 4 \
    >/dev/null || exit 1
  "$m" convert idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$dir/test" --shards 2 \
    >/dev/null || exit 1
}

# await_requeued JOB: wait (up to 3 minutes) until batch job JOB, which requeues itself, has finished
# its last attempt; fails naming its state otherwise. Slurm gives a requeued job a begin time about
# two minutes ahead: it is started as soon as the first attempt's step daemons are gone (before,
# mpi/pmix fails: its socket stepd.slurm.pmix.JOB.STEP is still bound, and the job id is the same),
# and a second after that (within ~0.1 s of the requeue slurmctld kills it at launch, "Killing
# non-startable batch JobId=N: Job credential revoked"). squeue may not list a job while it is being
# requeued: it is finished when absent for 2 s. (Step daemons of this PID namespace only: a cluster in
# other namespaces on the machine, as tests/fresh-machine.sh trixie runs, has job ids of its own.)
await_requeued() {
  local job=$1 hurried=0 gone=0 state=""
  for _ in $(seq 1 1800); do
    state=$(squeue -h -j "$job" -o '%T %r' 2>/dev/null)
    if [ -z "$state" ]; then
      gone=$((gone + 1))
      [ $gone -ge 20 ] && return 0
      sleep 0.1
      continue
    fi
    gone=0
    if [ $hurried -eq 0 ] && [ "$state" = "PENDING BeginTime" ] && ! pgrep --ns $$ --nslist pid -f "slurmstepd: \[$job\." >/dev/null; then
      sleep 1
      scontrol update JobId="$job" StartTime=now && hurried=1 && echo "job $job requeued: started a second later"
    fi
    sleep 0.1
  done
  fail "job $job still $state after 3 minutes"
}
