/* rec_device.h — a fake device for tests of the recorder (profile/recorder.h): a lock and a
 * list of live blocks for describe(), and its hooks called the way src/alloc calls them: under
 * the device's lock. Included by one test file each (static functions). */
#ifndef HBM_TEST_REC_DEVICE_H
#define HBM_TEST_REC_DEVICE_H

#include <pthread.h>

#include "profile/recorder.h"

typedef struct fake_device {
  pthread_mutex_t lock;
  int id;
  uint64_t live_addr[8], live_size[8];
  int n_live;
} fake_device_t;

static void describe(void *ctx) {
  fake_device_t *d = ctx;
  pthread_mutex_lock(&d->lock);
  hbm_tag_t tag = {"weights", "f32[1024]", HBM_CAT_PARAMETER, "params", "init.c:1"};
  for (int i = 0; i < d->n_live; i++)
    hbm__rec_alloc(d->id, d->live_addr[i], d->live_size[i], d->live_size[i], &tag);
  hbm__rec_reserve(d->id, HBM_RESERVE_PREALLOCATE, 0x10000000, 1 << 30);
  pthread_mutex_unlock(&d->lock);
}

static void open_device(fake_device_t *d, const char *name) {
  pthread_mutex_init(&d->lock, NULL);
  d->id = hbm__rec_device_open(name, "bfc", 1ull << 30, describe, d);
  assert_true(d->id >= 0);
}

static void close_device(fake_device_t *d) {
  hbm__rec_device_close(d->id);
  pthread_mutex_destroy(&d->lock);
}

static void dev_alloc(fake_device_t *d, uint64_t addr, uint64_t size, const hbm_tag_t *tag) {
  pthread_mutex_lock(&d->lock);
  hbm__rec_alloc(d->id, addr, size, (size + 255) & ~255ull, tag);
  pthread_mutex_unlock(&d->lock);
}

static void dev_free(fake_device_t *d, uint64_t addr) {
  pthread_mutex_lock(&d->lock);
  hbm__rec_free(d->id, addr);
  pthread_mutex_unlock(&d->lock);
}

#endif /* HBM_TEST_REC_DEVICE_H */
