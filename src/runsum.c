/* runsum.c — summary.json of a run; see runsum.h. */
#include "src/runsum.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "src/log.h" /* MNT_OK, MNT_EARG */

/* MNT_RS_* in order: the key, and its object for step_ms.* and phases_ms.* */
static const struct {
  const char *obj, *key;
} KEYS[MNT_RS_N] = {
    {NULL, "ranks"},          {NULL, "nodes"},           {NULL, "ranks_per_node"},   {NULL, "image_size"},
    {NULL, "batch_per_rank"}, {NULL, "global_batch"},    {NULL, "grad_bytes"},       {NULL, "img_per_s"},
    {"step_ms", "mean"},      {NULL, "threads_per_rank"}, {NULL, "devices_per_rank"}, {NULL, "steps"},
    {NULL, "steps_this_job"}, {NULL, "warmup_steps"},    {NULL, "resumed_from_step"}, {NULL, "steps_done"},
    {NULL, "val_top1"},       {NULL, "best_val_top1"},   {NULL, "target_top1"},      {NULL, "target_step"},
    {NULL, "target_epoch"},   {NULL, "target_time_s"},   {"phases_ms", "data"},      {"phases_ms", "forward"},
    {"phases_ms", "backward"}, {"phases_ms", "comm_exposed"}, {"phases_ms", "optimizer"},
};
_Static_assert(MNT_RS_N <= 32, "present and integer are 32-bit masks");

/* a string key into out: "" when absent, not a string, or too long; *have: the key is there */
static void get_str(json_t *j, const char *key, char *out, size_t n, int *have) {
  json_t *v = json_object_get(j, key);
  const char *s = json_string_value(v);
  if (have) *have = v != NULL;
  snprintf(out, n, "%s", s && strlen(s) < n ? s : "");
}

int mnt_is_run_id(const char *s) {
  return s && strlen(s) == MNT_RUN_ID_HEX && strspn(s, "0123456789abcdef") == MNT_RUN_ID_HEX;
}

int mnt_run_summary_read(const char *path, mnt_run_summary *s) {
  memset(s, 0, sizeof *s);
  for (int k = 0; k < MNT_RS_N; k++) s->num[k] = NAN;
  json_error_t e;
  json_t *j = json_load_file(path, 0, &e);
  s->err_line = e.line;
  if (!json_is_object(j)) {
    s->parsed = j != NULL;
    snprintf(s->err, sizeof s->err, "%s", j ? "not a JSON object" : e.text);
    json_decref(j);
    return MNT_EARG;
  }
  s->parsed = 1;
  for (int k = 0; k < MNT_RS_N; k++) {
    json_t *o = KEYS[k].obj ? json_object_get(j, KEYS[k].obj) : j;
    json_t *v = json_object_get(o, KEYS[k].key); /* NULL when o is not an object */
    s->num[k] = json_is_number(v) ? json_number_value(v) : NAN;
    if (v) s->present |= 1u << k;
    if (json_is_integer(v)) {
      s->integer |= 1u << k;
      s->ival[k] = (int64_t)json_integer_value(v);
    }
  }
  json_t *ph = json_object_get(j, "phases_ms");
  s->phases_ms = json_is_object(ph) ? 2 : ph ? 1 : 0;
  get_str(j, "arch", s->arch, sizeof s->arch, &s->have_arch);
  get_str(j, "device", s->device, sizeof s->device, &s->have_device);
  get_str(j, "precision", s->precision, sizeof s->precision, NULL);
  get_str(j, "topology", s->topology, sizeof s->topology, NULL);
  get_str(j, "optimizer", s->optimizer, sizeof s->optimizer, NULL);
  get_str(j, "schedule", s->schedule, sizeof s->schedule, NULL);
  get_str(j, "bn_eval", s->bn_eval, sizeof s->bn_eval, NULL);
  json_t *id = json_object_get(j, "run_id");
  s->have_run_id = !id ? 0 : mnt_is_run_id(json_string_value(id)) ? 2 : 1;
  if (s->have_run_id == 2) snprintf(s->run_id, sizeof s->run_id, "%s", json_string_value(id));
  json_t *tr = json_object_get(j, "target_reached");
  s->target_reached = json_is_boolean(tr) ? json_is_true(tr) : -1;
  json_decref(j);
  return MNT_OK;
}
