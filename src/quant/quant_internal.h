// Internal entry points of quant/ (one per format family), dispatched from quant.cc.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hymt::quant_internal {

void DequantizeFloat(DType t, const void* src, float* dst, int64_t n);
void QuantizeFloat(DType t, const float* src, void* dst, int64_t n);

}  // namespace hymt::quant_internal
