#!/usr/bin/python3
"""mntrain's bf16 step on the CPU against PyTorch's autocast (Debian python3-torch).

    peer_bf16.py PEER_RESNET_BINARY ARCH CLASSES SIZE BATCH

Runs PEER_RESNET_BINARY (tests/peer/peer_resnet.c) with --precision bf16: mntrain's initial weights,
an input batch, its logits, loss and every gradient of one bf16 step. Loads the weights into
torchvision's model (resnet8: peer_resnet.py's twin) and computes the same step three ways: in
float64 (the exact answer), and under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's bf16:
convolutions and the linear layer in bf16, batch norm and the loss in fp32) from fp32 weights.

Tolerance, per tensor, and why: two bf16 computations of the same step differ by their roundings,
which compound through the layers; how far a bf16 step is from the exact one is measured by
PyTorch's own autocast step on the same tensor. So mntrain's bf16 tensor must be within
3x autocast's distance from float64 of autocast's tensor, and of float64 (relative, in the 2-norm:
a ReLU or max-pool decision flipped by rounding moves single elements by percents, see
peer_resnet.py), with a floor of 1e-2 (bf16's 8 bits leave a step's gradients about 1% apart). A
wrong operation (a layout, a rounding in the wrong place, a gradient dropped) is off by far more:
a bf16 ReLU backward that let zeros through put 27 of ResNet-8's 31 tensors and 60 of ResNet-18's
64 over. Measured here: ResNet-8 (32 px, batch 8) median 0.045 from autocast, both 0.12 from
float64; ResNet-18 (64 px, batch 4) 0.22, both 0.33. ResNet-50 is not run: at random
initialisation on a few small images autocast's own gradients are 1.2 from float64 (median), so
the check could tell nothing apart there (its fp32 step is peer_resnet.py's).
Exit 0 when all hold, 1 otherwise, 77 when torch or bf16 on this CPU is missing.
"""
import importlib.util
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
    print(f"SKIP: {e} (apt-get install python3-torch python3-torchvision python3-h5py)")
    sys.exit(77)

spec = importlib.util.spec_from_file_location("peer_resnet", os.path.join(os.path.dirname(__file__), "peer_resnet.py"))
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    binary, arch, classes, size, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.manual_seed(0)
    torch.set_num_threads(2)
    fails, rows = [], []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "peer.h5")
        r = subprocess.run([binary, arch, str(classes), str(size), str(batch), "0", path, "bf16"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            if "needs AVX-512" in r.stderr:
                print(f"SKIP: {r.stderr.strip()}")
                return 77
            print(r.stdout + r.stderr)
            return 1
        with h5py.File(path, "r") as f:
            x64 = torch.from_numpy(np.array(f["input"])).double()
            y = torch.from_numpy(np.array(f["labels"])).long()
            m = peer.build(arch, classes, f).double()
            mb = peer.build(arch, classes, f)
            m.train()
            mb.train()
            loss = nn.functional.cross_entropy(lg := m(x64), y)
            loss.backward()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lgb = mb(x64.float())
                lossb = nn.functional.cross_entropy(lgb.float(), y)
            lossb.backward()
            tensors = [("logits", np.array(f["logits"]), lgb.detach().float().numpy(), lg.detach().numpy()),
                       ("loss", np.array(f["losses"])[:1], np.array([lossb.item()]), np.array([loss.item()]))]
            for (k, p), (_, pb) in zip(m.named_parameters(), mb.named_parameters()):
                tensors.append((f"grad {k}", np.array(f["grad"][k]), pb.grad.float().numpy(), p.grad.numpy()))
    for name, ours, auto, exact in tensors:
        e_auto = peer.rel_l2(auto, exact)          # autocast from the exact answer
        tol = max(1e-2, 3 * e_auto)
        e_vs_auto, e_vs_exact = peer.rel_l2(ours, auto), peer.rel_l2(ours, exact)
        rows.append((name, e_vs_auto, e_vs_exact, e_auto, tol))
        if not (e_vs_auto <= tol and e_vs_exact <= tol):
            fails.append(f"FAIL {arch} {name}: mntrain bf16 is {e_vs_auto:.3g} from autocast and {e_vs_exact:.3g} "
                         f"from float64; autocast is {e_auto:.3g} from float64 (tolerance {tol:.3g})")
    worst = max(rows, key=lambda r: r[1] / r[4])
    print(f"{arch} bf16 against autocast: {len(rows)} tensors, {len(fails)} failures; worst {worst[0]}: "
          f"{worst[1]:.3g} from autocast, {worst[2]:.3g} from float64 (autocast {worst[3]:.3g}; tolerance {worst[4]:.3g})")
    med = sorted(r[1] for r in rows)[len(rows) // 2]
    print(f"  median distance from autocast {med:.3g}; from float64: mntrain {sorted(r[2] for r in rows)[len(rows) // 2]:.3g}, "
          f"autocast {sorted(r[3] for r in rows)[len(rows) // 2]:.3g}")
    for line in fails:
        print(line)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
