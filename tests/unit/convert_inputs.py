#!/usr/bin/python3
"""`mntrain convert imagenet` on hostile or unusual inputs made here: one case per run, each its own
CTest test.
- decode_memory: a 1.7 kB progressive JPEG whose frame header claims 32768x32768 (libjpeg would keep
  every DCT coefficient: 3.2 GB) and one claiming 16384x16384 (805 MB) are skipped before decoding,
  named, with the cap (MNT_DECODE_MAX_BYTES) in the reason, counted in the summary line; the run
  takes seconds and its peak RSS stays under 300 MB. A real 2000x1500 progressive 4:4:4 JPEG (18 MB
  of coefficients) converts by default and is skipped under MNT_DECODE_MAX_BYTES=16M; a bad value of
  the variable is refused (exit 2) before anything is written.
- png16: PNGs of 16 bits per sample (grey, grey+alpha, RGB, RGBA), each without gAMA, with gAMA 1.0
  and with gAMA 1/2.2, 16-bit RGB interlaced (Adam7), 8-bit grey and RGB with gAMA 1.0, a palette with
  tRNS, 1-, 2- and 4-bit grey: the stored pixels (format 3 raw, kept at their size) equal PIL's
  Image.open(f).convert("RGB") within 1 grey level. PIL clips a 16-bit grey PNG's levels to 0..255
  (convert("RGB") of mode I): stored the same, with a warning naming the file when levels were clipped.
- class_names: a class folder whose name is not UTF-8 (Latin-1 "caf\\xe9") is refused with exit 2
  naming it hex-escaped, before anything is written; so is such a class name in a --labels file; a
  source folder whose path is not UTF-8 is converted, its path hex-escaped in index.json's "source".
- links: a dangling link with an image's name is named and counted among the skipped files; loops
  (c0/self -> ., c0/sub/up -> ..) are not followed, each named in a warning, so every image is
  converted once; a link to a folder outside the tree is still followed.
- png_size: a PNG whose header says 100000x100000 is refused at its header with its true size.
usage: convert_inputs.py path/to/mntrain CASE"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import h5py
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py python3-pil python3-numpy)")
    sys.exit(77)


def run(*args, env=None):
    """(exit code, stdout, stderr, seconds, peak RSS in MB) of one command, its own rusage (wait4); a byte
    that is not UTF-8 reads as U+FFFD, so a name escaped by mntrain is told from one printed raw"""
    e = dict(os.environ, **(env or {}))
    with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as er:
        t = time.time()
        p = subprocess.Popen([os.fsencode(a) for a in args], stdout=o, stderr=er, env=e)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        secs = time.time() - t
        o.seek(0)
        er.seek(0)
        text = [f.read().decode(errors="replace") for f in (o, er)]
        return p.returncode, text[0], text[1], secs, ru.ru_maxrss / 1024


def convert(m, src, out, *more, env=None):
    """run's answer for convert imagenet SRC OUT --shards 1 MORE..."""
    return run(m, "convert", "imagenet", src, out, "--shards", "1", *more, env=env)


def picture(rng, w, h):
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * 3 + yy) % 256, (yy * 2 + 40) % 256, (xx + yy * 2) % 256], -1)
    return Image.fromarray((arr + rng.integers(0, 20, arr.shape)).clip(0, 255).astype(np.uint8))


def records(out):
    """{source index: H x W x 3 uint8} of a format 3 raw conversion"""
    index = json.load(open(os.path.join(out, "index.json")))
    recs = {}
    for sh in index["shards"]:
        with h5py.File(os.path.join(out, sh["file"]), "r") as f:
            data, off, shapes, src = f["records"][:].tobytes(), f["offsets"][:], f["shapes"][:], f["source_index"][:]
            for i in range(len(src)):
                recs[int(src[i])] = np.frombuffer(data[off[i]:off[i + 1]], np.uint8).reshape(shapes[i])
    return index, recs


def said(err, path, *words):
    """a line of err names path and says every word"""
    return any(path in line and all(w in line for w in words) for line in err.splitlines())


# ---- decode_memory ---------------------------------------------------------------------------------
def sof_patched(path, w, h, rng):
    """a small progressive JPEG (4:2:0) whose frame header (SOF2) is patched to claim w x h"""
    tmp = path + ".tmp"
    picture(rng, 64, 64).save(tmp, "JPEG", progressive=True, quality=90)
    data = bytearray(open(tmp, "rb").read())
    os.unlink(tmp)
    i = data.index(b"\xff\xc2")  # SOF2: length(2) precision(1) height(2) width(2)
    data[i + 5:i + 7] = h.to_bytes(2, "big")
    data[i + 7:i + 9] = w.to_bytes(2, "big")
    open(path, "wb").write(bytes(data))


def case_decode_memory(m, d, fails):
    rng = np.random.default_rng(6)
    train = os.path.join(d, "train")
    c0 = os.path.join(train, "c0")
    os.makedirs(c0)
    for i in range(3):
        picture(rng, 48, 40).save(os.path.join(c0, f"ok{i}.jpg"))
    huge, big = os.path.join(c0, "huge.jpg"), os.path.join(c0, "big.jpg")
    sof_patched(huge, 32768, 32768, rng)
    sof_patched(big, 16384, 16384, rng)
    rc, out, err, secs, rss = convert(m, train, os.path.join(d, "o1"), "--size", "32")
    print(f"decode_memory: two bombs: exit {rc}, {secs:.1f} s, peak RSS {rss:.0f} MB")
    if rc != 0:
        fails.append(f"convert with two JPEG bombs: exit {rc}: {err}")
    for p, size in ((huge, "32768x32768"), (big, "16384x16384")):
        if not said(err, p, size, "MNT_DECODE_MAX_BYTES", "skipped"):
            fails.append(f"{p} was not skipped naming its size and the cap: {err}")
    if "2 unreadable inputs skipped" not in out:
        fails.append(f"the summary line does not count the two skipped bombs: {out}")
    if secs > 15 or rss > 300:
        fails.append(f"the bombs were decoded: {secs:.1f} s, peak RSS {rss:.0f} MB (want < 15 s, < 300 MB)")
    # the cap is the variable's: a real progressive 4:4:4 photo of 2000x1500 needs 18 MB of coefficients
    real_tree = os.path.join(d, "real")
    os.makedirs(os.path.join(real_tree, "c0"))
    real = os.path.join(real_tree, "c0", "prog444.jpg")
    picture(rng, 2000, 1500).save(real, "JPEG", progressive=True, quality=80, subsampling=0)
    picture(rng, 40, 40).save(os.path.join(real_tree, "c0", "small.jpg"))
    rc, out, err, _, _ = convert(m, real_tree, os.path.join(d, "o2"), "--size", "32")
    if rc != 0 or "0 unreadable inputs skipped" not in out:
        fails.append(f"a 2000x1500 progressive JPEG under the default cap: exit {rc}: {out} {err}")
    rc, out, err, _, _ = convert(m, real_tree, os.path.join(d, "o3"), "--size", "32",
                                 env={"MNT_DECODE_MAX_BYTES": "16M"})
    if rc != 0 or "1 unreadable inputs skipped" not in out or not said(err, real, "2000x1500", "MNT_DECODE_MAX_BYTES"):
        fails.append(f"a 2000x1500 progressive JPEG under MNT_DECODE_MAX_BYTES=16M: exit {rc}: {out} {err}")
    o4 = os.path.join(d, "o4")
    rc, out, err, _, _ = convert(m, real_tree, o4, "--size", "32", env={"MNT_DECODE_MAX_BYTES": "lots"})
    if rc != 2 or "MNT_DECODE_MAX_BYTES" not in err or os.path.exists(o4):
        fails.append(f"MNT_DECODE_MAX_BYTES=lots: exit {rc} (want 2, nothing written): {err}")


# ---- png16 -----------------------------------------------------------------------------------------
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def png(path, a, ctype, depth, extra=b"", interlace=False, palette=None):
    """a PNG of a (H x W x channels, or H x W: samples of `depth` bits) written by hand: PIL writes no
    16-bit colour and no gAMA"""
    a = a if a.ndim == 3 else a[:, :, None]
    h, w = a.shape[:2]

    def rows(img):
        out = b""
        for y in range(img.shape[0]):
            if depth == 16:
                row = img[y].astype(">u2").tobytes()
            elif depth == 8:
                row = img[y].astype(np.uint8).tobytes()
            else:  # 1, 2, 4 bits, one channel
                bits = "".join(format(int(v), f"0{depth}b") for v in img[y, :, 0])
                bits += "0" * (-len(bits) % 8)
                row = int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""
            out += b"\0" + row
        return out

    if interlace:
        raw = b"".join(rows(a[y0::dy, x0::dx]) for x0, y0, dx, dy in ADAM7 if a[y0::dy, x0::dx].size)
    else:
        raw = rows(a)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0)
    plte = chunk(b"PLTE", palette) if palette else b""
    body = chunk(b"IHDR", ihdr) + extra + plte + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + body)


def gama(g):
    return chunk(b"gAMA", struct.pack(">I", g))


def case_png16(m, d, fails):
    rng = np.random.default_rng(7)
    train = os.path.join(d, "train")
    c0 = os.path.join(train, "c0")
    os.makedirs(c0)
    h, w = 20, 26
    yy, xx = np.mgrid[0:h, 0:w]
    files = {}
    for ctype, ch, kind in ((0, 1, "grey"), (4, 2, "greyalpha"), (2, 3, "rgb"), (6, 4, "rgba")):
        for tag, extra in (("plain", b""), ("gama1", gama(100000)), ("gama045", gama(45455))):
            a = (xx[..., None] * 2521 + yy[..., None] * 977 + rng.integers(0, 4000, (h, w, ch))) % 65536
            if kind == "grey" and tag == "plain":
                a = a % 256  # levels PIL does not clip: the same image
            name = f"{kind}16_{tag}.png"
            png(os.path.join(c0, name), a, ctype, 16, extra)
            files[name] = kind == "grey" and tag != "plain"  # a warning about clipped levels expected
    a = (xx[..., None] * 2521 + yy[..., None] * 977 + rng.integers(0, 4000, (h, w, 3))) % 65536
    png(os.path.join(c0, "rgb16_adam7.png"), a, 2, 16, interlace=True)
    png(os.path.join(c0, "grey8_adam7.png"), (a[..., 0] >> 8), 0, 8, gama(100000), interlace=True)
    png(os.path.join(c0, "grey8_gama1.png"), (xx * 9 + yy * 5) % 256, 0, 8, gama(100000))
    png(os.path.join(c0, "rgb8_gama1.png"), rng.integers(0, 256, (h, w, 3)), 2, 8, gama(100000))
    pal = bytes(rng.integers(0, 256, 3 * 16, dtype=np.uint8))
    png(os.path.join(c0, "palette_trns.png"), (xx + yy) % 16, 3, 8, chunk(b"tRNS", bytes(range(0, 256, 32))),
        palette=pal)
    for bits in (1, 2, 4):
        png(os.path.join(c0, f"grey{bits}.png"), (xx * 3 + yy) % (1 << bits), 0, bits)
    for n in ("rgb16_adam7.png", "grey8_adam7.png", "grey8_gama1.png", "rgb8_gama1.png", "palette_trns.png",
              "grey1.png", "grey2.png", "grey4.png"):
        files[n] = False
    out = os.path.join(d, "out")
    rc, so, err, _, _ = convert(m, train, out, "--resize", "64", "--codec", "raw")
    if rc != 0:
        fails.append(f"convert: exit {rc}: {so} {err}")
        return
    names = sorted(files)
    _, recs = records(out)
    worst = 0
    for i, name in enumerate(names):
        path = os.path.join(c0, name)
        want = np.asarray(Image.open(path).convert("RGB"), dtype=np.int64)
        got = recs.get(i)
        if got is None or got.shape != want.shape:
            fails.append(f"{name}: stored {None if got is None else got.shape}, PIL {want.shape}")
            continue
        diff = int(np.abs(got.astype(np.int64) - want).max())
        worst = max(worst, diff)
        if diff > 1:
            fails.append(f"{name} ({Image.open(path).mode}): differs from PIL's convert('RGB') by up to {diff} "
                         f"(mean {np.abs(got - want).mean():.1f})")
        if said(err, path, "16-bit grey", "clipped") != files[name]:
            fails.append(f"{name}: {'no' if files[name] else 'a'} warning about clipped levels: {err}")
    print(f"png16: {len(names)} PNGs, worst difference to PIL {worst}")


# ---- class_names -----------------------------------------------------------------------------------
def case_class_names(m, d, fails):
    rng = np.random.default_rng(8)
    train = os.path.join(d, "train").encode()
    for c in (b"good", b"caf\xe9"):
        os.makedirs(os.path.join(train, c))
        picture(rng, 40, 40).save(os.path.join(train, c, b"a.jpg"), "JPEG")
    out = os.path.join(d, "out")
    rc, so, err, _, _ = convert(m, train, out, "--size", "32")
    if rc != 2 or "caf\\xe9" not in err or "UTF-8" not in err or os.path.exists(out):
        fails.append(f"a class folder named caf\\xe9: exit {rc} (want 2 naming it, nothing written; "
                     f"{os.listdir(out) if os.path.exists(out) else 'no output'}): {so} {err}")
    # the same name from a labels file (the flat validation layout)
    val = os.path.join(d, "val")
    os.makedirs(val)
    picture(rng, 40, 40).save(os.path.join(val, "x.jpg"))
    picture(rng, 40, 40).save(os.path.join(val, "y.jpg"))
    labels = os.path.join(d, "labels.txt")
    open(labels, "wb").write(b"x.jpg good\ny.jpg caf\xe9\n")
    vout = os.path.join(d, "vout")
    rc, so, err, _, _ = convert(m, val, vout, "--size", "32", "--val", "--labels", labels)
    if rc != 2 or "caf\\xe9" not in err or os.path.exists(vout):
        fails.append(f"a class named caf\\xe9 in a labels file: exit {rc} (want 2 naming it, nothing written): "
                     f"{so} {err}")
    # a source folder whose path is not UTF-8: converted, its path in index.json's "source" hex-escaped
    src = os.path.join(d, "src\xff").encode("latin-1")
    os.makedirs(os.path.join(src, b"good"))
    picture(rng, 40, 40).save(os.path.join(src, b"good", b"a.jpg"), "JPEG")
    sout = os.path.join(d, "sout")
    rc, so, err, _, _ = convert(m, src, sout, "--size", "32")
    index = json.load(open(os.path.join(sout, "index.json"))) if rc == 0 else {}
    if rc != 0 or "src\\xff" not in index.get("source", ""):
        fails.append(f"a source path that is not UTF-8: exit {rc}, index.json's source {index.get('source')}: {err}")


# ---- links -----------------------------------------------------------------------------------------
def case_links(m, d, fails):
    rng = np.random.default_rng(9)
    train = os.path.join(d, "train")
    c0, c1, other = os.path.join(train, "c0"), os.path.join(train, "c1"), os.path.join(d, "elsewhere")
    os.makedirs(os.path.join(c0, "sub"))
    os.makedirs(c1)
    os.makedirs(other)
    for i in range(5):
        picture(rng, 40 + i, 36).save(os.path.join(c0, f"a{i}.jpg"))
    for i in range(2):
        picture(rng, 36, 40 + i).save(os.path.join(c0, "sub", f"b{i}.png"))
    for i in range(3):
        picture(rng, 44, 44).save(os.path.join(c1, f"c{i}.jpg"))
    for i in range(2):
        picture(rng, 30, 50).save(os.path.join(other, f"e{i}.jpg"))
    os.symlink(".", os.path.join(c0, "self"))
    os.symlink("..", os.path.join(c0, "sub", "up"))
    os.symlink(other, os.path.join(c1, "more"))  # not a loop: followed
    broken = os.path.join(c0, "broken.jpg")
    os.symlink("no-such-file.jpg", broken)
    out = os.path.join(d, "out")
    rc, so, err, _, _ = convert(m, train, out, "--size", "32")
    if rc != 0:
        fails.append(f"convert: exit {rc}: {so} {err}")
        return
    index = json.load(open(os.path.join(out, "index.json")))
    if index["samples"] != 7 + 3 + 2:
        fails.append(f"{index['samples']} samples, want 12 (each image once): {err}")
    for link, target in ((os.path.join(c0, "self"), c0), (os.path.join(c0, "sub", "up"), c0)):
        if not said(err, link, "loop", target):
            fails.append(f"the loop {link} -> {target} was not named: {err}")
    if not said(err, broken, "dangling", "skipped"):
        fails.append(f"the dangling link {broken} was not named: {err}")
    if "1 unreadable inputs skipped" not in so or "13 image files" not in so:
        fails.append(f"the summary does not count the dangling link among 13 inputs, 1 skipped: {so}")


# ---- png_size --------------------------------------------------------------------------------------
def case_png_size(m, d, fails):
    train = os.path.join(d, "train")
    c0 = os.path.join(train, "c0")
    os.makedirs(c0)
    picture(np.random.default_rng(10), 40, 40).save(os.path.join(c0, "ok.png"))
    huge = os.path.join(c0, "huge.png")
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    open(huge, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                           + chunk(b"IEND", b""))
    rc, so, err, secs, _ = convert(m, train, os.path.join(d, "out"), "--size", "32")
    if rc != 0 or not said(err, huge, "100000x100000", "skipped") or "1 unreadable inputs skipped" not in so:
        fails.append(f"a PNG claiming 100000x100000: exit {rc}, {secs:.1f} s: {so} {err}")


CASES = {"decode_memory": case_decode_memory, "png16": case_png16, "class_names": case_class_names,
         "links": case_links, "png_size": case_png_size}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(__doc__)
        return 2
    m, case = sys.argv[1], sys.argv[2]
    fails = []
    with tempfile.TemporaryDirectory() as d:
        CASES[case](m, d, fails)
    for f in fails:
        print("FAIL:", f)
    print(f"convert_inputs {case}: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
