/* fuzz_viewer_request.c — the viewer's request handling without a socket: an input is a
 * method selector byte and a URL ("/api/timeline?run=...&from=..."); the path is
 * percent-decoded as the HTTP server would, the query parsed by hbm__query_parse, and the
 * request answered by hbm__viewer_handle against a small fixture logdir (two plans, a runtime
 * profile with an OOM, a corrupt and a truncated one) written once at start. Every answer must
 * be a well-formed response: JSON for /api/, never a crash, a leak or a file outside the
 * logdir. */
#include "viewer/viewer.h"

#include "../tests/viewer_fixtures.h"

#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char fixture_dir[] = "/tmp/hbm-fuzz-viewer-XXXXXX";
static hbm__viewer_t *viewer;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void cleanup(void) {
  hbm__viewer_free(viewer);
  viewer = NULL;
  nftw(fixture_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static hbm__viewer_t *fixture_viewer(void) {
  if (viewer)
    return viewer;
  if (!mkdtemp(fixture_dir) || vf_write_logdir(fixture_dir, 400) != 0) {
    fprintf(stderr, "fuzz_viewer_request: cannot write the fixture logdir: %s\n", hbm_last_error());
    abort();
  }
  viewer = hbm__viewer_new(fixture_dir);
  if (!viewer)
    abort();
  atexit(cleanup);
  return viewer;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE"};
  hbm__viewer_t *v = fixture_viewer();
  if (size == 0)
    return 0;
  const char *method = methods[data[0] & 3];
  char *url = strndup((const char *)data + 1, size - 1);
  if (!url)
    return 0;
  hbm__response_t r;
  hbm__viewer_handle_url(v, method, url, &r);
  if (r.status < 200 || r.status > 599 || !r.content_type || (r.len && !r.body))
    abort();
  bool json = !strcmp(r.content_type, "application/json");
  if (!strncmp(url, "/api/", 5) && !json) /* an API path answers JSON, errors included */
    abort();
  if (json) {
    json_t *root = json_loadb(r.body, r.len, 0, NULL);
    if (!root || (r.status >= 400 && !json_is_string(json_object_get(root, "error"))))
      abort();
    json_decref(root);
  }
  hbm__response_free(&r);
  free(url);
  return 0;
}
