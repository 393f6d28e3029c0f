#!/usr/bin/env bash
# hidden_cuda.sh — the installed tree on a node without the CUDA libraries (a CPU partition): in a
# private mount namespace, an empty tmpfs is mounted over every directory that holds cudart,
# cuDNN, cuBLAS or NCCL (those the module's RUNPATH, ld.so.cache and ldd name, and /usr/local/cuda*),
# and it is checked that the dynamic loader cannot find them any more. Then:
#  - ldd of the installed binary lists no CUDA library and finds everything it does list;
#  - mntrain --version works, names the installed module and says it cannot be loaded here,
#    naming a missing library;
#  - a CPU bench step and a CPU train run;
#  - --device cuda (bench step, train), --comm nccl (train) and bench allreduce --comm nccl exit 2
#    naming the library that could not be opened and giving dlerror's text;
#  - --device auto runs on cpu and says why once.
# Needs root for unshare --mount (CI runs as root); skipped (77) where that is not permitted, and
# in builds without the CUDA parts.
#   hidden_cuda.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
if ! "$build/mntrain" --version | head -n1 | grep -q 'CUDA parts: yes'; then
  echo "SKIP: this build has no CUDA parts: nothing to hide"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/probe"
if ! unshare --mount --propagation private mount -t tmpfs mnt-probe "$work/probe" 2>/dev/null; then
  echo "SKIP: a private mount namespace with a tmpfs is not permitted here (unshare --mount needs root or CAP_SYS_ADMIN)"
  exit 77
fi
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; echo "FAIL: cmake --install"; exit 1; }
bin=$prefix/bin/mntrain
mod=$(find "$prefix" -name mntrain-cuda.so | head -n1)
[ -n "$mod" ] || { echo "FAIL: no mntrain-cuda.so installed under $prefix"; exit 1; }
"$bin" convert synth "$work/data" --classes 4 --images 32 --size 16 --shards 1 >/dev/null 2>&1 ||
  { echo "FAIL: convert synth"; exit 1; }

# the directories to hide: wherever the loader would find one of the module's CUDA libraries
cudalibs='lib(cudart|cudnn|cublas|cublasLt|nccl)\.so'
dirs=()
add() { local d; d=$(realpath -e "$1" 2>/dev/null) || return 0; dirs+=("$d"); }
while read -r p; do add "$(dirname "$p")"; done < <(ldd "$mod" | awk '{ print $3 }' | grep -E "$cudalibs")
while read -r p; do add "$(dirname "$p")"; done < <(ldconfig -p | awk '{ print $NF }' | grep -E "/$cudalibs")
runpath=$(readelf -d "$mod" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
IFS=: read -r -a rp <<<"$runpath"
for d in "${rp[@]}"; do [ -n "$d" ] && add "$d"; done
for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && add "$d"; done
mapfile -t dirs < <(printf '%s\n' "${dirs[@]}" | sort -u)
top=() # a directory under one already hidden goes with it
for d in "${dirs[@]}"; do
  under=0
  for t in "${top[@]}"; do [[ $d == "$t"/* ]] && under=1; done
  [ $under -eq 1 ] || top+=("$d")
done
dirs=("${top[@]}")
printf 'hiding: %s\n' "${dirs[*]}"

cat >"$work/inside.sh" <<'EOF'
set -u
bin=$1 mod=$2 work=$3 cudalibs=$4
shift 4
fail=0
bad() { echo "FAIL: $*"; fail=1; }
for d in "$@"; do
  mount -t tmpfs -o size=64k,mode=755 mnt-hidden-cuda "$d" || { echo "FAIL: mount tmpfs over $d"; exit 1; }
done
# ---- the libraries are gone for the loader: ldd says "not found", no copy anywhere it looks ----------
ldd "$mod" | grep -E "$cudalibs" | grep -q "not found" || { ldd "$mod"; bad "ldd still finds the CUDA libraries"; }
left=$(ldconfig -p | awk '{ print $NF }' | grep -E "/$cudalibs" | while read -r p; do [ -e "$p" ] && echo "$p"; done)
left+=$(find /usr/local /opt /usr/lib /usr/lib64 /lib /lib64 -name 'libcudart.so*' -o -name 'libcudnn.so*' \
  -o -name 'libcublas.so*' -o -name 'libnccl.so*' 2>/dev/null)
[ -z "$left" ] || bad "still visible: $left"
[ $fail -eq 0 ] || exit 1
echo "hidden: ldd $mod: $(ldd "$mod" | grep -E "$cudalibs" | awk '{ print $1 }' | tr '\n' ' ')not found"

# ---- the binary needs none of them -----------------------------------------------------------------
ldd "$bin" >"$work/ldd" 2>&1 || bad "ldd $bin failed: $(cat "$work/ldd")"
grep -q "not found" "$work/ldd" && bad "the installed binary misses a library: $(grep 'not found' "$work/ldd")"
grep -E "$cudalibs" "$work/ldd" && bad "the installed binary links a CUDA library (above)"

# ---- --version: the module is there, and what it was built against (nothing is loaded) --------------------
v=$("$bin" --version 2>&1)
rc=$?
echo "$v"
[ $rc -eq 0 ] || bad "--version: exit $rc"
grep -qE '^mntrain [0-9.]+ \(CUDA parts: yes; devices: cpu' <<<"$v" || bad "--version's first line: $v"
grep -qxF "cuda module: $mod" <<<"$v" || bad "--version does not name the installed module $mod"
grep -qE "^cuda module built against: CUDA [0-9]" <<<"$v" || bad "--version does not say what the module was built against"

# ---- CPU jobs run ---------------------------------------------------------------------------------------
fail0=$fail
out=$("$bin" bench step --device cpu --arch resnet8 --size 32 --batch 8 --steps 2 2>&1) || bad "CPU bench step failed: $out"
grep -q "img/s" <<<"$out" || bad "CPU bench step printed no img/s: $out"
out=$("$bin" train --device cpu --data "$work/data" --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 \
  --loader-threads 1 --steps 2 --out "$work/run" 2>&1) || bad "CPU train failed: $out"
[ -s "$work/run/summary.json" ] || bad "CPU train wrote no summary.json: $out"
[ $fail -eq "$fail0" ] && echo "CPU bench step and train: ok"

# ---- GPU requests: exit 2 naming the library and dlerror's text ---------------------------------------
refused() { # refused WHAT ARGS...: exit 2, "LIB could not be opened (dlerror: LIB: cannot open shared object file"
  local what=$1 out rc
  shift
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qE -- "$what: cannot load the CUDA module $mod: ($cudalibs[^ ]*) could not be opened \(dlerror: $cudalibs[^ ]*: cannot open shared object file" <<<"$out"; then
    bad "mntrain $*: exit $rc, want 2 naming the library and dlerror's text: $out"
  else
    echo "mntrain $*: exit 2: $(grep -oE "cannot load.*\)" <<<"$out" | head -n1)"
  fi
}
refused "--device cuda" bench step --device cuda --arch resnet8 --size 32 --batch 8 --steps 1
refused "--comm nccl" train --device cuda --data "$work/data" --arch resnet8 --size 16 --batch-per-rank 8 --steps 1 --out "$work/g1"
refused "--comm nccl" train --comm nccl --data "$work/data" --arch resnet8 --size 16 --batch-per-rank 8 --steps 1 --out "$work/g2"
refused "--comm nccl" bench allreduce --comm nccl -b 8 -e 64

# ---- --device auto: cpu, said once ------------------------------------------------------------------------
out=$("$bin" bench step --device auto --arch resnet8 --size 32 --batch 8 --steps 1 2>&1) || bad "--device auto failed: $out"
[ "$(grep -c "auto: .*running on cpu" <<<"$out")" -eq 1 ] || bad "--device auto: want one line saying it runs on cpu: $out"
grep -q "cpu fp32" <<<"$out" || bad "--device auto did not run on cpu: $out"
exit $fail
EOF
unshare --mount --propagation private bash "$work/inside.sh" "$bin" "$mod" "$work" "$cudalibs" "${dirs[@]}"
rc=$?
[ $rc -eq 0 ] && echo "hidden_cuda: ok"
exit $rc
