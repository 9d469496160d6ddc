/* hlo_shape.h — sizes and text of XLA shapes read from an HloProto (hlo_shape.c). */
#ifndef HBM_IMPORT_HLO_SHAPE_H
#define HBM_IMPORT_HLO_SHAPE_H

#include "base/base.h"
#include "hlo.pb-c.h"

/* Bytes of the shape in its default layout (XProf's "unpadded size"). */
uint64_t hlo_shape_unpadded_bytes(const HbmHlo__ShapeProto *s);
/* Appends XLA's text of the shape with its layout. */
void hlo_shape_text(const HbmHlo__ShapeProto *s, hbm_strbuf_t *sb, int depth);
/* The subshape a logical buffer's shape index names, as XProf resolves it. */
const HbmHlo__ShapeProto *hlo_shape_at_index(const HbmHlo__ShapeProto *s, const int64_t *index,
                                             size_t n_index);

#endif /* HBM_IMPORT_HLO_SHAPE_H */
