/* test_trace.c — the timeline (src/trace.h) in one process: spans nest and are kept only inside the
 * window, several threads and a track each get their own list, the file is JSON with every span,
 * the activity names what the main thread is in, the last-events dump holds the rings (and is
 * written at most once every 5 s), and what a span costs (printed: the benchmark of its overhead
 * in a training step, where a step records about a hundred of them). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/log.h"
#include "src/trace.h"
#include "tests/expect.h"

static void *helper(void *arg) {
  (void)arg;
  mnt_trace_thread("helper");
  for (int i = 0; i < 3; i++) {
    mnt_trace_push("work", i);
    mnt_trace_pop();
  }
  return NULL;
}

static json_t *events_named(json_t *t, const char *name) {
  json_t *out = json_array(), *ev;
  size_t i;
  json_array_foreach(json_object_get(t, "events"), i, ev) if (!strcmp(json_string_value(json_array_get(ev, 3)), name))
      json_array_append(out, ev);
  return out;
}

int main(void) {
  char dir[] = "/tmp/mnt-test-trace-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  mnt_trace_init(3, 2, 3); /* steps 2..3 */
  mnt_trace_thread("main");
  for (int64_t s = 1; s <= 4; s++) {
    mnt_trace_step(s);
    mnt_trace_push("step", s);
    mnt_trace_push("forward", 0);
    if (s == 3) {
      char act[128];
      mnt_trace_activity(act, sizeof act);
      EXPECT(!strncmp(act, "step 3: forward (", 17), "activity inside step 3's forward: '%s'", act);
      pthread_t th;
      pthread_create(&th, NULL, helper, NULL);
      pthread_join(th, NULL);
      uint64_t t0 = mnt_trace_now();
      mnt_trace_span("buckets", "bucket", t0, t0 + 1000, 7);
      mnt_trace_span("late", "backwards", t0 + 1000, t0, 9); /* ends before it starts: written as 0 long */
    }
    mnt_trace_pop();
    mnt_trace_pop();
  }
  /* links planted where the file goes, and where the writer once put its temporary file: replaced,
   * never followed (the victim keeps its bytes) */
  char path[256], victim[256], link[300];
  snprintf(path, sizeof path, "%s/trace-rank-00003.json", dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  FILE *vf = fopen(victim, "w");
  if (vf) fputs("victim\n", vf), fclose(vf);
  snprintf(link, sizeof link, "%s.tmp", path);
  EXPECT(symlink(victim, path) == 0 && symlink(victim, link) == 0, "links planted");
  mnt_trace_id id = {.node = "node\"9\\", .job = "slurm.pmix.77.0", .run_id = "0123456789abcdef", .size = 4,
                     .ended = "failed"};
  EXPECT(mnt_trace_write(dir, &id) == MNT_OK, "write: %s", mnt_last_error());
  char vb[64] = {0};
  vf = fopen(victim, "r");
  if (vf) (void)!fread(vb, 1, sizeof vb - 1, vf), fclose(vf);
  EXPECT(!strcmp(vb, "victim\n"), "the file a link pointed to is untouched: '%s'", vb);
  struct stat lb;
  EXPECT(lstat(path, &lb) == 0 && S_ISREG(lb.st_mode), "the trace replaced the link with a file of its own");
  json_error_t e;
  json_t *t = json_load_file(path, 0, &e);
  EXPECT(t != NULL, "%s is not JSON: %s (line %d)", path, e.text, e.line);
  if (t) {
    EXPECT(json_integer_value(json_object_get(t, "rank")) == 3 && json_integer_value(json_object_get(t, "size")) == 4 &&
               !strcmp(json_string_value(json_object_get(t, "node")), "node\"9\\") &&
               !strcmp(json_string_value(json_object_get(t, "job")), "slurm.pmix.77.0") &&
               !strcmp(json_string_value(json_object_get(t, "run_id")), "0123456789abcdef") &&
               json_integer_value(json_object_get(t, "version")) == MNT_TRACE_VERSION &&
               !strcmp(json_string_value(json_object_get(t, "ended")), "failed") &&
               json_integer_value(json_object_get(t, "last_step")) == 4 &&
               json_integer_value(json_object_get(t, "truncated_at_step")) == -1,
           "rank, size, node (escaped), job, run_id, version, ended, last_step 4, truncated_at_step -1");
    json_t *bw = events_named(t, "backwards");
    EXPECT(json_array_size(bw) == 1 && json_integer_value(json_array_get(json_array_get(bw, 0), 2)) == 0,
           "a span that ends before it starts is written 0 long, not as 2^64 - x");
    json_decref(bw);
    json_t *steps = events_named(t, "step"), *fw = events_named(t, "forward"), *work = events_named(t, "work"),
           *b = events_named(t, "bucket");
    EXPECT(json_array_size(steps) == 2 && json_integer_value(json_array_get(json_array_get(steps, 0), 5)) == 2 &&
               json_integer_value(json_array_get(json_array_get(steps, 1), 5)) == 3,
           "the window keeps steps 2 and 3 only (%zu step spans)", json_array_size(steps));
    EXPECT(json_array_size(fw) == 2 && json_integer_value(json_array_get(json_array_get(fw, 0), 6)) == 1,
           "forward nested at depth 1 in each kept step");
    EXPECT(json_array_size(work) == 3, "the helper's 3 spans (%zu)", json_array_size(work));
    EXPECT(json_array_size(b) == 1 && json_integer_value(json_array_get(json_array_get(b, 0), 2)) == 1000 &&
               json_integer_value(json_array_get(json_array_get(b, 0), 4)) == 7,
           "the track's span with its own times and arg");
    /* a step's span holds its forward */
    json_t *s3 = json_array_get(steps, 1), *f3 = json_array_get(fw, 1);
    long long s0 = json_integer_value(json_array_get(s3, 1)), sd = json_integer_value(json_array_get(s3, 2));
    long long f0 = json_integer_value(json_array_get(f3, 1)), fd = json_integer_value(json_array_get(f3, 2));
    EXPECT(f0 >= s0 && f0 + fd <= s0 + sd, "forward inside its step");
    json_t *names = json_object_get(t, "threads");
    int seen = 0;
    size_t i;
    json_t *th;
    json_array_foreach(names, i, th) {
      const char *n = json_string_value(json_object_get(th, "name"));
      seen += !strcmp(n, "main") + !strcmp(n, "helper") + !strcmp(n, "buckets");
    }
    EXPECT(seen == 3, "threads main, helper and the track buckets named (%d of 3)", seen);
    json_decref(steps), json_decref(fw), json_decref(work), json_decref(b), json_decref(t);
  }
  /* the rings: steps outside the window too; once every 5 s */
  snprintf(path, sizeof path, "%s/last-events-rank-00003.txt", dir);
  EXPECT(symlink(victim, path) == 0, "a link planted where the last events go");
  EXPECT(mnt_trace_dump_last(dir, "the test asked") == 1, "the first dump is written");
  vf = fopen(victim, "r");
  memset(vb, 0, sizeof vb);
  if (vf) (void)!fread(vb, 1, sizeof vb - 1, vf), fclose(vf);
  EXPECT(!strcmp(vb, "victim\n") && lstat(path, &lb) == 0 && S_ISREG(lb.st_mode),
         "the last events replace the link, the file it pointed to is untouched: '%s'", vb);
  EXPECT(mnt_trace_dump_last(dir, "again") == 0, "a second dump within 5 s is not");
  snprintf(path, sizeof path, "%s/last-events-rank-00003.txt", dir);
  FILE *f = fopen(path, "r");
  char line[512];
  int step4 = 0, helper_seen = 0, why = 0;
  while (f && fgets(line, sizeof line, f)) {
    step4 += strstr(line, "step  step 4") != NULL;
    helper_seen += strstr(line, "(helper)") != NULL;
    why += strstr(line, "because the test asked") != NULL;
  }
  if (f) fclose(f);
  EXPECT(step4 == 1 && helper_seen == 1 && why == 1, "the dump holds step 4 (outside the window), the helper and why "
                                                     "(%d %d %d)", step4, helper_seen, why);
  /* what a span costs, outside and inside the window */
  enum { N = 1000000 };
  for (int in = 0; in < 2; in++) {
    mnt_trace_step(in ? 2 : 10);
    uint64_t t0 = mnt_trace_now();
    for (int k = 0; k < N; k++) {
      mnt_trace_push("x", k);
      mnt_trace_pop();
    }
    double ns = (double)(mnt_trace_now() - t0) / N;
    printf("test_trace: a span costs %.0f ns %s the window (a training step records ~100: %.1f us)\n", ns,
           in ? "inside" : "outside", ns * 100 / 1000);
    EXPECT(ns < 2000, "a span costs %.0f ns", ns);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) {
    fprintf(stderr, "test_trace: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("test_trace: ok (%d checks)\n", checks);
  return 0;
}
