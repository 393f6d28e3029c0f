#!/usr/bin/python3
"""`mntrain convert imagenet` in format 3 (records at their aspect ratio, raw or JPEG) on a small tree
made here with PIL: landscape and portrait JPEGs, a grey and a CMYK JPEG, a PNG, an image smaller than
the resize (kept at its size), a panorama (its longer side capped) and a large JPEG (DCT-scaled
decoding); --resize 64, --max-side 128 by default. Checks, read back with h5py:
- index.json and every shard's attributes: version 3, codec, quality, resize, max_side, record_bytes;
  offsets, shapes, labels, source_index, checksums; `records` contiguous and unfiltered;
- every stored size is torchvision's Resize(64, max_size=128) size of the source, or the source's own
  when its shorter side is 64 or less (never enlarged), 3 channels (RGB) for grey and CMYK too;
- raw records within 4/255 (mean absolute difference, as the format 2 test) of PIL's decode +
  convert("RGB") + BOX resize to that size, equal where the image is kept at its size (the PNG);
- every checksum is XXH3-64 of its record (libxxhash through ctypes);
- JPEG records decode (PIL) to their stored size with PSNR >= 35 dB against the raw records over the
  set (>= 33 dB on every image: the one kept at 40x30 keeps its full-resolution noise, which JPEG
  does not keep; photographs measured 36.8 dB on the worst of 192, io/convert/imagenet.c), and take less
  than a quarter of the raw records' bytes;
- `inspect` reports the codec and bytes per image; `inspect --verify` passes, and after one flipped
  byte in one record exits 1 naming the shard and the sample;
- a rerun keeps the shards; another codec, quality, resize, max side or format 2 (--size) into the
  directory is refused unchanged, --force starts over; a format 2 shard among format 3 shards is
  refused at open, naming it; a truncated shard is refused at open;
- a write that fails half-way (a file size limit, as a full disk) exits 1 naming the file and leaves
  nothing that looks valid (no index, no .partial, no spool file); a later run completes;
- a directory without room is refused before anything is written (tmpfs; root);
- usage errors: --size with format 3 options, --max-side below --resize, --quality with raw.
usage: convert_format3.py path/to/mntrain"""
import ctypes
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-pil python3-numpy)")
    sys.exit(77)
try:
    _xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
    _xxh.restype, _xxh.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]
except (OSError, AttributeError) as e:
    print(f"SKIP: libxxhash.so.0 with XXH3_64bits is needed to check the checksums: {e} (apt-get install libxxhash0)")
    sys.exit(77)

S, L = 64, 128


def fit(w, h):
    """torchvision's Resize(S, max_size=L) sizes, except that nothing is enlarged"""
    wide = w >= h
    sh, lg = (h, w) if wide else (w, h)
    if sh > S:
        sh, lg = S, int(S * lg / sh)
    if L and lg > L:
        sh, lg = int(L * sh / lg), L
    sh = max(sh, 1)
    return (lg, sh) if wide else (sh, lg)


def picture(rng, w, h, c):
    """photograph-like: smooth shading, one sharp-edged disc, mild noise (a JPEG's PSNR on it is a
    photograph's, not that of the sawtooth and uniform noise of convert_imagenet.py's pictures)"""
    yy, xx = np.mgrid[0:h, 0:w] * (40.0 / max(w, h))
    arr = np.stack([128 + 90 * np.sin(xx * (1 + c) / 4 + yy / 3), 128 + 90 * np.cos(yy * 1.3 / 4 + c),
                    128 + 80 * np.sin(xx / 4 + yy * (0.5 + c) / 4)], -1)
    disc = (xx - 20) ** 2 + (yy - 12) ** 2 < 64
    arr[disc] = arr[disc] * 0.4 + 30 * c
    return Image.fromarray((arr + rng.normal(0, 3, arr.shape)).clip(0, 255).astype(np.uint8))


def make_tree(root, rng):
    files = {}
    specs = [("land.JPEG", 120, 90, None), ("portrait.jpg", 90, 140, None), ("grey.jpg", 100, 80, "L"),
             ("cmyk.jpg", 80, 100, "CMYK"), ("wide.png", 150, 60, "png"), ("small.png", 40, 30, "png"),
             ("panorama.jpg", 400, 70, None), ("large.jpg", 1400, 1000, None)]
    for c in range(3):
        d = os.path.join(root, f"class{c}")
        os.makedirs(d)
        for name, w, h, kind in specs:
            if c == 2 and name == "large.jpg":
                continue  # one large one is enough (time)
            im = picture(rng, w, h, c)
            p = os.path.join(d, name)
            if kind in ("L", "CMYK"):
                im = im.convert(kind)
            im.save(p, "PNG" if kind == "png" else "JPEG", **({} if kind == "png" else {"quality": 95}))
            files[p] = (w, h)
    return files


def run(*args, limit=None):
    def pre():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, preexec_fn=pre)


def read_shards(out, index):
    """{source index: (record bytes, (h, w, c), label)} and the problems seen in the files' layout"""
    recs, bad = {}, []
    for sh in index["shards"]:
        with h5py.File(os.path.join(out, sh["file"]), "r") as f:
            a = dict(f.attrs)
            for k in ("version", "resize", "max_side", "samples", "record_bytes", "image_size"):
                want = {"version": 3, "resize": S, "max_side": L, "samples": sh["samples"], "image_size": S}.get(k)
                if k in ("record_bytes",):
                    want = int(f["offsets"][-1])
                if a.get(k) != want:
                    bad.append(f"{sh['file']}: attribute {k} = {a.get(k)}, want {want}")
            if a.get("codec", b"").decode() != index["codec"] or a.get("fingerprint", b"").decode() != index["fingerprint"]:
                bad.append(f"{sh['file']}: codec/fingerprint attributes {a.get('codec')} {a.get('fingerprint')}")
            r = f["records"]
            pl = r.id.get_create_plist()
            if pl.get_layout() != h5py.h5d.CONTIGUOUS or pl.get_nfilters() != 0 or r.id.get_offset() is None:
                bad.append(f"{sh['file']}: records not one contiguous unfiltered dataset")
            data, off, shapes = r[:].tobytes(), f["offsets"][:], f["shapes"][:]
            labels, src, sums = f["labels"][:], f["source_index"][:], f["checksums"][:]
            for i in range(len(src)):
                rec = data[off[i]:off[i + 1]]
                if _xxh(rec, len(rec)) != int(sums[i]):
                    bad.append(f"{sh['file']}: sample {i}: checksum is not XXH3-64 of the record")
                recs[int(src[i])] = (rec, tuple(int(x) for x in shapes[i]), int(labels[i]))
    return recs, bad


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0 ** 2 / max(mse, 1e-12))


def check_contents(m, d, train, files, expect):
    """convert raw and jpeg; the records against PIL and against each other"""
    paths = sorted(files)  # ImageFolder's order: class folders sorted, then file names
    paths.sort(key=lambda p: (os.path.dirname(p), os.path.basename(p)))
    out = {}
    for codec in ("raw", "jpeg"):
        out[codec] = os.path.join(d, codec)
        r = run(m, "convert", "imagenet", train, out[codec], "--resize", S, "--codec", codec, "--shards", 2)
        expect(r.returncode == 0 and "format 3" in r.stdout, f"convert --codec {codec}: {r.stdout} {r.stderr}")
    idx = {c: json.load(open(os.path.join(out[c], "index.json"))) for c in out}
    recs = {}
    for c in out:
        ix = idx[c]
        expect(ix["version"] == 3 and ix["codec"] == c and ix["resize"] == S and ix["image_size"] == S and
               ix["max_side"] == L and ix["quality"] == (90 if c == "jpeg" else 0) and ix["samples"] == len(files) and
               ix["channels"] == 3, f"index.json ({c}): {ix}")
        recs[c], bad = read_shards(out[c], ix)
        for b in bad:
            expect(False, b)
        expect(ix["record_bytes"] == sum(len(v[0]) for v in recs[c].values()), f"{c}: record_bytes {ix['record_bytes']}")
    worst, low, se, npx = 0.0, 99.0, 0.0, 0
    for i, p in enumerate(paths):
        raw, jpg = recs["raw"].get(i), recs["jpeg"].get(i)
        if raw is None or jpg is None:
            expect(False, f"{p} is missing")
            continue
        (ow, oh), (h, w, c) = fit(*files[p]), raw[1]
        expect((w, h, c) == (ow, oh, 3) and jpg[1] == raw[1], f"{p} {files[p]}: stored {w}x{h}x{c}, want {ow}x{oh}x3")
        expect(raw[2] == int(os.path.basename(os.path.dirname(p))[5:]), f"{p}: label {raw[2]}")
        px = np.frombuffer(raw[0], np.uint8).reshape(h, w, c)
        ref = Image.open(p).convert("RGB")
        if ref.size != (w, h):
            ref = ref.resize((w, h), Image.BOX)
        diff = np.abs(px.astype(np.float64) - np.asarray(ref)).mean()
        worst = max(worst, diff)
        expect(diff < 4, f"{p}: raw record differs from PIL's resize by {diff:.2f}/255 on average")
        if p.endswith("small.png"):
            expect(diff == 0, f"{p}: kept at its size, but not its pixels ({diff:.3f})")
        dec = np.asarray(Image.open(io.BytesIO(jpg[0])).convert("RGB"))
        expect(dec.shape == px.shape, f"{p}: the JPEG decodes to {dec.shape}, stored as {px.shape}")
        if dec.shape == px.shape:
            low = min(low, psnr(dec, px))
            se += float(np.sum((dec.astype(np.float64) - px) ** 2))
            npx += px.size
    overall = 10 * np.log10(255.0 ** 2 / max(se / max(npx, 1), 1e-12))
    expect(overall >= 35 and low >= 33, f"JPEG records against raw: PSNR {overall:.1f} dB over the set (< 35?), "
           f"{low:.1f} dB on the worst image (< 33?)")
    rb, jb = idx["raw"]["record_bytes"], idx["jpeg"]["record_bytes"]
    expect(jb * 4 <= rb, f"JPEG records take {jb} bytes, raw {rb}: not under a quarter")
    print(f"  raw vs PIL: worst mean difference {worst:.2f}/255; JPEG vs raw: PSNR {overall:.1f} dB over the set, "
          f"{low:.1f} dB on the worst image; "
          f"bytes per image raw {rb / len(files):.0f}, jpeg {jb / len(files):.0f}")
    return out, idx


def flip_byte(shard, sample):
    with h5py.File(shard, "r") as f:
        at = f["records"].id.get_offset() + int(f["offsets"][sample]) + 5
    with open(shard, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


def check_inspect(m, out, idx, expect):
    r = run(m, "inspect", out["jpeg"])
    expect(r.returncode == 0 and "codec jpeg quality 90" in r.stdout and "per image (min" in r.stdout and
           "of shard files" in r.stdout, f"inspect: {r.returncode} {r.stdout} {r.stderr}")
    r = run(m, "inspect", out["jpeg"], "--verify")
    expect(r.returncode == 0 and "0 bad" in r.stdout, f"inspect --verify: {r.returncode} {r.stdout[-300:]} {r.stderr}")
    bad = os.path.join(out["jpeg"], "shard-00001-of-00002.h5")
    flip_byte(bad, 3)
    r = run(m, "inspect", out["jpeg"], "--verify")
    expect(r.returncode == 1 and "1 bad" in r.stdout and "shard-00001-of-00002.h5: sample 3 " in r.stderr and
           "checksum" in r.stderr, f"inspect --verify on a flipped byte: {r.returncode} {r.stdout[-200:]} {r.stderr}")
    r = run(m, "inspect", out["jpeg"])
    expect(r.returncode == 0, f"inspect without --verify reads the tables only: {r.returncode} {r.stderr}")


def check_reruns(m, d, train, out, expect):
    o = out["raw"]
    before = sorted(os.listdir(o)), json.load(open(os.path.join(o, "index.json")))
    r = run(m, "convert", "imagenet", train, o, "--resize", S, "--codec", "raw", "--shards", 2)
    expect(r.returncode == 0 and "(2 already there)" in r.stdout and
           json.load(open(os.path.join(o, "index.json"))) == before[1], f"a rerun did not keep the shards: {r.stdout}")
    for extra in (["--codec", "jpeg"], ["--codec", "jpeg", "--quality", "80"], ["--resize", S + 8],
                  ["--max-side", 0], ["--max-side", 2 * L], ["--size", S]):
        args = ["--resize", S, "--codec", "raw"] if extra[0] not in ("--size", "--resize", "--codec") else []
        r = run(m, "convert", "imagenet", train, o, "--shards", 2, *args, *extra)
        expect(r.returncode == 2 and "another conversion" in r.stderr and "--force" in r.stderr,
               f"{extra} into a format 3 raw directory not refused: {r.returncode} {r.stderr}")
    expect((sorted(os.listdir(o)), json.load(open(os.path.join(o, "index.json")))) == before,
           f"a refused conversion changed {o}")
    # a format 2 shard among format 3 shards: refused at open, naming it
    sq = os.path.join(d, "square")
    run(m, "convert", "imagenet", train, sq, "--size", S, "--shards", 2)
    mixed = os.path.join(d, "mixed")
    shutil.copytree(o, mixed)
    shutil.copy(os.path.join(sq, "shard-00001-of-00002.h5"), os.path.join(mixed, "shard-00001-of-00002.h5"))
    r = run(m, "inspect", mixed)
    expect(r.returncode == 1 and "shard-00001-of-00002.h5" in r.stderr and "another conversion" in r.stderr,
           f"a format 2 shard among format 3: {r.returncode} {r.stderr}")
    r = run(m, "convert", "imagenet", train, mixed, "--resize", S, "--codec", "raw", "--shards", 2)
    expect(r.returncode == 2 and "another conversion" in r.stderr, f"converting into the mixed directory: {r.stderr}")
    # a truncated shard
    os.truncate(os.path.join(mixed, "shard-00001-of-00002.h5"), 0)
    shutil.copy(os.path.join(o, "shard-00000-of-00002.h5"), os.path.join(mixed, "shard-00001-of-00002.h5"))
    p = os.path.join(mixed, "shard-00000-of-00002.h5")
    os.truncate(p, os.path.getsize(p) - 100)
    r = run(m, "inspect", mixed)
    expect(r.returncode == 1 and "shard-00000-of-00002.h5" in r.stderr, f"a truncated shard: {r.returncode} {r.stderr}")
    r = run(m, "convert", "imagenet", train, o, "--shards", 2, "--force")
    new = json.load(open(os.path.join(o, "index.json"))) if r.returncode == 0 else {}
    expect(new.get("codec") == "jpeg" and new.get("fingerprint") != before[1]["fingerprint"],
           f"--force did not start over: {r.returncode} {r.stderr}")
    r = run(m, "convert", "imagenet", train, o, "--shards", 2, "--quality", 80)
    expect(r.returncode == 2 and "another conversion" in r.stderr, f"another quality not refused: {r.stderr}")


def check_disk_full(m, d, train, expect):
    w = os.path.join(d, "wfail")
    r = run(m, "convert", "imagenet", train, w, "--resize", S, "--codec", "raw", "--shards", 2, limit=30_000)
    left = sorted(os.listdir(w)) if os.path.isdir(w) else []
    expect(r.returncode == 1 and ".partial" in r.stderr and ("writing sample" in r.stderr or "records" in r.stderr),
           f"a failed write: exit {r.returncode}, {r.stderr[-500:]}")
    expect("index.json" not in left and not any(".partial" in f or "spool" in f for f in left),
           f"a failed write left {left}")
    r = run(m, "convert", "imagenet", train, w, "--resize", S, "--codec", "raw", "--shards", 2)
    expect(r.returncode == 0, f"the conversion after the failure: {r.stdout} {r.stderr}")
    # the same, failing where the spooled records are copied into the shard: a limit between the
    # records' size (the spool fits) and the shard's
    shard = os.path.join(w, "shard-00000-of-00002.h5")
    with h5py.File(shard, "r") as f:
        rec = int(f["offsets"][-1])
    w2 = os.path.join(d, "wfail2")
    r = run(m, "convert", "imagenet", train, w2, "--resize", S, "--codec", "raw", "--shards", 2,
            limit=(rec + os.path.getsize(shard)) // 2)
    left = sorted(os.listdir(w2)) if os.path.isdir(w2) else []
    expect(r.returncode == 1 and "shard-00000-of-00002.h5.partial: writing its records failed" in r.stderr,
           f"a failed copy of the records: exit {r.returncode}, {r.stderr[-500:]}")
    expect(left == [], f"a failed copy of the records left {left}")
    tiny = os.path.join(d, "tiny")
    os.makedirs(tiny)
    if os.geteuid() == 0 and shutil.which("mount") and \
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", tiny]).returncode == 0:
        try:
            r = run(m, "convert", "imagenet", train, os.path.join(tiny, "out"), "--resize", 256, "--codec", "raw")
            expect(r.returncode == 2 and "free" in r.stderr and "need about" in r.stderr and
                   os.listdir(os.path.join(tiny, "out")) == [], f"a full disk: {r.returncode} {r.stderr}")
            print("  a directory without room: refused before anything was written")
        finally:
            subprocess.run(["umount", tiny])
    else:
        print("note: not root (or no mount): the tmpfs case is left out")


def check_usage(m, d, train, expect):
    o = os.path.join(d, "usage")
    for args, why in ((["--size", S, "--codec", "raw"], "format 3's"), (["--resize", S, "--max-side", S - 1], "--max-side"),
                      (["--codec", "raw", "--quality", 80], "--quality"), (["--codec", "png"], "codec")):
        r = run(m, "convert", "imagenet", train, o, *args)
        expect(r.returncode == 2 and why in r.stderr and not os.path.exists(o), f"{args}: {r.returncode} {r.stderr}")
    r = run(m, "convert", "imagenet", "--help")
    expect(r.returncode == 0 and "--resize" in r.stdout and "never enlarged" in r.stdout and "--max-side" in r.stdout
           and "RGB" in r.stdout, f"convert imagenet --help: {r.stdout}")
    r = run(m, "convert", "--help")
    expect("idx and synth write format 2" in r.stdout, f"convert --help: {r.stdout}")


def main():
    m = sys.argv[1]
    rng = np.random.default_rng(5)
    fails = []

    def expect(cond, what):
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        train = os.path.join(d, "train")
        files = make_tree(train, rng)
        out, idx = check_contents(m, d, train, files, expect)
        check_inspect(m, out, idx, expect)
        check_reruns(m, d, train, out, expect)
        check_disk_full(m, d, train, expect)
        check_usage(m, d, train, expect)
    for f in fails:
        print("FAIL:", f)
    print(f"convert_format3: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
