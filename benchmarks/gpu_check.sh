#!/usr/bin/env bash
# gpu_check.sh — the one script run on the GPU machine (device tool): build mntrain with CUDA
# against the carried library bundle (benchmarks/gpu_bundle.sh), run the gpu-labelled tests, and
# time `mntrain bench step` (ResNet-50, bf16, batch 256) next to PyTorch's step on the same GPU.
#
# Device budget. A task gets 15 minutes (900 s) of device time in all, the machine's start (a few
# minutes) included, and no machine starts with under 4 minutes left. So the whole run defaults to
# at most 330 s (--budget) and the device tool's call gets timeout_s=390 (the budget, the last
# step's kill grace, the transfers):
#   run(command="benchmarks/gpu_check.sh", carry=["gpu-bundle"], timeout_s=390)
# start (~150 s) + 390 s leaves ~360 s: enough to start a fresh machine (>= 240 s left) and rerun
# after a fix, shortened if need be (--skip-tests, fewer --mnt-seconds/--torch-seconds, --budget).
# Each step's estimate on the device (16 cores, H200) and its cap (the budget also bounds it):
#   0 env          ~5 s                               (inflating libdnnl from the bundle)
#   1 configure    ~5 s, cap 90 s                     (4 s on the 2-core CI VM: the --build-only run)
#   2 build        ~15 s, cap 150 s                   (mntrain + the gpu tests' programs, sm_90;
#                                                      21 s with -j2 on the 2-core CI VM)
#   3 smoke        ~3 s
#   4 gpu tests    ~60 s, cap 120 s                   (CUDA/cuDNN/NCCL start-up in each program,
#                                                      two short training runs)
#   5 mntrain      ~45 s, cap --mnt-seconds + 45 s    (model set-up, 5 warm-up steps, 30 s timed)
#   6 pytorch      ~55 s, cap --torch-seconds + 60 s  (import, cudnn.benchmark's warm-up, 25 s timed)
# about 260 s when nothing goes wrong (5b's CUDA-graph run included), 330 s at most (--budget: each step gets at most what is
# left of it after the later steps' caps).
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: benchmarks/gpu_check.sh [options] [BUNDLE]   (from anywhere; it works in the repository root)

Steps, each under `timeout` and inside one overall budget, each with a header and its time:
  0 env        sources BUNDLE/env.sh; checks the image's glibc/libstdc++/libgomp against what the
               bundle needs (BUNDLE/REQUIRES); prints GPU, nvcc, cmake, gcc
  1 configure  cmake -G Ninja -DMNT_CUDA=ON -DMNT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 into
               BUILD; prints cuDNN/NCCL/HDF5/oneDNN/PMIx/... as found and fails if a bundled
               library resolved outside the bundle
  2 build      ninja: mntrain and the programs of the gpu-labelled tests only (--all-targets: all);
               if only -Werror stops it, reported as failed and built again without, to go on
  3 smoke      ldd of mntrain (every bundled library from the bundle, nothing "not found"), no
               object read a system copy of a bundled header (ninja -t deps), `mntrain --version`
  4 gpu tests  ctest -L gpu --output-on-failure (--skip-tests: not run)
  5 mntrain    mntrain bench step --device cuda --arch resnet50 --size 224 --precision bf16
               --batch 256, about --mnt-seconds (default 30) of timed steps; the batch-norm mode
               the layers ran in from its "# batch norm: ..." line
  5b variants  the same step with MNT_CUDNN_ALGO=timed (half the seconds), the same step captured as
               a CUDA graph and replayed (--cuda-graph on, half the seconds), one --profile run of 5
               steps (where the step's time goes, per layer), and bench allreduce --comm nccl on
               this GPU (4K-4M bf16: the per-call cost; its set-up line names the communicator)
  6 pytorch    benchmarks/peer_step_torch_gpu.py, same problem, --torch-seconds (default 25)
A failed test does not stop the benchmarks; the script exits non-zero if any step failed, after
printing one final line:
  gpu_check: mntrain NNNN img/s, pytorch NNNN img/s, ratio X.XX, bn MODE
(MODE: e.g. "nhwc-kernels x53"; "unknown" when mntrain did not say), after a table of the step's
settings in this run (batch norm, convolution algorithms by ranking and timed, whether NCCL's
collectives run on a blocking communicator, the stem's input channels, the bf16 weight copies, the
training batch's upload beside the step and its check, where the non-finite flag is read).
Logs and results.txt go to $OUT when set (the device tool brings $OUT back), else to --out.

Options:
  --build-only       steps 0-3 only (a dry run on a machine without a GPU; also
                     MNT_GPU_CHECK_BUILD_ONLY=1). Implies --strict.
  --strict           configure so that nothing under /usr but the compiler can be found
                     (CMAKE_IGNORE_PREFIX_PATH=/usr, pkg-config limited to the bundle): proves
                     the bundle is complete on a machine that has the same libraries installed
  --bundle DIR       the bundle, also as BUNDLE (default: gpu-bundle/ at the repository root)
  --build-dir DIR    build directory (default: build-gpu/ at the repository root)
  --out DIR          logs when $OUT is unset (default: BUILD/gpu-check)
  --jobs N           build jobs (default: nproc)
  --all-targets      build every target, not only mntrain and the gpu tests' programs
  --skip-tests       no step 4 (a rerun that only measures)
  --mnt-seconds S    timed seconds of mntrain's step (default 30)
  --torch-seconds S  timed seconds of PyTorch's step (default 25)
  --budget S         the whole run's limit in seconds (default 330); steps get what is left
  -h, --help         this text

Device tool (15 min of device time per task, the machine's start included; see the script's
header for the phase budget):
  run(command="benchmarks/gpu_check.sh", carry=["gpu-bundle"], timeout_s=390)
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
cc=$(command -v cc || command -v gcc || echo cc)
build_only=${MNT_GPU_CHECK_BUILD_ONLY:-0}
strict=0
bundle=$root/gpu-bundle
build=$root/build-gpu
outdir=""
jobs=$(nproc)
all_targets=0
skip_tests=0
mnt_seconds=30
torch_seconds=25
budget=330
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --build-only) build_only=1; shift ;;
    --strict) strict=1; shift ;;
    --bundle) bundle=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --out) outdir=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --all-targets) all_targets=1; shift ;;
    --skip-tests) skip_tests=1; shift ;;
    --mnt-seconds) mnt_seconds=$2; shift 2 ;;
    --torch-seconds) torch_seconds=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -*) echo "gpu_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) bundle=$1; shift ;;
  esac
done
[[ $build_only == 1 ]] && strict=1
t_start=$(date +%s)
deadline=$((t_start + budget))
mkdir -p "$build"
build=$(cd "$build" && pwd)
out=${OUT:-${outdir:-$build/gpu-check}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
results=$out/results.txt
: >"$results"
if [[ -n ${LD_LIBRARY_PATH+set} ]]; then orig_ld_library_path=$LD_LIBRARY_PATH; fi
failed=()

# everything to the terminal and to gpu_check.log; the long commands' output also to their own logs
exec > >(tee -a "$out/gpu_check.log") 2>&1
tee_pid=$!
: >"$out/gpu_check.log"

# ---- helpers -------------------------------------------------------------------------------------
now() { date +%s; }
say() { printf '%s\n' "$*"; }
step_t0=0
header() { # header N title
  step_t0=$(now)
  printf '\n==== gpu_check step %s: %s  [%s UTC, +%ds of %ds]\n' "$1" "$2" "$(date -u +%T)" "$((step_t0 - t_start))" "$budget"
}
footer() { # footer NAME STATUS
  local dt=$(($(now) - step_t0))
  printf '==== %s: %s (%ds)\n' "$1" "$2" "$dt"
  printf '%-10s %-6s %4ds\n' "$1" "$2" "$dt" >>"$results"
  [[ $2 == ok ]] || failed+=("$1")
}
limit() { # limit CAP RESERVE: a step's seconds: CAP, less when the budget minus RESERVE (for later steps) is short
  local left=$((deadline - $(now) - $2))
  ((left < 10)) && left=10
  ((left < $1)) && { echo "$left"; return; }
  echo "$1"
}
run_logged() { # run_logged LOG TIMEOUT cmd...: the command's output also into LOG; its status
  local log=$1 t=$2 rc; shift 2
  say "+ $* (timeout ${t}s)" | tee -a "$log"
  set +e
  timeout -k 10 "$t" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  ((rc == 124 || rc == 137)) && say "gpu_check: TIMED OUT after ${t}s: $1" | tee -a "$log"
  return "$rc"
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null | head -1; }
inb() { # is PATH in the bundle (or its cache of inflated libraries)?
  local p
  p=$(realpath -m "$1")
  [[ $p == "$MNT_BUNDLE"/* || (-n ${MNT_BUNDLE_LIBCACHE:-} && $p == "$MNT_BUNDLE_LIBCACHE"/*) ]]
}
finish() {
  local mnt=${mnt_ips:-n/a} pt=${torch_ips:-n/a} ratio=n/a line bn=${bn_mode:-unknown}
  [[ -n $mnt ]] || mnt=n/a
  [[ -n $pt ]] || pt=n/a
  if [[ $mnt != n/a && $pt != n/a ]]; then ratio=$(awk -v a="$mnt" -v b="$pt" 'BEGIN { printf "%.2f", a / b }'); fi
  printf '\n==== gpu_check: %ds in all; logs and results.txt in %s\n' "$(($(now) - t_start))" "$out"
  cat "$results"
  if [[ $build_only != 1 ]]; then
    # what this run's step ran, each against what it replaced
    {
      printf '\n%-26s %s\n' "the step's settings" "in this run"
      printf '%-26s %s\n' "batch norm (bf16)" "${bn_mode:-unknown}"
      printf '%-26s %s\n' "convolution algorithms" "cuDNN's ranking: ${mnt:-n/a} img/s; timed at start-up: ${timed_ips:-n/a} img/s${timed_algos:+ ($timed_algos)}"
      printf '%-26s %s\n' "step as a CUDA graph" "eager: ${mnt:-n/a} img/s; captured and replayed (--cuda-graph on): ${graph_ips:-n/a} img/s"
      printf '%-26s %s\n' "NCCL collectives" "${nccl_mode:-unknown}"
      printf '%-26s %s\n' "stem input channels" "${stem_mode:-unknown}"
      printf '%-26s %s\n' "bf16 weight copies" "cast once per step in forward, reused by backward-data"
      printf '%-26s %s\n' "batch upload (train)" "copy stream, the next batch beside the step (MNT_COPY_OVERLAP=${MNT_COPY_OVERLAP:-on}): ${overlap_check:-not checked (gpu_train did not run)}"
      printf '%-26s %s\n' "non-finite check" "the update reads the flag on the device; one stream wait per step, at its end"
    } | tee -a "$results"
  fi
  if [[ $build_only == 1 ]]; then
    line="gpu_check: build-only dry run $( ((${#failed[@]} == 0)) && echo passed || echo "FAILED: ${failed[*]}")"
  else
    line="gpu_check: mntrain $mnt img/s, pytorch $pt img/s, ratio $ratio, bn $bn"
    ((${#failed[@]} == 0)) || line+="  (FAILED: ${failed[*]})"
  fi
  echo "$line" >>"$results"
  echo "$line"
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null || true
  ((${#failed[@]} == 0))
}

# ---- 0: environment and bundle ---------------------------------------------------------------------
header 0 "environment, bundle $bundle"
st=ok
# shellcheck disable=SC1091
say "host $(uname -n), $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
  "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}"), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
else
  say "no nvidia-smi"
fi
if command -v nvcc >/dev/null; then say "nvcc: $(nvcc --version | grep -m1 release)"; else say "no nvcc on PATH"; fi
say "cmake $(cmake --version | awk 'NR == 1 { print $3 }') ($(command -v cmake)), ninja $(ninja --version) ($(command -v ninja))"
say "cc: $cc ($("$cc" -dumpfullversion 2>/dev/null || "$cc" -dumpversion)), python3: $(command -v python3 || echo none)"
if [[ ! -f $bundle/env.sh ]]; then
  say "gpu_check: no bundle at $bundle (make it with benchmarks/gpu_bundle.sh and carry it)"
  st=FAIL
else
  bundle=$(cd "$bundle" && pwd)
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
  say "bundle: $MNT_BUNDLE ($(du -sh "$MNT_BUNDLE" | cut -f1)), inflated libraries in ${MNT_BUNDLE_LIBCACHE:-(none)}"
  # what the bundle's libraries need from the image (REQUIRES: the newest symbol version per family)
  glibc_v=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
  while read -r need; do
    [[ -n $need ]] || continue
    fam=${need%%_*} ver=${need#*_} have=""
    case $fam in
      GLIBC) have=$glibc_v ;;
      GLIBCXX | CXXABI) lib=libstdc++.so.6 ;;
      GOMP) lib=libgomp.so.1 ;;
      GCC) lib=libgcc_s.so.1 ;;
      *) lib="" ;;
    esac
    if [[ $fam != GLIBC && -n $lib ]]; then
      f=$("$cc" -print-file-name="$lib" 2>/dev/null || true)
      [[ $f == /* ]] || f=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }')
      have=$(grep -aoE "\b${fam}_[0-9][0-9.]*[0-9]\b" "${f:-/nonexistent}" 2>/dev/null | sed "s/^${fam}_//" | sort -V | tail -1 || true)
    fi
    if [[ -z $have ]] || [[ $(printf '%s\n%s\n' "$ver" "$have" | sort -V | head -1) != "$ver" ]]; then
      say "gpu_check: the bundle needs ${fam}_$ver, this machine has ${have:-none} (${lib:-glibc}): the bundle's libraries cannot run here"
      st=FAIL
    else
      say "bundle needs ${fam}_$ver: this machine has $have"
    fi
  done <"$bundle/REQUIRES"
  if [[ -n ${MNT_BUNDLE_LIBCACHE:-} ]] && ! compgen -G "$MNT_BUNDLE_LIBCACHE/libdnnl.so.[0-9]*" >/dev/null; then
    say "gpu_check: libdnnl was not inflated into $MNT_BUNDLE_LIBCACHE"
    st=FAIL
  fi
fi
footer env "$st"
if [[ $st != ok ]]; then finish; exit 1; fi

# ---- 1: configure ----------------------------------------------------------------------------------
log=$out/build.log
: >"$log"
header 1 "configure ($build)"
cfg=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMNT_CUDA=ON -DMNT_WERROR=ON
  -DCMAKE_CUDA_ARCHITECTURES=90 "-DPKG_CONFIG_EXECUTABLE=$PKG_CONFIG"
  # FindHDF5 asks an h5cc on PATH first, and the GPU image has one (/usr/bin/h5cc, naming the
  # image's own HDF5 1.10): a wrapper that fails sends it to its own search, which finds the
  # bundle's copy through CMAKE_LIBRARY_PATH/CMAKE_INCLUDE_PATH (env.sh)
  -DHDF5_C_COMPILER_EXECUTABLE=/bin/false)
if [[ $strict == 1 ]]; then
  # nothing from /usr but the compiler and the C library: the bundle's libraries or nothing
  cfg+=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
  export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
  unset PKG_CONFIG_PATH
  say "strict: CMAKE_IGNORE_PREFIX_PATH=/usr, PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR"
fi
rm -f "$build/CMakeCache.txt"
st=ok
run_logged "$log" "$(limit 90 230)" cmake "${cfg[@]}" || st=FAIL
if [[ $st == ok ]]; then
  say "---- found:"
  grep -E '^-- (Found|mntrain:)' "$log" | sed 's/^-- /  /' | sort -u
  for v in CMAKE_C_COMPILER MNT_NVCC CUDA_cudart_LIBRARY CUDA_cublas_LIBRARY CUDNN_INCLUDE_DIR CUDNN_LIBRARY \
    NCCL_INCLUDE_DIR NCCL_LIBRARY MNT_PYTHON3 MNT_NVIDIA_WHEEL_DIRS HDF5_C_COMPILER_EXECUTABLE; do
    printf '  %-28s %s\n' "$v" "$(cache "$v")"
  done
  say "---- the bundle's libraries, as resolved:"
  for v in DNNL_LIBRARY DNNL_INCLUDE_DIR PMIX_LIBRARY PMIX_INCLUDE_DIR HDF5_hdf5_LIBRARY_RELEASE HDF5_C_INCLUDE_DIR \
    ZLIB_LIBRARY_RELEASE ZLIB_INCLUDE_DIR pkgcfg_lib_JANSSON_jansson pkgcfg_lib_TURBOJPEG_turbojpeg \
    pkgcfg_lib_JPEG_jpeg pkgcfg_lib_PNG_png16 pkgcfg_lib_XXHASH_xxhash; do
    val=$(cache "$v")
    if [[ -z $val ]]; then
      printf '  %-30s (not in the cache)\n' "$v"
      st=FAIL
    elif inb "$val"; then
      printf '  %-30s %s  [bundle]\n' "$v" "$val"
    else
      printf '  %-30s %s  [NOT FROM THE BUNDLE]\n' "$v" "$val"
      st=FAIL
    fi
  done
  for v in CUDNN_LIBRARY NCCL_LIBRARY; do
    [[ $(cache "$v") == /* ]] || { say "gpu_check: $v not found (cuDNN: no CUDA backend; NCCL: no GPU communicator)"; st=FAIL; }
  done
  grep -q 'mntrain: CUDA parts 1 .*cuDNN backend 1, NCCL 1' "$log" ||
    { say "gpu_check: not everything CUDA is built (the 'mntrain:' line above; the cuDNN backend also needs CUDA::cublas)"; st=FAIL; }
fi
footer configure "$st"
[[ $st == ok ]] || { finish; exit 1; }

# ---- 2: build ------------------------------------------------------------------------------------
header 2 "build (ninja -j$jobs)"
# the programs the gpu-labelled tests run: one target that tests/CMakeLists.txt keeps (reading
# CTest's files for them found nothing on the GPU image's newer CMake)
targets=(mntrain gpu_test_programs)
[[ $all_targets == 1 ]] && targets=(all)
say "targets: ${targets[*]}"
st=ok
run_logged "$log" "$(limit 150 190)" ninja -C "$build" -j "$jobs" "${targets[@]}" || st=FAIL
if [[ $st != ok ]] && grep -q -- '-Werror' "$log" && grep -qE 'error: .*\[-W|-Werror=|warnings being treated as errors' "$log"; then
  # this image's compilers warn where Debian's did not: reported as a failure, but built
  # without -Werror so that the tests and benchmarks still run
  say "gpu_check: warnings as errors (above): building again with MNT_WERROR=OFF to run the rest"
  if run_logged "$log" "$(limit 60 190)" cmake -B "$build" -DMNT_WERROR=OFF &&
    run_logged "$log" "$(limit 150 180)" ninja -C "$build" -j "$jobs" "${targets[@]}"; then
    st=WERROR
  fi
fi
footer build "$st"
[[ $st == ok || $st == WERROR ]] || { finish; exit 1; }

# the CUDA libraries' directories for what runs next (cuDNN 9 dlopens its sub-libraries by name)
for v in CUDNN_LIBRARY NCCL_LIBRARY; do
  d=$(dirname "$(cache "$v")")
  case ":$LD_LIBRARY_PATH:" in *":$d:"*) ;; *) LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH ;; esac
done
export LD_LIBRARY_PATH

# ---- 3: smoke: the binary loads the bundle's libraries ---------------------------------------------
header 3 "smoke: ldd mntrain, mntrain --version"
st=ok
ldd_out=$(ldd "$build/mntrain" 2>&1) || true
say "$ldd_out"
if grep -q 'not found' <<<"$ldd_out"; then say "gpu_check: unresolved libraries (above)"; st=FAIL; fi
# (by name up to the soname's number: Debian 12's bundle has libdnnl.so.2 and libhdf5_serial.so.103,
# Debian 13's libdnnl.so.3 and libhdf5_serial.so.310)
for so in libdnnl.so libpmix.so libhdf5_serial.so libjansson.so libturbojpeg.so libjpeg.so libpng16.so \
  libxxhash.so libcurl.so libhwloc.so; do
  p=$(awk -v s="$so." 'index($1, s) == 1 { print $3; exit }' <<<"$ldd_out")
  if [[ -z $p ]] || ! inb "$p"; then say "gpu_check: $so -> '${p:-nothing}', not the bundle's"; st=FAIL; fi
done
# headers: no object may have read a system copy of a header the bundle has (ninja's depfiles)
n_sys=0
while IFS= read -r h; do
  if [[ -e $MNT_BUNDLE$h ]]; then
    ((n_sys < 10)) && say "gpu_check: the build read $h, not the bundle's copy"
    n_sys=$((n_sys + 1))
  fi
done < <(ninja -C "$build" -t deps | awk '/^    \/usr\// { print $1 }' | sort -u)
if ((n_sys)); then st=FAIL; else say "headers: no system copy of a bundled header was read ($(ninja -C "$build" -t deps | awk '/^    \// { print $1 }' | sort -u | grep -c "^$MNT_BUNDLE/") bundle headers read)"; fi
timeout 60 "$build/mntrain" --version || { say "gpu_check: mntrain --version failed"; st=FAIL; }
footer smoke "$st"

if [[ $build_only == 1 ]]; then
  finish && exit 0
  exit 1
fi

# ---- 4: gpu tests ------------------------------------------------------------------------------------
log=$out/ctest.log
: >"$log"
header 4 "ctest -L gpu"
st=ok
if [[ $skip_tests == 1 ]]; then
  say "gpu_check: --skip-tests: the gpu tests are not run" | tee -a "$log"
  st=skipped
else
  # what the benchmarks need at most after it: their caps (steps 5 and 6)
  run_logged "$log" "$(limit 120 $((mnt_seconds + 45 + torch_seconds + 60)))" \
    ctest --test-dir "$build" -L gpu --output-on-failure --timeout 100 || st=FAIL
fi
if [[ $st != skipped ]] && grep -qE 'No tests were found' "$log"; then
  say "gpu_check: no gpu-labelled tests"
  st=FAIL
fi
n_run=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$log" || true)
n_skip=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#.*\*\*\*Skipped' "$log" || true)
if ((n_skip > 0)); then
  if ((n_skip == n_run)) && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    say "gpu_check: every gpu test skipped although nvidia-smi lists a GPU"
    st=FAIL
  else
    say "gpu_check: WARNING: $n_skip of $n_run gpu tests skipped (above)"
  fi
fi
# the copy overlap's check (gpu_train: the same checkpoint with MNT_COPY_OVERLAP on and off), from
# every test's output that CTest keeps
overlap_check=$(grep -hoE '^(ok|FAIL): overlap: .*' "$build/Testing/Temporary/LastTest.log" 2>/dev/null | head -1 || true)
if [[ $st == skipped ]]; then footer gpu-tests ok; else footer gpu-tests "$st"; fi

# ---- 5: mntrain bench step ---------------------------------------------------------------------------
log=$out/bench_mntrain.log
: >"$log"
header 5 "mntrain bench step, resnet50 224 px bf16 batch 256 (~${mnt_seconds}s)"
st=ok
help=$("$build/mntrain" bench step --help 2>&1 || true)
args=(bench step --device cuda --arch resnet50 --size 224 --precision bf16 --batch 256 --warmup 5)
for f in --device --precision; do
  grep -q -- "$f" <<<"$help" || { say "gpu_check: mntrain bench step has no $f (yet)"; st=FAIL; }
done
if [[ $st == ok ]]; then
  if grep -q -- '--seconds' <<<"$help"; then
    args+=(--seconds "$mnt_seconds")
    t=$(limit $((mnt_seconds + 45)) $((torch_seconds + 60)))
  else
    # no --seconds: many steps, stopped with SIGINT after the time; the rate from the step lines
    args+=(--steps 100000)
    t=$(limit $((mnt_seconds + 25)) $((torch_seconds + 60)))
  fi
  say "+ $build/mntrain ${args[*]}   (SIGINT after ${t}s)" | tee -a "$log"
  set +e
  timeout -s INT -k 10 "$t" "$build/mntrain" "${args[@]}" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  # the last line: "resnet50 224 px batch 256 threads T: X img/s (mean of N steps), ..."; if the
  # run was cut short, from its lines per timed step ("step k/N: DT s, X img/s, loss L")
  mnt_ips=$(sed -n 's/.*: \([0-9.]*\) img\/s (mean of \([0-9]*\) steps).*/\1/p' "$log" | tail -1)
  nsteps=$(sed -n 's/.* img\/s (mean of \([0-9]*\) steps).*/\1/p' "$log" | tail -1)
  if [[ -z $mnt_ips ]]; then
    nsteps=$(grep -cE '^step [0-9]+/[0-9]+: [0-9.]+ s,' "$log" || true)
    mnt_ips=$(awk -v b=256 '/^step [0-9]+\/[0-9]+: [0-9.]+ s,/ { n++; s += $3 } END { if (n > 0 && s > 0) printf "%.1f", n * b / s }' "$log")
    [[ -z $mnt_ips ]] || say "gpu_check: mntrain did not finish: img/s from its $nsteps step lines"
  fi
  if [[ -z $mnt_ips ]]; then
    say "gpu_check: no timed step of mntrain finished (exit $rc)"
    st=FAIL
  elif ((rc != 0 && rc != 124 && rc != 130)); then
    say "gpu_check: mntrain exited $rc after $nsteps timed steps"
    st=FAIL
  fi
  say "mntrain: ${mnt_ips:-n/a} img/s, mean over $nsteps timed steps of batch 256" | tee -a "$log"
fi
# what the batch-norm layers ran: bench step's "# batch norm: nhwc-kernels x53" (kinds separated by
# "; "; the last such line); "unknown" when mntrain did not say
bn_mode=$(sed -n 's/\r$//; s/^#[[:space:]]*[Bb]atch[ -]\{0,1\}[Nn]orm[a-z]*[[:space:]]*:[[:space:]]*//p' "$log" | tail -1 |
  sed 's/[[:space:]]*;[[:space:]]*/ + /g; s/[[:space:]]*,[[:space:]]*/ + /g; s/[[:space:]]\{1,\}/ /g; s/ $//')
[[ -n $bn_mode ]] || bn_mode=unknown
# the stem's input channels: the bf16 stem convolution names its padding in "# convolution: ..."
if grep -q '^# convolution:.*input padded 3->4 channels' "$log"; then
  stem_mode="4 (3 padded with a zero channel inside the layer, MNT_STEM_PAD=on)"
elif grep -q '^# convolution:' "$log"; then
  stem_mode="3 (not padded)"
fi
say "mntrain: batch norm $bn_mode" | tee -a "$log"
footer mntrain "$st"

# ---- 5b: what the step's settings change, each next to the default run above ---------------------------
# the convolution algorithms timed at start-up (MNT_CUDNN_ALGO=timed) against the default ranking;
# where the step's time goes (bench step --profile: every op alone, per layer); and the NCCL
# communicator's per-call cost on this one GPU (bench allreduce, small messages, whose set-up line
# says whether the collectives run on a blocking communicator)
log=$out/bench_variants.log
: >"$log"
header 5b "mntrain variants: timed algorithms, CUDA graph, profile, one-GPU allreduce (~$((mnt_seconds + 45))s)"
st=ok
if [[ -x $build/mntrain ]]; then
  run_logged "$log" "$(limit $((mnt_seconds / 2 + 40)) $((torch_seconds + 90)))" env MNT_CUDNN_ALGO=timed \
    "$build/mntrain" bench step --device cuda --arch resnet50 --size 224 --precision bf16 --batch 256 --warmup 5 \
    --seconds $((mnt_seconds / 2 > 5 ? mnt_seconds / 2 : 5)) || st=FAIL
  timed_ips=$(sed -n 's/.*: \([0-9.]*\) img\/s (mean of \([0-9]*\) steps).*/\1/p' "$log" | head -1)
  timed_algos=$(sed -n 's/^# convolution: //p' "$log" | head -1)
  # the step captured once as a CUDA graph and replayed (bench step --cuda-graph on), beside step 5's eager run
  glog=$out/bench_graph.log
  run_logged "$glog" "$(limit $((mnt_seconds / 2 + 40)) $((torch_seconds + 80)))" "$build/mntrain" bench step \
    --device cuda --arch resnet50 --size 224 --precision bf16 --batch 256 --warmup 5 --cuda-graph on \
    --seconds $((mnt_seconds / 2 > 5 ? mnt_seconds / 2 : 5)) || st=FAIL
  cat "$glog" >>"$log"
  graph_ips=$(sed -n 's/.*: \([0-9.]*\) img\/s (mean of \([0-9]*\) steps).*/\1/p' "$glog" | head -1)
  grep -q "captured as a CUDA graph" "$glog" || { say "gpu_check: bench step --cuda-graph on did not capture"; st=FAIL; }
  run_logged "$log" "$(limit 40 $((torch_seconds + 70)))" "$build/mntrain" bench step --device cuda --arch resnet50 \
    --size 224 --precision bf16 --batch 256 --warmup 3 --steps 5 --profile || st=FAIL
  run_logged "$log" "$(limit 30 $((torch_seconds + 65)))" env MNT_LOG_LEVEL=info "$build/mntrain" bench allreduce \
    --comm nccl -b 4K -e 4M -f 8 -n 200 -w 20 -d bfloat16 || st=FAIL
  nccl_mode=$(grep -o 'collectives on a[a-z ]*communicators\{0,1\}' "$log" | tail -1 || true)
fi
footer variants "$st"

# ---- 6: PyTorch's step ---------------------------------------------------------------------------------
log=$out/bench_torch.log
: >"$log"
header 6 "PyTorch step, resnet50 224 px bf16 batch 256 (~${torch_seconds}s)"
st=ok
# the image's own libraries for PyTorch, not the bundle's (the LD_LIBRARY_PATH from before env.sh)
if [[ -n ${orig_ld_library_path+set} ]]; then torch_env=(env "LD_LIBRARY_PATH=$orig_ld_library_path"); else torch_env=(env -u LD_LIBRARY_PATH); fi
run_logged "$log" "$(limit $((torch_seconds + 60)) 5)" "${torch_env[@]}" PYTHONUNBUFFERED=1 \
  python3 "$here/peer_step_torch_gpu.py" --arch resnet50 --size 224 --batch 256 --precision bf16 \
  --seconds "$torch_seconds" || st=FAIL
torch_ips=$(sed -n 's/^peer_step_torch_gpu: .*: \([0-9.]*\) img\/s .*/\1/p' "$log" | tail -1)
if [[ $st != ok || -z $torch_ips ]]; then
  say "gpu_check: PyTorch's step failed"
  st=FAIL
  torch_ips=""
fi
footer pytorch "$st"

finish
