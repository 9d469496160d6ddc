/* routes.c — the viewer's request handler, independent of the HTTP server: /api/<name> goes
 * to its endpoint, a few fixed paths to the page embedded at build time, anything else to an
 * HTML "not found" page. No path is ever mapped to a file, so "../" and friends have nothing
 * to reach; profile files are named only through the logdir listing (profile_cache.c). */
#include "viewer/viewer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct endpoint {
  const char *path;
  hbm__endpoint_fn fn;
  bool about_one_profile; /* its answers depend on one profile's file: kept per profile */
} endpoint_t;

static const endpoint_t endpoints[] = {
    {"/api/runs", hbm__api_runs, false},
    {"/api/profiles", hbm__api_profiles, false},
    {"/api/profile", hbm__api_profile, true},
    {"/api/summary", hbm__api_summary, true},
    {"/api/timeline", hbm__api_timeline, true},
    {"/api/buffers_at_peak", hbm__api_buffers_at_peak, true},
    {"/api/buffers_at", hbm__api_buffers_at, true},
    {"/api/buffer", hbm__api_buffer, true},
    {"/api/allocations", hbm__api_allocations, true},
    {"/api/oom", hbm__api_oom, true},
    {"/api/compare", hbm__api_compare, false},
    {"/api/devices", hbm__api_devices, false},
    {"/api/step_plan", hbm__api_step_plan, true},
};

hbm__viewer_t *hbm__viewer_new(const char *logdir) {
  struct stat st;
  if (!logdir || !*logdir) {
    hbm__error(HBM_ERR_INVALID, "no logdir given");
    return NULL;
  }
  if (stat(logdir, &st) != 0) {
    hbm__error(HBM_ERR_NOT_FOUND, "logdir %s does not exist", logdir);
    return NULL;
  }
  if (!S_ISDIR(st.st_mode)) {
    hbm__error(HBM_ERR_INVALID, "logdir %s is not a directory", logdir);
    return NULL;
  }
  hbm__viewer_t *v = calloc(1, sizeof *v);
  if (!v) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  if (hbm__cache_init(&v->cache, logdir) != HBM_OK) {
    free(v);
    return NULL;
  }
  return v;
}

void hbm__viewer_free(hbm__viewer_t *v) {
  if (!v)
    return;
  hbm__cache_destroy(&v->cache);
  free(v);
}

static void html_escape(hbm_strbuf_t *sb, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': hbm_strbuf_puts(sb, "&lt;"); break;
    case '>': hbm_strbuf_puts(sb, "&gt;"); break;
    case '&': hbm_strbuf_puts(sb, "&amp;"); break;
    case '"': hbm_strbuf_puts(sb, "&quot;"); break;
    case '\'': hbm_strbuf_puts(sb, "&#39;"); break;
    default: hbm_strbuf_append(sb, s, 1);
    }
  }
}

static void respond_html_error(hbm__response_t *r, int status, const char *title,
                               const char *path) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb,
                    "<!doctype html><html><head><meta charset=\"utf-8\"><title>%d %s — hbm "
                    "Memory Viewer</title></head><body style=\"font-family:sans-serif;"
                    "margin:3em\"><h1>%d %s</h1><p><code>",
                    status, title, status, title);
  html_escape(&sb, path);
  hbm_strbuf_puts(&sb, "</code> is not a page of the hbm Memory Viewer.</p>"
                       "<p><a href=\"/\">Back to the viewer</a></p></body></html>\n");
  hbm__response_free(r);
  r->status = status;
  r->content_type = "text/html; charset=utf-8";
  if (sb.failed || !sb.data) {
    hbm_strbuf_free(&sb);
    r->body = "<!doctype html><h1>error</h1>";
    r->len = strlen(r->body);
    return;
  }
  r->body = sb.data;
  r->len = sb.len;
  r->owned = true;
}

static int cmp_index_by_key(const void *a, const void *b, void *ctx) {
  const hbm__query_t *q = ctx;
  return strcmp(q->key[*(const size_t *)a], q->key[*(const size_t *)b]);
}

/* The request with its arguments sorted, each with its length, so equal requests have equal
 * keys and no value can forge a separator. */
static char *canonical_request(const char *path, const hbm__query_t *q) {
  size_t order[HBM__QUERY_MAX];
  for (size_t i = 0; i < q->n; i++)
    order[i] = i;
  qsort_r(order, q->n, sizeof order[0], cmp_index_by_key, (void *)q);
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_puts(&sb, path);
  for (size_t i = 0; i < q->n; i++)
    hbm_strbuf_printf(&sb, "&%zu:%s=%zu:%s", strlen(q->key[order[i]]), q->key[order[i]],
                      strlen(q->value[order[i]]), q->value[order[i]]);
  if (sb.failed) {
    hbm_strbuf_free(&sb);
    return NULL;
  }
  return sb.data;
}

/* Answers a request about one profile from the answers kept for its current version, or
 * computes the answer and keeps it. The entry is looked up as the endpoint does (the same
 * version check), so a changed file is never answered from the old one's answers. */
static void answer_about_profile(hbm__viewer_t *v, const endpoint_t *ep, const hbm__query_t *q,
                                 hbm__response_t *out) {
  const char *run = hbm__query_get(q, "run"), *file = hbm__query_get(q, "profile");
  hbm__loaded_t *e = run && file ? hbm__cache_get(&v->cache, run, file) : NULL;
  char *key = e && e->profile ? canonical_request(ep->path, q) : NULL;
  char *body;
  size_t len;
  if (key && hbm__loaded_answer(e, key, &body, &len)) {
    out->status = 200;
    out->content_type = "application/json";
    out->body = body;
    out->len = len;
    out->owned = true;
  } else {
    ep->fn(v, q, out);
    if (key && out->status == 200)
      hbm__loaded_keep_answer(e, key, out->body, out->len);
  }
  free(key);
  hbm__cache_release(&v->cache, e);
}

void hbm__viewer_handle_url(hbm__viewer_t *v, const char *method, const char *url,
                            hbm__response_t *out) {
  char *path = strdup(url ? url : "/");
  if (!path) {
    memset(out, 0, sizeof *out);
    hbm__respond_error(out, 503, "out of host memory");
    return;
  }
  char *qmark = strchr(path, '?');
  hbm__query_t q;
  hbm__query_init(&q);
  if (qmark) {
    *qmark = '\0';
    hbm__query_parse(&q, qmark + 1, strlen(qmark + 1));
  }
  hbm__url_decode(path, false);
  hbm__viewer_handle(v, method, path, &q, out);
  hbm__query_free(&q);
  free(path);
}

static const hbm__asset_t *find_asset(const char *path) {
  if (!strcmp(path, "/index.html"))
    path = "/";
  for (size_t i = 0; i < hbm__asset_count; i++)
    if (!strcmp(hbm__assets[i].path, path))
      return &hbm__assets[i];
  return NULL;
}

void hbm__viewer_handle(hbm__viewer_t *v, const char *method, const char *path,
                        const hbm__query_t *q, hbm__response_t *out) {
  memset(out, 0, sizeof *out);
  if (!path)
    path = "/";
  bool api = !strncmp(path, "/api/", 5);
  if (!method || (strcmp(method, "GET") && strcmp(method, "HEAD"))) {
    if (api)
      hbm__respond_error(out, 405, "only GET is supported");
    else
      respond_html_error(out, 405, "Method Not Allowed", path);
    return;
  }
  if (api) {
    for (size_t i = 0; i < HBM_ARRAY_LEN(endpoints); i++)
      if (!strcmp(endpoints[i].path, path)) {
        if (endpoints[i].about_one_profile)
          answer_about_profile(v, &endpoints[i], q, out);
        else
          endpoints[i].fn(v, q, out);
        return;
      }
    hbm__respond_error(out, 404, "unknown API endpoint (see docs/viewer.md)");
    return;
  }
  const hbm__asset_t *asset = find_asset(path);
  if (!asset) {
    respond_html_error(out, 404, "Not Found", path);
    return;
  }
  out->status = 200;
  out->content_type = asset->content_type;
  out->body = (const char *)asset->data;
  out->len = asset->len;
  out->cacheable = strcmp(asset->path, "/") != 0;
}
