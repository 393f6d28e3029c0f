#!/usr/bin/env bash
# modules.sh — the installed modulefiles with the real module tools:
#   Lmod (Debian's lmod, installed by install-deps.sh) loading PREFIX/modulefiles (Lua), and
#   Environment Modules 5.2 loading PREFIX/modulefiles-tcl (Tcl) through the modulecmd.tcl of the
#   Debian package, unpacked into BUILD_DIR/modules-test (apt-get download + dpkg -x: the two
#   packages conflict, so it is not installed).
# For each: `module use DIR; module load mntrain` puts the installed mntrain first on PATH (before
# another mntrain already there) and it prints the built version; `module avail` lists
# mntrain/VERSION; whatis and help carry the URL, category and keywords; loading another mntrain
# version is refused (Environment Modules: conflict) or swaps (Lmod's one-name rule), never two at
# once; `module unload mntrain` gives back PATH exactly and unsets MNTRAIN_ROOT. Exit 77 (skipped)
# when a tool cannot be had here (what passed is still checked: a failure is a failure).
#   modules.sh BUILD_DIR
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HOME=$work/home  # Lmod's user cache and collections stay in here
mkdir -p "$HOME"
# PATH without repeated entries: Lmod drops repeats when it edits PATH, so "unload gives back PATH
# exactly" only holds for a PATH that has none
PATH=$(printf '%s' "$PATH" | awk -v RS=: '!seen[$0]++' | paste -sd:)
# another mntrain already on PATH: the module's must come first
mkdir -p "$work/decoy"
printf '#!/bin/sh\necho "mntrain decoy"\n' >"$work/decoy/mntrain"
chmod +x "$work/decoy/mntrain"
PATH=$work/decoy:$PATH
fail=0
skipped=()

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; echo "FAIL: cmake --install"; exit 1; }
version=$("$build/mntrain" --version | awk '{print $2; exit}')
[ -n "$version" ] || { echo "FAIL: $build/mntrain --version"; exit 1; }

# check_tool NAME DIR EXT: the module function is defined; DIR holds mntrain/VERSION[EXT]
check_tool() {
  local name=$1 dir=$2 ext=$3 saved_path=$PATH out
  unset MNTRAIN_ROOT MNTRAIN_TEMPLATES
  module use "$dir" || bad "$name: module use $dir"
  out=$(module avail 2>&1)
  grep -q "mntrain/$version" <<<"$out" || bad "$name: module avail does not list mntrain/$version: $out"
  module load mntrain || bad "$name: module load mntrain"
  [ "$(command -v mntrain)" = "$prefix/bin/mntrain" ] || bad "$name: mntrain on PATH is '$(command -v mntrain)', not $prefix/bin/mntrain"
  out=$(mntrain --version 2>&1)
  grep -q "^mntrain $version " <<<"$out" || bad "$name: mntrain --version after module load: $out"
  [ "${MNTRAIN_ROOT:-}" = "$prefix" ] || bad "$name: MNTRAIN_ROOT='${MNTRAIN_ROOT:-}', not $prefix"
  [ -x "${MNTRAIN_TEMPLATES:-/nonexistent}/train.sbatch" ] || bad "$name: no train.sbatch in MNTRAIN_TEMPLATES='${MNTRAIN_TEMPLATES:-}'"
  out=$(module whatis mntrain 2>&1)
  for k in "URL: file://$prefix/share/doc/mntrain/README.md" "Category: tools, machine learning" "Keywords: " \
           "Version: $version"; do
    grep -qF "$k" <<<"$out" || bad "$name: module whatis lacks '$k': $out"
  done
  out=$(module help mntrain 2>&1)
  grep -qF "Documentation: file://$prefix/share/doc/mntrain/README.md" <<<"$out" || bad "$name: module help lacks the URL: $out"
  # another version of mntrain: never two loaded at once
  mkdir -p "$work/other-$name/mntrain"
  sed "s|$prefix|$work/other-prefix|g" "$dir/mntrain/$version$ext" >"$work/other-$name/mntrain/99.0$ext"
  module use "$work/other-$name" 2>/dev/null  # Lmod reloads a newer mntrain already here
  if [ "$name" = lmod ]; then
    module load mntrain/99.0 >/dev/null 2>&1  # Lmod swaps a loaded name for its other version
  elif out=$(module load mntrain/99.0 2>&1); then
    bad "$name: mntrain/99.0 loaded beside mntrain/$version"
  else
    grep -qi conflict <<<"$out" || bad "$name: mntrain/99.0 refused, but not for the conflict: $out"
  fi
  out=$(module -t list 2>&1)
  [ "$(grep -c '^mntrain/' <<<"$out")" = 1 ] || bad "$name: not exactly one mntrain loaded: $out"
  module unload mntrain || bad "$name: module unload mntrain"
  module unuse "$work/other-$name"
  [ "$PATH" = "$saved_path" ] || bad "$name: PATH after module unload is '$PATH', not '$saved_path'"
  [ -z "${MNTRAIN_ROOT:-}" ] || bad "$name: MNTRAIN_ROOT still set after module unload"
  module unuse "$dir"
}

# ---- Lmod: the Lua modulefile ---------------------------------------------------------------
lmod_init=/usr/share/lmod/lmod/init/bash
if [ -r "$lmod_init" ]; then
  (
    unset MODULEPATH LOADEDMODULES _LMFILES_ MODULESHOME
    # shellcheck disable=SC1090
    . "$lmod_init"
    check_tool lmod "$prefix/modulefiles" .lua
    exit $fail
  ) || fail=1
else
  skipped+=("Lmod: no $lmod_init (apt-get install lmod; job_templates/tools/install-deps.sh does)")
fi

# ---- Environment Modules 5.2: the Tcl modulefile through the package's modulecmd.tcl -----------
em=$build/modules-test/environment-modules
modcmd=$em/usr/lib/x86_64-linux-gnu/modulecmd.tcl
if [ ! -f "$modcmd" ]; then
  mkdir -p "$build/modules-test/deb"
  rm -rf "$em"
  if (cd "$build/modules-test/deb" && apt-get download environment-modules) >"$work/apt.log" 2>&1 &&
     dpkg -x "$(find "$build/modules-test/deb" -name 'environment-modules_*.deb' | sort | tail -n1)" "$em" 2>>"$work/apt.log"; then
    :
  else
    rm -rf "$em"
    skipped+=("Environment Modules: apt-get download environment-modules failed (no apt lists or no network?): $(tail -n2 "$work/apt.log" | tr '\n' ' ')")
  fi
fi
if [ -f "$modcmd" ] && ! command -v tclsh >/dev/null; then
  skipped+=("Environment Modules: no tclsh (apt-get install tcl)")
elif [ -f "$modcmd" ]; then
  (
    unset MODULEPATH LOADEDMODULES _LMFILES_ __MODULES_LMALTNAME __MODULES_LMCONFLICT
    export MODULESHOME=$em/usr/share/modules
    module() { eval "$(tclsh "$modcmd" bash "$@")"; }
    out=$(tclsh "$modcmd" bash --version 2>&1 >/dev/null)
    echo "Environment Modules: $out"
    check_tool envmodules "$prefix/modulefiles-tcl" ""
    exit $fail
  ) || fail=1
fi

for s in "${skipped[@]}"; do echo "SKIP: $s"; done
[ $fail -eq 0 ] || exit 1
[ ${#skipped[@]} -eq 0 ] || exit 77
echo "modules: ok (Lmod and Environment Modules)"
