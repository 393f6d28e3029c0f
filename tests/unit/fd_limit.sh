#!/usr/bin/env bash
# fd_limit.sh — running out of file descriptors reads as that, in one message, and never as a bad
# shard (one process, no cluster). A dataset of 64 shards (each kept open while training):
# - a low soft limit under a high hard one (ulimit -Sn 20) is no failure: mntrain raises the soft
#   limit to the hard one at start, as Go's runtime does;
# - a low hard limit (bash's plain ulimit -n sets both; nothing can raise it) is refused up front,
#   exit 2: below what starting needs (PMIx, libraries), or below the shards plus a reserve for the
#   run's other files: one error, "out of file descriptors ...", with the limit and "ulimit -n";
# - every hard limit from 4 to 120 files: a prompt exit (no hang), 0 or that one error, never a shard
#   or the index called unreadable, corrupt or missing; the same for convert;
# - with the count of open files hidden (no /proc/self/fd: an LD_PRELOAD shim, built with cc when
#   there is one), the up-front check cannot tell and the shards run out while opening: exit 1, one
#   error, "out of file descriptors opening .../shard-...", never "not a readable HDF5 file".
# Before the fix: "not a readable HDF5 file (truncated or corrupt?)" for a healthy shard, or
# "index.json: not valid JSON", libevent's "evsig_init_: socketpair", a jsonio "cannot create".
#   fd_limit.sh path/to/mntrain
set -u
m=$(realpath "$1")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
[ -d /proc/self/fd ] || { echo "SKIP: no /proc/self/fd here"; exit 77; }
"$m" convert synth "$w/data" --classes 4 --images 512 --size 16 --shards 64 >"$w/convert.log" 2>&1 ||
  { echo "SKIP: mntrain convert synth failed here:"; cat "$w/convert.log"; exit 77; }
hard=$(ulimit -Hn)

# run LIMIT LOG ARGS...: mntrain ARGS with only stdin/out/err open and the limit on open files set by
# LIMIT (ulimit options, e.g. "-n 20" or "-Sn 20"); its exit status, 124 when it hung (30 s)
run() {
  local lim=$1 log=$2
  shift 2
  # shellcheck disable=SC2016 # expanded by the inner shell
  timeout -k 5 30 bash -c '
    for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] 2>/dev/null && eval "exec $n>&-"; done
    ulimit '"$lim"' || exit 99
    exec "$@"' fd_limit "$@" >"$log" 2>&1
}

# check NAME STATUS LOG [WANT_STATUS]: a failure is exactly one error line, about file descriptors,
# with the limit; nothing blames the data
check() {
  local name=$1 st=$2 log=$3 want=${4:-}
  if [ "$st" = 124 ] || [ "$st" = 137 ]; then echo "FAIL $name: did not exit within 30 s"; fail=1; return; fi
  if [ "$st" = 99 ]; then echo "FAIL $name: the shell could not set the limit"; fail=1; return; fi
  if grep -Eqi "not a readable HDF5|truncated or corrupt|not valid JSON|missing shard|another conversion|socketpair|evutil|PMIX ERROR|cannot open shared object" "$log"; then
    echo "FAIL $name: a message blames the data or a library instead of the limit:"; cat "$log"; fail=1; return
  fi
  if [ -n "$want" ] && [ "$st" != "$want" ]; then echo "FAIL $name: exit $st, want $want"; cat "$log"; fail=1; return; fi
  [ "$st" = 0 ] && return
  if [ "$st" != 1 ] && [ "$st" != 2 ]; then echo "FAIL $name: exit $st (want 1 or 2)"; cat "$log"; fail=1; return; fi
  local n
  n=$(grep -c "error:" "$log")
  if [ "$n" != 1 ] || ! grep -q "error: .*out of file descriptors" "$log" || ! grep -q "ulimit -n" "$log"; then
    echo "FAIL $name: exit $st, want one error saying \"out of file descriptors\" with \"ulimit -n\" ($n errors):"
    cat "$log"; fail=1
  fi
}

train=(train --data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --steps 2 --threads 1 --loader-threads 1)

# a low soft limit only: raised at start, the run succeeds
if [ "$hard" = unlimited ] || [ "$hard" -ge 200 ]; then
  run "-Sn 20" "$w/soft.log" "$m" "${train[@]}" --out "$w/soft"
  check "soft limit 20 (hard $hard)" $? "$w/soft.log" 0
else
  echo "note: the hard limit here is $hard: the soft-limit case is not run"
fi

# a hard limit below what starting needs, and one below the shards plus the reserve: exit 2, up front
run "-n 20" "$w/h20.log" "$m" "${train[@]}" --out "$w/h20"
check "hard limit 20" $? "$w/h20.log" 2
grep -q "ulimit -n 20" "$w/h20.log" || { echo "FAIL hard limit 20: the limit is not named:"; cat "$w/h20.log"; fail=1; }
run "-n 60" "$w/h60.log" "$m" "${train[@]}" --out "$w/h60"
check "hard limit 60" $? "$w/h60.log" 2
if ! grep -q "out of file descriptors opening $w/data (64 shards" "$w/h60.log" || ! grep -q "ulimit -n 60" "$w/h60.log"; then
  echo "FAIL hard limit 60: the message does not name the dataset's shards and the limit:"; cat "$w/h60.log"; fail=1
fi

# every limit: prompt, and either success or the one message
t0=$(date +%s)
seen=""
for n in 4 5 6 7 8 10 12 16 20 24 28 31 32 33 34 36 40 48 56 64 72 80 90 96 100 104 108 112 120; do
  run "-n $n" "$w/sweep.log" "$m" "${train[@]}" --out "$w/sweep-$n"
  st=$?
  seen="$seen $n:$st"
  check "train, hard limit $n" $st "$w/sweep.log"
done
for n in 4 8 16 24 40; do
  run "-n $n" "$w/sweepc.log" "$m" convert synth "$w/conv-$n" --classes 4 --images 64 --size 16 --shards 8
  check "convert, hard limit $n" $? "$w/sweepc.log"
done
echo "train's exit status by hard limit (limit:status):$seen"
echo "sweep: $(($(date +%s) - t0)) s"

# the count of open files hidden: the shards run out while opening (exit 1), and it says so
if command -v cc >/dev/null && ! ldd "$m" 2>/dev/null | grep -q libasan; then
  cat >"$w/noproc.c" <<'EOF'
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
DIR *opendir(const char *p) { /* as where /proc is not mounted */
  static DIR *(*real)(const char *);
  if (!strcmp(p, "/proc/self/fd")) {
    errno = ENOENT;
    return NULL;
  }
  if (!real) real = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
  return real(p);
}
EOF
  if cc -shared -fPIC -o "$w/noproc.so" "$w/noproc.c" -ldl 2>"$w/cc.log"; then
    for n in 20 40 60; do
      run "-n $n" "$w/np.log" env LD_PRELOAD="$w/noproc.so" "$m" "${train[@]}" --out "$w/np-$n"
      check "no /proc, hard limit $n" $? "$w/np.log" 1
      grep -q "out of file descriptors opening $w/data/shard-" "$w/np.log" ||
        { echo "FAIL no /proc, hard limit $n: no shard named as the file being opened:"; cat "$w/np.log"; fail=1; }
    done
  else
    echo "note: cc cannot build the LD_PRELOAD shim here: the no-/proc case is not run"; cat "$w/cc.log"
  fi
else
  echo "note: no cc (or an ASan build): the no-/proc case is not run"
fi

[ "$fail" = 0 ] && echo "fd_limit: ok"
exit "$fail"
