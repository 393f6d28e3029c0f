#!/usr/bin/env bash
# local-cluster.sh — a throwaway Slurm cluster on one machine, for trying and testing mntrain.
#
#   job_templates/tools/local-cluster.sh up [--nodes N] [--cpus-per-node C] [--install] [--one-node] [--gluster]
#                                                                start it (as root)
#   job_templates/tools/local-cluster.sh status                        what is running
#   job_templates/tools/local-cluster.sh nsexec NODE|all -- CMD ARGS...  run CMD inside a node (as root)
#   job_templates/tools/local-cluster.sh down                          stop everything it started
#
# It starts munged with a fresh key, slurmctld, and N slurmd "nodes" (--nodes N, 1 to 32, default
# 2: node1 .. nodeN; --cpus-per-node C CPUs declared each, default 4, oversubscription allowed),
# each in its own network and mount namespace joined to a bridge, so that srun --mpi=pmix -N N
# gives processes on N nodes with their own addresses, and PMIx reports N nodes with their own
# local ranks. --nodes 1 is one such node in a namespace too. Where network namespaces are not
# permitted (or with --one-node) it runs one node without a network namespace (node1 at
# 127.0.0.1; --one-node: 8 CPUs unless --cpus-per-node; the fall-back: all the CPUs asked for,
# N x C, 8 by default) and says so.
#
# Address plan (MNT_CLUSTER_NET, default 10.231.77): the bridge mntbr0 is NET.1 (slurmctld and
# the gluster host), node k is NET.(10+k) on its veth mntv<k> (node1 .11, node2 .12 ... node32 .42).
#
# The size (nodes, CPUs per node) is recorded in /run/mntrain-cluster/size. 'up' on a running
# cluster of the same size does nothing (with --gluster it adds the volume); 'up' with another
# size fails (exit 1) and names the running size: 'down' first.
#
# --gluster: a shared checkpoint filesystem like a real cluster's: a GlusterFS volume "mntckpt"
# (two bricks under /srv/mntrain-gluster, served by a glusterd of its own) mounted at
# /mnt/mntrain-ckpt inside every node (each node is a separate FUSE client over the network).
# It is checked with srun (findmnt on every node, a file written on one node read on the other).
# On success /run/mntrain-cluster/gluster holds the mount path; otherwise gluster-unavailable
# there holds the reason (no /dev/fuse, glusterfs not installed, glusterd failed, mount
# failed...), 'up' says it and still succeeds: the cluster is usable without it. With --install
# it also installs glusterfs-server and glusterfs-client. On a cluster that is already up,
# 'up --gluster' adds the volume. Jobs only see mounts made inside the nodes' namespaces; a mount
# in the root namespace is invisible to them (tests: tests/cluster/lib.sh, ckpt_fs_or_skip).
#
# nsexec runs CMD inside the mount and network namespaces of a node's slurmd (where its jobs
# run), in every node one after the other with 'all'; exit status: CMD's (the first failure with
# 'all'). E.g. a small filesystem that only the jobs see:
#   local-cluster.sh nsexec all -- mount -t tmpfs -o size=8m tmpfs /some/dir
#   local-cluster.sh nsexec all -- umount /some/dir
#
# How it works (verified on Debian 12, Slurm 22.05, and on Debian 13, Slurm 24.11.5 with PMIx 5.0.7;
# see also tests/README.md "Development findings"):
# - slurmd is started with nsenter --net=/var/run/netns/<node>; `ip netns exec` would remount
#   /sys and slurmd then fails on cgroups.
# - The PMIx plugin creates <TmpFS>/spmix_appdir_<uid>_<job>.<step> on every node; on one
#   machine the names collide, so TmpFS points at /var/lib/slurm-nodetmp and every slurmd runs in
#   its own mount namespace (unshare --mount --propagation private) with its own directory
#   bind-mounted there. Everything else (/tmp, the build tree) stays shared, like a parallel
#   filesystem.
# - GlusterFS: the volume's host is the bridge address (.1), reachable from the root namespace
#   and from the nodes; gluster refuses 127.0.0.1, and the host name maps to 127.0.0.1 (which a
#   node would resolve to its own loopback). With one node (no bridge) the host is the machine's
#   first global IPv4 address. 'down' unmounts inside each node, stops and deletes the volume,
#   stops glusterd and removes the bricks (a reused brick directory is refused).
# - Slurm 24.11 (24.05 and later): slurmd loads the cgroup plugin whatever the other plugins are,
#   and without a cgroup filesystem it may use it exits ("Unable to initialize cgroup plugin"). So
#   from 24.05 on (the version from `slurmd -V`) /etc/slurm/cgroup.conf says CgroupPlugin=disabled
#   (a value 24.05 brought; 22.05 rejects it and needs no cgroup.conf, so none is written there);
#   it carries the marker and 'down' removes it, like slurm.conf. No other option of slurm.conf
#   here was dropped or renamed in 24.11: its logs warn of nothing else. Both versions log
#   "Configured MailProg is invalid" without /bin/mail: MailProg=/bin/true.
# - Its own daemons are found by the pid files it had them write (munged --pid-file, SlurmctldPidFile,
#   SlurmdPidFile, glusterd's in the state directory), each checked to be alive and to carry the
#   daemon's name, never by name alone: another Slurm or munged on the machine (a cluster in child
#   PID and network namespaces, as tests/fresh-machine.sh trixie runs, is visible from here) is
#   neither used nor stopped ('up' once took such a munged for its own and ran without one). The
#   step daemons have no pid file: 'down' kills those in this script's PID namespace and in the
#   mount namespace of one of its slurmd's (recorded at 'up' in the state directory). A munged or
#   glusterd of the machine's, found by the pid file its Debian service writes
#   (/run/munge/munged.pid, /run/glusterd.pid), is used as before, and left running.
# - Inside a chroot in namespaces of its own (tests/fresh-machine.sh trixie), "/" must be a mount
#   point (the root bound onto itself): unshare --propagation and ip netns add change its
#   propagation and fail with EINVAL otherwise (then the fall-back to one node). srun resolves the
#   machine's host name, and a network namespace has no DNS: /etc/hosts must name it.
#
# It installs nothing unless asked (--install: apt-get install of slurm-wlm, munge, iproute2).
# It writes /etc/slurm/slurm.conf (and on Slurm 24.05 and later cgroup.conf), refusing to replace
# one it did not write, and keeps its state in /run/mntrain-cluster. Environment: MNT_CLUSTER_NET (default 10.231.77; see the address plan).
set -euo pipefail

STATE=/run/mntrain-cluster
CONF=/etc/slurm/slurm.conf
CGROUP_CONF=/etc/slurm/cgroup.conf
MARK="# generated by mntrain local-cluster.sh"
# Files written by this script before it moved (from job_templates/ to job_templates/tools/)
# carry its old path in the marker; they are ours too. A marker that names a path breaks on
# the next move, so the one written now does not.
MARK_RE='^# generated by mntrain (job_templates/(tools/)?)?local-cluster\.sh'
ours() { [ -f "$1" ] && grep -qE "$MARK_RE" "$1"; }
NET=${MNT_CLUSTER_NET:-10.231.77}
BRIDGE=mntbr0
MAX_NODES=32
NODES=(node1 node2)   # set by 'up' from --nodes, else from the running cluster (cluster_nodes)
CPUS=4
NODETMP=/var/lib/slurm-nodetmp
GL_VOL=mntckpt
GL_MNT=/mnt/mntrain-ckpt
GL_BRICKS=/srv/mntrain-gluster
GL_LOGDIR=/var/log/glusterfs

say() { printf 'local-cluster: %s\n' "$*"; }
die() { printf 'local-cluster: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (it starts daemons and namespaces)"; }

install_packages() {
  local gluster=$1
  say "installing slurm-wlm, munge, iproute2, util-linux with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q slurm-wlm munge iproute2 util-linux
  if [ "$gluster" -eq 1 ]; then
    say "installing glusterfs-server, glusterfs-client with apt-get"
    apt-get install -y -q --no-install-recommends glusterfs-server glusterfs-client
  fi
}

is_up() { [ -f "$STATE/up" ] && scontrol ping >/dev/null 2>&1; }

# a live process, not a zombie: on these machines PID 1 (a VM's process_api, not an init) reaps
# orphans late, so a killed daemon stays a zombie for about a second and pgrep/kill -0 find it.
# Read from /proc/PID/stat with builtins: one ps per check (tens of them with many nodes) cost
# seconds on a loaded machine.
alive() {
  local st
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  { read -r st < "/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }   # the state follows the command name, which may hold spaces and parentheses
  case ${st%% *} in Z* | X*) return 1 ;; esac
}
# the live process whose pid file is $1 (and whose name is $2, when given: a pid file left behind
# may name a pid that now belongs to something else)
pid_alive() {
  local p c
  { read -r p < "$1"; } 2>/dev/null && alive "$p" || return 1
  [ -z "${2:-}" ] && return 0
  { read -r c < "/proc/$p/comm"; } 2>/dev/null && [ "$c" = "$2" ]
}
# the pid in pid file $1 when that process is alive (and named $2), else nothing
pid_of() { if pid_alive "$1" "${2:-}"; then cat "$1"; fi; }

# Our daemons are found by the pid files this script had them write, never by name: another
# Slurm or munged on the same machine (a cluster in child PID/network namespaces, like the
# Debian 13 one of tests/fresh-machine.sh, is visible from here) is not ours to use or stop.
MUNGED_PID=/run/munge/munged.pid
SLURMCTLD_PID=/run/slurmctld.pid
slurmd_pidfile() { echo "/run/slurmd-$1.pid"; }

# the namespace link of process $1 ($2: pid, mnt, net ...), e.g. "mnt:[4026532285]"
ns_of() { readlink "/proc/$1/ns/$2" 2>/dev/null || true; }

# live slurmstepd processes of this cluster (they have no pid file): in this script's PID
# namespace and in the mount namespace of one of our slurmd's (each slurmd runs in a mount
# namespace of its own, recorded in $STATE/slurmd-mntns when it started; its step daemons
# inherit it). A slurmstepd of another cluster is in another PID or mount namespace.
our_stepds() {
  local d p c mine pidns mnt
  mine=$(cat "$STATE/slurmd-mntns" 2>/dev/null) || return 0
  [ -n "${mine// /}" ] || return 0
  pidns=$(ns_of $$ pid)
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    { read -r c < "$d/comm"; } 2>/dev/null || continue
    [ "$c" = slurmstepd ] || continue
    alive "$p" || continue
    [ "$(ns_of "$p" pid)" = "$pidns" ] || continue
    mnt=$(ns_of "$p" mnt)
    [ -n "$mnt" ] || continue
    case " $mine " in *" $mnt "*) echo "$p" ;; esac
  done
}

# record the mount namespace of every slurmd of ours (for our_stepds)
record_slurmd_ns() {
  local n p all=""
  for n in "${NODES[@]}"; do
    p=$(pid_of "$(slurmd_pidfile "$n")" slurmd)
    [ -z "$p" ] || all+="$(ns_of "$p" mnt) "
  done
  echo "$all" > "$STATE/slurmd-mntns"
}

start_munge() {
  # a munged that wrote the pid file we would (Debian's munge service does) serves our socket
  if pid_alive "$MUNGED_PID" munged; then
    say "munged is already running (pid $(cat "$MUNGED_PID"), $MUNGED_PID): using it"
    return
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge /etc/munge
  # a fresh key for this cluster
  head -c 1024 /dev/urandom > /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGED_PID"
  touch "$STATE/munged-ours"
  munge -n | unmunge >/dev/null || die "munge does not work (see /var/log/munge/munged.log)"
}

# node k's address: NET.(10+k)
node_addr() { echo "$NET.$((10 + ${1#node}))"; }

make_namespaces() {
  # returns non-zero when namespaces are not permitted here
  ip link add "$BRIDGE" type bridge 2>/dev/null || return 1
  ip addr add "$NET.1/24" dev "$BRIDGE" && ip link set "$BRIDGE" up || return 1
  # one 'ip -batch' for the root namespace and one per node: 6 ip processes per node one after
  # the other took seconds with 16 nodes on a loaded machine
  local n k batch=""
  for n in "${NODES[@]}"; do
    k=${n#node}
    batch+="netns add mnt-$n
link add mntv$k type veth peer name eth0 netns mnt-$n
link set mntv$k master $BRIDGE up
"
  done
  ip -batch - <<< "$batch" || return 1
  for n in "${NODES[@]}"; do
    ip -n "mnt-$n" -batch - <<BATCH || return 1
addr add $(node_addr "$n")/24 dev eth0
link set eth0 up
link set lo up
BATCH
  done
}

# every namespace and veth of ours, whatever the size (also those of a run whose state is lost)
remove_namespaces() {
  local n l
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^mnt-node[0-9]+$/ { print $1 }'); do
    ip netns del "$n" 2>/dev/null || true   # takes its eth0 and so the veth pair with it
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); if ($2 ~ /^mntv[0-9]+$/) print $2 }'); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

# the installed Slurm's version as one number, major * 100 + minor (22.05 -> 2205, 24.11 -> 2411)
slurm_version() {
  local v
  v=$(/usr/sbin/slurmd -V 2>/dev/null | grep -oE '[0-9]+\.[0-9]+' | head -n1)
  [ -n "$v" ] || { echo 0; return; }
  echo $((10#${v%%.*} * 100 + 10#${v#*.}))
}

write_conf() {
  local mode=$1 host ver
  host=$(hostname -s)
  ver=$(slurm_version)
  if [ -f "$CONF" ] && ! ours "$CONF"; then
    die "$CONF exists and was not written by this script; move it away first"
  fi
  # Slurm 24.05 and later: slurmd always loads the cgroup plugin and, with no cgroup filesystem
  # it may use, fails ("Unable to initialize cgroup plugin"); CgroupPlugin=disabled (new in
  # 24.05; 22.05 rejects the value) turns that off. Before 24.05 no cgroup.conf is written.
  if [ "$ver" -ge 2405 ]; then
    if [ -f "$CGROUP_CONF" ] && ! ours "$CGROUP_CONF"; then
      die "$CGROUP_CONF exists and was not written by this script; move it away first"
    fi
    printf '%s; removed by %s\nCgroupPlugin=disabled\n' "$MARK" "'local-cluster.sh down'" > "$CGROUP_CONF"
  elif ours "$CGROUP_CONF"; then
    rm -f "$CGROUP_CONF"
  fi
  echo "Slurm $(/usr/sbin/slurmd -V 2>/dev/null | grep -oE '[0-9][0-9.]*' | head -n1)" > "$STATE/slurm-version"
  mkdir -p /etc/slurm /var/log/slurm /var/spool/slurmctld "$NODETMP"
  local ctl_addr nodes_conf="" n
  if [ "$mode" = netns ]; then
    ctl_addr="$NET.1"
    for n in "${NODES[@]}"; do
      nodes_conf+="NodeName=$n NodeAddr=$(node_addr "$n") NodeHostname=$host CPUs=$CPUS State=UNKNOWN
"
    done
  else
    ctl_addr="127.0.0.1"
    nodes_conf="NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$CPUS State=UNKNOWN
"
  fi
  cat > "$CONF" <<CONF
$MARK ($mode mode, ${#NODES[@]} node(s)); removed by 'local-cluster.sh down'
ClusterName=mntrain
SlurmctldHost=$host($ctl_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=$SLURMCTLD_PID
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
MpiDefault=pmix
TmpFS=$NODETMP
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=60
${nodes_conf}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

start_slurmd() {
  local n=$1 netns=$2
  mkdir -p "/var/spool/slurmd/$n" "$NODETMP-$n"
  local run=(unshare --mount --propagation private sh -c \
    "mount --bind '$NODETMP-$n' '$NODETMP' && exec /usr/sbin/slurmd -N '$n'")
  if [ -n "$netns" ]; then
    nsenter --net="/var/run/netns/$netns" "${run[@]}"
  else
    "${run[@]}"
  fi
}

# start slurmd of every node at once (each start forks unshare, sh, nsenter and slurmd, which
# reads the config and daemonizes: one after the other that added up with many nodes)
start_slurmds() {
  local mode=$1 n pids=() rc=0 p
  for n in "${NODES[@]}"; do
    if [ "$mode" = netns ]; then start_slurmd "$n" "mnt-$n" & else start_slurmd "$n" "" & fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

wait_idle() {
  local want=$1 idle t0=$SECONDS resumed=0
  while [ $((SECONDS - t0)) -lt 60 ]; do
    idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)' || true)
    [ "$idle" -ge "$want" ] && return 0
    # nodes still not up after 10 s, and again after 30 s: resume them
    if { [ $resumed -eq 0 ] && [ $((SECONDS - t0)) -ge 10 ]; } ||
      { [ $resumed -eq 1 ] && [ $((SECONDS - t0)) -ge 30 ]; }; then
      scontrol update nodename=ALL state=resume >/dev/null 2>&1 || true
      resumed=$((resumed + 1))
    fi
    sleep 0.2   # the nodes register within a second or two of their start
  done
  return 1
}

# ---- GlusterFS (--gluster) ------------------------------------------------------------------------

# the nodes of the running cluster, from $STATE/nodes (a cluster started before that was
# recorded: from its mode, two or one)
cluster_nodes() {
  local n
  n=$(cat "$STATE/nodes" 2>/dev/null) || n=""
  if [ -z "$n" ]; then
    if [ "$(cat "$STATE/mode" 2>/dev/null)" = two ]; then n=2; else n=1; fi
  fi
  seq -f 'node%g' -s ' ' 1 "$n"
}

# the mode of the running cluster: netns (nodes in namespaces on the bridge) or one (no bridge)
cluster_mode() {
  case $(cat "$STATE/mode" 2>/dev/null) in netns | two) echo netns ;; *) echo one ;; esac
}

gl() { timeout 60 gluster --mode=script "$@"; }

# a glusterd runs here: ours ($STATE/glusterd.pid) or the machine's (Debian's glusterd.service
# runs it with -p /run/glusterd.pid); from the pid files, not by name (another cluster's glusterd
# in other namespaces is not ours), and not by asking the gluster CLI (3 s when none answers)
GLUSTERD_SYS_PID=/run/glusterd.pid
glusterd_running() { pid_alive "$STATE/glusterd.pid" glusterd || pid_alive "$GLUSTERD_SYS_PID" glusterd; }

# the telling line of a command's output: the first error, else the first line
gl_msg() { grep -m1 -iE 'error|fail' <<< "$1" || head -n1 <<< "$1"; }

# pids of glusterd's hook scripts still running for our volume (run after create, set, start, delete)
# (in this PID namespace: the glusterd of a cluster in another one is not ours)
gl_hook_pids() { pgrep --ns $$ --nslist pid -f -- "/var/lib/glusterd/hooks/.* --volname=$GL_VOL( |\$)" || true; }

# pids of the glusterfs (client) and glusterfsd (brick) processes of our volume, in this PID
# namespace (those of a cluster in another one are not ours)
gl_vol_pids() {
  local p pidns
  pidns=$(ns_of $$ pid)
  for p in $(gl_vol_pids_all); do
    [ "$(ns_of "$p" pid)" != "$pidns" ] || echo "$p"
  done
}
gl_vol_pids_all() {
  ps -eo pid=,comm=,args= 2>/dev/null | awk -v v="$GL_VOL" '
    $2 == "glusterfs" || $2 == "glusterfsd" {
      for (i = 3; i <= NF; i++) {
        a = $i
        if (a == "--volfile-id" && i < NF) a = "--volfile-id=" $(i + 1)
        if (a == "--volfile-id=" v || a == "--volfile-id=/" v || index(a, "--volfile-id=" v ".") == 1) { print $1; break }
      }
    }'
}

# the gluster host: the bridge address with nodes in namespaces; in one-node mode (no bridge) the
# first global IPv4 address of the machine (gluster refuses 127.0.0.1 and the host name, which
# maps to it)
gl_host() {
  if [ "$(cluster_mode)" = netns ]; then
    echo "$NET.1"
  else
    ip -4 -o addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
  fi
}

# fstype of GL_MNT in the mount namespace of pid $1 (empty: not a mount point)
gl_fstype_in() { nsenter -t "$1" -m findmnt -n -o FSTYPE "$GL_MNT" 2>/dev/null || true; }

gl_unavailable() {
  echo "$*" > "$STATE/gluster-unavailable"
  say "GlusterFS UNAVAILABLE: $* (the cluster is up without it; log: $STATE/gluster.log)"
}

# start glusterd, create, start and mount the volume in every node, check it with srun.
# Never fails: on any problem it cleans up, writes $STATE/gluster-unavailable and returns 0.
gluster_up() {
  rm -f "$STATE/gluster" "$STATE/gluster-unavailable"
  : > "$STATE/gluster.log"
  local reason
  if reason=$(gluster_try_up 2>>"$STATE/gluster.log"); then
    echo "$GL_MNT" > "$STATE/gluster"
    say "GlusterFS volume $GL_VOL mounted at $GL_MNT in: $(cluster_nodes)"
  else
    gluster_down >>"$STATE/gluster.log" 2>&1 || true
    reason=$(tail -n1 <<< "$reason")
    gl_unavailable "${reason:-unknown failure (see $STATE/gluster.log)}"
  fi
}

# prints the reason and returns 1 on failure
gluster_try_up() {
  local c
  for c in glusterd gluster glusterfs mount.glusterfs; do
    command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || [ -x "/sbin/$c" ] || {
      echo "glusterfs is not installed ('$c' missing: apt-get install glusterfs-server glusterfs-client, or up --install --gluster)"
      return 1
    }
  done
  [ -c /dev/fuse ] || { echo "no /dev/fuse (FUSE is not available here)"; return 1; }
  local host
  host=$(gl_host)
  [ -n "$host" ] || { echo "no global IPv4 address for the gluster host in one-node mode (gluster refuses 127.0.0.1)"; return 1; }
  echo "$host" > "$STATE/gluster-host"
  mkdir -p "$GL_LOGDIR" "$GL_MNT" || { echo "cannot create $GL_MNT"; return 1; }
  # glusterd: ours, unless the machine's runs (/run/glusterd.pid) or ours already does
  if pid_alive "$GLUSTERD_SYS_PID" glusterd; then
    echo "glusterd is already running (pid $(cat "$GLUSTERD_SYS_PID"), $GLUSTERD_SYS_PID): using it" >&2
    rm -f "$STATE/glusterd.pid"
  elif pid_alive "$STATE/glusterd.pid" glusterd; then
    echo "our glusterd is already running (pid $(cat "$STATE/glusterd.pid"))" >&2
  else
    setsid /usr/sbin/glusterd -N </dev/null >>"$GL_LOGDIR/glusterd.stdout" 2>&1 &
    echo $! > "$STATE/glusterd.pid"
  fi
  local i
  for i in $(seq 1 150); do
    gl volume list >/dev/null 2>&1 && break
    if [ -f "$STATE/glusterd.pid" ] && ! pid_alive "$STATE/glusterd.pid" glusterd; then
      echo "glusterd failed to start (see $GL_LOGDIR/glusterd.log)"
      return 1
    fi
    [ "$i" -eq 150 ] && { echo "glusterd does not answer after 30 s (see $GL_LOGDIR/glusterd.log)"; return 1; }
    sleep 0.2
  done
  # a volume left by a run that did not end cleanly
  if gl volume info "$GL_VOL" >/dev/null 2>&1; then
    echo "removing a volume $GL_VOL left by an earlier run" >&2
    gl volume stop "$GL_VOL" force >&2 || true
    gl volume delete "$GL_VOL" >&2 || true
  fi
  rm -rf "$GL_BRICKS"   # a brick directory used before is refused (.glusterfs/, xattrs)
  mkdir -p "$GL_BRICKS/b1" "$GL_BRICKS/b2" || { echo "cannot create the bricks under $GL_BRICKS"; return 1; }
  chmod 1777 "$GL_BRICKS/b1" "$GL_BRICKS/b2"   # the volume's root: writable by every user, like /tmp
  local out
  out=$(gl volume create "$GL_VOL" transport tcp "$host:$GL_BRICKS/b1" "$host:$GL_BRICKS/b2" force 2>&1) || {
    echo "gluster volume create failed: $(gl_msg "$out")"
    return 1
  }
  # read-after-rename across nodes returned old contents with the defaults (tests/README.md "Filesystems")
  # (one 'volume set' takes several pairs: each call is a cluster-wide transaction, ~0.5 s loaded)
  out=$(gl volume set "$GL_VOL" performance.open-behind off features.cache-invalidation on \
    performance.cache-invalidation on 2>&1) || {
    echo "gluster volume set failed: $(gl_msg "$out")"
    return 1
  }
  out=$(gl volume start "$GL_VOL" 2>&1) || { echo "gluster volume start failed: $(gl_msg "$out")"; return 1; }
  # mount inside every node's mount + network namespace (the jobs' view), all nodes at once: one
  # mount (a FUSE client fetching the volume file) takes about a second on a loaded machine
  local n pid pids=() nodes
  read -r -a nodes <<< "$(cluster_nodes)"
  for n in "${nodes[@]}"; do
    pid_alive "$(slurmd_pidfile "$n")" || { echo "slurmd of $n is not running"; return 1; }
    pid=$(cat "$(slurmd_pidfile "$n")")
    {
      timeout 60 nsenter -t "$pid" -m -n mount -t glusterfs -o "log-file=$GL_LOGDIR/$GL_VOL-$n.log" \
        "$host:/$GL_VOL" "$GL_MNT" </dev/null || exit 1
      [ "$(gl_fstype_in "$pid")" = fuse.glusterfs ] || { echo "mount did not take"; exit 2; }
    } >"$STATE/gluster-mount-$n.out" 2>&1 &
    pids+=($!)
  done
  local k rc=0
  for k in "${!nodes[@]}"; do
    n=${nodes[$k]}
    if ! wait "${pids[$k]}"; then
      [ $rc -ne 0 ] || echo "mount failed in $n: $(gl_msg "$(cat "$STATE/gluster-mount-$n.out")") (see $GL_LOGDIR/$GL_VOL-$n.log)"
      rc=1
    fi
    cat "$STATE/gluster-mount-$n.out" >&2
    rm -f "$STATE/gluster-mount-$n.out"
  done
  [ $rc -eq 0 ] || return 1
  gluster_check
}

# srun: the volume on every node, a file written on the first node read on the last
gluster_check() {
  local nodes want got first last token f i
  read -r -a nodes <<< "$(cluster_nodes)"
  want=${#nodes[@]}
  got=$(timeout 60 srun --mpi=none -N "$want" -n "$want" --job-name=mntrain-gluster-check \
    findmnt -n -o FSTYPE "$GL_MNT" 2>&1 | grep -cx fuse.glusterfs || true)
  [ "$got" -eq "$want" ] || { echo "srun findmnt shows fuse.glusterfs on $got of $want node(s)"; return 1; }
  first=${nodes[0]}
  last=${nodes[$((want - 1))]}
  token="mntrain $$ $(date +%s%N)"
  f="$GL_MNT/.local-cluster-check"
  # shellcheck disable=SC2016
  timeout 60 srun --mpi=none -N1 -n1 -w "$first" --job-name=mntrain-gluster-check \
    sh -c 'echo "$1" > "$2"' sh "$token" "$f" >&2 || { echo "srun: a write to $GL_MNT on $first failed"; return 1; }
  # a reader racing a new name may briefly see ENOENT: retry a little
  for i in 1 2 3 4 5; do
    [ "$(timeout 60 srun --mpi=none -N1 -n1 -w "$last" --job-name=mntrain-gluster-check cat "$f" 2>/dev/null)" = "$token" ] && break
    [ "$i" -eq 5 ] && { echo "a file written on $first was not read back on $last"; return 1; }
    echo "check: read on $last did not match yet (try $i)" >&2
    sleep 0.5
  done
  timeout 60 srun --mpi=none -N1 -n1 -w "$first" --job-name=mntrain-gluster-check rm -f "$f" >&2 || true
}

# everything gluster_up may have started, in any state; quiet and idempotent
gluster_down() {
  local f n pid i
  # 1. unmount inside each node (before slurmd goes: its namespace is the way in), all at once
  local upids=()
  for f in /run/slurmd-*.pid; do
    pid_alive "$f" || continue
    pid=$(cat "$f")
    n=$(basename "$f" .pid); n=${n#slurmd-}
    for i in 1 2 3; do   # (mounted twice by hand: twice)
      gl_fstype_in "$pid" | grep -qx fuse.glusterfs || break
      nsenter -t "$pid" -m umount "$GL_MNT" 2>/dev/null || nsenter -t "$pid" -m umount -l "$GL_MNT" ||
        echo "local-cluster: could not unmount $GL_MNT in $n" >&2
    done &
    upids+=($!)
  done
  for pid in "${upids[@]}"; do wait "$pid" || true; done
  # a mount in the root namespace (made by hand) is invisible to the jobs: remove it too
  for i in 1 2 3; do
    findmnt -n -o FSTYPE "$GL_MNT" 2>/dev/null | grep -qx fuse.glusterfs || break
    umount "$GL_MNT" 2>/dev/null || umount -l "$GL_MNT" || true
  done
  # 2. the volume
  if command -v gluster >/dev/null && glusterd_running && gl volume info "$GL_VOL" >/dev/null 2>&1; then
    gl volume stop "$GL_VOL" force >/dev/null 2>&1 || true
    gl volume delete "$GL_VOL" >/dev/null 2>&1 || true
  fi
  # glusterd's hook scripts (the delete one, python, takes a second or two) would outlive it
  for i in $(seq 1 50); do
    [ -n "$(gl_hook_pids)" ] || break
    sleep 0.2
  done
  # 3. our glusterd, then any client or brick process of the volume still there (a client whose
  #    node is gone keeps that node's mount namespace alive)
  if pid_alive "$STATE/glusterd.pid" glusterd; then kill "$(cat "$STATE/glusterd.pid")" 2>/dev/null || true; fi
  local pids
  pids=$(gl_vol_pids)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  for i in $(seq 1 25); do
    pids=$(gl_vol_pids)
    if pid_alive "$STATE/glusterd.pid" glusterd; then pids="$pids $(cat "$STATE/glusterd.pid")"; fi
    [ -z "${pids// /}" ] && break
    # shellcheck disable=SC2086
    [ "$i" -eq 25 ] && kill -9 $pids 2>/dev/null
    sleep 0.2
  done
  rm -f "$STATE/glusterd.pid" "$STATE/gluster"
  # a volume definition left by a glusterd that died before the delete would come back with it
  if [ -d "/var/lib/glusterd/vols/$GL_VOL" ] && ! glusterd_running; then
    rm -rf "/var/lib/glusterd/vols/$GL_VOL"
  fi
  # 4. the bricks: .glusterfs/ and xattrs make a reused brick directory refused
  rm -rf "$GL_BRICKS"
}

gluster_status() {
  if [ -f "$STATE/gluster-unavailable" ]; then
    say "GlusterFS: unavailable: $(cat "$STATE/gluster-unavailable")"
    return 0
  fi
  [ -f "$STATE/gluster" ] || { say "GlusterFS: not used (up --gluster)"; return 0; }
  local n pid where=""
  for n in $(cluster_nodes); do
    pid_alive "$(slurmd_pidfile "$n")" || continue
    pid=$(cat "$(slurmd_pidfile "$n")")
    if [ "$(id -u)" -ne 0 ] || [ "$(gl_fstype_in "$pid")" = fuse.glusterfs ]; then where="$where $n"; fi
  done
  if [ -n "$where" ]; then
    say "GlusterFS: volume $GL_VOL mounted at $GL_MNT in:$where (host $(cat "$STATE/gluster-host" 2>/dev/null); glusterd $(pid_of "$STATE/glusterd.pid" glusterd || true)$([ -f "$STATE/glusterd.pid" ] || echo "not ours"))"
  else
    say "GlusterFS: volume $GL_VOL is NOT mounted in any node"
  fi
}

cmd_nsexec() {
  need_root
  [ $# -ge 1 ] || die "nsexec NODE|all -- CMD ARGS..."
  local which=$1 nodes n pid rc=0 r
  shift
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || die "nsexec $which: no command given"
  [ -f "$STATE/up" ] || die "the local cluster is not up"
  if [ "$which" = all ]; then
    nodes=$(cluster_nodes)
  else
    case " $(cluster_nodes) " in
      *" $which "*) nodes=$which ;;
      *) die "no node '$which' (nodes: $(cluster_nodes))" ;;
    esac
  fi
  for n in $nodes; do
    pid_alive "$(slurmd_pidfile "$n")" || die "slurmd of $n is not running"
    pid=$(cat "$(slurmd_pidfile "$n")")
    r=0
    nsenter -t "$pid" -m -n "$@" || r=$?
    [ $rc -ne 0 ] || rc=$r
  done
  return $rc
}

# "N C": N nodes of C CPUs, the size asked for ("1 C one" with --one-node), as in $STATE/size
size_words() {
  local n c one
  read -r n c one <<< "$1"
  printf '%s node(s) x %s CPUs' "$n" "$c"
  [ "$one" != one ] || printf ' (--one-node)'
}

# the options of 'up' that ask for size $1
size_args() {
  local n c one
  read -r n c one <<< "$1"
  if [ "$one" = one ]; then echo "--one-node --cpus-per-node $c"; else echo "--nodes $n --cpus-per-node $c"; fi
}

# the size of the running cluster (one started before sizes were recorded: from its mode)
running_size() {
  if [ -f "$STATE/size" ]; then cat "$STATE/size"
  elif [ "$(cat "$STATE/mode" 2>/dev/null)" = two ]; then echo "2 4"
  else echo "1 8"
  fi
}

cmd_up() {
  need_root
  local install=0 one=0 gluster=0 nodes="" cpus=""
  while [ $# -gt 0 ]; do
    case $1 in
      --install) install=1 ;;
      --one-node) one=1 ;;
      --gluster) gluster=1 ;;
      --nodes=*) nodes=${1#*=} ;;
      --nodes) [ $# -ge 2 ] || die "--nodes needs a number (1 to $MAX_NODES)"; nodes=$2; shift ;;
      --cpus-per-node=*) cpus=${1#*=} ;;
      --cpus-per-node) [ $# -ge 2 ] || die "--cpus-per-node needs a number"; cpus=$2; shift ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
  done
  if [ -n "$nodes" ]; then
    if ! [[ $nodes =~ ^[0-9]{1,4}$ ]] || [ "$((10#$nodes))" -lt 1 ] || [ "$((10#$nodes))" -gt $MAX_NODES ]; then
      die "--nodes $nodes: the local cluster has 1 to $MAX_NODES nodes (node k is at $NET.(10+k))"
    fi
    nodes=$((10#$nodes))
  fi
  if [ -n "$cpus" ]; then
    if ! [[ $cpus =~ ^[0-9]{1,4}$ ]] || [ "$((10#$cpus))" -lt 1 ] || [ "$((10#$cpus))" -gt 1024 ]; then
      die "--cpus-per-node $cpus: give a number of CPUs from 1 to 1024"
    fi
    cpus=$((10#$cpus))
  fi
  local want_size
  if [ $one -eq 1 ]; then
    [ "${nodes:-1}" -eq 1 ] || die "--one-node runs one node; it does not go with --nodes $nodes"
    nodes=1
    cpus=${cpus:-8}
    want_size="1 $cpus one"
  else
    nodes=${nodes:-2}
    cpus=${cpus:-4}
    want_size="$nodes $cpus"
  fi
  [ $install -eq 1 ] && install_packages $gluster
  local c
  for c in slurmctld slurmd munged srun nsenter unshare ip; do
    command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] ||
      die "'$c' is missing: run with --install, or apt-get install slurm-wlm munge iproute2 util-linux"
  done
  if is_up; then
    local have_size
    have_size=$(running_size)
    [ "$have_size" = "$want_size" ] || die "the local cluster is already up with" \
      "$(size_words "$have_size"), not $(size_words "$want_size") as asked: stop it first with" \
      "'job_templates/tools/local-cluster.sh down' (or use it as it is: up $(size_args "$have_size"))"
    say "already up:"
    if [ $gluster -eq 1 ] && ! [ -f "$STATE/gluster" ]; then gluster_up; fi
    cmd_status
    return 0
  fi
  [ -f "$STATE/up" ] && { say "found a half-started cluster: cleaning it up first"; cmd_down >/dev/null 2>&1 || true; }
  mkdir -p "$STATE"
  start_munge
  local k
  NODES=()
  for k in $(seq 1 "$nodes"); do NODES+=("node$k"); done
  CPUS=$cpus
  local mode=netns
  if [ $one -eq 1 ]; then
    mode=one
  elif ! make_namespaces 2>"$STATE/netns.err"; then
    remove_namespaces
    mode=one
    NODES=(node1)
    CPUS=$((nodes * cpus))   # all the CPUs asked for: 8 for the default 2 x 4, as before
    say "network namespaces are not permitted here ($(head -n1 "$STATE/netns.err")): falling back to ONE node ($CPUS CPUs)"
  fi
  echo "$mode" > "$STATE/mode"
  # size: what was asked for (an 'up' of the same size again finds it, also after the fall-back);
  # nodes: how many there are
  echo "$want_size" > "$STATE/size"
  echo "${#NODES[@]}" > "$STATE/nodes"
  write_conf "$mode"
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
  /usr/sbin/slurmctld -c
  start_slurmds "$mode" || { touch "$STATE/up"; die "a slurmd did not start; see /var/log/slurm/"; }
  touch "$STATE/up"
  local want=${#NODES[@]}
  wait_idle "$want" || { sinfo -N >&2 || true; die "the nodes did not come up; see /var/log/slurm/"; }
  record_slurmd_ns   # (registered: each has written its pid file)
  # a first job proves the whole path (slurmctld -> slurmd -> slurmstepd -> srun)
  timeout 60 srun -N "$want" -n "$want" --mpi=pmix true ||
    die "a test job failed; see /var/log/slurm/"
  say "up: $want node(s)"
  [ $gluster -eq 1 ] && gluster_up
  cmd_status
}

cmd_down() {
  need_root
  scancel --quiet --full --user=root 2>/dev/null || true
  gluster_down
  # our daemons, from the pid files they wrote; the mount namespaces of our slurmd's (also
  # those recorded at 'up'), where our step daemons are
  local f p pids=() mntns
  mntns=$(cat "$STATE/slurmd-mntns" 2>/dev/null || true)
  for f in /run/slurmd-*.pid; do
    p=$(pid_of "$f" slurmd)
    [ -z "$p" ] || { pids+=("$p"); mntns+=" $(ns_of "$p" mnt)"; }
  done
  p=$(pid_of "$SLURMCTLD_PID" slurmctld)
  [ -z "$p" ] || pids+=("$p")
  if [ -d "$STATE" ]; then echo "$mntns" > "$STATE/slurmd-mntns"; fi
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  # wait for them, then make sure none of them and no step daemon of ours is left
  local i left
  for i in $(seq 1 50); do
    left=0
    for p in "${pids[@]}"; do if alive "$p"; then left=1; fi; done
    [ $left -eq 1 ] || break
    sleep 0.2
  done
  for p in "${pids[@]}" $(our_stepds); do
    if alive "$p"; then kill -9 "$p" 2>/dev/null || true; fi
  done
  rm -f /run/slurmd-*.pid "$SLURMCTLD_PID"
  if [ -f "$STATE/munged-ours" ] && pid_alive "$MUNGED_PID" munged; then
    kill "$(cat "$MUNGED_PID")" 2>/dev/null || true
    # gone before an 'up' that follows looks for a running munged
    for i in $(seq 1 25); do pid_alive "$MUNGED_PID" munged || break; sleep 0.2; done
  fi
  remove_namespaces
  if ours "$CONF"; then rm -f "$CONF"; fi
  if ours "$CGROUP_CONF"; then rm -f "$CGROUP_CONF"; fi
  rm -rf "$STATE" /var/spool/slurmd/* "$NODETMP"-node*
  say "down: nothing of the local cluster is running"
}

cmd_status() {
  if ! [ -f "$STATE/up" ]; then
    say "down"
    return 3
  fi
  local nodes
  read -r -a nodes <<< "$(cluster_nodes)"
  local range=${nodes[0]}
  [ ${#nodes[@]} -eq 1 ] || range+="..${nodes[${#nodes[@]}-1]}"
  say "mode: $(cat "$STATE/mode" 2>/dev/null || echo '?'), ${#nodes[@]} node(s): $range (asked: $(size_words "$(running_size)")); config $CONF; $(cat "$STATE/slurm-version" 2>/dev/null || echo 'Slurm ?')"
  # our daemons, from their pid files (another cluster's on this machine are not listed)
  local n p mine="" gone=""
  p=$(pid_of "$MUNGED_PID" munged)
  printf '  %-10s %s\n' munged "${p:-NOT RUNNING}$([ -f "$STATE/munged-ours" ] || echo ' (not ours: it was running before)')"
  p=$(pid_of "$SLURMCTLD_PID" slurmctld)
  printf '  %-10s %s\n' slurmctld "${p:-NOT RUNNING}"
  for n in "${nodes[@]}"; do
    p=$(pid_of "$(slurmd_pidfile "$n")" slurmd)
    if [ -n "$p" ]; then mine+="$p "; else gone+="$n "; fi
  done
  printf '  %-10s %s\n' slurmd "$mine${gone:+(NOT RUNNING: $gone)}"
  sinfo -N -o '  %N %T %c CPUs %O load' 2>/dev/null || { say "slurmctld does not answer"; return 1; }
  gluster_status
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down ;;
  status) shift; cmd_status ;;
  nsexec) shift; cmd_nsexec "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
