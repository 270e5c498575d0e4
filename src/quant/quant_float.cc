// DequantizeRow / QuantizeRow / DotRef for the plain float types; the block formats live in the
// per-format files and are reached through the same entry points (see quant.cc).
#include "quant/quant_internal.h"

#include "core/half.h"

namespace hymt::quant_internal {

void DequantizeFloat(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
    }
    default: break;
  }
  HYMT_CHECK(false, "DequantizeFloat on ", DTypeName(t));
}

void QuantizeFloat(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    default: break;
  }
  HYMT_CHECK(false, "QuantizeFloat to ", DTypeName(t));
}

}  // namespace hymt::quant_internal
