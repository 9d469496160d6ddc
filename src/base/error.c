/* error.c — the per-thread "last error" of libhbm. Every failing call leaves its message
 * here; hbm_last_error() hands it to the user. Messages can be long (an OOM diagnosis lists
 * live buffers), so the buffer grows on demand instead of truncating. */
#include "base.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char *last_message;
static _Thread_local size_t last_cap;
static _Thread_local hbm_status_t last_status;

/* A thread's message buffer is freed when the thread exits (servers run a thread per
 * connection): the key's destructor frees what it was last set to. */
static pthread_key_t message_key;
static pthread_once_t message_key_once = PTHREAD_ONCE_INIT;
static void free_message(void *message) { free(message); }
static void make_message_key(void) { pthread_key_create(&message_key, free_message); }

/* Used when even the message buffer cannot be allocated. */
static const char out_of_host_memory[] = "out of host memory while reporting an error";

static bool reserve_message(size_t need) {
  if (need <= last_cap)
    return true;
  size_t cap = last_cap ? last_cap : 256;
  while (cap < need)
    cap *= 2;
  char *grown = realloc(last_message, cap);
  if (!grown)
    return false;
  last_message = grown;
  last_cap = cap;
  pthread_once(&message_key_once, make_message_key);
  pthread_setspecific(message_key, grown);
  return true;
}

hbm_status_t hbm__error_text(hbm_status_t status, const char *text) {
  last_status = status;
  size_t n = strlen(text);
  if (!reserve_message(n + 1)) {
    if (last_message && last_cap)
      last_message[0] = '\0';
    return status;
  }
  memcpy(last_message, text, n + 1);
  return status;
}

hbm_status_t hbm__error(hbm_status_t status, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return hbm__error_text(status, fmt);
  if ((size_t)n < sizeof small)
    return hbm__error_text(status, small);
  last_status = status;
  if (!reserve_message((size_t)n + 1))
    return status;
  va_start(ap, fmt);
  vsnprintf(last_message, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return status;
}

void hbm__error_clear(void) {
  last_status = HBM_OK;
  if (last_message)
    last_message[0] = '\0';
}

const char *hbm_last_error(void) {
  if (last_status != HBM_OK && (!last_message || !last_message[0]))
    return out_of_host_memory;
  return last_message ? last_message : "";
}

hbm_status_t hbm_last_status(void) { return last_status; }

const char *hbm_status_name(hbm_status_t s) {
  switch (s) {
  case HBM_OK: return "OK";
  case HBM_ERR_INVALID: return "INVALID_ARGUMENT";
  case HBM_ERR_NO_MEMORY: return "RESOURCE_EXHAUSTED";
  case HBM_ERR_HOST_MEMORY: return "HOST_OUT_OF_MEMORY";
  case HBM_ERR_IO: return "IO_ERROR";
  case HBM_ERR_PARSE: return "PARSE_ERROR";
  case HBM_ERR_UNAVAILABLE: return "UNAVAILABLE";
  case HBM_ERR_NOT_FOUND: return "NOT_FOUND";
  case HBM_ERR_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}
