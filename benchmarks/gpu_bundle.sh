#!/usr/bin/env bash
# gpu_bundle.sh — make a relocatable tree of the Debian 12 or 13 libraries mntrain builds and links
# against that the GPU machine's image lacks (PMIx, HDF5, oneDNN, jansson, turbojpeg and libjpeg, libpng,
# xxHash, zlib, pkgconf), runtime and headers, for benchmarks/gpu_check.sh to build with there.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: benchmarks/gpu_bundle.sh [--max-mib N] [--keep-debs DIR] [DIR]

Downloads (apt-get download, no root needed beyond apt's lists) the Debian packages of the
libraries mntrain links against, plus their shared-library closure found with readelf (every
DT_NEEDED resolved inside the bundle or by the C/C++ runtime any glibc image has: libc, libm,
libstdc++, libgcc_s, libgomp, ld-linux), and unpacks them (dpkg -x) into DIR (default:
gpu-bundle/ at the repository root, ignored by git). Then it makes the tree relocatable:
  - absolute symlinks become relative (dangling ones are dropped),
  - pkg-config files name their paths relative to ${pcfiledir},
  - HDF5's hdf5.pc alternative is recreated, PMIx's prefix is set by env.sh (PMIX_PREFIX),
  - docs, man pages, static libraries, programs other than pkgconf are removed,
and writes:
  DIR/env.sh      source it (bash): CMAKE_PREFIX_PATH, CMAKE_LIBRARY_PATH, CMAKE_INCLUDE_PATH,
                  PKG_CONFIG_PATH, PKG_CONFIG, PATH (pkgconf), LD_LIBRARY_PATH, PMIX_PREFIX,
                  MNT_BUNDLE (its own directory, wherever the tree was moved); it inflates
                  the libraries stored xz-compressed (DIR/INFLATE: libdnnl, 39 MiB) into
                  MNT_BUNDLE_LIBCACHE (default /tmp/mnt-gpu-bundle-UID/KEY), outside the tree
  DIR/MANIFEST    the packages and versions in it
  DIR/REQUIRES    the newest GLIBC_/GLIBCXX_/CXXABI_/GCC_/GOMP_ symbol versions the bundle needs
                  from the image (gpu_check.sh compares them with the machine's)
Fails when the tree is larger than --max-mib (default 60 MiB: the device tool carries 64 MiB
with the working tree).

Run it on Debian 12 (bookworm: oneDNN 2.6, HDF5 1.10, PMIx 4) or Debian 13 (trixie: oneDNN 3.7,
HDF5 1.14, PMIx 5), amd64: the bundle holds the packages of the release it runs on (Debian 13
renamed several runtime packages: libpmix2t64, libhdf5-310, libdnnl3.6, libpng16-16t64); another
release is refused. Take it to the GPU machine with the device tool's `carry`: ["gpu-bundle"].
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
max_mib=60
keep_debs=""
dir=""
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --max-mib) max_mib=$2; shift 2 ;;
    --keep-debs) keep_debs=$2; shift 2 ;;
    -*) echo "gpu_bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [[ -z $dir ]] || { echo "gpu_bundle: one DIR only" >&2; exit 2; }; dir=$1; shift ;;
  esac
done
dir=${dir:-$root/gpu-bundle}

die() { echo "gpu_bundle: error: $*" >&2; exit 1; }
say() { echo "gpu_bundle: $*"; }

for t in apt-get apt-cache dpkg dpkg-deb readelf objdump xz sha256sum od find du sort; do
  command -v "$t" >/dev/null || die "needs $t"
done
# shellcheck disable=SC1091
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
# the runtime packages of each release (their names carry the library's soname; Debian 13 renamed
# those built for 64-bit time_t, "t64"); the -dev packages are named alike in both
case $codename in
  bookworm) roots_rt=(libpmix2 libhdf5-103-1 libdnnl2 libpng16-16) gcc_base=gcc-12-base ;;
  trixie) roots_rt=(libpmix2t64 libhdf5-310 libdnnl3.6 libpng16-16t64) gcc_base=gcc-14-base ;;
  *) die "run this on Debian 12 (bookworm) or 13 (trixie), not '${codename:-unknown}': it knows the runtime package names of those two (the GPU image gets these exact binaries)" ;;
esac
[[ $(dpkg --print-architecture) == amd64 ]] || die "run this on amd64 (the GPU machine is x86-64)"

# What mntrain links against (CMakeLists.txt): runtime packages whose ELF files start the
# closure, and the -dev packages whose headers, .so links and .pc files the build needs (their
# own dependencies are not followed: libhdf5-dev alone would pull in Fortran, C++ and libcurl's
# headers).
roots_rt+=(libjansson4 libturbojpeg0 libjpeg62-turbo libxxhash0 zlib1g pkgconf-bin libpkgconf3)
roots_dev=(libpmix-dev libhdf5-dev libdnnl-dev libjansson-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  libxxhash-dev zlib1g-dev)
# Never bundled: every glibc-based image with a C/C++ compiler has these (nvcc needs gcc, and
# gcc brings libgomp); a second copy first on LD_LIBRARY_PATH would shadow the image's newer one.
never_pkg=" libc6 libgcc-s1 libstdc++6 $gcc_base libgomp1 libcrypt1 debconf "
base_sonames=" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1
  libanl.so.1 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 "

work=$(mktemp -d /tmp/gpu_bundle.XXXXXX)
trap 'rm -rf "$work"' EXIT
debs=${keep_debs:-$work/debs}
mkdir -p "$debs" "$work/stage"
chmod a+rwx "$debs" 2>/dev/null || true # apt's _apt user downloads into it when run as root

declare -A staged=()   # package -> staged directory
declare -A whole=()    # package -> 1: copied whole (the roots)
declare -A provider=() # soname/file name -> its path in the stage (first staged package wins)
declare -A wanted=()   # staged path of a library another bundled file needs -> 1

debfile() { find "$debs" -maxdepth 1 \( -name "${1}_*_amd64.deb" -o -name "${1}_*_all.deb" \) | head -1; }

stage() { # stage PKG: download (once) and unpack into $work/stage/PKG; index its libraries
  local p=$1 f l
  [[ -n ${staged[$p]:-} ]] && return 0
  f=$(debfile "$p")
  if [[ -z $f ]]; then
    (cd "$debs" && apt-get download -q "$p" 2>&1 | { grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' -e '^Fetched' >&2 || true; }) ||
      die "apt-get download $p failed (apt-get update first? network?)"
    f=$(debfile "$p")
    [[ -n $f ]] || die "apt-get download $p left no .deb"
  fi
  dpkg-deb -x "$f" "$work/stage/$p"
  staged[$p]=$work/stage/$p
  while IFS= read -r l; do
    provider[${l##*/}]=${provider[${l##*/}]:-$l}
  done < <(find "$work/stage/$p" \( -type f -o -type l \) -name '*.so*' | grep -E '/lib(64)?/|/lib/x86_64-linux-gnu/')
}

direct_deps() { # the Depends/Pre-Depends of PKG, virtual ones by their providers
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$1" |
    awk 'NR > 1 && /^ +\|?(Pre)?Depends: / { n = $NF; if (n !~ /^</) print n; next }
         NR > 1 && /^    [^ ]+$/ { print $1 }' | sed 's/:any$//' | sort -u
}

is_elf() { [[ -f $1 && ! -L $1 && $(head -c 4 "$1" | od -An -c | tr -d ' ') == 177ELF ]]; }

elfs_of() { # ELF shared objects and executables in a staged package
  find "$1" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0 |
    while IFS= read -r -d '' f; do is_elf "$f" && printf '%s\n' "$f"; done
}

needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

pkg_of() { local r=${1#"$work"/stage/}; echo "${r%%/*}"; }

say "resolving the shared-library closure of: ${roots_rt[*]}"
queue=()
for p in "${roots_rt[@]}"; do
  stage "$p"
  whole[$p]=1
  mapfile -t -O "${#queue[@]}" queue < <(elfs_of "${staged[$p]}")
done
while ((${#queue[@]})); do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  while IFS= read -r so; do
    [[ $base_sonames == *" $so "* ]] && continue
    l=${provider[$so]:-}
    if [[ -z $l ]]; then # not staged yet: it must come from a direct dependency of f's package
      p=$(pkg_of "$f")
      while IFS= read -r d; do
        [[ $never_pkg == *" $d "* ]] || stage "$d"
      done < <(direct_deps "$p")
      l=${provider[$so]:-}
      [[ -n $l ]] || die "$so (needed by ${f#"$work"/stage/}) is in none of $p's dependencies"
    fi
    [[ -n ${wanted[$l]:-} ]] && continue
    wanted[$l]=1
    q=$(pkg_of "$l")
    [[ -n ${whole[$q]:-} ]] || say "  $so <- $q (needed by ${f##*/})"
    queue+=("$(readlink -f "$l")")
  done < <(needed_of "$f")
done
for p in "${roots_dev[@]}"; do stage "$p"; whole[$p]=1; done

# DIR is replaced: only an empty directory or an earlier bundle (its MANIFEST) is
if [[ -e $dir && ! -f $dir/MANIFEST && -n $(ls -A "$dir" 2>/dev/null) ]]; then
  die "$dir exists and is no bundle (no MANIFEST): not replacing it"
fi
rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# the roots whole; of their dependencies only the libraries needed (and the links to them)
declare -A inbundle=()
for p in "${!whole[@]}"; do
  cp -a "${staged[$p]}/." "$dir/"
  inbundle[$p]=1
done
for l in "${!wanted[@]}"; do
  p=$(pkg_of "$l")
  [[ -n ${whole[$p]:-} ]] && continue
  inbundle[$p]=1
  t=$(readlink -f "$l")
  for x in "$l" "$t"; do
    (cd "${staged[$p]}" && cp -a --parents "${x#"${staged[$p]}"/}" "$dir/")
  done
done
say "unpacked ${#whole[@]} packages whole and libraries of $((${#inbundle[@]} - ${#whole[@]})) more into $dir"
: >"$dir/MANIFEST"
for p in $(printf '%s\n' "${!inbundle[@]}" | sort); do
  printf '%-28s %-34s %s\n' "$p" "$(dpkg-deb -f "$(debfile "$p")" Version)" \
    "$([[ -n ${whole[$p]:-} ]] && echo whole || echo 'needed libraries')" >>"$dir/MANIFEST"
done

# ---- trim -------------------------------------------------------------------------------------
rm -rf "${dir:?}/usr/share/doc" "${dir:?}/usr/share/man" "${dir:?}/usr/share/lintian" "${dir:?}/usr/share/aclocal" \
  "${dir:?}/usr/share/bug" "${dir:?}/usr/share/info" "${dir:?}/usr/share/doc-base" "${dir:?}/etc"
find "$dir" -name '*.a' -delete
find "$dir" -name '*.la' -delete
find "$dir" -name '*.mod' -delete                            # HDF5's Fortran modules
find "$dir/usr/include" -name '*.f90' -delete 2>/dev/null || true
# programs: only pkgconf (the image may have no pkg-config); libpng-config, h5cc & co. name /usr
if [[ -d $dir/usr/bin ]]; then
  find "$dir/usr/bin" -mindepth 1 ! -name pkgconf -exec rm -rf {} +
fi
# oneDNN's CMake package requires OpenCL (cmake/FindDNNL.cmake does without it)
rm -rf "$dir/usr/lib/x86_64-linux-gnu/cmake/dnnl"

# ---- relocatable links ------------------------------------------------------------------------
while IFS= read -r -d '' l; do
  t=$(readlink "$l")
  [[ $t == /* ]] || continue
  if [[ -e $dir$t || -L $dir$t ]]; then
    ln -sfn "$(realpath -s --relative-to="$(dirname "$l")" "$dir$t")" "$l"
  else
    rm -f "$l"
  fi
done < <(find "$dir" -type l -print0)
# HDF5: libhdf5-dev's postinst makes hdf5.pc an alternative for hdf5-serial.pc (not in the .deb)
pcd=$dir/usr/lib/x86_64-linux-gnu/pkgconfig
[[ -f $pcd/hdf5-serial.pc && ! -e $pcd/hdf5.pc ]] && ln -s hdf5-serial.pc "$pcd/hdf5.pc"
ln -sfn pkgconf "$dir/usr/bin/pkg-config"
# links whose target is missing (C++/Fortran/HL HDF5 libraries we do not ship)
find "$dir" -xtype l -delete
find "$dir" -depth -type d -empty -delete

# ---- pkg-config files: every /usr becomes ${bundle_usr}, relative to ${pcfiledir} ---------------
while IFS= read -r -d '' pc; do
  [[ -L $pc ]] && continue
  rel=$(realpath -s --relative-to="$(dirname "$pc")" "$dir/usr")
  # shellcheck disable=SC2016 # ${bundle_usr} is pkg-config's, not ours
  sed -i -E -e "1i bundle_usr=\${pcfiledir}/$rel" \
    -e 's#(^|[=[:space:]"'"'"']|-I|-L|-Wl,)/usr(/|$|[[:space:]])#\1${bundle_usr}\2#g' "$pc"
  if grep -nE '(^|[=[:space:]]|-I|-L)/(usr|lib|opt|etc)/' "$pc" | grep -v '^1:' >&2; then
    die "$pc still names absolute paths (above)"
  fi
done < <(find "$dir" -name '*.pc' -print0)
# libjpeg62-turbo-dev puts jconfig.h (which jpeglib.h includes) in the multiarch directory, which the
# compiler searches by itself only under /usr: the bundle's libjpeg.pc names it, so that the build
# reads the bundle's copy
if [[ -f $pcd/libjpeg.pc && -f $dir/usr/include/x86_64-linux-gnu/jconfig.h ]]; then
  # shellcheck disable=SC2016 # ${includedir} is pkg-config's
  sed -i -E 's#^(Cflags:.*)$#\1 -I${includedir}/x86_64-linux-gnu#' "$pcd/libjpeg.pc"
fi
# CMake package files: those that name /usr (libjpeg-turbo's, which also wants libjpeg and the
# static library) are dropped; mntrain finds these libraries with pkg-config and cmake/Find*.cmake.
# Those left compute their prefix from their own location.
while IFS= read -r f; do
  d=$(dirname "$f")
  [[ -d $d ]] || continue
  say "dropping ${d#"$dir"/} (names /usr: not relocatable; mntrain does not use it)"
  rm -rf "$d"
done < <(grep -rlE '"/usr/|[[:space:]]/usr/(lib|include)' --include='*.cmake' "$dir" || true)
find "$dir" -depth -type d -empty -delete

# ---- env.sh -------------------------------------------------------------------------------------
cat >"$dir/env.sh" <<'EOF'
# Source this (bash) to build and run against this bundle, wherever its directory was moved:
#   . gpu-bundle/env.sh
# Written by benchmarks/gpu_bundle.sh.
MNT_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MNT_BUNDLE
_mnt_usr=$MNT_BUNDLE/usr
_mnt_lib=$_mnt_usr/lib/x86_64-linux-gnu
_mnt_add() { # _mnt_add VAR DIR...: prepend the DIRs to VAR (colon list)
  local v=$1 d; shift
  for d in "$@"; do
    case ":${!v:-}:" in *":$d:"*) ;; *) export "$v=$d${!v:+:${!v}}" ;; esac
  done
}
_mnt_add CMAKE_PREFIX_PATH "$_mnt_usr"
_mnt_add CMAKE_LIBRARY_PATH "$MNT_BUNDLE/lib/x86_64-linux-gnu" "$_mnt_lib" # + suffixes: hdf5/serial
_mnt_add CMAKE_INCLUDE_PATH "$_mnt_usr/include"  # with suffixes: hdf5/serial
_mnt_add PKG_CONFIG_PATH "$_mnt_usr/share/pkgconfig" "$_mnt_lib/pkgconfig"
_mnt_add LD_LIBRARY_PATH "$MNT_BUNDLE/lib/x86_64-linux-gnu" "$_mnt_lib/pmix2/lib" "$_mnt_lib"
_mnt_add PATH "$_mnt_usr/bin"
export PKG_CONFIG=$_mnt_usr/bin/pkgconf            # CMake's FindPkgConfig reads $PKG_CONFIG
export PMIX_PREFIX=$_mnt_lib/pmix2                 # its plugins and help files (compiled-in: /usr/...)
# Libraries stored compressed (INFLATE: file.xz sha256 links...) are inflated once into
# MNT_BUNDLE_LIBCACHE, outside the tree, which goes first on the library paths.
if [[ -s $MNT_BUNDLE/INFLATE ]]; then
  MNT_BUNDLE_LIBCACHE=${MNT_BUNDLE_CACHE:-${TMPDIR:-/tmp}/mnt-gpu-bundle-$(id -u)}/$(cksum <"$MNT_BUNDLE/INFLATE" | cut -d' ' -f1)
  export MNT_BUNDLE_LIBCACHE
  mkdir -p "$MNT_BUNDLE_LIBCACHE"
  while read -r _mnt_xz _mnt_sum _mnt_links; do
    _mnt_name=${_mnt_xz##*/}
    _mnt_name=${_mnt_name%.xz}
    _mnt_tmp=$MNT_BUNDLE_LIBCACHE/.$_mnt_name.$$
    if [[ ! -f $MNT_BUNDLE_LIBCACHE/$_mnt_name ]]; then
      if command -v xz >/dev/null; then
        xz -dc "$MNT_BUNDLE/$_mnt_xz" >"$_mnt_tmp"
      else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$MNT_BUNDLE/$_mnt_xz" "$_mnt_tmp"
      fi
      if [[ -f $_mnt_tmp && $(sha256sum "$_mnt_tmp" | cut -d' ' -f1) == "$_mnt_sum" ]]; then
        mv -f "$_mnt_tmp" "$MNT_BUNDLE_LIBCACHE/$_mnt_name"
      else
        echo "env.sh: could not inflate $MNT_BUNDLE/$_mnt_xz into $MNT_BUNDLE_LIBCACHE" >&2
        rm -f "$_mnt_tmp"
      fi
    fi
    for _mnt_l in $_mnt_links; do ln -sfn "$_mnt_name" "$MNT_BUNDLE_LIBCACHE/$_mnt_l"; done
  done <"$MNT_BUNDLE/INFLATE"
  _mnt_add CMAKE_LIBRARY_PATH "$MNT_BUNDLE_LIBCACHE"
  _mnt_add LD_LIBRARY_PATH "$MNT_BUNDLE_LIBCACHE"
  unset _mnt_xz _mnt_sum _mnt_links _mnt_name _mnt_l _mnt_tmp
fi
unset -f _mnt_add
unset _mnt_usr _mnt_lib
EOF

# ---- checks: closure complete, what the image must provide ------------------------------------
say "checking that every DT_NEEDED resolves inside the bundle or to the image's C/C++ runtime"
declare -A have_so=()
while IFS= read -r -d '' l; do have_so[${l##*/}]=1; done < <(find "$dir/usr/lib" "$dir/lib" \( -type f -o -type l \) -name '*.so*' -print0 2>/dev/null)
bad=0
: >"$work/elfs"
while IFS= read -r -d '' f; do
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] || continue
  echo "$f" >>"$work/elfs"
  while IFS= read -r so; do
    [[ $base_sonames == *" $so "* || -n ${have_so[$so]:-} ]] && continue
    echo "gpu_bundle: unresolved: ${f#"$dir"/} needs $so" >&2
    bad=1
  done < <(needed_of "$f")
done < <(find "$dir" -type f -print0)
((bad == 0)) || die "the closure is incomplete (above)"
: >"$dir/REQUIRES"
xargs -d '\n' objdump -T <"$work/elfs" 2>/dev/null | grep -oE '\b(GLIBC|GLIBCXX|CXXABI|GCC|GOMP)_[0-9][0-9.]*\b' |
  sort -u | sort -t_ -k1,1 -k2,2V | awk -F_ '{ v[$1] = $0 } END { for (k in v) print v[k] }' | sort >"$dir/REQUIRES"

# ---- big libraries travel xz-compressed (libdnnl.so.2.6: 39 MiB -> 7 MiB) ---------------------
# env.sh inflates each on first use into a cache outside the tree (so that a dry run here does
# not grow what the device tool carries) and puts that directory first on the library paths.
: >"$dir/INFLATE"
while IFS= read -r -d '' f; do
  links=()
  while IFS= read -r -d '' l; do
    [[ $(readlink -f "$l") == "$f" ]] && links+=("${l##*/}")
  done < <(find "$(dirname "$f")" -maxdepth 1 -type l -print0)
  for l in "${links[@]}"; do rm -f "$(dirname "$f")/$l"; done
  sum=$(sha256sum "$f" | cut -d' ' -f1)
  xz -T0 -6 "$f"
  echo "${f#"$dir"/}.xz $sum ${links[*]}" >>"$dir/INFLATE"
  say "compressed ${f#"$dir"/} (links: ${links[*]:-none})"
done < <(find "$dir/usr/lib" -type f -size +8M -name '*.so*' -print0)

kib=$(du -sk "$dir" | cut -f1)
say "packages:"
sed 's/^/  /' "$dir/MANIFEST"
say "needs from the image: $(tr '\n' ' ' <"$dir/REQUIRES")"
printf 'gpu_bundle: %s: %.1f MiB (limit %s MiB)\n' "$dir" "$(awk -v k="$kib" 'BEGIN { print k / 1024 }')" "$max_mib"
((kib <= max_mib * 1024)) || die "the bundle is larger than $max_mib MiB"
