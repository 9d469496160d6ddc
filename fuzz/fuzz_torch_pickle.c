/* fuzz_torch_pickle.c — the restricted pickle reader (src/import/pickle.c) and the PyTorch
 * snapshot model (src/import/torch_snapshot.c) on any bytes. Every input must become a
 * profile or a message naming the input and where ("fuzz.pickle: byte N: ..." from the
 * reader); a profile is analysed and reported, and the replay log of the same bytes is built
 * too. Any input is given the pickle magic (0x80, protocol 4) when it lacks it, so mutations
 * reach the opcodes rather than the first check. The pickle is also read with its sink on a
 * thread of its own (pickle_thread.c): the sink must get the same calls with the same values,
 * and the reading end the same way (the same error, the same damage). */
#include "hbm.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_profile(const uint8_t *data, size_t size) {
  hbm_profile_t *p = hbm__torch_snapshot_load(data, size, "fuzz.pickle", NULL);
  if (!p) {
    if (!strstr(hbm_last_error(), "fuzz.pickle"))
      abort(); /* every refusal names the input */
    return;
  }
  FILE *null = fopen("/dev/null", "w");
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    if (!a)
      abort(); /* a profile the reader built is always valid */
    hbm_analysis_free(a);
  }
  if (null) {
    hbm_report_json(p, -1, null);
    fclose(null);
  }
  hbm_profile_free(p);
}

static void check_log(const uint8_t *data, size_t size) {
  hbm_alloc_log_t log;
  torch_device_summary_t sum;
  if (hbm__torch_snapshot_log(data, size, "fuzz.pickle", -1, &log, &sum, NULL) != HBM_OK)
    return;
  /* frees only of live pointers, allocations only of free ones: what the replay expects */
  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, "fuzz.pickle");
  if (!p)
    abort();
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

/* ---- the sink on its own thread: a sink that hashes every call ---- */

static void mix(uint64_t *h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    *h = (*h ^ b[i]) * 0x100000001b3ull;
}

static void mix_ref(uint64_t *h, const pk_ref_t *r) {
  mix(h, &r->kind, 1);
  mix(h, &r->flags, 1);
  if (r->kind == PK_STR || r->kind == PK_BYTES)
    mix(h, r->as.s ? r->as.s : (const uint8_t *)"", r->as.s ? r->n : 0);
  else
    mix(h, &r->as, sizeof r->as);
}

typedef struct hashed {
  uint64_t h, calls;
} hashed_t;

static bool h_open(void *ctx, pk_kind_t kind, uint64_t *state) {
  hashed_t *x = ctx;
  mix(&x->h, &kind, sizeof kind);
  *state = ++x->calls;
  return true;
}

static bool h_add(void *ctx, pk_kind_t kind, uint64_t *state, const pk_ref_t *items, size_t n) {
  hashed_t *x = ctx;
  mix(&x->h, &kind, sizeof kind);
  mix(&x->h, state, sizeof *state);
  for (size_t i = 0; i < n; i++)
    mix_ref(&x->h, &items[i]);
  return true;
}

static bool h_close(void *ctx, pk_kind_t kind, uint64_t state, unsigned flags, pk_ref_t *out) {
  hashed_t *x = ctx;
  mix(&x->h, &kind, sizeof kind);
  mix(&x->h, &state, sizeof state);
  mix(&x->h, &flags, sizeof flags);
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = (uint16_t)kind, .as.obj = ++x->calls};
  return true;
}

static void h_discard(void *ctx, pk_kind_t kind, uint64_t state) {
  hashed_t *x = ctx;
  mix(&x->h, &kind, sizeof kind);
  mix(&x->h, &state, sizeof state);
}

typedef struct outcome {
  hbm_status_t status;
  uint64_t h;
  pk_damage_t damage;
  char error[400];
} outcome_t;

static void read_with(const uint8_t *data, size_t size, size_t thread_min, outcome_t *o) {
  hashed_t x = {0xcbf29ce484222325ull, 0};
  pk_sink_t sink = {&x, h_open, h_add, h_close, h_discard};
  pk_stream_options_t opt = {.salvage = true, .sink_thread_min = thread_min};
  pk_ref_t root;
  memset(o, 0, sizeof *o);
  o->status = pk_stream(data, size, "fuzz.pickle", &sink, &opt, &root, &o->damage);
  if (o->status == HBM_OK)
    mix_ref(&x.h, &root);
  else
    snprintf(o->error, sizeof o->error, "%s", hbm_last_error());
  o->h = x.h;
}

static void check_sink_thread(const uint8_t *data, size_t size) {
  outcome_t plain, threaded;
  read_with(data, size, 0, &plain);
  read_with(data, size, 1, &threaded);
  if (plain.status != threaded.status || plain.h != threaded.h ||
      strcmp(plain.error, threaded.error) || plain.damage.damaged != threaded.damage.damaged ||
      plain.damage.at != threaded.damage.at || plain.damage.used != threaded.damage.used ||
      strcmp(plain.damage.why, threaded.damage.why))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20))
    return 0;
  uint8_t *buf = malloc(size + 2);
  if (!buf)
    return 0;
  size_t n = size;
  if (pk_looks_like_pickle(data, size)) {
    memcpy(buf, data, size);
  } else {
    buf[0] = 0x80, buf[1] = 4;
    memcpy(buf + 2, data, size);
    n = size + 2;
  }
  check_profile(buf, n);
  check_log(buf, n);
  check_sink_thread(buf, n);
  free(buf);
  return 0;
}
