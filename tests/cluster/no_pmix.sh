#!/usr/bin/env bash
# no_pmix.sh — a multi-task step without PMIx (srun --mpi=none, or a site whose MpiDefault is not
# pmix) must not run N independent single-rank trainings into the same --out: every task fails
# at once with exit 2 and a message that says to use --mpi=pmix, and no output is written. A
# one-task step without PMIx still runs (as rank 0 of 1).   no_pmix.sh path/to/mntrain
set -u
m=$1
command -v srun >/dev/null 2>&1 || { echo "SKIP: srun not found"; exit 77; }
scontrol ping >/dev/null 2>&1 || { echo "SKIP: no Slurm cluster answers (job_templates/tools/local-cluster.sh up)"; exit 77; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$m" convert synth "$w/data" --classes 4 --images 64 --size 16 --shards 1 >/dev/null || exit 1
train=(train --data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --steps 2 --threads 1)
fail=0
timeout 120 srun --mpi=none -N1 -n2 --job-name=mntrain-test "$m" "${train[@]}" --out "$w/two" >"$w/two.log" 2>&1
rc=$?
cat "$w/two.log"
if [ $rc -ne 2 ] || [ "$(grep -c 'srun --mpi=pmix' "$w/two.log")" -ne 2 ] || [ -e "$w/two/config.json" ]; then
  echo "FAIL: srun --mpi=none -n 2: exit $rc (want 2 from both tasks, each saying --mpi=pmix, and no output)"
  fail=1
fi
timeout 120 srun --mpi=none -N1 -n1 --job-name=mntrain-test "$m" "${train[@]}" --out "$w/one" >"$w/one.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -e "$w/one/summary.json" ]; then
  echo "FAIL: srun --mpi=none -n 1 should train as one process: exit $rc"
  cat "$w/one.log"
  fail=1
fi
[ $fail -eq 0 ] && echo "no_pmix: ok"
exit $fail
