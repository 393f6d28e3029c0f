#!/usr/bin/env bash
# shard_damage.sh — a damaged shard through the commands users run (one process, no cluster):
# - the chunk index of a format 2 shard damaged (a byte of its root node's first key, as a bad disk
#   or copy leaves it) so that HDF5 no longer finds most of the shard's images: they read back as
#   zeros without an error (Fletcher-32 covers a chunk's bytes, not the index). `inspect --verify`
#   fails naming the shard and the first sample lost, and `train` refuses to start on it;
# - a format 3 shard whose first table's chunk is said to be 1 byte long (8 bytes written over its
#   index entry): HDF5's Fletcher-32 filter reads far out of bounds on it (SIGSEGV). `inspect` and
#   `train` fail naming the shard, no crash;
# - one byte of an image flipped: its checksum fails when a loader thread reads it while training,
#   and when evaluation reads it from a validation set: one error line naming the shard and the
#   sample, and none of HDF5's own 20-line error stacks (HDF5-DIAG) from those threads;
# - index.json whose list of classes holds a number: refused naming it.
# Every byte of the metadata, damaged in turn: tests/unit/test_shard_damage.c.
# A case that cannot run here (format 3 needs python3 with numpy and PIL) is left out and named, and
# the test then exits 77 (skipped), not 0.
#   shard_damage.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$(realpath "$1")
fail=0
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT

# the byte offset of the first HDF5 B-tree node of a chunk index (type 1) at level LEVEL in FILE
tree_node() { grep -obUaP "TREE\\x01\\x$(printf %02x "$2")" "$1" | head -1 | cut -d: -f1; }
# write the bytes given as a printf format (e.g. '\x6f') at OFFSET of FILE
poke() { printf '%b' "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
# the status and output of a command, under a deadline; the exit code in $rc
run() {
  local log=$1
  shift
  timeout 300 "$m" "$@" >"$log" 2>&1
  rc=$?
}
# the common checks of a refusal: exit 1 (no crash: 128+ is a signal), the shard named, no HDF5 stack
refused() {
  local what=$1 log=$2 shard=$3 more=$4
  if [ "$rc" -ne 1 ]; then bad "$what: exit $rc, not 1: $(tail -3 "$log")"
  elif ! grep -q "error: .*$shard.*$more" "$log"; then bad "$what: no error naming $shard ($more): $(tail -3 "$log")"
  elif grep -q HDF5-DIAG "$log"; then bad "$what: HDF5's error stack was printed: $(grep -m1 -A2 HDF5-DIAG "$log")"
  else ok "$what: $(grep -m1 "error: .*$shard" "$log" | sed 's/^mntrain: error: //')"
  fi
}
train=(train --arch resnet8 --batch-per-rank 8 --threads 1 --loader-threads 2)

# ---- format 2: the chunk index loses images --------------------------------------------------------
"$m" convert synth "$w/f2" --classes 10 --images 200 --size 16 --shards 2 >"$w/f2.log" 2>&1 || fail "convert: $(cat "$w/f2.log")"
s1=$w/f2/shard-00001-of-00002.h5
root=$(tree_node "$s1" 1) # the images' index: 100 chunks, a root over two leaves
[ -n "$root" ] || fail "no two-level chunk index in $s1"
poke "$s1" $((root + 24 + 8 + 6)) '\x6f' # its first key's sample offset, made enormous
run "$w/verify.log" inspect "$w/f2" --verify
refused "inspect --verify, a chunk index that lost images" "$w/verify.log" shard-00001-of-00002.h5 "sample"
run "$w/train2.log" "${train[@]}" --size 16 --data "$w/f2" --steps 2 --out "$w/t2"
refused "train, a chunk index that lost images" "$w/train2.log" shard-00001-of-00002.h5 "sample"

# ---- format 3: a table's chunk said to be 1 byte long -----------------------------------------------
train_set raw "$m" "$w/f3" 2>"$w/f3.err"
case $? in
  0)
    s0=$w/f3/shard-00000-of-00002.h5
    node=$(tree_node "$s0" 0) # the first table's index (a leaf): its first key is the chunk's size
    if [ -z "$node" ]; then
      bad "no chunk index node in $s0"
    else
      poke "$s0" $((node + 24)) '\x01\x00\x00\x00\x00\x00\x00\x00'
      run "$w/inspect3.log" inspect "$w/f3"
      refused "inspect, a format 3 table's chunk of 1 byte" "$w/inspect3.log" shard-00000-of-00002.h5 "1 bytes"
      run "$w/train3.log" "${train[@]}" --size 24 --data "$w/f3" --steps 2 --out "$w/t3"
      refused "train, a format 3 table's chunk of 1 byte" "$w/train3.log" shard-00000-of-00002.h5 "1 bytes"
    fi
    ;;
  77) left_out "format 3: $(sed -n 's/^SKIP: //p' "$w/f3.err")" ;;
  *) bad "format 3 set: $(cat "$w/f3.err" "$w/f3.log" 2>/dev/null | tail -5)" ;;
esac

# ---- a flipped image byte, read by the loader's threads and by evaluation -------------------------
for set in data val; do
  "$m" convert synth "$w/$set" --classes 4 --images 48 --size 16 --shards 1 --seed 3 >"$w/$set.log" 2>&1 ||
    fail "convert: $(cat "$w/$set.log")"
done
s=$w/val/shard-00000-of-00001.h5
leaf=$(tree_node "$s" 0) # the images' index: 48 chunks in one node (written first)
first=$(od -An -tu8 -j $((leaf + 24 + 48)) -N8 "$s" | tr -d ' ') # its first chunk's address
if [ -z "$first" ] || [ "$first" -eq 0 ]; then fail "no image chunk found in $s"; fi
cp -r "$w/val" "$w/bad"
b=$w/bad/shard-00000-of-00001.h5
poke "$b" $((first + 100)) "\\x$(printf %02x $(($(od -An -tu1 -j $((first + 100)) -N1 "$b") ^ 0x10)))"
run "$w/loader.log" "${train[@]}" --size 16 --data "$w/bad" --epochs 2 --out "$w/tl"
refused "train, a damaged image read by a loader thread" "$w/loader.log" shard-00000-of-00001.h5 "checksum"
run "$w/eval.log" "${train[@]}" --size 16 --data "$w/data" --val "$w/bad" --epochs 1 --out "$w/te"
refused "train, a damaged image read by evaluation" "$w/eval.log" shard-00000-of-00001.h5 "checksum"

# ---- index.json: a class that is not a name (before: read as the class "") ---------------------
cp -r "$w/data" "$w/noname"
/usr/bin/python3 -c 'import json, sys
p = sys.argv[1]; o = json.load(open(p)); o["classes"][1] = 7; json.dump(o, open(p, "w"))' "$w/noname/index.json"
run "$w/noname.log" inspect "$w/noname"
if [ "$rc" -ne 1 ] || ! grep -q "index.json: an entry of \"classes\" is not a class name" "$w/noname.log"; then
  bad "index.json with a class 7: exit $rc: $(tail -2 "$w/noname.log")"
else
  ok "index.json with a class that is not a name: exit 1, named"
fi

finish shard_damage "$fail"
