#!/usr/bin/python3
"""fuzz.py — what mntrain reads back, mutated: shards, checkpoints, converter inputs, and what
`mntrain report` reads (trace files, metrics.jsonl, summary.json).
  fuzz.py MNTRAIN [--cases N] [--seed S] [--only TARGET,...] [--keep DIR] [--timeout S] [-v]
Each case copies a good original, changes it, and runs what reads it; the outcome is one of
  identical    the reader's result is the original's (inspect --verify's content digest, or the
               final weights of a resumed run bit for bit, resumed or fallen back to the previous
               checkpoint with a warning naming the damaged one; report's trace.json and trace.svg,
               or scaling.csv and learning.csv, byte for byte but for the run's directory)
  faithful     (report) exit 0 with files that differ from the original's exactly as the changed file
               now says, where nothing could tell the change from a real value (a span's time, an
               offset, a number of a metrics line): fuzz.py's own reading of the files (the spans of
               trace.json one for one; the CSVs' fields from the run's own lines, within their decimals)
  clean error  exit 1 with an error naming the file (shards), the damaged input skipped and named
               (converter), or the converter's input decoding as another image (what any decoder
               reads); report: exit 2 with an error naming the changed file (or its run directory)
  warning      (report) exit 0, different files, and a warning naming the changed file (or its run
               directory; for a trace file taken away, the missing rank)
  crash        a signal, or a sanitizer's report (AddressSanitizer, UndefinedBehaviorSanitizer)
  hang         no exit within --timeout seconds
  silent       a different result without an error, an error that names nothing, or a resume
               that stops instead of falling back to the good checkpoint before the damaged one;
               report: different files that are not what the files say and no warning, an exit
               other than 0 and 2, or an SVG that is not XML
Targets (N cases each, --cases, default 40; half single bytes, half blocks of 2-512 bytes, unless said):
  shard2-meta, shard2-data   format 2 shards (convert synth), outside / inside the datasets' bytes
                             (a third of the metadata cases in the chunk index's entries); every
                             4th case also trains one epoch on the mutated set
  shard3-meta, shard3-data   format 3 shards (convert imagenet --codec jpeg), the same
  manifest                   the newest checkpoint's MANIFEST.json: first 11 known edits (the state's
                             numbers, no shares, a huge size, a duplicate key, the config), then
                             bytes, and values of its JSON (numbers, strings, keys, types) replaced
  state                      the newest checkpoint's state.h5, metadata or data
  convert                    one JPEG or PNG of a small ImageFolder tree (bytes, blocks, truncation)
  trace                      report --trace on a 2-rank job's trace files (a real train --trace, its
                             rank 1 another node's copy): first 12 known edits (a rank's file copied
                             over another's, another job, run or size, rank 5 of 2, a negative
                             duration and start, truncated, a file cut short inside its events and
                             in its header, a version 1 file, a file taken away), then a quarter each
                             of bytes, blocks, values of its JSON (header and spans), truncation
  metrics                    report RUN_DIR (a real train --val run) with its metrics.jsonl changed:
                             first 9 known edits (another run's lines appended, another run's file,
                             a line of another run, lines without a run_id, a line cut short, a line
                             twice, emptied), then bytes, blocks, a line's JSON value (or the line
                             moved or dropped), truncation
  summary                    the same run with its summary.json changed: first 4 known edits (another
                             run's run_id, none, one that is not a run id), then bytes, blocks, values
                             of its JSON, truncation
Prints a table of the counts; exit 1 when any case crashed, hung or was silent (each is named
with the command that shows it; --keep DIR keeps their files), 77 without h5py, numpy or PIL.
Run it on a sanitizer build (cmake -DMNT_SANITIZE=address): .ci/run does."""
import argparse
import csv
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.dom.minidom

try:
    import h5py
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-numpy python3-pil)")
    sys.exit(77)

OUTCOMES = ("identical", "faithful", "clean error", "warning", "crash", "hang", "silent")
TARGETS = ("shard2-meta", "shard2-data", "shard3-meta", "shard3-data", "manifest", "state", "convert", "trace",
           "metrics", "summary")
REPORT_TARGETS = ("trace", "metrics", "summary")
ENV = dict(os.environ, ASAN_OPTIONS="exitcode=86:detect_leaks=0:abort_on_error=0",
           UBSAN_OPTIONS="halt_on_error=1:exitcode=87:print_stacktrace=1", OMP_NUM_THREADS="1")
SANITIZER = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|UndefinedBehaviorSanitizer")


class Fuzz:
    def __init__(self, m, work, timeout, rng, keep):
        self.m, self.work, self.timeout, self.rng, self.keep = m, work, timeout, rng, keep
        self.counts = {t: dict.fromkeys(OUTCOMES, 0) for t in TARGETS}
        self.verbose = False
        self.bad = []

    def run(self, args, log):
        """(rc, output); rc None: hung"""
        t0 = time.time()
        try:
            p = subprocess.run([self.m] + args, cwd=self.work, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=self.timeout)
            out, rc = p.stdout.decode(errors="replace"), p.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode(errors="replace"), None
        with open(os.path.join(self.work, log), "w") as f:
            f.write(f"$ mntrain {' '.join(args)}   ({time.time() - t0:.1f} s, exit {rc})\n{out}")
        return rc, out

    def crashed(self, rc, out):
        return rc is not None and (rc < 0 or rc in (86, 87) or SANITIZER.search(out) is not None)

    def record(self, target, outcome, case, what, args):
        self.counts[target][outcome] += 1
        if self.verbose:
            print(f"    {case}: {outcome}: {what}", flush=True)
        if outcome in ("crash", "hang", "silent"):
            self.bad.append(f"{target} {outcome}: {what} (mntrain {' '.join(args)})")
            if self.keep:
                dst = os.path.join(self.keep, f"{target}-{len(self.bad)}")
                shutil.copytree(os.path.join(self.work, case), dst, symlinks=True, dirs_exist_ok=True)
                for log in os.listdir(self.work):
                    if log.startswith(case + ".") and log.endswith(".log"):
                        shutil.copy(os.path.join(self.work, log), dst)

    # ---- mutations -------------------------------------------------------------------------
    def mutate(self, path, ranges, block):
        """change the bytes of path at a random place inside ranges ([(lo, hi)]): four times in five
        where a byte is not zero (the structures a reader parses; zeros are mostly free space); a
        description"""
        ranges = [r for r in ranges if r[1] > r[0]]
        with open(path, "rb") as f:
            content = f.read()
        busy = [i for lo, hi in ranges for i in range(lo, hi) if content[i]]
        if busy and self.rng.random() < 0.8:
            at = self.rng.choice(busy)
            hi = next(h for lo, h in ranges if lo <= at < h)
        else:
            lo, hi = self.rng.choice(ranges)
            at = self.rng.randrange(lo, hi)
        with open(path, "r+b") as f:
            f.seek(at)
            old = f.read(1)
            if not block:
                new = bytes([old[0] ^ self.rng.randrange(1, 256)])
            else:
                n = min(self.rng.choice((2, 8, 16, 64, 512)), hi - at)
                kind = self.rng.randrange(4)
                if kind == 3:  # a small integer where a size, a count or an address was (8 bytes LE)
                    new = self.rng.choice((1, 2, 255, 4096, 2**31 - 1, 2**32)).to_bytes(8, "little")[:n]
                else:
                    new = (b"\0", b"\xff")[kind] * n if kind < 2 else bytes(self.rng.randrange(256) for _ in range(n))
            f.seek(at)
            f.write(new)
        return f"{len(new)} byte{'s' * (len(new) > 1)} at {at} of {os.path.basename(path)}"

    @staticmethod
    def data_ranges(path):
        """the byte ranges of every dataset's stored data in an HDF5 file (chunks one by one)"""
        out = []
        with h5py.File(path, "r") as f:
            def visit(_, o):
                if not isinstance(o, h5py.Dataset):
                    return
                if o.chunks:
                    for i in range(o.id.get_num_chunks()):
                        c = o.id.get_chunk_info(i)
                        out.append((c.byte_offset, c.byte_offset + c.size))
                elif o.id.get_offset() is not None:
                    out.append((o.id.get_offset(), o.id.get_offset() + o.id.get_storage_size()))
            f.visititems(visit)
        return sorted(out)

    @staticmethod
    def index_entries(path, data):
        """the bytes of the entries that hold the data's addresses (an HDF5 B-tree entry: its key,
        the chunk's size, filter mask and coordinates, then the 8-byte address): the 48 bytes before
        and the 8 of every place in the metadata where a dataset's address is written"""
        with open(path, "rb") as f:
            content = f.read()
        meta_end = data[0][0] if data else len(content)
        out = []
        for lo, _ in data:
            at = content.find(lo.to_bytes(8, "little"), 0, meta_end)
            while at >= 0:
                out.append((max(0, at - 48), at + 8))
                at = content.find(lo.to_bytes(8, "little"), at + 1, meta_end)
        return out

    @staticmethod
    def complement(ranges, size):
        out, at = [], 0
        for lo, hi in ranges:
            if lo > at:
                out.append((at, lo))
            at = max(at, hi)
        if size > at:
            out.append((at, size))
        return out

    # ---- shards ------------------------------------------------------------------------------
    def shard_original(self, fmt):
        d = f"orig{fmt}"
        if fmt == 2:
            args = ["convert", "synth", d, "--classes", "4", "--images", "48", "--size", "8", "--shards", "2"]
        else:
            src = os.path.join(self.work, "src")
            if not os.path.isdir(src):
                self.make_tree(src)
            args = ["convert", "imagenet", "src", d, "--resize", "24", "--codec", "jpeg", "--shards", "2"]
        rc, out = self.run(args, f"{d}.log")
        if rc != 0:
            sys.exit(f"fuzz: mntrain {' '.join(args)} exited {rc}:\n{out}")
        digest = self.digest(d)
        train = self.train_shards(d, "ref", f"{d}.train")
        if digest is None or train[0] != 0:
            sys.exit(f"fuzz: the original format {fmt} set does not verify or train")
        return d, digest

    def digest(self, d):
        rc, out = self.run(["inspect", d, "--verify"], f"{d}.inspect.log")
        m = re.search(r"content: xxh3 ([0-9a-f]{16})", out)
        return m.group(1) if rc == 0 and m else None

    def train_shards(self, d, name, log):
        args = ["train", "--data", d, "--arch", "resnet8", "--size", "8", "--batch-per-rank", "8", "--epochs", "1",
                "--threads", "1", "--loader-threads", "1", "--seed", "3", "--out", f"{d}.{name}.out", "--force",
                "--export", f"{d}.{name}.h5"]
        return self.run(args, f"{log}.log") + (args,)

    def shard_case(self, target, i, orig, digest):
        fmt, where = int(target[5]), target.split("-")[1]
        case = f"{target}-{i}"
        shutil.copytree(os.path.join(self.work, orig), case_dir := os.path.join(self.work, case))
        shards = sorted(s for s in os.listdir(case_dir) if s.endswith(".h5"))
        shard = os.path.join(case_dir, self.rng.choice(shards))
        size = os.path.getsize(shard)
        data = self.data_ranges(shard)
        ranges = data if where == "data" else self.complement(data, size)
        if where == "meta" and i % 3 == 0:  # the chunk index: the entries that point at the data
            ranges = self.index_entries(shard, data) or ranges
        what = self.mutate(shard, ranges, block=i % 2 == 1)
        args = ["inspect", case, "--verify"]
        rc, out = self.run(args, f"{case}.inspect.log")
        m = re.search(r"content: xxh3 ([0-9a-f]{16})", out)
        if self.crashed(rc, out):
            outcome = "crash"
        elif rc is None:
            outcome = "hang"
        elif rc == 0:
            outcome = "identical" if m and m.group(1) == digest else "silent"
        else:
            outcome = "clean error" if rc == 1 and re.search(r"shard-\d{5}-of-\d{5}\.h5|index\.json", out) else "silent"
        if outcome in ("identical", "clean error") and i % 4 == 0:  # the loader's path too
            rc, out, targs = self.train_shards(case, "t", f"{case}.train")
            if self.crashed(rc, out):
                outcome, args = "crash", targs
            elif rc is None:
                outcome, args = "hang", targs
            elif rc == 0:
                if outcome == "clean error" or not same_h5(os.path.join(self.work, f"{orig}.ref.h5"),
                                                            os.path.join(self.work, f"{case}.t.h5")):
                    outcome, args = "silent", targs  # trained on what inspect refused, or trained differently
            elif not (rc == 1 and re.search(r"shard-\d{5}-of-\d{5}\.h5|index\.json", out)):
                outcome, args = "silent", targs
            elif outcome == "identical":
                outcome, args = "silent", targs  # inspect read it all, training refused it
        self.record(target, outcome, case, what, args)
        if outcome in ("identical", "clean error"):
            shutil.rmtree(case_dir)

    # ---- checkpoints ---------------------------------------------------------------------------
    TRAIN = ["--arch", "resnet8", "--size", "8", "--batch-per-rank", "8", "--threads", "1", "--loader-threads", "1",
             "--steps", "12", "--ckpt-every-steps", "4", "--keep", "3", "--log-every", "1"]

    def ckpt_original(self):
        base = ["train", "--data", "orig2"] + self.TRAIN
        rc, out = self.run(base + ["--out", "ckref", "--export", "ckref.h5"], "ckref.log")
        rc2, out2 = self.run(base + ["--out", "ckbase", "--stop-after", "8"], "ckbase.log")
        if rc != 0 or rc2 != 3:
            sys.exit(f"fuzz: the checkpoint runs exited {rc} and {rc2} (want 0, 3):\n{out}\n{out2}")

    def cut_short(self, p, name):
        """p truncated at a random byte: what was done, for the case's line"""
        size = os.path.getsize(p)
        cut = self.rng.randrange(0, size)
        os.truncate(p, cut)
        return f"{name} cut to {cut} of {size} bytes"

    def json_mutation(self, m):
        """one value somewhere in the manifest replaced, a key dropped or renamed; a description"""
        spots = []

        def walk(o, path):
            items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
            for k, v in items:
                spots.append((o, k, path + [k]))
                walk(v, path + [k])
        walk(m, [])
        # most in the training state and the top level (a few keys among hundreds of datasets)
        few = [x for x in spots if len(x[2]) == 1 or x[2][0] == "state"]
        o, k, path = self.rng.choice(few if self.rng.random() < 0.7 else spots)
        v = o[k]
        kind = self.rng.randrange(4)
        if kind == 0 and isinstance(o, dict):
            del o[k]
            return f"drop {path}"
        if kind == 1 and isinstance(o, dict):
            o[str(k) + "x"] = o.pop(k)
            return f"rename {path}"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or kind == 2:
            new = self.rng.choice([None, [], {}, "x", -1, 0, 1, True, 2**31, 2**62, -2**63, 1e300])
        else:
            new = self.rng.choice([v + 1, v - 1, -v, 0, v * 2, v // 2 if isinstance(v, int) else v / 2, 2**31, 2**40,
                                   10**18, 2**62])
        o[k] = new
        return f"{path}: {json.dumps(v)[:40]} -> {json.dumps(new)}"

    # the edits a careful adversary tried first: each once, before the random ones
    KNOWN = (("state step 8 -> 4", lambda m: m["state"].update(step=4)),
             ("shares [] (no hash to check)", lambda m: m.update(shares=[])),
             ("a dataset's bytes 2^40", lambda m: m["datasets"][0].update(bytes=2**40)),
             ("state step 10^18", lambda m: m["state"].update(step=10**18)),
             ("state global_batch 2^62", lambda m: m["state"].update(global_batch=2**62)),
             ("state global_batch x2", lambda m: m["state"].update(global_batch=2 * m["state"]["global_batch"])),
             ("state epoch + 1", lambda m: m["state"].update(epoch=m["state"]["epoch"] + 1)),
             ("state cursor off the batch grid", lambda m: m["state"].update(cursor=m["state"]["cursor"] + 3)),
             ("state []", lambda m: m.update(state=[])),
             ("config lr x2", lambda m: m["config"].update(lr=2 * m["config"]["lr"])))

    def ckpt_case(self, target, i):
        case = f"{target}-{i}"
        shutil.copytree(os.path.join(self.work, "ckbase"), case_dir := os.path.join(self.work, case), symlinks=True)
        step = os.path.join(case_dir, "ckpt", "step-00000008")
        if target == "manifest":
            p = os.path.join(step, "MANIFEST.json")
            if i < len(self.KNOWN) + 1:
                m = json.load(open(p))
                if i < len(self.KNOWN):
                    what, edit = self.KNOWN[i]
                    edit(m)
                    json.dump(m, open(p, "w"), indent=1)
                else:  # a duplicate key after the good one (a parser that keeps the last takes it)
                    what = 'a second "step": 2 appended to the state'
                    txt = json.dumps(m, indent=1)
                    at = txt.index("}", txt.index('"state": {'))
                    open(p, "w").write(txt[:at] + ', "step": 2' + txt[at:])
                what = "MANIFEST.json " + what
            elif i % 3:
                m = json.load(open(p))
                what = "MANIFEST.json " + self.json_mutation(m)
                json.dump(m, open(p, "w"), indent=1)
            else:
                what = self.mutate(p, [(0, os.path.getsize(p))], block=i % 2 == 1)
        else:
            p = os.path.join(step, "state.h5")
            data = self.data_ranges(p)
            ranges = data if i % 2 else self.complement(data, os.path.getsize(p))
            what = ("data: " if i % 2 else "metadata: ") + self.mutate(p, ranges, block=i % 4 >= 2)
        args = ["train", "--data", "orig2"] + self.TRAIN + ["--out", case, "--export", f"{case}.h5"]
        rc, out = self.run(args, f"{case}.train.log")
        if self.crashed(rc, out):
            outcome = "crash"
        elif rc is None:
            outcome = "hang"
        elif rc == 0:
            fell_back = f"resuming from {case}/ckpt/step-00000004 " in out
            named = re.search(rf"{case}/ckpt/step-00000008\S* (is damaged|failed its checks)", out)
            resumed8 = f"resuming from {case}/ckpt/step-00000008 " in out
            same = same_h5(os.path.join(self.work, "ckref.h5"), os.path.join(self.work, f"{case}.h5"))
            outcome = "identical" if same and (resumed8 or (fell_back and named)) else "silent"
        else:  # step 4 is good: a damaged step 8 is fallen back from, not a reason to stop
            outcome = "silent"
        self.record(target, outcome, case, what, args)
        if outcome in ("identical", "clean error"):
            shutil.rmtree(case_dir)

    # ---- converter inputs ------------------------------------------------------------------------
    def make_tree(self, src):
        rng = np.random.default_rng(7)
        for c in range(2):
            os.makedirs(os.path.join(src, f"c{c}"))
            for j in range(4):
                w, h = ((40, 30), (30, 44), (36, 36), (48, 20))[j]
                a = np.clip(rng.normal(120 + 60 * c, 40, (h, w, 3)), 0, 255).astype(np.uint8)
                img = Image.fromarray(a, "RGB")
                if j == 3:
                    img.save(os.path.join(src, f"c{c}", f"{j}.png"))
                elif j == 2:
                    img.save(os.path.join(src, f"c{c}", f"{j}.jpg"), quality=90, progressive=True)
                else:
                    img.save(os.path.join(src, f"c{c}", f"{j}.jpg"), quality=90)

    def convert_case(self, target, i):
        case = f"{target}-{i}"
        shutil.copytree(os.path.join(self.work, "src"), case_dir := os.path.join(self.work, case))
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(case_dir) for f in fs)
        victim = self.rng.choice(files)
        size = os.path.getsize(victim)
        if i % 5 == 4:
            cut = self.rng.randrange(1, size)
            os.truncate(victim, cut)
            what = f"{os.path.relpath(victim, self.work)} truncated to {cut} of {size} bytes"
        else:
            what = self.mutate(victim, [(0, size)], block=i % 2 == 1) + f" ({os.path.relpath(victim, self.work)})"
        args = ["convert", "imagenet", case, f"{case}.out", "--resize", "24", "--codec", "jpeg", "--shards", "1"]
        rc, out = self.run(args, f"{case}.convert.log")
        if self.crashed(rc, out):
            outcome = "crash"
        elif rc is None:
            outcome = "hang"
        elif rc == 0:
            m = re.search(r"convert: (\d+) samples.* (\d+) unreadable inputs skipped", out)
            done, skipped = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
            named = os.path.relpath(victim, self.work) in out
            if done + skipped != len(files) or (skipped and not named):
                outcome = "silent"
            else:
                outcome = "clean error"  # converted as the image it now is, or skipped and named
                if skipped == 0 and self.digest(f"{case}.out") == self.convert_digest:
                    outcome = "identical"
        else:
            outcome = "clean error" if rc == 1 and case in out else "silent"
        self.record(target, outcome, case, what, args)
        if outcome in ("identical", "clean error"):
            shutil.rmtree(case_dir)
            shutil.rmtree(os.path.join(self.work, f"{case}.out"), ignore_errors=True)

    # ---- what mntrain report reads -------------------------------------------------------------------
    OTHER_RUN = "0123456789abcdef"  # a run_id that is not the original's
    REP_TRAIN = ["--arch", "resnet8", "--size", "8", "--batch-per-rank", "8", "--threads", "1", "--loader-threads",
                 "1", "--steps", "12", "--log-every", "1"]

    @staticmethod
    def trace_text(t):
        """a trace as train writes it (src/trace.c): the header, then one span a line (what a file cut
        short keeps is whole lines)"""
        if not isinstance(t, dict) or not isinstance(t.get("events"), list):
            return json.dumps(t)
        head = json.dumps({k: v for k, v in t.items() if k != "events"})
        spans = ",\n".join("  " + json.dumps(e) for e in t["events"])
        return head[:-1] + (", " if len(head) > 2 else "") + '"events": [\n' + spans + "\n]}\n"

    def report_original(self):
        """a finished run with evaluations (rep/run: config.json, metrics.jsonl, summary.json) and its
        trace made a 2-rank job's (rep/trace: rank 1 a copy of rank 0 on another node, its clock 1.23 ms
        behind); what `report` makes of each, kept as the reference"""
        args = ["train", "--data", "orig2", "--val", "orig2", "--eval-every", "0.5", "--target-top1", "0.95"] + \
            self.REP_TRAIN + ["--out", "rep/run", "--trace", "rep/trace1", "--trace-steps", "3:6"]
        rc, out = self.run(args, "rep.train.log")
        if rc != 0:
            sys.exit(f"fuzz: mntrain {' '.join(args)} exited {rc}:\n{out}")
        t = json.load(open(os.path.join(self.work, "rep", "trace1", "trace-rank-00000.json")))
        os.makedirs(os.path.join(self.work, "rep", "trace"))
        for r in (0, 1):
            u = json.loads(json.dumps(t))
            u.update(rank=r, size=2, job_size=2, node=f"node{r + 1}", offset_ns=1234567 * r)
            for e in u["events"]:
                e[1] -= 1234567 * r
            open(os.path.join(self.work, "rep", "trace", f"trace-rank-{r:05d}.json"), "w").write(self.trace_text(u))
        self.rep_ref = {}
        for what, args in (("trace", ["report", "--trace", "rep/trace", "--out", "rep/trace.ref"]),
                           ("run", ["report", "rep/run", "--out", "rep/run.ref"])):
            rc, out = self.run(args, f"rep.{what}.log")
            if rc != 0 or "warning" in out:
                sys.exit(f"fuzz: mntrain {' '.join(args)} exited {rc} (or warned) on the originals:\n{out}")
            self.rep_ref[what] = self.report_files(os.path.join(self.work, f"rep/{what}.ref"))
        self.run_id = json.load(open(os.path.join(self.work, "rep", "run", "summary.json")))["run_id"]

    @staticmethod
    def report_files(d):
        """what report wrote in d, to compare: trace.json and trace.svg as they are, the CSVs without their
        last column (the run's directory: another in each case; the run's SVGs name it too)"""
        out = {}
        for f in ("trace.json", "trace.svg", "scaling.csv", "learning.csv"):
            p = os.path.join(d, f)
            if os.path.exists(p):
                b = open(p, "rb").read()
                if f.endswith(".csv"):
                    b = b"\n".join(line.rsplit(b",", 1)[0] for line in b.split(b"\n"))
                out[f] = b
        return out

    def report_outcome(self, rc, out, named, d, ref, rules, values):
        """the outcome of a report case: out its output, named a regex of the changed file (or its run
        directory), d report's --out, ref the original's report_files; rules() why report had to say
        something about the files (None: nothing), values() whether report's files hold what the files
        say (fuzz.py's own reading of them)"""
        if self.crashed(rc, out):
            return "crash"
        if rc is None:
            return "hang"
        says = any(re.search(named, x) for x in out.splitlines() if "error" in x or "warning" in x)
        if rc == 2:
            return "clean error" if says else "silent"
        if rc != 0:
            return "silent"
        for f in os.listdir(d) if os.path.isdir(d) else ():
            if f.endswith(".svg"):
                try:
                    xml.dom.minidom.parse(os.path.join(d, f))
                except Exception:
                    return "silent"
        try:
            why = rules()
        except Exception as e:  # fuzz.py cannot read what report read: report had to say so
            why = f"{type(e).__name__}: {e}"
        if why and not says:
            if self.verbose:
                print(f"    not said: {why}")
            return "silent"
        if self.report_files(d) == ref:
            return "identical"
        if says:
            return "warning"
        try:
            return "faithful" if values() else "silent"
        except Exception as e:
            if self.verbose:
                print(f"    fuzz.py's reading: {type(e).__name__}: {e}")
            return "silent"

    @staticmethod
    def load_json(b, dup_ok=False):
        """Python's reading of bytes as jansson reads them: UTF-8, no NaN or Infinity, duplicate keys an
        error (JSON_REJECT_DUPLICATES: the trace) or the last one kept"""
        def pairs(ps):
            if not dup_ok and len({k for k, _ in ps}) != len(ps):
                raise ValueError("duplicate key")
            return dict(ps)

        def no_const(c):
            raise ValueError(c)
        return json.loads(b.decode("utf-8"), object_pairs_hook=pairs, parse_constant=no_const)

    # -- trace files (report --trace) --
    def trace_known(self, i, d):
        """the i-th of the edits a user's copy makes, on the files of d: a description and the name report
        must say (a regex); None past the last"""
        p = [os.path.join(d, f"trace-rank-{r:05d}.json") for r in (0, 1)]

        def edit(r, f, to=None):
            t = json.load(open(p[r]))
            f(t)
            open(to or p[r], "w").write(self.trace_text(t))
        n0, n1 = "trace-rank-00000", "trace-rank-00001"
        if i == 0:
            shutil.copy(p[0], p[1])
            return "rank 0's file copied over rank 1's", n1
        if i == 1:
            edit(1, lambda t: t.update(job="slurm.pmix.42.0"))
            return "rank 1 of another job", n1
        if i == 2:
            edit(1, lambda t: t.update(run_id=self.OTHER_RUN))
            return "rank 1 of another run", n1
        if i == 3:
            edit(0, lambda t: t.update(size=4))
            return "rank 0 of a 4-rank job", n0
        if i == 4:
            edit(1, lambda t: t.update(rank=5), os.path.join(d, "trace-rank-00005.json"))
            return "a file saying rank 5 of 2", "trace-rank-00005"
        if i == 5:
            edit(1, lambda t: t["events"][3].__setitem__(2, -1000))
            return "a negative duration", n1
        if i == 6:
            edit(0, lambda t: t["events"][0].__setitem__(1, -5))
            return "a negative start", n0
        if i == 7:
            edit(1, lambda t: t.update(truncated=True))
            return "rank 1 truncated (the span cap hit)", n1
        if i == 8:
            b = open(p[1], "rb").read()
            cut = b.index(b"\n", len(b) // 2) - 7
            open(p[1], "wb").write(b[:cut])
            return f"rank 1's file cut short at byte {cut} of {len(b)}, inside its spans", n1
        if i == 9:
            open(p[1], "wb").write(open(p[1], "rb").read()[:120])
            return "rank 1's file cut short inside its header", n1
        if i == 10:
            edit(1, lambda t: (t.update(version=1), t.pop("job"), t.pop("run_id")))
            return "rank 1 of an older mntrain (version 1)", n1
        if i == 11:
            os.remove(p[1])
            return "rank 1's file missing", r"missing: 1\b"
        return None

    def trace_case(self, target, i):
        case = f"{target}-{i}"
        shutil.copytree(os.path.join(self.work, "rep", "trace"), d := os.path.join(self.work, case))
        k = self.trace_known(i, d)
        if k:
            what, named = k
        else:
            r = self.rng.randrange(2)
            p = os.path.join(d, f"trace-rank-{r:05d}.json")
            named = f"trace-rank-{r:05d}"
            kind = i % 4
            if kind == 2:  # a value of the JSON: one of the header's, or a span's field
                t = json.load(open(p))
                what = f"trace-rank-{r:05d}.json " + self.json_mutation(t)
                open(p, "w").write(self.trace_text(t))
            elif kind == 3:
                what = self.cut_short(p, f"trace-rank-{r:05d}.json")
            else:
                what = self.mutate(p, [(0, os.path.getsize(p))], block=kind == 1)
        args = ["report", "--trace", case, "--out", f"{case}.out"]
        rc, out = self.run(args, f"{case}.report.log")
        o = os.path.join(self.work, f"{case}.out")
        outcome = self.report_outcome(rc, out, named, o, self.rep_ref["trace"], lambda: self.trace_rules(d),
                                      lambda: self.trace_values(d, o))
        self.record(target, outcome, case, what, args)
        if outcome not in ("crash", "hang", "silent"):
            shutil.rmtree(d)

    def trace_files(self, d):
        """the trace files of d as Python reads them"""
        return [self.load_json(open(os.path.join(d, f), "rb").read())
                for f in sorted(f for f in os.listdir(d) if re.fullmatch(r"trace-rank-\d{5}\.json", f))]

    def trace_rules(self, d):
        """what report --trace must refuse or name in the files of d (README: one job's files; a rank's
        incomplete timeline): why, or None"""
        isint = lambda v: isinstance(v, int) and not isinstance(v, bool)
        ts = self.trace_files(d)
        for f, t in zip(sorted(f for f in os.listdir(d) if re.fullmatch(r"trace-rank-\d{5}\.json", f)), ts):
            if t.get("rank") != int(f[11:16]):
                return f"{f} says rank {t.get('rank')}"
            if t.get("version") not in (1, 2) or not isint(t.get("size")) or \
                    not 0 <= t["rank"] < t.get("job_size", t["size"]):
                return f"{f}: version, size or rank"
            if t.get("truncated", False) is not False:
                return f"{f}: truncated"
            ids = {th["id"] for th in t["threads"]}
            for e in t["events"]:
                if len(e) != 7 or not all(isint(e[k]) for k in (0, 1, 2, 4, 5, 6)) or not isinstance(e[3], str) \
                        or e[1] < 0 or e[2] < 0 or e[6] < 0 or e[0] not in ids:
                    return f"{f}: span {e}"
        if len({(t["version"], t.get("job"), t.get("run_id"), t.get("job_size", t["size"])) for t in ts}) != 1:
            return "files of more than one job"
        if len(ts) != ts[0].get("job_size", ts[0]["size"]):
            return "a rank without a file"
        return None

    def trace_values(self, d, out):
        """trace.json holds, span for span, what the files of d say (on rank 0's clock, in us)"""
        ts = self.trace_files(d)
        t0 = min((e[1] + t["offset_ns"] for t in ts for e in t["events"]), default=0)
        want = [(t["rank"], e[0], float(f"{(e[1] + t['offset_ns'] - t0) * 1e-3:.3f}"), float(f"{e[2] * 1e-3:.3f}"),
                 e[3], e[5], e[4]) for t in ts for e in t["events"]]
        have = [(e["pid"], e["tid"], e["ts"], e["dur"], e["name"], e["args"]["step"], e["args"]["arg"])
                for e in json.load(open(os.path.join(out, "trace.json"), encoding="utf-8"))["traceEvents"]
                if e.get("ph") == "X"]
        return want == have

    # -- a run's metrics.jsonl and summary.json (report RUN_DIR) --
    def run_known(self, target, i, d):
        """the i-th of the edits a user's copy makes on the run directory d: a description; None past the
        last"""
        mp, sp = os.path.join(d, "metrics.jsonl"), os.path.join(d, "summary.json")
        lines = open(mp).read().splitlines(keepends=True)
        own = f'"run_id":"{self.run_id}",'
        other = lambda x: x.replace(self.run_id, self.OTHER_RUN)
        if target == "metrics":
            edits = (("another run's lines appended", lambda: lines + [other(x) for x in lines]),
                     ("another run's metrics.jsonl swapped in", lambda: [other(x) for x in lines]),
                     ("the run_id of line 3 another run's", lambda: lines[:2] + [other(lines[2])] + lines[3:]),
                     ("the last line without its run_id", lambda: lines[:-1] + [lines[-1].replace(own, "")]),
                     ("no line with a run_id", lambda: [x.replace(own, "") for x in lines]),
                     ("an older mntrain's lines appended (no run_id)",
                      lambda: lines + [x.replace(own, "") for x in lines[:4]]),
                     ("the last line cut short", lambda: lines[:-1] + [lines[-1][:len(lines[-1]) // 2]]),
                     ("line 2 twice", lambda: lines[:2] + lines[1:]),
                     ("emptied", lambda: []))
            if i < len(edits):
                open(mp, "w").write("".join(edits[i][1]()))
                return "metrics.jsonl: " + edits[i][0]
        else:
            s = json.load(open(sp))
            edits = (("another run's summary.json (its run_id)", lambda: s.update(run_id=self.OTHER_RUN)),
                     ("no run_id (an older mntrain's summary)", lambda: s.pop("run_id")),
                     ("run_id 12345", lambda: s.update(run_id=12345)),
                     ("run_id in capitals", lambda: s.update(run_id=self.run_id.upper())))
            if i < len(edits):
                edits[i][1]()
                json.dump(s, open(sp, "w"), indent=2)
                return "summary.json: " + edits[i][0]
        return None

    def run_case(self, target, i):
        case = f"{target}-{i}"
        shutil.copytree(os.path.join(self.work, "rep", "run"), d := os.path.join(self.work, case))
        what = self.run_known(target, i, d)
        if what is None:
            p = os.path.join(d, "metrics.jsonl" if target == "metrics" else "summary.json")
            kind = i % 4
            if kind == 2 and target == "summary":
                s = json.load(open(p))
                what = "summary.json " + self.json_mutation(s)
                json.dump(s, open(p, "w"), indent=2)
            elif kind == 2:  # a value of one line's JSON, or a line moved or dropped
                lines = open(p).read().splitlines(keepends=True)
                k = self.rng.randrange(len(lines))
                x = self.rng.random()
                if x < 0.2:
                    j = self.rng.randrange(len(lines))
                    lines.insert(j, lines.pop(k))
                    what = f"metrics.jsonl line {k + 1} moved to {j + 1}"
                elif x < 0.3:
                    del lines[k]
                    what = f"metrics.jsonl line {k + 1} dropped"
                else:
                    line = json.loads(lines[k])
                    what = f"metrics.jsonl line {k + 1} " + self.json_mutation(line)
                    lines[k] = json.dumps(line, separators=(",", ":")) + "\n"
                open(p, "w").write("".join(lines))
            elif kind == 3:
                what = self.cut_short(p, os.path.basename(p))
            else:
                what = self.mutate(p, [(0, os.path.getsize(p))], block=kind == 1)
        args = ["report", case, "--out", f"{case}.out"]
        rc, out = self.run(args, f"{case}.report.log")
        o = os.path.join(self.work, f"{case}.out")
        outcome = self.report_outcome(rc, out, re.escape(case) + r"\b", o, self.rep_ref["run"],
                                      lambda: self.run_read(d)[0], lambda: self.run_values(d, o))
        self.record(target, outcome, case, what, args)
        if outcome not in ("crash", "hang", "silent"):
            shutil.rmtree(d)

    def run_read(self, d):
        """the run of d read by the README's rules: (why report must say something or None, summary.json,
        the evaluations [(step, epoch, top1)], the img/s of the intervals after warm-up)"""
        isint = lambda v: isinstance(v, int) and not isinstance(v, bool)
        isnum = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        s = self.load_json(open(os.path.join(d, "summary.json"), "rb").read(), dup_ok=True)
        rid = s.get("run_id", "")
        cfg = json.load(open(os.path.join(d, "config.json"))).get("run_id")
        if rid and cfg != rid:
            return f"summary.json's run_id {rid} is not config.json's {cfg}", s, [], []
        tg = s.get("target_top1")
        if "target_top1" in s and not (isnum(tg) and 0 < tg <= 1 and isinstance(s.get("target_reached"), bool)):
            return "a target that is not one", s, [], []
        rows, why = [], None
        for line in open(os.path.join(d, "metrics.jsonl"), "rb").read().split(b"\n"):
            line = line.split(b"\0")[0]  # getline's line, read as a C string
            if line.strip(b" \t\r"):
                try:
                    x = self.load_json(line, dup_ok=True)
                except ValueError:
                    x = None
                if isinstance(x, dict):
                    rows.append(x)
                else:
                    why = "a line that is not a JSON object"
        first = next((k for k, x in enumerate(rows) if rid and x.get("run_id") == rid), None)
        use = [x for k, x in enumerate(rows) if (x.get("run_id") == rid if rid else "run_id" not in x) or
               (rid and "run_id" not in x and first is not None and k < first)]
        if len(use) != len(rows):
            why = why or "lines of another run"
        opt = lambda k, dflt: s[k] if isint(s.get(k)) else dflt
        todo = opt("steps_this_job", opt("steps", 0))
        timed = opt("resumed_from_step", 0) + opt("warmup_steps", 5 if todo > 20 else 1 if todo > 4 else 0)
        prev, ips, pts = 0, [], []
        for x in use:
            step = x.get("step")
            if isint(step) and "val_top1" in x:
                ep, v = x.get("epoch"), x.get("val_top1")
                if not (isnum(ep) and isnum(v) and 0 <= ep < float("inf") and 0 <= v <= 1 and step >= 0):
                    why = why or "an evaluation that is not one"
                    continue
                while pts and pts[-1][0] >= step:
                    pts.pop()
                pts.append((step, ep, v))
            elif isint(step) and "img_per_s" in x:
                if prev >= timed and step > prev:
                    v = x["img_per_s"]
                    if isnum(v) and 0 < v < float("inf"):
                        ips.append(v)
                    else:
                        why = why or "an interval's img/s that is not one"
                prev = step
        return why, s, pts, ips

    def run_values(self, d, out):
        """scaling.csv and learning.csv hold what the run's files say, within the CSVs' decimals"""
        isnum = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        _, s, pts, ips = self.run_read(d)
        near = lambda have, want, digits: (have == "" and want is None) or (
            want is not None and have != "" and abs(float(have) - want) <= 0.51 * 10 ** -digits + 1e-9 * abs(want))
        sc = list(csv.reader(open(os.path.join(out, "scaling.csv"), newline="")))
        ph = s["phases_ms"]
        want = [(s["ranks"], 0), (s["nodes"], 0), (s["global_batch"], 0), (s["img_per_s"], 2),
                (statistics.stdev(ips) if len(ips) >= 2 else None, 2)] + \
            [(ph.get(k) if isnum(ph.get(k)) else None, 3) for k in ("data", "forward", "backward", "comm_exposed",
                                                                     "optimizer")]
        if len(sc) != 2 or not all(near(h, w, k) for h, (w, k) in zip(sc[1][:1] + sc[1][1:2] + sc[1][3:6] + sc[1][8:13],
                                                                       want)):
            return False
        lp = os.path.join(out, "learning.csv")
        if not pts:
            return not os.path.exists(lp)
        lc = list(csv.reader(open(lp, newline="")))
        tg, reached = s.get("target_top1"), s.get("target_reached") is True
        te, tt = (s.get("target_epoch"), s.get("target_time_s")) if tg is not None and reached else (None, None)
        optim, sched, bne = s.get("optimizer"), s.get("schedule"), s.get("bn_eval")
        if not (isinstance(optim, str) and 0 < len(optim.encode()) < 64):
            optim = "sgd"
        if not (isinstance(sched, str) and 0 < len(sched.encode()) < 64):
            sched = "step"
        if not (isinstance(bne, str) and 0 < len(bne.encode()) < 64):
            bne = "running"
        row = lc[1] if len(lc) == 2 else []
        return len(row) == 15 and row[3] == optim and row[4] == sched and row[5] == bne and \
            int(row[6]) == len(pts) and near(row[7], pts[-1][1], 4) and near(row[8], pts[-1][2], 4) and \
            near(row[9], max(0, *(p[2] for p in pts)), 4) and near(row[10], tg, 4) and \
            row[11] == ("" if tg is None else "true" if reached else "false") and \
            near(row[12], te if isnum(te) and te >= 0 else None, 4) and \
            near(row[13], tt if isnum(tt) and tt >= 0 else None, 2)


def same_h5(a, b):
    """every dataset of a in b, bit for bit"""
    try:
        fa, fb = h5py.File(a, "r"), h5py.File(b, "r")
    except OSError:
        return False
    names = []
    fa.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return bool(names) and all(n in fb and np.array_equal(fa[n][()], fb[n][()]) for n in names)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mntrain")
    p.add_argument("--cases", type=int, default=40)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--only", default=",".join(TARGETS))
    p.add_argument("--keep", help="keep the files of the failing cases here")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("-v", "--verbose", action="store_true", help="a line per case")
    a = p.parse_args()
    only = a.only.split(",")
    for t in only:
        if t not in TARGETS:
            p.error(f"--only: {t} is not one of {', '.join(TARGETS)}")
    work = tempfile.mkdtemp(prefix="mntrain-fuzz-")
    f = Fuzz(os.path.realpath(a.mntrain), work, a.timeout, random.Random(a.seed), a.keep)
    f.verbose = a.verbose
    print(f"fuzz: seed {a.seed}, {a.cases} cases per target, in {work}", flush=True)
    t0 = time.time()
    try:
        origs = {}
        if any(t.startswith("shard2") or t in ("manifest", "state") + REPORT_TARGETS for t in only):
            origs[2] = f.shard_original(2)
        if any(t.startswith("shard3") or t == "convert" for t in only):
            origs[3] = f.shard_original(3)
        if "convert" in only:
            f.convert_digest = f.digest(origs[3][0])
        if "manifest" in only or "state" in only:
            f.ckpt_original()
        if any(t in REPORT_TARGETS for t in only):
            f.report_original()
        for t in only:
            t1 = time.time()
            for i in range(a.cases):
                if t.startswith("shard"):
                    f.shard_case(t, i, *origs[int(t[5])])
                elif t == "convert":
                    f.convert_case(t, i)
                elif t == "trace":
                    f.trace_case(t, i)
                elif t in ("metrics", "summary"):
                    f.run_case(t, i)
                else:
                    f.ckpt_case(t, i)
            c = f.counts[t]
            print(f"  {t:<12} {a.cases} cases, {time.time() - t1:.0f} s: " +
                  ", ".join(f"{c[o]} {o}" for o in OUTCOMES if c[o]), flush=True)
    finally:
        if not f.bad:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'target':<14}{'tried':>7}" + "".join(f"{o:>13}" for o in OUTCOMES))
    for t in only:
        c = f.counts[t]
        print(f"{t:<14}{sum(c.values()):>7}" + "".join(f"{c[o]:>13}" for o in OUTCOMES))
    tot = {o: sum(f.counts[t][o] for t in only) for o in OUTCOMES}
    print(f"{'all':<14}{sum(tot.values()):>7}" + "".join(f"{tot[o]:>13}" for o in OUTCOMES))
    print(f"({time.time() - t0:.0f} s; seed {a.seed}: fuzz.py --seed {a.seed} repeats these cases)")
    if f.bad:
        print(f"\n{len(f.bad)} cases crashed, hung or were silent (logs in {work}):")
        for b in f.bad:
            print("  " + b)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
