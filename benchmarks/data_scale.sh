#!/usr/bin/env bash
# data_scale.sh — ImageNet at cluster scale: bytes, filesystem bandwidth and loader speed, on an
# ImageNet-like set of real photographs (benchmarks/imagenet_like.py: crops of 35 photos from Debian's
# lomiri-wallpapers-16.04, mate-backgrounds and plasma-workspace-wallpapers, ~500x375, JPEG quality 90).
#   benchmarks/data_scale.sh [options] [MNTRAIN] [WORKDIR]
# MNTRAIN defaults to build/mntrain, WORKDIR to /tmp/mntrain-data-scale (kept between runs: the set
# and the conversions are made once). It
#  1. makes the set (WORKDIR/src/train, --images files in --classes classes, from --seed);
#  2. converts it with `mntrain convert imagenet` to format 3 at --resize 256, --codec raw and
#     --codec jpeg (--quality 90), and to format 2 (--size 256, centre square) for reference;
#  3. prints bytes per image and the set's size for the sources and each conversion, extrapolated
#     to ImageNet-1k's 1,281,167 training images, the filesystem bandwidth each needs at 128 and
#     1,024 GPUs x 3,000 img/s, and whether all of ImageNet-1k in it fits a node's memory (--page-cache-gib);
#  4. measures img/s per loader thread at 224 px: `mntrain bench loader` on each conversion and
#     torchvision's ImageFolder pipeline on the source JPEGs (benchmarks/tv_loader.py: PIL decode,
#     RandomResizedCrop, flip, ToTensor, Normalize, DataLoader with as many worker processes), with 1
#     and --threads threads/workers, --rounds times in alternating order so the noise shows;
#  5. says whether its targets are met: jpeg records <= 1/4 of raw ones at the same short side,
#     and decode + augment per loader thread >= 3x torchvision's per worker.
# Tables go to stdout and to WORKDIR/data_scale-<time>.txt; progress lines to stderr.
# Needs: Debian's /usr/bin/python3 with python3-torch, python3-torchvision, python3-pil,
# python3-numpy (job_templates/tools/install-deps.sh) and the three photo packages (benchmark only, ~155 MB):
#   apt-get install --no-install-recommends lomiri-wallpapers-16.04 mate-backgrounds plasma-workspace-wallpapers
# Run it on a quiet machine: it warns when the load average says otherwise, and prints the load next
# to every figure.
# Options (before or after the positional arguments):
#   --images N        files in the set (default 3000)       --classes C     classes (default 16)
#   --seed S          the set's seed (default 1)            --quality Q     jpeg codec quality (default 90)
#   --resize S        format 3 shorter side (default 256)   --max-side L    format 3 cap (default: mntrain's)
#   --threads T       the multi-thread row (default: nproc) --rounds R      measurement rounds (default 3)
#   --seconds S       seconds per measurement (default 6)   --size P        training crop (default 224)
#   --page-cache-gib G  a node's memory for the page cache (default 512)
#   --img-per-gpu R   one GPU's training rate (default 3000: ResNet-50, bf16, H100/H200 class)
#   --skip-loader     sizes only
# Exit: 0 when every figure was measured (targets met or not: the verdict is printed), 1 when a step
# failed or this mntrain has no format 3 (the rows it cannot fill say so), 2 on a usage error.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
images=3000 classes=16 seed=1 quality=90 resize=256 max_side="" threads=$(nproc) rounds=3 seconds=6
size=224 page_cache_gib=512 img_per_gpu=3000 skip_loader=0
imagenet=1281167 # ImageNet-1k (ILSVRC2012) training images
# ImageNet-1k's own training JPEGs: ILSVRC2012_img_train.tar is about 138 GiB, ~115 kB per image
# (a published size, not measured here): the jpeg row's ImageNet estimate scales it.
imagenet_src_bytes=115000
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
pos=()
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --images | --classes | --seed | --quality | --resize | --max-side | --threads | --rounds | --seconds | --size | --page-cache-gib | --img-per-gpu)
      [ $# -ge 2 ] || { echo "data_scale.sh: $1 needs a value (--help)" >&2; exit 2; }
      v=$2
      case $1 in
        --seconds) [[ $v =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "data_scale.sh: $1 wants seconds, not '$v'" >&2; exit 2; } ;;
        --seed) [[ $v =~ ^[0-9]+$ ]] || { echo "data_scale.sh: $1 wants an integer >= 0, not '$v'" >&2; exit 2; } ;;
        *) [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "data_scale.sh: $1 wants a positive integer, not '$v'" >&2; exit 2; } ;;
      esac
      k=${1#--}
      k=${k//-/_}
      printf -v "$k" '%s' "$v"
      shift 2 ;;
    --skip-loader) skip_loader=1; shift ;;
    -*) echo "data_scale.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    *) pos+=("$1"); shift ;;
  esac
done
[ ${#pos[@]} -le 2 ] || { echo "data_scale.sh: at most two arguments, MNTRAIN and WORKDIR (--help)" >&2; exit 2; }
m=${pos[0]:-$here/../build/mntrain}
work=${pos[1]:-/tmp/mntrain-data-scale}
say() { echo "data_scale: $*" >&2; }
die() { echo "data_scale: $*" >&2; exit 1; }

# --- what this needs
[ -x "$m" ] || die "no mntrain at $m (build it, or pass its path: data_scale.sh path/to/mntrain)"
m=$(cd "$(dirname "$m")" && pwd)/$(basename "$m")
[ -x "$py" ] || die "$py not found: the peers need Debian's python3 (apt-get install python3-torch python3-torchvision)"
if ! "$py" -c 'import numpy, PIL, torch, torchvision' 2>/dev/null; then
  die "$py cannot import numpy, PIL, torch and torchvision: apt-get install --no-install-recommends python3-numpy python3-pil python3-torch python3-torchvision"
fi
"$py" "$here/imagenet_like.py" --list >/dev/null || exit 1 # names the missing photo packages
format3=1
"$m" convert --help 2>&1 | grep -q -- '--codec' || format3=0
[ "$format3" = 1 ] || say "this mntrain's convert has no --codec (format 3 jpeg records): the format 3 rows stay empty"
mkdir -p "$work"
work=$(cd "$work" && pwd)
out="$work/data_scale-$(date -u +%Y%m%dT%H%M%SZ).txt"
load() { cut -d' ' -f1 /proc/loadavg; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
isa=sse2
grep -qw avx2 /proc/cpuinfo && isa=avx2
grep -qw avx512bw /proc/cpuinfo && isa=avx512
quiet_check() {
  local l
  l=$(load)
  if awk -v l="$l" -v n="$(nproc)" 'BEGIN { exit !(l > 0.25 * n) }'; then
    say "WARNING: load average $l on $(nproc) cores: this is not a quiet machine; the figures will be low and noisy (see 'load' beside each)"
  fi
}
quiet_check
{
  echo "# data_scale: $(date -u +%FT%TZ) on $(nproc) cores, $cpu ($isa), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), load $(load)"
  echo "# mntrain: $m; benchmarks/ at $(cd "$here" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
} | tee "$out"

# --- 1. the set
src="$work/src/train"
say "making the ImageNet-like set: $images files, $classes classes, seed $seed ($src)"
"$py" "$here/imagenet_like.py" --out "$src" --manifest "$work/src/train.tsv" --images "$images" --classes "$classes" --seed "$seed" \
  || die "imagenet_like.py failed"

# --- 2. the conversions (each kept until its command line changes)
convert() { # convert NAME ARGS...: mntrain convert imagenet SRC WORK/NAME ARGS
  local name=$1 dir="$work/$1" t0 t1
  shift
  local cmd="convert imagenet $src $dir $*"
  if [ -f "$dir/index.json" ] && [ "$(cat "$dir.cmd" 2>/dev/null)" = "$cmd" ]; then
    say "$name: kept ($dir)"
    return 0
  fi
  say "$name: mntrain $cmd"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # $cmd is the word list printed above
  if ! "$m" $cmd --force >"$dir.log" 2>&1; then
    tail -5 "$dir.log" >&2
    die "$name: mntrain convert failed (the whole log: $dir.log)"
  fi
  t1=$(date +%s.%N)
  echo "$cmd" >"$dir.cmd"
  say "$name: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }'): $(tail -1 "$dir.log")"
}
f3opts=(--resize "$resize")
[ -n "$max_side" ] && f3opts+=(--max-side "$max_side")
kinds=()
if [ "$format3" = 1 ]; then
  convert f3-raw "${f3opts[@]}" --codec raw
  convert f3-jpeg "${f3opts[@]}" --codec jpeg --quality "$quality"
  kinds+=(f3-raw f3-jpeg)
fi
convert f2 --size "$resize"
kinds+=(f2)
label() {
  case $1 in
    src) echo "source JPEGs (PIL q90)" ;;
    f3-raw) echo "format 3 raw, short $resize${max_side:+ max $max_side}" ;;
    f3-jpeg) echo "format 3 jpeg q$quality, short $resize" ;;
    f2) echo "format 2 raw ${resize}x$resize" ;;
    tv) echo "torchvision ImageFolder (sources)" ;;
  esac
}

# --- 3. sizes and bandwidth
bytes() { # bytes KIND: the bytes of a set (apparent sizes of its files)
  if [ "$1" = src ]; then
    find "$src" -type f -name '*.JPEG' -printf '%s\n'
  else
    find "$work/$1" -maxdepth 1 -type f \( -name index.json -o -name 'shard-*' \) -printf '%s\n'
  fi | awk '{ s += $1 } END { printf "%.0f", s }'
}
samples() { # samples KIND: images in the set (inspect's count; the file count for the sources)
  if [ "$1" = src ]; then
    find "$src" -type f -name '*.JPEG' | wc -l
  else
    "$m" inspect "$work/$1" | awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^samples/) { print $i; exit } }'
  fi
}
declare -A per
for k in src "${kinds[@]}"; do
  n=$(samples "$k")
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "$k: no sample count ('mntrain inspect $work/$k')"
  per[$k]=$(awk -v b="$(bytes "$k")" -v n="$n" 'BEGIN { printf "%.0f", b / n }')
  say "$k: $n images, ${per[$k]} bytes per image"
done
{
  echo "#"
  echo "# sizes: $images images in $classes classes; ImageNet-1k = $imagenet training images; bandwidth = bytes/img x GPUs x $img_per_gpu img/s"
  echo "# cache: does ImageNet-1k in this form fit in $page_cache_gib GiB of a node's memory (the global order sends every node a different"
  echo "# random slice each epoch, so only a node holding the whole set, staged into memory or local NVMe, stops reading the filesystem)"
  printf '%-36s %10s %9s %11s %8s %11s %11s %7s\n' "# data" "bytes/img" "set MB" "ImageNet GB" "x source" "128 GPUs" "1024 GPUs" "cache"
  printf '%-36s %10s %9s %11s %8s %11s %11s %7s\n' "#" "" "" "" "" "GB/s" "GB/s" ""
  for k in src "${kinds[@]}"; do
    awk -v name="$(label "$k")" -v b="${per[$k]}" -v s="${per[src]}" -v n="$images" -v N="$imagenet" -v r="$img_per_gpu" -v c="$page_cache_gib" 'BEGIN {
      printf "%-36s %10.0f %9.1f %11.1f %8.2f %11.1f %11.1f %7s\n", name, b, b * n / 1e6, b * N / 1e9, b / s, b * 128 * r / 1e9, b * 1024 * r / 1e9, (b * N <= c * 2^30 ? "yes" : "no") }'
  done
  awk -v b="$imagenet_src_bytes" -v N="$imagenet" -v r="$img_per_gpu" -v c="$page_cache_gib" 'BEGIN {
    printf "%-36s %10.0f %9s %11.1f %8s %11.1f %11.1f %7s\n", "ImageNet-1k JPEGs (published size)", b, "-", b * N / 1e9, "-", b * 128 * r / 1e9, b * 1024 * r / 1e9, (b * N <= c * 2^30 ? "yes" : "no") }'
  if [ "$format3" = 1 ]; then
    awk -v b="$imagenet_src_bytes" -v j="${per[f3-jpeg]}" -v s="${per[src]}" -v N="$imagenet" -v r="$img_per_gpu" -v c="$page_cache_gib" -v name="  its format 3 jpeg (x $(awk -v j="${per[f3-jpeg]}" -v s="${per[src]}" 'BEGIN { printf "%.2f", j / s }'), estimate)" 'BEGIN {
      e = b * j / s
      printf "%-36s %10.0f %9s %11.1f %8.2f %11.1f %11.1f %7s\n", name, e, "-", e * N / 1e9, j / s, e * 128 * r / 1e9, e * 1024 * r / 1e9, (e * N <= c * 2^30 ? "yes" : "no") }'
    awk -v j="${per[f3-jpeg]}" -v w="${per[f3-raw]}" 'BEGIN {
      printf "# target: jpeg records <= 1/4 of raw at the same short side: %.3f of raw (1/%.1f): %s\n", j / w, w / j, (j <= w / 4 ? "met" : "MISSED") }'
  else
    echo "# format 3 raw and jpeg: not measured (this mntrain has no convert --codec)"
  fi
} | tee -a "$out"

# --- 4. loader throughput
if [ "$skip_loader" = 1 ]; then
  say "--skip-loader: no throughput measured"
  [ "$format3" = 1 ] || exit 1
  exit 0
fi
rate() { awk '/img\/s per thread/ { for (i = 1; i <= NF; i++) if ($(i+1) == "img/s" && $(i+2) == "per") print $i }'; }
measure() { # measure KIND THREADS: img/s per thread (empty on a failure, whose output goes to stderr)
  local o
  if [ "$1" = tv ]; then
    o=$("$py" "$here/tv_loader.py" --data "$src" --size "$size" --workers "$2" --batch 64 --seconds "$seconds" 2>&1) || { echo "$o" >&2; return 0; }
  else
    o=$("$m" bench loader --data "$work/$1" --size "$size" --loader-threads "$2" --batch 64 --seconds "$seconds" 2>&1) || { echo "$o" >&2; return 0; }
  fi
  echo "$o" | rate
}
tlist=(1)
[ "$threads" -gt 1 ] && tlist+=("$threads")
lkinds=("${kinds[@]}" tv)
declare -A got loads
failed=0
for ((r = 1; r <= rounds; r++)); do
  order=("${lkinds[@]}")
  if ((r % 2 == 0)); then # every other round in reverse: whoever runs first has no edge
    order=()
    for ((i = ${#lkinds[@]} - 1; i >= 0; i--)); do order+=("${lkinds[i]}"); done
  fi
  for t in "${tlist[@]}"; do
    for k in "${order[@]}"; do
      l=$(load)
      v=$(measure "$k" "$t")
      if [ -z "$v" ]; then
        say "round $r/$rounds, $t thread(s): $k FAILED"
        failed=1
        v=-
      else
        say "round $r/$rounds, $t thread(s): $(label "$k"): $v img/s per thread (load $l)"
      fi
      got[$k,$t]+="$v "
      loads[$t]+="$l "
    done
  done
done
med() { tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
{
  echo "#"
  echo "# loader -> $size px training crops (RandomResizedCrop, flip, normalise to float32 NCHW), batch 64, $seconds s per figure,"
  echo "# $rounds rounds, the order reversed every other round; mntrain: bench loader --loader-threads T; torchvision: DataLoader, T worker processes, 1 torch thread each"
  printf '%-36s %7s  %-28s %8s %8s\n' "# data -> img/s per thread" "threads" "each round" "median" "vs tv"
  for t in "${tlist[@]}"; do
    tvm=$(echo "${got[tv,$t]}" | med)
    for k in "${lkinds[@]}"; do
      md=$(echo "${got[$k,$t]}" | med)
      ratio=$(awk -v a="$md" -v b="$tvm" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
      printf '%-36s %7s  %-28s %8s %8s\n' "$(label "$k")" "$t" "${got[$k,$t]}" "$md" "$ratio"
    done
    echo "#   load average (1 min) before each figure, $t thread(s): ${loads[$t]}"
  done
  if [ "$format3" = 1 ]; then
    for t in "${tlist[@]}"; do
      awk -v a="$(echo "${got[f3-jpeg,$t]}" | med)" -v b="$(echo "${got[tv,$t]}" | med)" -v t="$t" 'BEGIN {
        if (a + 0 > 0 && b + 0 > 0) printf "# target: jpeg decode + augment per loader thread >= 3x torchvision per worker, %s thread(s): %.2fx: %s\n", t, a / b, (a >= 3 * b ? "met" : "MISSED")
        else printf "# target, %s thread(s): not measured\n", t }'
    done
  else
    echo "# format 3 rows: not measured (this mntrain has no convert --codec)"
  fi
  echo "# load average at the end: $(load); results also in $out"
} | tee -a "$out"
[ "$failed" = 0 ] && [ "$format3" = 1 ]
