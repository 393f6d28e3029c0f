#!/usr/bin/env bash
# cli.sh — the mntrain command line: the exit-code contract (0 ok, 1 failure at run time, 2 usage)
# for every subcommand; --help anywhere prints help and does nothing else; errors name the
# offending flag or environment variable; numeric flags are checked (finite, in range) before
# anything is written; the PMIx notice only where a job starts; the environment variables that
# `mntrain --help` documents are the ones README documents.
#   cli.sh path/to/mntrain
set -u
m=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
fail=0
d=$(mktemp -d) # datasets
w=$(mktemp -d) # the working directory, where nothing may appear unless asked for
trap 'rm -rf "$w" "$d"' EXIT
cd "$w" || exit 1
expect() { # expect CODE PATTERN -- ARGS...   (PATTERN: an extended regex the output must match)
  local code=$1 pat=$2
  shift 3
  local out rc
  out=$("$m" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: mntrain $*: exit $rc (want $code), output:"
    printf '    %s\n' "$out"
    fail=1
  fi
}
absent() { # absent PATTERN -- ARGS...: the output must not match
  local pat=$1
  shift 2
  local out
  out=$("$m" "$@" 2>&1)
  if grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: mntrain $*: the output must not match '$pat':"
    printf '    %s\n' "$out"
    fail=1
  fi
}
nothing_here() { # nothing_here WHAT: the working directory is still empty
  if [ -n "$(ls -A)" ]; then echo "FAIL: $1 wrote: $(ls -A)"; fail=1; rm -rf ./*; fi
}

data="$d/data"
"$m" convert synth "$data" --classes 4 --images 64 --size 16 --shards 2 >/dev/null 2>&1
[ -f "$data/index.json" ] || { echo "FAIL: could not make a dataset"; exit 1; }

# ---- the top level
expect 0 'usage: mntrain <command>' -- --help
expect 0 'exit codes' -- --help
expect 2 'usage: mntrain <command>' --
expect 0 '^mntrain [0-9]+\.[0-9]+\.[0-9]+' -- --version
# what runs on this node: oneDNN's ISA (capped by ONEDNN_MAX_CPU_ISA) and mntrain's own loops' variant
expect 0 '^cpu isa: (avx2|avx2_vnni|avx512_core[a-z0-9_]*|avx|sse41) \(oneDNN' -- --version
expect 0 '^simd: (sse2|avx2|avx512) ' -- --version
# the libraries as they report themselves at run time (sites mix releases: Debian 12's or 13's, their own)
expect 0 '^libraries: oneDNN [23]\.[0-9]+\.[0-9]+( \(built with [0-9.]+\))?, HDF5 1\.1[0-9]\.[0-9]+, (Open)?PMIx [0-9]' -- --version
out=$(ONEDNN_MAX_CPU_ISA=AVX2 MNT_SIMD=sse2 "$m" --version 2>&1)
if ! grep -q '^cpu isa: avx2 ' <<<"$out" || ! grep -q '^simd: sse2 ' <<<"$out"; then
  echo "FAIL: --version under ONEDNN_MAX_CPU_ISA=AVX2 MNT_SIMD=sse2 should say avx2 and sse2: $out"; fail=1
fi
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 0 'allreduce' -- bench --help
expect 2 'unknown subcommand' -- bench nope

# ---- --help anywhere: help, exit 0, nothing done (not even with bad values before it)
t="--data $data --arch resnet8 --size 16 --batch-per-rank 8 --steps 2"
# shellcheck disable=SC2086
expect 0 'usage: srun --mpi=pmix mntrain train' -- train $t --steps -5 --help
# shellcheck disable=SC2086
expect 0 'usage: srun --mpi=pmix mntrain train' -- train -h $t
nothing_here "train ... --help"
expect 0 'usage: mntrain convert idx IMAGES LABELS OUT' -- convert idx A B C --help
expect 0 'usage: mntrain convert idx' -- convert idx --help A B C
nothing_here "convert idx A B C --help"
expect 0 'usage: mntrain convert synth' -- convert synth out --classes 2 --images 8 --size 8 --help
nothing_here "convert synth ... --help"
expect 0 'usage: mntrain convert imagenet' -- convert imagenet src out --size 8 --help
expect 0 'usage: mntrain convert imagenet' -- convert --help
expect 0 'usage: mntrain inspect' -- inspect "$data" --verify --help
expect 0 'usage: srun --mpi=pmix mntrain info' -- info --help
expect 0 'usage: srun --mpi=pmix .*bench allreduce' -- bench allreduce -b lots --help
expect 0 'usage: mntrain bench step' -- bench step --arch resnet50 --batch 999999 --help
expect 0 'usage: mntrain bench loader' -- bench loader --help --data "$data"
nothing_here "bench ... --help"

# ---- exit codes per subcommand: 0 success, 2 usage, 1 failure at run time
broken="$d/broken"
cp -r "$data" "$broken"
truncate -s 3000 "$broken/shard-00001-of-00002.h5" # a damaged dataset: failure at run time
# train
# shellcheck disable=SC2086
expect 0 'mntrain train: done' -- train $t --threads 1 --out run1
# shellcheck disable=SC2086
expect 2 "'--out run1' holds an earlier run|--out run1 holds an earlier run .*--force" -- train $t --out run1
# shellcheck disable=SC2086
expect 0 'mntrain train: done' -- train $t --threads 1 --out run1 --force
# --timestamps: progress lines start with the UTC time; every metrics.jsonl line has it as "time"
iso='20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{3}Z'
# shellcheck disable=SC2086
expect 0 "^$iso epoch [0-9.]+ step 1/2 loss" -- train $t --threads 1 --out run1 --force --log-every 1 --timestamps
if [ ! -s run1/metrics.jsonl ] || grep -qvE "^\{\"time\":\"$iso\"," run1/metrics.jsonl; then
  echo "FAIL: metrics.jsonl lines without a \"time\": $(head -c 300 run1/metrics.jsonl)"
  fail=1
fi
expect 2 '--steps -5: out of range' -- train --data "$data" --steps -5
expect 2 "--lr: 'nan' is not a valid finite number" -- train --data "$data" --lr nan --out lr-nan
expect 2 "--momentum: 'inf' is not a valid finite number" -- train --data "$data" --momentum inf --out m-inf
[ -e lr-nan ] || [ -e m-inf ] && { echo "FAIL: a refused --lr/--momentum left an output directory"; fail=1; }
# paths config.json records must be UTF-8 (JSON text): a usage error naming the flag, nothing written
nonutf=$(printf 'run-\xe9')
expect 2 '--out: the path is not UTF-8' -- train --data "$data" --arch resnet8 --size 16 --out "$nonutf"
expect 2 '--data: the path is not UTF-8' -- train --data "$data/$nonutf" --out r-nonutf
expect 2 '--ckpt-dir: the path is not UTF-8' -- train --data "$data" --out r-nonutf --ckpt-dir "$nonutf"
[ -e "$nonutf" ] || [ -e r-nonutf ] && { echo "FAIL: a path that is not UTF-8 left an output directory"; fail=1; }
expect 2 '--batch-per-rank 0: out of range' -- train --data "$data" --batch-per-rank 0
expect 2 '--val-crop 1.5: out of range' -- train --data "$data" --val-crop 1.5
expect 2 '--pad-crop must be smaller than --size' -- train --data "$data" --size 16 --pad-crop 16
expect 2 '--data DIR is required' -- train --steps 3
expect 2 'index.json: No such file' -- train --data "$w/no-such-dataset" --out r2
expect 1 'shard-00001-of-00002.h5' -- train --data "$broken" --arch resnet8 --size 16 --batch-per-rank 8 --steps 2 --out r3
# train with checkpoints: preempted (3), resumed, inspected; checkpoint flags checked before anything runs
# shellcheck disable=SC2086
expect 3 'stopped after step 2/4 \(--stop-after\): checkpoint run2/ckpt/step-00000002' -- train $t --steps 4 --threads 1 --out run2 --stop-after 2
expect 0 'step-00000002: ok' -- inspect run2/ckpt
expect 0 'checkpoint run2/ckpt/step-00000002: step 2 of 4' -- inspect run2/ckpt/step-00000002/state.h5
# shellcheck disable=SC2086
expect 0 'resuming from run2/ckpt/step-00000002' -- train $t --steps 4 --threads 1 --out run2 --ckpt-dir run2/ckpt
# shellcheck disable=SC2086
expect 0 'the run is complete \(step 4 of 4\): nothing to train' -- train $t --steps 4 --threads 1 --out run2 --ckpt-dir run2/ckpt
[ -f run2/summary.json ] || { echo "FAIL: rerunning a finished run lost its summary.json"; fail=1; }
[ -f run2/ckpt/step-00000004/MANIFEST.json ] || { echo "FAIL: rerunning a finished run lost its checkpoint"; fail=1; }
# shellcheck disable=SC2086
expect 2 'holds checkpoints of an earlier run' -- train $t --steps 4 --out run3 --ckpt-dir run2/ckpt --resume none
# shellcheck disable=SC2086
expect 2 'run was trained with steps|its steps is 4, this command.s is 6' -- train $t --steps 6 --out run2 --ckpt-dir run2/ckpt
expect 2 '--ckpt-stripe 1000: out of range \(must be from 4K to 1G\)' -- train --data "$data" --ckpt-stripe 1000
expect 2 '--ckpt-stripe 12K: a power of two' -- train --data "$data" --ckpt-stripe 12K
expect 2 '--stripe 12K: a power of two' -- bench ckpt --dir . --stripe 12K
# a path option too long for the names mntrain adds to it: refused at parsing, naming the flag
long=/tmp/$(printf 'd%.0s' $(seq 4000))
expect 2 '--out /tmp/d+\.\.\.: a path of 4005 bytes, at most 3840 are taken' -- train --data "$data" --out "$long"
expect 2 'OUT /tmp/d+\.\.\.: a path of 4005 bytes' -- convert synth "$long" --size 8
expect 2 '--force starts the run over' -- train --data "$data" --force --resume auto
expect 2 'no-such-ckpt: No such file or directory' -- train --data "$data" --arch resnet8 --size 16 --out run4 --resume "$w/no-such-ckpt"
expect 0 'checkpoint: write .* MB/s .* of dd' -- bench ckpt --dir . --mb 2 --repeat 1
expect 2 '--dir D is required' -- bench ckpt
# the NCCL communicator without a GPU: a clear refusal, not a hang or a crash
# shellcheck disable=SC2086
if "$m" --version | grep -q "CUDA parts: yes" && ! command -v nvidia-smi >/dev/null 2>&1; then
  expect 2 'no GPU visible to rank 0' -- bench allreduce --comm nccl -e 1K
  expect 2 'no GPU visible to rank 0' -- train $t --out run5 --comm nccl
  expect 2 'no GPU visible to rank 0' -- train $t --out run5 --device cuda
  expect 2 'no CUDA device visible' -- bench step --device cuda --arch resnet8 --size 16 --batch 2
fi
# shellcheck disable=SC2086
expect 2 'GPU buffers need the nccl communicator' -- train $t --out run5 --device cuda --comm cpu
# bf16 on a CPU below AVX-512 (oneDNN has no bf16 kernels there): refused, naming the ISA; the same
# with --precision auto trains in fp32
# shellcheck disable=SC2086
ONEDNN_MAX_CPU_ISA=AVX2 expect 2 '--precision bf16 on the CPU needs AVX-512 .*avx2' -- train $t --out run5 --precision bf16
ONEDNN_MAX_CPU_ISA=AVX2 expect 2 '--precision bf16 on the CPU needs AVX-512 .*avx2' -- bench step --precision bf16 --arch resnet8 --size 16 --batch 2
ONEDNN_MAX_CPU_ISA=AVX2 expect 0 'cpu fp32, ' -- bench step --precision auto --arch resnet8 --size 16 --batch 2 --steps 1
expect 2 "--device: cpu, cuda or auto \('tpu' is none of them\)" -- train --data "$data" --device tpu
expect 2 "--arch: one of resnet8, resnet20, resnet18, resnet34, resnet50 or resnet101, not 'vgg'" -- train --data "$data" --arch vgg
expect 2 "--overlap: on, off or both \('maybe' is none of them\)" -- model --overlap maybe
expect 2 "--precision: fp32, bf16 or auto \\('fp16' is none of them\\)" -- bench step --precision fp16
# --cuda-graph on the CPU: the step runs as a graph would hold it, with the same losses as off; not with --profile
g_off=$("$m" bench step --arch resnet8 --size 16 --batch 4 --warmup 1 --steps 3 --cuda-graph off 2>&1 | awk '/^step /{print $NF}')
g_on=$("$m" bench step --arch resnet8 --size 16 --batch 4 --warmup 1 --steps 3 --cuda-graph on 2>&1 | awk '/^step /{print $NF}')
if [ -z "$g_on" ] || [ "$g_on" != "$g_off" ]; then
  echo "FAIL: bench step --cuda-graph on gives other losses than off: [$g_on] [$g_off]"
  fail=1
fi
expect 2 'not inside a --cuda-graph on step' -- bench step --arch resnet8 --size 16 --batch 2 --profile --cuda-graph on
# info
expect 0 'rank 0 of 1 .* \(no PMIx\)' -- info
expect 2 "unexpected argument 'extra'" -- info extra
# convert
expect 0 'convert: 8 samples' -- convert synth s1 --classes 2 --images 8 --size 8 --shards 1
expect 2 '--shards 0: out of range' -- convert synth s2 --classes 2 --images 8 --size 8 --shards 0
expect 2 '--classes is required' -- convert synth s2 --images 8 --size 8
expect 2 'missing OUT' -- convert idx a b
expect 2 "unexpected argument 'd'" -- convert idx a b c d
printf '\0\0\10\3\0\0\0\12\0\0\0\34\0\0\0\34' >trunc-images # an IDX header promising 10 images, and no pixels
printf '\0\0\10\1\0\0\0\12' >trunc-labels
expect 1 'trunc-images: truncated' -- convert idx trunc-images trunc-labels s3
expect 2 'trunc-images|No such file' -- convert idx no-such-file trunc-labels s4
# inspect
expect 0 'dataset .*: 64 samples, 4 classes' -- inspect "$data"
expect 0 'verify: 64 samples read and their checksums checked, 0 bad' -- inspect "$data" --verify
expect 2 'missing PATH' -- inspect
expect 2 'No such file' -- inspect "$w/nothing-here"
expect 1 'shard-00001-of-00002.h5' -- inspect "$broken"
# bench step
expect 0 'resnet8 32 px batch 2 threads 1: [0-9.]+ img/s .*MB per image' -- bench step --arch resnet8 --size 32 --batch 2 --steps 1 --threads 1 --classes 10
expect 2 "unknown --arch 'resnet7'" -- bench step --arch resnet7
expect 2 'image size 16 is too small for resnet50' -- bench step --arch resnet50 --size 16 --batch 1
expect 2 '--classes 0: out of range' -- bench step --arch resnet8 --size 32 --classes 0
expect 2 '--batch 0: out of range' -- bench step --arch resnet8 --size 32 --batch 0
expect 2 "'x' is not a valid integer" -- bench step --batch x
expect 2 'needs about .* (GiB|TiB) of memory per rank, but this rank may use' -- bench step --arch resnet50 --size 224 --batch 100000
# bench loader
expect 0 'loader 16 px training threads 1' -- bench loader --data "$data" --size 16 --batch 8 --batches 2
expect 2 '--loader-threads 0: out of range' -- bench loader --data "$data" --loader-threads 0
# the old spelling (train's --threads are compute threads): still taken, with a warning naming the new one
expect 0 'warning: --threads is the old spelling of --loader-threads' -- bench loader --data "$data" --size 16 --batch 8 --batches 2 --threads 1
expect 2 '--data DIR is required' -- bench loader
expect 1 'shard-00001-of-00002.h5' -- bench loader --data "$broken" --size 16 --batch 8 --batches 2
# bench allreduce
expect 0 '# Avg bus bandwidth' -- bench allreduce -b 1K -e 4K -n 2 -w 1
expect 2 "unknown option '--bogus'" -- bench allreduce --bogus
expect 2 "-b: 'lots' is not a valid size" -- bench allreduce -b lots
expect 2 'bad value for --datatype' -- bench allreduce -d int8
expect 2 'bad value for -b/-e' -- bench allreduce -b 2M -e 1M
expect 2 'bad value for --topology' -- bench allreduce --topology ring
expect 2 '-f 1: out of range' -- bench allreduce -f 1
expect 1 'under --min-busbw' -- bench allreduce -b 1K -e 4K -n 2 -w 1 --min-busbw 1e5
# nccl-tests' layout: redop and root, out-of-place and in-place sets, nothing after the average
expect 0 '^ +1024 +128 +double +avg +-1( +[0-9.]+){3} +0( +[0-9.]+){3} +0$' -- bench allreduce -b 1K -e 1K -d double -o avg
expect 0 '^# Avg bus bandwidth    : [0-9][0-9.e+-]* $' -- bench allreduce -b 1K -e 4K -n 2 -w 1
expect 1 '^# Avg bus bandwidth    : [0-9][0-9.e+-]* FAILED$' -- bench allreduce -b 1K -e 4K -n 2 -w 1 --min-busbw 1e5

# ---- the environment: one parser; a bad value is an error naming the variable, for every command
for bad in MNT_COMM_TIMEOUT=abc MNT_COMM_TIMEOUT=0 MNT_LOG_LEVEL=loud MNT_SHM_FIFO_BYTES=3000 MNT_TCP_BUF=-1 \
           MNT_PROGRESS_INTERVAL=never; do
  name=${bad%%=*}
  out=$(env "$bad" "$m" info 2>&1)
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF "environment variable $name='${bad#*=}'" <<<"$out"; then
    echo "FAIL: $bad mntrain info: exit $rc (want 2 naming $name): $out"; fail=1
  fi
done
out=$(env MNT_COMM_TIMEOUT=abc "$m" convert synth s5 --classes 2 --images 8 --size 8 2>&1)
rc=$?
if [ $rc -ne 2 ] || [ -e s5 ]; then echo "FAIL: a bad variable must stop convert before it writes: $out"; fail=1; fi
env MNT_LOG_LEVEL=debug "$m" info >/dev/null 2>&1 || { echo "FAIL: MNT_LOG_LEVEL=debug refused"; fail=1; }
# the documented list: mntrain --help and README name the same variables
readme="$here/../../README.md"
help_vars=$("$m" --help | sed -n '/^environment:/,$p' | grep -oE '^  MNT_[A-Z_]+' | tr -d ' ' | sort)
# shellcheck disable=SC2016
readme_vars=$(awk '/^### Environment/{on=1; next} /^##/{on=0} on' "$readme" | grep -oE '^\| `MNT_[A-Z_]+`' |
  grep -oE 'MNT_[A-Z_]+' | sort) # its Environment section (other tables list CMake options)
if [ -z "$help_vars" ] || [ "$help_vars" != "$readme_vars" ]; then
  echo "FAIL: mntrain --help documents [${help_vars//$'\n'/ }], README [${readme_vars//$'\n'/ }]"; fail=1
fi
for v in $help_vars; do
  grep -q "\"$v\"" "$here/../../src/env.h" || { echo "FAIL: $v is documented but not in src/env.h (MNT_ENV_VARS)"; fail=1; }
done
if grep -rn 'getenv("MNT_' "$here/../../src" "$here/../../io" | grep -v 'src/env.c'; then
  echo "FAIL: an MNT_ variable is read outside src/env.c"; fail=1
fi

# ---- the "no PMIx server" notice: only where a job starts
absent 'no PMIx server' -- --help
absent 'no PMIx server' -- train --help
absent 'no PMIx server' -- convert synth s6 --classes 2 --images 8 --size 8
absent 'no PMIx server' -- inspect "$data"
absent 'no PMIx server' -- bench step --arch resnet8 --size 32 --batch 2 --steps 1 --threads 1 --classes 10
expect 0 'no PMIx server' -- bench allreduce -b 1K -e 1K -n 1 -w 0
[ $fail -eq 0 ] && echo "cli: ok"
exit $fail
