#!/usr/bin/python3
"""fuzz.py — what mntrain reads back, mutated: shards, checkpoints and converter inputs.
  fuzz.py MNTRAIN [--cases N] [--seed S] [--only TARGET,...] [--keep DIR] [--timeout S] [-v]
Each case copies a good original, changes it, and runs what reads it; the outcome is one of
  identical    the reader's result is the original's (inspect --verify's content digest, or the
               final weights of a resumed run bit for bit, resumed or fallen back to the previous
               checkpoint with a warning naming the damaged one)
  clean error  exit 1 with an error naming the file (shards), the damaged input skipped and named
               (converter), or the converter's input decoding as another image (what any decoder reads)
  crash        a signal, or a sanitizer's report (AddressSanitizer, UndefinedBehaviorSanitizer)
  hang         no exit within --timeout seconds
  silent       a different result without an error, an error that names nothing, or a resume
               that stops instead of falling back to the good checkpoint before the damaged one
Targets (N cases each, --cases, default 40; half single bytes, half blocks of 2-512 bytes):
  shard2-meta, shard2-data   format 2 shards (convert synth), outside / inside the datasets' bytes
                             (a third of the metadata cases in the chunk index's entries); every
                             4th case also trains one epoch on the mutated set
  shard3-meta, shard3-data   format 3 shards (convert imagenet --codec jpeg), the same
  manifest                   the newest checkpoint's MANIFEST.json: first 11 known edits (the state's
                             numbers, no shares, a huge size, a duplicate key, the config), then
                             bytes, and values of its JSON (numbers, strings, keys, types) replaced
  state                      the newest checkpoint's state.h5, metadata or data
  convert                    one JPEG or PNG of a small ImageFolder tree (bytes, blocks, truncation)
Prints a table of the counts; exit 1 when any case crashed, hung or was silent (each is named
with the command that shows it; --keep DIR keeps their files), 77 without h5py, numpy or PIL.
Run it on a sanitizer build (cmake -DMNT_SANITIZE=address): .ci/run does."""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-numpy python3-pil)")
    sys.exit(77)

OUTCOMES = ("identical", "clean error", "crash", "hang", "silent")
TARGETS = ("shard2-meta", "shard2-data", "shard3-meta", "shard3-data", "manifest", "state", "convert")
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
        if any(t.startswith("shard2") or t in ("manifest", "state") for t in only):
            origs[2] = f.shard_original(2)
        if any(t.startswith("shard3") or t == "convert" for t in only):
            origs[3] = f.shard_original(3)
        if "convert" in only:
            f.convert_digest = f.digest(origs[3][0])
        if "manifest" in only or "state" in only:
            f.ckpt_original()
        for t in only:
            t1 = time.time()
            for i in range(a.cases):
                if t.startswith("shard"):
                    f.shard_case(t, i, *origs[int(t[5])])
                elif t == "convert":
                    f.convert_case(t, i)
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
