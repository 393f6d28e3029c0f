/* test_ckpt_finite.c — a checkpoint that holds a NaN or an infinity (a diverged run's, written before
 * mntrain checked the whole state, or by hand) is a damaged checkpoint however good its checksums:
 * opened by name it is refused naming the tensor, in a root the previous one is used instead, and
 * `mntrain inspect` (mnt_ckpt_inspect) says it is damaged. One process, a communicator of one rank
 * (the writer's), no Slurm. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/comm/comm.h"
#include "io/ckpt/ckpt.h"
#include "src/log.h"
#include "tests/expect.h"
#include "src/world.h"

/* checkpoint `step` of two tensors, /model/a (with `bad` at a[2]) and /bn/b */
static int write_one(mnt_ckpt_writer *wr, int64_t step, float bad) {
  float a[4] = {1, 2, bad, 4}, b[3] = {0.5f, 0.25f, 0.125f};
  mnt_ckpt_tensor t[2] = {{.name = "/model/a", .data = a, .n = 4, .ndims = 1, .dims = {4}},
                          {.name = "/bn/b", .data = b, .n = 3, .ndims = 1, .dims = {3}}};
  json_t *state = json_pack("{s:I}", "step", (json_int_t)step), *attrs = json_pack("{s:s}", "arch", "test"),
         *config = json_pack("{s:s}", "arch", "test");
  int st = mnt_ckpt_begin(wr, step, t, 2, state, attrs, config, NULL);
  if (st == MNT_OK) st = mnt_ckpt_finish(wr);
  json_decref(state), json_decref(attrs), json_decref(config);
  return st;
}

int main(void) {
  char root[] = "/tmp/mnt-ckpt-finite-XXXXXX";
  if (!mkdtemp(root)) return 1;
  mnt_world w;
  mnt_comm *c = NULL;
  mnt_ckpt_writer *wr = NULL;
  EXPECT(mnt_world_init(&w) == MNT_OK, "a world of one process");
  EXPECT(mnt_comm_create(&w, "cpu", MNT_TOPO_FLAT, &c) == MNT_OK, "a communicator of one rank");
  EXPECT(c && mnt_ckpt_writer_create(c, root, 4096, 3, -1, &wr) == MNT_OK, "the writer");
  if (failures) return 1;
  EXPECT(write_one(wr, 1, 3) == MNT_OK, "checkpoint 1 (finite)");
  EXPECT(write_one(wr, 2, INFINITY) == MNT_OK, "checkpoint 2 (an infinity in /model/a)");
  EXPECT(write_one(wr, 3, NAN) == MNT_OK, "checkpoint 3 (a NaN in /model/a)");
  mnt_ckpt_writer_destroy(wr);

  char dir[300];
  for (int s = 2; s <= 3; s++) { /* by name: refused */
    mnt_ckpt ck;
    int found = 0;
    mnt_ckpt_step_dir(dir, sizeof dir, root, s);
    int st = mnt_ckpt_open(dir, 1, &ck, &found);
    EXPECT(st == MNT_EDATA && strstr(mnt_last_error(), "/model/a holds NaN or Inf"),
           "step %d opened by name: status %d, error '%s' (want MNT_EDATA naming /model/a)", s, st, mnt_last_error());
    mnt_ckpt_close(&ck);
  }
  { /* the root: the newest finite one */
    mnt_ckpt ck;
    int found = 0;
    int st = mnt_ckpt_open(root, 1, &ck, &found);
    EXPECT(st == MNT_OK && found && ck.step == 1, "the root: status %d, found %d, step %lld (want step 1)", st, found,
           (long long)ck.step);
    float a[4] = {0};
    int four = 4;
    EXPECT(st != MNT_OK || (mnt_ckpt_get(&ck, "/model/a", a, 4, 1, &four) == MNT_OK && a[2] == 3),
           "step 1's /model/a read back (%g)", (double)a[2]);
    mnt_ckpt_close(&ck);
  }
  EXPECT(mnt_ckpt_inspect(root) == MNT_EDATA, "inspect of the root: the two damaged checkpoints fail it");
  mnt_ckpt_step_dir(dir, sizeof dir, root, 1);
  EXPECT(mnt_ckpt_inspect(dir) == MNT_OK, "inspect of the finite checkpoint: ok");
  mnt_comm_destroy(c);
  mnt_world_finalize(&w);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  printf("ckpt_finite: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
