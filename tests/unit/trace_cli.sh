#!/usr/bin/env bash
# trace_cli.sh — what train --trace says when it cannot do what was asked (one process, no cluster):
# - --trace naming a regular file: exit 2 with one error naming it (not a second one about the
#   trace it then failed to write), and nothing written;
# - --trace-steps beyond the job's steps: a warning at the start that the trace will hold no step,
#   and report --trace says why its merge has no span (the window against the step the job was at);
# - a window that runs past the job's last step: a warning naming the steps that are traced.
#   trace_cli.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$1
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/tr" --classes 4 --images 128 --size 16 --shards 1 >/dev/null || fail "convert synth"
base=(train --data "$w/tr" --arch resnet8 --size 16 --batch-per-rank 32 --threads 1 --loader-threads 1 --steps 4)

touch "$w/afile"
"$m" "${base[@]}" --out "$w/a" --trace "$w/afile" >"$w/a.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--trace .*afile is not a directory" "$w/a.log" && [ "$(grep -c 'error: ' "$w/a.log")" -eq 1 ]; then
  ok "--trace a regular file: exit 2, one error"
else
  bad "--trace a regular file: exit $rc, $(grep -c 'error: ' "$w/a.log") errors:"; cat "$w/a.log"
fi
[ -s "$w/afile" ] && bad "--trace a regular file: something was written into it"

"$m" "${base[@]}" --out "$w/b" --trace "$w/tb" --trace-steps 100:102 >"$w/b.log" 2>&1 || { bad "a window past the run: exit $?"; cat "$w/b.log"; }
if grep -q "warning: .*--trace-steps 100:102: this job trains steps 1 to 4, none of them in the window" "$w/b.log"; then
  ok "a window past the run: said at the start"
else bad "a window past the run: not said"; cat "$w/b.log"; fi
"$m" report --trace "$w/tb" --out "$w/rb" >"$w/rb.log" 2>&1 || { bad "report of an empty trace: exit $?"; cat "$w/rb.log"; }
if grep -q "no span in any file: the window was steps 100 to 102, and rank 0's job was at step 4" "$w/rb.log"; then
  ok "report --trace says why no span was merged"
else bad "report --trace of an empty window: no reason"; cat "$w/rb.log"; fi

"$m" "${base[@]}" --out "$w/c" --trace "$w/tc" --trace-steps 3:9 >"$w/c.log" 2>&1 || { bad "a window that runs past: exit $?"; cat "$w/c.log"; }
if grep -q "warning: .*--trace-steps 3:9: this job trains steps 1 to 4: steps 3 to 4 are traced" "$w/c.log"; then
  ok "a window that runs past the last step: the steps traced said"
else bad "a window that runs past: not said"; cat "$w/c.log"; fi
finish trace_cli "$fail"
