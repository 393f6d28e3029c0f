#!/usr/bin/env bash
# install.sh — what `cmake --install` puts under a prefix, and that it works from there:
#  - bin/mntrain, the README (and the folder READMEs it links to), the user-facing job templates (*.sbatch, scaling_sweep.sh), both
#    modulefiles, and in CUDA builds the CUDA module lib/mntrain/mntrain-cuda.so, all listed in
#    install_manifest.txt; not the developer tools (quickstart.sh, tools/local-cluster.sh, tools/install-deps.sh);
#  - the binary links no CUDA library (cudart, cuDNN, cuBLAS, NCCL: readelf NEEDED and ldd); the
#    module links them;
#  - the RUNPATH of the binary and of the module names the directory of every library each needs
#    outside the system's default directories, so they run with no LD_LIBRARY_PATH and without
#    ld.so.cache;
#  - the templates find the installed binary when mntrain is not on PATH (sbatch --export=NONE),
#    and the source-tree templates say what to do instead;
#  - DESTDIR stages the files but they name the final prefix;
#  - MNT_MODULEFILE_DIR / MNT_MODULEFILE_TCL_DIR / MNT_MODULE_DEPS / MNT_URL (a side build dir
#    configured with them, installing only the modulefiles component).
# Loading the modulefiles with Lmod and Environment Modules: tests/unit/modules.sh.
#   install.sh BUILD_DIR
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail=0

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; bad "cmake --install"; exit 1; }
version=$("$build/mntrain" --version | awk '{print $2; exit}')
cuda=0
"$build/mntrain" --version | head -n1 | grep -q 'CUDA parts: yes' && cuda=1
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
module=${libdir:-lib}/mntrain/mntrain-cuda.so

# ---- what is installed, and install_manifest.txt lists exactly that --------------------------
tdir=share/mntrain/job_templates
want=(bin/mntrain share/doc/mntrain/README.md "modulefiles/mntrain/$version.lua" "modulefiles-tcl/mntrain/$version")
for d in io/ckpt io/data io/rundir job_templates tests benchmarks; do # README.md's links, at the same paths
  want+=("share/doc/mntrain/$d/README.md")
done
[ $cuda -eq 1 ] && want+=("$module")
[ $cuda -eq 0 ] && [ -e "$prefix/$module" ] && bad "a build without the CUDA parts installed $module"
scripts=()
for t in "$src"/job_templates/*.sbatch "$src/job_templates/scaling_sweep.sh"; do
  [ -e "$t" ] && scripts+=("$tdir/${t##*/}")
done
for f in "${want[@]}" "${scripts[@]}"; do
  [ -f "$prefix/$f" ] || bad "$f is not installed"
done
for f in "${scripts[@]}"; do
  [ -x "$prefix/$f" ] || bad "$f is not executable"
done
for f in quickstart.sh tools/local-cluster.sh tools/install-deps.sh local-cluster.sh install-deps.sh tools; do
  [ ! -e "$prefix/$tdir/$f" ] || bad "developer tool $f is installed"
done
(cd "$prefix" && find . -type f | sed "s|^\.|$prefix|" | sort) >"$work/found"
sort "$build/install_manifest.txt" >"$work/manifest"
diff "$work/manifest" "$work/found" >"$work/manifest.diff" ||
  { bad "install_manifest.txt (<) differs from the files under the prefix (>):"; cat "$work/manifest.diff"; }

# ---- no CUDA library in the binary; the module has them -----------------------------------------
bin=$prefix/bin/mntrain
cudalibs='lib(cudart|cudnn|cublas|cublasLt|nccl)\.so'
if readelf -d "$bin" | grep '(NEEDED)' | grep -E "$cudalibs"; then bad "the installed binary links a CUDA library (above)"; fi
if ldd "$bin" | grep -E "$cudalibs"; then bad "ldd of the installed binary lists a CUDA library (above)"; fi
if [ $cuda -eq 1 ]; then
  readelf -d "$prefix/$module" | grep '(NEEDED)' | grep -qE 'libcudart\.so' || bad "$module does not link cudart"
fi

# ---- RUNPATH: every needed library is found without ld.so.cache and LD_LIBRARY_PATH ----------
sysdirs=(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib)
objs=("$bin")
[ $cuda -eq 1 ] && objs+=("$prefix/$module")
for obj in "${objs[@]}"; do
  runpath=$(readelf -d "$obj" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  echo "RUNPATH of the installed ${obj#"$prefix"/}: ${runpath:-none}"
  IFS=: read -r -a rdirs <<<"$runpath"
  for lib in $(readelf -d "$obj" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    where=""
    for d in "${rdirs[@]}" "${sysdirs[@]}"; do
      if [ -n "$d" ] && [ -e "$d/$lib" ]; then where=$d; break; fi
    done
    if [ -z "$where" ]; then
      bad "$lib of ${obj##*/} (here: $(ldd "$obj" | awk -v l="$lib" '$1 == l {print $3}')) is in no RUNPATH directory nor a system one"
    fi
  done
done
# the same as a node without this machine's ld.so.conf entries (e.g. /usr/local/cuda/lib64) would
ldso=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
env -u LD_LIBRARY_PATH "$ldso" --inhibit-cache "$bin" --version >"$work/v" 2>&1 ||
  { bad "the installed binary does not run without ld.so.cache:"; cat "$work/v"; }
env -u LD_LIBRARY_PATH "$bin" --version | grep -q "^mntrain $version" || bad "installed mntrain does not run"

# ---- the templates find the installed binary by themselves -----------------------------------
mkdir -p "$work/stub" "$work/onpath"
# a stand-in srun that prints the program it would start
# shellcheck disable=SC2016
printf '#!/bin/sh\nfor a; do case $a in -*) ;; *) echo "srun-runs $a"; exit 0;; esac; done\n' >"$work/stub/srun"
printf '#!/bin/sh\necho fake\n' >"$work/onpath/mntrain"
chmod +x "$work/stub/srun" "$work/onpath/mntrain"
for f in "$prefix/$tdir"/*; do
  ! grep -qF '@MNTRAIN_INSTALLED_BIN@' "$f" || bad "installed ${f##*/} still has the @MNTRAIN_INSTALLED_BIN@ token"
done
args=(--data "$work/no-data")  # the training templates want a data set; the stand-in srun ignores it
for t in $(cd "$src/job_templates" && ls -- *.sbatch); do
  # sbatch --export=NONE: no mntrain on PATH, no MNTRAIN
  out=$(cd "$work" && env -u MNTRAIN PATH="$work/stub:/usr/bin:/bin" bash "$prefix/$tdir/$t" "${args[@]}" 2>&1)
  grep -qxF "srun-runs $bin" <<<"$out" || bad "installed $t without mntrain on PATH does not run $bin: $out"
  # mntrain on PATH (module load mntrain) comes first, MNTRAIN before both
  out=$(cd "$work" && env -u MNTRAIN PATH="$work/stub:$work/onpath:/usr/bin:/bin" bash "$prefix/$tdir/$t" "${args[@]}" 2>&1)
  grep -qxF "srun-runs $work/onpath/mntrain" <<<"$out" || bad "installed $t does not prefer mntrain on PATH: $out"
  out=$(cd "$work" && MNTRAIN=$build/mntrain PATH="$work/stub:$work/onpath:/usr/bin:/bin" bash "$prefix/$tdir/$t" "${args[@]}" 2>&1)
  grep -qxF "srun-runs $build/mntrain" <<<"$out" || bad "installed $t does not run \$MNTRAIN: $out"
  # the source tree's template has no recorded path: it says what to do
  out=$(cd "$work" && env -u MNTRAIN PATH="$work/stub:/usr/bin:/bin" bash "$src/job_templates/$t" "${args[@]}" 2>&1)
  rc=$?
  { [ $rc -eq 2 ] && grep -q "module load mntrain" <<<"$out"; } ||
    bad "source-tree $t without mntrain: exit $rc, not 2 with a hint: $out"
done
rm -rf "$work/stub" "$work/onpath"

# ---- the modulefiles name the prefix -----------------------------------------------------------
lua=$prefix/modulefiles/mntrain/$version.lua
tcl=$prefix/modulefiles-tcl/mntrain/$version
grep -qF "local prefix = \"$prefix\"" "$lua" || bad "Lmod modulefile does not point at $prefix"
grep -qF "prepend_path(\"PATH\", \"$prefix/bin\")" "$lua" || bad "Lmod modulefile does not prepend $prefix/bin"
if ! grep -qF "set prefix {$prefix}" "$tcl" || ! head -n1 "$tcl" | grep -q '^#%Module'; then
  bad "Tcl modulefile missing its #%Module line or not pointing at $prefix"
fi
grep -qF "file://$prefix/share/doc/mntrain/README.md" "$lua" || bad "default URL is not the installed README"

# ---- DESTDIR: staged under it, naming the final prefix ---------------------------------------
final=/opt/mntrain-install-test-$$
DESTDIR=$work/dest cmake --install "$build" --prefix "$final" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; bad "DESTDIR=... cmake --install"; }
[ -x "$work/dest$final/bin/mntrain" ] || bad "DESTDIR install has no $work/dest$final/bin/mntrain"
[ ! -e "$final" ] || bad "DESTDIR install wrote to $final"
grep -qF "local prefix = \"$final\"" "$work/dest$final/modulefiles/mntrain/$version.lua" ||
  bad "DESTDIR install: Lmod modulefile does not name $final"
grep -qF "'$final/bin/mntrain'" "$work/dest$final/$tdir/train.sbatch" ||
  bad "DESTDIR install: train.sbatch does not record $final/bin/mntrain"

# ---- the options, in a side build dir (configure only; the modulefiles component) ---------------
side=$work/side
central=$work/central
if cmake -S "$src" -B "$side" -DMNT_CUDA=OFF -DBUILD_TESTING=OFF -DMNT_MODULEFILE_DIR="$central" \
     -DMNT_MODULEFILE_TCL_DIR= "-DMNT_MODULE_DEPS=site-cuda/13.0;site-nccl" -DMNT_URL=https://hpc.example.org/mntrain \
     >"$work/side.log" 2>&1; then
  p2=$work/p2
  cmake --install "$side" --component modulefiles --prefix "$p2" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; bad "cmake --install --component modulefiles"; }
  f=$central/mntrain/$version.lua
  [ -f "$f" ] || bad "MNT_MODULEFILE_DIR=$central: no $f"
  [ ! -e "$p2/modulefiles-tcl" ] || bad "MNT_MODULEFILE_TCL_DIR empty: a Tcl modulefile was installed"
  grep -qF "local prefix = \"$p2\"" "$f" || bad "central modulefile does not name the prefix $p2"
  if ! grep -qxF 'depends_on("site-cuda/13.0")' "$f" || ! grep -qxF 'depends_on("site-nccl")' "$f"; then
    bad "MNT_MODULE_DEPS: no depends_on lines in $f"
  fi
  grep -qF 'whatis("URL: https://hpc.example.org/mntrain")' "$f" || bad "MNT_URL not in $f"
  grep -qxF "$f" "$side/install_manifest_modulefiles.txt" || bad "$f not in install_manifest_modulefiles.txt"
  # defaults: no dependencies
  grep -q 'depends_on\|prereq' "$prefix/modulefiles/mntrain/$version.lua" "$tcl" && bad "default modulefiles have dependencies"
else
  cat "$work/side.log"; bad "configuring a side build with the modulefile options"
fi

[ $fail -eq 0 ] && echo "install: ok"
exit $fail
