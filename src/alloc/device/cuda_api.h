/* cuda_api.h — the few CUDA driver API and NVML types, constants and entry points
 * device_cuda.c uses, declared here under our own names so the CUDA backend compiles on
 * machines without the CUDA headers: the driver itself (libcuda.so.1) and NVML
 * (libnvidia-ml.so.1) are loaded with dlopen at run time, so nothing links against CUDA.
 * When cuda.h is present (HBM_HAVE_CUDA_H), device_cuda.c checks every size, field offset and
 * constant of the driver's below against it at compile time. */
#ifndef HBM_ALLOC_CUDA_API_H
#define HBM_ALLOC_CUDA_API_H

#include <stddef.h>

typedef int hbmcu_result_t; /* CUresult */
typedef int hbmcu_device_t; /* CUdevice */
typedef struct hbmcu_ctx *hbmcu_context_t;
typedef struct hbmcu_stream *hbmcu_stream_t;
typedef struct hbmcu_mempool *hbmcu_mempool_t;
typedef unsigned long long hbmcu_deviceptr_t;  /* CUdeviceptr on 64-bit hosts */
typedef unsigned long long hbmcu_mem_handle_t; /* CUmemGenericAllocationHandle */

enum {
  HBMCU_SUCCESS = 0,
  HBMCU_ERROR_OUT_OF_MEMORY = 2,
  HBMCU_ERROR_NO_DEVICE = 100,
  HBMCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  HBMCU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
  HBMCU_STREAM_NON_BLOCKING = 1,
  HBMCU_MEM_ALLOCATION_TYPE_PINNED = 1,
  HBMCU_MEM_LOCATION_TYPE_DEVICE = 1,
  HBMCU_MEM_HANDLE_TYPE_NONE = 0,
  HBMCU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
  HBMCU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  HBMCU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  HBMCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  HBMCU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
};

typedef struct hbmcu_mem_location { /* CUmemLocation */
  int type;
  int id;
} hbmcu_mem_location_t;

typedef struct hbmcu_alloc_prop { /* CUmemAllocationProp */
  int type;
  int requested_handle_types;
  hbmcu_mem_location_t location;
  void *win32_handle_meta_data;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} hbmcu_alloc_prop_t;

typedef struct hbmcu_access_desc { /* CUmemAccessDesc */
  hbmcu_mem_location_t location;
  int flags;
} hbmcu_access_desc_t;

typedef struct hbmcu_pool_props { /* CUmemPoolProps */
  int alloc_type;
  int handle_types;
  hbmcu_mem_location_t location;
  void *win32_security_attributes;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
} hbmcu_pool_props_t;

/* NVML (nvml.h): who holds a GPU's memory. */
typedef int hbmnv_return_t; /* nvmlReturn_t */
typedef struct hbmnv_device *hbmnv_device_t;
enum { HBMNV_SUCCESS = 0, HBMNV_ERROR_INSUFFICIENT_SIZE = 7 };
#define HBMNV_VALUE_NOT_AVAILABLE (~0ull) /* usedGpuMemory NVML may not tell (containers) */

typedef struct hbmnv_memory { /* nvmlMemory_t */
  unsigned long long total, free, used;
} hbmnv_memory_t;

typedef struct hbmnv_process { /* nvmlProcessInfo_t, as _v2 and _v3 fill it */
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
} hbmnv_process_t;

#endif /* HBM_ALLOC_CUDA_API_H */
