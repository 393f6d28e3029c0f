#!/usr/bin/env python3
"""NVIDIA DALI's CPU training input pipeline on a folder of JPEGs: a peer of `mntrain bench loader`.

    $(benchmarks/peer_venv.sh dali) benchmarks/peer_loader_dali.py --data ROOT [--size 224] [--threads 1] [--batch 64] [--seconds 6]

fn.readers.file (shuffled), fn.decoders.image_random_crop (libjpeg-turbo on the CPU; RandomResizedCrop's
area 0.08-1 and aspect 3/4-4/3), fn.resize to --size x --size, fn.crop_mirror_normalize (random flip,
ImageNet's mean and std, float CHW): DALI's ResNet-50 training pipeline of NVIDIA's examples, all on
the CPU (device_id=None, --threads worker threads). The first 2 batches are warm-up; then batches
are counted for --seconds. Prints img/s and img/s per thread in `mntrain bench loader`'s words.
Needs the venv benchmarks/peer_venv.sh makes (nvidia-dali-cuda120 2.4; no GPU is used).
"""
import argparse
import time

import nvidia.dali
import nvidia.dali.fn as fn
import nvidia.dali.types as types
from nvidia.dali import pipeline_def


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ROOT/<class>/<image>")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=a.seed, prefetch_queue_depth=2)
    def train_pipe():
        jpegs, labels = fn.readers.file(file_root=a.data, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[0.75, 4.0 / 3.0])
        images = fn.resize(images, resize_x=a.size, resize_y=a.size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                          std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    p = train_pipe()
    p.build()
    print(f"# DALI {nvidia.dali.__version__} CPU pipeline: {a.data} -> {a.size} px training, batch {a.batch}, "
          f"{a.threads} threads")
    for _ in range(2):
        p.run()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        out = p.run()
        n += 1
    dt = time.perf_counter() - t0
    rate = n * a.batch / dt
    x = out[0].as_tensor()
    print(f"loader {a.size} px training threads {a.threads}: {rate:.1f} img/s, {rate / a.threads:.1f} img/s per thread "
          f"({n} batches in {dt:.2f} s; {tuple(x.shape())} float)")


if __name__ == "__main__":
    main()
