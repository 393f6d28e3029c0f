#!/usr/bin/env bash
# install.sh — `cmake --install` puts the binary, the job templates and both modulefiles under the
# prefix, and the modulefiles point at that prefix.
#   install.sh BUILD_DIR
set -u
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail=0
cmake --install "$build" --prefix "$prefix" >/dev/null || { echo "FAIL: cmake --install"; exit 1; }
for f in bin/mntrain share/mntrain/job_templates/local-cluster.sh share/mntrain/job_templates/allreduce.sbatch \
         share/mntrain/job_templates/quickstart.sh; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f is not installed"; fail=1; }
done
"$prefix/bin/mntrain" --version | grep -q '^mntrain ' || { echo "FAIL: installed mntrain does not run"; fail=1; }
lua=$(ls "$prefix"/modulefiles/mntrain/*.lua 2>/dev/null)
tcl=$(ls "$prefix"/modulefiles-tcl/mntrain/* 2>/dev/null)
if [ -z "$lua" ] || ! grep -qF "local prefix = \"$prefix\"" "$lua"; then
  echo "FAIL: Lmod modulefile missing or not pointing at $prefix"; fail=1
fi
if [ -z "$tcl" ] || ! grep -qF "set prefix \"$prefix\"" "$tcl" || ! head -n1 "$tcl" | grep -q '^#%Module'; then
  echo "FAIL: Tcl modulefile missing or not pointing at $prefix"; fail=1
fi
if command -v tclsh >/dev/null && [ -n "$tcl" ]; then
  # the Tcl modulefile must at least parse: run it with stub module commands
  # shellcheck disable=SC2016
  printf 'proc module-whatis args {}\nproc prepend-path {v p} { puts "$v=$p" }\nproc setenv {v p} { puts "$v=$p" }\nsource {%s}\n' "$tcl" |
    tclsh | grep -qF "PATH=$prefix/bin" || { echo "FAIL: Tcl modulefile does not prepend $prefix/bin to PATH"; fail=1; }
fi
[ $fail -eq 0 ] && echo "install: ok ($prefix)"
exit $fail
