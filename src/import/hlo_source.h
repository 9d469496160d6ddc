/* hlo_source.h — where an HLO instruction comes from in the user's program (hlo_source.c):
 * OpMetadata's source_file:source_line, or the frames of the module's stack-frame index that
 * today's JAX writes instead (OpMetadata.stack_frame_id), chosen and printed as XProf does. */
#ifndef HBM_IMPORT_HLO_SOURCE_H
#define HBM_IMPORT_HLO_SOURCE_H

#include "base/base.h"
#include "hlo.pb-c.h"

typedef struct hlo_source {
  const HbmHlo__StackFrameIndexProto *index; /* NULL: the module has none */
  hbm_intern_t *strings;
  struct hlo_frame_text *texts; /* per frame id - 1: its texts, filled when first asked */
  uint32_t *visited;            /* per frame id - 1: the last walk that passed it (loops) */
  uint32_t walks;
  size_t n_frames;
  size_t n_bad;      /* instructions whose frame id pointed nowhere, or whose frames loop */
  int64_t first_bad; /* the first such frame id */
} hlo_source_t;

/* Frames kept per stack: deeper ones are left out (JAX keeps only the user's frames). */
#define HLO_SOURCE_MAX_FRAMES 256

/* false when memory ran out (error set). */
bool hlo_source_init(hlo_source_t *s, const HbmHlo__HloModuleProto *m, hbm_intern_t *strings);
void hlo_source_free(hlo_source_t *s);

/* An instruction's source line ("file:line") and stack ("file:line:column" per frame,
 * innermost first, one per line), interned; each NULL when unknown. A frame id that points
 * nowhere counts in n_bad and gives no source. false only when memory ran out. */
bool hlo_source_of(hlo_source_t *s, const HbmHlo__OpMetadata *md, const char **source,
                   const char **stack);

#endif /* HBM_IMPORT_HLO_SOURCE_H */
