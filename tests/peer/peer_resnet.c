/* peer_resnet.c — writes what the PyTorch reference (peer_resnet.py) needs to check mntrain's
 * ResNet: initial weights and BN statistics under torchvision's names, an input batch and labels,
 * mntrain's logits, loss and every parameter gradient, and the losses of a few SGD steps.
 *   peer_resnet ARCH CLASSES SIZE BATCH STEPS OUT.h5 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "io/ckpt/export.h"
#include "src/log.h"
#include "src/model/resnet.h"

static int put(hid_t f, const char *path, const float *data, int ndims, const int *dims) {
  return mnt_h5_put_f32(f, path, data, ndims, dims) != MNT_OK;
}

int main(int argc, char **argv) {
  if (argc != 7 && argc != 8) {
    fprintf(stderr, "usage: peer_resnet ARCH CLASSES SIZE BATCH STEPS OUT.h5 [fp32|bf16]\n");
    return 2;
  }
  mnt_backend_opts bo = {.precision = MNT_PREC_FP32, .device = -1};
  if (argc == 8 && mnt_precision_parse(argv[7], &bo.precision)) return 2;
  const char *arch = argv[1];
  int classes = atoi(argv[2]), size = atoi(argv[3]), batch = atoi(argv[4]), steps = atoi(argv[5]);
  mnt_backend *be;
  mnt_resnet *r;
  if (mnt_backend_create("cpu", &bo, &be) || mnt_resnet_create(be, arch, classes, size, batch, 42, 0, &r)) return 1;
  size_t nx = (size_t)batch * 3 * size * size;
  float *x = malloc(nx * sizeof *x);
  int32_t *y = malloc((size_t)batch * sizeof *y);
  uint64_t s = 12345;
  for (size_t i = 0; i < nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  for (int i = 0; i < batch; i++) y[i] = (int32_t)((i * 7 + 3) % classes);
  hid_t f = H5Fcreate(argv[6], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 1;
  int err = 0, xd[4] = {batch, 3, size, size};
  err |= put(f, "/input", x, 4, xd);
  float *yf = malloc((size_t)batch * sizeof *yf);
  for (int i = 0; i < batch; i++) yf[i] = (float)y[i];
  err |= put(f, "/labels", yf, 1, &batch);
  char path[200];
  for (int i = 0; i < r->nparams; i++) {
    snprintf(path, sizeof path, "/model/%s", r->params[i].name);
    err |= put(f, path, r->w + r->params[i].off, r->params[i].ndims, r->params[i].dims);
  }
  for (int i = 0; i < r->nstats; i++) { /* as mnt_export_h5 writes them */
    snprintf(path, sizeof path, "/bn/%s", r->stats[i].name);
    err |= put(f, path, r->bn + r->stats[i].off, 1, r->stats[i].dims);
  }
  const mnt_step_hp hp = {.lr = 0.01f}; /* the cpu backend's memory is the host's */
  float *losses = malloc((size_t)(steps + 1) * sizeof *losses);
  float *lg = malloc((size_t)batch * classes * sizeof *lg); /* the logits as fp32 (bf16 activations widened) */
  for (int k = 0; k <= steps && !err; k++) {
    if (mnt_resnet_forward(r, x, 1)) return 1;
    float l3[3];
    if (mnt_resnet_loss(r, y, batch, 1) || mnt_resnet_read_loss(r, l3)) return 1;
    losses[k] = l3[0] / (float)batch;
    if (mnt_resnet_backward(r)) return 1;
    if (k == 0) {
      int ld[2] = {batch, classes};
      err |= mnt_act_download(be, mnt_resnet_logits(r), lg, batch, classes, 1, 1) != MNT_OK;
      err |= put(f, "/logits", lg, 2, ld);
      for (int i = 0; i < r->nparams; i++) {
        snprintf(path, sizeof path, "/grad/%s", r->params[i].name);
        err |= put(f, path, r->g + r->params[i].off, r->params[i].ndims, r->params[i].dims);
      }
    }
    for (int i = 0; i < r->nparams; i++) /* lr 0.01, momentum 0.9, weight decay 1e-4 on all, as torch.optim.SGD */
      mnt_sgd_step(be, r->w + r->params[i].off, r->g + r->params[i].off, r->m + r->params[i].off, r->params[i].n, &hp,
                   0.9f, 1e-4f, k == 0, NULL);
  }
  int n1 = steps + 1;
  err |= put(f, "/losses", losses, 1, &n1);
  /* inference mode after the steps: batch norm from the running statistics */
  if (mnt_resnet_forward(r, x, 0)) return 1;
  int ld[2] = {batch, classes};
  err |= mnt_act_download(be, mnt_resnet_logits(r), lg, batch, classes, 1, 1) != MNT_OK;
  err |= put(f, "/logits_eval", lg, 2, ld);
  for (int i = 0; i < r->nstats; i++) {
    snprintf(path, sizeof path, "/bn_after/%s", r->stats[i].name);
    err |= put(f, path, r->bn + r->stats[i].off, 1, r->stats[i].dims);
  }
  H5Fclose(f);
  printf("peer_resnet: %s, %d parameters (%zu floats), loss %.6f -> %.6f after %d SGD steps\n", arch, r->nparams, r->nw,
         (double)losses[0], (double)losses[steps], steps);
  mnt_resnet_destroy(r);
  mnt_backend_destroy(be);
  free(x); free(y); free(yf); free(losses); free(lg);
  return err;
}
