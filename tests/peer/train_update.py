#!/usr/bin/python3
"""The trainer's update, end to end: `mntrain train` itself runs 8 steps from --init weights with a
checkpoint after every step, and every step's change of every parameter (and its momentum) is
checked against an independent float64 computation in PyTorch from the same state.

    train_update.py MNTRAIN [CASE ...]      cases: sgd-step, sgd-cosine, lars-poly (default: all)

The input does not depend on the augmentation: the images (8x8 grey, IDX converted by `mntrain
convert idx`) are mirror images, and --min-crop 1 makes RandomResizedCrop take the whole image, so
the reference needs only the sample ids of each step (--sample-log), the shard's pixels and labels
and index.json's mean/std. From mntrain's state after k steps (the checkpoint's weights and
momentum: no drift of float32 against float64 accumulates over the steps; a ResNet on 512 random
labels is chaotic enough that 2e-5 of difference in the start weights moves the 8th step by 40%),
the reference computes the ResNet-8 forward and backward on batch k in float64 (batch-norm over
the batch, as mntrain's one rank), cross-entropy with the label smoothing asked, and the step with
its learning rate from the documented schedule (linear scaling per 256 images, linear warm-up from
the base rate, then step / cosine / poly decay), written here from the formulas, not from
mntrain's code:
  - sgd: torch.optim.SGD (momentum, dampening 0) with mntrain's momentum buffer, weight decay on
    every tensor, or with --no-bn-decay none on biases and batch-norm parameters;
  - lars: You et al.'s trust ratio per weight tensor as MLPerf's ResNet-50 reference applies it,
    biases and batch-norm parameters by momentum SGD without decay (written out below).
Each tensor's error is |d_mntrain - d_ref| / |d_ref| (2-norms) of the step's change and of the
momentum; all must stay under TOL (float32 against float64 gives at most 5e-3 here; dropping weight
decay gives 5e-2, ignoring label smoothing 0.1, anything else more). The lars case is also stopped
after 4 steps (exit 3) and resumed: its final weights must equal the uninterrupted run's bit for
bit. Exit 0 when all hold, 1 otherwise, 77 without torch/h5py.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-torch python3-h5py)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_resnet import ResNet8  # noqa: E402  (the torchvision-style twin of mntrain's resnet8)

N, SIZE, CLASSES, BATCH, STEPS = 1024, 8, 10, 512, 8
TOL = 1.5e-2

# what each case runs: mntrain's flags and the reference's reading of them
CASES = {
    "sgd-step": dict(optimizer="sgd", schedule="step", lr=0.2, warmup=1.5, momentum=0.9, wd=5e-3, no_bn_decay=True,
                     smoothing=0.1),
    "sgd-cosine": dict(optimizer="sgd", schedule="cosine", lr=0.3, warmup=0.0, momentum=0.8, wd=1e-2,
                       no_bn_decay=False, smoothing=0.0),
    "lars-poly": dict(optimizer="lars", schedule="poly", lr=4.0, warmup=1.0, momentum=0.9, wd=5e-3, no_bn_decay=False,
                      smoothing=0.1, eta=0.01),
    "sgd-slow-start": dict(optimizer="sgd", schedule="slow-start", lr=0.4, warmup=0.5, momentum=0.9, wd=5e-3,
                           no_bn_decay=True, smoothing=0.0),
}


def write_idx(path, arr):
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, arr.ndim]))
        for d in arr.shape:
            f.write(int(d).to_bytes(4, "big"))
        f.write(arr.tobytes())


def lr_at(c, step, per_epoch, total):
    """the learning rate of the step taken after `step` steps (mntrain train --help, optim.h)"""
    B, epoch = BATCH, step / per_epoch
    peak = c["lr"] * B / 256.0
    w = c["warmup"]
    if w > 0 and epoch < w:
        start = peak * (256.0 / B if B > 256 else 1.0)
        return start + (peak - start) * epoch / w
    E = total / per_epoch
    T = E if E > w else w + 1
    t = min((epoch - w) / (T - w), 1.0)
    if c["schedule"] == "cosine":
        return 0.5 * peak * (1 + math.cos(math.pi * t))
    if c["schedule"] == "poly":
        return peak * (1 - t) ** 2
    f, lr = epoch / T, peak
    if c["schedule"] == "slow-start":  # Akiba et al. 2017: 40, 30, 15 and 5 of 90 epochs
        return peak * (0.5 if f < 40 / 90 else 0.075 if f < 70 / 90 else 0.01 if f < 85 / 90 else 0.001)
    for cut in (1 / 3, 2 / 3, 8 / 9):
        if f >= cut:
            lr *= 0.1
    return lr


def excluded(name):
    """biases and batch-norm parameters (mntrain's no_decay set, named the torchvision way)"""
    return name.endswith(".bias") or ".bn" in "." + name or "downsample.1." in name


def reference_step(c, w, m, k, ids, pixels, labels, mean, std, per_epoch):
    """one step from mntrain's state after k steps (weights w, momentum m: float64 arrays by name),
    in float64: the gradient of the loss on batch ids, then the optimizer -> (new w, new m)"""
    model = ResNet8(CLASSES).double()
    sd = model.state_dict()
    for n in w:
        sd[n] = torch.from_numpy(w[n])
    model.load_state_dict(sd)
    model.train()  # batch-norm over the batch, as mntrain's one rank (--bn-batch = the batch)
    g = pixels[ids].astype(np.float64) / 255.0  # [n, S, S], grey into three channels
    x = torch.from_numpy((g[:, None] - mean[None, :, None, None]) / std[None, :, None, None])
    y = torch.from_numpy(labels[ids].astype(np.int64))
    nn.CrossEntropyLoss(label_smoothing=c["smoothing"])(model(x), y).backward()
    params = dict(model.named_parameters())
    lr = lr_at(c, k, per_epoch, STEPS)
    if c["optimizer"] == "sgd":
        skip = c["no_bn_decay"]
        decay = [p for n, p in params.items() if not (skip and excluded(n))]
        nodecay = [p for n, p in params.items() if skip and excluded(n)]
        opt = torch.optim.SGD([{"params": decay, "weight_decay": c["wd"]}, {"params": nodecay, "weight_decay": 0.0}],
                              lr=lr, momentum=c["momentum"])
        if k > 0:  # the buffer mntrain carries (torch starts it as the first step's gradient, as mntrain)
            for n, p in params.items():
                opt.state[p]["momentum_buffer"] = torch.from_numpy(m[n].copy())
        opt.step()
        return ({n: p.detach().numpy().copy() for n, p in params.items()},
                {n: opt.state[p]["momentum_buffer"].numpy().copy() for n, p in params.items()})
    nw, nm = {}, {}
    for n, p in params.items():  # LARS: the step itself is the buffer (lr inside)
        wt, gt = p.detach().numpy(), p.grad.numpy()
        if excluded(n):
            d = lr * gt
        else:
            wn, gn = np.linalg.norm(wt), np.linalg.norm(gt)
            trust = c["eta"] * wn / (gn + c["wd"] * wn) if wn > 0 and gn > 0 else 1.0
            d = lr * trust * (gt + c["wd"] * wt)
        v = d if k == 0 else c["momentum"] * m[n] + d
        nw[n], nm[n] = wt - v, v
    return nw, nm


def load(path, group="model"):
    out = {}
    with h5py.File(path, "r") as f:
        f[group].visititems(lambda n, o: out.__setitem__(n, np.array(o, dtype=np.float64))
                            if isinstance(o, h5py.Dataset) else None)
    return out


def run(cmd, ok=(0,)):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in ok:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    return p


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    mntrain, names = sys.argv[1], sys.argv[2:] or list(CASES)
    rng = np.random.default_rng(5)
    half = rng.integers(0, 256, (N, SIZE, SIZE // 2))
    img = np.concatenate([half, half[:, :, ::-1]], axis=2)  # mirror images: a flip changes nothing
    lab = rng.integers(0, CLASSES, N)
    fails = []
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.pop("SLURM_JOB_ID", None)
    with tempfile.TemporaryDirectory() as d:
        write_idx(f"{d}/img", img)
        write_idx(f"{d}/lab", lab)
        data = f"{d}/data"
        run([mntrain, "convert", "idx", f"{d}/img", f"{d}/lab", data, "--shards", "1"])
        index = json.load(open(f"{data}/index.json"))
        mean, std = np.array(index["mean"], dtype=np.float64), np.array(index["std"], dtype=np.float64)
        with h5py.File(os.path.join(data, index["shards"][0]["file"]), "r") as f:
            pixels = np.array(f["images"][:, :, :, 0])
            labels = np.array(f["labels"][:])
        mean, std = np.resize(mean, 3), np.resize(std, 3)  # a grey image feeds all three input channels
        base = [mntrain, "train", "--data", data, "--arch", "resnet8", "--size", str(SIZE), "--batch-per-rank",
                str(BATCH), "--loader-threads", "1", "--threads", "2", "--log-every", "1", "--min-crop", "1"]
        # the start: a step at lr 0 without decay changes no weight (momentum is not kept: --init)
        run(base + ["--steps", "1", "--lr", "0", "--wd", "0", "--out", f"{d}/w0", "--export", f"{d}/w0.h5"], )
        w0 = load(f"{d}/w0.h5")
        per_epoch = N // BATCH
        for name in names:
            c = CASES[name]
            out = f"{d}/{name}"
            flags = ["--steps", str(STEPS), "--lr", str(c["lr"]), "--warmup-epochs", str(c["warmup"]), "--schedule",
                     c["schedule"], "--momentum", str(c["momentum"]), "--wd", str(c["wd"]), "--label-smoothing",
                     str(c["smoothing"]), "--optimizer", c["optimizer"], "--init", f"{d}/w0.h5", "--sample-log",
                     "--ckpt-every-steps", "1", "--keep", str(STEPS + 1)]
            if c["no_bn_decay"]:
                flags.append("--no-bn-decay")
            if "eta" in c:
                flags += ["--lars-eta", str(c["eta"])]
            run(base + flags + ["--out", out, "--export", f"{out}.h5"])
            batches = []
            for line in open(f"{out}/samples-rank-00000.txt"):
                f = line.split()
                batches.append(np.array([int(s) for s in f[1:]]))
            if len(batches) != STEPS or any(len(b) != BATCH for b in batches):
                fails.append(f"{name}: the sample log has {len(batches)} steps, not {STEPS} of {BATCH}")
                continue
            w, m = w0, {n: np.zeros_like(v) for n, v in w0.items()}
            worst = (0.0, "")
            for k in range(STEPS):
                state = f"{out}/ckpt/step-{k + 1:08d}/state.h5"
                w1, m1 = load(state), load(state, "optim/momentum")
                rw, rm = reference_step(c, w, m, k, batches[k], pixels, labels, mean, std, per_epoch)
                for t in rw:
                    for what, got, want in (("update", w1[t] - w[t], rw[t] - w[t]), ("momentum", m1[t], rm[t])):
                        scale = float(np.linalg.norm(want))
                        err = float(np.linalg.norm(got - want)) / max(scale, 1e-30)
                        if scale == 0 and float(np.max(np.abs(got))) == 0:
                            err = 0.0
                        worst = max(worst, (err, f"step {k + 1} {t} {what}"))
                        if not err <= TOL:
                            fails.append(f"{name}: step {k + 1}: {t}: its {what} is {err:.2e} off the float64 "
                                         f"reference (max |{what}| {scale:.3e}; tolerance {TOL:g})")
                w, m = w1, m1  # the next step starts where mntrain is: no drift accumulates
            print(f"{name}: {len(w0)} tensors x {STEPS} steps, worst {worst[0]:.2e} ({worst[1]})")
            if c["optimizer"] == "lars":  # exact resume: stopped after 4 steps, resumed, the same bits
                ck = f"{d}/{name}-resumed"
                cmd = base + flags + ["--out", ck, "--export", f"{ck}.h5"]
                run(cmd + ["--stop-after", "4"], ok=(3,))
                run(cmd)
                a, b = load(f"{out}.h5"), load(f"{ck}.h5")
                same = all(np.array_equal(a[t], b[t]) for t in a)
                print(f"{name}: stopped after 4 steps and resumed: final weights "
                      f"{'bit-identical' if same else 'DIFFERENT'}")
                if not same:
                    fails.append(f"{name}: a resumed run's weights differ from the uninterrupted run's")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
