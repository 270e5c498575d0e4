#pragma once
#include <memory>
#include "ops/ops.h"
namespace hymt { std::unique_ptr<Ops> CreateCpuOps(); }
