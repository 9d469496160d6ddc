/* pb_wire.h — a reader of the protobuf wire format over bytes already in memory, for the
 * messages hbm walks itself (an XSpace can be hundreds of MB: it is read field by field in
 * place, never expanded into a tree). Every failure says the file, the byte offset from the
 * start of the file and what was expected there. */
#ifndef HBM_PB_WIRE_H
#define HBM_PB_WIRE_H

#include "base/base.h"

#include <protobuf-c/protobuf-c.h>

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

typedef struct pb_reader {
  const uint8_t *p, *end;
  const uint8_t *file_start; /* for offsets in messages */
  const char *file;
  const char *what; /* the message being read, e.g. "XPlane" */
} pb_reader_t;

typedef struct pb_field {
  uint32_t number;
  int wire;
  uint64_t varint;     /* PB_VARINT, PB_I64, PB_I32 */
  const uint8_t *data; /* PB_LEN */
  size_t len;
  size_t offset; /* of the field's tag in the file */
} pb_field_t;

/* A reader over [data, data+len) inside the file that starts at file_start. */
pb_reader_t pb_reader(const uint8_t *data, size_t len, const uint8_t *file_start, const char *file,
                      const char *what);
/* The reader over a length-delimited field's content. */
pb_reader_t pb_sub(const pb_reader_t *r, const pb_field_t *f, const char *what);
/* Reads the next field: 1 = got one, 0 = end of the message, -1 = malformed (error set). */
int pb_next_field(pb_reader_t *r, pb_field_t *f);
/* pb_next_field, with the common case inline: a one-byte tag of a field numbered 1-15 whose
 * value is a one-byte varint or a length of one byte (most fields of an XPlane's events and
 * stats; the call per field was a fifth of reading a big .xplane.pb). */
static inline int pb_next(pb_reader_t *r, pb_field_t *f) {
  const uint8_t *p = r->p;
  if (r->end - p >= 2 && p[0] < 0x80 && p[0] >= 8 && p[1] < 0x80) {
    int wire = p[0] & 7;
    if (wire == 0 || (wire == 2 && (size_t)(r->end - p - 2) >= p[1])) {
      f->number = p[0] >> 3;
      f->wire = wire;
      f->offset = (size_t)(p - r->file_start);
      f->varint = p[1];
      f->data = wire == 2 ? p + 2 : NULL;
      f->len = wire == 2 ? p[1] : 0;
      r->p = p + 2 + f->len;
      return 1;
    }
  }
  return pb_next_field(r, f);
}
/* The field must have this wire type; else an error naming the field and offset. */
bool pb_expect(const pb_reader_t *r, const pb_field_t *f, int wire, const char *field_name);
/* Offset of p in the file. */
size_t pb_offset(const pb_reader_t *r, const uint8_t *p);

/* How deep messages may nest in what protobuf-c unpacks (the outer message is level 0).
 * protobuf's own C++ parser refuses past 100 levels (its default recursion limit), so XLA never
 * writes or reads a deeper HloProto; protobuf-c has no limit and recurses once per level, so
 * a file nesting 10,000 tuple shapes would overflow the stack. */
enum { PB_MAX_DEPTH = 100 };

/* Walks a message's bytes against protobuf-c's descriptor without building anything, before
 * protobuf-c unpacks it: every field hbm declares has its declared wire type, and sub-messages
 * nest at most max_depth levels. false with the error set: the byte offset, the message, and
 * what was expected (or the depth limit). The walk itself recurses at most max_depth deep. */
bool pb_check_message(pb_reader_t r, const ProtobufCMessageDescriptor *d, int max_depth);

#endif /* HBM_PB_WIRE_H */
