# proto.cmake — hbm's own .proto files (proto/*.proto: the parts of XProf's xplane.proto and
# XLA's hlo.proto that hbm reads) compiled to C with protoc-c at build time, into the import
# layer, linked with Debian's libprotobuf-c.
find_program(HBM_PROTOC_C protoc-c)
pkg_check_modules(PROTOBUF_C IMPORTED_TARGET libprotobuf-c)
if(NOT HBM_PROTOC_C OR NOT PROTOBUF_C_FOUND)
  message(FATAL_ERROR "hbm reads XProf profiles with protobuf-c: protoc-c and libprotobuf-c "
                      "were not found. Run scripts/install-deps.sh (Debian packages "
                      "protobuf-c-compiler and libprotobuf-c-dev).")
endif()

file(GLOB HBM_PROTOS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/proto/*.proto)
set(HBM_PROTO_OUT ${CMAKE_BINARY_DIR}/proto)
file(MAKE_DIRECTORY ${HBM_PROTO_OUT})
set(HBM_PROTO_SRCS "")
foreach(proto ${HBM_PROTOS})
  get_filename_component(stem ${proto} NAME_WE)
  set(out_c ${HBM_PROTO_OUT}/${stem}.pb-c.c)
  add_custom_command(
    OUTPUT ${out_c} ${HBM_PROTO_OUT}/${stem}.pb-c.h
    COMMAND ${HBM_PROTOC_C} --c_out=${HBM_PROTO_OUT} -I${CMAKE_SOURCE_DIR}/proto ${proto}
    DEPENDS ${proto}
    COMMENT "protoc-c ${stem}.proto")
  list(APPEND HBM_PROTO_SRCS ${out_c})
endforeach()
# Generated code: not ours to make warning-free.
set_source_files_properties(${HBM_PROTO_SRCS} PROPERTIES COMPILE_OPTIONS "-w")
