#!/usr/bin/env bash
# cuda_module.sh — the CUDA parts are a module that mntrain loads only when asked (build tree):
#  - the binary links no CUDA library (readelf NEEDED, ldd);
#  - a CPU run maps none of them: the dynamic loader's own record of every object it maps
#    (LD_DEBUG=files: startup and every dlopen) for --version, a CPU bench step and a CPU train
#    shows libdnnl (the check sees what is mapped) and no libcudart/libcudnn/libcublas/libnccl;
#    --device cuda, where this machine has the CUDA libraries, does map them (the same check fails);
#  - --version names the module and what it was built against;
#  - --device cuda loads it (every host symbol it needs resolves, the ABI and interface match) and
#    fails only for want of a GPU (exit 2), or runs on one;
#  - MNT_CUDA_MODULE: a missing path, a library that is no module, and a module of another build
#    (its interface hash changed) are refused with exit 2 naming the reason;
#  - --device auto without a GPU driver runs on cpu and says so once, without loading the module.
# Without the CUDA parts (-DMNT_CUDA=OFF) there is nothing to check: skipped.
#   cuda_module.sh BUILD_DIR
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
build=$(cd "$1" && pwd)
m=$build/mntrain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

if ! "$m" --version | head -n1 | grep -q 'CUDA parts: yes'; then
  echo "SKIP: this build has no CUDA parts (-DMNT_CUDA=OFF or no nvcc): no module to check"
  exit 77
fi
mod=$build/lib/mntrain/mntrain-cuda.so
[ -f "$mod" ] || { bad "no module at $mod"; exit 1; }
cudalibs='lib(cudart|cudnn|cublas|cublasLt|nccl)\.so'

# ---- the binary links none of them -------------------------------------------------------------
if readelf -d "$m" | grep -E "\(NEEDED\)" | grep -E "$cudalibs"; then bad "mntrain has a CUDA library in DT_NEEDED (above)"; fi
if ldd "$m" | grep -E "$cudalibs"; then bad "ldd mntrain lists a CUDA library (above)"; fi
readelf -d "$mod" | grep -E "\(NEEDED\)" | grep -qE "libcudart\.so" || bad "the module does not link cudart (readelf -d $mod)"

# ---- what a run maps: LD_DEBUG=files records every object the loader maps, dlopen included ----------
mapped() { # mapped LOG: the CUDA libraries the loader mapped ("file=NAME [ns];  generating link map")
  grep -E "file=[^ ]*($cudalibs)[^ ]* \[[0-9]+\]; +generating link map" "$1" | grep -oE "file=[^ ]+" | sort -u |
    tr '\n' ' '
}
"$m" convert synth "$work/data" --classes 4 --images 32 --size 16 --shards 1 >/dev/null 2>&1 ||
  bad "mntrain convert synth failed"
runs=("--version"
  "bench step --device cpu --arch resnet8 --size 32 --batch 8 --steps 2"
  "train --device cpu --data $work/data --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --loader-threads 1 --steps 2 --out $work/run")
fail0=$fail
for r in "${runs[@]}"; do
  read -r -a args <<<"$r"
  LD_DEBUG=files "$m" "${args[@]}" >"$work/out" 2>"$work/ld" || { bad "mntrain $r failed:"; grep -v '^ *[0-9]*:' "$work/ld"; }
  grep -q "file=libdnnl\.so" "$work/ld" || bad "LD_DEBUG=files shows no libdnnl for mntrain $r: the check sees nothing"
  got=$(mapped "$work/ld")
  [ -z "$got" ] || bad "mntrain $r maps CUDA libraries: $got"
done
[ $fail -eq "$fail0" ] && echo "a CPU run maps no CUDA library (LD_DEBUG=files: --version, bench step, train)"

# ---- --version: found, built against -------------------------------------------------------------
v=$("$m" --version)
echo "$v"
grep -qE '^mntrain [0-9.]+ \(CUDA parts: yes; devices: cpu' <<<"$v" || bad "first line of --version changed: $v"
grep -qxF "cuda module: $mod" <<<"$v" || bad "--version does not name the module $mod"
grep -qE '^cuda module built against: CUDA [0-9]+\.[0-9]+' <<<"$v" || bad "--version does not say what the module was built against"
if ldd "$mod" | grep -q "not found"; then want=no; else want=yes; fi # its libraries resolve here

# ---- --device cuda loads it; only the missing GPU stops it -----------------------------------------
if [ "$want" = yes ]; then
  LD_DEBUG=files "$m" bench step --device cuda --arch resnet8 --size 32 --batch 8 --steps 1 >"$work/out" 2>"$work/ld"
  rc=$?
  got=$(mapped "$work/ld")
  grep -q "libcudart" <<<"$got" || bad "--device cuda maps no cudart (LD_DEBUG=files): the CPU check above would miss one"
  err=$(grep -v '^ *[0-9]*:' "$work/ld")
  if [ $rc -ne 0 ]; then
    { [ $rc -eq 2 ] && ! grep -q "cannot load the CUDA module\|another mntrain build\|not mntrain's" <<<"$err"; } ||
      bad "--device cuda: exit $rc (want 0 on a GPU, or 2 for the missing GPU, with the module loaded): $err"
  fi
fi

# ---- MNT_CUDA_MODULE: what is refused, and how -------------------------------------------------------
check_refused() { # check_refused PATH WHAT: --device cuda and --comm nccl exit 2 with WHAT; --version says it
  local p=$1 what=$2 out rc
  out=$(MNT_CUDA_MODULE=$p "$m" bench step --device cuda --arch resnet8 --size 32 --batch 8 --steps 1 2>&1)
  rc=$?
  { [ $rc -eq 2 ] && grep -qF -- "$what" <<<"$out"; } || bad "MNT_CUDA_MODULE=$p --device cuda: exit $rc, want 2 with '$what': $out"
  out=$(MNT_CUDA_MODULE=$p "$m" bench allreduce --comm nccl -b 8 -e 8 2>&1)
  rc=$?
  { [ $rc -eq 2 ] && grep -qF -- "$what" <<<"$out"; } || bad "MNT_CUDA_MODULE=$p --comm nccl: exit $rc, want 2 with '$what': $out"
}
check_refused "$work/none.so" "MNT_CUDA_MODULE=$work/none.so"
MNT_CUDA_MODULE=$work/none.so "$m" --version | grep -q "^cuda module: .*MNT_CUDA_MODULE=$work/none.so" ||
  bad "--version with a missing MNT_CUDA_MODULE does not say so"
libz=$(ldd "$m" | awk '$1 ~ /^libz\.so/ { print $3; exit }')
[ -z "$libz" ] || check_refused "$libz" "is not mntrain's CUDA module"
# a module of another build: the same file with another interface hash in its table
iface=$(sed -n 's/.*MNT_CUDA_IFACE "\([0-9a-f]*\)".*/\1/p' "$build/generated/mnt_cuda_iface.h")
if [ ${#iface} -eq 16 ]; then
  python3 - "$mod" "$work/other.so" "$iface" <<'EOF' || bad "could not make a module of another build"
import sys
data = open(sys.argv[1], "rb").read()
old = sys.argv[3].encode()
assert data.count(old) >= 1, "the hash should be in the module's table"
open(sys.argv[2], "wb").write(data.replace(old, b"0123456789abcdef"))
EOF
  check_refused "$work/other.so" "from another mntrain build"
else
  bad "no MNT_CUDA_IFACE in $build/generated/mnt_cuda_iface.h"
fi

# ---- --device auto: cpu without a driver, said once, the module not loaded -------------------------
if [ ! -e /dev/nvidiactl ] && [ ! -e /proc/driver/nvidia/version ]; then
  LD_DEBUG=files "$m" bench step --device auto --arch resnet8 --size 32 --batch 8 --steps 1 >"$work/out" 2>"$work/ld" ||
    bad "--device auto without a GPU failed: $(grep -v '^ *[0-9]*:' "$work/ld")"
  n=$(grep -c "auto: no NVIDIA GPU driver here.*running on cpu" "$work/ld")
  [ "$n" -eq 1 ] || bad "--device auto without a GPU: want one INFO line saying so, got $n"
  grep -q "cpu fp32" "$work/out" || bad "--device auto did not run on cpu: $(cat "$work/out")"
  got=$(mapped "$work/ld")
  [ -z "$got" ] || bad "--device auto without a GPU driver maps CUDA libraries: $got"
fi

[ $fail -eq 0 ] && echo "cuda_module: ok"
exit $fail
