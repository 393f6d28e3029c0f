#!/usr/bin/python3
"""The trainer's update, end to end: `mntrain train` itself runs 8 steps from --init weights with a
checkpoint after every step, and every step's change of every parameter (and its momentum) is
checked against an independent float64 computation in PyTorch from the same state.

    train_update.py MNTRAIN [CASE ...]      cases: sgd-step, sgd-cosine, lars-poly, sgd-slow-start,
                                            sgd-bn-last, rmsprop-recompute (default: all)

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
    biases and batch-norm parameters by momentum SGD without decay (written out below);
  - rmsprop-warmup: Akiba et al.'s blend (arXiv 1711.04325) as `mntrain train --help` states it,
    its second moment read from the checkpoints (/optim/second_moment) like the momentum.
The batch-norm statistics a finished run keeps are checked too: --bn-eval last, the batch-norm
layers' batch mean and unbiased variance of the last step's batch through the weights it was
trained with; --bn-eval recompute, the mean of those over the batches of the last N steps through
the final weights (hooks on the reference's BatchNorm2d inputs, in float64).
Each tensor's error is |d_mntrain - d_ref| / |d_ref| (2-norms) of the step's change and of the
momentum; all must stay under TOL (float32 against float64 gives at most 5e-3 here; dropping weight
decay gives 5e-2, ignoring label smoothing 0.1, anything else more). The lars and rmsprop cases are
also stopped after 4 steps (exit 3) and resumed: their final weights (and batch-norm statistics)
must equal the uninterrupted run's bit for bit. Exit 0 when all hold, 1 otherwise, 77 without torch/h5py.
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
    "sgd-bn-last": dict(optimizer="sgd", schedule="cosine", lr=0.2, warmup=0.0, momentum=0.9, wd=5e-3,
                        no_bn_decay=True, smoothing=0.0, bn="last"),
    # 8 steps are 4 epochs: the blend runs from a_sgd = exp(-1)/2 at epoch 0 to 1 at epoch 2
    "rmsprop-recompute": dict(optimizer="rmsprop-warmup", schedule="slow-start", lr=0.4, warmup=0.0, momentum=0.9,
                              wd=5e-3, no_bn_decay=False, smoothing=0.0, rms=(1.0, 2.0), rms_lr=0.01,
                              bn="recompute", bn_batches=3),
}
RMS_MU2, RMS_EPS = 0.99, 1e-8


def rms_alpha(c, epoch, lr):
    """a_sgd and a_rms of the blend at a (fractional) epoch (mntrain train --help: --rmsprop-warmup)"""
    C, P = c["rms"]
    a = 0.5 * math.exp(2 * (epoch - C) / P) if epoch < C else min(1.0, 0.5 + (epoch - C) / P)
    return a, ((1 - a) * c["rms_lr"] / lr if lr > 0 else 0.0)


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


def reference_model(w):
    model = ResNet8(CLASSES).double()
    sd = model.state_dict()
    for n in w:
        sd[n] = torch.from_numpy(w[n])
    model.load_state_dict(sd)
    model.train()  # batch-norm over the batch, as mntrain's one rank (--bn-batch = the batch)
    return model


def batch_input(ids, pixels, mean, std):
    g = pixels[ids].astype(np.float64) / 255.0  # [n, S, S], grey into three channels
    return torch.from_numpy((g[:, None] - mean[None, :, None, None]) / std[None, :, None, None])


def reference_bn(w, batches, pixels, mean, std):
    """the mean over batches of each batch-norm layer's batch mean and unbiased variance, through
    weights w, in float64: {"<layer>.running_mean": ..., "<layer>.running_var": ...}"""
    model, sums = reference_model(w), {}

    def hook(name):
        def f(mod, inp, out):
            x = inp[0].detach()
            mu, var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=True)
            for key, v in ((f"{name}.running_mean", mu), (f"{name}.running_var", var)):
                sums[key] = sums.get(key, 0) + v.numpy() / len(batches)
        return f

    for name, mod in model.named_modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.register_forward_hook(hook(name))
    with torch.no_grad():
        for ids in batches:
            model(batch_input(ids, pixels, mean, std))
    return sums


def gradients(w, ids, pixels, labels, mean, std, smoothing):
    """the parameters by name, their .grad the loss's gradient on batch ids at weights w (float64)"""
    model = reference_model(w)
    x = batch_input(ids, pixels, mean, std)
    y = torch.from_numpy(labels[ids].astype(np.int64))
    nn.CrossEntropyLoss(label_smoothing=smoothing)(model(x), y).backward()
    return dict(model.named_parameters())


def reference_step(c, w, m, v, k, ids, pixels, labels, mean, std, per_epoch):
    """one step from mntrain's state after k steps (weights w, momentum m, second moment v: float64
    arrays by name), in float64: the gradient of the loss on batch ids, then the optimizer ->
    (new w, new m, new v)"""
    params = gradients(w, ids, pixels, labels, mean, std, c["smoothing"])
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
                {n: opt.state[p]["momentum_buffer"].numpy().copy() for n, p in params.items()}, {})
    nw, nm, nv = {}, {}, {}
    if c["optimizer"] == "rmsprop-warmup":  # Akiba et al.: m is their -Delta, v their m_t
        a_sgd, a_rms = rms_alpha(c, k / per_epoch, lr)
        for n, p in params.items():
            wt, gt = p.detach().numpy(), p.grad.numpy()
            d = gt + (0.0 if excluded(n) else c["wd"]) * wt
            vv = (1 - RMS_MU2) * d * d + (0.0 if k == 0 else RMS_MU2 * v[n])
            s = (a_sgd + a_rms / (np.sqrt(vv) + RMS_EPS)) * d
            mm = s if k == 0 else c["momentum"] * m[n] + s
            nw[n], nm[n], nv[n] = wt - lr * mm, mm, vv
        return nw, nm, nv
    for n, p in params.items():  # LARS: the step itself is the buffer (lr inside)
        wt, gt = p.detach().numpy(), p.grad.numpy()
        if excluded(n):
            d = lr * gt
        else:
            wn, gn = np.linalg.norm(wt), np.linalg.norm(gt)
            trust = c["eta"] * wn / (gn + c["wd"] * wn) if wn > 0 and gn > 0 else 1.0
            d = lr * trust * (gt + c["wd"] * wt)
        u = d if k == 0 else c["momentum"] * m[n] + d
        nw[n], nm[n] = wt - u, u
    return nw, nm, nv


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
            if "rms" in c:
                flags += ["--rmsprop-warmup", "%g:%g" % c["rms"], "--rmsprop-lr", str(c["rms_lr"])]
            if "bn" in c:
                flags += ["--bn-eval", c["bn"]]
            if "bn_batches" in c:
                flags += ["--bn-recompute-batches", str(c["bn_batches"])]
            run(base + flags + ["--out", out, "--export", f"{out}.h5"])
            batches = []
            for line in open(f"{out}/samples-rank-00000.txt"):
                f = line.split()
                batches.append(np.array([int(s) for s in f[1:]]))
            if len(batches) != STEPS or any(len(b) != BATCH for b in batches):
                fails.append(f"{name}: the sample log has {len(batches)} steps, not {STEPS} of {BATCH}")
                continue
            w, m = w0, {n: np.zeros_like(x) for n, x in w0.items()}
            v = dict(m)
            rms = c["optimizer"] == "rmsprop-warmup"
            worst = (0.0, "")
            states, masked = [], 0
            for k in range(STEPS):
                state = f"{out}/ckpt/step-{k + 1:08d}/state.h5"
                w1, m1 = load(state), load(state, "optim/momentum")
                v1 = load(state, "optim/second_moment") if rms else {}
                rw, rm, rv = reference_step(c, w, m, v, k, batches[k], pixels, labels, mean, std, per_epoch)
                for t in rw:
                    checks = [("update", w1[t] - w[t], rw[t] - w[t]), ("momentum", m1[t], rm[t])]
                    if rms:
                        checks.append(("second moment", v1[t], rv[t]))
                    for what, got, want in checks:
                        if rms:  # RMSprop's steps are about the same size whatever the gradient's: the
                            # few elements whose gradient float32 cannot resolve (cancellation in the
                            # sums over the batch) get an arbitrary one in any float32 trainer (one of
                            # 1.5e-6, 1.2e-4 of its tensor's largest, came out with the other sign):
                            # the worst 0.5% of each tensor's elements are left out (a wrong formula
                            # moves them all)
                            diff = np.abs(got - want).ravel()
                            cut = int(math.ceil(0.005 * diff.size))
                            keep = np.argsort(diff)[:diff.size - cut]
                            masked += cut
                            got, want = got.ravel()[keep], want.ravel()[keep]
                        scale = float(np.linalg.norm(want))
                        err = float(np.linalg.norm(got - want)) / max(scale, 1e-30)
                        if scale == 0 and float(np.max(np.abs(got))) == 0:
                            err = 0.0
                        worst = max(worst, (err, f"step {k + 1} {t} {what}"))
                        if not err <= TOL:
                            fails.append(f"{name}: step {k + 1}: {t}: its {what} is {err:.2e} off the float64 "
                                         f"reference (max |{what}| {scale:.3e}; tolerance {TOL:g})")
                states.append(w)
                w, m, v = w1, m1, v1  # the next step starts where mntrain is: no drift accumulates
            print(f"{name}: {len(w0)} tensors x {STEPS} steps, worst {worst[0]:.2e} ({worst[1]})"
                  + (f"; {masked} of the elements' steps compared were the worst 0.5% of each tensor, left out" if rms else ""))
            if "bn" in c:  # the statistics the finished run keeps (its last checkpoint), against the reference
                if c["bn"] == "last":  # the last step's batch, through the weights it was trained with
                    want = reference_bn(states[-1], batches[-1:], pixels, mean, std)
                else:  # the last N steps' batches, through the final weights
                    want = reference_bn(w, batches[-c["bn_batches"]:], pixels, mean, std)
                got = load(f"{out}/ckpt/step-{STEPS:08d}/state.h5", "bn")
                bad = 0.0
                for t, x in want.items():
                    err = float(np.linalg.norm(got[t] - x)) / max(float(np.linalg.norm(x)), 1e-30)
                    bad = max(bad, err)
                    if not err <= 1e-4:
                        fails.append(f"{name}: --bn-eval {c['bn']}: {t} is {err:.2e} off the reference's statistics")
                print(f"{name}: --bn-eval {c['bn']}: {len(want)} statistics, worst {bad:.2e}")
            if c["optimizer"] in ("lars", "rmsprop-warmup"):  # exact resume: stopped after 4 steps, resumed, the same bits
                ck = f"{d}/{name}-resumed"
                cmd = base + flags + ["--out", ck, "--export", f"{ck}.h5"]
                run(cmd + ["--stop-after", "4"], ok=(3,))
                run(cmd)
                a, b = load(f"{out}.h5"), load(f"{ck}.h5")
                same = all(np.array_equal(a[t], b[t]) for t in a)
                a, b = load(f"{out}.h5", "bn"), load(f"{ck}.h5", "bn")
                same = same and all(np.array_equal(a[t], b[t]) for t in a)
                print(f"{name}: stopped after 4 steps and resumed: final weights "
                      f"{'bit-identical' if same else 'DIFFERENT'}")
                if not same:
                    fails.append(f"{name}: a resumed run's weights differ from the uninterrupted run's")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
