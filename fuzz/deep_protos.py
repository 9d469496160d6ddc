#!/usr/bin/env python3
"""deep_protos.py — writes the fuzz corpus entries for nesting depth (issue 26, finding 1):
an HloProto whose instruction shape nests 10,000 tuple_shapes (34 KB; protobuf-c recursed once
per level and overflowed the stack), bare (fuzz_xplane's leading 'H') and inside an XSpace's
/host:metadata plane, plus the same at the accepted limit (level 100). libFuzzer does not
reach these by mutation: they need structure. Run from the repository root:
    python3 fuzz/deep_protos.py"""


def varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, payload):  # a length-delimited field
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def int_field(num, value):
    return varint(num << 3) + varint(value)


def deep_hlo(tuples):
    shape = b""
    for _ in range(tuples):
        shape = field(4, shape)  # ShapeProto.tuple_shapes
    instruction = field(1, b"x") + field(3, shape)
    return field(1, field(3, field(2, instruction)))  # HloProto.hlo_module.computations[0]


def metadata_xspace(hlo):
    stat = int_field(1, 1) + field(6, hlo)  # XStat{metadata_id 1, bytes_value}
    event_meta = int_field(1, 8) + field(2, b"jit_deep(8)") + field(5, stat)
    stat_meta = int_field(1, 1) + field(2, b"hlo_proto")
    plane = (field(2, b"/host:metadata") + field(4, int_field(1, 8) + field(2, event_meta)) +
             field(5, int_field(1, 1) + field(2, stat_meta)))
    return field(1, plane)


entries = {
    "deep_tuple_shapes.hlo": b"H" + deep_hlo(10000),
    "deep_tuple_shapes_metadata.xplane": metadata_xspace(deep_hlo(10000)),
    "limit_tuple_shapes.hlo": b"H" + deep_hlo(96),  # HloProto 0 ... shape 4, tuples to 100
}
for name, data in entries.items():
    with open("fuzz/corpus/xplane/" + name, "wb") as f:
        f.write(data)
