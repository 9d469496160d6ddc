/* pb_wire.c — the protobuf wire format, read in place (see pb_wire.h). Varints longer than
 * ten bytes, lengths past the end of the enclosing message, the deprecated group wire types
 * and field number 0 are errors with the byte offset where they were found. pb_check_message
 * walks the same bytes against a protobuf-c descriptor (wire types, nesting depth) so that a
 * file protobuf-c would choke on, or recurse on without end, is refused with a place. */
#include "import/pb_wire.h"

static const char *const wire_names[] = {"varint",    "64-bit", "length-delimited", "group start",
                                         "group end", "32-bit", "wire type 6",      "wire type 7"};

pb_reader_t pb_reader(const uint8_t *data, size_t len, const uint8_t *file_start, const char *file,
                      const char *what) {
  static const uint8_t nothing[1];
  if (!data) /* an absent field: an empty message */
    data = nothing, len = 0;
  pb_reader_t r = {data, data + len, file_start, file, what};
  return r;
}

pb_reader_t pb_sub(const pb_reader_t *r, const pb_field_t *f, const char *what) {
  return pb_reader(f->data, f->len, r->file_start, r->file, what);
}

size_t pb_offset(const pb_reader_t *r, const uint8_t *p) { return (size_t)(p - r->file_start); }

static int fail(pb_reader_t *r, const uint8_t *at, const char *expected) {
  hbm__error(HBM_ERR_PARSE, "%s: byte %zu: in %s: expected %s", r->file, pb_offset(r, at), r->what,
             expected);
  return -1;
}

static bool read_long_varint(pb_reader_t *r, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (r->p >= r->end)
      return false;
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* Most tags and lengths are one byte: those take one compare (a sixth of the time in reading
 * a big .xplane.pb went to decoding fields). */
static inline bool read_varint(pb_reader_t *r, uint64_t *out) {
  if (r->p < r->end && *r->p < 0x80) {
    *out = *r->p++;
    return true;
  }
  return read_long_varint(r, out);
}

static uint64_t read_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* The value of a field whose tag was read. */
static int read_value(pb_reader_t *r, pb_field_t *f, const uint8_t *tag_at) {
  size_t left;
  switch (f->wire) {
  case PB_VARINT:
    if (!read_varint(r, &f->varint))
      return fail(r, tag_at, "a varint value (at most 10 bytes, before the end)");
    return 1;
  case PB_I64:
  case PB_I32: {
    int n = f->wire == PB_I64 ? 8 : 4;
    if (r->end - r->p < n)
      return fail(r, tag_at,
                  f->wire == PB_I64 ? "8 bytes of a 64-bit field, found the end"
                                    : "4 bytes of a 32-bit field, found the end");
    f->varint = read_le(r->p, n);
    r->p += n;
    return 1;
  }
  case PB_LEN:
    if (!read_varint(r, &f->varint))
      return fail(r, tag_at, "the length of a length-delimited field");
    left = (size_t)(r->end - r->p);
    if (f->varint > left) {
      hbm__error(HBM_ERR_PARSE,
                 "%s: byte %zu: in %s: field %u says %llu bytes follow, but only %zu are left "
                 "in the message (truncated or corrupt file)",
                 r->file, pb_offset(r, tag_at), r->what, f->number, (unsigned long long)f->varint,
                 left);
      return -1;
    }
    f->data = r->p;
    f->len = (size_t)f->varint;
    r->p += f->len;
    return 1;
  default:
    hbm__error(HBM_ERR_PARSE,
               "%s: byte %zu: in %s: field %u has %s, expected varint, 64-bit, "
               "length-delimited or 32-bit (not a protobuf message, or corrupt)",
               r->file, pb_offset(r, tag_at), r->what, f->number, wire_names[f->wire & 7]);
    return -1;
  }
}

int pb_next_field(pb_reader_t *r, pb_field_t *f) {
  if (r->p >= r->end)
    return 0;
  const uint8_t *tag_at = r->p;
  uint64_t tag;
  if (!read_varint(r, &tag))
    return fail(r, tag_at, "a field tag (varint), found the end or an over-long varint");
  f->number = (uint32_t)(tag >> 3);
  f->wire = (int)(tag & 7);
  f->offset = pb_offset(r, tag_at);
  f->data = NULL;
  f->len = 0;
  if (f->number == 0 || tag >> 3 > 0x1fffffff)
    return fail(r, tag_at, "a field number from 1 to 536870911 (not a protobuf message)");
  return read_value(r, f, tag_at);
}

bool pb_expect(const pb_reader_t *r, const pb_field_t *f, int wire, const char *field_name) {
  if (f->wire == wire)
    return true;
  hbm__error(HBM_ERR_PARSE, "%s: byte %zu: in %s: field %u (%s) has %s, expected %s", r->file,
             f->offset, r->what, f->number, field_name, wire_names[f->wire & 7],
             wire_names[wire & 7]);
  return false;
}

/* The wire type protobuf-c expects for a field of this type (not packed). */
static int wire_of(const ProtobufCFieldDescriptor *fd) {
  switch (fd->type) {
  case PROTOBUF_C_TYPE_DOUBLE:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_SFIXED64: return PB_I64;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_SFIXED32: return PB_I32;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE: return PB_LEN;
  default: return PB_VARINT;
  }
}

static bool check_at_depth(pb_reader_t r, const ProtobufCMessageDescriptor *d, int depth,
                           int max_depth) {
  pb_field_t f;
  int got;
  while ((got = pb_next(&r, &f)) > 0) {
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.number);
    if (!fd)
      continue; /* a field hbm does not read: protobuf-c skips it too */
    int want = wire_of(fd);
    bool packed = fd->label == PROTOBUF_C_LABEL_REPEATED && want != PB_LEN && f.wire == PB_LEN;
    if (!packed && !pb_expect(&r, &f, want, fd->name))
      return false;
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
      continue;
    const ProtobufCMessageDescriptor *sub = fd->descriptor;
    if (depth + 1 > max_depth) {
      hbm__error(HBM_ERR_PARSE,
                 "%s: byte %zu: in %s: field %u (%s, a %s) would be message level %d: messages "
                 "nested deeper than %d levels are refused (protobuf's own parser stops at 100)",
                 r.file, f.offset, r.what, f.number, fd->name, sub->short_name, depth + 1,
                 max_depth);
      return false;
    }
    if (!check_at_depth(pb_sub(&r, &f, sub->short_name), sub, depth + 1, max_depth))
      return false;
  }
  return got == 0;
}

bool pb_check_message(pb_reader_t r, const ProtobufCMessageDescriptor *d, int max_depth) {
  return check_at_depth(r, d, 0, max_depth);
}
