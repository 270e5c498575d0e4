// Run-time choice of the kernel table (see kernel_table.h).
#pragma once

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/kernel_table.h"

namespace hymt::cpu {

// The kernels of `isa`; requires IsaSupported(isa).
const KernelTable& GetKernels(Isa isa);

}  // namespace hymt::cpu
