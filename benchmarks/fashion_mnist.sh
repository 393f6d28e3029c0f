#!/usr/bin/env bash
# fashion_mnist.sh — the learning benchmark: the full Fashion-MNIST (60,000 training and 10,000
# test images, Debian's dataset-fashion-mnist) converted with `mntrain convert idx`, trained with
# resnet20 (He et al.'s CIFAR network) across 4 ranks on the local 2-node cluster with the usual
# small-image recipe (random crop with 2 px zero padding + flip, whole image for validation, SGD
# lr 0.1 at batch 128, weight decay 5e-4, cosine), validated after every epoch. Target: at least
# 93% test top-1 within 15 epochs. Prints the accuracy curve and the time (about 15 min on 2 cores).
#   benchmarks/fashion_mnist.sh [path/to/mntrain] [work dir, default /tmp/mntrain-fmnist] [extra train options]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-fmnist}
shift $(( $# > 2 ? 2 : $# ))
fm=/usr/share/datasets/fashion-mnist
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
mkdir -p "$work"
"$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$work/train" --shards 4 >/dev/null
"$m" convert idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$work/test" --shards 2 >/dev/null
start=$(date +%s)
srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 "$m" train --data "$work/train" --val "$work/test" --arch resnet20 \
  --size 28 --batch-per-rank 32 --epochs 15 --lr 0.2 --warmup-epochs 1 --schedule cosine --pad-crop 2 --val-crop 1 \
  --wd 5e-4 --no-bn-decay --threads 1 --log-every 200 --out "$work/out" --force "$@" | tee "$work/log"
end=$(date +%s)
echo "# accuracy curve (test top-1 after each epoch), $(( end - start )) s in all:"
grep 'validation:' "$work/log" | awk '{ printf "  epoch %5.2f  top1 %s\n", $2, $7 }'
/usr/bin/python3 -c "import json,sys; s=json.load(open('$work/out/summary.json')); t=s['val_top1']; print(f'final test top-1 {t:.4f}: target 0.93', 'met' if t >= 0.93 else 'MISSED'); sys.exit(0 if t >= 0.93 else 1)"
