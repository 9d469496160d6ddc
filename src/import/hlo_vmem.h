/* hlo_vmem.h — a TPU program's largest scoped VMEM allocation (hlo_vmem.c). */
#ifndef HBM_IMPORT_HLO_VMEM_H
#define HBM_IMPORT_HLO_VMEM_H

#include "base/base.h"
#include "hlo.pb-c.h"

/* The largest scoped allocation of memory colour `color` (VMEM is 1) that the module's
 * instructions' backend configs name, in bytes (0: none), and the instruction naming it. */
uint64_t hlo_max_scoped_bytes(const HbmHlo__HloModuleProto *m, int64_t color,
                              const char **instruction);

#endif /* HBM_IMPORT_HLO_VMEM_H */
