/* test_alloc_cuda_fake.c — the driver double itself (tests/fakecuda): that it is as strict as
 * its README says, since the CUDA backend's tests are only worth what it catches. Device
 * memory's host accessibility is probed with write(2) into a pipe, which fails with EFAULT
 * on a PROT_NONE page instead of raising a signal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define MiB (1ull << 20)

/* CUresult codes (cuda.h) */
enum {
  OK = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  INVALID_CONTEXT = 201,
  ILLEGAL_ADDRESS = 700,
  CONTEXT_IS_DESTROYED = 709,
  NOT_SUPPORTED = 801
};
typedef unsigned long long dptr_t;

static struct {
  void *lib;
  void (*reload)(void);
  void (*reset)(void);
  unsigned long (*misuse)(void);
  unsigned long (*live)(void);
  int (*init)(unsigned);
  int (*retain)(void **, int);
  int (*release)(int);
  int (*push)(void *);
  int (*pop)(void **);
  int (*set_current)(void *);
  int (*mem_info)(size_t *, size_t *);
  int (*alloc)(dptr_t *, size_t);
  int (*free)(dptr_t);
  int (*htod)(dptr_t, const void *, size_t);
  int (*dtoh)(void *, dptr_t, size_t);
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
  int (*stream_destroy)(void *);
  int (*event_create)(void **, unsigned);
  int (*event_record)(void *, void *);
  int (*event_destroy)(void *);
  int (*wait_event)(void *, void *, unsigned);
  int (*memset_async)(dptr_t, unsigned char, size_t, void *);
  int (*pool_create)(void **, const void *);
  int (*pool_destroy)(void *);
  int (*pool_get)(void *, int, void *);
  int (*pool_set)(void *, int, void *);
  int (*pool_trim)(void *, size_t);
  int (*pool_alloc)(dptr_t *, size_t, void *, void *);
  int (*free_async)(dptr_t, void *);
  int (*reserve)(dptr_t *, size_t, size_t, dptr_t, unsigned long long);
  int (*address_free)(dptr_t, size_t);
  int (*create)(unsigned long long *, size_t, const void *, unsigned long long);
  int (*release_handle)(unsigned long long);
  int (*map)(dptr_t, size_t, size_t, unsigned long long, unsigned long long);
  int (*unmap)(dptr_t, size_t);
  int (*set_access)(dptr_t, size_t, const void *, size_t);
} cu;

static void load(void **fn, const char *name) {
  *fn = dlsym(cu.lib, name);
  if (!*fn)
    fail_msg("the double lacks %s", name);
}

/* The double with the knobs given ("NAME=VALUE", NULL-terminated), a retained primary context
 * pushed on this thread; or a skip where libcuda.so.1 is not the double. */
static void *setup(const char *first, ...) {
  if (!cu.lib)
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib || !dlsym(cu.lib, "fakecuda_misuse")) {
    th_skip("needs the driver double tests/fakecuda (LD_LIBRARY_PATH)");
  }
  load((void **)&cu.reload, "fakecuda_reload");
  load((void **)&cu.reset, "fakecuda_reset_counters");
  load((void **)&cu.misuse, "fakecuda_misuse");
  load((void **)&cu.live, "fakecuda_live");
  load((void **)&cu.init, "cuInit");
  load((void **)&cu.retain, "cuDevicePrimaryCtxRetain");
  load((void **)&cu.release, "cuDevicePrimaryCtxRelease_v2");
  load((void **)&cu.push, "cuCtxPushCurrent_v2");
  load((void **)&cu.pop, "cuCtxPopCurrent_v2");
  load((void **)&cu.set_current, "cuCtxSetCurrent");
  load((void **)&cu.mem_info, "cuMemGetInfo_v2");
  load((void **)&cu.alloc, "cuMemAlloc_v2");
  load((void **)&cu.free, "cuMemFree_v2");
  load((void **)&cu.htod, "cuMemcpyHtoD_v2");
  load((void **)&cu.dtoh, "cuMemcpyDtoH_v2");
  load((void **)&cu.stream_create, "cuStreamCreate");
  load((void **)&cu.stream_sync, "cuStreamSynchronize");
  load((void **)&cu.stream_destroy, "cuStreamDestroy_v2");
  load((void **)&cu.event_create, "cuEventCreate");
  load((void **)&cu.event_record, "cuEventRecord");
  load((void **)&cu.event_destroy, "cuEventDestroy_v2");
  load((void **)&cu.wait_event, "cuStreamWaitEvent");
  load((void **)&cu.memset_async, "cuMemsetD8Async");
  load((void **)&cu.pool_create, "cuMemPoolCreate");
  load((void **)&cu.pool_destroy, "cuMemPoolDestroy");
  load((void **)&cu.pool_get, "cuMemPoolGetAttribute");
  load((void **)&cu.pool_set, "cuMemPoolSetAttribute");
  load((void **)&cu.pool_trim, "cuMemPoolTrimTo");
  load((void **)&cu.pool_alloc, "cuMemAllocFromPoolAsync");
  load((void **)&cu.free_async, "cuMemFreeAsync");
  load((void **)&cu.reserve, "cuMemAddressReserve");
  load((void **)&cu.address_free, "cuMemAddressFree");
  load((void **)&cu.create, "cuMemCreate");
  load((void **)&cu.release_handle, "cuMemRelease");
  load((void **)&cu.map, "cuMemMap");
  load((void **)&cu.unmap, "cuMemUnmap");
  load((void **)&cu.set_access, "cuMemSetAccess");
  const char *knobs[] = {"FAKECUDA_MEMORY",        "FAKECUDA_CONTEXT_OVERHEAD",
                         "FAKECUDA_OTHER_PROCESS", "FAKECUDA_HOST_ACCESS",
                         "FAKECUDA_ATTR_OFF",      "FAKECUDA_FAIL"};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
    unsetenv(knobs[i]);
  va_list ap;
  va_start(ap, first);
  for (const char *kv = first; kv; kv = va_arg(ap, const char *))
    putenv((char *)kv);
  va_end(ap);
  cu.reload();
  assert_int_equal(cu.init(0), OK);
  cu.reset();
  void *ctx;
  assert_int_equal(cu.retain(&ctx, 0), OK);
  assert_int_equal(cu.push(ctx), OK);
  return ctx;
}

/* Pops and releases the context; nothing misused, nothing left. */
static void teardown(unsigned long misuses) {
  void *ctx;
  assert_int_equal(cu.pop(&ctx), OK);
  assert_int_equal(cu.release(0), OK);
  assert_int_equal(cu.misuse(), misuses);
  assert_int_equal(cu.live(), 0);
}

/* Whether the host can read [p, p + n): one byte of each page, and the last, written into a
 * pipe (write(2) reports EFAULT instead of a signal). */
static bool byte_readable(int fds[2], dptr_t at) {
  char byte;
  ssize_t got = write(fds[1], (const void *)(uintptr_t)at, 1);
  assert_true(got == 1 || errno == EFAULT);
  return got == 1 && read(fds[0], &byte, 1) == 1;
}

static bool host_readable(dptr_t p, size_t n) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  bool readable = byte_readable(fds, p + n - 1);
  for (size_t off = 0; readable && off < n; off += 4096)
    readable = byte_readable(fds, p + off);
  close(fds[0]);
  close(fds[1]);
  return readable;
}

static void contexts_are_per_thread_and_die(void **state) {
  (void)state;
  setup(NULL);
  void *ctx, *popped;
  dptr_t p;
  assert_int_equal(cu.pop(&popped), OK);
  assert_int_equal(cu.alloc(&p, MiB), INVALID_CONTEXT); /* none current */
  assert_int_equal(cu.set_current(popped), OK);
  assert_int_equal(cu.release(0), OK); /* the last retain: destroyed while current */
  assert_int_equal(cu.alloc(&p, MiB), CONTEXT_IS_DESTROYED);
  assert_int_equal(cu.set_current(NULL), OK);
  assert_int_equal(cu.misuse(), 2);
  ctx = setup(NULL);
  (void)ctx;
  teardown(0);
}

static void memory_is_inaccessible_unless_allocated(void **state) {
  (void)state;
  setup("FAKECUDA_MEMORY=64M", "FAKECUDA_CONTEXT_OVERHEAD=4M", "FAKECUDA_OTHER_PROCESS=77:8M",
        NULL);
  size_t free_bytes, total;
  assert_int_equal(cu.mem_info(&free_bytes, &total), OK);
  assert_int_equal(total, 64 * MiB);
  assert_int_equal(free_bytes, 64 * MiB - 4 * MiB - 8 * MiB); /* context, pid 77 */
  dptr_t p;
  assert_int_equal(cu.alloc(&p, 3 * MiB), OK);
  assert_true(host_readable(p, 3 * MiB));
  assert_int_equal(cu.mem_info(&free_bytes, &total), OK);
  assert_int_equal(free_bytes, 64 * MiB - 4 * MiB - 8 * MiB - 3 * MiB);
  dptr_t q;
  assert_int_equal(cu.alloc(&q, 60 * MiB), OUT_OF_MEMORY); /* 49 MiB free */
  assert_int_equal(cu.free(p), OK);
  assert_false(host_readable(p, 1));
  assert_int_equal(cu.free(p), INVALID_VALUE); /* twice */
  teardown(1);
}

static void discrete_memory_only_through_the_driver(void **state) {
  (void)state;
  setup("FAKECUDA_HOST_ACCESS=0", NULL);
  dptr_t p;
  assert_int_equal(cu.alloc(&p, MiB), OK);
  assert_false(host_readable(p, 1));
  char out[64] = "pattern", in[64] = "";
  assert_int_equal(cu.htod(p + 100, out, sizeof out), OK);
  assert_int_equal(cu.dtoh(in, p + 100, sizeof in), OK);
  assert_string_equal(in, "pattern");
  assert_int_equal(cu.htod(p + MiB - 10, out, sizeof out), INVALID_VALUE); /* past the end */
  assert_int_equal(cu.free(p), OK);
  teardown(1);
}

typedef struct pool_props {
  int alloc_type, handle_types, location_type, location_id;
  void *win32;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
} pool_props_t;

static unsigned long long attr(void *pool, int which) {
  unsigned long long v = 0;
  assert_int_equal(cu.pool_get(pool, which, &v), OK);
  return v;
}

/* Stream order: a block is the host's only once its stream ran; other streams use it once
 * ordered after it; memory freed on a stream is trimmed only once that stream ran. */
static void pools_follow_stream_order(void **state) {
  (void)state;
  setup(NULL);
  pool_props_t props = {.alloc_type = 1, .location_type = 1, .location_id = 0};
  void *pool, *s1, *s2, *event;
  assert_int_equal(cu.pool_create(&pool, &props), OK);
  unsigned long long keep = 64 * MiB;
  assert_int_equal(cu.pool_set(pool, 4, &keep), OK); /* release threshold */
  assert_int_equal(cu.stream_create(&s1, 1), OK);    /* non-blocking */
  assert_int_equal(cu.stream_create(&s2, 1), OK);
  dptr_t p;
  assert_int_equal(cu.pool_alloc(&p, 2 * MiB, pool, s1), OK);
  assert_false(host_readable(p, 1));
  char buf[16] = "x";
  assert_int_equal(cu.htod(p, buf, sizeof buf), ILLEGAL_ADDRESS); /* legacy stream: unordered */
  assert_int_equal(cu.memset_async(p, 0, 16, s2), ILLEGAL_ADDRESS);
  assert_int_equal(cu.memset_async(p, 0, 16, s1), OK); /* its own stream */
  assert_int_equal(cu.event_create(&event, 0), OK);
  assert_int_equal(cu.event_record(event, s1), OK);
  assert_int_equal(cu.wait_event(s2, event, 0), OK);
  assert_int_equal(cu.memset_async(p, 1, 16, s2), OK); /* ordered after it now */
  assert_int_equal(cu.stream_sync(s2), OK);            /* and so s1 ran too */
  assert_true(host_readable(p, 2 * MiB));
  assert_int_equal(attr(pool, 7), 2 * MiB); /* used */
  assert_int_equal(cu.free_async(p, s1), OK);
  assert_false(host_readable(p, 1));
  assert_int_equal(attr(pool, 7), 0);
  assert_int_equal(cu.pool_trim(pool, 0), OK);
  assert_int_equal(attr(pool, 5), 2 * MiB); /* reserved: its stream has not run the free */
  assert_int_equal(cu.stream_sync(s1), OK);
  assert_int_equal(attr(pool, 5), 2 * MiB); /* under the threshold: kept */
  assert_int_equal(cu.pool_trim(pool, 0), OK);
  assert_int_equal(attr(pool, 5), 0);
  assert_int_equal(cu.event_destroy(event), OK);
  assert_int_equal(cu.stream_destroy(s1), OK);
  assert_int_equal(cu.stream_destroy(s2), OK);
  assert_int_equal(cu.pool_destroy(pool), OK);
  teardown(2);
}

typedef struct alloc_prop {
  int type, handle_types, location_type, location_id;
  void *win32;
  unsigned char flags[8];
} alloc_prop_t;

typedef struct access_desc {
  int location_type, location_id, flags;
} access_desc_t;

static void virtual_memory_is_checked(void **state) {
  (void)state;
  setup(NULL);
  const size_t g = 2 * MiB; /* the default granularity */
  alloc_prop_t prop = {.type = 1, .location_type = 1, .location_id = 0};
  access_desc_t rw = {.location_type = 1, .location_id = 0, .flags = 3};
  dptr_t base;
  unsigned long long h;
  assert_int_equal(cu.reserve(&base, 8 * g, 0, 0, 0), OK);
  assert_int_equal(cu.create(&h, g + 4096, &prop, 0), INVALID_VALUE); /* not granular */
  assert_int_equal(cu.create(&h, 2 * g, &prop, 0), OK);
  assert_int_equal(cu.map(base, 2 * g, 0, h, 0), OK);
  assert_false(host_readable(base, 1)); /* mapped, no access yet */
  char buf[8];
  assert_int_equal(cu.dtoh(buf, base, sizeof buf), ILLEGAL_ADDRESS);
  assert_int_equal(cu.set_access(base, 2 * g, &rw, 1), OK);
  assert_true(host_readable(base, 2 * g));
  assert_int_equal(cu.map(base + g, g, 0, h, 0), INVALID_VALUE); /* overlaps */
  assert_int_equal(cu.unmap(base, g), INVALID_VALUE);            /* half a mapping */
  assert_int_equal(cu.release_handle(h), OK);                    /* lives on while mapped */
  assert_true(host_readable(base, 2 * g));
  assert_int_equal(cu.address_free(base, 8 * g), INVALID_VALUE); /* still mapped */
  assert_int_equal(cu.unmap(base, 2 * g), OK);
  assert_false(host_readable(base, 1));
  assert_int_equal(cu.address_free(base, 8 * g), OK);
  teardown(5);
}

static void features_and_failures_are_switches(void **state) {
  (void)state;
  setup("FAKECUDA_ATTR_OFF=VMM,POOLS", "FAKECUDA_FAIL=cuMemAlloc_v2:2,cuMemFree_v2:1:999", NULL);
  pool_props_t props = {.alloc_type = 1, .location_type = 1, .location_id = 0};
  void *pool;
  dptr_t base, a, b;
  assert_int_equal(cu.pool_create(&pool, &props), NOT_SUPPORTED);
  assert_int_equal(cu.reserve(&base, 2 * MiB, 0, 0, 0), NOT_SUPPORTED);
  assert_int_equal(cu.alloc(&a, MiB), OK);
  assert_int_equal(cu.alloc(&b, MiB), OUT_OF_MEMORY); /* the 2nd call */
  assert_int_equal(cu.alloc(&b, MiB), OK);
  assert_int_equal(cu.free(a), 999); /* injected: a stays allocated */
  assert_true(host_readable(a, MiB));
  assert_int_equal(cu.free(a), OK);
  assert_int_equal(cu.free(b), OK);
  teardown(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(contexts_are_per_thread_and_die),
      cmocka_unit_test(memory_is_inaccessible_unless_allocated),
      cmocka_unit_test(discrete_memory_only_through_the_driver),
      cmocka_unit_test(pools_follow_stream_order),
      cmocka_unit_test(virtual_memory_is_checked),
      cmocka_unit_test(features_and_failures_are_switches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
