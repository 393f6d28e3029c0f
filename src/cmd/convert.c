/* cmd/convert.c — the command lines of `mntrain convert imagenet|idx|synth` and `mntrain inspect`:
 * argument tables and help; the work is in io/convert/imagenet.c, io/convert/idx.c, io/convert/synth.c (each ending in
 * io/convert/shard_write.c) and io/data/inspect.c. */
#include <stdio.h>
#include <string.h>

#include "src/args.h"
#include "io/ckpt/ckpt.h"
#include "src/cmd/cmd.h"
#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "src/check.h"
#include "src/log.h"
#include "src/world.h"

static const char *const ABOUT =
    "Write a sharded HDF5 dataset (index.json + shard-KKKKK-of-NNNNN.h5) in a seeded random order; every\n"
    "image carries a checksum that every read verifies.\n"
    "  imagenet  class folders SRC/<class>/... as torchvision's ImageFolder reads them (sorted class\n"
    "            names, files in subfolders too, extensions .jpg .jpeg .png .ppm .pgm .bmp .tif .tiff\n"
    "            .webp; JPEG, PNG, PPM/PGM and BMP are decoded, TIFF and WebP refused by name), or with\n"
    "            --val --labels FILE a flat folder and \"FILE WNID\" lines; every image is stored as RGB\n"
    "            (grey and CMYK too, as PIL's convert(\"RGB\")); unreadable files are reported and\n"
    "            skipped, other files are reported and ignored.\n"
    "            Format 3 (the default): each image whole, at its aspect ratio, as a record of its own\n"
    "            size: the shorter side scaled to --resize S (area filter), the longer side then capped\n"
    "            at --max-side L (the shorter one shrinking with it), the sizes rounded down as\n"
    "            torchvision's Resize(S, max_size=L) rounds them; an image whose shorter side is S or\n"
    "            less is never enlarged: it keeps its size (its longer side still capped at L). Records\n"
    "            are JPEG (--codec jpeg, --quality Q, chroma 4:4:4: about a twelfth of raw for photos)\n"
    "            or raw pixels (--codec raw); an XXH3-64 checksum on each.\n"
    "            Format 2 (--size S): the centre S×S square of the image resized so that its shorter\n"
    "            side is S, raw, a Fletcher-32 checksum on each (what mntrain before format 3 wrote).\n"
    "  idx       MNIST / Fashion-MNIST IDX files, gzip or plain (Debian: dataset-fashion-mnist,\n"
    "            /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ...)\n"
    "  synth     a learnable synthetic set (class-dependent stripes and colours, noise), any size\n"
    "idx and synth write format 2 (raw squares): small grey or synthetic sets gain nothing from JPEG\n"
    "(at 28 px its blocks would be most of the image).\n"
    "A run restarted with the same inputs and options keeps the shards it finished; an OUT that holds\n"
    "another conversion (other inputs, format, size, codec, quality, shard count or seed) is refused\n"
    "unless --force.";

int mnt_convert_main(mnt_world *w, int argc, char **argv) {
  static const char *usage_idx = "mntrain convert idx IMAGES LABELS OUT [--shards N] [--seed S] [--force]";
  static const char *usage_inet =
      "mntrain convert imagenet SRC OUT [--resize S] [--max-side L] [--codec jpeg|raw] [--quality Q]\n"
      "                                         [--shards N] [--val --labels FILE] [--seed S] [--force]\n"
      "       mntrain convert imagenet SRC OUT --size S [--shards N] [--val --labels FILE] [--seed S] [--force]";
  static const char *usage_synth =
      "mntrain convert synth OUT --classes C --images N --size S [--shards K] [--seed S] [--force]";
  const char *kind = argc > 0 ? argv[0] : "";
  int is_idx = !strcmp(kind, "idx"), is_inet = !strcmp(kind, "imagenet"), is_synth = !strcmp(kind, "synth");
  if (!is_idx && !is_inet && !is_synth) {
    int help = !strcmp(kind, "--help") || !strcmp(kind, "-h");
    FILE *f = help ? stdout : stderr;
    if (!help)
      fprintf(f, "mntrain convert: %s\n", argc < 1 ? "which source?" : "unknown source (imagenet, idx, synth)");
    fprintf(f, "usage: %s\n       %s\n       %s\n\n%s\n", usage_inet, usage_idx, usage_synth, ABOUT);
    return help ? MNT_OK : MNT_EARG;
  }
  int shards = 4, classes = 0, images = 0, size = 0, help = 0, val = 0, seed = 1, force = 0;
  int resize = 0, max_side = -1, quality = 0; /* 0, -1: not given */
  const char *labels = NULL, *a = NULL, *b = NULL, *out = NULL, *codec = NULL;
  mnt_opt idx[] = {{"IMAGES", 0, MNT_OPT_ARG, &a, NULL, "IDX file of images (train-images-idx3-ubyte[.gz])", 0, 0},
                   {"LABELS", 0, MNT_OPT_ARG, &b, NULL, "IDX file of labels", 0, 0},
                   {"OUT", 0, MNT_OPT_ARG, &out, NULL, "output directory", 0, 0},
                   {"shards", 0, MNT_OPT_INT, &shards, "N", "number of shard files (default 4)", MNT_RANGE(1, 99999)},
                   {"seed", 0, MNT_OPT_INT, &seed, "S", "seed of the sample order (default 1)", MNT_ANY_INT},
                   {"force", 0, MNT_OPT_FLAG, &force, NULL, "delete another conversion's files in OUT first", 0, 0},
                   {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  mnt_opt inet[] = {{"SRC", 0, MNT_OPT_ARG, &a, NULL, "class folders (or, with --val, a flat folder)", 0, 0},
                    {"OUT", 0, MNT_OPT_ARG, &out, NULL, "output directory", 0, 0},
                    {"resize", 0, MNT_OPT_INT, &resize, "S",
                     "format 3: the stored shorter side, never enlarged (default 256)", MNT_RANGE(1, 8192)},
                    {"max-side", 0, MNT_OPT_INT, &max_side, "L",
                     "format 3: cap on the stored longer side, 0 or >= S (default 2 S; 0: no cap)", MNT_RANGE(0, 32768)},
                    {"codec", 0, MNT_OPT_CHOICE, &codec, "jpeg|raw", "format 3: how records are stored (default jpeg)",
                     0, 0},
                    {"quality", 0, MNT_OPT_INT, &quality, "Q", "format 3 JPEG: the encoder's quality (default 90)",
                     MNT_RANGE(1, 100)},
                    {"size", 0, MNT_OPT_INT, &size, "S",
                     "format 2 instead: the centre S×S square, raw (256 is usual)", MNT_RANGE(1, 4096)},
                    {"shards", 0, MNT_OPT_INT, &shards, "N", "number of shard files (default 4)", MNT_RANGE(1, 99999)},
                    {"val", 0, MNT_OPT_FLAG, &val, NULL, "the validation split: a flat folder and --labels", 0, 0},
                    {"labels", 0, MNT_OPT_PATH, &labels, "FILE", "with --val: \"FILE WNID\" lines", 0, 0},
                    {"seed", 0, MNT_OPT_INT, &seed, "S", "seed of the sample order (default 1)", MNT_ANY_INT},
                    {"force", 0, MNT_OPT_FLAG, &force, NULL, "delete another conversion's files in OUT first", 0, 0},
                    {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  mnt_opt synth[] = {{"OUT", 0, MNT_OPT_ARG, &out, NULL, "output directory", 0, 0},
                     {"classes", 0, MNT_OPT_INT, &classes, "C", "classes, required", MNT_RANGE(1, 1e6)},
                     {"images", 0, MNT_OPT_INT, &images, "N", "samples, required", MNT_RANGE(1, 2e9)},
                     {"size", 0, MNT_OPT_INT, &size, "S", "image side in pixels, required", MNT_RANGE(1, 4096)},
                     {"shards", 0, MNT_OPT_INT, &shards, "K", "number of shard files (default 4)", MNT_RANGE(1, 99999)},
                     {"seed", 0, MNT_OPT_INT, &seed, "S", "seed of the images and their order (default 1)", MNT_ANY_INT},
                     {"force", 0, MNT_OPT_FLAG, &force, NULL, "delete another conversion's files in OUT first", 0, 0},
                     {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  const mnt_opt *opts = is_idx ? idx : is_inet ? inet : synth;
  const char *usage = is_idx ? usage_idx : is_inet ? usage_inet : usage_synth;
  char cmd[32];
  snprintf(cmd, sizeof cmd, "convert %s", kind);
  MNT_CHECK(mnt_parse_opts(cmd, opts, argc - 1, argv + 1, &help, 0));
  if (help) {
    mnt_print_help(stdout, usage, ABOUT, opts);
    return MNT_OK;
  }
  const char *missing = is_synth && !classes ? "--classes" : is_synth && !images ? "--images"
                        : is_synth && !size ? "--size" : NULL;
  if (missing) return mnt_usage_error(cmd, "%s is required (usage: %s)", missing, usage);
  if (is_inet && (labels != NULL) != (val != 0))
    return mnt_usage_error(cmd, "--val and --labels FILE go together (the flat validation layout)");
  if (is_idx) return mnt_convert_idx(a, b, out, shards, seed, force);
  if (is_inet) {
    if (size && (resize || max_side >= 0 || codec || quality))
      return mnt_usage_error(cmd, "--size S writes format 2 (raw squares): --resize, --max-side, --codec and "
                                  "--quality are format 3's");
    mnt_imagenet_cfg cfg = {.size = size, .resize = resize ? resize : 256, .quality = quality ? quality : 90,
                            .codec = codec && !strcmp(codec, "raw") ? MNT_CODEC_RAW : MNT_CODEC_JPEG};
    cfg.max_side = max_side >= 0 ? max_side : 2 * cfg.resize;
    if (quality && cfg.codec == MNT_CODEC_RAW) return mnt_usage_error(cmd, "--quality is for --codec jpeg");
    if (cfg.max_side && cfg.max_side < cfg.resize)
      return mnt_usage_error(cmd, "--max-side %d is below --resize %d: give 0 (no cap) or at least %d", cfg.max_side,
                             cfg.resize, cfg.resize);
    return mnt_convert_imagenet(a, out, shards, &cfg, labels, seed, force);
  }
  return mnt_convert_synth(out, classes, images, size, shards, seed, force);
}

int mnt_inspect_main(mnt_world *w, int argc, char **argv) {
  int verify = 0, help = 0;
  const char *path = NULL;
  mnt_opt opts[] = {{"PATH", 0, MNT_OPT_ARG, &path, NULL,
                     "a dataset directory or one of its shards; a checkpoint (CKPT_DIR, a step directory or its "
                     "state.h5); a model train --export wrote",
                     0, 0},
                    {"verify", 0, MNT_OPT_FLAG, &verify, NULL, "read every image and check its checksum", 0, 0},
                    {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  MNT_CHECK(mnt_parse_opts("inspect", opts, argc, argv, &help, 0));
  if (help) {
    mnt_print_help(stdout, "mntrain inspect DIR|SHARD [--verify]    mntrain inspect CKPT_DIR|STEP_DIR|state.h5",
                   "Shards, samples, classes, image size, mean/std and the per-class histogram of a dataset\n"
                   "made by mntrain convert; every label is read and checked against the index, with --verify\n"
                   "every image too (HDF5 checks its checksum) and the set's content digest printed (xxh3 of\n"
                   "every label and image as read: a copy compares with its original). A bad sample is named by\n"
                   "file and index, and the exit code is 1.\n"
                   "Of a checkpoint (mntrain train --ckpt-dir): step, position, model, sizes, shares and the\n"
                   "configuration, every share's checksum verified; of a checkpoint directory, every step in it.\n"
                   "A damaged checkpoint is named with the reason, and the exit code is 1.\n"
                   "Of a model train --export wrote (mntrain inspect FILE.h5): its arch, classes, image size,\n"
                   "tensors and parameters and the mntrain that wrote it, every tensor read and checked finite\n"
                   "(train --init takes it); a damaged one is named, and the exit code is 1.",
                   opts);
    return MNT_OK;
  }
  if (path && mnt_ckpt_is_path(path)) return mnt_ckpt_inspect(path);
  return mnt_inspect(path, verify);
}
