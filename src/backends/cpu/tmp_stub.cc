#include "backends/cpu/cpu_ops.h"
namespace hymt { std::unique_ptr<Ops> CreateCpuOps() { return CreateReferenceOps(); } }
